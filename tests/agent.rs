//! The agent converging one host for real: a real ZooKeeper, real processes for deploy
//! scripts, the yum 3 fake (and, in `agent_dnf.rs`, the real dnf).

mod support;

use serde_json::json;
use support::agent::{v, TestHost};

const TREE: &str = "
/acme
  /web : foo
    version = '1.0'
    threads = 4
    /deploy
      /h1
        n = 2
";

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
}
