//! The long-running agent (`zkdeployment agent CONFIG`): passes on every change of the
//! cluster version, changes during a pass coalesced into one more pass, SIGTERM finishing the
//! step in progress, idling while the cluster is halted, the host node living as long as the
//! agent. Each test starts the agent as a child process and waits on the status file, the
//! payload's logs or ZooKeeper (polling, never fixed sleeps for correctness).

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{lines, v, wait_for, wait_for_async, Spawned, TestHost};

const LIMIT: Duration = Duration::from_secs(30);

fn tree(paths: &[&str], version: &str) -> String {
    let mut text = String::from("/acme\n");
    for path in paths {
        text.push_str(&format!(
            "  /{path} : foo\n    version = '{version}'\n    /deploy\n      /h1\n"
        ));
    }
    text
}

/// The `ZK_TEST_TIMES` lines as (start|end, path).
fn times(h: &TestHost) -> Vec<(String, String)> {
    lines(&h.scratch("times.txt"))
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), f[2].to_string())
        })
        .collect()
}

/// Checks that no two deploy script runs overlapped: starts and ends alternate, each end
/// closing the run just started.
fn assert_serial(runs: &[(String, String)]) {
    assert_eq!(runs.len() % 2, 0, "{runs:?}");
    for pair in runs.chunks(2) {
        assert_eq!(pair[0].0, "start", "{runs:?}");
        assert_eq!(pair[1].0, "end", "{runs:?}");
        assert_eq!(pair[0].1, pair[1].1, "{runs:?}");
    }
}

async fn stop(h: &TestHost, mut agent: Spawned) {
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert_eq!(
        h.host_node().await,
        None,
        "the host node goes with the agent"
    );
}

#[tokio::test]
async fn version_bumps_trigger_passes() {
    let h = TestHost::fake("daemon-bumps").await;
    h.tree(&tree(&["a"], "1.0"), v("r1")).await;
    let agent = h.spawn("agent", &[], &[]);
    h.wait_status("r1", &["done"], LIMIT).await;
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: /acme/a 0"]);
    // The host node mirrors the status (written just after the file).
    let node = wait_for_async("the host node's status", LIMIT, || async {
        h.host_node()
            .await
            .filter(|n| n.get("status") == Some(&json!("done")))
    })
    .await;
    assert_eq!(node["version"], json!("r1"));

    h.tree(&tree(&["a", "b"], "1.4"), v("r2")).await;
    // Whoever sees `done` at a version finds that version in `host_version` too (recorded
    // first): the status file is looked at as often as it can be read, from the bump on.
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let status = h.status();
        let f: Vec<&str> = status.splitn(4, ' ').collect();
        if f.len() == 4 && f[2] == "r2" && f[3] == "done" {
            assert_eq!(
                h.host_version().as_deref(),
                Some("\"r2\""),
                "status {status}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "status {status}");
        std::thread::yield_now();
    }
    assert_eq!(
        h.deploy_log("foo")[1..],
        ["foo-1.4-1: /acme/a 0", "foo-1.4-1: /acme/b 0"]
    );
    assert_eq!(h.host_version().as_deref(), Some("\"r2\""));
    assert_eq!(h.host_node().await.unwrap()["version"], json!("r2"));

    // Versions need not increase, nor be strings.
    h.tree(&tree(&["a"], "1.0"), json!(7)).await;
    h.wait_status("7", &["done"], LIMIT).await;
    assert_eq!(
        h.deploy_log("foo")[3..],
        ["foo-1.4-1: -u /acme/b 0", "foo-1.0-1: /acme/a 0"]
    );
    assert_eq!(h.host_version().as_deref(), Some("7"));
    stop(&h, agent).await;
}

#[tokio::test]
async fn bumps_during_a_pass_are_coalesced_into_one_more_pass() {
    let h = TestHost::fake("daemon-coalesce").await;
    h.tree(&tree(&["a"], "1.0"), v("r1")).await;
    let times_file = h.scratch("times.txt").display().to_string();
    let env_file = h.scratch("env.txt");
    let env_path = env_file.display().to_string();
    let agent = h.spawn(
        "agent",
        &[],
        &[
            ("ZK_TEST_SLEEP", "1"),
            ("ZK_TEST_TIMES", &times_file),
            ("ZK_TEST_ENV", &env_path),
        ],
    );
    wait_for("the first deploy to start", LIMIT, || {
        (!times(&h).is_empty()).then_some(())
    })
    .await;
    for version in ["r2", "r3", "r4"] {
        h.set_version(v(version)).await;
    }
    h.wait_status("r4", &["done"], LIMIT).await;
    // Give a pass that should not come the time to start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs = times(&h);
    assert_serial(&runs);
    assert_eq!(runs.len(), 4, "two passes: r1, then r4 ({runs:?})");
    let versions: Vec<String> = lines(&env_file)
        .into_iter()
        .filter_map(|l| l.strip_prefix("ZKDEPLOYMENT_VERSION=").map(str::to_string))
        .collect();
    assert_eq!(versions, ["r1", "r4"]);
    // One pass for the start, one for all three changes.
    let out = agent.output();
    assert_eq!(
        out.matches("cluster version").count(),
        2,
        "passes started:\n{out}"
    );
    assert_eq!(h.host_version().as_deref(), Some("\"r4\""));
    stop(&h, agent).await;
}

#[tokio::test]
async fn sigterm_finishes_the_step_in_progress_and_exits_0() {
    let h = TestHost::fake("daemon-sigterm").await;
    h.tree(&tree(&["a", "b"], "1.0"), v("r1")).await;
    let times_file = h.scratch("times.txt").display().to_string();
    let mut agent = h.spawn(
        "agent",
        &[],
        &[("ZK_TEST_SLEEP", "1.5"), ("ZK_TEST_TIMES", &times_file)],
    );
    wait_for("the first deploy to start", LIMIT, || {
        (!times(&h).is_empty()).then_some(())
    })
    .await;
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    // The step finished; no other started.
    assert_eq!(
        times(&h),
        [
            ("start".to_string(), "/acme/a".to_string()),
            ("end".to_string(), "/acme/a".to_string())
        ]
    );
    assert_eq!(h.etc("foo"), ["acme,a.0.deployed", "acme,a.0.script"]);
    // Not an error, not a halt; the pass is not recorded as done.
    let status = h.status_text();
    assert_ne!(status, "error");
    assert_ne!(status, "done");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], json!("r1"));
    assert_eq!(hosts.get("halt"), None);
    assert_eq!(h.host_version(), None);
    assert_eq!(h.report()["outcome"], json!("abandoned"));
    // The lock is free, its in-flight record cleared; the host node is gone.
    let (data, _) = h.client.get_data("/agent-locks/acme,a").await.unwrap();
    assert_eq!(zkdeployment::zk::decode(&data).get("in-flight"), None);
    assert_eq!(
        h.client.list_children("/agent-locks/acme,a").await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(h.host_node().await, None);

    // The next agent finishes the job.
    let agent = h.spawn("agent", &[], &[("ZK_TEST_TIMES", &times_file)]);
    h.wait_status("r1", &["done"], LIMIT).await;
    assert_eq!(times(&h).len(), 6);
    stop(&h, agent).await;
}

#[tokio::test]
async fn a_halted_cluster_idles_the_agent_until_resumed() {
    let h = TestHost::fake("daemon-halted").await;
    h.tree(&tree(&["a"], "1.0"), Value::Null).await;
    let agent = h.spawn("agent", &[], &[]);
    wait_for_async("registration", LIMIT, || async { h.host_node().await }).await;
    wait_for("the skipped pass", LIMIT, || {
        let out = agent.output();
        out.contains("Not deploying because cluster version is None")
            .then_some(())
    })
    .await;
    // Paused: still nothing.
    h.set_version(json!(false)).await;
    wait_for("the skipped pass", LIMIT, || {
        let out = agent.output();
        out.contains("Not deploying because cluster version is False")
            .then_some(())
    })
    .await;
    assert_eq!(h.yum_calls(), Vec::<String>::new());
    assert_eq!(h.status(), "");
    // Resumed.
    h.set_version(v("r1")).await;
    h.wait_status("r1", &["done"], LIMIT).await;
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: /acme/a 0"]);
    stop(&h, agent).await;
}

#[tokio::test]
async fn after_a_failure_the_agent_waits_for_a_resume() {
    let h = TestHost::fake("daemon-resume").await;
    h.tree(&tree(&["a", "bad"], "1.0"), v("r1")).await;
    let agent = h.spawn("agent", &[], &[("ZK_TEST_FAIL", "/acme/bad")]);
    h.wait_status("r1", &["error"], LIMIT).await;
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["host"], json!("h1"));
    let node = wait_for_async("the host node's status", LIMIT, || async {
        h.host_node()
            .await
            .filter(|n| n.get("status") == Some(&json!("error")))
    })
    .await;
    let script = h.root().join("opt/foo/bin/zookeeper-deploy");
    assert_eq!(
        node["error"],
        json!(format!("Command failed: {} /acme/bad 0", script.display()))
    );
    // The agent saw its own halt and stays idle.
    wait_for("the skipped pass", LIMIT, || {
        let out = agent.output();
        out.contains("Not deploying because cluster version is None")
            .then_some(())
    })
    .await;
    assert_eq!(h.deploy_log("foo").len(), 2);
    // Someone fixes the tree and resumes.
    h.tree(&tree(&["a"], "1.0"), v("r2")).await;
    h.wait_status("r2", &["done"], LIMIT).await;
    let node = h.host_node().await.unwrap();
    assert_eq!(node.get("error"), None, "the error is cleared");
    assert_eq!(node["version"], json!("r2"));
    // (The failed deployment left no marker: nothing to undeploy.)
    assert_eq!(h.deploy_log("foo")[2..], ["foo-1.0-1: /acme/a 0"]);
    assert_eq!(h.etc("foo"), ["acme,a.0.deployed", "acme,a.0.script"]);
    stop(&h, agent).await;
}

/// The agent's process is named after its program (`ps -C zkdeployment`, `pgrep -x` and
/// Nagios' `check_procs -C` find it), and its deploy scripts get the environment the agent
/// was started with, an operator's `GLIBC_TUNABLES` included, unchanged.
#[tokio::test]
async fn the_agent_keeps_its_name_and_its_scripts_get_its_environment() {
    let h = TestHost::fake("daemon-environment").await;
    h.tree(&tree(&["a"], "1.0"), v("r1")).await;
    let env_file = h.scratch("env.txt");
    let env_path = env_file.display().to_string();
    let tunables = "glibc.malloc.trim_threshold=131072";
    let agent = h.spawn(
        "agent",
        &[],
        &[("ZK_TEST_ENV", &env_path), ("GLIBC_TUNABLES", tunables)],
    );
    h.wait_status("r1", &["done"], LIMIT).await;
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", agent.pid())).unwrap();
    assert_eq!(comm, "zkdeployment\n");
    let script_env = std::fs::read_to_string(&env_file).unwrap();
    assert!(script_env.contains("ZKDEPLOYMENT_VERSION"), "{script_env}");
    let seen: Vec<&str> = script_env
        .lines()
        .filter(|l| l.contains("TUNABLES"))
        .collect();
    assert_eq!(seen, [format!("GLIBC_TUNABLES={tunables}")], "{script_env}");
    stop(&h, agent).await;
}
