//! Rolling deploys across a fleet: several agents (distinct host ids, filesystem roots, run
//! directories and fake yums, one shared ZooKeeper chroot) deploying the same application
//! nodes at once, under the per-node locks `/agent-locks/<name>` (docs/design.md, "A pass").
//!
//! Every host runs `zkdeployment deploy CONFIG` (one pass) as its own process, started
//! concurrently. The payload's knobs come from each agent's environment: `ZK_TEST_SLEEP`
//! makes each deploy script take a while, `ZK_TEST_TIMES` (one file shared by the hosts)
//! records `start|end <rpm> <path> <n> <host> <time>` around it, so the tests can check which
//! deploys ran at the same time.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{deploy_all, fleet, ids, lines, now, v, wait_for, wait_for_async, TestHost};
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(60);

/// A tree deploying `/acme/<node>` (package foo 1.0) for each node to every host.
fn tree(nodes: &[&str], hosts: &[&str]) -> String {
    let mut text = String::from("/acme\n");
    for node in nodes {
        text.push_str(&format!(
            "  /{node} : foo\n    version = '1.0'\n    /deploy\n"
        ));
        for host in hosts {
            text.push_str(&format!("      /{host}\n"));
        }
    }
    text
}

/// One run of a deploy script, from `ZK_TEST_TIMES`.
#[derive(Debug, Clone, PartialEq)]
struct Interval {
    host: String,
    path: String,
    n: u32,
    start: f64,
    end: Option<f64>,
}

/// The runs recorded in a `ZK_TEST_TIMES` file, in start order (an `end` closes the last
/// open run of the same host, path and instance).
fn intervals(file: &Path) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::new();
    for line in lines(file) {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "bad times line {line:?}");
        let (path, n, host) = (f[2].to_string(), f[3].parse().unwrap(), f[4].to_string());
        let time: f64 = f[5].parse().unwrap();
        match f[0] {
            "start" => out.push(Interval {
                host,
                path,
                n,
                start: time,
                end: None,
            }),
            "end" => {
                let open = out
                    .iter_mut()
                    .rev()
                    .find(|i| i.host == host && i.path == path && i.n == n && i.end.is_none())
                    .unwrap_or_else(|| panic!("an end without a start: {line:?}"));
                open.end = Some(time);
            }
            other => panic!("bad times line {other:?}"),
        }
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// Panics unless, for each application node, the runs of its deploy script never overlap.
fn assert_no_overlap(runs: &[Interval]) {
    let mut by_path: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for run in runs {
        by_path.entry(&run.path).or_default().push(run);
    }
    for (path, runs) in by_path {
        for pair in runs.windows(2) {
            let end = pair[0].end.expect("every run ended");
            assert!(
                pair[1].start >= end,
                "{path}: {} started at {:.3} before {} ended at {end:.3}\n{runs:#?}",
                pair[1].host,
                pair[1].start,
                pair[0].host
            );
        }
    }
}

/// The largest number of runs of distinct application nodes going on at one instant.
fn max_concurrent_nodes(runs: &[Interval]) -> usize {
    runs.iter()
        .map(|at| {
            runs.iter()
                .filter(|r| r.start <= at.start && at.start < r.end.unwrap_or(f64::MAX))
                .map(|r| r.path.as_str())
                .collect::<BTreeSet<_>>()
                .len()
        })
        .max()
        .unwrap_or(0)
}

/// Checks that every lock node under `/agent-locks` is free and holds no in-flight record.
async fn assert_locks_clean(h: &TestHost) {
    for name in h.client.list_children("/agent-locks").await.unwrap() {
        let path = format!("/agent-locks/{name}");
        assert_eq!(
            h.client.list_children(&path).await.unwrap(),
            Vec::<String>::new(),
            "{path} still has contenders"
        );
        let (data, _) = h.client.get_data(&path).await.unwrap();
        assert_eq!(
            zkdeployment::zk::decode(&data).get("in-flight"),
            None,
            "{path}"
        );
    }
}

#[tokio::test]
async fn deploys_of_one_node_never_overlap_across_hosts() {
    let hosts = fleet("fleet-overlap", 3).await;
    let nodes = ["a", "b", "c"];
    hosts[0].tree(&tree(&nodes, &ids(&hosts)), v("r1")).await;
    let times = hosts[0].scratch("times.txt");
    let times_path = times.display().to_string();
    let env = [("ZK_TEST_SLEEP", "0.5"), ("ZK_TEST_TIMES", &times_path)];
    for run in deploy_all(&hosts, &env).await {
        run.assert_ok();
    }
    let runs = intervals(&times);
    // Every host deployed every node once, and every run ended.
    let seen: BTreeSet<(String, String)> = runs
        .iter()
        .map(|r| (r.host.clone(), r.path.clone()))
        .collect();
    assert_eq!(runs.len(), 9, "{runs:#?}");
    assert_eq!(seen.len(), 9, "{runs:#?}");
    assert!(
        runs.iter().all(|r| r.end.is_some() && r.n == 0),
        "{runs:#?}"
    );
    assert_no_overlap(&runs);
    for h in &hosts {
        assert_eq!(h.status_text(), "done");
        assert_eq!(h.host_version().as_deref(), Some("\"r1\""));
        assert_eq!(
            h.etc("foo"),
            [
                "acme,a.0.deployed",
                "acme,a.0.script",
                "acme,b.0.deployed",
                "acme,b.0.script",
                "acme,c.0.deployed",
                "acme,c.0.script"
            ]
        );
    }
    let cluster = hosts[0].hosts().await;
    assert_eq!(cluster["version"], v("r1"));
    assert_eq!(cluster.get("halt"), None);
    let mut locks = hosts[0].client.list_children("/agent-locks").await.unwrap();
    locks.sort();
    assert_eq!(locks, ["acme,a", "acme,b", "acme,c"]);
    assert_locks_clean(&hosts[0]).await;
}

#[tokio::test]
async fn busy_nodes_are_skipped_so_the_fleet_deploys_in_parallel() {
    // S: how long each deploy script runs.
    const S: f64 = 2.0;
    let hosts = fleet("fleet-skip", 3).await;
    let nodes = ["a", "b", "c"];
    let text = tree(&nodes, &ids(&hosts));
    // A first, quick pass installs foo everywhere: the timed pass below only deploys, so the
    // hosts reach their first node lock at about the same time.
    hosts[0].tree(&text, v("r1")).await;
    for run in deploy_all(&hosts, &[]).await {
        run.assert_ok();
    }
    hosts[0].set_version(v("r2")).await;
    let times = hosts[0].scratch("times.txt");
    let times_path = times.display().to_string();
    let sleep = S.to_string();
    let env = [
        ("ZK_TEST_SLEEP", sleep.as_str()),
        ("ZK_TEST_TIMES", &times_path),
    ];
    let outputs: Vec<String> = deploy_all(&hosts, &env)
        .await
        .into_iter()
        .map(|run| {
            run.assert_ok();
            run.stderr
        })
        .collect();
    let runs = intervals(&times);
    assert_eq!(runs.len(), 9, "{runs:#?}");
    assert_no_overlap(&runs);
    let first = runs.iter().map(|r| r.start).fold(f64::MAX, f64::min);
    let last = runs.iter().map(|r| r.end.unwrap()).fold(f64::MIN, f64::max);
    let total = last - first;
    // Blocking in path order takes 5·S: the third host starts /acme/a after 2·S, then runs
    // its three nodes one after the other. Skipping busy nodes keeps the three hosts busy in
    // the first round (checked below), but 3·S is out of reach: the first round ends a few
    // milliseconds apart on each host, say X (held /acme/a), then Y (/acme/b), then Z
    // (/acme/c). When Y is done, /acme/a and /acme/b are free and X and Y idle; as a host
    // waits only when every node it still needs is busy (`src/agent/deploy.rs`), X must take
    // /acme/b and Y /acme/a, so Z, which needs those two, idles for a round: 4·S plus the
    // skew. The bound sits between that and 5·S.
    assert!(
        total < 4.6 * S,
        "the fleet took {total:.2} s (S = {S} s)\n{runs:#?}\n{}",
        outputs.join("\n-----\n")
    );
    assert_eq!(max_concurrent_nodes(&runs), 3, "{runs:#?}");
    // The hosts said why they skipped.
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("is held by") && o.contains("trying another node")),
        "{}",
        outputs.join("\n-----\n")
    );
    for h in &hosts {
        assert_eq!(h.status_text(), "done");
        assert_eq!(h.host_version().as_deref(), Some("\"r2\""));
    }
    assert_locks_clean(&hosts[0]).await;
}

/// Creates a kazoo lock contender on `/agent-locks/<name>` from the test's own session (what
/// `kazoo.recipe.lock.Lock(client, path, "holder (x)").acquire()` leaves), and returns its
/// path.
async fn hold_kazoo_lock(h: &TestHost, name: &str, identifier: &str) -> String {
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let lock = format!("/agent-locks/{name}");
    for path in ["/agent-locks", lock.as_str()] {
        match h.client.create(path, b"", &open).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("cannot create {path}: {e}"),
        }
    }
    let prefix = format!("{lock}/{}__lock__", uuid::Uuid::new_v4().simple());
    let (_, seq) = h
        .client
        .create(
            &prefix,
            identifier.as_bytes(),
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    format!("{prefix}{seq}")
}

#[tokio::test]
async fn a_lock_held_by_someone_else_blocks_its_node_only() {
    let hosts = fleet("fleet-held", 1).await;
    let h = &hosts[0];
    h.tree(&tree(&["a", "b", "c"], &["h1"]), v("r1")).await;
    let held = hold_kazoo_lock(h, "acme,b", "holder (x)").await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut agent = h.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "0.3"), ("ZK_TEST_TIMES", &times_path)],
    );
    // /acme/a and /acme/c are deployed meanwhile; then the agent waits for /acme/b.
    wait_for("the other nodes", LIMIT, || {
        let out = agent.output();
        let done: Vec<String> = intervals(&times)
            .into_iter()
            .filter(|r| r.end.is_some())
            .map(|r| r.path)
            .collect();
        (done == ["/acme/a", "/acme/c"] && out.contains("waiting")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(agent.running(), "{}", agent.output());
    let runs = intervals(&times);
    assert!(
        runs.iter().all(|r| r.path != "/acme/b"),
        "{runs:#?}\n{}",
        agent.output()
    );
    let output = agent.output();
    assert!(
        output.contains("/agent-locks/acme,b is held by holder (x)"),
        "{output}"
    );
    assert!(
        output.contains("every pending node is locked by another host; waiting"),
        "{output}"
    );
    // The status (file and host node) says what the host waits for, and for whom, since the
    // wait began.
    let waiting = "waiting for node locks: /acme/b held by holder (x)";
    assert_eq!(h.status_text(), waiting);
    let node = h.host_node().await.expect("the host node");
    assert_eq!(node["status"], json!(waiting));
    let since: f64 = h.status().split(' ').next().unwrap().parse().unwrap();
    assert!(now() - since > 0.5, "{}", h.status());
    // The holder goes: the agent takes the lock at once (on a watch, not after a timeout).
    let released = now();
    h.client.delete(&held, None).await.unwrap();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    let runs = intervals(&times);
    let b = runs.iter().find(|r| r.path == "/acme/b").expect("/acme/b");
    assert!(b.start >= released, "{runs:#?}");
    assert!(b.start - released < 3.0, "{runs:#?}");
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.etc("foo").len(), 6);
    assert_locks_clean(h).await;
}

/// The contenders of `/agent-locks/<name>` other than `held` (kazoo's names).
async fn others_in(h: &TestHost, name: &str, held: &str) -> usize {
    let lock = format!("/agent-locks/{name}");
    let children = h.client.list_children(&lock).await.unwrap_or_default();
    children
        .iter()
        .filter(|c| !held.ends_with(c.as_str()))
        .count()
}

#[tokio::test]
async fn a_host_waits_in_the_queue_of_every_busy_node_at_once() {
    let hosts = fleet("fleet-queues", 1).await;
    let h = &hosts[0];
    h.tree(&tree(&["a", "b"], &["h1"]), v("r1")).await;
    let held_a = hold_kazoo_lock(h, "acme,a", "holder (x)").await;
    let held_b = hold_kazoo_lock(h, "acme,b", "holder (y)").await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut agent = h.spawn("deploy", &[], &[("ZK_TEST_TIMES", &times_path)]);
    // The agent queues behind both holders at the same time, not in one queue by turns.
    wait_for_async("a contender in both queues", LIMIT, || async {
        let a = others_in(h, "acme,a", &held_a).await;
        let b = others_in(h, "acme,b", &held_b).await;
        (a == 1 && b == 1).then_some(())
    })
    .await;
    // The second node in plan order is given back first: the agent deploys it while the
    // first stays held, and its contender leaves the first node's queue meanwhile.
    h.client.delete(&held_b, None).await.unwrap();
    wait_for("/acme/b deployed", LIMIT, || {
        let runs = intervals(&times);
        runs.iter()
            .any(|r| r.path == "/acme/b" && r.end.is_some())
            .then_some(())
    })
    .await;
    assert!(agent.running(), "{}", agent.output());
    assert!(intervals(&times).iter().all(|r| r.path != "/acme/a"));
    wait_for_async("the agent back in /acme/a's queue", LIMIT, || async {
        (others_in(h, "acme,a", &held_a).await == 1).then_some(())
    })
    .await;
    h.client.delete(&held_a, None).await.unwrap();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    let order: Vec<String> = intervals(&times).into_iter().map(|r| r.path).collect();
    assert_eq!(order, ["/acme/b", "/acme/a"]);
    assert_eq!(h.status_text(), "done");
    assert_locks_clean(h).await;
}

#[tokio::test]
async fn the_instances_of_a_busy_node_queue_once_and_deploy_one_after_the_other() {
    let hosts = fleet("fleet-instances", 1).await;
    let h = &hosts[0];
    let tree = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n        n = 3\n";
    h.tree(tree, v("r1")).await;
    let held = hold_kazoo_lock(h, "acme,a", "holder (x)").await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut agent = h.spawn("deploy", &[], &[("ZK_TEST_TIMES", &times_path)]);
    wait_for_async("the agent in the lock's queue", LIMIT, || async {
        (others_in(h, "acme,a", &held).await == 1).then_some(())
    })
    .await;
    // One contender of the host's session, not one per instance: kazoo's Lock takes a
    // contender of its own session ahead of it for a leftover and deletes it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(others_in(h, "acme,a", &held).await, 1, "{}", agent.output());
    h.client.delete(&held, None).await.unwrap();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    let runs = intervals(&times);
    assert_eq!(
        runs.iter().map(|r| r.n).collect::<Vec<_>>(),
        [0, 1, 2],
        "{runs:#?}"
    );
    assert_no_overlap(&runs);
    assert_eq!(h.status_text(), "done");
    assert_locks_clean(h).await;
}

#[tokio::test]
async fn a_host_dying_mid_deploy_makes_the_next_holder_halt_the_cluster() {
    let mut hosts = fleet("fleet-inflight", 2).await;
    // h1's session expires 2 s after it dies.
    hosts[0].extra = "session-timeout = 2\n".into();
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(&tree(&["a", "b"], &["h1", "h2"]), v("r1")).await;
    let times = h1.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut dying = h1.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "30"), ("ZK_TEST_TIMES", &times_path)],
    );
    wait_for("h1 deploying /acme/a", LIMIT, || {
        (intervals(&times).len() == 1).then_some(())
    })
    .await;
    // Let the script start its sleep, so that the crash takes it too.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = dying.pid();
    dying.kill_tree().await;
    // The record is in the lock node.
    let (data, _) = h2.client.get_data("/agent-locks/acme,a").await.unwrap();
    let record = zkdeployment::zk::decode(&data)["in-flight"].clone();
    assert_eq!(record["host"], json!("h1"), "{record}");
    assert_eq!(record["name"], json!("h1.example.com"));
    assert_eq!(record["path"], json!("/acme/a"));
    assert_eq!(record["n"], json!(0));
    assert_eq!(record["version"], json!("r1"));
    assert_eq!(record["pid"], json!(pid));
    assert!((record["since"].as_f64().unwrap() - now()).abs() < 60.0);

    // h2 deploys /acme/b while h1's session lives on, then takes /acme/a once the session
    // expired, and halts the cluster instead of deploying it.
    let run = h2.deploy_env(&[], &[("ZK_TEST_TIMES", &times_path)]).await;
    run.assert_code(1);
    let runs = intervals(&times);
    let h2_runs: Vec<&str> = runs
        .iter()
        .filter(|r| r.host == "h2")
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(h2_runs, ["/acme/b"], "{run}");
    let cluster = h2.hosts().await;
    assert_eq!(cluster["version"], Value::Null);
    let halt = cluster["halt"].as_object().expect("a halt record");
    assert_eq!(halt["host"], json!("h2"));
    assert_eq!(halt["name"], json!("h2.example.com"));
    assert_eq!(halt["version"], json!("r1"));
    let error = halt["error"].as_str().unwrap();
    for part in ["h1.example.com (h1)", "/acme/a 0", "version r1"] {
        assert!(error.contains(part), "{part:?} not in {error:?}");
    }
    assert!(run.stderr.contains(error), "{run}");
    assert_eq!(h2.status_text(), "error");
    let report = h2.report();
    assert_eq!(report["outcome"], json!("error"));
    assert_eq!(report["error"], json!(error));
    // /acme/a was not deployed on h2; the record is cleared and the lock free.
    assert_eq!(h2.etc("foo"), ["acme,b.0.deployed", "acme,b.0.script"]);
    assert_locks_clean(h2).await;
}

/// kazoo's side of the recipe: `hold PATH` takes `kazoo.recipe.lock.Lock(PATH, "holder
/// (kazoo)")`, prints `held` and keeps it until its stdin closes; `probe PATH` prints the
/// lock's contenders and whether a non-blocking acquire succeeds.
const KAZOO: &str = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1])
zk.start(timeout=20)
what, path = sys.argv[2], sys.argv[3]
if what == "hold":
    lock = zk.Lock(path, "holder (kazoo)")
    lock.acquire(timeout=20)
    print("held", flush=True)
    sys.stdin.read()
    lock.release()
else:
    lock = zk.Lock(path, "prober")
    got = lock.acquire(blocking=False)
    print(repr((lock.contenders(), got)), flush=True)
    if got:
        lock.release()
zk.stop()
"#;

fn kazoo_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import kazoo"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        support::missing_tool(
            "the kazoo interoperability test needs python3 with kazoo \
             (scripts/test.sh installs it)",
        );
    }
    ok
}

fn kazoo(conn: &str, what: &str, path: &str) -> tokio::process::Child {
    tokio::process::Command::new("python3")
        .args(["-c", KAZOO, conn, what, path])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot run python3")
}

#[tokio::test]
async fn kazoo_and_the_agent_exclude_each_other() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    if !kazoo_available() {
        return;
    }
    let hosts = fleet("fleet-kazoo", 1).await;
    let h = &hosts[0];
    h.tree(&tree(&["a", "b", "c"], &["h1"]), v("r1")).await;
    // kazoo holds /acme/b.
    let mut holder = kazoo(&h.conn, "hold", "/agent-locks/acme,b");
    let mut out = BufReader::new(holder.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(LIMIT, out.next_line()).await;
    assert_eq!(line.unwrap().unwrap().as_deref(), Some("held"));
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut agent = h.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "1.5"), ("ZK_TEST_TIMES", &times_path)],
    );
    // While the agent deploys /acme/a, kazoo sees it hold that lock.
    wait_for("the agent deploying /acme/a", LIMIT, || {
        (intervals(&times).len() == 1).then_some(())
    })
    .await;
    let probe = kazoo(&h.conn, "probe", "/agent-locks/acme,a")
        .wait_with_output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        "(['h1.example.com (h1)'], False)"
    );
    // The agent skips /acme/b, naming kazoo's identifier, and waits for it at the end.
    wait_for("the agent waiting for /acme/b", LIMIT, || {
        let done = intervals(&times).iter().filter(|r| r.end.is_some()).count();
        (done == 2 && agent.output().contains("waiting")).then_some(())
    })
    .await;
    assert!(
        agent
            .output()
            .contains("/agent-locks/acme,b is held by holder (kazoo)"),
        "{}",
        agent.output()
    );
    assert!(intervals(&times).iter().all(|r| r.path != "/acme/b"));
    drop(holder.stdin.take());
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert!(holder.wait().await.unwrap().success());
    assert_eq!(h.etc("foo").len(), 6);
    assert_locks_clean(h).await;
}

#[tokio::test]
async fn a_failure_halts_the_fleet_before_its_lock_is_released() {
    let hosts = fleet("fleet-fail", 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(&tree(&["a"], &["h1", "h2"]), v("r1")).await;
    let times = h1.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut failing = h1.spawn(
        "deploy",
        &[],
        &[
            ("ZK_TEST_SLEEP", "1"),
            ("ZK_TEST_TIMES", &times_path),
            ("ZK_TEST_FAIL", "/acme/a"),
        ],
    );
    wait_for("h1 deploying /acme/a", LIMIT, || {
        (intervals(&times).len() == 1).then_some(())
    })
    .await;
    // h2 waits for the lock; when it gets it, the cluster is already halted.
    let run = h2.deploy_env(&[], &[("ZK_TEST_TIMES", &times_path)]).await;
    run.assert_code(3);
    assert!(
        run.stderr
            .contains("every pending node is locked by another host; waiting"),
        "{run}"
    );
    assert!(
        run.stderr
            .contains("Abandoning deployment because cluster version is None"),
        "{run}"
    );
    assert_eq!(failing.wait(LIMIT).await, 1, "{}", failing.output());
    let runs = intervals(&times);
    assert!(runs.iter().all(|r| r.host == "h1"), "{runs:#?}");
    let cluster = h1.hosts().await;
    assert_eq!(cluster["version"], Value::Null);
    assert_eq!(cluster["halt"]["host"], json!("h1"));
    assert_eq!(h2.etc("foo"), Vec::<String>::new());
    assert_eq!(h2.host_version(), None);
    assert_locks_clean(h1).await;
}

#[tokio::test]
async fn long_running_agents_roll_each_version_across_the_fleet() {
    let hosts = fleet("fleet-daemons", 3).await;
    let text = tree(&["a", "b", "c"], &ids(&hosts));
    hosts[0].tree(&text, v("r1")).await;
    let times = hosts[0].scratch("times.txt");
    let times_path = times.display().to_string();
    let env = [
        ("ZK_TEST_SLEEP", "0.3"),
        ("ZK_TEST_TIMES", times_path.as_str()),
    ];
    let mut agents: Vec<_> = hosts.iter().map(|h| h.spawn("agent", &[], &env)).collect();
    for h in &hosts {
        h.wait_status("r1", &["done"], LIMIT).await;
    }
    hosts[0].set_version(v("r2")).await;
    for h in &hosts {
        h.wait_status("r2", &["done"], LIMIT).await;
        assert_eq!(h.host_version().as_deref(), Some("\"r2\""));
    }
    let runs = intervals(&times);
    assert_eq!(runs.len(), 18, "{runs:#?}");
    assert_no_overlap(&runs);
    for (h, agent) in hosts.iter().zip(agents.iter_mut()) {
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
        assert_eq!(h.host_node().await, None);
    }
    assert_locks_clean(&hosts[0]).await;
}
