//! Crash safety across a change of max-parallel (docs/design.md, "Exclusion"): a holder that
//! died mid-step under one kind of place (a lease of the node's semaphore where K > 1, or
//! the node lock where K = 1) leaves its in-flight record there; when the next version of the
//! node is entered the other way, the next holder must still find it and halt naming the
//! dead holder. Found by the soak (issue 15, seeds 1001-1007: records left in the other kind
//! of place after convergence, the dead holder never named).

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{fleet, lines, v, wait_for, wait_for_async, TestHost};

const LIMIT: Duration = Duration::from_secs(90);

fn tree(props: &str, hosts: &[&str]) -> String {
    let mut text = format!("/acme\n  /a : foo\n    version = '1.0'\n{props}    /deploy\n");
    for host in hosts {
        text.push_str(&format!("      /{host}\n"));
    }
    text
}

async fn children(h: &TestHost, path: &str) -> Vec<String> {
    match h.client.list_children(path).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("{path}: {e}"),
    }
}

/// h1 deploys version r1 (`first` props) and is SIGKILLed mid-script; once its session is
/// gone, h2 deploys r2 (`second` props): it must halt naming h1, its record `left in`.
async fn killed_then_switched(label: &str, first: &str, second: &str, place: &str, left_in: &str) {
    let hosts = fleet(label, 2).await;
    let (h1, h2) = (&hosts[0], &hosts[1]);
    h1.tree(&tree(first, &["h1", "h2"]), v("r1")).await;
    let times = h1.scratch("times.txt");
    let tp = times.display().to_string();
    let mut agent = h1.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "60"), ("ZK_TEST_TIMES", &tp)],
    );
    wait_for("h1 deploying /acme/a", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    agent.kill_tree().await;
    wait_for_async(
        "h1's lock or lease to go with its session",
        LIMIT,
        || async { children(h1, place).await.is_empty().then_some(()) },
    )
    .await;
    h1.tree(&tree(second, &["h1", "h2"]), v("r2")).await;
    let run = h2.deploy_env(&[], &[("ZK_TEST_TIMES", &tp)]).await;
    run.assert_code(1);
    let cluster = h1.hosts().await;
    assert_eq!(cluster["version"], Value::Null, "{cluster:?}");
    assert_eq!(cluster["halt"]["host"], json!("h2"));
    let error = cluster["halt"]["error"].as_str().unwrap();
    for part in [
        "h1.example.com (h1) died deploying /acme/a 0",
        "version r1",
        left_in,
    ] {
        assert!(error.contains(part), "{part:?} not in {error:?}");
    }
    // h2 never ran its script; the dead record is cleared.
    assert_eq!(lines(&times).len(), 1, "{:?}", lines(&times));
    let (data, _) = h1.client.get_data(left_in).await.unwrap();
    assert!(!String::from_utf8_lossy(&data).contains("in-flight"));
    // (A record node, for a lease: gone.)
    assert_eq!(children(h1, left_in).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_lease_holder_killed_before_k_became_1_is_named_by_the_next_lock_holder() {
    killed_then_switched(
        "switch-to-lock",
        "    max-parallel = 2\n",
        "",
        "/agent-semaphores/acme,a",
        "/agent-semaphores/acme,a-__in-flight__",
    )
    .await;
}

#[tokio::test]
async fn a_lock_holder_killed_before_k_rose_is_named_by_the_next_lease_holder() {
    killed_then_switched(
        "switch-to-lease",
        "",
        "    max-parallel = 2\n",
        "/agent-locks/acme,a",
        "/agent-locks/acme,a",
    )
    .await;
}
