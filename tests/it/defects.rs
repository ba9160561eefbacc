//! The defects a hostile operator found (issue 15), each reproduced on a real ZooKeeper with
//! the real binary, real git repositories and real processes: a sync that fails part-way, names
//! the server refuses, deploy scripts that leave daemons, git servers that never answer, a
//! stuck sync's lock file, a missing `/hosts`, unreachable and non-regular configuration
//! values, paths named in errors, readable messages, and sessions closed on exit.

use crate::support;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use support::agent::{lines, v, wait_for, wait_for_async, Pm, TestHost};
use support::git::TestRepo;
use support::proxy::Proxy;
use support::rpm::FakeYum;
use support::{four_letter, split_chroot, Run, ZkServer};
use zkdeployment::zk::decode;
use zookeeper_client::{Acls, CreateMode};

/// Bound on every wait of these tests (never reached when things work).
const LIMIT: Duration = Duration::from_secs(40);

/// One deployment of `foo` at `/acme/a` for host h1.
const TREE: &str = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";

/// A sync of `repo` into `conn`, with its own checkout, lock file and tombstone in `work`.
async fn sync(repo: &TestRepo, conn: &str, work: &Path, extra: &[&str]) -> Run {
    let url = repo.url();
    let checkout = work.join("checkout").display().to_string();
    let tombstone = work.join("tombstone").display().to_string();
    let lock = work.join("lock").display().to_string();
    let mut args = vec![
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
    args.extend_from_slice(extra);
    support::run_async(&args).await
}

async fn hosts_props(client: &zookeeper_client::Client) -> serde_json::Map<String, Value> {
    let (data, _) = client.get_data("/hosts").await.unwrap();
    decode(&data)
}

async fn exists(client: &zookeeper_client::Client, path: &str) -> bool {
    client.check_stat(path).await.unwrap().is_some()
}

/// A local address where nothing listens (bound, then released).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------------
// 1. A failed sync leaves nothing it cannot clean up; `tree check` refuses what the server does.

#[tokio::test]
async fn tree_check_refuses_every_name_the_server_refuses() {
    let conn = support::chroot("names").await;
    let client = support::connect(&conn).await;
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "😀",
        "a\u{1}b",
        "del\u{7f}",
        "c1\u{85}",
        "private\u{e000}",
        "special\u{fff0}",
        "..",
    ];
    for name in names {
        let created = client
            .create(
                &format!("/{name}"),
                b"",
                &CreateMode::Persistent.with_acls(Acls::anyone_all()),
            )
            .await;
        assert!(created.is_err(), "the server took /{name:?}");
        let file = dir.path().join("t.zk");
        std::fs::write(&file, format!("/{name}\n  x = 1\n")).unwrap();
        let run = support::run_async(&["tree", "check", file.to_str().unwrap()]).await;
        run.assert_code(1);
        assert!(run.stdout.contains("t.zk:1: node name"), "{name:?}: {run}");
    }
    // A name the server takes passes.
    std::fs::write(dir.path().join("ok.zk"), "/ok-é中\n  x = 1\n").unwrap();
    let ok = dir.path().join("ok.zk");
    support::run_async(&["tree", "check", ok.to_str().unwrap()])
        .await
        .assert_ok();
}

#[tokio::test]
async fn a_sync_with_an_emoji_node_writes_nothing() {
    let conn = support::chroot("emoji-sync").await;
    let client = support::connect(&conn).await;
    let repo = TestRepo::new();
    repo.commit(&[("e.zk", "/😀\n  x = 1\n")]);
    let work = tempfile::tempdir().unwrap();
    let run = sync(&repo, &conn, work.path(), &[]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("Basic Multilingual Plane"), "{run}");
    assert_eq!(
        client.list_children("/").await.unwrap(),
        Vec::<String>::new()
    );
}

/// A bad `n` (not an integer from 0 to 10000) is refused by `tree check` and `sync` with the
/// file and line of the deploy node, before anything is written.
#[tokio::test]
async fn a_bad_instance_count_is_linted_with_file_and_line() {
    let conn = support::chroot("bad-n").await;
    let client = support::connect(&conn).await;
    let dir = tempfile::tempdir().unwrap();
    for value in ["-1", "True", "'2'", "1.5", "None"] {
        let text = format!("{TREE}        n = {value}\n");
        let file = dir.path().join("t.zk");
        std::fs::write(&file, &text).unwrap();
        let run = support::run_async(&["tree", "check", file.to_str().unwrap()]).await;
        run.assert_code(1);
        let expected = format!("t.zk:5: Invalid n for /acme/a/deploy/h1: {value}");
        assert!(run.stdout.contains(&expected), "{value}: {run}");

        let repo = TestRepo::new();
        repo.commit(&[("t.zk", &text)]);
        let work = tempfile::tempdir().unwrap();
        let run = sync(&repo, &conn, work.path(), &[]).await;
        run.assert_code(1);
        assert!(run.stderr.contains(&expected), "{value}: {run}");
        assert!(!exists(&client, "/acme").await, "{value}: written");
    }
    let ok = dir.path().join("ok.zk");
    std::fs::write(&ok, format!("{TREE}        n = 3\n")).unwrap();
    support::run_async(&["tree", "check", ok.to_str().unwrap()])
        .await
        .assert_ok();
}

#[tokio::test]
async fn a_sync_that_fails_part_way_is_cleaned_up_after_a_revert() {
    let conn = support::chroot("partial-sync").await;
    let client = support::connect(&conn).await;
    // A node nobody may write: the sync's write to it fails after the batches before it
    // (a new top-level node with more nodes than one batch holds) were applied.
    client
        .create(
            "/z-locked",
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_read()),
        )
        .await
        .unwrap();
    let mut big = String::from("/a-new\n");
    for i in 0..2 * zkdeployment::zk::import::BATCH_OPS {
        big.push_str(&format!("  /n{i}\n"));
    }
    let repo = TestRepo::new();
    let work = tempfile::tempdir().unwrap();
    repo.commit(&[("a.zk", &big), ("z.zk", "/z-locked\n  x = 1\n")]);
    let run = sync(&repo, &conn, work.path(), &[]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("/z-locked"), "{run}");
    // Part of the tree was written, the cluster version was not changed...
    assert!(exists(&client, "/a-new").await);
    let hosts = hosts_props(&client).await;
    assert_eq!(hosts["version"], json!("initial"));
    // ...and the new top-level node was claimed before anything was written under it.
    assert_eq!(hosts["synced-roots"], json!(["a-new", "z-locked"]));

    // The file is reverted: the next sync removes what the failed one left.
    repo.commit(&[("b.zk", "/b\n  y = 1\n")]);
    sync(&repo, &conn, work.path(), &[]).await.assert_ok();
    assert!(!exists(&client, "/a-new").await);
    assert!(!exists(&client, "/z-locked").await);
    assert!(exists(&client, "/b").await);
    assert_eq!(hosts_props(&client).await["synced-roots"], json!(["b"]));
}

#[tokio::test]
async fn a_syncer_killed_while_applying_leaves_nothing_a_revert_does_not_clean() {
    let direct = support::chroot("killed-sync").await;
    let client = support::connect(&direct).await;
    let (server, chroot) = split_chroot(&direct);
    let proxy = Proxy::start(server);
    let through_proxy = format!("{}{chroot}", proxy.address());
    // Many batches: the apply is still going when its first batch is seen.
    let mut big = String::from("/a-new\n");
    for i in 0..80 * zkdeployment::zk::import::BATCH_OPS {
        big.push_str(&format!("  /n{i}\n"));
    }
    let repo = TestRepo::new();
    let work = tempfile::tempdir().unwrap();
    repo.commit(&[("a.zk", &big)]);
    let url = repo.url();
    let checkout = work.path().join("checkout").display().to_string();
    let tombstone = work.path().join("tombstone").display().to_string();
    let lock = work.path().join("lock").display().to_string();
    let mut syncer = tokio::process::Command::new(support::bin())
        .args([
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
            &through_proxy,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for_async("the first batch of the apply", LIMIT, || async {
        exists(&client, "/a-new").await.then_some(())
    })
    .await;
    // Nothing more reaches the server; the syncer dies mid-apply.
    proxy.freeze();
    syncer.start_kill().unwrap();
    syncer.wait().await.unwrap();
    proxy.restore();
    let hosts = hosts_props(&client).await;
    assert_eq!(
        hosts["version"],
        json!("initial"),
        "the sync should have been killed before it finished"
    );
    assert_eq!(hosts["synced-roots"], json!(["a-new"]));

    // Reverted: once the dead syncer's session (and its /hosts-lock node) is gone, the next
    // sync removes what it left.
    repo.commit(&[("b.zk", "/b\n  y = 1\n")]);
    wait_for_async("the dead syncer's cluster lock to go", LIMIT, || async {
        client
            .list_children("/hosts-lock")
            .await
            .map_or(true, |c| c.is_empty())
            .then_some(())
    })
    .await;
    sync(&repo, &direct, work.path(), &[]).await.assert_ok();
    assert!(!exists(&client, "/a-new").await);
    assert!(exists(&client, "/b").await);
}

// ---------------------------------------------------------------------------------------------
// 2. A deploy script is done when its process exits, whatever it leaves running.

/// Kills the daemons the test payload started (their pids are in `file`) and says whether
/// every one of them was still running.
fn kill_daemons(file: &Path) -> bool {
    let mut all_alive = true;
    for pid in lines(file) {
        let pid: i32 = pid.trim().parse().unwrap();
        let pid = nix::unistd::Pid::from_raw(pid);
        all_alive &= nix::sys::signal::kill(pid, None).is_ok();
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    all_alive
}

#[tokio::test]
async fn a_deploy_script_that_leaves_a_daemon_ends_its_step_when_it_exits() {
    let h = TestHost::fake("daemon").await;
    h.tree(TREE, v("r1")).await;
    let daemons = h.scratch("daemons");
    let daemons_env = daemons.display().to_string();
    let mut agent = h.spawn("agent", &[], &[("ZK_TEST_DAEMON", &daemons_env)]);
    h.wait_status("r1", &["done"], LIMIT).await;
    // The node lock went with the step.
    let lock = "/agent-locks/acme,a";
    assert_eq!(
        h.client.list_children(lock).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(h.report()["outcome"], json!("done"));
    let step = &h.report()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == json!("deploy"))
        .cloned()
        .unwrap();
    assert!(
        step["output"]
            .as_str()
            .unwrap_or("")
            .contains("started a daemon")
            || agent.output().contains("started a daemon"),
        "{step}\n{}",
        agent.output()
    );
    // SIGTERM ends the agent although the daemon still holds the script's output.
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert!(
        kill_daemons(&daemons),
        "the daemon should have outlived the pass"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Git network operations are bounded; a lock file held too long is reported.

#[tokio::test]
async fn a_sync_from_a_git_server_that_never_answers_fails_in_bounded_time() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts every connection, reads nothing, answers nothing, closes nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let conn = support::chroot("git-silent").await;
    let work = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/tree.git");
    let checkout = work.path().join("checkout").display().to_string();
    let tombstone = work.path().join("tombstone");
    let tomb = tombstone.display().to_string();
    let lock = work.path().join("lock").display().to_string();
    let run = support::run_async(&[
        "sync",
        "-u",
        &url,
        "-t",
        &checkout,
        "--tombstone",
        &tomb,
        "--lock-file",
        &lock,
        "--git-timeout",
        "1",
        "-z",
        &conn,
    ])
    .await;
    run.assert_code(1);
    assert!(run.stderr.contains("git clone"), "{run}");
    assert!(support::read(&tombstone).contains("sync failed: git clone"));
}

#[tokio::test]
async fn a_sync_finding_the_lock_file_held_too_long_says_so() {
    let conn = support::chroot("stale-lock").await;
    let repo = TestRepo::new();
    repo.commit(&[("a.zk", "/a\n  x = 1\n")]);
    let work = tempfile::tempdir().unwrap();
    let lock_path = work.path().join("lock");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&lock_path)
        .unwrap();
    writeln!(file, "4242").unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    // Held for a minute: another run is busy, nothing to say.
    held.set_modified(SystemTime::now() - Duration::from_secs(60))
        .unwrap();
    let run = sync(&repo, &conn, work.path(), &[]).await;
    run.assert_ok();
    assert_eq!(run.stderr, "");
    // Held for two hours: stuck.
    held.set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();
    let run = sync(&repo, &conn, work.path(), &[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("pid 4242") && run.stderr.contains("seems stuck"),
        "{run}"
    );
    // The bound is the operator's.
    sync(&repo, &conn, work.path(), &["--stale-lock", "86400"])
        .await
        .assert_ok();
    drop(held);
}

// ---------------------------------------------------------------------------------------------
// 4. `status` without `/hosts`.

#[tokio::test]
async fn status_without_hosts_says_the_cluster_is_not_initialised() {
    let conn = support::chroot("no-hosts").await;
    let run = support::run_async(&["status", "-z", &conn]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("/hosts does not exist")
            && run.stderr.contains("not initialised")
            && run.stderr.contains("chroot"),
        "{run}"
    );
    assert_eq!(run.stdout, "");
}

// ---------------------------------------------------------------------------------------------
// 5, 6. Configuration values: unreachable is retryable; a FIFO is refused.

fn config_with(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("agent.cfg");
    std::fs::write(
        &path,
        format!(
            "[zkdeployment]\nhost-id = h1\nrun-directory = {}\nzookeeper = 127.0.0.1:{}\n{extra}",
            dir.join("run").display(),
            closed_port()
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn an_unreachable_config_value_exits_75_not_2() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_with(
        dir.path(),
        &format!("host-name = http://127.0.0.1:{}/name\n", closed_port()),
    );
    let cfg_path = cfg.to_str().unwrap();
    let run = support::run_async(&["deploy", cfg_path]).await;
    run.assert_code(75);
    assert!(
        run.stderr.contains("host-name: cannot fetch the value now"),
        "{run}"
    );
    // The agent waits a minute before it exits 75 (keeping systemd's restarts under the
    // unit's start limit); SIGTERM ends the wait.
    let mut agent = tokio::process::Command::new(support::bin())
        .args(["agent", cfg_path])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("agent.err")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let said = wait_for("the agent to say it will exit 75", LIMIT, || {
        let text = std::fs::read_to_string(dir.path().join("agent.err")).unwrap_or_default();
        text.contains("exiting 75 in 60 s").then_some(text)
    })
    .await;
    assert!(
        said.contains("host-name: cannot fetch the value now"),
        "{said}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(LIMIT, agent.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(143));
    // The unit restarts the agent after 75, not after 2 (a configuration to fix).
    let unit = support::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/zkdeployment-agent.service"),
    );
    let prevent = unit
        .lines()
        .find_map(|l| l.strip_prefix("RestartPreventExitStatus="))
        .unwrap();
    assert_eq!(prevent.split_whitespace().collect::<Vec<_>>(), ["2"]);
    assert!(unit.contains("Restart=on-failure"));
    // A wrong configuration still exits 2.
    let bad = config_with(dir.path(), "no-such-key = 1\n");
    support::run_async(&["agent", bad.to_str().unwrap()])
        .await
        .assert_code(2);
}

#[tokio::test]
async fn a_file_value_naming_a_fifo_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let cfg = config_with(
        dir.path(),
        &format!("host-name = file://{}\n", fifo.display()),
    );
    let cfg = cfg.to_str().unwrap();
    let run = support::run_async(&["deploy", cfg]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("a FIFO"), "{run}");
    let run = support::run_async(&["monitor", cfg]).await;
    run.assert_code(3);
    assert!(
        run.stdout.starts_with("ZKDEPLOYMENT UNKNOWN") && run.stdout.contains("a FIFO"),
        "{run}"
    );
}

// ---------------------------------------------------------------------------------------------
// 7. A run directory that cannot be written: the halt names the path that failed.

#[tokio::test]
async fn a_properties_file_that_cannot_be_written_is_named_in_the_halt() {
    let h = TestHost::fake("run-props").await;
    h.tree(TREE, v("r1")).await;
    std::fs::create_dir_all(h.run_dir()).unwrap();
    // `run/properties` cannot be made a directory (as on a read-only run directory; the
    // tests run as root, for whom permissions do not stop anything).
    std::fs::write(h.run_dir().join("properties"), "in the way").unwrap();
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    let halt = &h.hosts().await["halt"];
    let error = halt["error"].as_str().unwrap_or_default();
    let expected = h.run_dir().join("properties").display().to_string();
    assert!(error.contains(&expected), "{halt}");
    assert!(!error.contains("/etc/"), "{halt}");
}

// ---------------------------------------------------------------------------------------------
// 8. Messages.

#[tokio::test]
async fn a_missing_repository_path_is_named() {
    let conn = support::chroot("no-repo").await;
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("no-such-repo").display().to_string();
    for url in [missing.clone(), format!("file://{missing}")] {
        let checkout = work.path().join("checkout").display().to_string();
        let lock = work.path().join("lock").display().to_string();
        let tomb = work.path().join("tombstone").display().to_string();
        let run = support::run_async(&[
            "sync",
            "-u",
            &url,
            "-t",
            &checkout,
            "--lock-file",
            &lock,
            "--tombstone",
            &tomb,
            "-z",
            &conn,
        ])
        .await;
        run.assert_code(1);
        assert!(
            run.stderr.contains(&format!("{missing} does not exist")),
            "{run}"
        );
        assert!(!run.stderr.contains("unsupported URL protocol"), "{run}");
    }
}

#[tokio::test]
async fn refused_and_unresolvable_zookeeper_hosts_say_so() {
    let refused = format!("127.0.0.1:{}", closed_port());
    let run = support::run_async(&["status", "-z", &refused]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains(&format!("{refused}: connection refused")),
        "{run}"
    );
    let unknown = "no-such-host.invalid:2181";
    let run = support::run_async(&["status", "-z", unknown]).await;
    run.assert_code(1);
    assert!(
        run.stderr
            .contains(&format!("{unknown}: cannot resolve the name")),
        "{run}"
    );
}

#[tokio::test]
async fn a_run_directory_that_is_a_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_with(dir.path(), "");
    std::fs::write(dir.path().join("run"), "a file").unwrap();
    let run = support::run_async(&["deploy", cfg.to_str().unwrap()]).await;
    run.assert_code(2);
    assert!(
        run.stderr.contains(&format!(
            "{}: not a directory",
            dir.path().join("run").display()
        )),
        "{run}"
    );
    assert!(!run.stderr.contains("File exists"), "{run}");
}

#[tokio::test]
async fn a_byte_order_mark_is_visible_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A tree file saved with a byte-order mark.
    let tree = dir.path().join("bom.zk");
    std::fs::write(&tree, "\u{feff}/a\n  x = 1\n").unwrap();
    let run = support::run_async(&["tree", "check", tree.to_str().unwrap()]).await;
    run.assert_code(1);
    assert!(run.stdout.contains("\\ufeff"), "{run}");
    // A configuration file with one before a key.
    let cfg = dir.path().join("agent.cfg");
    std::fs::write(&cfg, "[zkdeployment]\n\u{feff}host-id = h1\n").unwrap();
    let run = support::run_async(&["deploy", cfg.to_str().unwrap()]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("\\u{feff}"), "{run}");
}

#[tokio::test]
async fn a_megabyte_bad_line_is_not_echoed_whole() {
    let conn = support::chroot("long-line").await;
    let long = "z".repeat(1024 * 1024);
    let repo = TestRepo::new();
    repo.commit(&[("a.zk", &format!("/a\n  x = {long}\n"))]);
    let work = tempfile::tempdir().unwrap();
    let run = sync(&repo, &conn, work.path(), &[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("a.zk:2:"),
        "{}",
        &run.stderr[..2000.min(run.stderr.len())]
    );
    assert!(
        run.stderr.len() < 8 * 1024,
        "{} bytes on stderr",
        run.stderr.len()
    );
    let tombstone = support::read(work.path().join("tombstone"));
    assert!(
        tombstone.len() < 8 * 1024,
        "{} bytes in the tombstone",
        tombstone.len()
    );
    // The same for tree check, and for a configuration line.
    let file = work.path().join("long.zk");
    std::fs::write(&file, format!("/a\n  x = {long}\n")).unwrap();
    let run = support::run_async(&["tree", "check", file.to_str().unwrap()]).await;
    run.assert_code(1);
    assert!(run.stdout.len() < 8 * 1024, "{} bytes", run.stdout.len());
    let cfg = work.path().join("agent.cfg");
    std::fs::write(&cfg, format!("[zkdeployment]\nhost-id = h1\n{long}\n")).unwrap();
    let run = support::run_async(&["deploy", cfg.to_str().unwrap()]).await;
    run.assert_code(2);
    assert!(run.stderr.len() < 8 * 1024, "{} bytes", run.stderr.len());
}

#[tokio::test]
async fn monitor_unknown_lines_carry_no_empty_performance_data() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.cfg");
    let run = support::run_async(&["monitor", missing.to_str().unwrap()]).await;
    run.assert_code(3);
    assert!(run.stdout.starts_with("ZKDEPLOYMENT UNKNOWN - "), "{run}");
    assert!(!run.stdout.contains("age="), "{run}");
    let run = support::run_async(&["monitor", "--no-such-flag"]).await;
    run.assert_code(3);
    assert!(!run.stdout.contains("age="), "{run}");
}

// ---------------------------------------------------------------------------------------------
// 9. Every command closes its session before it exits.

/// The server's count of open sessions (`mntr` `zk_global_sessions`).
fn sessions(port: u16) -> i64 {
    let mntr = four_letter(port, "mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_global_sessions"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_global_sessions in mntr:\n{mntr}"))
}

#[tokio::test]
async fn every_command_closes_its_session_on_exit() {
    // A server of this test's own, so that the count is this test's alone.
    let server = ZkServer::start();
    let port = server.port;
    let conn = server.connect_string();
    let h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    h.tree(TREE, v("r1")).await;
    // The test's own client.
    let baseline = sessions(port);
    assert_eq!(baseline, 1);
    let cfg = h.config();
    let cfg = cfg.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.zk");
    std::fs::write(&file, "/extra\n  x = 1\n").unwrap();
    let file = file.to_str().unwrap();
    let repo = TestRepo::new();
    repo.commit(&[("a.zk", TREE)]);

    let commands: Vec<(Vec<&str>, i32)> = vec![
        (vec!["tree", "import", file, "-z", &conn], 0),
        (vec!["tree", "export", "/", "-z", &conn], 0),
        (vec!["tree", "export", "/no-such-node", "-z", &conn], 1),
        (vec!["status", "-z", &conn], 0),
        (vec!["deploy", cfg], 0),
        (vec!["deploy", cfg, "--dry-run"], 0),
        (vec!["monitor", cfg], 2), // CRITICAL: no agent runs, so no host node
        (vec!["resume", "--version", "r1", "-z", &conn], 0),
    ];
    for (args, code) in &commands {
        let run = support::run_async(args).await;
        run.assert_code(*code);
        assert_eq!(sessions(port), baseline, "after {args:?}\n{run}");
    }
    // The syncer (its cluster lock is an ephemeral node of its session).
    let work = tempfile::tempdir().unwrap();
    sync(&repo, &conn, work.path(), &["--force"])
        .await
        .assert_ok();
    assert_eq!(sessions(port), baseline, "after sync");

    // The agent, stopped by SIGTERM while it starts (waiting out the host node of a dead
    // agent of this host, here held by the test's own session).
    let stale = json!({"name": h.name, "pid": support::agent::dead_pid()});
    h.client
        .create(
            "/hosts/h1",
            serde_json::to_string(&stale).unwrap().as_bytes(),
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let mut agent = h.spawn("agent", &[], &[]);
    wait_for("the agent to wait out the stale host node", LIMIT, || {
        agent
            .output()
            .contains("waiting for its session to expire")
            .then_some(())
    })
    .await;
    assert_eq!(sessions(port), baseline + 1);
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert_eq!(
        sessions(port),
        baseline,
        "after the agent stopped while starting"
    );
    h.client.delete("/hosts/h1", None).await.unwrap();

    // The agent, stopped by SIGTERM: its host node goes at once.
    let mut agent = h.spawn("agent", &[], &[]);
    wait_for_async("the agent's host node", LIMIT, || async {
        h.host_node().await.map(|_| ())
    })
    .await;
    assert_eq!(sessions(port), baseline + 1);
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    assert_eq!(sessions(port), baseline, "after the agent");
    assert!(h.host_node().await.is_none());

    // A deploy pass stopped by SIGTERM while its script runs: the step finishes, the session
    // is closed.
    h.set_version(v("r2")).await;
    let times = h.scratch("times");
    let times_env = times.display().to_string();
    let mut deploy = h.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "2"), ("ZK_TEST_TIMES", &times_env)],
    );
    wait_for("the deploy script to start", LIMIT, || {
        (!lines(&times).is_empty()).then_some(())
    })
    .await;
    deploy.terminate();
    let code = deploy.wait(LIMIT).await;
    assert!(code == 0 || code == 3, "{code}: {}", deploy.output());
    assert_eq!(sessions(port), baseline, "after the deploy pass");

    // A short command stopped by SIGTERM while it reads: it stops at once (143), session
    // closed. The export of a big tree takes long enough to be caught with its session open.
    let mut big = String::from("/big\n");
    for i in 0..40_000 {
        big.push_str(&format!("  /n{i}\n    x = {i}\n"));
    }
    let big_file = dir.path().join("big.zk");
    std::fs::write(&big_file, big).unwrap();
    support::run_async(&[
        "tree",
        "import",
        big_file.to_str().unwrap(),
        "/",
        "-z",
        &conn,
    ])
    .await
    .assert_ok();
    let mut export = tokio::process::Command::new(support::bin())
        .args(["tree", "export", "/big", "-z", &conn])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for("the export's session", LIMIT, || {
        (sessions(port) == baseline + 1).then_some(())
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(export.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(LIMIT, export.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(143),
        "stopped by SIGTERM before it finished"
    );
    assert_eq!(sessions(port), baseline, "after the export's SIGTERM");
    drop(server);
}
