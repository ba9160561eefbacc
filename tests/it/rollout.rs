//! Rolling deploys (docs/rollouts.md): `max-parallel` leases of the kazoo-compatible
//! semaphore `/agent-semaphores/<name>`, canaries, health checks, the mixed-fleet rule, and
//! bad values. Several real agent processes (distinct host ids, roots, run directories and
//! fake yums) share one ZooKeeper chroot; deploy scripts log `start|end <rpm> <path> <n>
//! <host> <time>` to `ZK_TEST_TIMES` (tests/support/rpm.rs), so the tests check which runs
//! overlapped — by order, never by how long anything took.

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{
    add_foo_health_check, deploy_all, fleet, ids, lines, v, wait_for, wait_for_async, TestHost,
};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(90);

/// A tree deploying `/acme/a` (package foo 1.0, with `props` as extra property lines) to
/// every host.
fn tree(props: &str, hosts: &[&str]) -> String {
    tree_version(props, hosts, "1.0")
}

fn tree_version(props: &str, hosts: &[&str], version: &str) -> String {
    let mut text = format!("/acme\n  /a : foo\n    version = '{version}'\n");
    for line in props.lines().filter(|l| !l.trim().is_empty()) {
        text.push_str(&format!("    {}\n", line.trim()));
    }
    text.push_str("    /deploy\n");
    for host in hosts {
        text.push_str(&format!("      /{host}\n"));
    }
    text
}

/// The health check of package foo in a host's fake repository (installed with it): it
/// logs `try <host> <time>` / `healthy <host> <time>` to `ZK_TEST_HEALTH_LOG`, and passes on
/// its `ZK_TEST_HEALTH_PASS`-th run on that host (0: never; default 1).
fn add_health_check(h: &TestHost) {
    let script = r#"#!/bin/sh
count="$ZKDEPLOYMENT_ROOT/health-tries"
n=$(cat "$count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$count"
need="${ZK_TEST_HEALTH_PASS:-1}"
log="${ZK_TEST_HEALTH_LOG:-/dev/null}"
echo "try $ZKDEPLOYMENT_HOST_ID $(date +%s.%N) $*" >> "$log"
if [ "$need" != 0 ] && [ "$n" -ge "$need" ]; then
  echo "healthy $ZKDEPLOYMENT_HOST_ID $(date +%s.%N)" >> "$log"
  echo ok
  exit 0
fi
echo "checking port 8080"
echo "not ready yet (try $n)"
exit 1
"#;
    add_foo_health_check(h, script);
}

/// One run of a deploy script.
#[derive(Debug, Clone)]
struct Interval {
    host: String,
    path: String,
    start: f64,
    end: f64,
}

/// The runs in a `ZK_TEST_TIMES` file, in start order.
fn intervals(file: &Path) -> Vec<Interval> {
    let mut open: Vec<(String, String, f64)> = Vec::new();
    let mut out = Vec::new();
    for line in lines(file) {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "bad times line {line:?}");
        let time: f64 = f[5].parse().unwrap();
        match f[0] {
            "start" => open.push((f[4].to_string(), f[2].to_string(), time)),
            "end" => {
                let at = open
                    .iter()
                    .position(|(h, p, _)| h == f[4] && p == f[2])
                    .unwrap_or_else(|| panic!("an end without a start: {line:?}"));
                let (host, path, start) = open.remove(at);
                out.push(Interval {
                    host,
                    path,
                    start,
                    end: time,
                });
            }
            other => panic!("bad times line {other:?}"),
        }
    }
    assert!(open.is_empty(), "runs that never ended: {open:?}");
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// The most runs going on at one instant.
fn max_concurrent(runs: &[Interval]) -> usize {
    runs.iter()
        .map(|at| {
            runs.iter()
                .filter(|r| r.start <= at.start && at.start < r.end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

async fn data(h: &TestHost, path: &str) -> Option<Vec<u8>> {
    match h.client.get_data(path).await {
        Ok((d, _)) => Some(d),
        Err(zookeeper_client::Error::NoNode) => None,
        Err(e) => panic!("{path}: {e}"),
    }
}

async fn children(h: &TestHost, path: &str) -> Vec<String> {
    match h.client.list_children(path).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("{path}: {e}"),
    }
}

/// Runs every host at once with K from `props`; returns the runs.
async fn roll(label: &str, n: usize, props: &str) -> (Vec<TestHost>, Vec<Interval>) {
    let hosts = fleet(label, n).await;
    hosts[0].tree(&tree(props, &ids(&hosts)), v("r1")).await;
    let times = hosts[0].scratch("times.txt");
    let times_path = times.display().to_string();
    let runs = deploy_all(
        &hosts,
        &[("ZK_TEST_SLEEP", "0.6"), ("ZK_TEST_TIMES", &times_path)],
    )
    .await;
    for run in &runs {
        run.assert_ok();
    }
    let runs = intervals(&times);
    assert_eq!(runs.len(), n, "{runs:#?}");
    assert!(runs.iter().all(|r| r.path == "/acme/a"), "{runs:#?}");
    (hosts, runs)
}

#[tokio::test]
async fn at_most_k_hosts_deploy_a_node_at_once() {
    // K = 3 on 6 hosts: leases of the semaphore, whose node holds max_leases.
    let (hosts, runs) = roll("rollout-k3", 6, "max-parallel = 3").await;
    assert!(max_concurrent(&runs) <= 3, "{runs:#?}");
    let h = &hosts[0];
    assert_eq!(
        data(h, "/agent-semaphores/acme,a").await.as_deref(),
        Some(&b"3"[..])
    );
    assert_eq!(children(h, "/agent-semaphores/acme,a").await.len(), 0);
    // The in-flight records went with the leases.
    assert_eq!(
        children(h, "/agent-semaphores/acme,a-__in-flight__").await,
        Vec::<String>::new()
    );
    let guard = data(h, "/agent-semaphores/acme,a-__lock__")
        .await
        .unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&guard).contains("in-flight"),
        "records left: {}",
        String::from_utf8_lossy(&guard)
    );
    // K = 1 (the default): the node lock, no semaphore.
    let (hosts, runs) = roll("rollout-k1", 3, "").await;
    assert_eq!(max_concurrent(&runs), 1, "{runs:#?}");
    assert_eq!(data(&hosts[0], "/agent-semaphores/acme,a").await, None);
    // 30% of 7 hosts, rounded up: 3.
    let (hosts, runs) = roll("rollout-pct", 7, "max-parallel = '30%'").await;
    assert!(max_concurrent(&runs) <= 3, "{runs:#?}");
    assert_eq!(
        data(&hosts[0], "/agent-semaphores/acme,a").await.as_deref(),
        Some(&b"3"[..])
    );
    let dry = hosts[0].deploy(&["--dry-run", "--json", "--force"]).await;
    let plan: Value = serde_json::from_str(&dry.stdout).expect("json");
    let deploy = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(deploy["parallel"], json!(3), "{plan}");
    assert_eq!(deploy["canary"], json!(0), "{plan}");
    assert_eq!(deploy["health"], json!(false), "{plan}");
}

/// kazoo's side: `hold PATH K` takes a lease of `kazoo.recipe.lock.Semaphore(PATH,
/// "holder (kazoo)", max_leases=K)`, prints `held` and keeps it until its stdin closes.
const KAZOO: &str = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1])
zk.start(timeout=20)
path, k = sys.argv[2], int(sys.argv[3])
sem = zk.Semaphore(path, "holder (kazoo)", max_leases=k)
assert sem.acquire(timeout=20)
print("held", repr(sorted(sem.lease_holders())), flush=True)
sys.stdin.read()
sem.release()
zk.stop()
"#;

/// True if python3 has kazoo; in CI (`CI` set) its absence fails the test instead.
fn kazoo_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import kazoo"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with kazoo is required in CI (scripts/lib.sh zkd_ensure_kazoo)"
        );
        eprintln!("SKIPPED: python3 with kazoo is not available (pip install kazoo)");
    }
    ok
}

#[tokio::test]
async fn a_kazoo_semaphore_lease_counts_against_k() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    if !kazoo_available() {
        return;
    }
    let hosts = fleet("rollout-kazoo", 3).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 2", &ids(&hosts)), v("r1"))
        .await;
    let mut holder = tokio::process::Command::new("python3")
        .args(["-c", KAZOO, &h.conn, "/agent-semaphores/acme,a", "2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot run python3");
    let mut out = BufReader::new(holder.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(LIMIT, out.next_line()).await;
    assert_eq!(
        line.unwrap().unwrap().as_deref(),
        Some("held ['holder (kazoo)']")
    );
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let agents: Vec<_> = hosts
        .iter()
        .map(|h| {
            h.spawn(
                "deploy",
                &[],
                &[("ZK_TEST_SLEEP", "0.5"), ("ZK_TEST_TIMES", &times_path)],
            )
        })
        .collect();
    let mut agents = agents;
    for agent in agents.iter_mut() {
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
    // kazoo's lease left one of the two: our hosts went one at a time.
    let runs = intervals(&times);
    assert_eq!(runs.len(), 3, "{runs:#?}");
    assert_eq!(max_concurrent(&runs), 1, "{runs:#?}");
    drop(holder.stdin.take());
    assert!(holder.wait().await.unwrap().success());
    assert_eq!(children(h, "/agent-semaphores/acme,a").await.len(), 0);
}

#[tokio::test]
async fn canaries_go_first_one_at_a_time_then_the_rest_in_parallel() {
    let hosts = fleet("rollout-canary", 5).await;
    for h in &hosts {
        add_health_check(h);
    }
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 3\ncanary = 2", &ids(&hosts)), v("r1"))
        .await;
    let times = h.scratch("times.txt");
    let health = h.scratch("health.txt");
    let (tp, hp) = (times.display().to_string(), health.display().to_string());
    let env = [
        ("ZK_TEST_SLEEP", "0.3"),
        ("ZK_TEST_TIMES", tp.as_str()),
        ("ZK_TEST_HEALTH_LOG", hp.as_str()),
        ("ZK_TEST_HEALTH_PASS", "2"),
    ];
    for run in deploy_all(&hosts, &env).await {
        run.assert_ok();
    }
    let runs = intervals(&times);
    assert_eq!(runs.len(), 5, "{runs:#?}");
    let healthy: Vec<(String, f64)> = lines(&health)
        .iter()
        .filter(|l| l.starts_with("healthy "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[1].to_string(), f[2].parse().unwrap())
        })
        .collect();
    let healthy_at = |host: &str| {
        healthy
            .iter()
            .find(|(h, _)| h == host)
            .unwrap_or_else(|| panic!("{host} never healthy: {healthy:?}"))
            .1
    };
    // The first two hosts are the canaries: each starts after the previous one is healthy,
    // and every other host starts after both are.
    let c1 = healthy_at(&runs[0].host);
    assert!(runs[1].start >= c1, "{runs:#?} {healthy:?}");
    let c2 = healthy_at(&runs[1].host);
    for r in &runs[2..] {
        assert!(
            r.start >= c2,
            "{} started before the canaries were healthy: {runs:#?} {healthy:?}",
            r.host
        );
    }
    // The count is in the node lock's data.
    let lock: Value =
        serde_json::from_slice(&data(h, "/agent-locks/acme,a").await.unwrap()).unwrap();
    assert_eq!(lock["canary"]["version"], json!("foo 1.0"), "{lock}");
    assert_eq!(
        lock["canary"]["hosts"],
        json!([runs[0].host, runs[1].host]),
        "{lock}"
    );
    let dry = h.deploy(&["--dry-run", "--json", "--force"]).await;
    let plan: Value = serde_json::from_str(&dry.stdout).expect("json");
    let deploy = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(
        (&deploy["parallel"], &deploy["canary"], &deploy["health"]),
        (&json!(3), &json!(2), &json!(true)),
        "{plan}"
    );
}

/// A health check for package foo that passes once the file `go` exists (it gives up after
/// 120 s, so that a failed test leaves nothing running).
fn add_gated_health_check(h: &TestHost, go: &Path) {
    let go = go.display();
    let script = format!(
        "#!/bin/sh\ni=0\nwhile [ ! -e {go} ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done\necho ok\n"
    );
    add_foo_health_check(h, &script);
}

#[tokio::test]
async fn hosts_beyond_the_canaries_still_needed_wait_outside_the_node_lock() {
    let hosts = fleet("rollout-canary-gate", 5).await;
    let h = &hosts[0];
    let go = h.scratch("go");
    for host in &hosts {
        add_gated_health_check(host, &go);
    }
    h.tree(&tree("max-parallel = 3\ncanary = 2", &ids(&hosts)), v("r1"))
        .await;
    let times = h.scratch("times.txt");
    let tp = times.display().to_string();
    let env = [("ZK_TEST_TIMES", tp.as_str())];
    let lock = "/agent-locks/acme,a";
    let queued = || async { Some(children(h, lock).await.len()) };
    // h1 takes the node lock and stays in its health check; h2 queues for the second canary.
    let mut agents = vec![hosts[0].spawn("deploy", &[], &env)];
    wait_for_async("h1's script", LIMIT, || async {
        lines(&times)
            .iter()
            .any(|l| l.starts_with("end "))
            .then_some(())
    })
    .await;
    agents.push(hosts[1].spawn("deploy", &[], &env));
    wait_for_async("h2 in the queue", LIMIT, || async {
        (queued().await == Some(2)).then_some(())
    })
    .await;
    // The others find the queue long enough and wait outside it.
    for host in &hosts[2..] {
        agents.push(host.spawn("deploy", &[], &env));
    }
    let waiting = "its canaries (0 of 2 done, 2 in the node lock's queue)";
    for agent in &agents[2..] {
        wait_for("a host waiting for the canaries", LIMIT, || {
            agent.output().contains(waiting).then_some(())
        })
        .await;
    }
    assert_eq!(queued().await, Some(2));
    std::fs::write(&go, "").unwrap();
    for agent in agents.iter_mut() {
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
    let runs = intervals(&times);
    assert_eq!(runs.len(), 5, "{runs:#?}");
    assert_eq!((&*runs[0].host, &*runs[1].host), ("h1", "h2"), "{runs:#?}");
    for r in &runs[2..] {
        assert!(r.start >= runs[1].end, "{runs:#?}");
    }
    let record: Value = serde_json::from_slice(&data(h, lock).await.unwrap()).unwrap();
    assert_eq!(record["canary"]["hosts"], json!(["h1", "h2"]), "{record}");
    assert_eq!(queued().await, Some(0));
}

#[tokio::test]
async fn a_failing_canary_halts_and_no_other_host_starts_that_version() {
    let hosts = fleet("rollout-canary-fail", 4).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 3\ncanary = 2", &ids(&hosts)), v("r1"))
        .await;
    let times = h.scratch("times.txt");
    let tp = times.display().to_string();
    let env = [
        ("ZK_TEST_SLEEP", "0.3"),
        ("ZK_TEST_TIMES", tp.as_str()),
        ("ZK_TEST_FAIL", "/acme/a"),
    ];
    let runs = deploy_all(&hosts, &env).await;
    let codes: Vec<i32> = runs.iter().map(|r| r.code).collect();
    assert_eq!(codes.iter().filter(|c| **c == 1).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|c| *c == 1 || *c == 3), "{codes:?}");
    // One start and no end: the first canary failed, and nobody else started.
    let started: Vec<String> = lines(&times)
        .into_iter()
        .filter(|l| l.starts_with("start "))
        .collect();
    assert_eq!(started.len(), 1, "{started:#?}");
    let host = started[0].split(' ').nth(4).unwrap().to_string();
    let cluster = h.hosts().await;
    assert_eq!(cluster["version"], Value::Null);
    assert_eq!(cluster["halt"]["host"], json!(host));
}

#[tokio::test]
async fn the_lease_is_held_until_the_health_check_passes() {
    let hosts = fleet("rollout-health", 2).await;
    for h in &hosts {
        add_health_check(h);
    }
    let h = &hosts[0];
    h.tree(&tree("", &ids(&hosts)), v("r1")).await;
    let times = h.scratch("times.txt");
    let health = h.scratch("health.txt");
    let (tp, hp) = (times.display().to_string(), health.display().to_string());
    let env = [
        ("ZK_TEST_TIMES", tp.as_str()),
        ("ZK_TEST_HEALTH_LOG", hp.as_str()),
        ("ZK_TEST_HEALTH_PASS", "3"),
    ];
    for run in deploy_all(&hosts, &env).await {
        run.assert_ok();
    }
    let runs = intervals(&times);
    assert_eq!(runs.len(), 2);
    let log = lines(&health);
    let first_healthy: f64 = log
        .iter()
        .find(|l| l.starts_with(&format!("healthy {} ", runs[0].host)))
        .unwrap_or_else(|| panic!("{log:#?}"))
        .split(' ')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(runs[1].start >= first_healthy, "{runs:#?}\n{log:#?}");
    // Three tries on each host, with the deploy script's arguments.
    for host in ids(&hosts) {
        let tries: Vec<&String> = log
            .iter()
            .filter(|l| l.starts_with(&format!("try {host} ")))
            .collect();
        assert_eq!(tries.len(), 3, "{log:#?}");
        assert!(tries[0].ends_with(" /acme/a 0"), "{log:#?}");
    }
    let report = hosts[1].report();
    let actions: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["install", "deploy", "health", "record-version"],
        "{report}"
    );
}

#[tokio::test]
async fn a_health_check_that_never_passes_halts_after_the_deadline() {
    let hosts = fleet("rollout-unhealthy", 1).await;
    let h = &hosts[0];
    add_health_check(h);
    h.tree(&tree("health-deadline = 3", &["h1"]), v("r1")).await;
    let health = h.scratch("health.txt");
    let hp = health.display().to_string();
    let run = h
        .deploy_env(
            &[],
            &[("ZK_TEST_HEALTH_LOG", &hp), ("ZK_TEST_HEALTH_PASS", "0")],
        )
        .await;
    run.assert_code(1);
    let message = "Health check failed for /acme/a 0: not ready yet (try ";
    assert!(run.stderr.contains(message), "{run}");
    let cluster = h.hosts().await;
    assert_eq!(cluster["version"], Value::Null);
    let error = cluster["halt"]["error"].as_str().unwrap();
    assert!(error.starts_with(message), "{error}");
    // Tried more than once (every 2 s), and stopped at the deadline.
    let tries = lines(&health).len();
    assert!((2..=4).contains(&tries), "{tries} tries");
    assert_eq!(h.host_version(), None);
}

#[tokio::test]
async fn without_a_health_check_nothing_waits() {
    let hosts = fleet("rollout-nohealth", 1).await;
    let h = &hosts[0];
    h.tree(&tree("health-deadline = 1", &["h1"]), v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    let report = h.report();
    assert!(
        report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["action"] != "health"),
        "{report}"
    );
    let dry = h.deploy(&["--dry-run", "--json", "--force"]).await;
    assert!(dry.stdout.contains("\"health\": false"), "{dry}");
}

#[tokio::test]
async fn a_change_of_max_parallel_between_versions_needs_no_operator() {
    let hosts = fleet("rollout-change", 3).await;
    let h = &hosts[0];
    let times = h.scratch("times.txt");
    let tp = times.display().to_string();
    let env = [("ZK_TEST_SLEEP", "0.2"), ("ZK_TEST_TIMES", tp.as_str())];
    h.tree(&tree("max-parallel = 2", &ids(&hosts)), v("r1"))
        .await;
    for run in deploy_all(&hosts, &env).await {
        run.assert_ok();
    }
    assert_eq!(
        data(h, "/agent-semaphores/acme,a").await.as_deref(),
        Some(&b"2"[..])
    );
    h.tree(&tree("max-parallel = 3", &ids(&hosts)), v("r2"))
        .await;
    for run in deploy_all(&hosts, &env).await {
        run.assert_ok();
    }
    assert_eq!(
        data(h, "/agent-semaphores/acme,a").await.as_deref(),
        Some(&b"3"[..])
    );
    // And back to the node lock.
    h.tree(&tree("", &ids(&hosts)), v("r3")).await;
    for run in deploy_all(&hosts, &env).await {
        run.assert_ok();
    }
    assert_eq!(intervals(&times).len(), 9);
    for h in &hosts {
        assert_eq!(h.host_version().as_deref(), Some("\"r3\""));
    }
}

/// Syncs the tree (`/acme/a` with `props`, deployed to h1 and h2) and starts `h1` deploying
/// it with a script that sleeps a minute; returns once the script has started, with the
/// agent and the scripts' times file.
async fn h1_deploying_for_a_minute(
    h1: &TestHost,
    props: &str,
) -> (support::agent::Spawned, std::path::PathBuf) {
    h1.tree(&tree(props, &["h1", "h2"]), v("r1")).await;
    let times = h1.scratch("times.txt");
    let tp = times.display().to_string();
    let agent = h1.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "60"), ("ZK_TEST_TIMES", &tp)],
    );
    wait_for("h1 deploying /acme/a", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    (agent, times)
}

/// The cluster is halted by h2, its error naming h1's step of `/acme/a` at r1 and where the
/// dead record was `left`.
async fn assert_h2_halted_naming_h1(h1: &TestHost, left: &str) {
    let cluster = h1.hosts().await;
    assert_eq!(cluster["version"], Value::Null);
    assert_eq!(cluster["halt"]["host"], json!("h2"));
    let error = cluster["halt"]["error"].as_str().unwrap();
    for part in ["h1.example.com (h1)", "/acme/a 0", "version r1", left] {
        assert!(error.contains(part), "{part:?} not in {error:?}");
    }
}

#[tokio::test]
async fn a_lease_holder_killed_mid_step_makes_the_next_holder_halt_naming_it() {
    let hosts = fleet("rollout-killed", 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    let (mut agent, times) = h1_deploying_for_a_minute(h1, "max-parallel = 2").await;
    let tp = times.display().to_string();
    // Its in-flight record is a node of its own, named as its lease.
    let leases = children(h1, "/agent-semaphores/acme,a").await;
    assert_eq!(
        children(h1, "/agent-semaphores/acme,a-__in-flight__").await,
        leases
    );
    agent.kill_tree().await;
    // Its lease goes with its session.
    wait_for_async("h1's lease to expire", LIMIT, || async {
        children(h1, "/agent-semaphores/acme,a")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let run = h2.deploy_env(&[], &[("ZK_TEST_TIMES", &tp)]).await;
    run.assert_code(1);
    let left = format!(
        "in-flight record of lease {} left in /agent-semaphores/acme,a-__in-flight__",
        leases[0]
    );
    assert_h2_halted_naming_h1(h1, &left).await;
    // h2 never ran its script; the dead record is cleared.
    assert_eq!(lines(&times).len(), 1);
    assert_eq!(
        children(h1, "/agent-semaphores/acme,a-__in-flight__").await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_lock_holder_killed_mid_step_makes_the_host_waiting_next_halt_naming_it() {
    // K = 1: h2 waits in the node lock's queue, right behind h1, when h1 dies mid-step. h2
    // takes the lock when h1's contender goes, without listing the queue again; its guess of
    // the lock node's data (h1's record cleared) is wrong, so it reads the data, finds h1's
    // record and halts, and never runs its script.
    let hosts = fleet("rollout-lock-killed", 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    let (mut first, times) = h1_deploying_for_a_minute(h1, "").await;
    let tp = times.display().to_string();
    let record = data(h1, "/agent-locks/acme,a").await.unwrap();
    assert!(
        String::from_utf8_lossy(&record).contains("\"in-flight\""),
        "{}",
        String::from_utf8_lossy(&record)
    );
    let mut next = h2.spawn("deploy", &[], &[("ZK_TEST_TIMES", &tp)]);
    wait_for("h2 to wait in the lock's queue", LIMIT, || {
        h2.status_text()
            .starts_with("waiting for node locks")
            .then_some(())
    })
    .await;
    wait_for_async("h2's contender behind h1's", LIMIT, || async {
        (children(h1, "/agent-locks/acme,a").await.len() == 2).then_some(())
    })
    .await;
    first.kill_tree().await;
    assert_eq!(next.wait(LIMIT).await, 1, "{}", next.output());
    assert_h2_halted_naming_h1(h1, "in-flight record left in /agent-locks/acme,a").await;
    // h2 never ran its script; the dead record is cleared (the release clears only the
    // record it found).
    assert_eq!(lines(&times).len(), 1, "{:?}", lines(&times));
    let lock = data(h1, "/agent-locks/acme,a").await.unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&lock).contains("in-flight"),
        "{}",
        String::from_utf8_lossy(&lock)
    );
}

#[tokio::test]
async fn a_host_with_one_node_left_waits_in_the_guard_queue_from_the_start() {
    // /acme/a (K = 2): one lease held by someone else (as kazoo's are: an ephemeral child of
    // the semaphore), and the guard held by the test. h1, with that node alone to deploy,
    // queues for the guard. The test takes the other lease and leaves the guard: h1 finds
    // every lease taken, says it waits (once, however long it waits), and waits in the
    // guard's queue as kazoo's blocking acquire does: holding the guard, alone in its queue,
    // watching the leases. A lease given back is taken.
    let hosts = fleet("rollout-wait-at-once", 1).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 2", &["h1"]), v("r1")).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let sem = "/agent-semaphores/acme,a";
    let guard = "/agent-semaphores/acme,a-__lock__";
    h.client.mkdir("/agent-semaphores", &open).await.ok();
    h.client.create(sem, b"2", &open).await.unwrap();
    h.client.create(guard, b"", &open).await.unwrap();
    let lease = |name: &str| format!("{sem}/{name}");
    let first = lease("0123456789abcdef0123456789abcdef");
    let second = lease("fedcba9876543210fedcba9876543210");
    h.client
        .create(&first, b"someone (x)", &ephemeral)
        .await
        .unwrap();
    let blocker = format!("{guard}/0123456789abcdef0123456789abcdef__lock__");
    let sequential = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, seq) = h
        .client
        .create(&blocker, b"test", &sequential)
        .await
        .unwrap();
    let mut run = h.spawn("deploy", &[], &[]);
    wait_for_async("h1 to queue behind the test", LIMIT, || async {
        (children(h, guard).await.len() == 2).then_some(())
    })
    .await;
    h.client
        .create(&second, b"someone (y)", &ephemeral)
        .await
        .unwrap();
    h.client
        .delete(&format!("{blocker}{seq}"), None)
        .await
        .unwrap();
    wait_for("h1 to say it waits", LIMIT, || {
        (h.status_text() == "waiting for node locks: /acme/a held by 2 lease holders").then_some(())
    })
    .await;
    wait_for_async("h1 alone in the guard's queue", LIMIT, || async {
        (children(h, guard).await.len() == 1).then_some(())
    })
    .await;
    // Its status, unchanged, is not written again: its age (what the monitor reports)
    // counts from the start of the wait.
    let said = h.status();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(children(h, guard).await.len(), 1);
    assert_eq!(h.status(), said);
    h.client.delete(&first, None).await.unwrap();
    assert_eq!(run.wait(LIMIT).await, 0, "{}", run.output());
    assert_eq!(h.status_text(), "done");
}

/// Runs h1's `deploy` until it says `waiting`, then deletes `freed` (a holder's place) and
/// clears the cluster version in one transaction: h1, woken by its place, must abandon
/// without running a script. Gives the deploy scripts' log.
async fn halted_as_freed(h: &TestHost, waiting: &str, freed: &str) -> Vec<String> {
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut run = h.spawn("deploy", &[], &[("ZK_TEST_TIMES", &times_path)]);
    wait_for("h1 to say it waits", LIMIT, || {
        (h.status_text() == waiting).then_some(())
    })
    .await;
    let mut writer = h.client.new_multi_writer();
    writer.add_delete(freed, None).unwrap();
    writer
        .add_set_data("/hosts", br#"{"version": null}"#, None)
        .unwrap();
    writer.commit().await.unwrap();
    let code = run.wait(LIMIT).await;
    assert_ne!(code, 0, "{}", run.output());
    assert_eq!(h.status_text(), "abandoned (cluster version is None)");
    lines(&times)
}

#[tokio::test]
async fn a_lease_taken_once_the_cluster_was_halted_runs_no_step() {
    // /acme/a (K = 2), both leases held by someone else: h1 waits for one. The test gives
    // one back and clears the cluster version in the same transaction. h1 wakes on the
    // lease, takes it, and reads the cluster in that round trip (or the next): it must
    // abandon there, without running the script, and give the lease back.
    let hosts = fleet("rollout-halted-under-lease", 1).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 2", &["h1"]), v("r1")).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let sem = "/agent-semaphores/acme,a";
    h.client.mkdir("/agent-semaphores", &open).await.ok();
    h.client.create(sem, b"2", &open).await.unwrap();
    let first = format!("{sem}/0123456789abcdef0123456789abcdef");
    let second = format!("{sem}/fedcba9876543210fedcba9876543210");
    for (lease, who) in [(&first, "someone (x)"), (&second, "someone (y)")] {
        h.client
            .create(lease, who.as_bytes(), &ephemeral)
            .await
            .unwrap();
    }
    let waiting = "waiting for node locks: /acme/a held by 2 lease holders";
    let ran = halted_as_freed(h, waiting, &first).await;
    assert!(ran.is_empty(), "{ran:?}");
    // The lease taken was given back: only the test's second one is left.
    let left = children(h, sem).await;
    assert_eq!(left, ["fedcba9876543210fedcba9876543210"], "{left:?}");
}

/// The node lock of /acme/a held by `someone (x)` (a contender as kazoo's Lock makes), with
/// `data` in the lock node if given: gives the lock node and the holder's contender.
async fn hold_node_lock(h: &TestHost, data: Option<&Value>) -> (&'static str, String) {
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let queued = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let lock = "/agent-locks/acme,a";
    h.client.mkdir(lock, &open).await.ok();
    if let Some(data) = data {
        h.client
            .set_data(lock, data.to_string().as_bytes(), None)
            .await
            .unwrap();
    }
    let prefix = format!("{lock}/0123456789abcdef0123456789abcdef__lock__");
    let (_, sequence) = h
        .client
        .create(&prefix, b"someone (x)", &queued)
        .await
        .unwrap();
    (lock, format!("{prefix}{sequence}"))
}

#[tokio::test]
async fn a_node_lock_taken_once_the_cluster_was_halted_runs_no_step_and_leaves_no_file() {
    // /acme/a (K = 1), its node lock held by someone else: h1 waits in the lock's queue. The
    // test lets go and clears the cluster version in the same transaction. h1 takes the
    // lock and reads the cluster in the round trip of its in-flight record, while it makes
    // its script ready (properties snapshot, `.script` marker's temporary file, this first
    // time with no marker in place): it must abandon there, run no script, leave no
    // temporary marker and let the lock go with its record cleared.
    let hosts = fleet("rollout-halted-under-lock", 1).await;
    let h = &hosts[0];
    h.tree(&tree("", &["h1"]), v("r1")).await;
    let (lock, holder) = hold_node_lock(h, None).await;
    let waiting = "waiting for node locks: /acme/a held by someone (x)";
    let ran = halted_as_freed(h, waiting, &holder).await;
    assert!(ran.is_empty(), "{ran:?}");
    let left: Vec<String> = h
        .etc("foo")
        .into_iter()
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(children(h, lock).await.is_empty(), "the lock was let go");
    let (data, _) = h.client.get_data(lock).await.unwrap();
    let data: Value = serde_json::from_slice(&data).unwrap_or(json!({}));
    assert_eq!(data.get("in-flight"), None, "{data}");
}

#[tokio::test]
async fn a_quick_take_whose_guess_was_wrong_deploys_a_first_instance_once() {
    // /acme/a (K = 1), its node lock held by someone else whose in-flight record is in the
    // lock node: h1, right behind it in the queue, guesses the data the holder leaves (its
    // read less the record, one version on). The holder writes the lock node twice as it
    // lets go, so the guess is wrong: h1 reads the data and tries again, making its script
    // ready a second time. The first instance has no `.script` marker yet, so each making
    // writes the marker's temporary file (one name): the second must survive the first's
    // drop, and the deployment go through once, its marker in place.
    let hosts = fleet("rollout-wrong-guess", 1).await;
    let h = &hosts[0];
    h.tree(&tree("", &["h1"]), v("r1")).await;
    let record = json!({"in-flight": {
        "host": "x", "name": "someone", "path": "/acme/a", "n": 0,
        "version": "r0", "pid": 1, "since": 0.0,
    }});
    let (lock, holder) = hold_node_lock(h, Some(&record)).await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut run = h.spawn("deploy", &[], &[("ZK_TEST_TIMES", &times_path)]);
    let waiting = "waiting for node locks: /acme/a held by someone (x)";
    wait_for("h1 to say it waits", LIMIT, || {
        (h.status_text() == waiting).then_some(())
    })
    .await;
    let mut writer = h.client.new_multi_writer();
    writer.add_set_data(lock, b"{}", None).unwrap();
    writer.add_set_data(lock, br#"{"note": 1}"#, None).unwrap();
    writer.add_delete(&holder, None).unwrap();
    writer.commit().await.unwrap();
    assert_eq!(run.wait(LIMIT).await, 0, "{}", run.output());
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: /acme/a 0"]);
    let etc = h.etc("foo");
    assert!(etc.iter().any(|f| f.ends_with(".script")), "{etc:?}");
    assert!(!etc.iter().any(|f| f.ends_with(".tmp")), "{etc:?}");
    assert_eq!(h.hosts().await.get("version"), Some(&json!("r1")));
}

#[tokio::test]
async fn a_lease_holder_says_which_step_it_runs() {
    // The status of a leased step is written while the step starts (its host node's write
    // answered while it runs): the status file says it before the script starts, and the
    // host node says it too.
    let hosts = fleet("rollout-leased-status", 1).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 2", &["h1"]), v("r1")).await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut run = h.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_TIMES", &times_path), ("ZK_TEST_SLEEP", "600")],
    );
    wait_for("h1's script to start", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    let step = "deploy /acme/a 0 (foo 1.0)";
    assert_eq!(h.status_text(), step);
    wait_for_async("h1's host node to say so", LIMIT, || async {
        let node = h.host_node().await?;
        (node.get("status") == Some(&json!(step))).then_some(())
    })
    .await;
    run.kill_tree().await;
}

#[tokio::test]
async fn a_mixed_fleet_falls_back_to_the_node_lock() {
    let hosts = fleet("rollout-mixed", 3).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 3", &ids(&hosts)), v("r1"))
        .await;
    // The original's agent registers a host node without `agent`.
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let old = serde_json::to_vec(&json!({"name": "old.example.com", "version": "r0"})).unwrap();
    h.client.create("/hosts/old", &old, &eph).await.unwrap();
    let dry = h.deploy(&["--dry-run", "--json"]).await;
    let plan: Value = serde_json::from_str(&dry.stdout).expect("json");
    assert!(
        plan["mixed-fleet"].as_str().unwrap().contains("host old"),
        "{plan}"
    );
    let deploy = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(deploy["parallel"], json!(1), "{plan}");
    let text = h.deploy(&["--dry-run"]).await;
    assert!(text.stdout.contains("mixed fleet: host old"), "{text}");
    let status = support::run_async(&["status", "-z", &h.conn]).await;
    assert!(status.stdout.contains("mixed fleet: host old"), "{status}");
    let status = support::run_async(&["status", "--json", "-z", &h.conn]).await;
    let overview: Value = serde_json::from_str(&status.stdout).unwrap();
    assert!(overview["mixed-fleet"].as_str().unwrap().contains("old"));
    let times = h.scratch("times.txt");
    let tp = times.display().to_string();
    for run in deploy_all(
        &hosts,
        &[("ZK_TEST_SLEEP", "0.3"), ("ZK_TEST_TIMES", tp.as_str())],
    )
    .await
    {
        run.assert_ok();
    }
    let runs = intervals(&times);
    assert_eq!(max_concurrent(&runs), 1, "{runs:#?}");
    assert_eq!(data(h, "/agent-semaphores/acme,a").await, None);
    // Once the original's host is gone, the fleet is ours alone.
    h.client.delete("/hosts/old", None).await.unwrap();
    let status = support::run_async(&["status", "--json", "-z", &h.conn]).await;
    let overview: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(overview["mixed-fleet"], Value::Null, "{overview}");
}

#[tokio::test]
async fn our_host_nodes_say_which_agent_wrote_them() {
    let hosts = fleet("rollout-agent-prop", 1).await;
    let h = &hosts[0];
    h.tree(&tree("", &["h1"]), v("r1")).await;
    let mut agent = h.spawn("agent", &[], &[]);
    h.wait_status("r1", &["done"], LIMIT).await;
    let node = h.host_node().await.expect("registered");
    assert_eq!(
        node["agent"],
        json!(format!("zkdeployment {}", env!("CARGO_PKG_VERSION")))
    );
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

const BAD: [(&str, &str); 9] = [
    ("max-parallel = 0", "Invalid max-parallel for /acme/a: 0"),
    ("max-parallel = -2", "Invalid max-parallel for /acme/a: -2"),
    (
        "max-parallel = 'abc'",
        "Invalid max-parallel for /acme/a: 'abc'",
    ),
    (
        "max-parallel = '150%'",
        "Invalid max-parallel for /acme/a: '150%'",
    ),
    ("canary = -1", "Invalid canary for /acme/a: -1"),
    ("max-failures = -1", "Invalid max-failures for /acme/a: -1"),
    (
        "max-failures = '150%'",
        "Invalid max-failures for /acme/a: '150%'",
    ),
    (
        "max-failures = 'abc'",
        "Invalid max-failures for /acme/a: 'abc'",
    ),
    (
        "on-failure = 'stop'",
        "Invalid on-failure for /acme/a: 'stop'",
    ),
];

#[tokio::test]
async fn bad_values_are_errors_before_anything_changes() {
    let hosts = fleet("rollout-bad", 1).await;
    let h = &hosts[0];
    for (prop, message) in BAD.iter().chain(&[(
        "health-deadline = 0",
        "Invalid health-deadline for /acme/a: 0",
    )]) {
        h.tree(&tree(prop, &["h1"]), v(prop)).await;
        let run = h.deploy(&[]).await;
        run.assert_code(1);
        assert!(run.stderr.contains(message), "{prop}: {run}");
        assert!(h.yum_calls().is_empty(), "{prop}: {:?}", h.yum_calls());
        assert_eq!(h.etc("foo"), Vec::<String>::new());
    }
    // Links are followed: a bad value behind a property link is found too.
    let linked = "/defaults\n  max-parallel = '0%'\n/acme\n  /a : foo\n    version = '1.0'\n    max-parallel => /defaults max-parallel\n    /deploy\n      /h1\n";
    h.tree(linked, v("linked")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("Invalid max-parallel for /acme/a: '0%'"),
        "{run}"
    );
}

#[test]
fn tree_check_reports_bad_values_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.zk");
    for (prop, message) in BAD {
        std::fs::write(&file, tree(prop, &["h1"])).unwrap();
        let run = support::run(&["tree", "check", file.to_str().unwrap()]);
        run.assert_code(1);
        assert!(
            run.stdout
                .contains(&format!("{}:2: {message}", file.display())),
            "{prop}: {run}"
        );
    }
    std::fs::write(
        &file,
        tree(
            "max-parallel = '25%'\ncanary = 1\nhealth-deadline = 30.5\nmax-failures = '5%'\non-failure = 'halt-node'",
            &["h1"],
        ),
    )
    .unwrap();
    support::run(&["tree", "check", file.to_str().unwrap()]).assert_ok();
}

#[tokio::test]
async fn sync_reports_bad_values_with_file_and_line_and_writes_nothing() {
    let conn = support::chroot("rollout-sync").await;
    let client = support::connect(&conn).await;
    let repo = TestRepo::new();
    let work = tempfile::tempdir().unwrap();
    let checkout = work.path().join("checkout");
    let lock = work.path().join("lock");
    let tomb = work.path().join("tombstone");
    let url = repo.url();
    for (prop, message) in [
        (
            "max-parallel = '150%'",
            "Invalid max-parallel for /acme/a: '150%'",
        ),
        (
            "on-failure = 'stop'",
            "Invalid on-failure for /acme/a: 'stop'",
        ),
        ("max-failures = -1", "Invalid max-failures for /acme/a: -1"),
    ] {
        let text = tree(prop, &["h1"]);
        repo.commit(&[("acme.zk", text.as_str())]);
        let paths = SyncPaths {
            checkout: &checkout,
            tombstone: &tomb,
            lock: &lock,
        };
        let run = support::run_async(&as_strs(&sync_args(&url, &paths, &conn, &[]))).await;
        run.assert_code(1);
        assert!(
            run.stderr.contains(&format!("acme.zk:2: {message}")),
            "{prop}: {run}"
        );
    }
    assert!(matches!(
        client.get_data("/acme").await,
        Err(zookeeper_client::Error::NoNode)
    ));
}

#[tokio::test]
async fn a_canary_that_took_the_lock_once_the_cluster_was_halted_is_not_counted() {
    // /acme/a (K = 2, canary = 2) in its canary phase: h1 waits for the node lock. The test
    // lets it go and halts the cluster in one transaction: h1 takes the lock and abandons
    // before its step; giving the lock back, it must not count itself as a canary (the
    // soak found hosts leasing a version no canary had deployed).
    let hosts = fleet("rollout-halted-canary", 1).await;
    let h = &hosts[0];
    h.tree(&tree("max-parallel = 2\n    canary = 2", &["h1"]), v("r1"))
        .await;
    let (lock, holder) = hold_node_lock(h, None).await;
    let waiting = "waiting for node locks: /acme/a held by someone (x)";
    let ran = halted_as_freed(h, waiting, &holder).await;
    assert!(ran.is_empty(), "{ran:?}");
    assert!(children(h, lock).await.is_empty(), "the lock was let go");
    let (data, _) = h.client.get_data(lock).await.unwrap();
    let data: Value = serde_json::from_slice(&data).unwrap_or(json!({}));
    assert_eq!(data.get("canary"), None, "{data}");
    assert_eq!(data.get("in-flight"), None, "{data}");
}
