//! The soak's world: a 3-server ensemble, twelve real agents (`h1`..`h8` with node locks and
//! semaphore leases, `w1`..`w4` with the role `web` and its controller), each reaching ZooKeeper through its
//! own three TCP proxies (one per server, so a session can be cut), a git repository and the
//! real `zkdeployment sync`, the lock oracle, and the journal every part writes what it did
//! and saw into.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use zookeeper_client::{Acls, CreateMode};

use super::oracle::{self, Verdict};
use super::payload;
use super::rng::Rng;
use super::support::agent::{now, Pm, Spawned, TestHost};
use super::support::ensemble::Ensemble;
use super::support::git::TestRepo;
use super::support::proxy::Proxy;
use super::support::rpm::FakeYum;
use super::tree::{Tree, ROLE};
use super::zk::Zk;

/// Hosts with node locks and semaphore leases (no role).
pub const PLAIN: usize = 8;
/// Hosts of the role.
pub const ROLE_HOSTS: usize = 4;
/// The agents' ZooKeeper session timeout (seconds): short, so that cuts often expire it.
pub const AGENT_SESSION: f64 = 4.0;
/// How long one `zkdeployment sync` may run before it counts as hung.
const SYNC_LIMIT: Duration = Duration::from_secs(90);

/// One host: its agent, its proxies, its fault knobs.
pub struct Slot {
    /// Config, run directory, fake yum.
    pub host: TestHost,
    /// True for a host of the role.
    pub role: bool,
    /// One proxy per server, in server order.
    pub proxies: Vec<Proxy>,
    /// The running agent (None while it is down).
    pub agent: tokio::sync::Mutex<Option<Spawned>>,
    /// Claimed by the fault acting on this host (one at a time).
    pub busy: AtomicBool,
    /// `$SOAK_DIR/knobs/<host>`.
    pub knobs: PathBuf,
    /// The `cat`s copying the agents' output to their logs (the nemesis's `log-stall` stops
    /// the last one), the running agent's last; earlier ones are reaped once they exit.
    pub relays: Mutex<Vec<std::process::Child>>,
}

/// What happened, for the checker and the summary line.
#[derive(Debug, Default)]
pub struct Journal {
    /// Agents killed with SIGKILL (with their scripts): (host, time they were dead).
    pub kills: Vec<(String, f64)>,
    /// Session cuts: (host, from, to).
    pub cuts: Vec<(String, f64, f64)>,
    /// Leader kills and whole-ensemble restarts: (from, to).
    pub ensemble: Vec<(f64, f64)>,
    /// Halts seen by the operator: (time seen, `/hosts` properties then).
    pub halts: Vec<(f64, serde_json::Map<String, Value>)>,
    /// Host versions seen on host nodes: (host, version, agent pid, time seen).
    pub samples: Vec<(String, String, u64, f64)>,
    /// Faults applied, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// `zkdeployment sync` outcomes, by kind.
    pub syncs: BTreeMap<String, u32>,
    /// What the syncs that failed (exit 1: ZooKeeper or git) said.
    pub sync_errors: Vec<String>,
    /// Halts resumed by the operator.
    pub resumes: u32,
    /// In-flight records left on nodes nobody deploys any more (at the end).
    pub stale_records: u32,
    /// Agents that exited 1 by themselves and were started again: (host, last line).
    pub restarts: Vec<(String, String)>,
    /// Holders the nemesis killed mid-step (`holder-kill`).
    pub holder_kills: Vec<HolderKill>,
    /// Mixed-fleet windows (`mixed-fleet`), while a host node of the original's agent (no
    /// `agent` property) was registered.
    pub mixed: Vec<MixedWindow>,
    /// Every agent process started: (host, pid, its log file).
    pub agent_logs: Vec<(String, u64, PathBuf)>,
    /// Pass starts (`Deploying version ...` in an agent's log): (host, agent pid, time), read
    /// from the agents' logs at the end (see `agent_log::pass_starts`).
    pub passes: Vec<(String, u64, f64)>,
    /// Node halts, node pauses and failure records (CONTRACT 15) seen under `/node-state`
    /// and `/node-pauses`, each once (see `budget.rs`).
    pub node_records: Vec<NodeRecord>,
    /// Every `zkdeployment pause PATH` and `resume PATH` the soak ran.
    pub node_commands: Vec<NodeCommand>,
    /// The cluster's versions as the operator saw them, in order: (version, null for a halt;
    /// first seen; last seen before it changed).
    pub versions: Vec<(Value, f64, f64)>,
    /// What the agents said they did with failures of nodes with a budget, read from their
    /// logs at the end (see `agent_log::outcomes`).
    pub outcomes: Vec<Outcome>,
    /// Everything found wrong while running.
    pub violations: Vec<String>,
}

/// A node halt, node pause or failure record, as first seen.
#[derive(Debug, Clone)]
pub struct NodeRecord {
    /// `halt`, `pause` or `fail`.
    pub kind: &'static str,
    /// Its node's name under `/node-state` or `/node-pauses`.
    pub name: String,
    /// The application node's path.
    pub path: String,
    /// The transaction that created it (a halt or pause made again is another record).
    pub czxid: i64,
    /// When it was created (the server's clock, the machine's one clock), in seconds.
    pub ctime: f64,
    /// When the soak first saw it.
    pub seen: f64,
    /// Its data.
    pub data: serde_json::Map<String, Value>,
    /// A failure record's place among the failed hosts of its node at its version in the
    /// listing it was first seen in (0 for a halt or pause).
    pub place: usize,
}

/// One `zkdeployment pause PATH` or `resume PATH` run.
#[derive(Debug, Clone)]
pub struct NodeCommand {
    /// `pause` or `resume`.
    pub what: &'static str,
    /// The application node.
    pub path: String,
    /// When it was started...
    pub start: f64,
    /// ... and when it had ended.
    pub end: f64,
    /// Its exit status.
    pub code: i32,
}

/// What an agent said it did with a failure of a node, from its log.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The host that failed (for a dead holder another host found: the dead holder's).
    pub host: String,
    /// The host whose agent said so.
    pub by: String,
    /// That agent process.
    pub pid: u64,
    /// When it said so.
    pub time: f64,
    /// The application node.
    pub path: String,
    /// The cluster version of the pass (its last `Deploying version` line; for a dead
    /// holder, the version its in-flight record names).
    pub version: String,
    /// `within` (quarantined: the failure within the budget) or `node-halt` (the node halted,
    /// beyond the budget or by a canary); `kept-quarantined`, `kept-halted`, `kept-paused`
    /// (the node left undone for that).
    pub kind: &'static str,
}

/// An agent the nemesis killed while one of its scripts (a deploy script or a health check)
/// ran under a node lock or lease: the next holder must halt naming it.
#[derive(Debug, Clone)]
pub struct HolderKill {
    /// The host.
    pub host: String,
    /// The paused run's id (as in the scripts' log).
    pub run: String,
    /// `deploy` or `health`.
    pub kind: String,
    /// Application path.
    pub path: String,
    /// Instance.
    pub n: String,
    /// `ZKDEPLOYMENT_VERSION`.
    pub version: String,
    /// When the agent was dead.
    pub time: f64,
}

/// A host node of the original's agent, registered by the nemesis for a while.
#[derive(Debug, Clone, Copy)]
pub struct MixedWindow {
    /// When its create was first sent (it may exist from then on)...
    pub begun: f64,
    /// ... when the create had surely succeeded (it exists from then on)...
    pub from: f64,
    /// ... when its delete was first sent (it exists until then)...
    pub to: f64,
    /// ... and when the delete had surely succeeded (it is gone from then on).
    pub gone: f64,
}

/// Everything the soak runs.
pub struct World {
    /// `knobs/`, `scripts.log`, the sync checkout, lock file and tombstone.
    pub dir: tempfile::TempDir,
    /// The servers.
    pub ensemble: Mutex<Ensemble>,
    /// Direct connection string with the soak's chroot.
    pub conn: String,
    /// The soak's own session.
    pub zk: Arc<Zk>,
    /// The hosts.
    pub slots: Vec<Slot>,
    /// The git repository the syncer reads.
    pub repo: Mutex<TestRepo>,
    /// Every commit made: (id, time made, tree), oldest first.
    pub commits: Mutex<Vec<(String, f64, Tree)>>,
    /// What happened.
    pub journal: Mutex<Journal>,
    /// The lock oracle's verdicts.
    pub verdicts: Arc<Mutex<Vec<Verdict>>>,
    /// The oracle's port.
    pub oracle_port: u16,
    /// Set when the faults and commits stop.
    pub calm: AtomicBool,
}

impl World {
    /// Starts everything but the agents, and syncs a first commit.
    pub async fn start(rng: &mut Rng) -> World {
        let ensemble = tokio::task::spawn_blocking(Ensemble::start).await.unwrap();
        let servers = ensemble.connect_string();
        let root = format!("/t-soak-{}", uuid::Uuid::new_v4().simple());
        {
            let client = super::support::connect(&servers).await;
            let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
            client.create(&root, b"", &open).await.unwrap();
            for path in ["/role-locks".to_string(), format!("/role-locks/{ROLE}")] {
                client
                    .create(&format!("{root}{path}"), b"", &open)
                    .await
                    .unwrap();
            }
        }
        let conn = format!("{servers}{root}");
        let zk = Arc::new(Zk::new(&conn).await);
        let shared = zk.client().await.unwrap();
        let dir = tempfile::Builder::new()
            .prefix("zkd-soak-")
            .tempdir()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let oracle_port = listener.local_addr().unwrap().port();
        let verdicts = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(oracle::serve(listener, zk.clone(), verdicts.clone()));
        let mut slots = Vec::new();
        for i in 0..PLAIN + ROLE_HOSTS {
            let role = i >= PLAIN;
            let id = if role {
                format!("w{}", i - PLAIN + 1)
            } else {
                format!("h{}", i + 1)
            };
            let proxies: Vec<Proxy> = ensemble
                .ports
                .iter()
                .map(|p| Proxy::start(&format!("127.0.0.1:{}", p.client)))
                .collect();
            let proxied = proxies
                .iter()
                .map(Proxy::address)
                .collect::<Vec<_>>()
                .join(",");
            let fake = FakeYum::new();
            payload::install(&fake);
            let host = TestHost {
                conn: format!("{proxied}{root}"),
                client: shared.clone(),
                name: format!("{id}.example.com"),
                role: role.then(|| ROLE.to_string()),
                dir: tempfile::tempdir().unwrap(),
                pm: Pm::Fake(fake),
                extra: format!("session-timeout = {AGENT_SESSION}\n"),
                id: id.clone(),
            };
            let knobs = dir.path().join("knobs").join(&id);
            std::fs::create_dir_all(&knobs).unwrap();
            slots.push(Slot {
                host,
                role,
                proxies,
                agent: tokio::sync::Mutex::new(None),
                busy: AtomicBool::new(false),
                knobs,
                relays: Mutex::new(Vec::new()),
            });
        }
        let world = World {
            dir,
            ensemble: Mutex::new(ensemble),
            conn,
            zk,
            slots,
            repo: Mutex::new(TestRepo::new()),
            commits: Mutex::new(Vec::new()),
            journal: Mutex::new(Journal::default()),
            verdicts,
            oracle_port,
            calm: AtomicBool::new(false),
        };
        let plain = world.plain_ids();
        world.commit(Tree::initial(&plain, rng));
        let run = world.sync(None, false).await;
        assert_eq!(run, "ok", "the first sync failed");
        world
    }

    /// The ids of the hosts without a role.
    pub fn plain_ids(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|s| !s.role)
            .map(|s| s.host.id.clone())
            .collect()
    }

    /// The scripts' log.
    pub fn scripts_log(&self) -> PathBuf {
        self.dir.path().join("scripts.log")
    }

    /// Commits `tree`; returns the commit id.
    pub fn commit(&self, tree: Tree) -> String {
        let files = tree.files();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        let id = self.repo.lock().unwrap().commit(&refs);
        self.commits.lock().unwrap().push((id.clone(), now(), tree));
        id
    }

    /// The last commit: (id, tree).
    pub fn last_commit(&self) -> (String, Tree) {
        let commits = self.commits.lock().unwrap();
        let (id, _, tree) = commits.last().cloned().unwrap();
        (id, tree)
    }

    /// Runs `zkdeployment sync` (`--force` if `force`; killed after `kill_after`, if given,
    /// when still running)
    /// and says how it ended: `ok`, `refused` (exit 3), `killed`, `finished-before-kill`,
    /// `hung`, or `exit N: LAST LINE` (1: ZooKeeper or git failed).
    pub async fn sync(&self, kill_after: Option<Duration>, force: bool) -> String {
        let d = self.dir.path();
        let url = self.repo.lock().unwrap().url();
        let mut cmd = tokio::process::Command::new(super::support::bin());
        cmd.arg("sync")
            .args(["-u", &url])
            .arg("-t")
            .arg(d.join("checkout"))
            .arg("--tombstone")
            .arg(d.join("tombstone"))
            .arg("--lock-file")
            .arg(d.join("sync.lock"))
            .args(["-z", &self.conn])
            .args(force.then_some("--force"))
            .env_remove("ZC_ZK_CONNECTION_STRING")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("run zkdeployment sync");
        if let Some(after) = kill_after {
            tokio::time::sleep(after).await;
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return "killed".into();
            }
        }
        match tokio::time::timeout(SYNC_LIMIT, child.wait_with_output()).await {
            Ok(Ok(out)) => match out.status.code() {
                Some(0) if kill_after.is_some() => "finished-before-kill".into(),
                Some(0) => "ok".into(),
                // Halted, hosts not converged, `/hosts-lock` busy.
                Some(3) => "refused".into(),
                other => {
                    let text = String::from_utf8_lossy(&out.stderr).into_owned();
                    let last = text.lines().last().unwrap_or("").to_string();
                    format!("exit {other:?}: {last}")
                }
            },
            Ok(Err(e)) => panic!("cannot wait for zkdeployment sync: {e}"),
            Err(_) => {
                self.violation(format!("zkdeployment sync still ran after {SYNC_LIMIT:?}"));
                "hung".into()
            }
        }
    }

    /// Starts the agent of slot `i` (which must be down).
    pub async fn start_agent(&self, i: usize) {
        let slot = &self.slots[i];
        let port = self.oracle_port.to_string();
        let dir = self.dir.path().display().to_string();
        let env = [("SOAK_DIR", dir.as_str()), ("SOAK_ORACLE", port.as_str())];
        let (agent, relay) = slot.host.spawn_relayed("agent", &[], &env);
        {
            let mut relays = slot.relays.lock().unwrap();
            relays.retain_mut(|r| matches!(r.try_wait(), Ok(None)));
            relays.push(relay);
        }
        if let Some(pid) = agent.child.id() {
            let log = (slot.host.id.clone(), u64::from(pid), agent.log.clone());
            self.journal.lock().unwrap().agent_logs.push(log);
        }
        *slot.agent.lock().await = Some(agent);
    }

    /// True while the agent of slot `i` runs. One that exited by itself is handled as
    /// systemd would (`Restart=on-failure`, `RestartPreventExitStatus=2`): an exit 1 (it
    /// could not start, e.g. its registration outlived a session) is counted and the caller
    /// starts it again; an exit 0 or 2, or death by a signal nobody sent, is a violation.
    pub async fn check_alive(&self, i: usize) -> bool {
        let mut agent = self.slots[i].agent.lock().await;
        let Some(a) = agent.as_mut() else {
            return false;
        };
        let status = match a.child.try_wait() {
            Ok(None) => return true,
            Ok(Some(status)) => status,
            Err(e) => panic!("cannot poll an agent: {e}"),
        };
        let output = a.output();
        let tail: Vec<&str> = output.lines().rev().take(4).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        if status.code() == Some(1) {
            let why = tail.last().copied().unwrap_or("").to_string();
            let mut journal = self.journal.lock().unwrap();
            journal.restarts.push((self.slots[i].host.id.clone(), why));
        } else {
            self.violation(format!(
                "the agent of {} exited by itself ({status}):\n{}",
                self.slots[i].host.id,
                tail.join("\n")
            ));
        }
        *agent = None;
        false
    }

    /// Waits (10 s at most) until the agent of slot `i` handles SIGTERM (its `SigCgt` mask in
    /// `/proc` has it): the agent listens from the moment its runtime starts (start-up
    /// included); in the few milliseconds before (exec, reading the config) the default
    /// action applies, as for any process, and systemd counts a stop there as clean.
    pub async fn wait_handles_sigterm(&self, i: usize) -> bool {
        let pid = match self.slots[i].agent.lock().await.as_ref() {
            Some(a) => a.child.id(),
            None => return false,
        };
        let Some(pid) = pid else {
            return false;
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let caught = status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                .unwrap_or(0);
            if caught & (1 << (nix::libc::SIGTERM - 1)) != 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// SIGKILLs the agent of slot `i` and its scripts (a dying host), if it runs.
    pub async fn kill_agent(&self, i: usize) -> bool {
        if !self.check_alive(i).await {
            return false;
        }
        let mut agent = self.slots[i].agent.lock().await;
        if let Some(mut a) = agent.take() {
            a.kill_tree().await;
            self.journal
                .lock()
                .unwrap()
                .kills
                .push((self.slots[i].host.id.clone(), now()));
        }
        true
    }

    /// SIGTERMs the agent of slot `i` and waits for it to exit 0 (a violation otherwise).
    pub async fn term_agent(&self, i: usize, limit: Duration) -> bool {
        if !self.check_alive(i).await || !self.wait_handles_sigterm(i).await {
            return false;
        }
        let mut agent = self.slots[i].agent.lock().await;
        let Some(mut a) = agent.take() else {
            return false;
        };
        a.terminate();
        match tokio::time::timeout(limit, a.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) if status.code() == Some(1) && !saw_signal(&a.output()) => {
                // It failed to start (exit 1, see `check_alive`) just as the signal came,
                // before it saw it: not an answer to SIGTERM.
                let output = a.output();
                let why = output.lines().last().unwrap_or("").to_string();
                let host = self.slots[i].host.id.clone();
                self.journal.lock().unwrap().restarts.push((host, why));
            }
            Ok(status) => self.violation(format!(
                "the agent of {} exited with {status:?} on SIGTERM:\n{}",
                self.slots[i].host.id,
                a.output()
                    .lines()
                    .rev()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            Err(_) => {
                self.violation(format!(
                    "the agent of {} still ran {limit:?} after SIGTERM",
                    self.slots[i].host.id
                ));
                a.kill_tree().await;
                self.journal
                    .lock()
                    .unwrap()
                    .kills
                    .push((self.slots[i].host.id.clone(), now()));
            }
        }
        true
    }

    /// Records a violation.
    pub fn violation(&self, what: String) {
        self.journal.lock().unwrap().violations.push(what);
    }

    /// Counts an applied fault.
    pub fn fault(&self, kind: &'static str) {
        *self.journal.lock().unwrap().faults.entry(kind).or_default() += 1;
    }

    /// Claims slot `i` for one fault; false if another fault holds it.
    pub fn claim(&self, i: usize) -> bool {
        !self.slots[i].busy.swap(true, Ordering::SeqCst)
    }

    /// Releases slot `i`.
    pub fn release(&self, i: usize) {
        self.slots[i].busy.store(false, Ordering::SeqCst);
    }
}

/// True if an agent's output shows that it saw SIGTERM (stopping, or stopped before it had
/// started).
fn saw_signal(output: &str) -> bool {
    output.contains("stopping") || output.contains("stopped before")
}
