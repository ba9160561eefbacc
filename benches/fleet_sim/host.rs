//! One virtual host of the fleet simulator: the agent's own code (`daemon::start`, then
//! `daemon::run_forever`: registration, the watch on `/hosts`, discovery through the index, the
//! plan, node locks and leases, host-node status, inventory and version writes, halts) in a
//! task of its own with its own ZooKeeper session, its own configuration, root and run
//! directory; only its commands are simulated ([`HostSim`], through
//! `zkdeployment::command::simulated`): yum keeps the installed versions in memory and takes
//! `yum_ms` per transaction, the deploy script takes `script_ms` (±50 %), fails at the rate
//! asked and writes the instance's marker as a real script does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use zkdeployment::command::{Cmd, Output, Simulator};

/// The environment variable giving every virtual host's `session-timeout`, seconds.
pub const SESSION_SECS_ENV: &str = "SIM_SESSION_SECS";

/// What every virtual host's commands are like; changed between phases.
pub struct Knobs {
    /// Mean deploy-script duration, milliseconds.
    pub script_ms: AtomicU64,
    /// yum transaction duration, milliseconds.
    pub yum_ms: AtomicU64,
    /// Deploy-script failure rate, in parts per million.
    pub fail_ppm: AtomicU64,
}

/// One deploy-script run.
#[derive(Debug, Clone)]
pub struct Run {
    /// Host index.
    pub host: usize,
    /// The application node.
    pub path: String,
    /// `ZKDEPLOYMENT_VERSION`: the cluster version the pass deploys.
    pub version: String,
    /// When it started and ended.
    pub start: Instant,
    /// `None` while it runs.
    pub end: Option<Instant>,
    /// Its exit code once ended.
    pub ok: bool,
}

/// Every script run of the fleet.
#[derive(Default)]
pub struct Journal {
    /// In start order.
    pub runs: Mutex<Vec<Run>>,
}

/// The simulated commands of one host.
pub struct HostSim {
    idx: usize,
    root: PathBuf,
    installed: Mutex<BTreeMap<String, String>>,
    knobs: Arc<Knobs>,
    journal: Arc<Journal>,
    seed: AtomicU64,
}

impl HostSim {
    fn random(&self) -> f64 {
        // xorshift64*: enough for durations and failures.
        let mut x = self.seed.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.seed.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn yum(&self, args: &[String]) -> (i32, String) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut installed = self.installed.lock().unwrap();
        match args.as_slice() {
            ["-q", "list", "installed", name] => match installed.get(*name) {
                Some(v) => (
                    0,
                    format!("Installed Packages\n{name}.noarch    {v}-1    @sim\n"),
                ),
                None => (1, "Error: No matching Packages to list\n".into()),
            },
            ["-y", "install" | "downgrade", spec] => {
                let (name, version) = spec.rsplit_once('-').unwrap_or((spec, "0"));
                let script = self.root.join("opt").join(name).join("bin");
                std::fs::create_dir_all(&script).unwrap();
                std::fs::write(script.join("zookeeper-deploy"), "simulated\n").unwrap();
                installed.insert(name.to_string(), version.to_string());
                (0, String::new())
            }
            ["-y", "remove", name] => {
                installed.remove(*name);
                let _ = std::fs::remove_dir_all(self.root.join("opt").join(name));
                (0, String::new())
            }
            _ => (0, String::new()),
        }
    }

    async fn script(&self, cmd: &Cmd) -> (i32, String) {
        let argv = &cmd.argv;
        let rpm = Path::new(&argv[0])
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut rest: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        let undeploy = rest.first() == Some(&"-u");
        if undeploy {
            rest.remove(0);
        }
        if rest.first() == Some(&"-r") {
            rest.drain(..2.min(rest.len()));
        }
        let (path, n) = (
            rest.first().copied().unwrap_or("-"),
            rest.get(1).copied().unwrap_or("0"),
        );
        let n: u32 = n.parse().unwrap_or(0);
        let marker = self
            .root
            .join("etc")
            .join(&rpm)
            .join(zkdeployment::agent::model::deployed_name(path, n));
        if undeploy {
            let _ = std::fs::remove_file(&marker);
            return (0, String::new());
        }
        let version = cmd
            .env
            .iter()
            .find(|(k, _)| k == "ZKDEPLOYMENT_VERSION")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let i = {
            let mut runs = self.journal.runs.lock().unwrap();
            runs.push(Run {
                host: self.idx,
                path: path.to_string(),
                version,
                start: Instant::now(),
                end: None,
                ok: false,
            });
            runs.len() - 1
        };
        let mean = self.knobs.script_ms.load(Ordering::Relaxed) as f64;
        tokio::time::sleep(Duration::from_secs_f64(
            mean * (0.5 + self.random()) / 1000.0,
        ))
        .await;
        let fail = self.random() * 1e6 < self.knobs.fail_ppm.load(Ordering::Relaxed) as f64;
        if !fail {
            std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
            std::fs::write(&marker, "").unwrap();
        }
        let mut runs = self.journal.runs.lock().unwrap();
        runs[i].end = Some(Instant::now());
        runs[i].ok = !fail;
        if fail {
            (1, "simulated failure\n".into())
        } else {
            (0, String::new())
        }
    }
}

impl Simulator for HostSim {
    fn run<'a>(
        &'a self,
        cmd: &'a Cmd,
    ) -> Pin<Box<dyn std::future::Future<Output = Output> + Send + 'a>> {
        Box::pin(async move {
            let started = Instant::now();
            let (code, tail) = if cmd.argv[0] == "sim-yum" {
                let changes = matches!(
                    cmd.argv.get(2).map(String::as_str),
                    Some("install" | "downgrade" | "remove")
                );
                if changes {
                    let ms = self.knobs.yum_ms.load(Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                self.yum(&cmd.argv[1..])
            } else if cmd.argv[0].ends_with("/zookeeper-deploy") {
                self.script(cmd).await
            } else {
                (127, format!("not simulated: {}\n", cmd.argv[0]))
            };
            Output {
                code,
                tail,
                duration: started.elapsed(),
            }
        })
    }
}

/// The id of host `i`.
pub fn host_id(i: usize) -> String {
    format!("h{i:05}")
}

/// The virtual hosts, on a few threads of their own: the agent's pass is not `Send` (the
/// agent runs it on one thread), so each thread runs a current-thread runtime and its hosts
/// as local tasks.
pub struct Fleet {
    /// Set to stop every agent.
    stop: Arc<AtomicBool>,
    /// One per host, to wake its agent so that it sees `stop`.
    wakes: Vec<Arc<Notify>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Hosts whose agent has started (registered).
    pub started: Arc<std::sync::atomic::AtomicUsize>,
}

/// What every host shares.
#[derive(Clone)]
pub struct Shared {
    pub dir: PathBuf,
    pub conn: String,
    pub knobs: Arc<Knobs>,
    pub journal: Arc<Journal>,
}

impl Fleet {
    /// Starts `hosts` virtual hosts on `threads` threads (host i on thread i % threads).
    pub fn start(hosts: usize, threads: usize, shared: &Shared) -> Fleet {
        let stop = Arc::new(AtomicBool::new(false));
        let wakes: Vec<Arc<Notify>> = (0..hosts).map(|_| Arc::new(Notify::new())).collect();
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads = (0..threads)
            .map(|t| {
                let mine: Vec<(usize, Arc<Notify>)> = (t..hosts)
                    .step_by(threads)
                    .map(|i| (i, wakes[i].clone()))
                    .collect();
                let (shared, stop, started) = (shared.clone(), stop.clone(), started.clone());
                std::thread::Builder::new()
                    .name(format!("hosts-{t}"))
                    .spawn(move || run_thread(mine, &shared, stop, started))
                    .unwrap()
            })
            .collect();
        Fleet {
            stop,
            wakes,
            threads,
            started,
        }
    }

    /// Stops every agent (each finishes its pass and closes its session) and waits.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in &self.wakes {
            w.notify_one();
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// One thread's hosts, started 50 at a time, run until `stop`.
fn run_thread(
    hosts: Vec<(usize, Arc<Notify>)>,
    shared: &Shared,
    stop: Arc<AtomicBool>,
    started: Arc<std::sync::atomic::AtomicUsize>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut tasks = Vec::new();
        for batch in hosts.chunks(50) {
            let agents = futures::future::join_all(
                batch
                    .iter()
                    .map(|(i, _)| start_agent(*i, shared, stop.clone())),
            )
            .await;
            for ((agent, sim), (_, wake)) in agents.into_iter().zip(batch) {
                started.fetch_add(1, Ordering::SeqCst);
                let wake = wake.clone();
                // With `SIM_LOG`, every line of a host's agent names it.
                let span = tracing::info_span!("host", id = %agent.host.id);
                let run = async move {
                    let mut agent = agent;
                    if let Err(e) = zkdeployment::agent::daemon::run_forever(&mut agent, wake).await
                    {
                        eprintln!("agent {}: {e}", agent.host.id);
                    }
                    zkdeployment::agent::daemon::close(agent).await;
                };
                tasks.push(tokio::task::spawn_local(zkdeployment::command::simulated(
                    sim,
                    tracing::Instrument::instrument(run, span),
                )));
            }
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

/// The configuration file of host `i`.
pub fn config_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(host_id(i)).join("agent.cfg")
}

/// Writes host `i`'s configuration and starts its agent's session (the agent's own
/// `daemon::start`: connect, register); gives the agent and its simulated commands.
async fn start_agent(
    i: usize,
    shared: &Shared,
    stop: Arc<AtomicBool>,
) -> (zkdeployment::agent::session::Agent, Arc<dyn Simulator>) {
    let home = shared.dir.join(host_id(i));
    let (root, run) = (home.join("root"), home.join("run"));
    std::fs::create_dir_all(&root).unwrap();
    let config = config_path(&shared.dir, i);
    let text = format!(
        "[zkdeployment]\nhost-id = {id}\nhost-name = {id}.example.com\nrun-directory = {}\n\
         root = {}\nyum = sim-yum\nzookeeper = {}\nsession-timeout = {}\n",
        run.display(),
        root.display(),
        shared.conn,
        std::env::var(SESSION_SECS_ENV).unwrap_or_else(|_| "10".into()),
        id = host_id(i),
    );
    std::fs::write(&config, text).unwrap();
    let sim: Arc<dyn Simulator> = Arc::new(HostSim {
        idx: i,
        root,
        installed: Mutex::new(BTreeMap::new()),
        knobs: shared.knobs.clone(),
        journal: shared.journal.clone(),
        seed: AtomicU64::new(
            0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9),
        ),
    });
    // A start that fails (the ensemble busy or electing) is tried again after a back-off, as
    // systemd restarts the agent's service.
    let mut attempt = 0;
    loop {
        let cfg = zkdeployment::config::load(&config).expect("the virtual host's configuration");
        match zkdeployment::agent::daemon::start(cfg, shared.conn.clone(), stop.clone(), false)
            .await
        {
            Ok(agent) => return (agent, sim),
            Err(e) if attempt < START_TRIES => {
                attempt += 1;
                eprintln!("{}: {e}; starting again", host_id(i));
                tokio::time::sleep(Duration::from_secs(attempt.min(10))).await;
            }
            Err(e) => panic!("{}: {e}", host_id(i)),
        }
    }
}

/// How many times a virtual host's agent is started again after a failed start.
const START_TRIES: u64 = 30;
