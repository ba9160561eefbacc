//! The nemesis: random faults, several at once, until the deadline. A fault counts once it
//! has been applied and healed (a killed server restarted, a cut proxy restored, a killed
//! agent started again, a hung script ended). Per-host faults take the host's slot, so one
//! host suffers one of them at a time; server faults take the ensemble, one at a time.
//!
//! Kinds: `session-cut` (the host's three proxies drop every connection for 0.3–7 s, so its
//! 4 s session often expires), `agent-kill` (SIGKILL to the agent and its scripts, then a
//! restart), `agent-term` (SIGTERM, must exit 0, then a restart), `leader-kill` (SIGKILL to
//! the leader, restarted 0.5–4 s later), `ensemble-restart` (all three killed, restarted
//! 0.2–2 s later), `script-fail`, `script-hang` (ended by the deadline: SIGTERM, a failure,
//! or SIGUSR1, a late success), `script-daemon` (see `payload.rs`). The syncer adds
//! `sync-kill` (`actors.rs`).
//!
//! Aimed at the agent's output and log (none may cost a session or halt anything):
//! `script-chatty` (a deploy script prints 8 MiB), `script-daemon-writes` (a script leaves a
//! daemon writing to its output without end: it must be cut off, see `payload.rs`) and
//! `log-stall` (the reader of the agent's stderr, a `cat`, is stopped for 4.5–9 s, longer
//! than the session). Each holds its host until the output it made is over, so that no
//! flood meets a stalled reader (the log then drops lines, which the checker reads).
//!
//! Aimed at rolling deploys (leases, canaries, health checks): `holder-kill` (a host without
//! a role pauses its next deploy script or health check, which runs under its node lock or
//! lease, and its agent is SIGKILLed there: the next holder must halt naming it, see
//! `checker.rs`), `holder-cut` (the same pause, then the host's session is cut for longer than
//! it lives, so its lease or lock goes while its script still runs), `health-slow` (a check
//! passes on its second try, 2 s later), `health-never` (a check fails past the node's
//! `health-deadline`: the step fails and halts the cluster), `health-hang` (a check never
//! returns: the agent kills it at the deadline, and halts).
//!
//! Aimed at failure budgets, node halts and pauses (CONTRACT 15, `budget.rs`), one of each at
//! a time: `budget-fail` (the next deploy run of a node with a budget fails on 1 to F + 2 of
//! its hosts: some are quarantined, the one beyond the budget halts the node or the cluster)
//! and `node-pause` (`zkdeployment pause PATH` for 1–5 s, then `resume PATH`).
//!
//! And `mixed-fleet` (CONTRACT section 11, the mixed-fleet rule): a host node of the
//! original's agent (no `agent` property, as `tests/it/rollout.rs` makes one) is registered
//! for 6–12 s, its `version` following the cluster's as a converged original agent's would
//! (so that syncs are not refused for it), then removed; the window goes into the journal,
//! and the checker requires that no pass our agents began in it entered a node through a
//! lease (`checker.rs`). One window at a time.
//!
//! The budget: faults are counted once applied; a run whose budget ends with fewer than its
//! target applied ([`MIN_FAULTS`] for the default budget, in proportion for others) goes on
//! (at most [`MORE_LIMIT`] longer) until that many are, so the default budget always applies
//! at least 200 (`main.rs` flags a run that did not).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use zkdeployment::zk::decode;
use zookeeper_client::{Acls, CreateMode};

use super::rng::Rng;
use super::support::agent::now;
use super::world::{HolderKill, MixedWindow, World, PLAIN};

/// The kinds and their weights.
const KINDS: [(&str, f64); 19] = [
    ("session-cut", 3.0),
    ("agent-kill", 2.0),
    ("agent-term", 1.5),
    ("leader-kill", 0.8),
    ("ensemble-restart", 0.4),
    ("script-fail", 1.2),
    ("script-hang", 1.0),
    ("script-daemon", 1.0),
    ("holder-kill", 1.4),
    ("holder-cut", 0.8),
    ("health-slow", 0.8),
    ("health-never", 0.5),
    ("health-hang", 0.4),
    ("mixed-fleet", 0.1),
    ("script-chatty", 0.5),
    ("script-daemon-writes", 0.5),
    ("log-stall", 0.6),
    ("budget-fail", 2.5),
    ("node-pause", 0.5),
];

/// The kinds that act on a host without a role (a node lock or lease holder).
const PLAIN_ONLY: [&str; 2] = ["holder-kill", "holder-cut"];

/// Faults applied a run of the default budget reaches before it stops (given
/// [`MORE_LIMIT`] more; other budgets in proportion, see `main.rs`, which flags a default
/// run below it).
pub const MIN_FAULTS: u32 = 200;
/// How much longer than its budget a run may go on to reach its target (about 1.7 faults
/// are applied a second, so this covers a run 50 short).
const MORE_LIMIT: Duration = Duration::from_secs(30);

/// How long a whole-run's faults may take to heal after the deadline.
const HEAL_LIMIT: Duration = Duration::from_secs(180);

/// Applies faults until `until` (and on, [`MORE_LIMIT`] at most, until `target` faults are
/// applied), then waits for every fault to heal.
pub async fn run(world: Arc<World>, mut rng: Rng, until: Instant, target: u32) {
    let ensemble_busy = Arc::new(AtomicBool::new(false));
    let mixed_busy = Arc::new(AtomicBool::new(false));
    let pause_busy = Arc::new(AtomicBool::new(false));
    let budget_busy = Arc::new(AtomicBool::new(false));
    let weights: Vec<f64> = KINDS.iter().map(|(_, w)| *w).collect();
    let mut tasks = tokio::task::JoinSet::new();
    // The budget is time; a run whose faults took long to heal (held slots) or were not
    // taken (a knob no run took) gets up to MORE_LIMIT more until `target` are applied.
    // Faults under way then still count when they heal, but are not counted on.
    let more = until + MORE_LIMIT;
    let short = || world.journal.lock().unwrap().faults.values().sum::<u32>() < target;
    while Instant::now() < until || (Instant::now() < more && short()) {
        tokio::time::sleep(Duration::from_secs_f64(rng.between(0.03, 0.25))).await;
        let kind = KINDS[rng.weighted(&weights)].0;
        let r = rng.fork();
        let w = world.clone();
        if kind == "budget-fail" {
            if budget_busy.swap(true, Ordering::SeqCst) {
                continue;
            }
            let busy = budget_busy.clone();
            tasks.spawn(async move {
                let mut r = r;
                if super::budget::budget_fail(&w, &mut r).await {
                    w.fault(kind);
                }
                busy.store(false, Ordering::SeqCst);
            });
        } else if kind == "node-pause" {
            if pause_busy.swap(true, Ordering::SeqCst) {
                continue;
            }
            let busy = pause_busy.clone();
            tasks.spawn(async move {
                let mut r = r;
                if super::budget::node_pause(&w, &mut r).await {
                    w.fault(kind);
                }
                busy.store(false, Ordering::SeqCst);
            });
        } else if kind == "mixed-fleet" {
            if mixed_busy.swap(true, Ordering::SeqCst) {
                continue;
            }
            let busy = mixed_busy.clone();
            tasks.spawn(async move {
                mixed_fleet(&w, r).await;
                busy.store(false, Ordering::SeqCst);
            });
        } else if kind == "leader-kill" || kind == "ensemble-restart" {
            if ensemble_busy.swap(true, Ordering::SeqCst) {
                continue;
            }
            let busy = ensemble_busy.clone();
            tasks.spawn(async move {
                server_fault(&w, kind, r).await;
                busy.store(false, Ordering::SeqCst);
            });
        } else {
            // The first free host from a random one on (none free: skip this round).
            let among = if PLAIN_ONLY.contains(&kind) {
                PLAIN
            } else {
                world.slots.len()
            };
            let first = rng.below(among);
            let Some(i) = (0..among)
                .map(|k| (first + k) % among)
                .find(|i| world.claim(*i))
            else {
                continue;
            };
            tasks.spawn(async move {
                host_fault(&w, kind, i, r).await;
                w.release(i);
            });
        }
    }
    let healed = tokio::time::timeout(HEAL_LIMIT, async {
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done {
                world.violation(format!("a fault task failed: {e}"));
            }
        }
    })
    .await;
    // Knobs no run took (the tasks that set them are done).
    super::budget::clear_knobs(&world);
    if healed.is_err() {
        world.violation(format!(
            "faults still healing {HEAL_LIMIT:?} after the deadline"
        ));
    }
}

async fn server_fault(world: &Arc<World>, kind: &'static str, mut rng: Rng) {
    let start = now();
    let w = world.clone();
    let killed = tokio::task::spawn_blocking(move || {
        let mut e = w.ensemble.lock().unwrap();
        if kind == "leader-kill" {
            let leader = e.leader();
            e.kill(leader);
        } else {
            for i in 0..3 {
                e.kill(i);
            }
        }
    })
    .await;
    let down = if kind == "leader-kill" {
        (0.5, 4.0)
    } else {
        (0.2, 2.0)
    };
    tokio::time::sleep(Duration::from_secs_f64(rng.between(down.0, down.1))).await;
    let w = world.clone();
    let back =
        tokio::task::spawn_blocking(move || w.ensemble.lock().unwrap().start_stopped()).await;
    match (killed, back) {
        (Ok(()), Ok(())) => {
            world.journal.lock().unwrap().ensemble.push((start, now()));
            world.fault(kind);
        }
        (k, b) => world.violation(format!("{kind}: the ensemble failed: {k:?} {b:?}")),
    }
}

async fn host_fault(world: &World, kind: &'static str, i: usize, mut rng: Rng) {
    let slot = &world.slots[i];
    match kind {
        "session-cut" => {
            let start = now();
            for p in &slot.proxies {
                p.cut();
            }
            tokio::time::sleep(Duration::from_secs_f64(rng.between(0.3, 7.0))).await;
            for p in &slot.proxies {
                p.restore();
            }
            let cut = (slot.host.id.clone(), start, now());
            world.journal.lock().unwrap().cuts.push(cut);
            world.fault(kind);
        }
        "agent-kill" | "agent-term" => {
            let applied = if kind == "agent-kill" {
                world.kill_agent(i).await
            } else {
                world.term_agent(i, Duration::from_secs(60)).await
            };
            tokio::time::sleep(Duration::from_secs_f64(rng.between(0.0, 1.5))).await;
            if !world.check_alive(i).await {
                world.start_agent(i).await;
            }
            if applied {
                world.fault(kind);
            }
        }
        "script-fail" | "script-daemon" => {
            if knob(&slot.knobs, kind.trim_start_matches("script-")).await {
                world.fault(kind);
            }
        }
        "script-hang" => {
            if !knob(&slot.knobs, "hang").await {
                return;
            }
            let Some(pid) = hanging(&slot.knobs).await else {
                world.violation(format!(
                    "{}: a script took the hang knob but never said it hangs",
                    slot.host.id
                ));
                return;
            };
            tokio::time::sleep(Duration::from_secs_f64(rng.between(0.5, 5.0))).await;
            let (signal, name) = if rng.chance(0.5) {
                (Signal::SIGTERM, "script-hang-fail")
            } else {
                (Signal::SIGUSR1, "script-hang-release")
            };
            let _ = kill(Pid::from_raw(pid), signal);
            let gone = Instant::now() + Duration::from_secs(10);
            while slot.knobs.join("hanging").exists() && Instant::now() < gone {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            world.fault(name);
        }
        "health-slow" | "health-never" | "health-hang" => {
            if knob(&slot.knobs, kind).await {
                world.fault(kind);
            }
        }
        "holder-kill" | "holder-cut" => holder_fault(world, kind, i, rng).await,
        "script-chatty" | "script-daemon-writes" => output_fault(world, kind, i).await,
        "log-stall" => log_stall(world, i, rng).await,
        other => unreachable!("fault kind {other}"),
    }
}

/// Pauses a holder mid-step (the `pause` knob), then kills its agent or cuts its session.
async fn holder_fault(world: &World, kind: &'static str, i: usize, mut rng: Rng) {
    let slot = &world.slots[i];
    if !knob(&slot.knobs, "pause").await {
        return;
    }
    let paused = slot.knobs.join("paused");
    let Some(line) = read_when_there(&paused).await else {
        world.violation(format!(
            "{}: a run took the pause knob but never said it paused",
            slot.host.id
        ));
        return;
    };
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 5 {
        world.violation(format!("{}: a malformed pause line {line:?}", slot.host.id));
        let _ = std::fs::remove_file(&paused);
        return;
    }
    if kind == "holder-kill" {
        let killed = world.kill_agent(i).await;
        let _ = std::fs::remove_file(&paused);
        if killed {
            world.journal.lock().unwrap().holder_kills.push(HolderKill {
                host: slot.host.id.clone(),
                run: f[0].into(),
                kind: f[1].into(),
                path: f[2].into(),
                n: f[3].into(),
                version: f[4].into(),
                time: now(),
            });
            world.fault(kind);
        }
        tokio::time::sleep(Duration::from_secs_f64(rng.between(0.0, 1.5))).await;
        if !world.check_alive(i).await {
            world.start_agent(i).await;
        }
    } else {
        // Longer than the agents' session: it expires while the script still runs.
        let start = now();
        for p in &slot.proxies {
            p.cut();
        }
        tokio::time::sleep(Duration::from_secs_f64(rng.between(5.0, 7.0))).await;
        for p in &slot.proxies {
            p.restore();
        }
        let _ = std::fs::remove_file(&paused);
        let cut = (slot.host.id.clone(), start, now());
        world.journal.lock().unwrap().cuts.push(cut);
        world.fault(kind);
    }
}

/// Sets the `chatty` or `daemon-writes` knob and, once a run took it, holds the host until
/// the output it makes is over (30 s at most): the 8 MiB printed, or the daemon gone (the
/// agent closes the script's output 0.5 s after the script exits: a violation if it still
/// writes 12 s later).
async fn output_fault(world: &World, kind: &'static str, i: usize) {
    let knobs = &world.slots[i].knobs;
    let name = kind.trim_start_matches("script-");
    if !knob(knobs, name).await {
        return;
    }
    world.fault(kind);
    if kind == "script-chatty" {
        let deadline = Instant::now() + Duration::from_secs(30);
        let done = knobs.join("chatty-done");
        while !done.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = std::fs::remove_file(done);
        return;
    }
    let pid_file = knobs.join("daemon-pid");
    let Some(pid) = read_when_there(&pid_file).await else {
        return;
    };
    let _ = std::fs::remove_file(&pid_file);
    let alive =
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
    // The script exits at once; its output is closed 0.5 s later (`command.rs`).
    let cut_off = Instant::now() + Duration::from_secs(12);
    while alive() && Instant::now() < cut_off {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if alive() {
        world.violation(format!(
            "{}: a daemon left by a script (pid {pid}) still writes to its output 12 s later",
            world.slots[i].host.id
        ));
    }
}

/// Stops the reader of the agent's output (its `cat`) for longer than the session, then
/// lets it go on.
async fn log_stall(world: &World, i: usize, mut rng: Rng) {
    let relay = {
        let relays = world.slots[i].relays.lock().unwrap();
        relays.last().map(|r| Pid::from_raw(r.id() as i32))
    };
    let Some(relay) = relay else {
        return;
    };
    if kill(relay, Signal::SIGSTOP).is_err() {
        return;
    }
    tokio::time::sleep(Duration::from_secs_f64(rng.between(4.5, 9.0))).await;
    let _ = kill(relay, Signal::SIGCONT);
    world.fault("log-stall");
}

/// The first line of `file` once it has one (5 s at most).
async fn read_when_there(file: &Path) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Some(line) = text.lines().next().filter(|l| !l.is_empty()) {
                return Some(line.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Sets a one-shot knob and waits (6 s at most) for a deploy run to take it; false (and the
/// knob removed) if none did.
async fn knob(knobs: &Path, name: &str) -> bool {
    let path = knobs.join(name);
    std::fs::write(&path, "1").unwrap();
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        if !path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A run may take it at the last moment: then it was applied.
    matches!(std::fs::remove_file(&path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// The pid of the hanging script (5 s at most).
async fn hanging(knobs: &Path) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(knobs.join("hanging")) {
            if let Ok(pid) = text.trim().parse() {
                return Some(pid);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The original agent's host node of a `mixed-fleet` window.
const ORIGINAL: &str = "/hosts/original";

/// Registers a host node of the original's agent (no `agent` property) for 6–12 s, its
/// version kept at the cluster's, then removes it; journals the window in which it surely
/// existed. Every ZooKeeper call is bounded and retried (the ensemble may be restarting):
/// one that never succeeds is a violation (a node left behind would also fail the final
/// checks).
async fn mixed_fleet(world: &World, mut rng: Rng) {
    let version = cluster_version(world).await.unwrap_or(Value::Null);
    let node = json!({"name": "original.example.com", "version": version});
    let data = serde_json::to_vec(&node).unwrap();
    let begun = now();
    let created = retry(Duration::from_secs(20), || {
        let data = data.clone();
        async move {
            let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
            match world
                .zk
                .call(|c| async move { c.create(ORIGINAL, &data, &open).await })
                .await
            {
                Ok(_) => true,
                // An earlier try whose answer was lost.
                Err(e) => e.contains("node already exists"),
            }
        }
    })
    .await;
    let from = now();
    if created {
        let hold = Instant::now() + Duration::from_secs_f64(rng.between(6.0, 12.0));
        let mut last = version;
        while Instant::now() < hold {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // A converged original agent: its version follows the cluster's (not a halt's).
            if let Some(v) = cluster_version(world).await.filter(|v| !v.is_null()) {
                if v != last {
                    let node = json!({"name": "original.example.com", "version": v});
                    let data = serde_json::to_vec(&node).unwrap();
                    let set = world
                        .zk
                        .call(|c| async move { c.set_data(ORIGINAL, &data, None).await })
                        .await;
                    if set.is_ok() {
                        last = v;
                    }
                }
            }
        }
    }
    let to = now();
    // Gone already (a lost answer to an earlier try) counts as deleted.
    let deleted = retry(Duration::from_secs(30), || async move {
        world
            .zk
            .call_opt(|c| async move { c.delete(ORIGINAL, None).await })
            .await
            .is_ok()
    })
    .await;
    let gone = now();
    if !deleted {
        world.violation(format!("mixed-fleet: cannot remove {ORIGINAL}"));
        return;
    }
    let window = MixedWindow {
        begun,
        // Not surely created: no instant at which it surely existed.
        from: if created { from } else { to },
        to,
        gone,
    };
    // A create that failed every time may still have succeeded: the window is kept (agents
    // may have used the node lock in it), counted as a fault only if surely applied.
    world.journal.lock().unwrap().mixed.push(window);
    if created {
        world.fault("mixed-fleet");
    }
}

/// `/hosts` version, if it could be read.
async fn cluster_version(world: &World) -> Option<Value> {
    let (data, _) = world
        .zk
        .call(|c| async move { c.get_data("/hosts").await })
        .await
        .ok()?;
    Some(decode(&data).get("version").cloned().unwrap_or(Value::Null))
}

/// Calls `op` until it says true (every 0.3 s, `limit` at most); false if it never did.
async fn retry<F, Fut>(limit: Duration, mut op: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if op().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
