//! The registry of our agents and the mixed-fleet check that uses it (docs/design.md, "Exclusion",
//! mixed fleets): an agent registers `/hosts/<id>` and `/agent-registry/<id>` in
//! one transaction and both go with its session; a pass with K > 1 among 300 hosts of ours,
//! also after hosts left and came back, finds the fleet not mixed, and with one original
//! agent among them names that one host; an original agent's host node (no `agent`, no
//! registry node) makes the fleet mixed, an older agent of ours (`agent`, no registry node)
//! does not; and on a protected tree a host registers both nodes but cannot touch another
//! host's registry node. What a pass costs in requests with 300 hosts and with none is
//! measured by `cargo bench --bench requests`.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::agent::{v, wait_for_async, Pm, TestHost};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use support::rpm::FakeYum;
use zkdeployment::zk::acl::{digest_id, Kind, Protection};
use zookeeper_client::{Acls, Client, CreateMode, Error, MultiReadResult, Permission};

const LIMIT: Duration = Duration::from_secs(60);

/// `/acme/a` (package foo 1.0, max-parallel 2) deployed to each of `hosts`.
fn tree(hosts: &[&str]) -> String {
    let mut text =
        String::from("/acme\n  /a : foo\n    version = '1.0'\n    max-parallel = 2\n    /deploy\n");
    for host in hosts {
        text.push_str(&format!("      /{host}\n"));
    }
    text
}

/// Whether `/hosts/<id>` and `/agent-registry/<id>` exist, read in one multi-read (an atomic
/// snapshot), with the sessions that own them.
async fn both(client: &Client, id: &str) -> (Option<i64>, Option<i64>) {
    let mut reader = client.new_multi_reader();
    reader.add_get_data(&format!("/hosts/{id}")).unwrap();
    reader
        .add_get_data(&format!("/agent-registry/{id}"))
        .unwrap();
    let results = reader.commit().await.unwrap();
    let owner = |r: &MultiReadResult| match r {
        MultiReadResult::Data { stat, .. } => Some(stat.ephemeral_owner),
        MultiReadResult::Error { err: Error::NoNode } => None,
        other => panic!("{other:?}"),
    };
    (owner(&results[0]), owner(&results[1]))
}

/// Waits until neither node of `id` exists; at every look both or neither exist.
async fn wait_both_gone(client: &Client, id: &str, limit: Duration) {
    wait_for_async(&format!("the nodes of {id} to go"), limit, || async {
        let (host, registry) = both(client, id).await;
        assert_eq!(
            host.is_some(),
            registry.is_some(),
            "one without the other: {host:?} {registry:?}"
        );
        host.is_none().then_some(())
    })
    .await;
}

/// Waits until both nodes of `id` exist, owned by one session (not 0: ephemeral).
async fn wait_both_there(client: &Client, id: &str) -> i64 {
    wait_for_async(&format!("the nodes of {id}"), LIMIT, || async {
        match both(client, id).await {
            (Some(h), Some(r)) => {
                assert_eq!(h, r, "registered by two sessions");
                assert_ne!(h, 0, "not ephemeral");
                Some(h)
            }
            (None, None) => None,
            other => panic!("one without the other: {other:?}"),
        }
    })
    .await
}

#[tokio::test]
async fn the_registry_node_comes_and_goes_with_the_host_node() {
    let conn = support::chroot("registry-life").await;
    let mut h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    // A short session, so that a killed agent's nodes go soon.
    h.extra = "session-timeout = 2\n".into();
    h.tree(&tree(&["h1"]), v("r1")).await;
    assert_eq!(both(&h.client, "h1").await, (None, None));

    // A clean stop removes both at once (the session is closed).
    let mut agent = h.spawn("agent", &[], &[]);
    wait_both_there(&h.client, "h1").await;
    h.wait_status("r1", &["done"], LIMIT).await;
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    let (host, registry) = both(&h.client, "h1").await;
    assert_eq!(
        (host, registry),
        (None, None),
        "still there after a clean stop"
    );

    // SIGKILL: both stay while the session lives, and go together when it expires.
    let mut agent = h.spawn("agent", &[], &[]);
    let session = wait_both_there(&h.client, "h1").await;
    agent.kill_tree().await;
    assert_eq!(both(&h.client, "h1").await, (Some(session), Some(session)));
    wait_both_gone(&h.client, "h1", LIMIT).await;

    // A new agent registers again (its own session), and its registry node is empty.
    let mut agent = h.spawn("agent", &[], &[]);
    let again = wait_both_there(&h.client, "h1").await;
    assert_ne!(again, session);
    let (data, _) = h.client.get_data("/agent-registry/h1").await.unwrap();
    assert!(data.is_empty());
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    wait_both_gone(&h.client, "h1", LIMIT).await;
}

#[tokio::test]
async fn an_agent_registers_without_the_registry_when_it_may_not_create_it() {
    // A root nobody but a super user could write under (the agent cannot create
    // /agent-registry): registration goes on, and says why once.
    let conn = support::chroot("registry-refused").await;
    let mut h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    h.extra = "session-timeout = 2\n".into();
    h.tree(&tree(&["h1"]), v("r1")).await;
    let read_only = [zookeeper_client::Acl::new(
        zookeeper_client::Permission::READ,
        zookeeper_client::AuthId::anyone(),
    )];
    for shared in ["/agent-locks", "/agent-semaphores"] {
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        h.client.create(shared, b"", &open).await.unwrap();
    }
    h.client.set_acl("/", &read_only, None).await.unwrap();
    let run = h.deploy(&[]).await;
    run.assert_ok();
    assert!(
        run.stderr.contains("cannot create /agent-registry")
            && run.stderr.matches("cannot create /agent-registry").count() == 1,
        "{run}"
    );
    assert_eq!(h.deploy_log("foo").len(), 1, "{run}");
}

/// One deploy pass (a one-shot `deploy` at a new cluster version, whose K > 1 node makes it
/// check the fleet): it deploys, and says the fleet is mixed, naming the original's agent
/// `old` and no other host, exactly when `mixed`.
async fn pass(h: &TestHost, label: &str, mixed: bool) {
    let deployed = h.deploy_log("foo").len();
    h.set_version(v(label)).await;
    let run = h.deploy(&[]).await;
    run.assert_ok();
    assert_eq!(
        h.deploy_log("foo").len(),
        deployed + 1,
        "no deploy step: {run}"
    );
    let said = run
        .stderr
        .contains("mixed fleet: host old (old.example.com)");
    assert_eq!(said, mixed, "{run}");
    assert_eq!(
        run.stderr.matches("mixed fleet").count(),
        usize::from(mixed),
        "{run}"
    );
}

/// Registers hosts `x<i>` of ours (`agent` property and registry node, ephemeral, one
/// transaction per host as the agent does) from `client`'s session.
async fn register(client: &Client, ids: std::ops::Range<usize>) {
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match client.create("/agent-registry", b"", &open).await {
        Ok(_) | Err(Error::NodeExists) => {}
        Err(e) => panic!("cannot create /agent-registry: {e}"),
    }
    let writes = ids.map(|i| {
        let data = serde_json::to_vec(&json!({
            "name": format!("x{i}.example.com"), "version": "r0", "agent": "zkdeployment 0.0.0"
        }))
        .unwrap();
        let mut writer = client.new_multi_writer();
        writer
            .add_create(&format!("/hosts/x{i}"), &data, &eph)
            .unwrap();
        writer
            .add_create(&format!("/agent-registry/x{i}"), b"", &eph)
            .unwrap();
        writer.commit()
    });
    for done in futures::future::join_all(writes).await {
        done.unwrap();
    }
}

/// Removes hosts `x<i>` (both nodes, one transaction each).
async fn leave(client: &Client, ids: std::ops::Range<usize>) {
    let deletes = ids.map(|i| {
        let mut writer = client.new_multi_writer();
        writer.add_delete(&format!("/hosts/x{i}"), None).unwrap();
        writer
            .add_delete(&format!("/agent-registry/x{i}"), None)
            .unwrap();
        writer.commit()
    });
    for done in futures::future::join_all(deletes).await {
        done.unwrap();
    }
}

#[tokio::test]
async fn a_pass_among_300_hosts_of_ours_names_only_the_original_agent() {
    let conn = support::chroot("registry-300").await;
    let h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    h.tree(&tree(&["h1"]), v("r0")).await;
    h.deploy(&[]).await.assert_ok();
    // The other hosts' session.
    let fleet = support::connect(&conn).await;
    pass(&h, "alone", false).await;
    // With the original's agent registered beside it: the fleet is mixed.
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let old = serde_json::to_vec(&json!({"name": "old.example.com", "version": "r0"})).unwrap();
    fleet.create("/hosts/old", &old, &eph).await.unwrap();
    pass(&h, "mixed-alone", true).await;
    fleet.delete("/hosts/old", None).await.unwrap();

    register(&fleet, 0..300).await;
    let (hosts, _) = h.client.get_children("/hosts").await.unwrap();
    assert_eq!(hosts.len(), 300);
    pass(&h, "fleet", false).await;
    // 50 hosts leave and come back between two passes.
    leave(&fleet, 0..50).await;
    register(&fleet, 0..50).await;
    pass(&h, "churn", false).await;
    // The same fleet with the original's agent in it.
    fleet.create("/hosts/old", &old, &eph).await.unwrap();
    pass(&h, "mixed-fleet", true).await;
}

#[tokio::test]
async fn an_original_agent_makes_the_fleet_mixed_and_an_older_agent_of_ours_does_not() {
    let conn = support::chroot("registry-mixed").await;
    let mut h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    h.extra = "session-timeout = 2\n".into();
    h.tree(&tree(&["h1"]), v("r1")).await;
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut agent = h.spawn("agent", &[], &[]);
    h.wait_status("r1", &["done"], LIMIT).await;
    let log = |agent: &support::agent::Spawned| {
        agent
            .output()
            .matches("mixed fleet: host old (old.example.com) has no 'agent' property")
            .count()
    };
    assert_eq!(log(&agent), 0, "{}", agent.output());

    // An older agent of ours: `agent`, but no registry node. Not mixed.
    let older = serde_json::to_vec(
        &json!({"name": "older.example.com", "version": "r0", "agent": "zkdeployment 0.1.0"}),
    )
    .unwrap();
    h.client.create("/hosts/older", &older, &eph).await.unwrap();
    h.set_version(v("r2")).await;
    h.wait_status("r2", &["done"], LIMIT).await;
    assert!(
        !agent.output().contains("mixed fleet"),
        "{}",
        agent.output()
    );

    // The original's agent: no `agent`, no registry node. Mixed, on every pass (the second
    // from what the agent keeps), naming it.
    let old = serde_json::to_vec(&json!({"name": "old.example.com", "version": "r0"})).unwrap();
    h.client.create("/hosts/old", &old, &eph).await.unwrap();
    h.set_version(v("r3")).await;
    h.wait_status("r3", &["done"], LIMIT).await;
    assert_eq!(log(&agent), 1, "{}", agent.output());
    h.set_version(v("r4")).await;
    h.wait_status("r4", &["done"], LIMIT).await;
    assert_eq!(log(&agent), 2, "{}", agent.output());
    let status = support::run_async(&["status", "-z", &h.conn]).await;
    assert!(status.stdout.contains("mixed fleet: host old"), "{status}");

    // The original's host goes: not mixed on the next pass.
    h.client.delete("/hosts/old", None).await.unwrap();
    h.set_version(v("r5")).await;
    h.wait_status("r5", &["done"], LIMIT).await;
    assert_eq!(log(&agent), 2, "{}", agent.output());
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

#[tokio::test]
async fn on_a_protected_tree_a_host_registers_both_nodes_and_cannot_touch_anothers() {
    let conn = support::chroot("registry-auth").await;
    let work = tempfile::tempdir().unwrap();
    let syncer = work.path().join("syncer.auth");
    std::fs::write(&syncer, "syncer:Sync-s3cr3t\n").unwrap();
    let auth = format!("file://{}", syncer.display());
    let repo = TestRepo::new();
    let r1 = repo.commit(&[("acme.zk", &tree(&["h1", "h2"]))]);
    let (checkout, tombstone, lock) = (
        work.path().join("checkout"),
        work.path().join("tombstone"),
        work.path().join("lock"),
    );
    let paths = SyncPaths {
        checkout: &checkout,
        tombstone: &tombstone,
        lock: &lock,
    };
    let owned = sync_args(&repo.url(), &paths, &conn, &["--auth", &auth]);
    support::run_async(&as_strs(&owned)).await.assert_ok();
    let anon = support::connect(&conn).await;
    // /agent-registry is created by the syncer, as /hosts is: READ and CREATE for everyone.
    let (acl, _) = anon.get_acl("/agent-registry").await.unwrap();
    let (hosts_acl, _) = anon.get_acl("/hosts").await.unwrap();
    assert!(
        zkdeployment::zk::acl::same(&acl, &hosts_acl),
        "{acl:?} {hosts_acl:?}"
    );
    // (A client without the syncer's identity sees its digest masked: read it as the syncer.)
    let syncer = Client::connector()
        .with_auth("digest", b"syncer:Sync-s3cr3t")
        .connect(&conn)
        .await
        .unwrap();
    let (acl, _) = syncer.get_acl("/agent-registry").await.unwrap();
    let register = Protection::new("syncer:Sync-s3cr3t").acl(Kind::Register);
    assert!(
        zkdeployment::zk::acl::same(&acl, &register),
        "{acl:?} {register:?}"
    );

    // Two hosts with their own identities.
    let mut hosts = Vec::new();
    for id in ["h1", "h2"] {
        let mut h = TestHost::on(&conn, id, Pm::Fake(FakeYum::new())).await;
        let file = work.path().join(format!("{id}.auth"));
        std::fs::write(&file, format!("{id}:Host-s3cr3t\n")).unwrap();
        h.extra = format!("zookeeper-auth = file://{}\n", file.display());
        hosts.push(h);
    }
    let mut agents: Vec<_> = hosts.iter().map(|h| h.spawn("agent", &[], &[])).collect();
    for h in &hosts {
        wait_both_there(&anon, &h.id).await;
    }
    // The registry node: readable by all, writable by its host's identity only.
    let h1 = Client::connector()
        .with_auth("digest", b"h1:Host-s3cr3t")
        .connect(&conn)
        .await
        .unwrap();
    let (acl, _) = h1.get_acl("/agent-registry/h1").await.unwrap();
    let (host_acl, _) = h1.get_acl("/hosts/h1").await.unwrap();
    assert!(
        zkdeployment::zk::acl::same(&acl, &host_acl),
        "{acl:?} {host_acl:?}"
    );
    assert!(
        acl.iter().any(|a| a.scheme() == "digest"
            && a.id() == digest_id("h1:Host-s3cr3t")
            && a.permission() == Permission::ALL),
        "{acl:?}"
    );
    let h2 = Client::connector()
        .with_auth("digest", b"h2:Host-s3cr3t")
        .connect(&conn)
        .await
        .unwrap();
    for client in [&h2, &anon] {
        assert_eq!(
            client.delete("/agent-registry/h1", None).await,
            Err(Error::NoAuth)
        );
        assert_eq!(
            client
                .set_data("/agent-registry/h1", b"x", None)
                .await
                .map(|_| ()),
            Err(Error::NoAuth)
        );
        assert_eq!(
            client
                .set_acl("/agent-registry/h1", Acls::anyone_all().as_ref(), None)
                .await
                .map(|_| ()),
            Err(Error::NoAuth)
        );
        assert_eq!(
            client.delete("/agent-registry", None).await,
            Err(Error::NoAuth)
        );
    }
    // Like /hosts, the registry lets any client create a child (registration needs no
    // identity known to the syncer): the same rule for both.
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    h2.create("/hosts/h9", b"{}", &eph).await.unwrap();
    h2.create("/agent-registry/h9", b"", &eph).await.unwrap();
    // Both agents deployed (with K = 2, their fleet not mixed).
    for (h, agent) in hosts.iter().zip(&agents) {
        h.wait_status(&r1, &["done"], LIMIT).await;
        assert!(
            !agent.output().contains("mixed fleet"),
            "{}",
            agent.output()
        );
    }
    for agent in &mut agents {
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
    for h in &hosts {
        wait_both_gone(&anon, &h.id, LIMIT).await;
    }
}
