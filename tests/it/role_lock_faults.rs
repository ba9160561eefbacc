//! Defects of the persistent role lock (`/role-locks/<role>`) that the soak (`tests/soak/`,
//! issue 15) found:
//! - an agent waiting for the lock (held, e.g., by a host that failed and keeps its request
//!   until it succeeds) ignored SIGTERM until it got the lock, possibly forever (systemd then
//!   kills it after `TimeoutStopSec`); a stopping agent starts no new step: it now withdraws
//!   its waiting request and exits 0 at once;
//! - a host whose passes were cut off between creating a request and adopting an earlier one
//!   could own two requests; it adopted the first and the other stayed, blocking the role
//!   for every other host until this one ran a pass again (after convergence: never); a host
//!   now withdraws every request of its own but the first.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::agent::{v, wait_for, Pm, TestHost};
use support::rpm::FakeYum;
use zookeeper_client::{Acls, CreateMode};

const LOCK: &str = "/role-locks/web-role";
const TREE: &str = "/roles\n  /web-role : webrc\n    version = '1.0'\n/acme\n  /a : foo\n    \
                    version = '1.0'\n    /deploy\n      /web-role\n";

/// A host `w1` of the role on a fresh chroot, with the tree and the role lock node.
async fn role_host(label: &str) -> TestHost {
    let conn = support::chroot(label).await;
    let mut h = TestHost::on(&conn, "w1", Pm::Fake(FakeYum::new())).await;
    h.role = Some("web-role".into());
    h.tree(TREE, v("r1")).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for path in ["/role-locks", LOCK] {
        h.client.create(path, b"", &open).await.unwrap();
    }
    h
}

/// Adds a request for `host` to the role lock; returns its name.
async fn request(h: &TestHost, host: &str) -> String {
    let data = json!({"requestor": host, "hostname": format!("{host}.example.com")});
    let mode = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let (_, seq) = h
        .client
        .create(&format!("{LOCK}/lr-"), data.to_string().as_bytes(), &mode)
        .await
        .unwrap();
    format!("lr-{seq}")
}

#[tokio::test]
async fn extra_requests_of_a_host_are_withdrawn_when_it_enters() {
    let h = role_host("role-extra").await;
    // Two requests left by earlier passes of w1, and one of w2 queued behind them.
    request(&h, "w1").await;
    request(&h, "w1").await;
    let other = request(&h, "w2").await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(h.deploy_log("foo").len(), 1, "{:?}", h.deploy_log("foo"));
    // w1 left no request behind: w2's is first now.
    assert_eq!(h.client.list_children(LOCK).await.unwrap(), [other]);
}

#[tokio::test]
async fn sigterm_ends_a_wait_for_the_role_lock() {
    let h = role_host("role-stop").await;
    // Another host of the role holds the lock (a failed host keeps its request).
    let holder = request(&h, "w9").await;
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
    assert_eq!(requests, [holder]);
    assert!(
        h.deploy_log("foo").is_empty(),
        "nothing was deployed: {:?}",
        h.deploy_log("foo")
    );
}
