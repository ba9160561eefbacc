//! The command line of issue 39: `-n/--dry-run` on `deploy`, `sync` and `tree import` (the
//! old spellings kept), and `-c/--config FILE` on `status`, `resume`, `plan`, `sync` and
//! `tree export/import`, which read `zookeeper`, `zookeeper-auth` and `zookeeper-tls-*` from
//! the agent's configuration file, explicit flags winning.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::json;
use support::agent::{v, TestHost};
use support::git::TestRepo;
use zkdeployment::zk::decode;

const TREE: &str = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";
/// Nothing listens there.
const NOWHERE: &str = "127.0.0.1:1";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn dry_run_is_n_on_deploy_sync_and_tree_import() {
    let h = TestHost::fake("cli-dry-run").await;
    h.tree(TREE, v("r1")).await;
    let config = h.config().display().to_string();
    // deploy -n: the plan, nothing done (10: changes pending).
    let run = support::run_async(&["deploy", &config, "-n"]).await;
    run.assert_code(10);
    assert!(run.stdout.contains("plan for version r1 on h1"), "{run}");
    // Observed only (`list installed`), nothing installed.
    assert!(
        h.yum_calls().iter().all(|c| c.contains(" list ")),
        "{:?}",
        h.yum_calls()
    );
    let run = support::run_async(&["deploy", &config, "--dry-run"]).await;
    run.assert_code(10);
    // sync -n and the original's -d: the diff, nothing written.
    let repo = TestRepo::new();
    repo.commit(&[("acme.zk", "/acme\n  /b : bar\n    version = '2'\n")]);
    let dir = h.scratch("sync");
    std::fs::create_dir_all(&dir).unwrap();
    let url = repo.url();
    for flag in ["-n", "-d", "--dry-run"] {
        let (checkout, tomb, lock) = (dir.join("co"), dir.join("tomb"), dir.join("lock"));
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
            &h.conn,
            "-f",
            flag,
        ])
        .await;
        run.assert_ok();
        assert!(run.stderr.contains("dry run of revision"), "{flag}: {run}");
        assert!(run.stdout.contains("add /acme/b"), "{flag}: {run}");
        assert!(h.client.check_stat("/acme/b").await.unwrap().is_none());
    }
    // tree import -n.
    let file = write(h.dir.path(), "x.zk", "/x\n  y = 1\n");
    let run = support::run_async(&[
        "tree",
        "import",
        file.to_str().unwrap(),
        "-n",
        "-z",
        &h.conn,
    ])
    .await;
    run.assert_ok();
    assert!(h.client.check_stat("/x").await.unwrap().is_none());
}

#[tokio::test]
async fn config_gives_the_connection_and_credentials_flags_win() {
    let h = TestHost::fake("cli-config").await;
    h.tree(TREE, v("r1")).await;
    let dir = h.dir.path();
    // A syncer's file: the connection keys alone (no host-id, no run-directory).
    let auth = write(dir, "auth", "syncer:s3cret\n");
    let cfg = write(
        dir,
        "sync.cfg",
        &format!(
            "[zkdeployment]\nzookeeper = {}\nzookeeper-auth = file://{}\n",
            h.conn,
            auth.display()
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let run = support::run_with_async(
        &["status", "--json", "-c", cfg],
        None,
        &[("ZC_ZK_CONNECTION_STRING", NOWHERE)],
    )
    .await;
    run.assert_ok();
    let status: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(status["version"], json!("r1"));
    let run = support::run_async(&["tree", "export", "/acme", "--config", cfg]).await;
    run.assert_ok();
    assert!(run.stdout.contains("/a : foo"), "{run}");
    // The file's credentials: the imported node is the syncer's.
    let file = write(dir, "x.zk", "/x\n  y = 1\n");
    let run = support::run_async(&["tree", "import", file.to_str().unwrap(), "/", "-c", cfg]).await;
    run.assert_ok();
    let (acl, _) = h.client.get_acl("/x").await.unwrap();
    assert!(
        acl.iter()
            .any(|a| a.scheme() == "digest" && a.id().starts_with("syncer:")),
        "{acl:?}"
    );
    let run = support::run_async(&["resume", "--version", "r2", "-c", cfg]).await;
    run.assert_ok();
    let (data, _) = h.client.get_data("/hosts").await.unwrap();
    assert_eq!(decode(&data)["version"], json!("r2"));
    let tree = write(dir, "acme.zk", TREE);
    let run = support::run_async(&["plan", "--files", tree.to_str().unwrap(), "-c", cfg]).await;
    assert!(run.code == 0 || run.code == 10, "{run}");
    // A repository synced through the file's connection and credentials.
    let repo = TestRepo::new();
    let head = repo.commit(&[("acme.zk", TREE)]);
    let sync_dir = h.scratch("sync");
    std::fs::create_dir_all(&sync_dir).unwrap();
    let run = support::run_async(&[
        "sync",
        "-u",
        &repo.url(),
        "-t",
        sync_dir.join("co").to_str().unwrap(),
        "--tombstone",
        sync_dir.join("tomb").to_str().unwrap(),
        "--lock-file",
        sync_dir.join("lock").to_str().unwrap(),
        "-f",
        "-c",
        cfg,
    ])
    .await;
    run.assert_ok();
    let (data, _) = h.client.get_data("/hosts").await.unwrap();
    assert_eq!(decode(&data)["synced"], json!(head));

    // -z wins over the file's zookeeper.
    let wrong = write(
        dir,
        "wrong.cfg",
        &format!("[zkdeployment]\nzookeeper = {NOWHERE}\n"),
    );
    let wrong = wrong.to_str().unwrap();
    support::run_async(&["status", "-c", wrong, "-z", &h.conn])
        .await
        .assert_ok();
    let run = support::run_async(&["status", "-c", wrong]).await;
    run.assert_code(1);
    assert!(run.stderr.contains(NOWHERE), "{run}");
    // The agent's own file works as it is.
    let agent_cfg = h.config().display().to_string();
    support::run_async(&["status", "-c", &agent_cfg])
        .await
        .assert_ok();
}

#[tokio::test]
async fn a_bad_config_file_is_a_usage_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.cfg",
        "[zkdeployment]\nzookeeper = a:1\ncolour = red\n",
    );
    let bad = bad.display().to_string();
    for args in [
        vec!["status", "-c", &bad],
        vec!["tree", "export", "-c", &bad],
        vec!["resume", "-c", &bad],
    ] {
        let run = support::run_async(&args).await;
        run.assert_code(2);
        assert!(
            run.stderr
                .contains(&format!("{bad}:3: unknown key 'colour'")),
            "{args:?}: {run}"
        );
    }
    let missing = dir.path().join("missing.cfg").display().to_string();
    let run = support::run_async(&["status", "--config", &missing]).await;
    run.assert_code(2);
    assert!(run.stderr.contains(&missing), "{run}");
    // The TLS keys are read: a CA file that cannot be read is named, never a plain connection.
    let tls = write(
        dir.path(),
        "tls.cfg",
        &format!("[zkdeployment]\nzookeeper = {NOWHERE}\nzookeeper-tls-ca = /etc/zk-ca.pem\n"),
    );
    let run = support::run_async(&["status", "-c", tls.to_str().unwrap()]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("TLS CA file /etc/zk-ca.pem"), "{run}");
}
