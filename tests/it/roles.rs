//! Hosts with a role and a role controller (docs/design.md, "A pass", role controllers): the
//! controller package declared by `/roles/<role>` is installed, changed, replaced
//! and removed; its `starting-deployments` and `ending-deployments` run around the
//! installs and deployments, all inside the persistent role lock `/role-locks/<role>`
//! (which the tests create, as operators do); node locks are not used; a halt does not
//! abandon a pass that has started; a failing host keeps its lock request.
//!
//! The test packages' scripts log to `ZK_DEPLOY_LOG` (one file per host here, so the order of
//! controller scripts and deploy scripts shows); `ZK_TEST_FAIL_ROLE=starting|ending` makes
//! the controller's scripts fail.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{lines, v, wait_for, wait_for_async, Pm, TestHost};
use support::rpm::FakeYum;
use zkdeployment::zk::decode;
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(30);
const ROLE: &str = "web-role";
const LOCK: &str = "/role-locks/web-role";

/// `/roles/web-role : RC` at `version` (no `/roles/web-role` if `rc` is None; `/roles` is
/// always there, so importing trims a former declaration) and the application nodes `apps`.
fn tree(rc: Option<(&str, &str)>, apps: &str) -> String {
    let mut text = String::from("/roles\n");
    if let Some((rpm, version)) = rc {
        text.push_str(&format!("  /{ROLE} : {rpm}\n    version = '{version}'\n"));
    }
    text.push_str(apps);
    text
}

/// `/acme/<name> : foo` 1.0 deployed to the role, with `n` instances, for each (name, n).
fn apps(nodes: &[(&str, u32)]) -> String {
    let mut text = String::from("/acme\n");
    for (name, n) in nodes {
        text.push_str(&format!(
            "  /{name} : foo\n    version = '1.0'\n    /deploy\n      /{ROLE}\n        n = {n}\n"
        ));
    }
    text
}

/// A host of the role on `conn`.
async fn role_host(conn: &str, id: &str) -> TestHost {
    let mut h = TestHost::on(conn, id, Pm::Fake(FakeYum::new())).await;
    h.role = Some(ROLE.into());
    h
}

/// Creates `/role-locks/web-role` (operators do).
async fn create_role_lock(h: &TestHost) {
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for path in ["/role-locks", LOCK] {
        match h.client.create(path, b"", &open).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("cannot create {path}: {e}"),
        }
    }
}

/// The role lock's requests: (name, data), in order.
async fn requests(h: &TestHost) -> Vec<(String, Value)> {
    let mut names = h.client.list_children(LOCK).await.unwrap();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let (data, _) = h.client.get_data(&format!("{LOCK}/{name}")).await.unwrap();
        out.push((name, Value::Object(decode(&data))));
    }
    out
}

/// The host's script log (`ZK_DEPLOY_LOG`).
fn log(h: &TestHost) -> Vec<String> {
    lines(&h.scratch("deploy.log"))
}

fn log_env(h: &TestHost) -> String {
    h.scratch("deploy.log").display().to_string()
}

/// Yum calls that change something.
fn mutations(h: &TestHost) -> Vec<String> {
    h.yum_calls()
        .into_iter()
        .filter(|c| !c.starts_with("-q list installed "))
        .collect()
}

fn controller_script(h: &TestHost, rc: &str, name: &str) -> String {
    h.root()
        .join("opt")
        .join(rc)
        .join("bin")
        .join(name)
        .display()
        .to_string()
}

fn actions(h: &TestHost) -> Vec<String> {
    h.report()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_role_controller_is_installed_changed_replaced_and_removed() {
    let conn = support::chroot("roles-lifecycle").await;
    let h = role_host(&conn, "h1").await;
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    create_role_lock(&h).await;
    let web = apps(&[("web", 1)]);
    let env = log_env(&h);
    let env = [("ZK_DEPLOY_LOG", env.as_str())];

    // First pass: the controller is installed, its scripts run around the deployment.
    h.tree(&tree(Some(("webrc", "1.0")), &web), v("r1")).await;
    h.deploy_env(&[], &env).await.assert_ok();
    assert_eq!(
        log(&h),
        [
            "webrc-1.0-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "webrc-1.0-1 ending-deployments: /roles/web-role",
        ]
    );
    assert_eq!(
        mutations(&h),
        ["-y clean all", "-y install webrc-1.0", "-y install foo-1.0"]
    );
    assert_eq!(
        actions(&h),
        [
            "role-controller",
            "starting-deployments",
            "install",
            "deploy",
            "ending-deployments",
            "record-version"
        ]
    );
    let report = h.report();
    assert_eq!(
        report["steps"][1]["command"],
        json!([
            controller_script(&h, "webrc", "starting-deployments"),
            "/roles/web-role"
        ])
    );
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.host_version().as_deref(), Some("\"r1\""));
    // The role lock was taken and left; no node lock was taken.
    assert_eq!(requests(&h).await, []);
    assert_eq!(h.client.check_stat("/agent-locks").await.unwrap(), None);

    // A new version of the controller.
    h.tree(&tree(Some(("webrc", "1.1")), &web), v("r2")).await;
    let before = mutations(&h).len();
    h.deploy_env(&[], &env).await.assert_ok();
    assert_eq!(
        mutations(&h)[before..],
        ["-y clean all", "-y install webrc-1.1"]
    );
    assert_eq!(fake.installed("webrc").as_deref(), Some("0:1.1-1"));
    assert_eq!(
        log(&h)[3..],
        [
            "webrc-1.1-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "webrc-1.1-1 ending-deployments: /roles/web-role",
        ]
    );

    // Another controller package replaces it.
    h.tree(&tree(Some(("otherrc", "1.0")), &web), v("r3")).await;
    let before = mutations(&h).len();
    h.deploy_env(&[], &env).await.assert_ok();
    assert_eq!(
        mutations(&h)[before..],
        ["-y remove webrc", "-y clean all", "-y install otherrc-1.0"]
    );
    assert!(!h.exists("/opt/webrc"));
    assert_eq!(fake.installed("webrc"), None);
    assert_eq!(
        log(&h)[6..],
        [
            "otherrc-1.0-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "otherrc-1.0-1 ending-deployments: /roles/web-role",
        ]
    );

    // No /roles/web-role: the controller goes; the role's deployments go on, under node
    // locks now.
    h.tree(&tree(None, &web), v("r4")).await;
    let before = mutations(&h).len();
    h.deploy_env(&[], &env).await.assert_ok();
    assert_eq!(mutations(&h)[before..], ["-y remove otherrc"]);
    assert!(!h.exists("/opt/otherrc"));
    assert_eq!(log(&h)[9..], ["foo-1.0-1: /acme/web 0"]);
    assert_eq!(actions(&h), ["role-controller", "deploy", "record-version"]);
    assert!(h
        .client
        .check_stat("/agent-locks/acme,web")
        .await
        .unwrap()
        .is_some());
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.host_version().as_deref(), Some("\"r4\""));
    assert_eq!(h.hosts().await["version"], v("r4"));
}

/// A failing controller script: the cluster halts, the error names the command, the host
/// keeps its role lock request.
async fn failing_script(label: &str, which: &str) -> TestHost {
    let conn = support::chroot(label).await;
    let h = role_host(&conn, "h1").await;
    create_role_lock(&h).await;
    h.tree(&tree(Some(("webrc", "1.0")), &apps(&[("web", 1)])), v("r1"))
        .await;
    let env = log_env(&h);
    let run = h
        .deploy_env(
            &[],
            &[
                ("ZK_DEPLOY_LOG", env.as_str()),
                ("ZK_TEST_FAIL_ROLE", which),
            ],
        )
        .await;
    run.assert_code(1);
    let script = controller_script(&h, "webrc", &format!("{which}-deployments"));
    let message = format!("Command failed: {script} /roles/web-role");
    assert!(run.stderr.contains(&message), "{run}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["host"], json!("h1"));
    assert_eq!(hosts["halt"]["error"], json!(message));
    assert_eq!(h.status_text(), "error");
    assert_eq!(h.host_version(), None);
    let report = h.report();
    assert_eq!(report["outcome"], json!("error"));
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!(format!("{which}-deployments")));
    assert_eq!(last["command"], json!([script, "/roles/web-role"]));
    assert_eq!(last["exit"], json!(4));
    assert!(
        last["output"].as_str().unwrap().contains(&format!(
            "{which}-deployments failed: the test asked for it"
        )),
        "{last}"
    );
    assert_eq!(
        requests(&h).await,
        [(
            "lr-0000000000".to_string(),
            json!({"requestor": "h1", "hostname": "h1.example.com"})
        )]
    );
    h
}

#[tokio::test]
async fn a_failing_starting_deployments_halts_before_anything_is_deployed() {
    let h = failing_script("roles-starting-fails", "starting").await;
    assert_eq!(
        log(&h),
        ["webrc-1.0-1 starting-deployments: /roles/web-role"]
    );
    assert_eq!(mutations(&h), ["-y clean all", "-y install webrc-1.0"]);
    assert_eq!(h.etc("foo"), Vec::<String>::new());
}

#[tokio::test]
async fn a_failing_ending_deployments_halts_after_the_deployments() {
    let h = failing_script("roles-ending-fails", "ending").await;
    assert_eq!(
        log(&h),
        [
            "webrc-1.0-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "webrc-1.0-1 ending-deployments: /roles/web-role",
        ]
    );
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
}

#[tokio::test]
async fn a_halt_by_another_host_does_not_stop_a_controlled_pass() {
    let conn = support::chroot("roles-halt").await;
    let h = role_host(&conn, "h1").await;
    create_role_lock(&h).await;
    let env = log_env(&h);
    h.tree(
        &tree(Some(("webrc", "1.0")), &apps(&[("a", 2), ("b", 1)])),
        v("r1"),
    )
    .await;
    h.deploy_env(&[], &[("ZK_DEPLOY_LOG", env.as_str())])
        .await
        .assert_ok();
    // r2 drops /acme/a: two undeployments, then /acme/b, each script taking a while.
    h.tree(&tree(Some(("webrc", "1.0")), &apps(&[("b", 1)])), v("r2"))
        .await;
    let times = h.scratch("times.txt");
    let times_path = times.display().to_string();
    let mut agent = h.spawn(
        "deploy",
        &[],
        &[
            ("ZK_DEPLOY_LOG", env.as_str()),
            ("ZK_TEST_SLEEP", "0.5"),
            ("ZK_TEST_TIMES", &times_path),
        ],
    );
    wait_for("the first undeployment", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    // Another host halts the cluster.
    let record = json!({"host": "h9", "name": "h9.example.com", "version": "r2",
                        "error": "h9 failed", "time": 1.0});
    let (data, _) = h.client.get_data("/hosts").await.unwrap();
    let mut props = decode(&data);
    props.insert("version".into(), Value::Null);
    props.insert("halt".into(), record.clone());
    h.client
        .set_data("/hosts", &serde_json::to_vec(&props).unwrap(), None)
        .await
        .unwrap();
    // The pass runs to its end and records the version; the cluster stays halted.
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert_eq!(
        log(&h)[5..],
        [
            "foo-1.0-1: -u /acme/a 0",
            "foo-1.0-1: -u /acme/a 1",
            "webrc-1.0-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/b 0",
            "webrc-1.0-1 ending-deployments: /roles/web-role",
        ]
    );
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.host_version().as_deref(), Some("\"r2\""));
    assert_eq!(h.report()["outcome"], json!("done"));
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"], record);
    assert_eq!(requests(&h).await, []);
}

#[tokio::test]
async fn the_role_lock_node_must_exist() {
    let conn = support::chroot("roles-no-lock").await;
    let h = role_host(&conn, "h1").await;
    h.tree(&tree(Some(("webrc", "1.0")), &apps(&[("web", 1)])), v("r1"))
        .await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let message = "role lock node '/role-locks/web-role' must exist";
    assert!(run.stderr.contains(message), "{run}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["error"], json!(message));
    assert_eq!(h.status_text(), "error");
    assert_eq!(h.report()["error"], json!(message));
    // Known before acting: nothing was installed or deployed.
    assert_eq!(mutations(&h), Vec::<String>::new());
    assert_eq!(h.deploy_log("foo"), Vec::<String>::new());
    assert_eq!(h.client.check_stat("/role-locks").await.unwrap(), None);
}

/// Waits until `h` (running `agent`) waits for the role lock behind another request.
async fn wait_blocked(h: &TestHost, agent: &support::agent::Spawned, version: &str) {
    h.wait_status(version, &["waiting for the role lock"], LIMIT)
        .await;
    wait_for_async("two role lock requests", LIMIT, || async {
        (requests(h).await.len() == 2).then_some(())
    })
    .await;
    wait_for("the waiting message", LIMIT, || {
        agent
            .output()
            .contains("waiting for the role lock /role-locks/web-role, held by h1.example.com (h1)")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_failed_host_keeps_the_role_locked_until_it_succeeds_or_an_operator_steps_in() {
    let conn = support::chroot("roles-keep").await;
    let h1 = role_host(&conn, "h1").await;
    let h2 = role_host(&conn, "h2").await;
    create_role_lock(&h1).await;
    let text = tree(Some(("webrc", "1.0")), &apps(&[("web", 1)]));
    let (env1, env2) = (log_env(&h1), log_env(&h2));
    let fail = [
        ("ZK_DEPLOY_LOG", env1.as_str()),
        ("ZK_TEST_FAIL", "/acme/web"),
    ];

    // h1 fails and keeps its request.
    h1.tree(&text, v("r1")).await;
    h1.deploy_env(&[], &fail).await.assert_code(1);
    let kept = requests(&h1).await;
    assert_eq!(
        kept,
        [(
            "lr-0000000000".to_string(),
            json!({"requestor": "h1", "hostname": "h1.example.com"})
        )]
    );
    // An operator resumes the cluster; h2 blocks behind h1's request.
    h1.set_version(v("r2")).await;
    let mut agent = h2.spawn("deploy", &[], &[("ZK_DEPLOY_LOG", env2.as_str())]);
    wait_blocked(&h2, &agent, "r2").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(agent.running(), "{}", agent.output());
    assert!(
        !log(&h2).iter().any(|l| l.contains("starting-deployments")),
        "{:?}",
        log(&h2)
    );
    // h1 succeeds on its next pass, re-adopting its request; then h2 goes on.
    let run = h1
        .deploy_env(&[], &[("ZK_DEPLOY_LOG", env1.as_str())])
        .await;
    run.assert_ok();
    assert!(
        run.stderr
            .contains("re-adopting our earlier role lock request lr-0000000000"),
        "{run}"
    );
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert_eq!(
        log(&h2),
        [
            "webrc-1.0-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "webrc-1.0-1 ending-deployments: /roles/web-role",
        ]
    );
    assert_eq!(requests(&h1).await, []);

    // h1 fails again; this time an operator deletes its request.
    h1.set_version(v("r3")).await;
    h1.deploy_env(&[], &fail).await.assert_code(1);
    let kept = requests(&h1).await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].1["requestor"], json!("h1"));
    h1.set_version(v("r4")).await;
    let mut agent = h2.spawn("deploy", &[], &[("ZK_DEPLOY_LOG", env2.as_str())]);
    wait_blocked(&h2, &agent, "r4").await;
    h1.client
        .delete(&format!("{LOCK}/{}", kept[0].0), None)
        .await
        .unwrap();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert_eq!(h2.status_text(), "done");
    assert_eq!(h2.host_version().as_deref(), Some("\"r4\""));
    assert_eq!(requests(&h1).await, []);
    // Controlled hosts never took a node lock.
    assert_eq!(h1.client.check_stat("/agent-locks").await.unwrap(), None);
}

#[tokio::test]
async fn a_host_based_deployment_on_a_role_host_is_refused_before_acting() {
    let conn = support::chroot("roles-host-based").await;
    let h = role_host(&conn, "h1").await;
    create_role_lock(&h).await;
    let text = format!(
        "{}  /x : webapp\n    version = '1.0'\n    /deploy\n      /h1\n",
        apps(&[("web", 1)])
    );
    h.tree(&tree(Some(("webrc", "1.0")), &text), v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let message =
        "Found a host-based deployment at /acme/x/deploy/h1 but the host has a role, web-role.";
    assert!(run.stderr.contains(message), "{run}");
    assert_eq!(h.hosts().await["halt"]["error"], json!(message));
    assert_eq!(mutations(&h), Vec::<String>::new());
    assert!(!h.exists("/opt/webrc"));
    assert_eq!(requests(&h).await, []);
}
