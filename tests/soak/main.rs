//! The randomized many-fault soak (issue 15): the test that looks for the defects no
//! single-fault test finds, the way Jepsen tests databases.
//!
//! A 3-server ensemble; twelve real agents (`h1`..`h8` deploy `/acme` nodes under node locks
//! or, where `max-parallel` is above 1, semaphore leases, with canaries and health checks,
//! skipping busy nodes; `w1`..`w4` have the role `web`, its controller and the persistent role
//! lock), each reaching the servers through its own proxies; a syncer committing a random
//! change to a real git repository every 1–3 s and running the real `zkdeployment sync`; an
//! operator resuming every halt with the real `zkdeployment resume`; and the nemesis
//! (`nemesis.rs`) applying random faults, several at once, for `SOAK_SECONDS` (default 120).
//! Then the faults stop, every fault heals, the fleet must converge on the last commit
//! (bounded), and the checker (`checker.rs`, and the final-state checks here) looks for
//! violations: runs without their lock or lease or beyond what it allows (`max-parallel`,
//! canaries), health checks outside their step, halts without record or cause, holders
//! killed mid-step that no halt named, a node lock's step beside a lease's (`cross`), a lease
//! taken in a pass begun while the fleet was mixed (the nemesis's `mixed-fleet` windows),
//! versions recorded after failed steps, nodes a sync left behind, locks, leases and host
//! nodes left over, sessions left open by exited processes, and a default-budget run that
//! applied fewer than 200 faults.
//!
//! Failure budgets (CONTRACT 15): some `/acme` nodes have `max-failures` (counts and
//! percentages) and `on-failure = 'halt-node'`; the nemesis makes their scripts fail on
//! several hosts at once and pauses nodes (`budget.rs`), the operator ends node halts, pauses
//! and quarantines with `resume PATH`, and the checker (`budget_check.rs`) proves, for every
//! node and cluster version, that no more than F hosts were quarantined, that a quarantined
//! host did not run the node again before a resume, that nobody entered a node after its
//! halt or pause was recorded, and that every failure was a quarantine or a halt; after
//! convergence no node halt, pause or failure record at the last commit is left.
//!
//! `SOAK_SEED` replays a run (default: a new seed each run); the seed is printed first, and
//! the summary is one line: `soak: seed=... faults=N (kind=n ...) ... steps=(lock=.. lease=..
//! canary=.. most-inside=..) health=(runs=.. passed=.. failed=..) killed-holders=(lease=..
//! lock=.. named=..) cross=.. mixed=(windows=.. steps=.. parallel-asked=..)
//! budget=(quarantined=.. node-halts=.. records=.. full=.. ambiguous=.. late=.. pauses=..
//! node-resumes=.. kept=(quarantined=.. halted=.. paused=..)) violations=N`.

#[allow(dead_code)] // the soak uses a few of the shared helpers
#[path = "../support/mod.rs"]
mod support;

mod actors;
mod agent_log;
mod budget;
mod budget_check;
mod checker;
mod nemesis;
mod oracle;
mod payload;
mod rng;
mod selftest;
mod tree;
mod world;
mod zk;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use zkdeployment::tree::export::export_root;
use zkdeployment::tree::parse::parse;
use zkdeployment::tree::Node;
use zkdeployment::zk::decode;
use zkdeployment::zk::node_state::{parse_record, version_key, HALT_PREFIX};

use actors::version_text;
use rng::Rng;
use world::World;

/// The default fault budget (seconds of faults).
const DEFAULT_SECONDS: u64 = 120;
/// How long the fleet may take to converge once the faults have healed.
const CONVERGE_LIMIT: Duration = Duration::from_secs(150);
/// Top-level nodes the agents and the syncer keep beside the tree (the syncer writes the
/// deployment index, docs/design.md, "The deployment index").
const RUNTIME_ROOTS: [&str; 10] = [
    "hosts",
    "node-state",
    "node-pauses",
    "agent-registry",
    "hosts-lock",
    "agent-locks",
    "agent-semaphores",
    "role-locks",
    "deployment-index",
    "zookeeper",
];

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fleet_stays_safe_and_converges_under_many_faults() {
    let seconds = env_number("SOAK_SECONDS").unwrap_or(DEFAULT_SECONDS);
    let seed = env_number("SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            % 1_000_000_000
    });
    let replay = format!("SOAK_SEED={seed} SOAK_SECONDS={seconds}");
    eprintln!("soak: seed={seed} seconds={seconds} (replay with {replay})");
    let mut rng = Rng::new(seed);
    let world = Arc::new(World::start(&mut rng).await);
    for i in 0..world.slots.len() {
        world.start_agent(i).await;
    }
    let stop_operator = Arc::new(AtomicBool::new(false));
    let operator = tokio::spawn(actors::operator(
        world.clone(),
        rng.fork(),
        stop_operator.clone(),
    ));
    let supervisor = tokio::spawn(actors::supervisor(world.clone(), stop_operator.clone()));
    let syncer = tokio::spawn(actors::syncer(world.clone(), rng.fork()));
    let until = Instant::now() + Duration::from_secs(seconds);
    // The default budget's promise, other budgets in proportion.
    let target = (u64::from(nemesis::MIN_FAULTS) * seconds / DEFAULT_SECONDS) as u32;
    nemesis::run(world.clone(), rng.fork(), until, target).await;
    world.calm.store(true, Ordering::SeqCst);
    if tokio::time::timeout(Duration::from_secs(120), syncer)
        .await
        .is_err()
    {
        world.violation("the syncer did not stop".into());
    }
    let converged = converge(&world).await;
    if converged {
        final_state(&world).await;
    }
    stop_operator.store(true, Ordering::SeqCst);
    let _ = tokio::time::timeout(Duration::from_secs(30), operator).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), supervisor).await;
    shutdown(&world).await;

    let mut runs = match checker::read_runs(&world.scripts_log()) {
        Ok(runs) => runs,
        Err(e) => {
            world.violation(e);
            Vec::new()
        }
    };
    let verdicts = world.verdicts.lock().unwrap().clone();
    let mut journal = world.journal.lock().unwrap();
    let passes: Vec<(String, u64, f64)> = journal
        .agent_logs
        .iter()
        .flat_map(|(host, pid, log)| {
            agent_log::pass_starts(log)
                .into_iter()
                .map(move |t| (host.clone(), *pid, t))
        })
        .collect();
    // The mixed-fleet rule judges steps by their pass's start: without any (the log line
    // changed), it would judge nothing.
    if passes.is_empty() && runs.iter().any(|r| r.kind == "deploy") {
        journal.violations.push(
            "no pass start (`Deploying version`) found in the agents' logs: the mixed-fleet \
             rule cannot judge any step"
                .into(),
        );
    }
    journal.passes = passes;
    journal.outcomes = journal
        .agent_logs
        .iter()
        .flat_map(|(host, pid, log)| agent_log::outcomes(log, host, *pid))
        .collect();
    let journal = journal;
    let mut counts = checker::Counts::default();
    let mut violations = journal.violations.clone();
    let commits = world.commits.lock().unwrap().clone();
    let halt_lines = halt_lines(&world);
    violations.extend(checker::check(
        &mut runs,
        &verdicts,
        &journal,
        &commits,
        &halt_lines,
        &mut counts,
    ));
    if converged {
        let (last, tree) = world.last_commit();
        let hosts: Vec<(String, bool)> = world
            .slots
            .iter()
            .map(|s| (s.host.id.clone(), s.role))
            .collect();
        violations.extend(checker::check_converged_runs(&runs, &last, &tree, &hosts));
    }
    let faults: u32 = journal.faults.values().sum();
    // A soak that applied few faults proves little: the default budget promises
    // MIN_FAULTS (the nemesis goes on a bounded while to reach them), others one a second.
    if seconds == DEFAULT_SECONDS && faults < nemesis::MIN_FAULTS {
        violations.push(format!(
            "only {faults} faults applied in the default budget ({seconds} s), {} promised",
            nemesis::MIN_FAULTS
        ));
    } else if u64::from(faults) < seconds {
        violations.push(format!("only {faults} faults applied in {seconds} s"));
    }
    let kinds: Vec<String> = journal
        .faults
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    let syncs: Vec<String> = journal
        .syncs
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    let passes: BTreeSet<(&str, &str)> = journal
        .samples
        .iter()
        .map(|(h, v, _, _)| (h.as_str(), v.as_str()))
        .collect();
    println!(
        "soak: seed={seed} seconds={seconds} faults={faults} ({}) syncs=({}) commits={} \
         passes={} runs={} halts={} resumes={} agent-restarts={} unchecked={} \
         stale-records={} steps=(lock={} lease={} canary={} most-inside={}) \
         health=(runs={} passed={} failed={}) killed-holders=(lease={} lock={} named={} \
         unnamed={}) cross={} mixed=(windows={} steps={} parallel-asked={}) after-resume={} \
         budget=(quarantined={} node-halts={} records={} full={} ambiguous={} late={} \
         pauses={} node-resumes={} kept=(quarantined={} halted={} paused={})) violations={}",
        kinds.join(" "),
        syncs.join(" "),
        world.commits.lock().unwrap().len(),
        passes.len(),
        counts.runs,
        journal.halts.len(),
        journal.resumes,
        journal.restarts.len(),
        counts.unknown,
        journal.stale_records,
        counts.lock_steps,
        counts.lease_steps,
        counts.canary_steps,
        counts.most_inside,
        counts.health_runs,
        counts.healthy,
        counts.unhealthy,
        counts.killed_leases,
        counts.killed_locks,
        counts.named,
        counts.unnamed,
        counts.cross,
        journal.mixed.len(),
        counts.mixed_steps,
        counts.mixed_parallel,
        counts.after_resume,
        counts.budget.quarantined,
        counts.budget.node_halts,
        counts.budget.records,
        counts.budget.full,
        counts.budget.ambiguous,
        counts.budget.late,
        journal
            .node_commands
            .iter()
            .filter(|c| c.what == "pause" && c.code == 0)
            .count(),
        journal
            .node_commands
            .iter()
            .filter(|c| c.what == "resume")
            .count(),
        counts.budget.kept[0],
        counts.budget.kept[1],
        counts.budget.kept[2],
        violations.len()
    );

    if !violations.is_empty() {
        // Keep the evidence: the scripts' log, the journal, every agent's log and the trees
        // committed.
        let keep = std::env::temp_dir().join(format!("zkd-soak-{seed}"));
        let _ = std::fs::create_dir_all(keep.join("agents"));
        let _ = std::fs::copy(world.scripts_log(), keep.join("scripts.log"));
        for (host, pid, log) in &journal.agent_logs {
            let _ = std::fs::copy(log, keep.join("agents").join(format!("{host}-{pid}.log")));
        }
        let _ = std::fs::write(keep.join("commits.txt"), format!("{commits:#?}"));
        let notes = format!(
            "unchecked by the oracle: {} (e.g. {:?})\n{journal:#?}",
            counts.unknown, counts.unknown_example
        );
        let _ = std::fs::write(keep.join("journal.txt"), notes);
        panic!(
            "the soak found {} violation(s); replay with {replay}\n(evidence kept in {})\n- {}",
            violations.len(),
            keep.display(),
            violations.join("\n- ")
        );
    }
}

/// Every line in which an agent said it halts the cluster (`halting the cluster: ERROR`) or
/// counted a dead holder in its node's failure budget (`NAME (HOST) died deploying PATH N
/// ... (failed host P of PATH, ...)`: within the budget, or the node halted; `(a canary of
/// PATH; the node is halted)` for a dead canary, which spends no budget), from the output
/// of every agent process the soak started, prefixed with its host id.
fn halt_lines(world: &World) -> Vec<String> {
    let mut out = Vec::new();
    for slot in &world.slots {
        let Ok(dir) = std::fs::read_dir(slot.host.dir.path()) else {
            continue;
        };
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("agent-") && name.ends_with(".log") {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                out.extend(
                    text.lines()
                        .filter(|l| {
                            l.contains("halting the cluster:")
                                || (l.contains(") died deploying ")
                                    && (l.contains(" (failed host ")
                                        || l.contains(" (a canary of ")))
                        })
                        .map(|l| format!("{} {l}", slot.host.id)),
                );
            }
        }
    }
    out
}

/// After the faults: every server up, every agent running; halts are resumed (by the
/// operator) and the last commit synced until every host is at it, with its host node
/// registered by the agent now running (the status file outlives an agent). False (and a
/// violation) if that takes longer than [`CONVERGE_LIMIT`].
async fn converge(world: &Arc<World>) -> bool {
    let w = world.clone();
    let _ = tokio::task::spawn_blocking(move || w.ensemble.lock().unwrap().start_stopped()).await;
    for slot in &world.slots {
        for p in &slot.proxies {
            p.restore();
        }
    }
    let deadline = Instant::now() + CONVERGE_LIMIT;
    let mut last_sync = Instant::now() - Duration::from_secs(10);
    loop {
        // An agent that exits 1 (its start-up met a predecessor's session, say) is started
        // again, as systemd does (`Restart=on-failure`).
        for i in 0..world.slots.len() {
            if !world.check_alive(i).await {
                world.start_agent(i).await;
            }
        }
        let (last, _) = world.last_commit();
        let version = world
            .zk
            .call(|c| async move { c.get_data("/hosts").await })
            .await
            .map(|(d, _)| decode(&d).get("version").cloned().unwrap_or(Value::Null));
        if let Ok(v) = &version {
            if !v.is_null()
                && version_text(v) != last
                && last_sync.elapsed() > Duration::from_secs(2)
            {
                world.sync(None, false).await;
                last_sync = Instant::now();
            }
            if version_text(v) == last {
                let mut behind = Vec::new();
                for slot in &world.slots {
                    let status = slot.host.status();
                    let fields: Vec<&str> = status.splitn(4, ' ').collect();
                    let at = fields.len() == 4 && fields[2] == last && fields[3] == "done";
                    if !at {
                        behind.push(format!("{}: {}", slot.host.id, status.trim()));
                    } else if let Some(why) = not_registered(world, slot).await {
                        // The status file is the host's, kept across its agents: a new
                        // agent waiting for its killed predecessor's session to end has
                        // not written it yet.
                        behind.push(why);
                    }
                }
                if behind.is_empty() {
                    return true;
                }
                if Instant::now() >= deadline {
                    let why = stuck(world).await;
                    world.violation(format!(
                        "the fleet did not converge on {last} within {CONVERGE_LIMIT:?}: {}\n{why}",
                        behind.join("; ")
                    ));
                    return false;
                }
            }
        }
        if Instant::now() >= deadline {
            let why = stuck(world).await;
            world.violation(format!(
                "the cluster did not reach the last commit {last} within {CONVERGE_LIMIT:?}: \
                 /hosts version {version:?}\n{why}"
            ));
            return false;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Why the host node of `slot` is not its running agent's (`None`: it is): the node names
/// the pid of the agent that registered it.
async fn not_registered(world: &World, slot: &world::Slot) -> Option<String> {
    let node = props(world, &format!("/hosts/{}", slot.host.id)).await;
    let pid = slot.agent.lock().await.as_ref().and_then(|a| a.child.id());
    let named = node.get("pid").and_then(Value::as_u64);
    (named != pid.map(u64::from)).then(|| {
        format!(
            "{}: /hosts/{} names pid {named:?}, the agent is {pid:?}",
            slot.host.id, slot.host.id
        )
    })
}

/// What a fleet that does not converge is doing: every host's status and the role lock's
/// requests.
async fn stuck(world: &World) -> String {
    let mut lines: Vec<String> = world
        .slots
        .iter()
        .map(|s| format!("  {} status: {}", s.host.id, s.host.status().trim()))
        .collect();
    let lock = format!("/role-locks/{}", tree::ROLE);
    let mut requests = children(world, &lock).await;
    requests.sort();
    for r in requests {
        let data = props(world, &format!("{lock}/{r}")).await;
        lines.push(format!("  {lock}/{r}: {}", Value::Object(data)));
    }
    lines.join("\n")
}

/// Reads a node's children (empty if missing); a violation if ZooKeeper fails.
async fn children(world: &World, path: &str) -> Vec<String> {
    let p = path.to_string();
    match world
        .zk
        .call_opt(|c| async move { c.list_children(&p).await })
        .await
    {
        Ok(list) => list.unwrap_or_default(),
        Err(e) => {
            world.violation(format!("cannot list {path}: {e}"));
            Vec::new()
        }
    }
}

/// Reads a node's properties (empty if missing).
async fn props(world: &World, path: &str) -> serde_json::Map<String, Value> {
    let p = path.to_string();
    match world
        .zk
        .call_opt(|c| async move { c.get_data(&p).await })
        .await
    {
        Ok(Some((data, _))) => decode(&data),
        _ => Default::default(),
    }
}

/// The converged state: host nodes of the live agents only, free locks, no in-flight record,
/// no role request, and the tree exactly the last commit's (nothing a sync left behind).
async fn final_state(world: &World) {
    let (last, tree) = world.last_commit();
    let mut hosts = children(world, "/hosts").await;
    hosts.sort();
    let mut want: Vec<String> = world.slots.iter().map(|s| s.host.id.clone()).collect();
    want.sort();
    if hosts != want {
        world.violation(format!("host nodes {hosts:?}, agents {want:?}"));
    }
    for slot in &world.slots {
        if let Some(why) = not_registered(world, slot).await {
            world.violation(why);
        }
    }
    let deployed: BTreeSet<String> = world
        .slots
        .iter()
        .flat_map(|s| tree.wanted(&s.host.id, s.role))
        .map(|(path, _)| path)
        .collect();
    for name in children(world, "/agent-locks").await {
        let path = format!("/agent-locks/{name}");
        let held = children(world, &path).await;
        if !held.is_empty() {
            world.violation(format!(
                "{path} still has contenders {held:?} after convergence"
            ));
        }
        // A record on a node some host deploys would have made that host halt (and clear
        // it); one on a node nobody deploys any more (its holder was killed, then the tree
        // moved on) stays until the node is deployed again, which then halts: counted.
        if let Some(record) = props(world, &path).await.get("in-flight") {
            let node = format!("/{}", name.replace(',', "/"));
            if deployed.contains(&node) {
                world.violation(format!("{path} keeps an in-flight record: {record}"));
            } else {
                world.journal.lock().unwrap().stale_records += 1;
            }
        }
    }
    // Semaphores: no lease, no guard or turnstile contender; an in-flight record only on a
    // node nobody deploys any more (stale, as for the locks). Whichever way a node is
    // entered, the next holder reads the records of both places.
    for name in children(world, "/agent-semaphores").await {
        let path = format!("/agent-semaphores/{name}");
        let held = children(world, &path).await;
        if name.ends_with("-__turnstiles__") {
            // The turnstiles are lock nodes that stay; their contenders go.
            for turnstile in held {
                let turnstile = format!("{path}/{turnstile}");
                let queued = children(world, &turnstile).await;
                if !queued.is_empty() {
                    world.violation(format!(
                        "{turnstile} still has contenders {queued:?} after convergence"
                    ));
                }
            }
            continue;
        }
        if let Some(node) = name.strip_suffix("-__in-flight__") {
            // Lease records, one node each: gone with their leases.
            let node = format!("/{}", node.replace(',', "/"));
            for record in held {
                if deployed.contains(&node) {
                    world.violation(format!("{path} keeps the in-flight record {record}"));
                } else {
                    world.journal.lock().unwrap().stale_records += 1;
                }
            }
            continue;
        }
        if !held.is_empty() {
            world.violation(format!(
                "{path} still has leases or contenders {held:?} after convergence"
            ));
        }
        if let Some(record) = props(world, &path).await.get("in-flight") {
            let node = format!("/{}", name.trim_end_matches("-__lock__").replace(',', "/"));
            if deployed.contains(&node) {
                world.violation(format!("{path} keeps in-flight records: {record}"));
            } else {
                world.journal.lock().unwrap().stale_records += 1;
            }
        }
    }
    let requests = children(world, &format!("/role-locks/{}", tree::ROLE)).await;
    if !requests.is_empty() {
        world.violation(format!("the role lock keeps requests {requests:?}"));
    }
    // Every host done at the last commit: no node halted or paused, nobody quarantined at it.
    let vkey = version_key(&Value::String(last.clone()));
    for name in children(world, "/node-state").await {
        let left =
            name.starts_with(HALT_PREFIX) || parse_record(&name).is_some_and(|r| r.vkey == vkey);
        if left {
            world.violation(format!("/node-state/{name} is left after convergence"));
        }
    }
    let paused = children(world, "/node-pauses").await;
    if !paused.is_empty() {
        world.violation(format!("node pauses {paused:?} are left after convergence"));
    }
    // The tree in ZooKeeper is exactly the last commit's.
    let hosts_props = props(world, "/hosts").await;
    let roots: BTreeSet<String> = hosts_props
        .get("synced-roots")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if roots != tree.roots() {
        world.violation(format!(
            "synced-roots {roots:?}, the last commit defines {:?}",
            tree.roots()
        ));
    }
    let mut expected = Node::new();
    for (name, text) in tree.files() {
        let parsed = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        expected.children.extend(parsed.children);
    }
    let client = world.zk.client().await;
    let exported = match client {
        Ok(c) => zkdeployment::zk::export::export_tree(&c, "/", false, None)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match exported.map(|text| parse(&text).map_err(|e| e.to_string())) {
        Ok(Ok(mut actual)) => {
            actual
                .children
                .retain(|k, _| !RUNTIME_ROOTS.contains(&k.as_str()));
            let (a, e) = (export_root(&actual, None), export_root(&expected, None));
            if a != e {
                world.violation(format!(
                    "the tree in ZooKeeper is not the last commit {last}:\n--- ZooKeeper ---\n{a}\n--- commit ---\n{e}"
                ));
            }
        }
        other => world.violation(format!("cannot export the tree: {other:?}")),
    }
}

/// SIGTERM to every agent: each exits 0 and its host node goes at once (docs/operations.md,
/// "Sessions"); then no session is left but the soak's own once the killed processes' have expired.
async fn shutdown(world: &World) {
    let stops = (0..world.slots.len()).map(|i| world.term_agent(i, Duration::from_secs(60)));
    futures::future::join_all(stops).await;
    let _ = world
        .zk
        .call(|c| async move { c.sync("/hosts").await })
        .await;
    let left = children(world, "/hosts").await;
    if !left.is_empty() {
        world.violation(format!(
            "host nodes left after their agents exited: {left:?}"
        ));
    }
    // Sessions: ours, plus the killed processes' until they expire (syncs: 10 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = (0..3)
            .map(|i| world.ensemble.lock().unwrap().four_letter(i, "mntr"))
            .filter_map(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("zk_global_sessions"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .collect::<Vec<u64>>();
        if !seen.is_empty() && seen.iter().all(|n| *n <= 1) {
            break;
        }
        if Instant::now() >= deadline {
            world.violation(format!(
                "sessions still open 30 s after every process but the soak's own exited \
                 (zk_global_sessions per server: {seen:?}; the soak holds 1)"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
