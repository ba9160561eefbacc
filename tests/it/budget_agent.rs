//! What agents do with failure budgets, node halts and node pauses (CONTRACT 15): real agent
//! processes on a real ZooKeeper. Within the budget a failing host is quarantined for the
//! node at that cluster version (no halt, its other nodes deployed, its pass `error`, its
//! version not recorded, no retry even when its agent starts again); the failure beyond the
//! budget halts the cluster, or only the node with `on-failure = 'halt-node'` (hosts that
//! then leave it undone end `blocked` until `resume PATH`); a canary spends no budget; a
//! paused node is left undone (a step already running finishes); a percentage budget is
//! rounded down; a dead lock or lease holder counts against its node's budget; budgets are off
//! in a mixed fleet (`on-failure = 'halt-node'` too).

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{fleet, lines, v, wait_for, wait_for_async, TestHost};

/// `/acme/a` with `props` and `/acme/b` plain, both deployed to `hosts`.
fn tree(props: &str, hosts: &[&str]) -> String {
    let mut text = format!("/acme\n  /a : foo\n    version = '1.0'\n{props}    /deploy\n");
    for host in hosts {
        text.push_str(&format!("      /{host}\n"));
    }
    text.push_str("  /b : foo\n    version = '1.0'\n    /deploy\n");
    for host in hosts {
        text.push_str(&format!("      /{host}\n"));
    }
    text
}

const FAIL_A: (&str, &str) = ("ZK_TEST_FAIL", "/acme/a");
const LIMIT: Duration = Duration::from_secs(90);

async fn zkd(h: &TestHost, args: &[&str]) -> support::Run {
    let mut all = args.to_vec();
    all.extend(["-z", h.conn.as_str()]);
    support::run_async(&all).await
}

/// The deploy scripts run for `path` on `h`, from its deploy log.
fn runs_of(h: &TestHost, path: &str) -> usize {
    h.deploy_log("foo")
        .iter()
        .filter(|l| l.ends_with(&format!(": {path} 0")))
        .count()
}

#[tokio::test]
async fn a_failure_within_the_budget_quarantines_the_host_and_the_fleet_goes_on() {
    let hosts = fleet("budget-within", 3).await;
    let (h1, h2, h3) = (&hosts[0], &hosts[1], &hosts[2]);
    h1.tree(
        &tree("    max-failures = 1\n", &["h1", "h2", "h3"]),
        v("r1"),
    )
    .await;
    let run = h1.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    // Nothing halted; h1 deployed /acme/b, did not record r1, says what failed.
    let cluster = h1.hosts().await;
    assert_eq!(cluster["version"], json!("r1"), "{cluster:?}");
    assert_eq!(h1.status_text(), "error");
    assert!(
        h1.etc("foo").iter().any(|m| m.contains("acme,b")),
        "{:?}",
        h1.etc("foo")
    );
    assert_ne!(h1.host_version().as_deref(), Some("\"r1\""));
    let error = h1.report()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains("zookeeper-deploy /acme/a 0"), "{error}");
    assert!(error.contains("within its budget of 1"), "{error}");
    // The others go on.
    for h in [h2, h3] {
        let run = h.deploy(&[]).await;
        run.assert_ok();
        assert_eq!(h.status_text(), "done");
    }
    // h1 again (as after a restart of its agent): /acme/a is not run again at r1.
    let before = runs_of(h1, "/acme/a");
    let run = h1.deploy(&[]).await;
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(runs_of(h1, "/acme/a"), before);
    assert!(run.stderr.contains("quarantined for /acme/a"), "{run}");
    // status names the degraded node.
    let status = zkd(h1, &["status", "--json"]).await;
    let json: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(json["nodes"][0]["path"], json!("/acme/a"), "{json}");
    assert_eq!(json["nodes"][0]["state"], json!("degraded"), "{json}");
    // resume PATH clears the record: h1 runs /acme/a again, and converges.
    zkd(h1, &["resume", "/acme/a"]).await.assert_ok();
    h1.deploy(&[]).await.assert_ok();
    assert_eq!(h1.status_text(), "done");
    assert_eq!(runs_of(h1, "/acme/a"), before + 1);
}

#[tokio::test]
async fn the_failure_beyond_the_budget_halts_the_cluster() {
    let hosts = fleet("budget-beyond", 3).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(
        &tree("    max-failures = 1\n", &["h1", "h2", "h3"]),
        v("r1"),
    )
    .await;
    assert_eq!(h1.deploy_env(&[], &[FAIL_A]).await.code, 1);
    assert_eq!(h1.hosts().await["version"], json!("r1"));
    let run = h2.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    let cluster = h2.hosts().await;
    assert_eq!(cluster["version"], Value::Null, "{cluster:?}");
    assert_eq!(cluster["halt"]["host"], json!("h2"));
    let error = cluster["halt"]["error"].as_str().unwrap();
    assert!(error.contains("beyond its budget of 1"), "{error}");
}

#[tokio::test]
async fn two_hosts_failing_at_once_with_one_place_left_stop_the_rollout() {
    let hosts = fleet("budget-together", 3).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    let props = "    max-failures = 1\n    max-parallel = 3\n    on-failure = 'halt-node'\n";
    h1.tree(&tree(props, &["h1", "h2", "h3"]), v("r1")).await;
    let env = [FAIL_A, ("ZK_TEST_SLEEP", "1")];
    let (a, b) = tokio::join!(h1.deploy_env(&[], &env), h2.deploy_env(&[], &env));
    assert_eq!((a.code, b.code), (1, 1), "{a}\n{b}");
    // Exactly one of the two was beyond: the node is halted, named by that host.
    let json: Value = serde_json::from_str(&zkd(h1, &["status", "--json"]).await.stdout).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["state"], json!("halted"), "{json}");
    assert_eq!(node["failed"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(h1.hosts().await["version"], json!("r1"));
}

#[tokio::test]
async fn a_node_halt_blocks_that_node_only_until_resume_path() {
    let hosts = fleet("budget-halt-node", 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(
        &tree("    on-failure = 'halt-node'\n", &["h1", "h2"]),
        v("r1"),
    )
    .await;
    assert_eq!(h1.deploy_env(&[], &[FAIL_A]).await.code, 1);
    assert_eq!(h1.hosts().await["version"], json!("r1"));
    // h2 deploys /acme/b, leaves /acme/a undone and ends blocked, its version not recorded.
    let run = h2.deploy(&[]).await;
    assert_eq!(run.code, 3, "{run}");
    assert_eq!(h2.status_text(), "blocked /acme/a");
    assert_eq!(runs_of(h2, "/acme/a"), 0);
    assert_eq!(runs_of(h2, "/acme/b"), 1);
    assert_ne!(h2.host_version().as_deref(), Some("\"r1\""));
    // The halt holds at the next cluster version too.
    h1.tree(
        &tree("    on-failure = 'halt-node'\n", &["h1", "h2"]),
        v("r2"),
    )
    .await;
    assert_eq!(h2.deploy(&[]).await.code, 3);
    zkd(h1, &["resume", "/acme/a"]).await.assert_ok();
    h2.deploy(&[]).await.assert_ok();
    assert_eq!(h2.status_text(), "done");
    assert_eq!(runs_of(h2, "/acme/a"), 1);
}

#[tokio::test]
async fn a_failing_canary_spends_no_budget() {
    let hosts = fleet("budget-canary", 3).await;
    let h1 = &hosts[0];
    let props = "    max-failures = 2\n    max-parallel = 2\n    canary = 1\n";
    h1.tree(&tree(props, &["h1", "h2", "h3"]), v("r1")).await;
    let run = h1.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    let cluster = h1.hosts().await;
    assert_eq!(cluster["version"], Value::Null, "{cluster:?}");
    let error = cluster["halt"]["error"].as_str().unwrap();
    assert!(error.contains("a canary of /acme/a"), "{error}");
}

#[tokio::test]
async fn a_paused_node_is_left_undone_and_taken_up_on_resume() {
    let hosts = fleet("budget-pause-agent", 1).await;
    let h1 = &hosts[0];
    h1.tree(&tree("", &["h1"]), v("r1")).await;
    zkd(h1, &["pause", "/acme/a", "--reason", "bad mirror"])
        .await
        .assert_ok();
    let run = h1.deploy(&[]).await;
    assert_eq!(run.code, 3, "{run}");
    assert_eq!(h1.status_text(), "blocked /acme/a");
    assert_eq!(runs_of(h1, "/acme/a"), 0);
    zkd(h1, &["resume", "/acme/a"]).await.assert_ok();
    h1.deploy(&[]).await.assert_ok();
    assert_eq!(runs_of(h1, "/acme/a"), 1);
}

#[tokio::test]
async fn a_mixed_fleet_halts_the_cluster_whatever_the_budget() {
    let hosts = fleet("budget-mixed", 2).await;
    let h1 = &hosts[0];
    h1.tree(&tree("    max-failures = 5\n", &["h1", "h2"]), v("r1"))
        .await;
    // An original agent: a host node without `agent`.
    let open =
        zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    h1.client
        .create("/hosts/py1", br#"{"name": "py1"}"#, &open)
        .await
        .unwrap();
    let dry = h1.deploy(&["--dry-run", "--json"]).await;
    let plan: Value = serde_json::from_str(&dry.stdout).unwrap();
    let steps = plan["steps"].as_array().unwrap();
    let a = steps
        .iter()
        .find(|s| s["path"] == json!("/acme/a"))
        .unwrap();
    assert_eq!(a["max-failures"], Value::Null, "{a}");
    let run = h1.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(h1.hosts().await["version"], Value::Null);
}

#[tokio::test]
async fn a_percentage_budget_is_that_share_of_the_deploy_targets_rounded_down() {
    // 60 % of 3 hosts is 1.8: F = 1, so the second host to fail is beyond the budget.
    let hosts = fleet("budget-percent", 3).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(
        &tree("    max-failures = '60%'\n", &["h1", "h2", "h3"]),
        v("r1"),
    )
    .await;
    let run = h1.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("within its budget of 1"), "{run}");
    assert_eq!(h1.hosts().await["version"], json!("r1"));
    let run = h2.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    let cluster = h2.hosts().await;
    assert_eq!(cluster["version"], Value::Null, "{cluster:?}");
    assert_eq!(cluster["halt"]["host"], json!("h2"), "{cluster:?}");
    let error = cluster["halt"]["error"].as_str().unwrap();
    assert!(error.contains("beyond its budget of 1"), "{error}");
}

/// The pid and status text of `h`'s status file when it names `version`.
fn status_at(h: &TestHost, version: &str) -> Option<(String, String)> {
    let status = h.status();
    let f: Vec<&str> = status.trim_end().splitn(4, ' ').collect();
    (f.len() == 4 && f[2] == version).then(|| (f[1].to_string(), f[3].to_string()))
}

#[tokio::test]
async fn a_quarantined_hosts_agent_started_again_does_not_run_the_node_until_resume() {
    let hosts = fleet("budget-restart", 2).await;
    let h1 = &hosts[0];
    h1.tree(&tree("    max-failures = 1\n", &["h1", "h2"]), v("r1"))
        .await;
    let mut agent = h1.spawn("agent", &[], &[FAIL_A]);
    h1.wait_status("r1", &["error"], LIMIT).await;
    assert_eq!(runs_of(h1, "/acme/a"), 1);
    assert_eq!(h1.hosts().await["version"], json!("r1"));
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());

    // Started again, without the failure: its first pass at r1 leaves /acme/a undone.
    let mut agent = h1.spawn("agent", &[], &[]);
    let pid = agent.pid().to_string();
    let (_, text) = wait_for("the restarted agent's pass at r1", LIMIT, || {
        status_at(h1, "r1")
            .filter(|(p, text)| *p == pid && ["error", "done"].contains(&text.as_str()))
    })
    .await;
    assert_eq!(text, "error", "{}", agent.output());
    assert_eq!(runs_of(h1, "/acme/a"), 1, "{}", agent.output());
    let error = h1.report()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains("quarantined for /acme/a"), "{error}");
    assert_ne!(h1.host_version().as_deref(), Some("\"r1\""));

    // resume PATH: the running agent deploys /acme/a at once, and converges.
    zkd(h1, &["resume", "/acme/a"]).await.assert_ok();
    h1.wait_status("r1", &["done"], LIMIT).await;
    assert_eq!(runs_of(h1, "/acme/a"), 2);
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

#[tokio::test]
async fn a_mixed_fleet_halts_the_cluster_not_the_node_and_says_budgets_are_off() {
    let hosts = fleet("budget-mixed-node", 2).await;
    let h1 = &hosts[0];
    let props = "    max-failures = 1\n    on-failure = 'halt-node'\n";
    h1.tree(&tree(props, &["h1", "h2"]), v("r1")).await;
    let open =
        zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    h1.client
        .create("/hosts/py1", br#"{"name": "py1"}"#, &open)
        .await
        .unwrap();
    let off = "max-failures and on-failure are ignored: every failure halts the cluster";
    let dry = h1.deploy(&["--dry-run"]).await;
    assert!(dry.stdout.contains(off), "{dry}");
    let run = h1.deploy_env(&[], &[FAIL_A]).await;
    assert_eq!(run.code, 1, "{run}");
    let cluster = h1.hosts().await;
    assert_eq!(cluster["version"], Value::Null, "{cluster:?}");
    assert_eq!(cluster["halt"]["host"], json!("h1"), "{cluster:?}");
    // No failure record, no node halt: the original knows only the cluster halt.
    let names = h1
        .client
        .list_children("/node-state")
        .await
        .unwrap_or_default();
    assert_eq!(names, Vec::<String>::new());
    let status = zkd(h1, &["status"]).await;
    assert!(status.stdout.contains(off), "{status}");
}

#[tokio::test]
async fn a_node_paused_while_its_script_runs_lets_the_script_finish_and_starts_no_other() {
    let hosts = fleet("budget-pause-running", 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    let text = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n      /h2\n";
    h1.tree(text, v("r1")).await;
    let mut first = h1.spawn("deploy", &[], &[("ZK_TEST_SLEEP", "3")]);
    wait_for("h1's script of /acme/a started", LIMIT, || {
        (runs_of(h1, "/acme/a") == 1).then_some(())
    })
    .await;
    zkd(h1, &["pause", "/acme/a", "--reason", "bad mirror"])
        .await
        .assert_ok();
    // The running script finishes, and h1's pass with it.
    assert_eq!(first.wait(LIMIT).await, 0, "{}", first.output());
    assert_eq!(h1.status_text(), "done");
    assert!(
        h1.etc("foo").contains(&"acme,a.0.deployed".to_string()),
        "{:?}",
        h1.etc("foo")
    );
    // No other host starts it while paused.
    let run = h2.deploy(&[]).await;
    assert_eq!(run.code, 3, "{run}");
    assert_eq!(h2.status_text(), "blocked /acme/a");
    assert_eq!(runs_of(h2, "/acme/a"), 0);
    zkd(h1, &["resume", "/acme/a"]).await.assert_ok();
    h2.deploy(&[]).await.assert_ok();
    assert_eq!(runs_of(h2, "/acme/a"), 1);
}

/// h1 is killed while it deploys `/acme/a` (its place under `place`, the node lock or the
/// semaphore); once its session is gone, h2 deploys.
async fn killed_mid_step(h1: &TestHost, h2: &TestHost, place: &str) -> support::Run {
    let times = h1.scratch("times.txt");
    let tp = times.display().to_string();
    let env = [("ZK_TEST_SLEEP", "60"), ("ZK_TEST_TIMES", tp.as_str())];
    let mut agent = h1.spawn("deploy", &[], &env);
    wait_for("h1 deploying /acme/a", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    agent.kill_tree().await;
    wait_for_async("h1's place to go with its session", LIMIT, || async {
        match h1.client.list_children(place).await {
            Ok(c) if !c.is_empty() => None,
            _ => Some(()),
        }
    })
    .await;
    h2.deploy(&[]).await
}

#[tokio::test]
async fn a_dead_lock_holder_counts_against_the_nodes_budget_for_its_host() {
    let hosts = fleet("budget-dead-lock", 3).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(
        &tree("    max-failures = 1\n", &["h1", "h2", "h3"]),
        v("r1"),
    )
    .await;
    let run = killed_mid_step(h1, h2, "/agent-locks/acme,a").await;
    // Within the budget: nothing halted, h2 deploys /acme/a, and the death is h1's failure.
    run.assert_ok();
    assert!(
        run.stderr
            .contains("h1.example.com (h1) died deploying /acme/a 0"),
        "{run}"
    );
    assert_eq!(h1.hosts().await["version"], json!("r1"));
    assert_eq!(runs_of(h2, "/acme/a"), 1);
    let (data, _) = h1.client.get_data("/agent-locks/acme,a").await.unwrap();
    assert!(!String::from_utf8_lossy(&data).contains("in-flight"));
    let json: Value = serde_json::from_str(&zkd(h1, &["status", "--json"]).await.stdout).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["path"], json!("/acme/a"), "{json}");
    assert_eq!(node["state"], json!("degraded"), "{json}");
    assert_eq!(node["failed"].as_array().map(Vec::len), Some(1), "{json}");
    // h1's agent again: quarantined for /acme/a at r1, its script not run again.
    let before = runs_of(h1, "/acme/a");
    let again = h1.deploy(&[]).await;
    assert_eq!(again.code, 1, "{again}");
    assert!(again.stderr.contains("quarantined for /acme/a"), "{again}");
    assert_eq!(runs_of(h1, "/acme/a"), before);
}

#[tokio::test]
async fn a_dead_lease_holder_beyond_the_budget_halts_only_its_node() {
    let hosts = fleet("budget-dead-lease", 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    let props = "    max-parallel = 2\n    on-failure = 'halt-node'\n";
    h1.tree(&tree(props, &["h1", "h2"]), v("r1")).await;
    let run = killed_mid_step(h1, h2, "/agent-semaphores/acme,a").await;
    // No budget (F = 0): the node is halted naming h1, the cluster is not; h2 ends blocked.
    assert_eq!(run.code, 3, "{run}");
    assert_eq!(h2.status_text(), "blocked /acme/a");
    assert_eq!(runs_of(h2, "/acme/a"), 0);
    assert_eq!(runs_of(h2, "/acme/b"), 1);
    assert_eq!(h1.hosts().await["version"], json!("r1"));
    let json: Value = serde_json::from_str(&zkd(h1, &["status", "--json"]).await.stdout).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["state"], json!("halted"), "{json}");
    let halt = node.to_string();
    assert!(
        halt.contains("h1.example.com (h1) died deploying /acme/a 0"),
        "{json}"
    );
    assert_eq!(
        h1.client
            .list_children("/agent-semaphores/acme,a-__in-flight__")
            .await
            .unwrap(),
        Vec::<String>::new()
    );
}
