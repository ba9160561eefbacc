//! What the agent's ZooKeeper work costs in requests, as the server counts them: an update of
//! the host node (`cons`, the session's own count), and a one-shot pass with K > 1, whose
//! mixed-fleet check reads the registry of our agents, alone and among 300 hosts of ours,
//! after 50 of them left and came back, and with an original agent among them (`mntr`
//! `zk_packets_received`, on a server of the bench's own). The tests check what these do
//! (`tests/it/host_node_writes.rs`, `tests/it/mixed_registry.rs`); this prints the counts.
//!
//! Run with `cargo bench --bench requests`.

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::json;
use support::agent::{v, Pm, TestHost};
use support::rpm::FakeYum;
use support::ZkServer;
use zkdeployment::agent::daemon;
use zookeeper_client::{Acls, Client, CreateMode};

/// Tries of each measure; the fewest requests of them is printed (a ping of an idle session
/// landing in one window does not count).
const TRIES: usize = 3;

/// `/acme/a` (package foo 1.0, max-parallel 2) deployed to `h1`.
const TREE: &str =
    "/acme\n  /a : foo\n    version = '1.0'\n    max-parallel = 2\n    /deploy\n      /h1\n";

/// Requests the server received from the session `sid` so far.
fn received(port: u16, sid: i64) -> i64 {
    support::session_received(port, sid).expect("the session's request count in cons")
}

/// The fewest requests of `TRIES` updates of the host node by a registered agent session.
async fn host_node_write(conn: &str, port: u16) -> i64 {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[zkdeployment]\nhost-id = w1\nhost-name = w1.example.com\nrun-directory = {}\n",
        dir.path().join("run").display()
    );
    let config = zkdeployment::config::parse(&dir.path().join("agent.cfg"), &text, &|_| Ok(None))
        .expect("config");
    let stop = Arc::new(AtomicBool::new(false));
    let agent = daemon::start(config, conn.to_string(), stop, false)
        .await
        .expect("agent session");
    let sid = agent.client.session_id().0;
    let mut costs = Vec::new();
    for i in 0..=TRIES {
        let before = received(port, sid);
        agent
            .update_host_node(|p| {
                p.insert("status".into(), json!(format!("s{i}")));
            })
            .await
            .unwrap();
        // The first update reads the node (nothing is known of it yet): not counted.
        if i > 0 {
            costs.push(received(port, sid) - before);
        }
    }
    daemon::close(agent).await;
    costs.into_iter().min().unwrap()
}

/// The fewest requests of `TRIES` one-shot passes at a new cluster version.
async fn pass_cost(h: &TestHost, port: u16, label: &str) -> i64 {
    let mut costs = Vec::new();
    for i in 0..TRIES {
        h.set_version(v(&format!("{label}-{i}"))).await;
        let before = support::packets_received(port);
        let run = h.deploy(&[]).await;
        let after = support::packets_received(port);
        run.assert_ok();
        costs.push(after - before);
    }
    costs.into_iter().min().unwrap()
}

/// Registers (or removes, `join == false`) hosts `x<i>` of ours: host node and registry
/// node, one transaction per host as the agent does.
async fn hosts(client: &Client, ids: std::ops::Range<usize>, join: bool) {
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let writes = ids.map(|i| {
        let (host, registry) = (format!("/hosts/x{i}"), format!("/agent-registry/x{i}"));
        let mut writer = client.new_multi_writer();
        if join {
            let data = json!({"name": format!("x{i}.example.com"), "version": "r0",
                              "agent": "zkdeployment 0.0.0"});
            let data = serde_json::to_vec(&data).unwrap();
            writer.add_create(&host, &data, &eph).unwrap();
            writer.add_create(&registry, b"", &eph).unwrap();
        } else {
            writer.add_delete(&host, None).unwrap();
            writer.add_delete(&registry, None).unwrap();
        }
        writer.commit()
    });
    for done in futures::future::join_all(writes).await {
        done.unwrap();
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = ZkServer::start();
        let port = server.port;
        let root = support::connect(&server.connect_string()).await;
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        root.create("/t", b"", &open).await.unwrap();
        let conn = format!("{}/t", server.connect_string());
        let h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
        h.tree(TREE, v("r0")).await;
        h.deploy(&[]).await.assert_ok();

        let write = host_node_write(&conn, port).await;
        println!("requests per host-node update (the node known): {write}");

        let fleet = support::connect(&conn).await;
        let alone = pass_cost(&h, port, "alone").await;
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let old = serde_json::to_vec(&json!({"name": "old.example.com", "version": "r0"})).unwrap();
        fleet.create("/hosts/old", &old, &eph).await.unwrap();
        let mixed_alone = pass_cost(&h, port, "mixed-alone").await;
        fleet.delete("/hosts/old", None).await.unwrap();
        match fleet.create("/agent-registry", b"", &open).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("cannot create /agent-registry: {e}"),
        }
        hosts(&fleet, 0..300, true).await;
        let with_300 = pass_cost(&h, port, "fleet").await;
        hosts(&fleet, 0..50, false).await;
        hosts(&fleet, 0..50, true).await;
        let churned = pass_cost(&h, port, "churn").await;
        fleet.create("/hosts/old", &old, &eph).await.unwrap();
        let mixed_300 = pass_cost(&h, port, "mixed-fleet").await;
        println!(
            "requests per K > 1 pass: {alone} alone, {with_300} with 300 hosts, {churned} after 50 \
             left and came back; mixed (one original agent): {mixed_alone} alone, {mixed_300} \
             with 300 hosts"
        );
    });
}
