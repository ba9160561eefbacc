//! `zkdeployment pause` (CONTRACT 15): the cluster version `false` and a record of who paused
//! it and why; syncs import new revisions and keep the pause; `resume` ends it; a halted
//! cluster, a missing `/hosts` and an identity that may not write `/hosts` are refused with
//! nothing changed; a `false` set by hand (the original's way) is still ended by a sync.

use crate::support;

use serde_json::{json, Value};
use support::agent::{Pm, TestHost};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use support::rpm::FakeYum;
use support::Run;

/// The tree file of the repository: `foo` at `version` deployed to h1.
fn tree(version: &str) -> String {
    format!("/acme\n  /app : foo\n    version = '{version}'\n    /deploy\n      /h1\n")
}

struct Env {
    conn: String,
    repo: TestRepo,
    work: tempfile::TempDir,
    host: TestHost,
}

impl Env {
    async fn new(label: &str) -> Env {
        let conn = support::chroot(label).await;
        let host = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
        Env {
            conn,
            repo: TestRepo::new(),
            work: tempfile::tempdir().unwrap(),
            host,
        }
    }

    /// Commits the tree with `foo` at `version` and syncs it; the sync's run.
    async fn commit_and_sync(&self, version: &str) -> (String, Run) {
        let revision = self.repo.commit(&[("acme.zk", &tree(version))]);
        (revision, self.sync().await)
    }

    async fn sync(&self) -> Run {
        let dir = self.work.path();
        let (checkout, tombstone, lock) = (
            dir.join("checkout"),
            dir.join("tombstone"),
            dir.join("lock"),
        );
        let paths = SyncPaths {
            checkout: &checkout,
            tombstone: &tombstone,
            lock: &lock,
        };
        let args = sync_args(&self.repo.url(), &paths, &self.conn, &[]);
        support::run_async(&as_strs(&args)).await
    }

    async fn zkd(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["-z", self.conn.as_str()]);
        support::run_async(&all).await
    }

    /// How many times the deploy script of `foo` ran at `version`.
    fn deployed(&self, version: &str) -> usize {
        let tag = format!("foo-{version}-");
        let log = self.host.deploy_log("foo");
        log.iter().filter(|l| l.contains(&tag)).count()
    }
}

#[tokio::test]
async fn a_pause_outlasts_syncs_until_resume() {
    let env = Env::new("pause-sync").await;
    let (r1, run) = env.commit_and_sync("1.0").await;
    run.assert_ok();
    env.host.deploy(&[]).await.assert_ok();
    assert_eq!(env.deployed("1.0"), 1);

    let run = env.zkd(&["pause", "--reason", "change freeze"]).await;
    run.assert_ok();
    assert!(run.stdout.contains("cluster paused"), "{run}");
    let hosts = env.host.hosts().await;
    assert_eq!(hosts["version"], json!(false));
    assert_eq!(hosts["pause"]["reason"], json!("change freeze"));
    assert!(hosts["pause"]["time"].as_f64().unwrap() > 0.0, "{hosts:?}");
    assert!(hosts["pause"]["user"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));

    // A new revision is imported and recorded, the pause kept.
    let (r2, run) = env.commit_and_sync("2.0").await;
    run.assert_ok();
    assert!(run.stderr.contains("the cluster is paused"), "{run}");
    let hosts = env.host.hosts().await;
    assert_eq!(hosts["version"], json!(false), "the sync ended the pause");
    assert_eq!(hosts["synced"], json!(r2));
    assert_ne!(r1, r2);
    let (data, _) = env.host.client.get_data("/acme/app").await.unwrap();
    assert_eq!(zkdeployment::zk::decode(&data)["version"], json!("2.0"));
    // The same revision again: nothing to do, nothing written.
    let (_, before) = env.host.client.get_data("/hosts").await.unwrap();
    env.sync().await.assert_ok();
    let (_, after) = env.host.client.get_data("/hosts").await.unwrap();
    assert_eq!(
        before.mzxid, after.mzxid,
        "a sync of the synced revision wrote /hosts"
    );

    // No host deploys while paused.
    let run = env.host.deploy(&[]).await;
    assert_eq!(env.deployed("2.0"), 0, "deployed while paused: {run}");

    // status names the pause, in text and JSON.
    let status = env.zkd(&["status"]).await;
    status.assert_ok();
    assert!(status.stdout.contains("PAUSED"), "{status}");
    assert!(status.stdout.contains(": change freeze"), "{status}");
    let json = env.zkd(&["status", "--json"]).await;
    let json: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["pause"]["reason"], json!("change freeze"));

    let run = env.zkd(&["resume"]).await;
    run.assert_ok();
    assert!(run.stdout.contains("ended: paused"), "{run}");
    let hosts = env.host.hosts().await;
    assert_eq!(hosts["version"], json!(r2));
    assert!(hosts.get("pause").is_none(), "{hosts:?}");
    env.host.deploy(&[]).await.assert_ok();
    assert_eq!(env.deployed("2.0"), 1);
    let json = env.zkd(&["status", "--json"]).await;
    let json: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["pause"], Value::Null);
}

#[tokio::test]
async fn a_sync_that_sets_a_new_version_deletes_the_failure_records_of_the_others() {
    use zkdeployment::agent::budget::{record_failure, FailureRecord};
    let env = Env::new("prune-failures").await;
    let (r1, run) = env.commit_and_sync("1.0").await;
    run.assert_ok();
    let failure = |version: &str| FailureRecord {
        host: "h1".into(),
        name: "h1.example.com".into(),
        n: 0,
        version: json!(version),
        error: "boom".into(),
        time: 1.0,
    };
    let c = &env.host.client;
    record_failure(c, "/acme/app", &failure(&r1), 1)
        .await
        .unwrap();
    record_failure(c, "/acme/app", &failure("r0"), 1)
        .await
        .unwrap();
    // A new revision: the records of every other version go.
    let (r2, run) = env.commit_and_sync("2.0").await;
    run.assert_ok();
    assert_eq!(
        c.list_children("/node-state").await.unwrap(),
        Vec::<String>::new()
    );
    // A sync of the same revision sets no version and deletes nothing.
    record_failure(c, "/acme/app", &failure(&r2), 1)
        .await
        .unwrap();
    env.sync().await.assert_ok();
    let names = c.list_children("/node-state").await.unwrap();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].starts_with(&format!("fail~acme,app~{r2}~h1-")),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_pause_set_by_hand_is_ended_by_the_next_sync_as_the_originals_was() {
    let env = Env::new("pause-by-hand").await;
    env.commit_and_sync("1.0").await.1.assert_ok();
    let mut hosts = env.host.hosts().await;
    hosts.insert("version".into(), json!(false));
    let data = serde_json::to_vec(&hosts).unwrap();
    env.host
        .client
        .set_data("/hosts", &data, None)
        .await
        .unwrap();
    let (r2, run) = env.commit_and_sync("2.0").await;
    run.assert_ok();
    assert_eq!(env.host.hosts().await["version"], json!(r2));
}

#[tokio::test]
async fn a_halted_or_missing_cluster_is_not_paused() {
    let env = Env::new("pause-refused").await;
    // No /hosts: the cluster is not initialised here.
    let run = env.zkd(&["pause"]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("not initialised"), "{run}");

    env.commit_and_sync("1.0").await.1.assert_ok();
    let mut hosts = env.host.hosts().await;
    hosts.insert("version".into(), Value::Null);
    hosts.insert("halt".into(), json!({"host": "h9", "error": "boom"}));
    let data = serde_json::to_vec(&hosts).unwrap();
    env.host
        .client
        .set_data("/hosts", &data, None)
        .await
        .unwrap();
    let (_, before) = env.host.client.get_data("/hosts").await.unwrap();
    let run = env.zkd(&["pause", "--reason", "x"]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("the cluster is halted"), "{run}");
    let (_, after) = env.host.client.get_data("/hosts").await.unwrap();
    assert_eq!(before.mzxid, after.mzxid, "a refused pause wrote /hosts");
    assert_eq!(env.host.hosts().await["halt"]["error"], json!("boom"));
}

#[tokio::test]
async fn on_a_protected_cluster_only_the_operators_identity_pauses() {
    let env = Env::new("pause-protected").await;
    let secret = env.work.path().join("secret");
    std::fs::write(&secret, "syncer:s3cret\n").unwrap();
    let auth = format!("--auth=file://{}", secret.display());
    let revision = env.repo.commit(&[("acme.zk", &tree("1.0"))]);
    let dir = env.work.path();
    let (checkout, tombstone, lock) = (dir.join("co"), dir.join("ts"), dir.join("lk"));
    let paths = SyncPaths {
        checkout: &checkout,
        tombstone: &tombstone,
        lock: &lock,
    };
    let args = sync_args(&env.repo.url(), &paths, &env.conn, &[&auth]);
    support::run_async(&as_strs(&args)).await.assert_ok();
    assert_eq!(env.host.hosts().await["version"], json!(revision));

    let run = env.zkd(&["pause"]).await;
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(env.host.hosts().await["version"], json!(revision));
    let run = env.zkd(&["pause", &auth, "--reason", "ops"]).await;
    run.assert_ok();
    assert_eq!(env.host.hosts().await["version"], json!(false));
    // A host's agent cannot end it.
    let run = env.zkd(&["resume"]).await;
    assert_eq!(run.code, 1, "{run}");
    env.zkd(&["resume", &auth]).await.assert_ok();
    assert_eq!(env.host.hosts().await["version"], json!(revision));
}
