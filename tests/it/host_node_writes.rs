//! `Agent::update_host_node`: host-node writes made while another is in flight (a status
//! not waited for, as `got deployments`) are never lost, never applied out of order, and
//! never clobber what someone else wrote in between. A write guarded by the version this
//! process last wrote costs one request; a guard that no longer holds costs a read and a
//! write. (Found while trying to pipeline these writes: a write guarded by the version the
//! write before it would make matches the version an outside write made when that write
//! fails, and silently drops the outside write. And without taking the writes in turn, two
//! that both had to read the node again landed in either order.)

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

/// Requests the server received from the session `sid` so far (`cons`).
fn received(port: u16, sid: i64) -> i64 {
    support::session_received(port, sid)
        .unwrap_or_else(|| panic!("no session 0x{sid:x} with a request count in cons"))
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

/// Sets the status to `status`, checking that it took one request (a ping may come between).
async fn one_guarded_write(agent: &Agent, port: u16, sid: i64, status: &'static str) {
    let before = received(port, sid);
    agent
        .update_host_node(set("status", json!(status)))
        .await
        .unwrap();
    let sent = received(port, sid) - before;
    assert!(
        (1..=2).contains(&sent),
        "one guarded write made {sent} requests"
    );
}

#[tokio::test]
async fn concurrent_host_node_writes_keep_their_order_and_outside_writes() {
    let conn = support::chroot("host-node-writes").await;
    let port: u16 = support::zk_address()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
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
    let sid = agent.client.session_id().0;
    // The first write reads the node (nothing is known yet); the next is one request (a
    // ping may come between).
    agent
        .update_host_node(set("status", json!("a")))
        .await
        .unwrap();
    one_guarded_write(&agent, port, sid, "b").await;

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
    let (first, second) = tokio::join!(
        agent.update_host_node(set("status", json!("d"))),
        agent.update_host_node(set("status", json!("e"))),
    );
    first.unwrap();
    second.unwrap();
    assert_eq!(host_node(&zk, "h1").await.0["status"], json!("e"));

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

    // Known again: the next write is one request.
    one_guarded_write(&agent, port, sid, "h").await;
    assert_eq!(host_node(&zk, "h1").await.0["status"], json!("h"));
}
