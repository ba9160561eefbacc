//! The agent converging one host for real: a real ZooKeeper, real processes for deploy
//! scripts, the yum 3 fake (and, in `agent_dnf.rs`, the real dnf; `agent_daemon.rs` has the
//! long-running mode).
//!
//! Every test runs the binary (`zkdeployment deploy CONFIG`: one pass, exit 0 done or
//! converged, 1 failed, 3 halted/paused/abandoned) against its own ZooKeeper chroot, its own
//! fake yum and filesystem root. The payload scripts of the test packages log their calls to
//! `ROOT/opt/<rpm>/deploy.log` and write or remove the `.deployed` markers; their knobs
//! (`ZK_TEST_FAIL`, `ZK_TEST_ENV`, `ZK_TEST_SLEEP`) come from the agent's environment.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::agent::{dead_pid, dir_snapshot, lines, v, wait_for, Pm, TestHost};
use zookeeper_client::{Acls, CreateMode};

const TREE: &str = "
/acme
  /web : foo
    version = '1.0'
    threads = 4
    /deploy
      /h1
        n = 2
";

/// The deploy script of `rpm` on this host, as the agent runs it.
fn script(h: &TestHost, rpm: &str) -> String {
    h.root()
        .join("opt")
        .join(rpm)
        .join("bin/zookeeper-deploy")
        .display()
        .to_string()
}

/// Yum calls that change something (anything but `-q list installed`).
fn mutations(h: &TestHost) -> Vec<String> {
    h.yum_calls()
        .into_iter()
        .filter(|c| !c.starts_with("-q list installed "))
        .collect()
}

/// A tree with one deployment of `app` (package `rpm`, version `version`) to h1 under `/acme`.
fn one_app(app: &str, rpm: &str, version: &str, n: u32) -> String {
    format!(
        "
/acme
  /{app} : {rpm}
    version = '{version}'
    /deploy
      /h1
        n = {n}
"
    )
}

#[tokio::test]
async fn a_first_pass_installs_deploys_and_records_the_version() {
    let h = TestHost::fake("agent-first").await;
    h.tree(TREE, v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_ok();
    assert_eq!(
        h.deploy_log("foo"),
        ["foo-1.0-1: /acme/web 0", "foo-1.0-1: /acme/web 1"]
    );
    assert_eq!(
        h.etc("foo"),
        [
            "acme,web.0.deployed",
            "acme,web.0.script",
            "acme,web.1.deployed",
            "acme,web.1.script"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(h.root().join("etc/foo/acme,web.0.script")).unwrap(),
        script(&h, "foo")
    );
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.host_version().as_deref(), Some("\"r1\""));
    let report = h.report();
    assert_eq!(report["outcome"], json!("done"));
    assert_eq!(report["version"], json!("r1"));
    assert_eq!(
        h.yum_calls(),
        [
            "-q list installed foo",
            "-y clean all",
            "-y install foo-1.0",
            "-q list installed foo"
        ]
    );
    // The cluster is untouched, the host node is gone with the agent's session.
    assert_eq!(h.hosts().await.get("version"), Some(&v("r1")));
    assert_eq!(h.hosts().await.get("halt"), None);
    assert_eq!(h.host_node().await, None);
}

// ---------------------------------------------------------------------------------------------
// The steps of a pass (docs/design.md, "A pass").

#[tokio::test]
async fn instances_go_up_and_down() {
    let h = TestHost::fake("agent-n").await;
    h.tree(&one_app("web", "foo", "1.0", 2), v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    h.tree(&one_app("web", "foo", "1.0", 3), v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.deploy_log("foo")[2..],
        [
            "foo-1.0-1: /acme/web 0",
            "foo-1.0-1: /acme/web 1",
            "foo-1.0-1: /acme/web 2"
        ]
    );
    assert_eq!(h.etc("foo").len(), 6);
    h.tree(&one_app("web", "foo", "1.0", 2), v("r3")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.deploy_log("foo")[5..],
        [
            "foo-1.0-1: -u /acme/web 2",
            "foo-1.0-1: /acme/web 0",
            "foo-1.0-1: /acme/web 1"
        ]
    );
    assert_eq!(
        h.etc("foo"),
        [
            "acme,web.0.deployed",
            "acme,web.0.script",
            "acme,web.1.deployed",
            "acme,web.1.script"
        ]
    );
    // n = 0: no instance at all; then nothing uses the package (as in the original).
    h.tree(&one_app("web", "foo", "1.0", 0), v("r4")).await;
    h.deploy(&[]).await.assert_ok();
    let report = h.report();
    let commands: Vec<&Value> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["command"])
        .collect();
    let foo = script(&h, "foo");
    assert_eq!(
        commands[..2],
        [
            &json!([foo, "-u", "/acme/web", "0"]),
            &json!([foo, "-u", "/acme/web", "1"])
        ]
    );
    assert!(mutations(&h).contains(&"-y remove foo".to_string()));
    assert!(!h.exists("/etc/foo"));
    assert_eq!(h.host_version().as_deref(), Some("\"r4\""));
}

#[tokio::test]
async fn versions_go_up_and_down() {
    let h = TestHost::fake("agent-updown").await;
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    h.tree(&one_app("web", "foo", "1.0", 1), v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    h.tree(&one_app("web", "foo", "2.0", 1), v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(fake.installed("foo").as_deref(), Some("0:2.0-1"));
    assert_eq!(
        h.deploy_log("foo").last().unwrap(),
        "foo-2.0-1: /acme/web 0"
    );
    // yum 3 ignores an install of a lower version: the agent sees 2.0 and downgrades.
    h.tree(&one_app("web", "foo", "1.4", 1), v("r3")).await;
    let calls_before = h.yum_calls().len();
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.yum_calls()[calls_before..],
        [
            "-q list installed foo",
            "-y clean all",
            "-y install foo-1.4",
            "-q list installed foo",
            "-y downgrade foo-1.4",
            "-q list installed foo"
        ]
    );
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.4-1"));
    assert_eq!(
        h.deploy_log("foo").last().unwrap(),
        "foo-1.4-1: /acme/web 0"
    );
    let report = h.report();
    let actions: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["install", "deploy", "record-version"]);
}

#[tokio::test]
async fn versioned_package_names_take_any_version() {
    let h = TestHost::fake("agent-versioned").await;
    let tree = "
/acme
  /app : bar-1.4
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.yum_calls(),
        [
            "-q list installed bar-1.4",
            "-y clean all",
            "-y install bar-1.4",
            "-q list installed bar-1.4"
        ]
    );
    assert_eq!(h.deploy_log("bar-1.4"), ["bar-1.4-1.4-1: /acme/app 0"]);
    // The application is `bar`: its markers are in /etc/bar.
    assert_eq!(h.etc("bar"), ["acme,app.0.deployed", "acme,app.0.script"]);
    assert_eq!(
        std::fs::read_to_string(h.root().join("etc/bar/acme,app.0.script")).unwrap(),
        script(&h, "bar-1.4")
    );
    // Any installed version will do: the next pass installs nothing.
    h.set_version(v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(mutations(&h), ["-y clean all", "-y install bar-1.4"]);
    assert_eq!(h.deploy_log("bar-1.4").len(), 2);
}

#[tokio::test]
async fn switching_versioned_packages_redeploys_with_the_new_script() {
    let h = TestHost::fake("agent-switch").await;
    let tree = "
/acme
  /app : bar-1.0
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    h.tree(&tree.replace("bar-1.0", "bar-1.4"), v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    // Same application and path: not an undeploy, a deployment with the new package's
    // script; then the old package goes, the application's directory stays.
    assert_eq!(h.deploy_log("bar-1.4"), ["bar-1.4-1.4-1: /acme/app 0"]);
    assert!(mutations(&h).contains(&"-y remove bar-1.0".to_string()));
    assert!(!h.exists("/opt/bar-1.0"));
    assert_eq!(h.etc("bar"), ["acme,app.0.deployed", "acme,app.0.script"]);
    assert_eq!(
        std::fs::read_to_string(h.root().join("etc/bar/acme,app.0.script")).unwrap(),
        script(&h, "bar-1.4")
    );
    let report = h.report();
    let actions: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["install", "deploy", "uninstall", "record-version"]
    );
}

#[tokio::test]
async fn a_package_shared_by_two_applications_is_installed_once() {
    let h = TestHost::fake("agent-shared").await;
    let tree = "
/acme
  /one : foo
    version = '1.4'
    /deploy
      /h1
  /two : foo
    version = '1.4'
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(mutations(&h), ["-y clean all", "-y install foo-1.4"]);
    assert_eq!(
        h.deploy_log("foo"),
        ["foo-1.4-1: /acme/one 0", "foo-1.4-1: /acme/two 0"]
    );
    assert_eq!(
        h.etc("foo"),
        [
            "acme,one.0.deployed",
            "acme,one.0.script",
            "acme,two.0.deployed",
            "acme,two.0.script"
        ]
    );

    // One of them goes: it is undeployed, the package stays.
    let tree = "
/acme
  /one : foo
    version = '1.4'
    /deploy
      /h1
";
    h.tree(tree, v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.deploy_log("foo")[2..],
        ["foo-1.4-1: -u /acme/two 0", "foo-1.4-1: /acme/one 0"]
    );
    assert_eq!(mutations(&h), ["-y clean all", "-y install foo-1.4"]);
    assert_eq!(h.etc("foo"), ["acme,one.0.deployed", "acme,one.0.script"]);
    assert!(h.exists("/opt/foo/bin/zookeeper-deploy"));
}

#[tokio::test]
async fn a_package_no_longer_used_is_uninstalled_with_its_etc_dir() {
    let h = TestHost::fake("agent-uninstall").await;
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    let both = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
  /jobs : worker
    version = '1.1'
    /deploy
      /h1
";
    h.tree(both, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.etc("worker"),
        ["acme,jobs.0.deployed", "acme,jobs.0.script"]
    );
    h.tree(&one_app("web", "foo", "1.0", 1), v("r2")).await;
    let before = h.yum_calls().len();
    h.deploy(&[]).await.assert_ok();
    // The deployment is removed first (the package's log went with /opt/worker).
    let report = h.report();
    assert_eq!(
        report["steps"][0]["command"],
        json!([script(&h, "worker"), "-u", "/acme/jobs", "0"])
    );
    assert_eq!(report["steps"][0]["exit"], json!(0));
    assert_eq!(
        h.yum_calls()[before..],
        ["-q list installed foo", "-y remove worker"]
    );
    assert_eq!(fake.installed("worker"), None);
    assert!(!h.exists("/opt/worker"), "the /opt directory is removed");
    assert!(!h.exists("/etc/worker"), "the /etc directory is removed");
    assert!(h.exists("/opt/foo/bin/zookeeper-deploy"));
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
    let report = h.report();
    let actions: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "undeploy",
            "deploy",
            "uninstall",
            "remove-etc",
            "record-version"
        ]
    );
}

#[tokio::test]
async fn every_etc_dir_of_ours_no_longer_used_is_removed() {
    let h = TestHost::fake("agent-etc").await;
    // A deployment that failed left its (empty) directory; orphan markers whose package is
    // gone; a directory that is not ours.
    let tree = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
  /c : webapp
    version = '1.0'
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    h.deploy_env(&[], &[("ZK_TEST_FAIL", "/acme/c")])
        .await
        .assert_code(1);
    assert!(h.exists("/etc/webapp"));
    assert_eq!(h.etc("webapp"), Vec::<String>::new());
    let etc = h.root().join("etc");
    std::fs::create_dir_all(etc.join("gone")).unwrap();
    std::fs::write(etc.join("gone/acme,x.0.deployed"), "").unwrap();
    std::fs::write(
        etc.join("gone/acme,x.0.script"),
        "/opt/gone/bin/zookeeper-deploy",
    )
    .unwrap();
    std::fs::create_dir_all(etc.join("ssh")).unwrap();
    std::fs::write(etc.join("ssh/sshd_config"), "Port 22\n").unwrap();

    h.tree(&one_app("web", "foo", "1.0", 1), v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert!(!h.exists("/etc/webapp"));
    assert!(!h.exists("/opt/webapp"));
    assert!(!h.exists("/etc/gone"));
    assert!(h.exists("/etc/ssh/sshd_config"));
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
}

// ---------------------------------------------------------------------------------------------
// Failures.

#[tokio::test]
async fn a_failing_deploy_script_halts_the_cluster_and_stops_the_pass() {
    let mut h = TestHost::fake("agent-fail").await;
    let hook_log = h.scratch("after.log");
    h.extra = format!("after = /bin/sh -c 'echo ran >> {}'\n", hook_log.display());
    let first = "
/acme
  /a : foo
    version = '1.0'
    /deploy
      /h1
  /z : worker
    version = '1.0'
    /deploy
      /h1
";
    h.tree(first, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(lines(&hook_log), ["ran"]);
    let second = "
/acme
  /a : foo
    version = '1.0'
    /deploy
      /h1
  /b : foo
    version = '1.0'
    /deploy
      /h1
  /c : webapp
    version = '1.0'
    /deploy
      /h1
";
    h.tree(second, v("r2")).await;
    let fail = [("ZK_TEST_FAIL", "/acme/b")];
    let run = h.deploy_env(&[], &fail).await;
    run.assert_code(1);
    let message = format!("Command failed: {} /acme/b 0", script(&h, "foo"));
    assert!(run.stderr.contains(&message), "{run}");
    // The script's output is in the log.
    assert!(
        run.stderr
            .contains("deploying /acme/b failed: the test asked for it"),
        "{run}"
    );
    assert!(run.stderr.contains("second line of output"), "{run}");

    // The cluster is halted, with the halt record.
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    let halt = hosts["halt"].as_object().expect("a halt record");
    assert_eq!(halt["host"], json!("h1"));
    assert_eq!(halt["name"], json!("h1.example.com"));
    assert_eq!(halt["version"], json!("r2"));
    assert_eq!(halt["error"], json!(message));
    let time = halt["time"].as_f64().expect("a time");
    assert!((time - support::agent::now()).abs() < 60.0, "{time}");

    // Status, report.
    assert_eq!(h.status_text(), "error");
    assert!(h.status().contains(" r2 error"), "{}", h.status());
    let report = h.report();
    assert_eq!(report["outcome"], json!("error"));
    assert_eq!(report["version"], json!("r2"));
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("deploy"));
    assert_eq!(last["command"], json!([script(&h, "foo"), "/acme/b", "0"]));
    assert_eq!(last["exit"], json!(3));
    let output = last["output"].as_str().unwrap();
    assert!(
        output.contains("deploying /acme/b failed: the test asked for it"),
        "{output}"
    );
    assert!(output.contains("second line of output"), "{output}");
    assert!(report["finished"].as_f64().unwrap() >= report["started"].as_f64().unwrap());

    // What ran: the old deployment removed, webapp installed, /acme/a then /acme/b; nothing
    // after: /acme/c not deployed, worker not uninstalled, the after hook not run, the host
    // version unchanged.
    assert_eq!(
        h.deploy_log("worker").last().unwrap(),
        "worker-1.0-1: -u /acme/z 0"
    );
    assert_eq!(
        h.deploy_log("foo")[1..],
        ["foo-1.0-1: /acme/a 0", "foo-1.0-1: /acme/b 0"]
    );
    assert_eq!(h.deploy_log("webapp"), Vec::<String>::new());
    assert!(!mutations(&h).contains(&"-y remove worker".to_string()));
    assert!(h.exists("/opt/worker/bin/zookeeper-deploy"));
    assert!(!h.exists("/etc/foo/acme,b.0.script"));
    assert_eq!(lines(&hook_log), ["ran"]);
    assert_eq!(h.host_version().as_deref(), Some("\"r1\""));
    // The node lock was released, the in-flight record cleared.
    let (data, _) = h.client.get_data("/agent-locks/acme,b").await.unwrap();
    assert_eq!(zkdeployment::zk::decode(&data).get("in-flight"), None);
    assert_eq!(
        h.client.list_children("/agent-locks/acme,b").await.unwrap(),
        Vec::<String>::new()
    );

    // The long-running agent keeps its host node, which carries the error.
    h.set_version(v("r2")).await;
    let mut agent = h.spawn("agent", &[], &fail);
    let node = support::agent::wait_for_async(
        "the host node's error",
        Duration::from_secs(20),
        || async { h.host_node().await.filter(|n| n.contains_key("error")) },
    )
    .await;
    assert_eq!(node["error"], json!(message));
    assert_eq!(node["version"], json!("r1"));
    h.wait_status("r2", &["error"], Duration::from_secs(10))
        .await;
    assert_eq!(h.hosts().await["version"], Value::Null);
    agent.terminate();
    assert_eq!(
        agent.wait(Duration::from_secs(20)).await,
        0,
        "{}",
        agent.output()
    );
}

#[tokio::test]
async fn an_unknown_package_fails_the_install_check() {
    let h = TestHost::fake("agent-nosuch").await;
    h.tree(&one_app("x", "nosuch", "1.0", 1), v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let message = "Failed to install nosuch-1.0 (installed: None)";
    assert!(run.stderr.contains(message), "{run}");
    assert_eq!(
        h.yum_calls(),
        [
            "-q list installed nosuch",
            "-y clean all",
            "-y install nosuch-1.0",
            "-q list installed nosuch"
        ]
    );
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["error"], json!(message));
    assert_eq!(h.status_text(), "error");
    let report = h.report();
    assert_eq!(report["outcome"], json!("error"));
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("install"));
    assert!(last["output"].as_str().unwrap().contains(message), "{last}");
}

#[tokio::test]
async fn a_failing_yum_command_is_reported_with_its_output() {
    let h = TestHost::fake("agent-yum-fails").await;
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    fake.set_fail(Some("^install"));
    h.tree(TREE, v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let message = format!("Command failed: {} -y install foo-1.0", h.yum());
    assert!(run.stderr.contains(&message), "{run}");
    assert_eq!(h.hosts().await["halt"]["error"], json!(message));
    let report = h.report();
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("install"));
    assert_eq!(
        last["command"],
        json!([h.yum(), "-y", "install", "foo-1.0"])
    );
    assert_eq!(last["exit"], json!(1));
    assert_eq!(
        last["output"],
        json!("Error: simulated failure (FAKE_YUM_FAIL)\n")
    );
    assert_eq!(h.deploy_log("foo"), Vec::<String>::new());
}

#[tokio::test]
async fn a_halt_during_a_pass_abandons_it_at_the_next_step() {
    let h = TestHost::fake("agent-abandon").await;
    let tree = "
/acme
  /a : foo
    version = '1.0'
    /deploy
      /h1
  /b : foo
    version = '1.0'
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut agent = h.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "1"), ("ZK_TEST_TIMES", &times_path)],
    );
    wait_for("the first deployment", Duration::from_secs(20), || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    // Another host halts the cluster.
    h.set_version(Value::Null).await;
    assert_eq!(
        agent.wait(Duration::from_secs(30)).await,
        3,
        "{}",
        agent.output()
    );
    // The step in progress finished, no other started.
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: /acme/a 0"]);
    assert_eq!(lines(&times).len(), 2);
    let report = h.report();
    assert_eq!(report["outcome"], json!("abandoned"));
    assert_ne!(h.status_text(), "error");
    assert_ne!(h.status_text(), "done");
    assert_eq!(h.host_version(), None);
    assert_eq!(h.hosts().await.get("halt"), None, "not this host's halt");
}

#[tokio::test]
async fn run_once_is_one_pass_with_the_deploy_exit_codes() {
    let h = TestHost::fake("agent-run-once").await;
    h.tree(TREE, v("r1")).await;
    let config = h.config();
    let config = config.to_str().unwrap();
    support::run_with_async(&["agent", config, "-1"], None, &[])
        .await
        .assert_ok();
    assert_eq!(h.deploy_log("foo").len(), 2);
    assert_eq!(h.status_text(), "done");
    h.tree(TREE, json!(false)).await;
    support::run_with_async(&["agent", "--run-once", config], None, &[])
        .await
        .assert_code(3);
    h.tree(&TREE.replace("'1.0'", "'666'"), v("r2")).await;
    let run = support::run_with_async(&["agent", config, "-1"], None, &[]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("Failed to install foo-666 (installed: 1.0)"),
        "{run}"
    );
}

#[tokio::test]
async fn halted_and_paused_clusters_run_nothing() {
    let h = TestHost::fake("agent-halted").await;
    for (version, word) in [(Value::Null, "halted"), (json!(false), "paused")] {
        h.tree(TREE, version).await;
        let run = h.deploy(&[]).await;
        run.assert_code(3);
        assert!(run.stderr.contains(word), "{run}");
        assert_eq!(h.yum_calls(), Vec::<String>::new());
        assert!(!h.exists("/opt/foo"));
        assert_eq!(h.status(), "", "no status written");
        assert_eq!(h.host_version(), None);
        assert_eq!(h.report(), Value::Null);
        // --force does not override a halt or a pause.
        h.deploy(&["--force"]).await.assert_code(3);
        assert_eq!(h.yum_calls(), Vec::<String>::new());
    }
}

// ---------------------------------------------------------------------------------------------
// Converged hosts, --force, the after hook.

#[tokio::test]
async fn a_converged_host_rewrites_its_status_as_done() {
    let h = TestHost::fake("agent-converged").await;
    h.tree(TREE, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    let calls = h.yum_calls().len();
    // A stale `error` (a human set the version back, or the agent crashed): rewritten.
    let stale = "1422556800.12 4242 r1 error";
    std::fs::write(h.run_dir().join("status"), stale).unwrap();
    let run = h.deploy(&[]).await;
    run.assert_ok();
    assert_eq!(h.status_text(), "done");
    assert_ne!(h.status(), stale);
    assert!(h.status().contains(" r1 done"), "{}", h.status());
    // Nothing ran.
    assert_eq!(h.yum_calls().len(), calls);
    assert_eq!(h.deploy_log("foo").len(), 2);
    // A missing status file is written too.
    std::fs::remove_file(h.run_dir().join("status")).unwrap();
    h.deploy(&[]).await.assert_ok();
    assert_eq!(h.status_text(), "done");
}

#[tokio::test]
async fn force_runs_a_converged_host_again() {
    let h = TestHost::fake("agent-force").await;
    h.tree(TREE, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    h.deploy(&["--force"]).await.assert_ok();
    assert_eq!(
        h.deploy_log("foo"),
        [
            "foo-1.0-1: /acme/web 0",
            "foo-1.0-1: /acme/web 1",
            "foo-1.0-1: /acme/web 0",
            "foo-1.0-1: /acme/web 1"
        ]
    );
    assert_eq!(mutations(&h), ["-y clean all", "-y install foo-1.0"]);
    assert_eq!(h.report()["outcome"], json!("done"));
}

#[tokio::test]
async fn the_after_hook_runs_after_a_successful_pass_only() {
    let mut h = TestHost::fake("agent-after").await;
    let hook_log = h.scratch("after.log");
    h.extra = format!(
        "after = /bin/sh -c 'echo \"$ZKDEPLOYMENT_VERSION $ZKDEPLOYMENT_HOST_ID\" >> {}'\n",
        hook_log.display()
    );
    h.tree(TREE, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(lines(&hook_log), ["r1 h1"]);
    let report = h.report();
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("after"));
    assert_eq!(last["exit"], json!(0));
    // Not after a no-op pass.
    h.deploy(&[]).await.assert_ok();
    assert_eq!(lines(&hook_log), ["r1 h1"]);
    // Not after a halted one.
    h.set_version(Value::Null).await;
    h.deploy(&[]).await.assert_code(3);
    assert_eq!(lines(&hook_log), ["r1 h1"]);
    h.set_version(v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(lines(&hook_log), ["r1 h1", "r2 h1"]);
}

#[tokio::test]
async fn a_failing_after_hook_halts_the_cluster() {
    let mut h = TestHost::fake("agent-after-fails").await;
    h.extra = "after = /bin/sh -c 'echo hook says no; exit 4'\n".into();
    h.tree(TREE, v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let message = "Command failed: /bin/sh -c echo hook says no; exit 4";
    assert!(run.stderr.contains(message), "{run}");
    assert!(run.stderr.contains("hook says no"), "{run}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["error"], json!(message));
    assert_eq!(hosts["halt"]["version"], json!("r1"));
    assert_eq!(h.status_text(), "error");
    let report = h.report();
    assert_eq!(report["outcome"], json!("error"));
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("after"));
    assert_eq!(last["exit"], json!(4));
    assert_eq!(last["output"], json!("hook says no\n"));
    // The deployments themselves were done.
    assert_eq!(h.deploy_log("foo").len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Dry run.

const DRY_FIRST: &str = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
        n = 2
  /old : worker
    version = '1.0'
    /deploy
      /h1
";

const DRY_SECOND: &str = "
/acme
  /web : foo
    version = '1.4'
    /deploy
      /h1
  /new : webapp sub
    version = '1.0'
    /deploy
      /h1
";

#[tokio::test]
async fn dry_run_prints_the_plan_and_changes_nothing() {
    let h = TestHost::fake("agent-dry").await;
    h.tree(DRY_FIRST, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    h.tree(DRY_SECOND, v("r2")).await;

    let root_before = dir_snapshot(&h.root());
    let run_before = dir_snapshot(&h.run_dir());
    let zk_before = h.zk_stats().await;
    let calls_before = h.yum_calls().len();

    let run = h.deploy(&["--dry-run"]).await;
    run.assert_code(10);
    assert!(run.stdout.contains("plan for version r2 on h1:"), "{run}");
    for step in [
        "undeploy /acme/web 1 (foo)",
        "undeploy /acme/old 0 (worker)",
        "install foo 1.4 (installed: 1.0)",
        "install webapp 1.0 (installed: none)",
        "deploy /acme/new 0 (webapp 1.0, subtype sub)",
        "deploy /acme/web 0 (foo 1.4)",
        "uninstall worker",
        "remove /etc/worker",
    ] {
        assert!(run.stdout.contains(step), "{step} missing\n{run}");
    }

    let run = h.deploy(&["--dry-run", "--json"]).await;
    run.assert_code(10);
    let plan: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"));
    assert_eq!(plan["version"], json!("r2"));
    assert_eq!(plan["host"], json!("h1"));
    let steps = plan["steps"].as_array().unwrap();
    let expected = [
        json!({"action": "undeploy", "rpm": "foo", "app": "foo", "path": "/acme/web", "n": 1}),
        json!({"action": "undeploy", "rpm": "worker", "app": "worker", "path": "/acme/old", "n": 0}),
        json!({"action": "install", "rpm": "foo", "version": "1.4"}),
        json!({"action": "install", "rpm": "webapp", "version": "1.0"}),
        json!({"action": "deploy", "rpm": "webapp", "app": "webapp", "path": "/acme/new", "n": 0,
               "version": "1.0", "subtype": "sub"}),
        json!({"action": "deploy", "rpm": "foo", "app": "foo", "path": "/acme/web", "n": 0,
               "version": "1.4"}),
        json!({"action": "uninstall", "rpm": "worker"}),
        json!({"action": "remove-etc", "app": "worker"}),
        json!({"action": "record-version"}),
    ];
    assert_eq!(steps.len(), expected.len(), "{run}");
    for (step, want) in steps.iter().zip(&expected) {
        // The stable keys have these values; other keys may be added.
        for (key, value) in want.as_object().unwrap() {
            assert_eq!(&step[key], value, "{key} of {step}");
        }
    }
    assert_eq!(steps[5]["subtype"], Value::Null);

    // Nothing changed: files, ZooKeeper (not a single write, no host node), only queries.
    assert_eq!(dir_snapshot(&h.root()), root_before);
    assert_eq!(dir_snapshot(&h.run_dir()), run_before);
    assert_eq!(h.zk_stats().await, zk_before);
    assert_eq!(h.host_node().await, None);
    let calls = h.yum_calls();
    assert!(calls.len() > calls_before);
    for call in &calls[calls_before..] {
        assert!(call.starts_with("-q list installed "), "{call}");
    }

    // Once deployed, nothing to do: exit 0 (text and JSON).
    h.deploy(&[]).await.assert_ok();
    let run = h.deploy(&["--dry-run"]).await;
    run.assert_ok();
    assert!(run.stdout.contains("nothing to do"), "{run}");
    let run = h.deploy(&["--dry-run", "--json"]).await;
    run.assert_ok();
    let plan: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(plan["steps"], json!([]));
    assert_eq!(plan["version"], json!("r2"));
    // --force shows the full pass.
    let run = h.deploy(&["--dry-run", "--json", "--force"]).await;
    run.assert_code(10);
    let plan: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(plan["steps"].as_array().unwrap().len(), 3, "{run}");
    // Halted: nothing to do either.
    h.set_version(Value::Null).await;
    h.deploy(&["--dry-run"]).await.assert_ok();
}

#[tokio::test]
async fn dry_run_on_a_new_host_creates_nothing() {
    let h = TestHost::fake("agent-dry-new").await;
    h.tree(TREE, v("r1")).await;
    let zk_before = h.zk_stats().await;
    let run = h.deploy(&["--dry-run", "--json"]).await;
    run.assert_code(10);
    let plan: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(plan["steps"].as_array().unwrap().len(), 4, "{run}");
    assert!(!h.run_dir().exists(), "the run directory was created");
    assert_eq!(dir_snapshot(&h.root()), Default::default());
    assert_eq!(h.zk_stats().await, zk_before);
    assert_eq!(h.yum_calls(), ["-q list installed foo"]);
}

#[tokio::test]
async fn dry_run_reports_a_plan_that_cannot_be_made() {
    let h = TestHost::fake("agent-dry-bad").await;
    let tree = "
/acme
  /a : foo
    version = '1.0'
    /deploy
      /h1
  /b : foo
    version = '2.0'
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    let zk_before = h.zk_stats().await;
    let run = h.deploy(&["--dry-run"]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("Inconsistent versions for foo. '2.0' != '1.0'"),
        "{run}"
    );
    // A dry run does not halt the cluster.
    assert_eq!(h.zk_stats().await, zk_before);
}

// ---------------------------------------------------------------------------------------------
// Errors known before acting: the pass fails, the cluster is halted, and
// nothing at all is installed or deployed, not even the valid deployments.

/// A valid deployment beside the bad one.
const VALID: &str = "
  /good : webapp
    version = '1.0'
    /deploy
      /h1
";

async fn refused(label: &str, role: Option<&str>, bad: &str, message: &str) {
    let mut h = TestHost::fake(label).await;
    h.role = role.map(str::to_string);
    let valid = match role {
        Some(role) => VALID.replace("/h1", &format!("/{role}")),
        None => VALID.to_string(),
    };
    let tree = format!("/cfg\n  foo_version = '1.0'\n/acme{valid}{bad}");
    h.tree(&tree, v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    assert!(run.stderr.contains(message), "{message:?} missing\n{run}");
    assert_eq!(mutations(&h), Vec::<String>::new(), "{run}");
    assert_eq!(h.deploy_log("webapp"), Vec::<String>::new());
    assert_eq!(dir_snapshot(&h.root()), Default::default(), "{run}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null, "{run}");
    assert!(
        hosts["halt"]["error"].as_str().unwrap().contains(message),
        "{hosts:?}"
    );
    assert_eq!(h.status_text(), "error");
    let report = h.report();
    assert_eq!(report["outcome"], json!("error"));
    assert!(
        report["error"].as_str().unwrap().contains(message),
        "{report}"
    );
    assert_eq!(report["steps"], json!([]));
}

#[tokio::test]
async fn inconsistent_versions_are_refused() {
    let bad = "
  /a : foo
    version = '1.0'
    /deploy
      /h1
  /b : foo
    version = '2.0'
    /deploy
      /h1
";
    refused(
        "err-inconsistent",
        None,
        bad,
        "Inconsistent versions for foo. '2.0' != '1.0'",
    )
    .await;
}

#[tokio::test]
async fn conflicting_deployments_are_refused() {
    let bad = "
  /a : foo
    version = '1.0'
    /deploy
      /h1
      /h1.example.com
";
    refused(
        "err-conflict",
        None,
        bad,
        "Conflicting deployments for /acme/a. Can't deploy to h1.example.com and h1.",
    )
    .await;
}

#[tokio::test]
async fn host_based_deployments_are_refused_on_a_host_with_a_role() {
    let bad = "
  /a : foo
    version = '1.0'
    /deploy
      /h1
";
    refused(
        "err-role",
        Some("web"),
        bad,
        "Found a host-based deployment at /acme/a/deploy/h1 but the host has a role, web.",
    )
    .await;
}

#[tokio::test]
async fn a_type_of_three_words_is_refused() {
    let bad = "
  /a : foo sub extra
    version = '1.0'
    /deploy
      /h1
";
    refused("err-type3", None, bad, "Invalid node type: 'foo sub extra'").await;
}

#[tokio::test]
async fn a_missing_type_is_refused() {
    let bad = "
  /a
    version = '1.0'
    /deploy
      /h1
";
    refused("err-notype", None, bad, "No type for /acme/a").await;
}

#[tokio::test]
async fn a_missing_version_is_refused() {
    let bad = "
  /a : foo
    /deploy
      /h1
";
    refused("err-nover", None, bad, "No version found for /acme/a").await;
}

#[tokio::test]
async fn a_version_that_is_not_a_string_is_refused() {
    let bad = "
  /a : foo
    version = 2.0
    /deploy
      /h1
";
    refused(
        "err-float",
        None,
        bad,
        "Version of /acme/a is not a string: 2.0",
    )
    .await;
}

#[tokio::test]
async fn names_that_are_not_plain_are_refused() {
    for (i, kind) in ["../evil", "a/b"].into_iter().enumerate() {
        let bad = format!(
            "
  /a : {kind}
    version = '1.0'
    /deploy
      /h1
"
        );
        refused(
            &format!("err-name-{i}"),
            None,
            &bad,
            &format!("invalid package name '{kind}' at /acme/a"),
        )
        .await;
    }
}

#[tokio::test]
async fn a_bad_n_is_refused() {
    for (i, (n, shown)) in [("'x'", "x"), ("-1", "-1"), ("1.5", "1.5")]
        .into_iter()
        .enumerate()
    {
        let bad = format!(
            "
  /a : foo
    version = '1.0'
    /deploy
      /h1
        n = {n}
"
        );
        refused(
            &format!("err-n-{i}"),
            None,
            &bad,
            &format!("Invalid n for /acme/a/deploy/h1: {shown}"),
        )
        .await;
    }
}

#[tokio::test]
async fn a_dangling_property_link_is_refused() {
    let bad = "
  /a : foo
    version => /cfg no_such_property
    /deploy
      /h1
";
    refused(
        "err-link-prop",
        None,
        bad,
        "bad property link version => /cfg no_such_property",
    )
    .await;
    let bad = "
  /a : foo
    version => /nowhere
    /deploy
      /h1
";
    refused("err-link-node", None, bad, "no node /nowhere").await;
}

#[tokio::test]
async fn a_property_link_loop_is_refused() {
    let bad = "
  /a : foo
    version => /acme/b
    /deploy
      /h1
  /b
    version => /acme/a
";
    refused("err-link-loop", None, bad, "link loop").await;
}

#[tokio::test]
async fn type_version_and_n_follow_property_links() {
    let h = TestHost::fake("agent-links").await;
    let tree = "
/cfg
  foo_version = '1.4'
  kind = 'foo'
  count = 2
/acme
  /web
    type => /cfg kind
    version => /cfg foo_version
    /deploy
      /h1
        n => /cfg count
";
    h.tree(tree, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(mutations(&h), ["-y clean all", "-y install foo-1.4"]);
    assert_eq!(
        h.deploy_log("foo"),
        ["foo-1.4-1: /acme/web 0", "foo-1.4-1: /acme/web 1"]
    );
}

// ---------------------------------------------------------------------------------------------
// The deploy scripts' environment.

/// Parses what the payload wrote to `ZK_TEST_ENV`: per call, the sorted environment lines,
/// then the properties file (a JSON object over several lines).
fn env_records(text: &str) -> Vec<(Vec<String>, Option<Value>)> {
    let mut out: Vec<(Vec<String>, Option<Value>)> = Vec::new();
    let mut json = String::new();
    let mut new_record = true;
    for line in text.lines() {
        // The properties file may lack a final newline: `}` then runs into the next record.
        if !json.is_empty() && line.starts_with('}') && line != "}" {
            json.push_str("}\n");
            out.last_mut().unwrap().1 = Some(serde_json::from_str(&json).unwrap());
            json.clear();
            out.push((vec![line[1..].to_string()], None));
            new_record = false;
            continue;
        }
        if !json.is_empty() || line.starts_with('{') {
            json.push_str(line);
            json.push('\n');
            if line == "}" {
                out.last_mut().unwrap().1 = Some(serde_json::from_str(&json).unwrap());
                json.clear();
                new_record = true;
            }
            continue;
        }
        if new_record || line.starts_with("HOME=") {
            out.push((Vec::new(), None));
            new_record = false;
        }
        out.last_mut().unwrap().0.push(line.to_string());
    }
    out
}

#[tokio::test]
async fn deploy_scripts_get_their_environment_and_a_properties_file() {
    let mut h = TestHost::fake("agent-env").await;
    h.role = Some("web".into());
    let tree = "
/cfg
  foo_version = '1.0'
/acme
  /site : foo sub
    version => /cfg foo_version
    threads = 4
    /deploy
      /web
";
    h.tree(tree, json!(42)).await;
    let env_file = h.scratch("env.txt");
    let env_path = env_file.display().to_string();
    let home = h.scratch("home").display().to_string();
    h.deploy_env(&[], &[("ZK_TEST_ENV", &env_path), ("HOME", &home)])
        .await
        .assert_ok();
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: -r sub /acme/site 0"]);
    let records = env_records(&std::fs::read_to_string(&env_file).unwrap());
    assert_eq!(records.len(), 1, "{records:?}");
    let (env, props) = &records[0];
    let props_file = env
        .iter()
        .find_map(|l| l.strip_prefix("ZKDEPLOYMENT_PROPERTIES="))
        .expect("ZKDEPLOYMENT_PROPERTIES")
        .to_string();
    assert_eq!(
        env,
        &[
            format!("HOME={home}"),
            format!("ZC_ZK_CONNECTION_STRING={}", h.conn),
            "ZKDEPLOYMENT_HOST_ID=h1".to_string(),
            "ZKDEPLOYMENT_HOST_NAME=h1.example.com".to_string(),
            format!("ZKDEPLOYMENT_PROPERTIES={props_file}"),
            "ZKDEPLOYMENT_ROLE=web".to_string(),
            format!("ZKDEPLOYMENT_ROOT={}", h.root().display()),
            "ZKDEPLOYMENT_VERSION=42".to_string(),
        ]
    );
    // The application node's properties, the link resolved.
    assert_eq!(
        props.as_ref().unwrap(),
        &json!({"type": "foo sub", "version": "1.0", "threads": 4})
    );
}

#[tokio::test]
async fn deploy_scripts_get_home_root_by_default_and_no_role_without_one() {
    let h = TestHost::fake("agent-env-home").await;
    h.tree(TREE, v("r1")).await;
    let env_file = h.scratch("env.txt");
    let env_path = env_file.display().to_string();
    h.deploy_env(&[], &[("ZK_TEST_ENV", &env_path), ("HOME", "")])
        .await
        .assert_ok();
    let records = env_records(&std::fs::read_to_string(&env_file).unwrap());
    assert_eq!(records.len(), 2, "{records:?}");
    for (env, props) in &records {
        assert!(env.contains(&"HOME=/root".to_string()), "{env:?}");
        assert!(
            env.contains(&"ZKDEPLOYMENT_VERSION=r1".to_string()),
            "{env:?}"
        );
        assert!(
            !env.iter().any(|l| l.starts_with("ZKDEPLOYMENT_ROLE")),
            "{env:?}"
        );
        assert_eq!(
            props.as_ref().unwrap(),
            &json!({"type": "foo", "version": "1.0", "threads": 4})
        );
    }
    // Undeploying: the same environment (the version being deployed), no properties file.
    std::fs::remove_file(&env_file).unwrap();
    h.tree(&TREE.replace("n = 2", "n = 1"), v("r2")).await;
    h.deploy_env(&[], &[("ZK_TEST_ENV", &env_path), ("HOME", "")])
        .await
        .assert_ok();
    let records = env_records(&std::fs::read_to_string(&env_file).unwrap());
    assert_eq!(records.len(), 2, "{records:?}");
    let (env, props) = &records[0];
    assert_eq!(
        env,
        &[
            "HOME=/root".to_string(),
            format!("ZC_ZK_CONNECTION_STRING={}", h.conn),
            "ZKDEPLOYMENT_HOST_ID=h1".to_string(),
            "ZKDEPLOYMENT_HOST_NAME=h1.example.com".to_string(),
            format!("ZKDEPLOYMENT_ROOT={}", h.root().display()),
            "ZKDEPLOYMENT_VERSION=r2".to_string(),
        ]
    );
    assert_eq!(props, &None);
    assert_eq!(h.deploy_log("foo")[2], "foo-1.0-1: -u /acme/web 1");
}

// ---------------------------------------------------------------------------------------------
// Registration.

#[tokio::test]
async fn the_host_node_exists_while_the_agent_runs() {
    let mut h = TestHost::fake("agent-register").await;
    h.role = Some("web".into());
    let tree = "
/acme
  /site : foo
    version = '1.0'
    /deploy
      /web
";
    h.tree(tree, v("r1")).await;
    let mut agent = h.spawn("deploy", &[], &[("ZK_TEST_SLEEP", "1")]);
    let pid = agent.pid();
    let node = support::agent::wait_for_async("the host node", Duration::from_secs(20), || async {
        h.host_node().await
    })
    .await;
    assert_eq!(node["name"], json!("h1.example.com"));
    assert_eq!(node["version"], Value::Null);
    assert_eq!(node["role"], json!("web"));
    assert_eq!(node["pid"], json!(pid));
    let stat = h.client.check_stat("/hosts/h1").await.unwrap().unwrap();
    assert_ne!(stat.ephemeral_owner, 0, "the host node is ephemeral");
    assert_eq!(
        agent.wait(Duration::from_secs(30)).await,
        0,
        "{}",
        agent.output()
    );
    assert_eq!(
        h.host_node().await,
        None,
        "the host node goes with the agent"
    );
}

#[tokio::test]
async fn another_running_agent_is_refused() {
    let h = TestHost::fake("agent-another").await;
    h.tree(TREE, v("r1")).await;
    let props = json!({"name": "h1.example.com", "pid": std::process::id()});
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    h.client
        .create("/hosts/h1", props.to_string().as_bytes(), &ephemeral)
        .await
        .unwrap();
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("Another agent is running"), "{run}");
    assert_eq!(h.yum_calls(), Vec::<String>::new());
    assert_eq!(h.deploy_log("foo"), Vec::<String>::new());
    // The other agent's node is untouched.
    assert_eq!(
        h.host_node().await,
        Some(props.as_object().unwrap().clone())
    );
}

#[tokio::test]
async fn a_legacy_persistent_host_node_gives_the_host_version() {
    let h = TestHost::fake("agent-legacy").await;
    h.tree(TREE, v("r1")).await;
    h.client
        .create(
            "/hosts/h1",
            br#"{"name":"h1.example.com","version":"r1"}"#,
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let run = h.deploy(&[]).await;
    run.assert_ok();
    // The host was at r1 already: nothing ran.
    assert_eq!(h.yum_calls(), Vec::<String>::new());
    assert_eq!(h.status_text(), "done");
    // The persistent node was replaced by the agent's ephemeral one, gone with its session.
    assert_eq!(h.host_node().await, None);
    // The version was kept: the next pass is converged too.
    assert_eq!(h.host_version().as_deref(), Some("\"r1\""));
    h.deploy(&[]).await.assert_ok();
    assert_eq!(h.yum_calls(), Vec::<String>::new());
}

#[tokio::test]
async fn a_node_left_by_a_dead_agent_is_waited_out() {
    let h = TestHost::fake("agent-dead").await;
    h.tree(TREE, v("r1")).await;
    // The dead agent's session, still open.
    let other = support::connect(&h.conn).await;
    let props = json!({"name": "h1.example.com", "pid": dead_pid(), "version": "r0"});
    other
        .create(
            "/hosts/h1",
            props.to_string().as_bytes(),
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut agent = h.spawn("deploy", &[], &[]);
    let output = wait_for("the agent to wait", Duration::from_secs(20), || {
        let out = agent.output();
        out.contains("left by a previous agent").then_some(out)
    })
    .await;
    assert!(agent.running(), "{output}");
    // The old session ends: the agent goes on at once.
    drop(other);
    assert_eq!(
        agent.wait(Duration::from_secs(30)).await,
        0,
        "{}",
        agent.output()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(h.deploy_log("foo").len(), 2);
    assert_eq!(h.status_text(), "done");
}

// ---------------------------------------------------------------------------------------------
// Output.

#[tokio::test]
async fn command_output_is_logged_as_it_comes() {
    let mut h = TestHost::fake("agent-stream").await;
    // The output lines do not appear in the command line, which is logged too.
    h.extra = "after = /bin/sh -c 'echo line $((1)); sleep 2; echo line $((1+1))'\n".into();
    h.tree(TREE, v("r1")).await;
    let mut agent = h.spawn("deploy", &[], &[]);
    let output = wait_for("the first line", Duration::from_secs(30), || {
        let out = agent.output();
        out.contains("line 1\n").then_some(out)
    })
    .await;
    assert!(!output.contains("line 2\n"), "{output}");
    assert!(agent.running(), "{output}");
    assert_eq!(agent.wait(Duration::from_secs(30)).await, 0);
    let output = agent.output();
    let first = output.find("line 1\n").unwrap();
    let second = output.find("line 2\n").expect("the second line");
    assert!(first < second, "{output}");
    // The command line is logged before its output.
    let command = output
        .find("/bin/sh -c echo line $((1)); sleep 2")
        .expect("the command");
    assert!(command < first, "{output}");
}
