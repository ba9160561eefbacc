//! What a hostile probe found (issue 41, items 7 to 12): lints `tree check` missed, host ids
//! ZooKeeper cannot store, a wrong chroot taken for an empty cluster, malformed host nodes
//! anyone may create, tree files that are links, and requests over the server's limit.

use crate::support;

use std::path::Path;

use support::git::TestRepo;
use support::Run;

/// A sync of `repo` into `conn`, with its own checkout, lock file and tombstone in `work`.
async fn sync(repo: &TestRepo, conn: &str, work: &Path) -> Run {
    let url = repo.url();
    let checkout = work.join("checkout").display().to_string();
    let tombstone = work.join("tombstone").display().to_string();
    let lock = work.join("lock").display().to_string();
    let args = [
        "sync",
        "-u",
        &url,
        "-t",
        &checkout,
        "--tombstone",
        &tombstone,
        "--lock-file",
        &lock,
        "-z",
        conn,
    ];
    support::run_async(&args).await
}

async fn tree_check(files: &[&Path]) -> Run {
    let mut args = vec!["tree".to_string(), "check".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    support::run_async(&args).await
}

// ---------------------------------------------------------------------------------------------
// 7. `tree check` runs every lint of `sync` that needs no ZooKeeper.

/// Two deployments of `foo` at two versions for host h1, in two files.
const WEB: &str = "/web\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";
const API: &str = "/api\n  /b : foo\n    version = '2.0'\n    /deploy\n      /h1\n";

#[tokio::test]
async fn tree_check_refuses_two_versions_of_one_package_for_one_host() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.zk");
    std::fs::write(&one, format!("{WEB}{API}")).unwrap();
    let run = tree_check(&[&one]).await;
    run.assert_code(1);
    assert!(
        run.stdout
            .contains("one.zk:2: inconsistent versions for foo on h1"),
        "{run}"
    );
    // Across files, as `sync` merges them: and a top-level node in two files.
    let (web, api) = (dir.path().join("web.zk"), dir.path().join("api.zk"));
    std::fs::write(&web, WEB).unwrap();
    std::fs::write(&api, API).unwrap();
    let run = tree_check(&[&web, &api]).await;
    run.assert_code(1);
    assert!(
        run.stdout.contains("inconsistent versions for foo on h1"),
        "{run}"
    );
    let again = dir.path().join("again.zk");
    std::fs::write(&again, WEB).unwrap();
    let run = tree_check(&[&web, &again]).await;
    run.assert_code(1);
    assert!(
        run.stdout.contains("duplicate top-level node /web"),
        "{run}"
    );
    // The same check in `sync`, with the same message.
    let conn = support::chroot("versions").await;
    let repo = TestRepo::new();
    repo.commit(&[("web.zk", WEB), ("api.zk", API)]);
    let work = tempfile::tempdir().unwrap();
    let run = sync(&repo, &conn, work.path()).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("inconsistent versions for foo on h1"),
        "{run}"
    );
    // One version passes.
    std::fs::write(&api, API.replace("2.0", "1.0")).unwrap();
    tree_check(&[&web, &api]).await.assert_ok();
}

// ---------------------------------------------------------------------------------------------
// 12. The size lint counts the request: path and data.

#[tokio::test]
async fn a_value_under_the_limit_on_a_long_path_is_refused_naming_the_node() {
    let long = "n".repeat(99);
    let deep = format!("/{long}/{long}/{long}");
    // The data alone is 100 bytes under the limit; with the 300-byte path the request is not.
    let limit = zkdeployment::zk::MAX_NODE_DATA;
    let value = "v".repeat(limit - 100 - "{\"x\":\"\"}".len());
    let node = |name: &str, depth: usize| format!("{}/{name}\n", "  ".repeat(depth));
    let prop = format!("      x = '{value}'\n");
    let text = format!(
        "{}{}{}{prop}",
        node(&long, 0),
        node(&long, 1),
        node(&long, 2)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.zk");
    std::fs::write(&file, &text).unwrap();
    let run = tree_check(&[&file]).await;
    run.assert_code(1);
    let expected = format!("long.zk:3: writing {deep} would send {} bytes", limit + 200);
    assert!(run.stdout.contains(&expected), "{run}");
    // `tree import` under a node: the imported path is longer than the file's.
    let short = format!("{}{}{}{prop}", node("a", 0), node("b", 1), node("c", 2));
    std::fs::write(&file, &short).unwrap();
    tree_check(&[&file]).await.assert_ok();
    let conn = support::chroot("long-path").await;
    let client = support::connect(&conn).await;
    let under = format!("/{long}");
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create(&under, b"", &mode).await.unwrap();
    let args = [
        "tree",
        "import",
        file.to_str().unwrap(),
        &under,
        "-z",
        &conn,
    ];
    let run = support::run_async(&args).await;
    run.assert_code(1);
    assert!(run.stderr.contains(&format!("{under}/a/b/c: ")), "{run}");
    assert!(run.stderr.contains("bytes of path and data"), "{run}");
    assert_eq!(
        client.list_children(&under).await.unwrap(),
        Vec::<String>::new()
    );
}

// ---------------------------------------------------------------------------------------------
// 8. `host-id` and `role` by ZooKeeper's path rules.

#[tokio::test]
async fn a_host_id_or_role_zookeeper_cannot_store_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let conn = support::chroot("host-id").await;
    let base = format!(
        "[zkdeployment]\nrun-directory = {}\nzookeeper = {conn}\n",
        dir.path().join("run").display()
    );
    let cases = [
        ("host-id", "😀"),
        ("host-id", "web\u{e000}1"),
        ("host-id", "web\u{fff0}"),
        ("role", "db😀"),
        ("role", "x\u{f8ff}"),
    ];
    for (i, (key, value)) in cases.iter().enumerate() {
        let text = if *key == "host-id" {
            format!("{base}host-id = {value}\n")
        } else {
            format!("{base}host-id = h1\nrole = {value}\n")
        };
        let path = dir.path().join(format!("{i}.cfg"));
        std::fs::write(&path, text).unwrap();
        let config = path.to_str().unwrap();
        for args in [vec!["agent", config], vec!["deploy", config, "--dry-run"]] {
            let run = support::run_async(&args).await;
            run.assert_code(2);
            assert!(run.stderr.contains(key), "{value:?} {args:?}: {run}");
            assert!(
                run.stderr.contains("ZooKeeper node name"),
                "{value:?}: {run}"
            );
        }
    }
    // A name the server takes is accepted.
    let path = dir.path().join("ok.cfg");
    std::fs::write(&path, format!("{base}host-id = web-é中\n")).unwrap();
    let run = support::run_async(&["deploy", path.to_str().unwrap(), "--dry-run"]).await;
    assert_ne!(run.code, 2, "{run}");
}

// ---------------------------------------------------------------------------------------------
// 11. Tree files that are links.

/// Commits `files` on master of `repo`, then `links` (name, target) as symbolic links.
fn commit_with_links(repo: &TestRepo, files: &[(&str, &str)], links: &[(&str, &str)]) {
    repo.commit(files);
    let git = git2::Repository::open(repo.path()).unwrap();
    let mut index = git.index().unwrap();
    for (name, target) in links {
        std::os::unix::fs::symlink(target, repo.path().join(name)).unwrap();
        index.add_path(Path::new(name)).unwrap();
    }
    index.write().unwrap();
    let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("test", "test@example.com").unwrap();
    let parent = git.head().unwrap().peel_to_commit().unwrap();
    git.commit(Some("HEAD"), &sig, &sig, "links", &tree, &[&parent])
        .unwrap();
}

#[tokio::test]
async fn tree_files_that_are_links_are_read_inside_the_repository_and_refused_outside() {
    let conn = support::chroot("links").await;
    let client = support::connect(&conn).await;
    let prod = "/prod\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";
    // A link inside the repository is read as the file it names; a directory named like a
    // tree file is skipped with a warning.
    let repo = TestRepo::new();
    let files = [("common/prod.zk", prod), ("dir.zk/x", "x")];
    commit_with_links(&repo, &files, &[("prod.zk", "common/prod.zk")]);
    let work = tempfile::tempdir().unwrap();
    let run = sync(&repo, &conn, work.path()).await;
    run.assert_ok();
    assert!(run.stderr.contains("skipped dir.zk: a directory"), "{run}");
    let (data, _) = client.get_data("/prod/a").await.unwrap();
    assert_eq!(zkdeployment::zk::decode(&data)["version"], "1.0");
    // A link out of the repository is an error naming the file; nothing is written.
    let repo = TestRepo::new();
    commit_with_links(&repo, &[], &[("evil.zk", "/prodx")]);
    let conn = support::chroot("links-out").await;
    let client = support::connect(&conn).await;
    let run = sync(&repo, &conn, tempfile::tempdir().unwrap().path()).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("tree file evil.zk: a link out of the repository (/prodx)"),
        "{run}"
    );
    assert_eq!(
        client.list_children("/").await.unwrap(),
        Vec::<String>::new()
    );
    let repo = TestRepo::new();
    commit_with_links(&repo, &[], &[("up.zk", "../x/prod.zk")]);
    let run = sync(&repo, &conn, tempfile::tempdir().unwrap().path()).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("up.zk: a link out of the repository"),
        "{run}"
    );
    assert_eq!(
        client.list_children("/").await.unwrap(),
        Vec::<String>::new()
    );
}

/// An index entry of `path` (raw bytes) with `mode`, naming object `id`.
fn index_entry(path: &[u8], mode: u32, id: git2::Oid) -> git2::IndexEntry {
    git2::IndexEntry {
        ctime: git2::IndexTime::new(0, 0),
        mtime: git2::IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: path.len().min(0xfff) as u16,
        flags_extended: 0,
        path: path.to_vec(),
    }
}

/// Entries a sync skips are named, one warning line each: a submodule named like a tree file,
/// and a tree file whose name is not UTF-8. The other files are synced.
#[tokio::test]
async fn submodules_and_names_that_are_not_utf8_are_skipped_with_a_warning() {
    let conn = support::chroot("links-skipped").await;
    let client = support::connect(&conn).await;
    let prod = "/prod\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";
    let repo = TestRepo::new();
    repo.commit(&[("prod.zk", prod)]);
    let git = git2::Repository::open(repo.path()).unwrap();
    let parent = git.head().unwrap().peel_to_commit().unwrap();
    let mut index = git.index().unwrap();
    let blob = git.blob(b"/latin1\n").unwrap();
    index
        .add(&index_entry(b"caf\xe9.zk", 0o100644, blob))
        .unwrap();
    index
        .add(&index_entry(b"sub.zk", 0o160000, parent.id()))
        .unwrap();
    let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("test", "test@example.com").unwrap();
    git.commit(Some("HEAD"), &sig, &sig, "skipped", &tree, &[&parent])
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let run = sync(&repo, &conn, work.path()).await;
    run.assert_ok();
    for line in [
        "skipped sub.zk: a submodule, not a file",
        "skipped \"caf\u{fffd}.zk\": its name is not UTF-8",
    ] {
        assert!(run.stderr.contains(line), "{line}\n{run}");
    }
    let roots = client.list_children("/").await.unwrap();
    assert!(
        roots.contains(&"prod".to_string()) && !roots.contains(&"latin1".to_string()),
        "{roots:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 9. A chroot that does not exist is named, never taken for an empty cluster.

#[tokio::test]
async fn a_missing_chroot_is_named_by_every_command_that_reads_the_cluster() {
    let conn = support::chroot("no-chroot").await;
    let (server, chroot) = support::split_chroot(&conn);
    let missing = format!("{server}{chroot}/missing");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.zk");
    std::fs::write(&file, WEB).unwrap();
    let run =
        support::run_async(&["plan", "--files", file.to_str().unwrap(), "-z", &missing]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("not initialised") && run.stderr.contains(&missing),
        "{run}"
    );
    assert!(!run.stdout.contains("No changes"), "{run}");
    let repo = TestRepo::new();
    repo.commit(&[("web.zk", WEB)]);
    for dry in [false, true] {
        let work = tempfile::tempdir().unwrap();
        let run = if dry {
            let url = repo.url();
            let checkout = work.path().join("c").display().to_string();
            let lock = work.path().join("l").display().to_string();
            let tomb = work.path().join("t").display().to_string();
            let args = [
                "sync",
                "-d",
                "-u",
                &url,
                "-t",
                &checkout,
                "--lock-file",
                &lock,
                "--tombstone",
                &tomb,
                "-z",
                &missing,
            ];
            support::run_async(&args).await
        } else {
            sync(&repo, &missing, work.path()).await
        };
        run.assert_code(1);
        assert!(
            run.stderr
                .contains(&format!("the chroot of {missing} does not exist")),
            "{run}"
        );
    }
    let client = support::connect(&conn).await;
    assert_eq!(
        client.list_children("/").await.unwrap(),
        Vec::<String>::new()
    );
    for args in [
        vec!["status", "-z", &missing],
        vec!["resume", "-z", &missing],
    ] {
        let run = support::run_async(&args).await;
        run.assert_code(1);
        assert!(run.stderr.contains("not initialised"), "{args:?}: {run}");
    }
    let file = file.to_str().unwrap();
    for args in [
        vec!["tree", "export", "-z", &missing],
        vec!["tree", "import", file, "-z", &missing],
    ] {
        let run = support::run_async(&args).await;
        run.assert_code(1);
        let expected = format!("the chroot of {missing} does not exist");
        assert!(run.stderr.contains(&expected), "{args:?}: {run}");
    }
    // A pass by hand, run or dry run.
    let cfg = dir.path().join("agent.cfg");
    let run_dir = dir.path().join("run");
    let text = format!(
        "[zkdeployment]\nhost-id = h1\nrun-directory = {}\nzookeeper = {missing}\n",
        run_dir.display()
    );
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap();
    for args in [vec!["deploy", cfg], vec!["deploy", cfg, "--dry-run"]] {
        let run = support::run_async(&args).await;
        run.assert_code(1);
        let expected =
            format!("/hosts does not exist at {missing}: the cluster is not initialised");
        assert!(run.stderr.contains(&expected), "{args:?}: {run}");
    }
}

// ---------------------------------------------------------------------------------------------
// 10. Host nodes anyone may create: a malformed inventory is no inventory; long values are cut.

#[tokio::test]
async fn a_malformed_host_node_is_planned_as_converged_and_long_values_are_cut() {
    let conn = support::chroot("bad-inventory").await;
    let client = support::connect(&conn).await;
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let hosts = serde_json::json!({"version": "r1"}).to_string();
    client
        .create("/hosts", hosts.as_bytes(), &mode)
        .await
        .unwrap();
    let long = "x".repeat(300_000);
    let nodes = [
        ("nope", serde_json::json!({"inventory": "nope"})),
        (
            "long",
            serde_json::json!({"inventory": long.clone(), "name": long.clone(), "role": long}),
        ),
    ];
    for (id, props) in nodes {
        let data = props.to_string();
        client
            .create(&format!("/hosts/{id}"), data.as_bytes(), &mode)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.zk");
    std::fs::write(&file, WEB).unwrap();
    let run = support::run_async(&["plan", "--files", file.to_str().unwrap(), "-z", &conn]).await;
    run.assert_ok();
    assert!(
        run.stderr.contains("nope") && run.stderr.contains("inventory"),
        "{run}"
    );
    for out in [&run.stdout, &run.stderr] {
        assert!(out.lines().all(|l| l.len() < 2000), "plan: a long line");
    }
    let run = support::run_async(&["status", "-z", &conn]).await;
    for out in [&run.stdout, &run.stderr] {
        assert!(
            out.lines().all(|l| l.len() < 2000),
            "status: a long line: {}",
            out.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Low: two Unicode spellings of one name.

/// `/acme/café` written with `é` (NFC) in one file and with `e` and a combining accent (NFD)
/// in an overlay, and one node's property in both spellings: allowed (ZooKeeper stores both),
/// but `tree check` and `sync` warn at the second spelling, with file and line, naming the
/// first, and write the names as code points so that they read differently. A name alone in
/// its spelling, and different names that look alike only loosely, get no warning.
#[tokio::test]
async fn two_unicode_spellings_of_one_name_are_warned_about_with_file_and_line() {
    let nfc = "caf\u{e9}";
    let nfd = "cafe\u{301}";
    let acme = format!(
        "/acme\n  /{nfc}\n    x = 1\n  /cafe\n  /caf\u{e8}\n  /db\n    {nfc} = 1\n    {nfd} = 2\n"
    );
    let over = format!("/acme\n  /{nfd}\n    y = 2\n");
    let warnings = |a: &str, o: &str| {
        [
            format!("{a}:6: warning: property 'cafe\\u{{301}}' of /acme/db is another Unicode spelling of 'caf\\u{{e9}}': two properties that look identical"),
            format!("{o}:2: warning: node 'cafe\\u{{301}}' under /acme is another Unicode spelling of 'caf\\u{{e9}}' ({a}:2): two nodes that look identical"),
        ]
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, o) = (dir.path().join("acme.zk"), dir.path().join("over.zkx"));
    std::fs::write(&a, &acme).unwrap();
    std::fs::write(&o, &over).unwrap();
    let run = tree_check(&[&a, &o]).await;
    run.assert_ok();
    let mut lines: Vec<&str> = run.stdout.lines().collect();
    lines.sort();
    let want = warnings(&a.display().to_string(), &o.display().to_string());
    assert_eq!(lines, want, "{run}");
    // Alone, the file has one spelling of each node name.
    std::fs::write(&a, acme.replace(&format!("    {nfd} = 2\n"), "")).unwrap();
    let run = tree_check(&[&a]).await;
    run.assert_ok();
    assert_eq!(run.stdout, "", "{run}");

    let conn = support::chroot("probe-spellings").await;
    let client = support::connect(&conn).await;
    let repo = TestRepo::new();
    repo.commit(&[("acme.zk", acme.as_str()), ("over.zkx", over.as_str())]);
    let work = tempfile::tempdir().unwrap();
    let run = sync(&repo, &conn, work.path()).await;
    run.assert_ok();
    for warning in warnings("acme.zk", "over.zkx") {
        assert!(run.stderr.contains(&warning), "{warning}\n{run}");
    }
    let mut children = client.list_children("/acme").await.unwrap();
    children.sort();
    assert_eq!(children, ["cafe", nfd, "caf\u{e8}", nfc, "db"]);
}
