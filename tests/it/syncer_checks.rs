//! The syncer from an operator's side (issue 39): the fetch bounded in all by
//! `--git-timeout` (a server that accepts the connection and never answers, over http:// and
//! git://), the success stamp next to the tombstone, and `monitor --syncer`.

use crate::support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::git::TestRepo;
use support::Run;

/// A TCP server that accepts every connection and never answers; stopped on drop.
struct SilentServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentServer {
    fn start() -> SilentServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        SilentServer {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A syncer's state directory.
struct SyncDir {
    dir: tempfile::TempDir,
}

impl SyncDir {
    fn new() -> SyncDir {
        SyncDir {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn tombstone(&self) -> PathBuf {
        self.dir.path().join("state/tombstone")
    }

    fn stamp(&self) -> PathBuf {
        self.dir.path().join("state/tombstone.last-success")
    }

    async fn sync(&self, url: &str, conn: &str, extra: &[&str]) -> Run {
        let co = self.dir.path().join("checkout");
        let lock = self.dir.path().join("lock");
        let tomb = self.tombstone();
        let mut args = vec![
            "sync",
            "-u",
            url,
            "-t",
            co.to_str().unwrap(),
            "--tombstone",
            tomb.to_str().unwrap(),
            "--lock-file",
            lock.to_str().unwrap(),
            "-z",
            conn,
        ];
        args.extend_from_slice(extra);
        support::run_async(&args).await
    }

    async fn monitor(&self, extra: &[&str]) -> Run {
        let tomb = self.tombstone();
        let mut args = vec!["monitor", "--syncer", "--tombstone", tomb.to_str().unwrap()];
        args.extend_from_slice(extra);
        support::run_async(&args).await
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn a_git_server_that_never_answers_fails_the_sync_within_git_timeout() {
    let conn = support::chroot("sync-git-silent").await;
    let server = SilentServer::start();
    let help = support::run(&["sync", "--help"]).stdout;
    assert!(help.contains("[default: 90]"), "{help}");
    for url in [
        format!("http://127.0.0.1:{}/ops/tree.git", server.port),
        format!("git://127.0.0.1:{}/ops/tree.git", server.port),
    ] {
        let sd = SyncDir::new();
        let started = Instant::now();
        let run = sd.sync(&url, &conn, &["--git-timeout", "4"]).await;
        let took = started.elapsed();
        run.assert_code(1);
        let server_named = format!("the git server 127.0.0.1:{}", server.port);
        assert!(run.stderr.contains(&server_named), "{url}: {run}");
        assert!(
            run.stderr.contains("bound: 4 s, --git-timeout"),
            "{url}: {run}"
        );
        // Far below three attempts of the old minute each; a loaded machine still fits.
        assert!(took < Duration::from_secs(60), "{url}: {took:?}\n{run}");
        let tomb = read(&sd.tombstone());
        assert!(
            tomb.contains("sync failed") && tomb.contains(&server_named),
            "{tomb}"
        );
        assert!(!sd.stamp().exists());
    }
}

#[tokio::test]
async fn monitor_syncer_checks_the_tombstone_and_the_age_of_the_last_success() {
    let conn = support::chroot("sync-monitor").await;
    let sd = SyncDir::new();
    // Nothing has run yet.
    let run = sd.monitor(&[]).await;
    run.assert_code(3);
    assert!(
        run.stdout
            .starts_with("ZKDEPLOYMENT UNKNOWN - no sync has succeeded yet"),
        "{run}"
    );
    // A successful sync: the stamp, no tombstone, OK.
    let repo = TestRepo::new();
    let head = repo.commit(&[("acme.zk", "/acme\n  x = 1\n")]);
    sd.sync(&repo.url(), &conn, &[]).await.assert_ok();
    assert!(!sd.tombstone().exists());
    let stamp = read(&sd.stamp());
    assert!(stamp.trim_end().ends_with(&format!(" {head}")), "{stamp}");
    let run = sd.monitor(&[]).await;
    run.assert_code(0);
    assert!(
        run.stdout
            .starts_with("ZKDEPLOYMENT OK - last successful sync "),
        "{run}"
    );
    assert!(run.stdout.contains(";1800;7200;0"), "{run}");
    // The same revision again: nothing to do is a success too.
    let before = read(&sd.stamp());
    sd.sync(&repo.url(), &conn, &[]).await.assert_ok();
    assert_ne!(read(&sd.stamp()), before);
    // Its age against the thresholds (the stamp says 100 s ago).
    let old = support::agent::now() - 100.0;
    std::fs::write(sd.stamp(), format!("{old:.3} {head}\n")).unwrap();
    let run = sd.monitor(&["-w", "50", "-e", "200"]).await;
    run.assert_code(1);
    assert!(run.stdout.contains("(> 50)"), "{run}");
    let run = sd.monitor(&["-w", "10", "-e", "60"]).await;
    run.assert_code(2);
    assert!(run.stdout.contains("(> 60)"), "{run}");
    // A sync in progress (its pid alive) is not a failure.
    std::fs::write(
        sd.tombstone(),
        format!("{} acquired lock\n", std::process::id()),
    )
    .unwrap();
    sd.monitor(&["-w", "1000"]).await.assert_code(0);
    // A failed sync leaves its reason: WARNING while the last success is recent...
    let missing = sd.dir.path().join("no-such-repo").display().to_string();
    sd.sync(&missing, &conn, &[]).await.assert_code(1);
    let run = sd.monitor(&["-w", "1000", "-e", "2000"]).await;
    run.assert_code(1);
    assert!(
        run.stdout
            .contains("last sync did not succeed: sync failed"),
        "{run}"
    );
    assert!(run.stdout.contains("no-such-repo"), "{run}");
    // ...CRITICAL once it is old.
    sd.monitor(&["-w", "10", "-e", "60"]).await.assert_code(2);
    // Usage errors are UNKNOWN.
    support::run_async(&["monitor"]).await.assert_code(3);
    support::run_async(&["monitor", "--syncer", "/etc/zkdeployment/agent.cfg"])
        .await
        .assert_code(3);
}
