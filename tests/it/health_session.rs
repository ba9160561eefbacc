//! A health check runs only while its step's lock or lease is held (docs/rollouts.md): found by the
//! soak (issue 15, seed 1001): a host whose session expired while its
//! deploy script ran (cut off through a test-owned proxy) started the package's health check
//! once the script ended, with its node lock already gone, so the next holder deployed the
//! node beside a host still in its step. Now the agent proves its session alive before every
//! try of the check; a lost session abandons the step (it runs again with a new session), as
//! for any other step.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::agent::{add_foo_health_check, lines, now, v, wait_for, wait_for_async, Pm, TestHost};
use support::proxy::Proxy;
use support::rpm::FakeYum;
use support::split_chroot;

const LIMIT: Duration = Duration::from_secs(90);

/// Adds a health check to every version of package foo in the host's fake repository: it
/// logs `try <time>` to `ZK_TEST_HEALTH_LOG` and passes.
fn add_health_check(h: &TestHost) {
    add_foo_health_check(
        h,
        "#!/bin/sh\necho \"try $(date +%s.%N)\" >> \"$ZK_TEST_HEALTH_LOG\"\necho ok\n",
    );
}

#[tokio::test]
async fn no_health_check_starts_once_the_session_and_its_lock_are_gone() {
    let direct = support::chroot("health-session").await;
    let proxy = Proxy::start(split_chroot(&direct).0);
    let mut h = TestHost::on(&direct, "h1", Pm::Fake(FakeYum::new())).await;
    h.conn = format!("{}{}", proxy.address(), split_chroot(&direct).1);
    h.extra = "session-timeout = 1\n".into();
    add_health_check(&h);
    h.tree(
        "/acme\n  /a : foo\n    version = '1.0'\n    health-deadline = 30\n    /deploy\n      /h1\n",
        v("r1"),
    )
    .await;
    let times = h.scratch("times.txt");
    let health = h.scratch("health.txt");
    let (tp, hp) = (times.display().to_string(), health.display().to_string());
    let mut agent = h.spawn(
        "agent",
        &[],
        &[
            ("ZK_TEST_SLEEP", "2"),
            ("ZK_TEST_TIMES", &tp),
            ("ZK_TEST_HEALTH_LOG", &hp),
        ],
    );
    wait_for("the deploy script to start", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    proxy.cut();
    // The session (and the node lock) expires while the script runs; the script ends while
    // the host is still cut off.
    wait_for_async("the host node to go with the session", LIMIT, || async {
        h.host_node().await.is_none().then_some(())
    })
    .await;
    wait_for("the deploy script to end", LIMIT, || {
        (lines(&times).len() >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        lines(&health),
        Vec::<String>::new(),
        "a health check ran after the lock was gone"
    );
    let restored = now();
    proxy.restore();

    // The abandoned step runs again with a new session, health check included.
    h.wait_status("r1", &["done"], LIMIT).await;
    let tries = lines(&health);
    assert_eq!(tries.len(), 1, "{tries:?}");
    let at: f64 = tries[0].split(' ').nth(1).unwrap().parse().unwrap();
    assert!(at > restored, "{tries:?}");
    assert_eq!(lines(&times).len(), 4, "{:?}", lines(&times));
    let cluster = h.hosts().await;
    assert_eq!(cluster.get("version"), Some(&json!("r1")), "{cluster:?}");
    assert_eq!(cluster.get("halt"), None, "{cluster:?}");
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}
