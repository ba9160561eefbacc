//! Exclusion across the two kinds of place of a node (docs/design.md, "Exclusion"): after a
//! change of max-parallel, hosts still deploying the previous version hold leases of the
//! node's semaphore (K > 1) while the next version uses the node lock (K = 1), or the other
//! way round. The older of the two goes first: a host that takes the lock (and writes its
//! in-flight record) waits while older leases are held, and a host that takes a lease waits
//! while the lock's holder wrote its record before the lease was made.
//! Found by the soak (issue 15, seed 1006: K(old) + K(new) hosts inside one node).

use crate::support;

use std::time::Duration;

use support::agent::{fleet, lines, v, wait_for, TestHost};
use zkdeployment::zk::node::ensure_node;
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(90);

fn tree(props: &str) -> String {
    format!("/acme\n  /a : foo\n    version = '1.0'\n{props}    /deploy\n      /h1\n")
}

/// Runs `deploy` on `h` while `held` (created by the test, older than anything the agent
/// creates) is there: the script must not start until the test deletes it, and the host
/// must say it waits for it (`says`).
async fn waits_for_the_older_place(h: &TestHost, held: &str, says: &str) {
    let times = h.scratch("times.txt");
    let tp = times.display().to_string();
    let mut run = h.spawn("deploy", &[], &[("ZK_TEST_TIMES", &tp)]);
    wait_for("the host to find the older place held", LIMIT, || {
        run.output().contains(says).then_some(())
    })
    .await;
    // Seen waiting, and still waiting a moment later: its script has not started.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        lines(&times).is_empty(),
        "{:?}\n{}",
        lines(&times),
        run.output()
    );
    // The holder goes as a holder does: its record cleared as its node goes (one transaction).
    let mut writer = h.client.new_multi_writer();
    writer.add_delete(held, None).unwrap();
    if held.starts_with("/agent-locks/") {
        writer
            .add_set_data("/agent-locks/acme,a", b"{}", None)
            .unwrap();
    }
    writer.commit().await.unwrap();
    assert_eq!(run.wait(LIMIT).await, 0, "{}", run.output());
    let starts = lines(&times)
        .iter()
        .filter(|l| l.starts_with("start"))
        .count();
    assert_eq!(starts, 1, "{:?}", lines(&times));
}

#[tokio::test]
async fn the_node_lock_waits_for_older_leases_after_k_became_1() {
    let hosts = fleet("cross-lock", 1).await;
    let h = &hosts[0];
    h.tree(&tree(""), v("r2")).await;
    // A host still deploying r1 with max-parallel 2 holds a lease.
    let sem = "/agent-semaphores/acme,a";
    ensure_node(&h.client, sem).await.unwrap();
    h.client.set_data(sem, b"2", None).await.unwrap();
    let lease = format!("{sem}/{}", uuid::Uuid::new_v4().simple());
    let mode = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    h.client.create(&lease, b"old (x)", &mode).await.unwrap();
    waits_for_the_older_place(h, &lease, "1 lease holders (max-parallel changed)").await;
}

#[tokio::test]
async fn a_lease_waits_for_an_older_node_lock_holder_after_k_grew() {
    let hosts = fleet("cross-lease", 1).await;
    let h = &hosts[0];
    h.tree(&tree("    max-parallel = 2\n"), v("r2")).await;
    // A host still deploying r1 with max-parallel 1 holds the node lock.
    let lock = "/agent-locks/acme,a";
    ensure_node(&h.client, lock).await.unwrap();
    let prefix = format!("{lock}/{}__lock__", uuid::Uuid::new_v4().simple());
    let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, seq) = h.client.create(&prefix, b"old (y)", &mode).await.unwrap();
    let held = format!("{prefix}{seq}");
    // As a holder does before its script: its in-flight record in the lock node's data.
    let record = r#"{"in-flight": {"host": "y", "name": "old", "path": "/acme/a", "n": 0}}"#;
    h.client
        .set_data(lock, record.as_bytes(), None)
        .await
        .unwrap();
    waits_for_the_older_place(h, &held, "old (y) (the node lock's holder)").await;
}
