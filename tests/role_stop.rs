//! A defect the soak (`tests/soak/`, issue 15) found: an agent waiting for its role's
//! persistent lock (held, e.g., by a host that failed and keeps its request until it
//! succeeds) ignored SIGTERM until it got the lock, possibly forever (systemd then kills it
//! after `TimeoutStopSec`). A stopping agent starts no new step: it now withdraws its waiting
//! request and exits 0 at once.

mod support;

use std::time::Duration;

use serde_json::json;
use support::agent::{v, wait_for, Pm, TestHost};
use support::rpm::FakeYum;
use zookeeper_client::{Acls, CreateMode};

const LOCK: &str = "/role-locks/web-role";
const TREE: &str = "/roles\n  /web-role : webrc\n    version = '1.0'\n/acme\n  /a : foo\n    \
                    version = '1.0'\n    /deploy\n      /web-role\n";

#[tokio::test]
async fn sigterm_ends_a_wait_for_the_role_lock() {
    let conn = support::chroot("role-stop").await;
    let mut h = TestHost::on(&conn, "w1", Pm::Fake(FakeYum::new())).await;
    h.role = Some("web-role".into());
    h.tree(TREE, v("r1")).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for path in ["/role-locks", LOCK] {
        h.client.create(path, b"", &open).await.unwrap();
    }
    // Another host of the role holds the lock (a failed host keeps its request).
    let holder = json!({"requestor": "w9", "hostname": "w9.example.com"}).to_string();
    let mode = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let (_, seq) = h
        .client
        .create(&format!("{LOCK}/lr-"), holder.as_bytes(), &mode)
        .await
        .unwrap();
    let mut agent = h.spawn("agent", &[], &[]);
    wait_for(
        "the agent to wait for the role lock",
        Duration::from_secs(30),
        || {
            agent
                .output()
                .contains("waiting for the role lock")
                .then_some(())
        },
    )
    .await;
    agent.terminate();
    assert_eq!(
        agent.wait(Duration::from_secs(10)).await,
        0,
        "{}",
        agent.output()
    );
    // Its waiting request is withdrawn; the holder's stays.
    let mut requests = h.client.list_children(LOCK).await.unwrap();
    requests.sort();
    assert_eq!(requests, [format!("lr-{seq}")]);
    assert!(
        h.deploy_log("foo").is_empty(),
        "nothing was deployed: {:?}",
        h.deploy_log("foo")
    );
}
