//! The agent with the real package manager: dnf on a sandboxed installroot with the test
//! RPMs (`support::rpm::Sandbox`). Install, upgrade, downgrade (dnf's install goes to a lower
//! version directly), removal when the application leaves the tree, and a missing package
//! (dnf exits 1). Skipped, with a message, when dnf & co. are missing and `CI` is not set.

use crate::support;

use serde_json::{json, Value};
use support::agent::{v, Pm, TestHost};
use support::rpm::Sandbox;

async fn host(label: &str) -> Option<TestHost> {
    let sandbox = Sandbox::try_new()?;
    let conn = support::chroot(label).await;
    Some(TestHost::on(&conn, "h1", Pm::Dnf(sandbox)).await)
}

fn rpm_q(h: &TestHost, name: &str) -> Option<String> {
    let Pm::Dnf(sandbox) = &h.pm else {
        unreachable!()
    };
    sandbox.rpm_q(name)
}

#[tokio::test]
async fn install_upgrade_downgrade_and_remove_with_dnf() {
    let Some(h) = host("dnf-cycle").await else {
        return;
    };
    let first = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
  /jobs : worker
    version = '1.0'
    /deploy
      /h1
  /cache : cache-1.2
    /deploy
      /h1
";
    h.tree(first, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(rpm_q(&h, "foo").as_deref(), Some("1.0-1"));
    assert_eq!(rpm_q(&h, "worker").as_deref(), Some("1.0-1"));
    assert_eq!(rpm_q(&h, "cache-1.2").as_deref(), Some("1.2-1"));
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: /acme/web 0"]);
    assert_eq!(
        h.deploy_log("cache-1.2"),
        ["cache-1.2-1.2-1: /acme/cache 0"]
    );
    assert_eq!(
        h.etc("cache"),
        ["acme,cache.0.deployed", "acme,cache.0.script"]
    );
    assert_eq!(h.status_text(), "done");

    // Upgrade.
    let second = first.replace(
        "version = '1.0'\n    /deploy\n      /h1\n  /jobs",
        "version = '2.0'\n    /deploy\n      /h1\n  /jobs",
    );
    h.tree(&second, v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(rpm_q(&h, "foo").as_deref(), Some("2.0-1"));
    assert_eq!(
        h.deploy_log("foo").last().unwrap(),
        "foo-2.0-1: /acme/web 0"
    );

    // Downgrade, and worker leaves the tree.
    let third = "
/acme
  /web : foo
    version = '1.4'
    /deploy
      /h1
  /cache : cache-1.2
    /deploy
      /h1
";
    h.tree(third, v("r3")).await;
    let before = h.yum_calls().len();
    h.deploy(&[]).await.assert_ok();
    assert_eq!(rpm_q(&h, "foo").as_deref(), Some("1.4-1"));
    assert_eq!(
        h.deploy_log("foo").last().unwrap(),
        "foo-1.4-1: /acme/web 0"
    );
    assert_eq!(
        h.yum_calls()[before..],
        [
            "-q list installed cache-1.2",
            "-q list installed foo",
            "-y clean all",
            "-y install foo-1.4",
            "-q list installed foo",
            "-y remove worker"
        ]
    );
    assert_eq!(rpm_q(&h, "worker"), None);
    assert!(!h.exists("/opt/worker"));
    assert!(!h.exists("/etc/worker"));
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.host_version().as_deref(), Some("\"r3\""));
}

#[tokio::test]
async fn a_missing_package_fails_the_pass_with_dnf() {
    let Some(h) = host("dnf-missing").await else {
        return;
    };
    let tree = "
/acme
  /x : nosuch
    version = '1.0'
    /deploy
      /h1
";
    h.tree(tree, v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let message = format!("Command failed: {} -y install nosuch-1.0", h.yum());
    assert!(run.stderr.contains(&message), "{run}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["error"], json!(message));
    assert_eq!(h.status_text(), "error");
    let report = h.report();
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("install"));
    assert_eq!(last["exit"], json!(1));
    assert!(!last["output"].as_str().unwrap().is_empty(), "{last}");
}
