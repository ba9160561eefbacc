//! What a hostile probe found (issue 41's medium and low findings, second part): a full run
//! directory, lock-sharing node names and the canary, `/etc/<app>` that is a file, a NUL in a
//! version, a property-link chain too long, `status` naming lease holders and lock contenders
//! that are not ephemeral. (The index entry is in `index`, the lock file in `sync`.)

use crate::support;

use std::path::{Path, PathBuf};

use support::agent::{v, TestHost};
use zkdeployment::zk::recipe::semaphore::turnstile_path;

const TREE: &str = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
";

/// A small tmpfs mounted on a directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount's syntax) on `dir` (created if missing).
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Fills the file system: one file grows until the disk says it is full.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![b'x'; 4096];
        loop {
            match f.write_all(&block) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.0.display()),
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Item 15: a full run directory. `host_version` cannot be written, so the pass fails
/// (exit 1, host node status `error` with an error naming the file) without halting the
/// cluster; once there is room, the next pass records the version. Before the fix the pass
/// ended `done`, exit 0, with warnings only.
#[tokio::test]
async fn a_full_run_directory_fails_the_pass_without_halting() {
    let h = TestHost::fake("probe-full-rundir").await;
    h.tree(TREE, v("r1")).await;
    let disk = Tmpfs::mount(&h.run_dir(), "256k");
    let run = h.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // The properties snapshot is written already and not rewritten for r2.
    disk.fill();
    h.set_version(v("r2")).await;
    let run = h.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let out = format!("{}{}", run.stdout, run.stderr);
    assert!(
        out.contains("cannot record the host version")
            && out.contains("host_version")
            && out.contains("No space left"),
        "{out}"
    );
    let hosts = h.hosts().await;
    assert_eq!(
        hosts.get("version"),
        Some(&v("r2")),
        "the cluster is not halted"
    );
    drop(disk);
    let run = h.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(h.host_version().as_deref(), Some("\"r2\""));
}

/// Item 18: `/a/b` and `/a,b` share the node lock `/agent-locks/a,b` (the contract's naming),
/// where the canary record lives. A record `/a,b` left (its canary done for `foo 1.0`) does
/// not count for `/a/b`: h1 deploys `/a/b` as its canary, and the record then names `/a/b`.
#[tokio::test]
async fn a_canary_record_of_another_node_sharing_the_lock_does_not_count() {
    let h = TestHost::fake("probe-canary-path").await;
    let tree = "
/a
  /b : foo
    version = '1.0'
    max-parallel = 2
    canary = 1
    /deploy
      /h1
      /h2
";
    h.tree(tree, v("r1")).await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let _ = h.client.create("/agent-locks", b"", &open).await;
    let other =
        serde_json::json!({"canary": {"path": "/a,b", "version": "foo 1.0", "hosts": ["h9"]}});
    h.client
        .create(
            "/agent-locks/a,b",
            &serde_json::to_vec(&other).unwrap(),
            &open,
        )
        .await
        .unwrap();
    let run = h.deploy(&[]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let (data, _) = h.client.get_data("/agent-locks/a,b").await.unwrap();
    let lock: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(
        lock["canary"],
        serde_json::json!({"path": "/a/b", "version": "foo 1.0", "hosts": ["h1"]}),
        "{lock}"
    );
}

/// Low: `/etc/<app>` that is a file: the pass fails saying so, naming the path, instead of
/// "File exists (os error 17)".
#[tokio::test]
async fn an_etc_app_that_is_a_file_is_named_as_not_a_directory() {
    let h = TestHost::fake("probe-etc-file").await;
    h.tree(TREE, v("r1")).await;
    let etc = h.root().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("foo"), "a file\n").unwrap();
    let run = h.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let want = format!(
        "{} exists and is not a directory",
        etc.join("foo").display()
    );
    assert!(run.stderr.contains(&want), "{}", run.stderr);
}

/// Low: a version with a NUL (and a newline) reaches the status file encoded, never as is.
#[tokio::test]
async fn a_nul_in_the_version_does_not_reach_the_status_file() {
    let h = TestHost::fake("probe-nul-version").await;
    h.tree(TREE, v("r\u{0}1\n")).await;
    h.deploy(&[]).await;
    let status = std::fs::read(h.run_dir().join("status")).unwrap();
    assert!(!status.contains(&0), "{status:?}");
    let text = String::from_utf8(status).unwrap();
    assert!(text.contains("r%001%0A"), "{text:?}");
    assert_eq!(text.trim_end().lines().count(), 1, "{text:?}");
}

/// Low: a chain of property links longer than 64 hops fails naming where it was.
#[tokio::test]
async fn a_link_chain_too_long_names_a_node() {
    let h = TestHost::fake("probe-link-chain").await;
    let mut tree = String::from("/chain\n");
    for i in 0..70 {
        tree.push_str(&format!("  /n{i}\n    v => /chain/n{} v\n", i + 1));
    }
    tree.push_str("  /n70\n    v = '1.0'\n");
    tree.push_str("/acme\n  /web : foo\n    version => /chain/n0 v\n    /deploy\n      /h1\n");
    h.tree(&tree, v("r1")).await;
    let run = h.deploy(&[]).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("links lead too far") && run.stderr.contains("/chain/n6"),
        "{}",
        run.stderr
    );
}

/// A "server" that answers every connection with a frame announcing 2 GiB and then sends
/// zeros as fast as the client reads (256 MiB at most per connection).
fn huge_frame_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut request = [0u8; 64];
                let _ = conn.read(&mut request);
                let _ = conn.write_all(&0x7fff_fff0_i32.to_be_bytes());
                let zeros = vec![0u8; 1 << 20];
                for _ in 0..256 {
                    if conn.write_all(&zeros).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Peak resident memory (`VmHWM`, KiB) of a process, read until it exits; and its exit code.
fn run_watching_memory(args: &[&str]) -> (u64, Option<i32>) {
    let mut child = std::process::Command::new(support::bin())
        .args(args)
        .env_remove("ZC_ZK_CONNECTION_STRING")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(kb) = std::fs::read_to_string(&status_file)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (peak, status.code());
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zkdeployment {args:?} still runs after 120 s (peak {peak} KiB)");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_server_announcing_a_huge_frame_costs_no_memory() {
    let port = huge_frame_server();
    let conn = format!("127.0.0.1:{port}");
    let (peak_kib, code) = run_watching_memory(&["status", "-z", &conn]);
    assert_eq!(code, Some(1), "status against a hostile server");
    // The client used to buffer whatever the server sent of the announced frame.
    assert!(
        peak_kib < 150 * 1024,
        "status held {peak_kib} KiB at its peak against a server announcing 2 GiB"
    );
}

/// Longest wait for the agents of a test.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `zkdeployment status --json`.
async fn status_json(conn: &str) -> serde_json::Value {
    let run = support::run_async(&["status", "--json", "-z", conn]).await;
    run.assert_ok();
    serde_json::from_str(&run.stdout).unwrap()
}

/// Low: `status` names who holds each node's leases and who waits for one, and lists lock
/// contenders and leases that are not ephemeral (no session ends them: a node blocked for
/// ever) as problems, naming their paths. Three agents deploy a node with max-parallel 2:
/// two hold leases while their scripts run, the third waits in the semaphore's guard queue.
/// A role lock's requests are persistent by design and are no problem.
#[tokio::test]
async fn status_names_lease_holders_and_lock_children_that_are_not_ephemeral() {
    let hosts = support::agent::fleet("probe-status-leases", 3).await;
    let h = &hosts[0];
    let tree = "
/acme
  /web : foo
    version = '1.0'
    max-parallel = 2
    /deploy
      /h1
      /h2
      /h3
";
    h.tree(tree, v("r1")).await;
    let env = [("ZK_TEST_SLEEP", "600")];
    let mut agents: Vec<_> = hosts.iter().map(|h| h.spawn("deploy", &[], &env)).collect();
    let all = [
        "h1.example.com (h1)",
        "h2.example.com (h2)",
        "h3.example.com (h3)",
    ];
    let sem = "/agent-semaphores/acme,web";
    let status = support::agent::wait_for_async("two leases and a waiter", LIMIT, || async {
        let s = status_json(&h.conn).await;
        let row = &s["semaphores"][0];
        let holders = row["holders"].as_array().map_or(0, Vec::len);
        let waiters = row["waiters"].as_array().map_or(0, Vec::len);
        (holders == 2 && waiters == 1).then_some(s)
    })
    .await;
    let row = &status["semaphores"][0];
    assert_eq!(row["path"], serde_json::json!(sem), "{status:#}");
    assert_eq!(row["max-leases"], serde_json::json!(2));
    let mut named: Vec<&str> = row["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert!(l["age"].as_f64().is_some_and(|a| a >= 0.0), "{l}");
            l["holder"].as_str().unwrap()
        })
        .collect();
    named.push(row["waiters"][0].as_str().unwrap());
    named.sort();
    assert_eq!(named, all, "{status:#}");
    assert_eq!(row["permanent"], serde_json::json!([]));
    let text = support::run_async(&["status", "-z", &h.conn]).await;
    text.assert_ok();
    let line = text.stdout.lines().find(|l| l.starts_with(sem));
    let line = line.unwrap_or_else(|| panic!("no line for {sem}:\n{text}"));
    assert!(line.contains("2/2"), "{line}");
    assert!(all.iter().all(|who| line.contains(who)), "{line}");
    assert!(!text.stdout.contains("not ephemeral"), "{text}");

    // Left-overs no session ends: a lock contender, a lease, a contender of the guard.
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let seq = zookeeper_client::CreateMode::PersistentSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let _ = h.client.create("/agent-locks", b"", &open).await;
    let _ = h.client.create("/agent-locks/acme,db", b"", &open).await;
    let uuid = || uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("/agent-locks/acme,db/{}__lock__", uuid());
    let (_, n) = h.client.create(&prefix, b"ghost (g1)", &seq).await.unwrap();
    let contender = format!("{prefix}{n}");
    let lease = format!("{sem}/{}", uuid());
    h.client.create(&lease, b"ghost (g2)", &open).await.unwrap();
    let prefix = format!("{sem}-__lock__/{}__lock__", uuid());
    let (_, n) = h.client.create(&prefix, b"ghost (g3)", &seq).await.unwrap();
    let guard = format!("{prefix}{n}");
    // Two in a turnstile no agent of the test uses: its holder, and a waiter shown after the
    // guard's queue.
    let used: Vec<String> = all.iter().map(|who| turnstile_path(sem, who)).collect();
    let turnstile = (0..32)
        .map(|n| format!("{sem}-__turnstiles__/{n:02}"))
        .find(|t| !used.contains(t))
        .unwrap();
    let turnstiles = format!("{sem}-__turnstiles__");
    let _ = h.client.create(&turnstiles, b"", &open).await;
    let _ = h.client.create(&turnstile, b"", &open).await;
    let mut turns = Vec::new();
    for who in ["ghost (g4)", "ghost (g5)"] {
        let prefix = format!("{turnstile}/{}__lock__", uuid());
        let (_, n) = h
            .client
            .create(&prefix, who.as_bytes(), &seq)
            .await
            .unwrap();
        turns.push(format!("{prefix}{n}"));
    }
    // A role lock's request is persistent by design.
    let _ = h.client.create("/role-locks", b"", &open).await;
    h.client
        .create("/role-locks/web", b"", &open)
        .await
        .unwrap();
    let request = br#"{"requestor": "w1", "hostname": "w1.example.com"}"#;
    h.client
        .create("/role-locks/web/lr-", request, &seq)
        .await
        .unwrap();

    let s = status_json(&h.conn).await;
    let lock = s["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["path"] == serde_json::json!("/agent-locks/acme,db"))
        .unwrap_or_else(|| panic!("no lock row: {s:#}"));
    assert_eq!(lock["holder"], serde_json::json!("ghost (g1)"));
    assert_eq!(lock["permanent"], serde_json::json!([contender]));
    let mut permanent: Vec<String> =
        serde_json::from_value(s["semaphores"][0]["permanent"].clone()).unwrap();
    permanent.sort();
    let mut want = vec![
        lease.clone(),
        guard.clone(),
        turns[0].clone(),
        turns[1].clone(),
    ];
    want.sort();
    assert_eq!(permanent, want, "{s:#}");
    let waiters = s["semaphores"][0]["waiters"].as_array().unwrap();
    assert_eq!(
        waiters.last(),
        Some(&serde_json::json!("ghost (g5)")),
        "{s:#}"
    );
    assert!(!waiters.contains(&serde_json::json!("ghost (g4)")), "{s:#}");
    let warnings: Vec<&str> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| !w.contains("writable by anyone"))
        .collect();
    assert_eq!(warnings.len(), 5, "{warnings:#?}");
    for path in [&contender, &lease, &guard, &turns[0], &turns[1]] {
        let w = warnings.iter().find(|w| w.starts_with(path.as_str()));
        let w = w.unwrap_or_else(|| panic!("no warning names {path}: {warnings:#?}"));
        assert!(w.contains("not ephemeral") && w.contains("for ever"), "{w}");
    }
    assert!(
        !warnings.iter().any(|w| w.contains("/role-locks")),
        "{warnings:#?}"
    );
    let text = support::run_async(&["status", "-z", &h.conn]).await;
    text.assert_ok();
    for path in [&contender, &lease, &guard] {
        let warned = format!("WARNING: {path} ");
        assert!(text.stdout.contains(&warned), "{path}\n{text}");
    }
    for agent in &mut agents {
        agent.kill_tree().await;
    }
}

/// Item 13: answers are capped at ZooKeeper's `jute.maxbuffer` (just under 1 MiB unless
/// `jute-maxbuffer` says otherwise). Ten nodes of 300 KB under `/big`: the export's first
/// multi-read of all ten (3 MB) is refused and read again in smaller batches, on the same
/// session, and the export is whole. With a limit of 200,000 bytes a node alone is over it:
/// the error names the node and the key; a bad value is a usage error naming the key.
#[tokio::test]
async fn answers_over_jute_maxbuffer_are_split_or_named_and_never_end_the_session() {
    let conn = support::chroot("jute-maxbuffer").await;
    let zk = support::connect(&conn).await;
    let create =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    zk.create("/big", b"", &create).await.unwrap();
    for i in 0..10 {
        let data = format!("{{\"x\": \"{}\"}}", "y".repeat(300_000 + i));
        zk.create(&format!("/big/n{i}"), data.as_bytes(), &create)
            .await
            .unwrap();
    }
    let run = support::run_with_async(
        &["tree", "export", "/big", "-z", &conn],
        None,
        &[("ZKDEPLOYMENT_LOG", "info,zookeeper_client=debug")],
    )
    .await;
    run.assert_ok();
    assert!(
        run.stderr.contains("refusing an answer of 3000"),
        "the batch of all ten was not refused: {run}"
    );
    for i in 0..10 {
        let value = "y".repeat(300_000 + i);
        assert!(run.stdout.contains(&format!("/n{i}\n")), "n{i} missing");
        assert!(run.stdout.contains(&value), "n{i}'s data missing");
    }

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("small.cfg");
    let write = |value: &str| {
        std::fs::write(
            &cfg,
            format!("[zkdeployment]\nzookeeper = {conn}\njute-maxbuffer = {value}\n"),
        )
        .unwrap();
    };
    write("200000");
    let cfg_arg = cfg.to_str().unwrap();
    let run = support::run_async(&["tree", "export", "/big", "-c", cfg_arg]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(
        run.stderr.contains("/big/n")
            && run
                .stderr
                .contains("over this client's limit of 200000 bytes")
            && run.stderr.contains("jute-maxbuffer"),
        "{run}"
    );
    write("12");
    let run = support::run_async(&["tree", "export", "/big", "-c", cfg_arg]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("jute-maxbuffer"), "{run}");
}
