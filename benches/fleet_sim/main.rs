//! The fleet simulator: N virtual hosts in one process, each the agent's own code with its own
//! ZooKeeper session (`host.rs`), against a real 3-server ensemble the bench starts (Debian's
//! ZooKeeper, `maxClientCnxns=0`, heap `--heap`), with trees synced by the real `zkdeployment
//! sync` from a real git repository. Only yum and the deploy scripts are simulated durations.
//!
//! `cargo bench --bench fleet_sim -- --hosts N [--script-ms 1000] [--yum-ms 200]
//! [--fail-rate 0] [--idle-secs 60] [--limit-secs 3600] [--heap 2g]
//! [--zk-tick-ms 500] [--zk-sync-limit 2] [--session-secs 10]
//! [--scenarios idle,rollout,many,leader,commands]`
//!
//! The ensemble's `tickTime` and `syncLimit` default to the fault tests' quick fail-over
//! (500 ms, 2: a follower more than 1 s behind the leader is dropped); `--zk-tick-ms 2000
//! --zk-sync-limit 5` is ZooKeeper's sample configuration (10 s). `--session-secs` is every
//! virtual host's `session-timeout` (10 s, the agent's default; the servers allow at most 20
//! ticks).
//!
//! Scenarios (each prints one JSON line and a table):
//! 1. `idle`: the fleet converged and idle: ensemble CPU, memory and requests per second.
//! 2. `rollout`: a commit changing `/sim/all` (every host, `max-parallel = '5%'`, `canary = 2`):
//!    commit → first script, → 50 / 90 / 100 % of hosts done; requests and bytes per host,
//!    ensemble CPU, the simulator's own CPU (every host's agent), peak outstanding requests,
//!    watch notifications, the gap from a script's end to the next script's start.
//! 3. `many`: a commit changing every `/sim/gNN`: 100 applications of 100 hosts each at 10,000
//!    hosts (one per 100 hosts below that: every host has two deployments at any N).
//! 4. `leader`: scenario 2 with the ensemble's leader killed at 50 %: time until every
//!    session is back, false halts, hosts that deployed twice.
//! 5. `commands`: `status`, `status --json`, `plan --files` of a one-line commit and one
//!    `monitor`, as processes: wall time and peak memory.

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "../fleet/mod.rs"]
mod fleet;
mod host;
mod measure;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use host::{Journal, Knobs};
use measure::{Figures, Server};
use serde_json::json;
use support::ensemble::Ensemble;
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};

/// The command line.
#[derive(Debug, Clone)]
struct Args {
    hosts: usize,
    script_ms: u64,
    yum_ms: u64,
    fail_rate: f64,
    idle_secs: u64,
    limit_secs: u64,
    heap: String,
    zk_tick_ms: u32,
    zk_sync_limit: u32,
    session_secs: u64,
    scenarios: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        hosts: 200,
        script_ms: 1000,
        yum_ms: 200,
        fail_rate: 0.0,
        idle_secs: 60,
        limit_secs: 3600,
        heap: "2g".into(),
        zk_tick_ms: 500,
        zk_sync_limit: 2,
        session_secs: 10,
        scenarios: ["idle", "rollout", "many", "leader", "commands"]
            .map(String::from)
            .to_vec(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        match flag.as_str() {
            "--hosts" => a.hosts = value().parse().expect("--hosts N"),
            "--script-ms" => a.script_ms = value().parse().expect("--script-ms MS"),
            "--yum-ms" => a.yum_ms = value().parse().expect("--yum-ms MS"),
            "--fail-rate" => a.fail_rate = value().parse().expect("--fail-rate P"),
            "--idle-secs" => a.idle_secs = value().parse().expect("--idle-secs S"),
            "--limit-secs" => a.limit_secs = value().parse().expect("--limit-secs S"),
            "--heap" => a.heap = value(),
            "--zk-tick-ms" => a.zk_tick_ms = value().parse().expect("--zk-tick-ms MS"),
            "--zk-sync-limit" => a.zk_sync_limit = value().parse().expect("--zk-sync-limit N"),
            "--session-secs" => a.session_secs = value().parse().expect("--session-secs S"),
            "--scenarios" => a.scenarios = value().split(',').map(String::from).collect(),
            // cargo bench passes --bench.
            _ => {}
        }
    }
    a
}

/// Applications `/sim/gNN` of 100 hosts each: one per 100 hosts, 100 at most.
fn groups(hosts: usize) -> usize {
    hosts.div_ceil(100).min(100)
}

/// The tree: `/sim/all` on every host, and [`groups`] applications `/sim/gNN` of 100 hosts
/// each (hosts `NN*100` to `NN*100 + 99`, so that every host has two deployments at any N).
fn tree(hosts: usize, all: &str, groups_version: &str) -> String {
    let mut t = format!(
        "/sim\n  /all : simall\n    version = '{all}'\n    max-parallel = '5%'\n    canary = 2\n    /deploy\n"
    );
    for i in 0..hosts {
        t.push_str(&format!("      /{}\n", host::host_id(i)));
    }
    for g in 0..groups(hosts) {
        t.push_str(&format!(
            "  /g{g:02} : simg{g:02}\n    version = '{groups_version}'\n    max-parallel = '10%'\n    /deploy\n"
        ));
        for i in (g * 100..(g + 1) * 100).filter(|i| *i < hosts) {
            t.push_str(&format!("      /{}\n", host::host_id(i)));
        }
    }
    t
}

/// The bench's world.
struct Sim {
    args: Args,
    ensemble: Ensemble,
    conn: String,
    repo: TestRepo,
    work: tempfile::TempDir,
    knobs: Arc<Knobs>,
    journal: Arc<Journal>,
    fleet: Option<host::Fleet>,
    client: zkdeployment::zk::Client,
    /// What must not happen (hosts never done, double deploys, false halts, a command
    /// failing): the bench exits 1 naming each.
    problems: std::sync::Mutex<Vec<String>>,
}

impl Sim {
    /// The longest wait for every host to be done (`--limit-secs`): a scenario still
    /// unfinished then reports its pending hosts (and the bench exits 1).
    fn limit(&self) -> Duration {
        Duration::from_secs(self.args.limit_secs)
    }

    fn check(&self, line: &serde_json::Value) {
        let scenario = line["scenario"].as_str().unwrap_or("?").to_string();
        let mut problems = self.problems.lock().unwrap();
        for key in ["pending", "double_deploys", "false_halts"] {
            if line[key].as_u64().is_some_and(|n| n > 0) {
                problems.push(format!("{scenario}: {key} = {}", line[key]));
            }
        }
        let code = &line["exit"];
        let bad_exit = match line["command"].as_str() {
            Some("plan") => code != 10,
            Some(_) => code != 0,
            None => false,
        };
        if bad_exit {
            problems.push(format!("{scenario}: {} exited {code}", line["command"]));
        }
    }
}

impl Sim {
    /// Commits the tree and syncs it; the cluster version (the revision) and the sync's wall time.
    fn commit_and_sync(&self, all: &str, groups: &str) -> (String, f64) {
        let revision = self
            .repo
            .commit(&[("sim.zk", &tree(self.args.hosts, all, groups))]);
        let dir = self.work.path();
        let (checkout, tombstone, lock) = (dir.join("co"), dir.join("ts"), dir.join("lk"));
        let paths = SyncPaths {
            checkout: &checkout,
            tombstone: &tombstone,
            lock: &lock,
        };
        let args = sync_args(&self.repo.url(), &paths, &self.conn, &["--force"]);
        let clock = Instant::now();
        let run = support::run(&as_strs(&args));
        assert_eq!(run.code, 0, "sync failed: {run}");
        (revision, clock.elapsed().as_secs_f64())
    }

    /// Waits until every host's status file says `done` at `version` (`limit` at most).
    async fn all_done(&self, version: &str, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let pending = (0..self.args.hosts)
                .filter(|i| !measure::host_done(self.work.path(), *i, version))
                .count();
            if pending == 0 || Instant::now() > deadline {
                return pending;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn servers(&self) -> Vec<Server> {
        measure::servers(&self.ensemble)
    }
}

fn main() {
    let args = args();
    // `SIM_LOG=FILE`: every agent's log, one file (lines name hosts where the agent does).
    if let Ok(path) = std::env::var("SIM_LOG") {
        let file = std::fs::File::create(path).expect("SIM_LOG");
        tracing_subscriber::fmt()
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .with_thread_names(true)
            .init();
    }
    // The servers' heap: every JVM of the ensemble starts with it.
    std::env::set_var("ZK_HEAP", &args.heap);
    std::env::set_var("ZK_TICK_MS", args.zk_tick_ms.to_string());
    std::env::set_var("ZK_SYNC_LIMIT", args.zk_sync_limit.to_string());
    // Every virtual host's `session-timeout` (the servers cap it at 20 ticks).
    std::env::set_var(host::SESSION_SECS_ENV, args.session_secs.to_string());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(args));
}

async fn run(args: Args) {
    let clock = Instant::now();
    let ensemble = tokio::task::spawn_blocking(Ensemble::start).await.unwrap();
    let conn = ensemble.connect_string();
    let client = support::connect(&conn).await;
    let mut sim = Sim {
        args: args.clone(),
        ensemble,
        conn,
        repo: TestRepo::new(),
        work: tempfile::tempdir().unwrap(),
        knobs: Arc::new(Knobs {
            script_ms: 0.into(),
            yum_ms: 0.into(),
            fail_ppm: 0.into(),
        }),
        journal: Arc::default(),
        fleet: None,
        client,
        problems: Default::default(),
    };
    let (r0, _) = sim.commit_and_sync("1.0", "1.0");
    start_hosts(&mut sim).await;
    let pending = sim.all_done(&r0, sim.limit()).await;
    assert_eq!(
        pending, 0,
        "{pending} hosts never converged on the first revision"
    );
    eprintln!(
        "fleet_sim: {} hosts converged in {:.1} s (heap {}, tickTime {} ms, syncLimit {}, session {} s, machine: {} cores)",
        args.hosts,
        clock.elapsed().as_secs_f64(),
        args.heap,
        args.zk_tick_ms,
        args.zk_sync_limit,
        args.session_secs,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    sim.knobs.script_ms.store(args.script_ms, Ordering::Relaxed);
    sim.knobs.yum_ms.store(args.yum_ms, Ordering::Relaxed);
    sim.knobs
        .fail_ppm
        .store((args.fail_rate * 1e6) as u64, Ordering::Relaxed);
    let mut version = 1;
    for scenario in args.scenarios.clone() {
        match scenario.as_str() {
            "idle" => idle(&sim).await,
            "rollout" | "leader" => {
                version += 1;
                rollout(&mut sim, version, scenario == "leader").await;
            }
            "many" => {
                version += 1;
                many(&sim, version).await;
            }
            "commands" => commands(&sim).await,
            other => panic!("unknown scenario {other}"),
        }
    }
    stop_hosts(&mut sim).await;
    let problems = sim.problems.lock().unwrap();
    if !problems.is_empty() {
        eprintln!("fleet_sim: FAILED\n{}", problems.join("\n"));
        std::process::exit(1);
    }
}

/// Starts every virtual host (on as many threads as the machine has cores) and waits until
/// each has registered.
async fn start_hosts(sim: &mut Sim) {
    let shared = host::Shared {
        dir: sim.work.path().join("hosts"),
        conn: sim.conn.clone(),
        knobs: sim.knobs.clone(),
        journal: sim.journal.clone(),
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let fleet = host::Fleet::start(sim.args.hosts, threads, &shared);
    while fleet.started.load(Ordering::SeqCst) < sim.args.hosts {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sim.fleet = Some(fleet);
}

async fn stop_hosts(sim: &mut Sim) {
    if let Some(fleet) = sim.fleet.take() {
        let stopped = tokio::task::spawn_blocking(move || fleet.stop());
        if tokio::time::timeout(Duration::from_secs(60), stopped)
            .await
            .is_err()
        {
            sim.problems
                .lock()
                .unwrap()
                .push("the agents did not stop within 60 s".into());
        }
    }
}

/// Scenario 1: the converged fleet, idle.
async fn idle(sim: &Sim) {
    let servers = sim.servers();
    let before = Figures::read(&servers);
    tokio::time::sleep(Duration::from_secs(sim.args.idle_secs)).await;
    let after = Figures::read(&servers);
    let d = after.since(&before);
    let minutes = sim.args.idle_secs as f64 / 60.0;
    let line = json!({
        "scenario": "idle", "hosts": sim.args.hosts, "seconds": sim.args.idle_secs,
        "server_cpu_s_per_min": d.cpu / minutes,
        "requests_per_s": d.packets_received as f64 / sim.args.idle_secs as f64,
        "server_rss_mb": after.rss_mb,
        "connections": after.connections,
    });
    println!("{line}");
    println!(
        "idle {} hosts: {:.1} server CPU s/min, {:.0} requests/s, servers' RSS {:?} MB",
        sim.args.hosts,
        d.cpu / minutes,
        d.packets_received as f64 / sim.args.idle_secs as f64,
        after.rss_mb
    );
}

/// Scenarios 2 and 4: a commit changing `/sim/all` (with the leader killed at 50 %).
async fn rollout(sim: &mut Sim, version: u32, kill_leader: bool) {
    let servers = sim.servers();
    let before = Figures::read(&servers);
    let sampler = measure::Sampler::start(&sim.client, servers.clone());
    let start = Instant::now();
    let (revision, sync_s) = sim.commit_and_sync(&format!("{version}.0"), "1.0");
    // The sync's own requests, apart from the agents' (which begin with its last write).
    let synced = Figures::read(&servers);
    let sim_cpu = fleet::cpu_seconds(std::process::id());
    let mut back_s = None;
    if kill_leader {
        back_s = Some(kill_at_half(sim, &revision, "/sim/all").await);
    }
    let pending = sim.all_done(&revision, sim.limit()).await;
    let sampled = sampler.stop().await;
    let sim_cpu = fleet::cpu_seconds(std::process::id()) - sim_cpu;
    let after = Figures::read(&sim.servers());
    let d = after.since(&synced);
    let by_sync = synced.since(&before);
    let runs = measure::runs_of(&sim.journal.runs, &revision, "/sim/all", start);
    let n = sim.args.hosts as f64;
    let mut line = json!({
        "scenario": if kill_leader { "leader" } else { "rollout" },
        "hosts": sim.args.hosts, "script_ms": sim.args.script_ms, "sync_s": sync_s,
        "pending": pending,
        "first_script_s": runs.first_start, "p50_done_s": runs.done_at(0.5),
        "p90_done_s": runs.done_at(0.9), "all_done_s": runs.done_at(1.0),
        "requests_per_host": d.packets_received as f64 / n,
        "requests_per_host_by_namespace": d.per_host(sim.args.hosts),
        "bytes_in_per_host": d.bytes_received as f64 / n,
        "bytes_out_per_host": d.bytes_sent as f64 / n,
        "sync_requests": by_sync.packets_received, "sync_server_cpu_s": by_sync.cpu,
        "server_cpu_s": d.cpu, "sim_cpu_s": sim_cpu, "peak_outstanding": sampled.peak_outstanding,
        "watch_notifications": d.watch_fired,
        "gap_ms": runs.gaps_ms(), "double_deploys": runs.doubles,
        "false_halts": sampled.halts,
    });
    if let Some(back) = back_s {
        line["sessions_back_s"] = json!(back);
    }
    println!("{line}");
    println!("{}", measure::table(&line));
    sim.check(&line);
}

/// Scenario 3: a commit changing 100 applications of 100 hosts each.
async fn many(sim: &Sim, version: u32) {
    let servers = sim.servers();
    let before = Figures::read(&servers);
    let start = Instant::now();
    let (revision, sync_s) = sim.commit_and_sync("2.0", &format!("{version}.0"));
    let synced = Figures::read(&servers);
    let sim_cpu = fleet::cpu_seconds(std::process::id());
    let pending = sim.all_done(&revision, sim.limit()).await;
    let sim_cpu = fleet::cpu_seconds(std::process::id()) - sim_cpu;
    let after = Figures::read(&sim.servers());
    let d = after.since(&synced);
    let by_sync = synced.since(&before);
    let runs = measure::runs_of(&sim.journal.runs, &revision, "/sim/g", start);
    let line = json!({
        "scenario": "many", "hosts": sim.args.hosts, "sync_s": sync_s, "pending": pending,
        "first_script_s": runs.first_start, "all_done_s": runs.done_at(1.0),
        "scripts": runs.count, "requests_per_host": d.packets_received as f64 / sim.args.hosts as f64,
        "requests_per_host_by_namespace": d.per_host(sim.args.hosts),
        "sync_requests": by_sync.packets_received, "sync_server_cpu_s": by_sync.cpu,
        "server_cpu_s": d.cpu, "sim_cpu_s": sim_cpu, "double_deploys": runs.doubles,
    });
    println!("{line}");
    println!("{}", measure::table(&line));
    sim.check(&line);
}

/// Kills the leader once half the hosts have run `path` at `revision`, starts it again 2 s
/// later; gives the seconds from the kill until every host's session is connected again.
async fn kill_at_half(sim: &mut Sim, revision: &str, path: &str) -> f64 {
    let half = sim.args.hosts / 2;
    loop {
        let ok = sim
            .journal
            .runs
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.ok && r.version == revision && r.path == path)
            .count();
        if ok >= half {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader = sim.ensemble.leader();
    sim.ensemble.kill(leader);
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.ensemble.restart(leader);
    // Every host's session (and the bench's own client) connected again.
    loop {
        let connections: u64 = sim.servers().iter().map(|s| s.connections()).sum();
        if connections as usize > sim.args.hosts || killed.elapsed() > Duration::from_secs(300) {
            return killed.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Scenario 5: the operator's commands against the N-host cluster.
async fn commands(sim: &Sim) {
    let dir = sim.work.path();
    let file = dir.join("plan-sim.zk");
    std::fs::write(
        &file,
        tree(sim.args.hosts, "2.0", "9.0").replacen("version = '9.0'", "version = '9.1'", 1),
    )
    .unwrap();
    let file = file.display().to_string();
    let config = host::config_path(&sim.work.path().join("hosts"), 0)
        .display()
        .to_string();
    let conn = sim.conn.as_str();
    let cases: [(&str, Vec<&str>); 4] = [
        ("status", vec!["status", "-z", conn]),
        ("status --json", vec!["status", "--json", "-z", conn]),
        ("plan", vec!["plan", "--files", &file, "-z", conn]),
        ("monitor", vec!["monitor", &config]),
    ];
    for (name, argv) in cases {
        let (seconds, peak_mb, code) = measure::timed(&support::bin(), &argv);
        let line = json!({"scenario": "commands", "hosts": sim.args.hosts, "command": name,
                          "seconds": seconds, "peak_mb": peak_mb, "exit": code});
        println!("{line}");
        println!("{name}: {seconds:.2} s, {peak_mb:.0} MB peak, exit {code}");
        sim.check(&line);
    }
    let _ = Path::new(&file);
}
