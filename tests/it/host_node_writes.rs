//! `Agent::update_host_node`: host-node writes made while another is in flight (a status
//! not waited for, as `got deployments`) are never lost, never applied out of order, and
//! never clobber what someone else wrote in between; each update is one write of the node.
//! (Found while trying to pipeline these writes: a write guarded by the version the write
//! before it would make matches the version an outside write made when that write fails,
//! and silently drops the outside write. And without taking the writes in turn, two that
//! both had to read the node again landed in either order.) What a write costs in requests
//! is measured by `cargo bench --bench requests`.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::{json, Value};
use zkdeployment::agent::daemon;
use zkdeployment::agent::session::Agent;

use crate::support;

/// An agent session (registered, its host node created) for host `id`, with its files in
/// `dir`.
async fn agent(conn: &str, id: &str, dir: &Path) -> Agent {
    let text = format!(
        "[zkdeployment]\nhost-id = {id}\nhost-name = {id}.example.com\nrun-directory = {}\n",
        dir.join("run").display()
    );
    let config =
        zkdeployment::config::parse(&dir.join("agent.cfg"), &text, &|_| Ok(None)).expect("config");
    daemon::start(
        config,
        conn.to_string(),
        Arc::new(AtomicBool::new(false)),
        false,
    )
    .await
    .expect("agent session")
}

/// The host node's properties and data version.
async fn host_node(client: &zookeeper_client::Client, id: &str) -> (Value, i32) {
    let (data, stat) = client.get_data(&format!("/hosts/{id}")).await.unwrap();
    (serde_json::from_slice(&data).unwrap(), stat.version)
}

fn set(key: &'static str, value: Value) -> impl Fn(&mut zkdeployment::tree::Props) {
    move |p| {
        p.insert(key.into(), value.clone());
    }
}

/// Sets the status to `status`: the node holds it afterwards, the rest of its properties
/// unchanged, and it was written once (its data version one up).
async fn one_write(agent: &Agent, zk: &zookeeper_client::Client, status: &'static str) {
    let (mut before, version) = host_node(zk, "h1").await;
    agent
        .update_host_node(set("status", json!(status)))
        .await
        .unwrap();
    let (after, new_version) = host_node(zk, "h1").await;
    before["status"] = json!(status);
    assert_eq!(after, before);
    assert_eq!(new_version, version + 1, "one update, one write");
}

#[tokio::test]
async fn concurrent_host_node_writes_keep_their_order_and_outside_writes() {
    let conn = support::chroot("host-node-writes").await;
    let dir = tempfile::tempdir().unwrap();
    let zk = support::connect(&conn).await;
    zk.create(
        "/hosts",
        b"{}",
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let agent = agent(&conn, "h1", dir.path()).await;
    // The first write (nothing is known of the node yet), then one more.
    one_write(&agent, &zk, "a").await;
    one_write(&agent, &zk, "b").await;

    // Two writes sent together: both applied, the last sent last.
    let (first, second) = tokio::join!(
        agent.update_host_node(set("status", json!("c"))),
        agent.update_host_node(set("step", json!("s1"))),
    );
    first.unwrap();
    second.unwrap();
    let (props, _) = host_node(&zk, "h1").await;
    assert_eq!(
        (&props["status"], &props["step"]),
        (&json!("c"), &json!("s1"))
    );
    let (_, version) = host_node(&zk, "h1").await;
    let (first, second) = tokio::join!(
        agent.update_host_node(set("status", json!("d"))),
        agent.update_host_node(set("status", json!("e"))),
    );
    first.unwrap();
    second.unwrap();
    let (props, after) = host_node(&zk, "h1").await;
    assert_eq!(props["status"], json!("e"));
    assert_eq!(after, version + 2, "two updates, two writes");

    // Someone else writes the node, once (one version up: what a write guarded by "the
    // version the write before mine makes" would match), then two writes go together:
    // the outside write's change stays, and the last sent is the last applied.
    let (mut theirs, _) = host_node(&zk, "h1").await;
    theirs["other"] = json!(1);
    zk.set_data("/hosts/h1", theirs.to_string().as_bytes(), None)
        .await
        .unwrap();
    let (first, second) = tokio::join!(
        agent.update_host_node(set("status", json!("f"))),
        agent.update_host_node(set("status", json!("g"))),
    );
    first.unwrap();
    second.unwrap();
    let (props, _) = host_node(&zk, "h1").await;
    assert_eq!(props["status"], json!("g"));
    assert_eq!(props["other"], json!(1), "the outside write was clobbered");

    // After the outside write, an update is still one write, and keeps `other`.
    one_write(&agent, &zk, "h").await;
    assert_eq!(host_node(&zk, "h1").await.0["other"], json!(1));
}
