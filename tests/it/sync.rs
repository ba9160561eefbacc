//! The syncer against real git repositories (made by the tests) and a real ZooKeeper: first
//! sync, edits, removed files, `.zkx` overlays without churn, bad files, every guard, dry-run,
//! force, the tombstone, concurrent syncers, the lock's kazoo layout, and interrupted syncs.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use support::Run;
use zkdeployment::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use zkdeployment::zk::{decode, Client};
use zookeeper_client::{Acls, CreateMode};

const ACME: &str = "/acme\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /h1\n  /db : pg\n    version = '9'\n";
const GLOBEX: &str = "/globex\n  /jobs : worker\n    version = '1.0'\n    /deploy\n      /h2\n";
const OVERLAY: &str = "/acme\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /staging1\n";

struct Env {
    conn: String,
    client: Client,
    repo: TestRepo,
    work: tempfile::TempDir,
}

impl Env {
    async fn new(label: &str) -> Env {
        let conn = support::chroot(label).await;
        let client = support::connect(&conn).await;
        Env {
            conn,
            client,
            repo: TestRepo::new(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn checkout(&self) -> PathBuf {
        self.work.path().join("checkout")
    }

    fn tombstone(&self) -> PathBuf {
        self.work.path().join("state/tombstone")
    }

    fn lock_file(&self) -> PathBuf {
        self.work.path().join("lock")
    }

    async fn sync(&self, extra: &[&str]) -> Run {
        let (checkout, tombstone, lock) = (self.checkout(), self.tombstone(), self.lock_file());
        let paths = SyncPaths {
            checkout: &checkout,
            tombstone: &tombstone,
            lock: &lock,
        };
        let args = sync_args(&self.repo.url(), &paths, &self.conn, extra);
        support::run_async(&as_strs(&args)).await
    }

    async fn snapshot(&self) -> ZNode {
        read_subtree(&self.client, "/", &ReadOptions::default())
            .await
            .unwrap()
            .unwrap()
    }

    async fn hosts(&self) -> serde_json::Map<String, Value> {
        let (data, _) = self.client.get_data("/hosts").await.unwrap();
        decode(&data)
    }

    async fn set_hosts(&self, props: Value) {
        let data = serde_json::to_vec(&props).unwrap();
        match self.client.set_data("/hosts", &data, None).await {
            Ok(_) => {}
            Err(zookeeper_client::Error::NoNode) => {
                let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
                self.client.create("/hosts", &data, &open).await.unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }

    async fn register(&self, host: &str, version: Value) {
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let data = serde_json::to_vec(&json!({"name": host, "version": version})).unwrap();
        self.client
            .create(&format!("/hosts/{host}"), &data, &eph)
            .await
            .unwrap();
    }

    fn tombstone_text(&self) -> Option<String> {
        std::fs::read_to_string(self.tombstone()).ok()
    }
}

/// path → mzxid for every node (to prove that nothing was written).
fn mzxids(node: &ZNode) -> BTreeMap<String, i64> {
    fn walk(path: &str, node: &ZNode, out: &mut BTreeMap<String, i64>) {
        out.insert(path.to_string(), node.mzxid);
        for (name, child) in &node.children {
            let p = if path == "/" {
                format!("/{name}")
            } else {
                format!("{path}/{name}")
            };
            walk(&p, child, out);
        }
    }
    let mut out = BTreeMap::new();
    walk("/", node, &mut out);
    out
}

fn exported(node: &ZNode, path: &str) -> String {
    zkdeployment::tree::export::export_subtree(
        path.trim_start_matches('/'),
        &node.get(path).unwrap().to_tree(),
    )
}

#[tokio::test]
async fn first_sync_into_an_empty_cluster() {
    let env = Env::new("sync-first").await;
    let rev = env.repo.commit(&[
        ("acme.zk", ACME),
        ("globex.zk", GLOBEX),
        ("README", "not a tree"),
    ]);
    let run = env.sync(&[]).await;
    run.assert_ok();
    let hosts = env.hosts().await;
    assert_eq!(hosts["version"], json!(rev));
    assert_eq!(hosts["synced"], json!(rev));
    assert_eq!(hosts["synced-roots"], json!(["acme", "globex"]));
    let snap = env.snapshot().await;
    assert_eq!(exported(&snap, "/acme"), "/acme\n  /db : pg\n    version = '9'\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /h1\n");
    assert!(snap.get("/globex/jobs/deploy/h2").is_some());
    assert!(
        snap.get("/hosts-lock").is_some(),
        "the cluster lock node stays, as kazoo leaves it"
    );
    assert_eq!(
        snap.get("/hosts-lock").unwrap().children.len(),
        0,
        "and the lock was released"
    );
    assert_eq!(env.tombstone_text(), None, "success removes the tombstone");
    assert!(
        env.checkout().join("acme.zk").exists(),
        "the checkout is a real working tree"
    );
}

#[tokio::test]
async fn an_edit_writes_only_what_changed() {
    let env = Env::new("sync-edit").await;
    env.repo.commit(&[("acme.zk", ACME), ("globex.zk", GLOBEX)]);
    env.sync(&[]).await.assert_ok();
    let before = mzxids(&env.snapshot().await);
    let rev = env.repo.commit(&[
        ("acme.zk", &ACME.replace("'1.4'", "'2.0'")),
        ("globex.zk", GLOBEX),
    ]);
    env.sync(&[]).await.assert_ok();
    let snap = env.snapshot().await;
    let after = mzxids(&snap);
    // The deployment index is rewritten by every sync that changes something (tests/index.rs).
    let changed: Vec<&String> = after
        .keys()
        .filter(|p| before.get(*p) != after.get(*p) && !p.starts_with("/deployment-index"))
        .collect();
    assert_eq!(
        changed,
        ["/acme/web", "/hosts"],
        "only the edited node and /hosts are written"
    );
    assert_eq!(
        snap.get("/acme/web").unwrap().props["version"],
        json!("2.0")
    );
    assert_eq!(env.hosts().await["version"], json!(rev));
}

#[tokio::test]
async fn git_lock_files_left_by_a_killed_sync_are_removed_and_the_next_sync_goes_on() {
    let env = Env::new("sync-stale-git-locks").await;
    env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    // A sync killed mid-checkout leaves libgit2's lock files behind.
    let git = env.checkout().join(".git");
    for stale in ["HEAD.lock", "index.lock"] {
        std::fs::write(git.join(stale), "").unwrap();
    }
    let rev = env
        .repo
        .commit(&[("acme.zk", &ACME.replace("'1.4'", "'2.0'"))]);
    let run = env.sync(&[]).await;
    run.assert_ok();
    assert!(run.stderr.contains("HEAD.lock"), "{run}");
    assert_eq!(env.hosts().await["version"], json!(rev));
    assert!(!git.join("index.lock").exists());
}

#[tokio::test]
async fn a_removed_file_deletes_its_top_level_nodes_but_never_foreign_ones() {
    let env = Env::new("sync-remove").await;
    let foreign = CreateMode::Persistent.with_acls(Acls::anyone_all());
    env.client
        .create("/by-hand", b"{}", &foreign)
        .await
        .unwrap();
    env.repo.commit(&[("acme.zk", ACME), ("globex.zk", GLOBEX)]);
    env.sync(&[]).await.assert_ok();
    env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    let snap = env.snapshot().await;
    assert!(
        snap.get("/globex").is_none(),
        "a top-level node the repository owned and dropped is deleted"
    );
    assert!(snap.get("/acme/web").is_some());
    assert!(
        snap.get("/by-hand").is_some(),
        "nodes the repository never owned are never touched"
    );
    assert_eq!(env.hosts().await["synced-roots"], json!(["acme"]));
}

#[tokio::test]
async fn a_removed_root_holding_an_ephemeral_node_is_kept_around_it() {
    let env = Env::new("sync-remove-eph").await;
    env.repo.commit(&[("acme.zk", ACME), ("globex.zk", GLOBEX)]);
    env.sync(&[]).await.assert_ok();
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    env.client
        .create("/globex/jobs/provider", b"", &eph)
        .await
        .unwrap();
    env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    let snap = env.snapshot().await;
    assert!(snap.get("/globex/jobs/provider").is_some());
    assert!(
        snap.get("/globex/jobs/deploy").is_none(),
        "everything else under it is deleted"
    );
}

#[tokio::test]
async fn zkx_overlays_merge_without_churn() {
    let env = Env::new("sync-zkx").await;
    let rev = env
        .repo
        .commit(&[("acme.zk", ACME), ("staging.zkx", OVERLAY)]);
    env.sync(&[]).await.assert_ok();
    let snap = env.snapshot().await;
    assert!(
        snap.get("/acme/web/deploy/h1").is_some(),
        "the .zk's deploy node"
    );
    assert!(
        snap.get("/acme/web/deploy/staging1").is_some(),
        "the overlay's deploy node"
    );
    assert!(snap.get("/acme/db").is_some(), "an overlay does not trim");
    let before = mzxids(&snap);
    // An unchanged re-sync (forced, so it really re-imports) writes nothing at all.
    let run = env.sync(&["--force"]).await;
    run.assert_ok();
    assert_eq!(
        mzxids(&env.snapshot().await),
        before,
        "no delete-and-recreate churn, no rewrite"
    );
    assert_eq!(env.hosts().await["version"], json!(rev));
}

#[tokio::test]
async fn a_zk_file_trims_what_is_not_in_any_file_but_overlay_only_nodes_are_not_trimmed() {
    let env = Env::new("sync-zkx-trim").await;
    env.repo
        .commit(&[("acme.zk", ACME), ("staging.zkx", "/extra\n  /x\n")]);
    env.sync(&[]).await.assert_ok();
    let by_hand = CreateMode::Persistent.with_acls(Acls::anyone_all());
    env.client
        .create("/acme/web/deploy/by-hand", b"", &by_hand)
        .await
        .unwrap();
    env.client
        .create("/extra/by-hand", b"", &by_hand)
        .await
        .unwrap();
    env.repo.commit(&[
        ("acme.zk", ACME),
        ("staging.zkx", "/extra\n  /x\n"),
        ("z.zk", "/z\n"),
    ]);
    env.sync(&[]).await.assert_ok();
    let snap = env.snapshot().await;
    assert!(
        snap.get("/acme/web/deploy/by-hand").is_none(),
        "a .zk node's children are authoritative"
    );
    assert!(
        snap.get("/extra/by-hand").is_some(),
        "a .zkx-only node is not trimmed"
    );
    assert_eq!(
        env.hosts().await["synced-roots"],
        json!(["acme", "extra", "z"])
    );
}

#[tokio::test]
async fn a_parse_error_in_one_of_several_files_writes_nothing() {
    let env = Env::new("sync-bad").await;
    env.repo.commit(&[("acme.zk", ACME), ("globex.zk", GLOBEX)]);
    env.sync(&[]).await.assert_ok();
    let before = mzxids(&env.snapshot().await);
    env.repo.commit(&[
        ("acme.zk", &ACME.replace("'9'", "'10'")),
        ("globex.zk", "/globex\n  /jobs\n    x ->\n"),
    ]);
    let run = env.sync(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("globex.zk:3: Bad link format: 'x ->'"),
        "{}",
        run.stderr
    );
    assert_eq!(
        mzxids(&env.snapshot().await),
        before,
        "nothing written, not even the good file"
    );
    assert!(
        env.tombstone_text()
            .unwrap()
            .contains("globex.zk:3: Bad link format"),
        "the tombstone keeps the reason"
    );
}

#[tokio::test]
async fn lint_errors_name_file_and_line() {
    let env = Env::new("sync-lint").await;
    let a = "/a\n  /x : pkg\n    version = '1.0'\n    /deploy\n      /h1\n";
    let b = "/b\n  /y : pkg\n    version = '2.0'\n    /deploy\n      /h1\n      /h2\n";
    let dup = "/a\n  /z\n";
    let bad = "/c\n  /w : other\n    version = 2.0\n    /deploy\n      /h3\n";
    env.repo
        .commit(&[("a.zk", a), ("b.zk", b), ("dup.zk", dup), ("c.zk", bad)]);
    let run = env.sync(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("dup.zk:1: duplicate top-level node /a (also in a.zk:1)"),
        "{}",
        run.stderr
    );
    env.repo.commit(&[("a.zk", a), ("b.zk", b), ("c.zk", bad)]);
    let run = env.sync(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("b.zk:2: inconsistent versions for pkg on h1: '2.0' (/b/y) != '1.0' (/a/x)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("c.zk:2: version of /c/w is not a string: 2.0"),
        "{}",
        run.stderr
    );
    env.repo.commit(&[("hosts.zk", "/hosts\n  version = 1\n")]);
    let run = env.sync(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("hosts.zk:1: /hosts is reserved"),
        "{}",
        run.stderr
    );
    assert!(env.snapshot().await.get("/a").is_none());
}

#[tokio::test]
async fn guard_halted_cluster_refuses_unless_forced() {
    let env = Env::new("sync-halted").await;
    env.set_hosts(json!({"version": null, "halt": {"host": "h1", "name": "h1.example.com", "version": "v1", "error": "boom", "time": 1.0}})).await;
    let rev = env.repo.commit(&[("acme.zk", ACME)]);
    let run = env.sync(&[]).await;
    run.assert_code(3);
    assert!(
        run.stderr.contains(
            "ALL STOP, cluster version is None (halted by h1.example.com deploying v1: boom)"
        ),
        "{}",
        run.stderr
    );
    assert!(
        env.tombstone_text()
            .unwrap()
            .starts_with("refused: ALL STOP"),
        "refusals are visible to monitoring"
    );
    assert!(env.snapshot().await.get("/acme").is_none());
    env.sync(&["--force"]).await.assert_ok();
    assert_eq!(
        env.hosts().await["version"],
        json!(rev),
        "a forced sync sets the version"
    );
    assert_eq!(env.tombstone_text(), None);
}

#[tokio::test]
async fn guard_missing_hosts_node_is_created() {
    let env = Env::new("sync-no-hosts").await;
    assert!(env.client.check_stat("/hosts").await.unwrap().is_none());
    let rev = env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    assert_eq!(env.hosts().await["version"], json!(rev));
}

#[tokio::test]
async fn guard_same_revision_is_nothing_to_do() {
    let env = Env::new("sync-same").await;
    env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    // Someone edits the tree by hand; an unchanged revision does not re-import...
    env.client
        .set_data("/acme/db", br#"{"type":"pg","version":"8"}"#, None)
        .await
        .unwrap();
    let before = mzxids(&env.snapshot().await);
    env.sync(&[]).await.assert_ok();
    assert_eq!(mzxids(&env.snapshot().await), before);
    assert_eq!(
        env.tombstone_text(),
        None,
        "nothing to do removes the tombstone"
    );
    // ...but --force does.
    env.sync(&["--force"]).await.assert_ok();
    assert_eq!(
        env.snapshot().await.get("/acme/db").unwrap().props["version"],
        json!("9")
    );
}

#[tokio::test]
async fn guard_unconverged_hosts_refuse_unless_forced_or_paused() {
    let env = Env::new("sync-unconverged").await;
    let old = env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    env.register("h1", json!(old)).await;
    env.register("h2", json!("something-else")).await;
    let new = env
        .repo
        .commit(&[("acme.zk", &ACME.replace("'9'", "'10'"))]);
    let run = env.sync(&[]).await;
    run.assert_code(3);
    assert!(
        run.stderr.contains(&format!(
            "host h2 has not converged (something-else -> {old})"
        )),
        "{}",
        run.stderr
    );
    assert_eq!(env.hosts().await["version"], json!(old));
    // Paused (False): the convergence check is skipped.
    let mut hosts = env.hosts().await;
    hosts.insert("version".into(), json!(false));
    env.set_hosts(Value::Object(hosts)).await;
    env.sync(&[]).await.assert_ok();
    assert_eq!(env.hosts().await["version"], json!(new));
}

#[tokio::test]
async fn guard_forced_sync_ignores_unconverged_hosts() {
    let env = Env::new("sync-unconverged-force").await;
    env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    env.register("h1", json!("stale")).await;
    let new = env.repo.commit(&[("globex.zk", GLOBEX)]);
    env.sync(&["-f"]).await.assert_ok();
    assert_eq!(env.hosts().await["version"], json!(new));
}

#[tokio::test]
async fn guard_cluster_lock_busy_refuses() {
    let env = Env::new("sync-lock-busy").await;
    // A kazoo contender already holds /hosts-lock.
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    env.client.create("/hosts-lock", b"", &open).await.unwrap();
    let seq = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let prefix = format!("/hosts-lock/{}__lock__", uuid::Uuid::new_v4().simple());
    env.client.create(&prefix, b"4242", &seq).await.unwrap();
    env.repo.commit(&[("acme.zk", ACME)]);
    let run = env.sync(&[]).await;
    run.assert_code(3);
    assert!(
        run.stderr
            .contains("couldn't obtain cluster lock (held by 4242"),
        "{}",
        run.stderr
    );
    assert!(env.snapshot().await.get("/acme").is_none());
    assert_eq!(
        env.snapshot()
            .await
            .get("/hosts-lock")
            .unwrap()
            .children
            .len(),
        1,
        "our attempt left nothing behind"
    );
}

/// A lock file any local user could have planted (in `/var/tmp`, the default) is an error
/// naming it (exit 1), never a quiet "busy": a symbolic link (not followed: its target is
/// neither created nor written), a file owned by another user, a second hard link.
#[tokio::test]
async fn guard_lock_file_planted_by_another_user_is_an_error_naming_it() {
    let env = Env::new("sync-lockfile-planted").await;
    env.repo.commit(&[("acme.zk", ACME)]);
    let lock = env.lock_file();
    let target = env.work.path().join("target");
    std::os::unix::fs::symlink(&target, &lock).unwrap();
    let run = env.sync(&[]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains(&lock.display().to_string()) && run.stderr.contains("symbolic link"),
        "{run}"
    );
    assert!(!target.exists(), "nothing written through the link");
    std::fs::remove_file(&lock).unwrap();
    std::fs::write(&lock, "").unwrap();
    std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
    let run = env.sync(&[]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains(&lock.display().to_string()) && run.stderr.contains("uid 65534"),
        "{run}"
    );
    std::fs::remove_file(&lock).unwrap();
    std::fs::write(&target, "keep\n").unwrap();
    std::fs::hard_link(&target, &lock).unwrap();
    let run = env.sync(&[]).await;
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    assert!(
        env.client.check_stat("/hosts").await.unwrap().is_none(),
        "nothing was synced"
    );
    std::fs::remove_file(&lock).unwrap();
    env.sync(&[]).await.assert_ok();
}

#[tokio::test]
async fn guard_lock_file_busy_exits_zero_quietly() {
    let env = Env::new("sync-lockfile").await;
    env.repo.commit(&[("acme.zk", ACME)]);
    let held = zkdeployment::sync::local::lock_file(&env.lock_file())
        .unwrap()
        .expect("free");
    let run = env.sync(&[]).await;
    run.assert_ok();
    assert_eq!(run.stdout, "");
    assert!(
        env.client.check_stat("/hosts").await.unwrap().is_none(),
        "nothing was done"
    );
    assert_eq!(
        env.tombstone_text(),
        None,
        "a busy lock file leaves the running sync's tombstone alone"
    );
    drop(held);
    env.sync(&[]).await.assert_ok();
    assert!(env.snapshot().await.get("/acme").is_some());
}

#[tokio::test]
async fn dry_run_prints_the_diff_and_writes_nothing() {
    let env = Env::new("sync-dry").await;
    let old = env.repo.commit(&[("acme.zk", ACME), ("globex.zk", GLOBEX)]);
    env.sync(&[]).await.assert_ok();
    let before = mzxids(&env.snapshot().await);
    env.repo.commit(&[(
        "acme.zk",
        &ACME
            .replace("'9'", "'10'")
            .replace("      /h1\n", "      /h9\n"),
    )]);
    let run = env.sync(&["--dry-run"]).await;
    run.assert_ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "/acme/db version change from 9 to 10",
            "would delete /acme/web/deploy/h1.",
            "add /acme/web/deploy/h9",
            "would delete /globex/jobs/deploy/h2.",
            "would delete /globex/jobs/deploy.",
            "would delete /globex/jobs.",
            "would delete /globex.",
        ]
    );
    assert_eq!(mzxids(&env.snapshot().await), before);
    assert_eq!(env.hosts().await["version"], json!(old));
    // Dry run into an empty cluster: no /hosts is created either.
    let fresh = Env::new("sync-dry-empty").await;
    fresh.repo.commit(&[("acme.zk", ACME)]);
    let run = fresh.sync(&["-d"]).await;
    run.assert_ok();
    assert_eq!(run.stdout, "add /acme\n");
    assert!(fresh.client.check_stat("/hosts").await.unwrap().is_none());
}

#[tokio::test]
async fn dry_run_on_a_halted_cluster_says_it_would_refuse() {
    let env = Env::new("sync-dry-halted").await;
    env.set_hosts(json!({"version": null})).await;
    env.repo.commit(&[("acme.zk", ACME)]);
    let run = env.sync(&["-d"]).await;
    run.assert_ok();
    assert!(
        run.stderr.contains("a real run would refuse: ALL STOP"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, "add /acme\n");
}

#[tokio::test]
async fn git_errors_are_reported_after_retries() {
    let env = Env::new("sync-git-error").await;
    let checkout = env.checkout();
    let missing = env.work.path().join("no-such-repo");
    let (tomb, lock) = (env.tombstone(), env.lock_file());
    let args = [
        "sync",
        "-u",
        missing.to_str().unwrap(),
        "-t",
        checkout.to_str().unwrap(),
        "--tombstone",
        tomb.to_str().unwrap(),
        "--lock-file",
        lock.to_str().unwrap(),
        "-z",
        &env.conn,
    ];
    let run = support::run_async(&args).await;
    run.assert_code(1);
    // A path that does not exist is named as such (not retried: no network involved).
    assert!(
        run.stderr
            .contains(&format!("{} does not exist", missing.display())),
        "{}",
        run.stderr
    );
    assert!(env
        .tombstone_text()
        .unwrap()
        .starts_with("sync failed: git repository"));
    // A missing branch.
    env.repo.commit(&[("acme.zk", ACME)]);
    let run = env.sync(&["-b", "nope"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("no branch nope"), "{}", run.stderr);
}

#[tokio::test]
async fn other_branches_and_moving_commits() {
    let env = Env::new("sync-branch").await;
    env.repo.commit(&[("acme.zk", ACME)]);
    let prod = env.repo.commit_on("prod", &[("globex.zk", GLOBEX)]);
    env.sync(&["-b", "prod"]).await.assert_ok();
    assert_eq!(env.hosts().await["version"], json!(prod));
    assert!(env.snapshot().await.get("/globex").is_some());
    assert!(
        !env.checkout().join("acme.zk").exists(),
        "the checkout is the branch's tree"
    );
}

#[tokio::test]
async fn two_syncers_at_once_apply_once() {
    let env = Env::new("sync-race").await;
    let rev = env.repo.commit(&[("acme.zk", ACME), ("globex.zk", GLOBEX)]);
    // Two syncers with different lock files and checkouts race on ZooKeeper itself.
    let other = tempfile::tempdir().unwrap();
    let url = env.repo.url();
    let (c2, t2, l2) = (
        other.path().join("co"),
        other.path().join("tomb"),
        other.path().join("lock"),
    );
    let second = [
        "sync",
        "-u",
        &url,
        "-t",
        c2.to_str().unwrap(),
        "--tombstone",
        t2.to_str().unwrap(),
        "--lock-file",
        l2.to_str().unwrap(),
        "-z",
        &env.conn,
    ];
    let (a, b) = tokio::join!(env.sync(&[]), support::run_async(&second));
    let codes = [a.code, b.code];
    assert!(codes.contains(&0), "{a:?} {b:?}");
    assert!(codes.iter().all(|c| *c == 0 || *c == 3), "{a:?} {b:?}");
    assert_eq!(env.hosts().await["version"], json!(rev));
    assert!(env.snapshot().await.get("/globex/jobs/deploy/h2").is_some());
    // Two syncers sharing the lock file: the file lock keeps them apart (both exit 0).
    let again = env.repo.commit(&[("acme.zk", ACME)]);
    let (a, b) = tokio::join!(env.sync(&[]), env.sync(&[]));
    assert_eq!((a.code, b.code), (0, 0), "{a:?} {b:?}");
    assert_eq!(env.hosts().await["version"], json!(again));
}

#[tokio::test]
async fn cluster_lock_nodes_have_kazoos_layout() {
    let env = Env::new("sync-kazoo-layout").await;
    let client = &env.client;
    let lock = zkdeployment::zk::recipe::lock::Lock::new(client, "/hosts-lock", "1234");
    let held = match lock.try_acquire().await.unwrap() {
        zkdeployment::zk::recipe::Attempt::Acquired(h) => h,
        other => panic!("{other:?}"),
    };
    let names = client.list_children("/hosts-lock").await.unwrap();
    assert_eq!(names.len(), 1);
    let re = regex::Regex::new(r"^[0-9a-f]{32}__lock__\d{10}$").unwrap();
    assert!(re.is_match(&names[0]), "{}", names[0]);
    let (data, stat) = client
        .get_data(&format!("/hosts-lock/{}", names[0]))
        .await
        .unwrap();
    assert_eq!(data, b"1234");
    assert_ne!(stat.ephemeral_owner, 0, "contenders are ephemeral");
    // While we hold it, a syncer is refused, naming us.
    env.repo.commit(&[("acme.zk", ACME)]);
    let run = env.sync(&[]).await;
    run.assert_code(3);
    assert!(run.stderr.contains("held by 1234"), "{}", run.stderr);
    held.release(client).await.unwrap();
    env.sync(&[]).await.assert_ok();
}

#[tokio::test]
async fn an_interrupted_apply_leaves_the_version_and_the_next_sync_completes_it() {
    let env = Env::new("sync-interrupted").await;
    let old = env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    // An ephemeral node where the new tree needs a parent makes the apply fail part-way
    // (a stand-in for a syncer dying mid-apply: the writes before it are in, the rest not).
    let many: String = (0..600).map(|i| format!("  /n{i:04}\n")).collect();
    let big = format!("{ACME}/zzz\n  /blocker\n    /child\n");
    let text = format!("/big\n{many}");
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    env.client.create("/zzz", b"", &open).await.unwrap();
    env.client.create("/zzz/blocker", b"", &eph).await.unwrap();
    let new = env.repo.commit(&[("acme.zk", &big), ("big.zk", &text)]);
    let run = env.sync(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("cluster version unchanged"),
        "{}",
        run.stderr
    );
    assert_eq!(
        env.hosts().await["version"],
        json!(old),
        "agents never see a half-applied tree as current"
    );
    assert!(
        env.snapshot().await.get("/big/n0000").is_some(),
        "part of the tree was written"
    );
    // The obstacle goes away; the next sync completes the tree and bumps the version.
    env.client.delete("/zzz/blocker", None).await.unwrap();
    env.sync(&[]).await.assert_ok();
    let snap = env.snapshot().await;
    assert_eq!(env.hosts().await["version"], json!(new));
    assert!(snap.get("/zzz/blocker/child").is_some());
    assert_eq!(snap.get("/big").unwrap().children.len(), 600);
}

#[tokio::test]
async fn a_syncer_killed_while_applying_leaves_the_version_and_the_next_run_completes() {
    let env = Env::new("sync-killed").await;
    let old = env.repo.commit(&[("acme.zk", ACME)]);
    env.sync(&[]).await.assert_ok();
    let nodes: String = (0..200)
        .map(|i| {
            format!(
                "  /g{i:03}\n{}",
                (0..100)
                    .map(|j| format!("    /n{j:03}\n"))
                    .collect::<String>()
            )
        })
        .collect();
    let new = env
        .repo
        .commit(&[("acme.zk", ACME), ("big.zk", &format!("/big\n{nodes}"))]);
    let (checkout, tombstone, lock) = (env.checkout(), env.tombstone(), env.lock_file());
    let mut child = tokio::process::Command::new(support::bin())
        .args([
            "sync",
            "-u",
            &env.repo.url(),
            "-t",
            checkout.to_str().unwrap(),
        ])
        .args([
            "--tombstone",
            tombstone.to_str().unwrap(),
            "--lock-file",
            lock.to_str().unwrap(),
            "-z",
            &env.conn,
        ])
        .env_remove("ZC_ZK_CONNECTION_STRING")
        .spawn()
        .unwrap();
    // Kill it as soon as the first nodes of the new tree appear.
    let started = std::time::Instant::now();
    loop {
        if env.client.check_stat("/big").await.unwrap().is_some() {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the sync ended ({status}) before it could be killed");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the sync never started applying"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let version = env.hosts().await["version"].clone();
    let written = env
        .snapshot()
        .await
        .get("/big")
        .map(|b| b.count())
        .unwrap_or(0);
    // Either the kill landed mid-apply (version untouched) or the apply had just finished.
    assert!(
        version == json!(old) || (version == json!(new) && written == 20_201),
        "version {version} with {written} nodes"
    );
    assert!(
        env.tombstone_text().unwrap().contains("acquired lock"),
        "a killed sync leaves its tombstone"
    );
    // The session of the killed syncer may still hold /hosts-lock until it expires.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let run = env.sync(&[]).await;
        if run.code == 0 {
            break;
        }
        assert_eq!(run.code, 3, "{run:?}");
        assert!(
            std::time::Instant::now() < deadline,
            "lock never freed: {run:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(env.hosts().await["version"], json!(new));
    assert_eq!(env.snapshot().await.get("/big").unwrap().count(), 20_201);
}

#[tokio::test]
async fn syncs_over_the_network_from_a_git_daemon() {
    // A `git daemon` on loopback serves the repository over git:// (libgit2's network
    // transport); skipped where no git binary is installed.
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has git (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: no git binary for git daemon");
        return;
    }
    let env = Env::new("sync-network").await;
    let rev = env.repo.commit(&[("acme.zk", ACME)]);
    std::fs::write(env.repo.path().join(".git/git-daemon-export-ok"), "").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = env.repo.path().parent().unwrap().to_path_buf();
    // Run git-daemon itself (`git daemon` forks it as a child that would outlive a kill).
    let exec_path = std::process::Command::new("git")
        .arg("--exec-path")
        .output()
        .unwrap();
    let exec_path = String::from_utf8_lossy(&exec_path.stdout)
        .trim()
        .to_string();
    let mut daemon = tokio::process::Command::new(format!("{exec_path}/git-daemon"))
        .args([
            "--reuseaddr",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
        ])
        .arg(format!("--base-path={}", base.display()))
        .arg(&base)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "git daemon did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let name = env
        .repo
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let url = format!("git://127.0.0.1:{port}/{name}/.git");
    let (checkout, tomb, lock) = (env.checkout(), env.tombstone(), env.lock_file());
    let run = support::run_async(&[
        "sync",
        "-u",
        &url,
        "-t",
        checkout.to_str().unwrap(),
        "--tombstone",
        tomb.to_str().unwrap(),
        "--lock-file",
        lock.to_str().unwrap(),
        "-z",
        &env.conn,
    ])
    .await;
    run.assert_ok();
    assert_eq!(env.hosts().await["version"], json!(rev));
    assert!(env.snapshot().await.get("/acme/web").is_some());
    daemon.start_kill().unwrap();
}
