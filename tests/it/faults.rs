//! Faults: the agent and the commands against a ZooKeeper that restarts, a session that
//! expires (a test-owned TCP proxy, `tests/support/proxy.rs`, cut between the agent and the
//! server), a server that never answers, processes killed at bad moments, operators racing the
//! agents, and access control with digest auth.
//!
//! Covered elsewhere, not repeated here:
//! - an agent killed (SIGKILL) mid-deploy-script makes the next host taking that node lock
//!   halt the cluster naming it: `tests/fleet.rs`
//!   (`a_host_dying_mid_deploy_makes_the_next_holder_halt_the_cluster`);
//! - SIGTERM during a step finishes the step and exits 0: `tests/agent_daemon.rs`
//!   (`sigterm_finishes_the_step_in_progress_and_exits_0`);
//! - a syncer killed while applying: `tests/sync.rs`
//!   (`a_syncer_killed_while_applying_leaves_the_version_and_the_next_run_completes`), two
//!   syncers at once: `tests/sync.rs` (`two_syncers_at_once_apply_once`);
//! - a version bump while a pass runs is coalesced, the newest wins: `tests/agent_daemon.rs`
//!   (`bumps_during_a_pass_are_coalesced_into_one_more_pass`).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::agent::{lines, now, v, wait_for, wait_for_async, Pm, Spawned, TestHost};
use support::proxy::Proxy;
use support::rpm::FakeYum;
use support::{split_chroot, ZkServer};
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(40);

/// `/acme/<path>` (package foo `version`) deployed to each of `hosts`.
fn tree(paths: &[&str], version: &str, hosts: &[&str]) -> String {
    let mut text = String::from("/acme\n");
    for path in paths {
        text.push_str(&format!(
            "  /{path} : foo\n    version = '{version}'\n    /deploy\n"
        ));
        for host in hosts {
            text.push_str(&format!("      /{host}\n"));
        }
    }
    text
}

/// One run of a deploy script from `ZK_TEST_TIMES`: (start|end, path, host, time).
#[derive(Debug, Clone, PartialEq)]
struct Mark {
    what: String,
    path: String,
    host: String,
    time: f64,
}

fn marks(file: &std::path::Path) -> Vec<Mark> {
    lines(file)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Mark {
                what: f[0].to_string(),
                path: f[2].to_string(),
                host: f[4].to_string(),
                time: f[5].parse().unwrap(),
            }
        })
        .collect()
}

/// Per path and host, starts and ends alternate (no run of one host overlaps another of the
/// same host), and per path the runs of different hosts never overlap.
fn assert_no_overlap(all: &[Mark]) {
    let mut paths: Vec<&str> = all.iter().map(|m| m.path.as_str()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let mut open: Option<&Mark> = None;
        for m in all.iter().filter(|m| m.path == path) {
            match (m.what.as_str(), open) {
                ("start", None) => open = Some(m),
                ("end", Some(s)) if s.host == m.host => open = None,
                _ => panic!("deploys of {path} overlap at {m:?}\n{all:#?}"),
            }
        }
        assert!(open.is_none(), "unfinished deploy of {path}\n{all:#?}");
    }
}

/// A fresh chroot on a given server (the shared [`support::chroot`] only knows the shared
/// server).
async fn chroot_on(address: &str, label: &str) -> String {
    let client = support::connect(address).await;
    let node = format!("/t-{label}-{}", uuid::Uuid::new_v4().simple());
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.create(&node, b"", &open).await.unwrap();
    format!("{address}{node}")
}

/// A host whose test client talks to ZooKeeper directly but whose agent goes through `proxy`
/// (same chroot); `session-timeout` seconds for the agent.
async fn host_behind(proxy: &Proxy, direct: &str, id: &str, session_timeout: &str) -> TestHost {
    let mut h = TestHost::on(direct, id, Pm::Fake(FakeYum::new())).await;
    let (_, chroot) = split_chroot(direct);
    h.conn = format!("{}{chroot}", proxy.address());
    h.extra = format!("session-timeout = {session_timeout}\n");
    h
}

async fn stop(mut agent: Spawned) {
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

/// The pid field of the status file.
fn status_pid(h: &TestHost) -> Option<u32> {
    h.status().split(' ').nth(1).and_then(|p| p.parse().ok())
}

fn assert_not_halted(hosts: &serde_json::Map<String, Value>, version: &str) {
    assert_eq!(hosts.get("version"), Some(&json!(version)), "{hosts:?}");
    assert_eq!(hosts.get("halt"), None, "{hosts:?}");
}

// ---------------------------------------------------------------------------------------------
// A server restart (same data): the session survives or is rebuilt; nothing is missed.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_is_survived_idle_and_during_a_slow_step() {
    let mut server = ZkServer::start();
    let conn = chroot_on(&server.connect_string(), "restart").await;
    let h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    h.tree(&tree(&["a"], "1.0", &["h1"]), v("r1")).await;
    let times = h.scratch("times.txt");
    let times_env = times.display().to_string();
    let agent = h.spawn(
        "agent",
        &[],
        &[("ZK_TEST_SLEEP", "1.5"), ("ZK_TEST_TIMES", &times_env)],
    );
    let pid = agent.pid();
    h.wait_status("r1", &["done"], LIMIT).await;

    // Idle: restart, and bump the version right after.
    tokio::task::block_in_place(|| server.restart());
    h.set_version(v("r2")).await;
    h.wait_status("r2", &["done"], LIMIT).await;

    // During a slow step.
    h.set_version(v("r3")).await;
    wait_for("the r3 deploy to start", LIMIT, || {
        (marks(&times).len() == 5).then_some(())
    })
    .await;
    tokio::task::block_in_place(|| server.restart());
    h.wait_status("r3", &["done"], LIMIT).await;

    let all = marks(&times);
    assert_no_overlap(&all);
    assert!(all.len() >= 6, "{all:#?}");
    assert_not_halted(&h.hosts().await, "r3");
    let node = h.host_node().await.expect("registered");
    assert_eq!(node["pid"], json!(pid));
    assert_eq!(node["version"], json!("r3"));
    let (data, _) = h.client.get_data("/agent-locks/acme,a").await.unwrap();
    assert_eq!(zkdeployment::zk::decode(&data).get("in-flight"), None);
    stop(agent).await;
}

// ---------------------------------------------------------------------------------------------
// Session expiry through the proxy.

#[tokio::test]
async fn an_expired_session_is_rebuilt_and_a_bump_made_meanwhile_is_deployed() {
    let direct = support::chroot("expire-idle").await;
    let proxy = Proxy::start(split_chroot(&direct).0);
    let h = host_behind(&proxy, &direct, "h1", "1").await;
    h.tree(&tree(&["a"], "1.0", &["h1"]), v("r1")).await;
    let agent = h.spawn("agent", &[], &[]);
    let pid = agent.pid();
    h.wait_status("r1", &["done"], LIMIT).await;
    let before = h.host_node().await.expect("registered");
    assert_eq!(before["pid"], json!(pid));

    proxy.cut();
    // The server expires the session (1 s): the host node goes.
    wait_for_async("the host node to go with the session", LIMIT, || async {
        h.host_node().await.is_none().then_some(())
    })
    .await;
    // A bump while the agent is cut off.
    h.tree(&tree(&["a", "b"], "1.4", &["h1"]), v("r2")).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let restored = Instant::now();
    proxy.restore();

    h.wait_status("r2", &["done"], LIMIT).await;
    eprintln!("converged {:?} after the restore", restored.elapsed());
    let after = wait_for_async("the host node again", LIMIT, || async {
        h.host_node()
            .await
            .filter(|n| n.get("version") == Some(&json!("r2")))
    })
    .await;
    assert_eq!(after["name"], before["name"]);
    assert_eq!(after["pid"], json!(pid));
    assert_eq!(
        h.deploy_log("foo")[1..],
        ["foo-1.4-1: /acme/a 0", "foo-1.4-1: /acme/b 0"]
    );
    assert_not_halted(&h.hosts().await, "r2");
    let out = agent.output();
    assert!(out.contains("building a new session"), "{out}");
    assert!(!out.contains("Another agent is running"), "{out}");
    stop(agent).await;
}

#[tokio::test]
async fn a_pass_whose_session_is_lost_is_abandoned_and_run_again() {
    let direct = support::chroot("expire-step").await;
    let proxy = Proxy::start(split_chroot(&direct).0);
    let h = host_behind(&proxy, &direct, "h1", "1").await;
    h.tree(&tree(&["a", "b"], "1.0", &["h1"]), v("r1")).await;
    let times = h.scratch("times.txt");
    let times_env = times.display().to_string();
    let agent = h.spawn(
        "agent",
        &[],
        &[("ZK_TEST_SLEEP", "2"), ("ZK_TEST_TIMES", &times_env)],
    );
    wait_for("the first deploy to start", LIMIT, || {
        (!marks(&times).is_empty()).then_some(())
    })
    .await;
    proxy.cut();
    let cut_at = now();
    // The session expires while the script runs; the script ends (2 s) while still cut off.
    wait_for_async("the host node to go with the session", LIMIT, || async {
        h.host_node().await.is_none().then_some(())
    })
    .await;
    wait_for("the first deploy to end", LIMIT, || {
        (marks(&times).len() >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // No step ran without its lock: nothing started while the session was gone.
    assert_eq!(marks(&times).len(), 2, "{:#?}", marks(&times));
    let restored = now();
    proxy.restore();

    h.wait_status("r1", &["done"], LIMIT).await;
    let all = marks(&times);
    assert_no_overlap(&all);
    let starts: Vec<(&str, f64)> = all
        .iter()
        .filter(|m| m.what == "start")
        .map(|m| (m.path.as_str(), m.time))
        .collect();
    // /acme/a ran before the cut, and again (the abandoned pass run again) after the restore.
    assert_eq!(
        starts.iter().map(|s| s.0).collect::<Vec<_>>(),
        ["/acme/a", "/acme/a", "/acme/b"],
        "{all:#?}"
    );
    assert!(starts[0].1 < cut_at);
    assert!(starts[1].1 > restored && starts[2].1 > restored, "{all:#?}");
    // Not halted by the agent itself for a lost session.
    assert_not_halted(&h.hosts().await, "r1");
    let (data, _) = h.client.get_data("/agent-locks/acme,a").await.unwrap();
    assert_eq!(zkdeployment::zk::decode(&data).get("in-flight"), None);
    let out = agent.output();
    assert!(out.contains("Abandoning deployment: ZooKeeper"), "{out}");
    // The report is written before the final status; wait on it all the same (a busy machine
    // may show the status of the pass run again an instant before its report is read).
    wait_for("the report of the pass run again", LIMIT, || {
        (h.report()["outcome"] == json!("done")).then_some(())
    })
    .await;
    stop(agent).await;
}

// ---------------------------------------------------------------------------------------------
// Every ZooKeeper call has a timeout.

/// Runs the commands that talk to ZooKeeper against `conn` (unreachable), all at once, and
/// checks that each fails within the bound with a message naming ZooKeeper.
async fn assert_commands_fail_in_time(h: &TestHost, conn: &str, label: &str) {
    let repo = support::git::TestRepo::new();
    repo.commit(&[("a.zk", "/a\n  x = 1\n")]);
    let scratch = tempfile::tempdir().unwrap();
    let checkout = scratch.path().join("checkout").display().to_string();
    let lock = scratch.path().join("lock").display().to_string();
    let tomb = scratch.path().join("tomb").display().to_string();
    let import = scratch.path().join("t.zk");
    std::fs::write(&import, "/x\n  y = 1\n").unwrap();
    let import = import.display().to_string();
    let config = h.config().display().to_string();
    let url = repo.url();
    let commands: Vec<Vec<&str>> = vec![
        vec!["deploy", &config],
        vec!["deploy", &config, "--dry-run"],
        vec![
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
            conn,
        ],
        vec!["tree", "export", "-z", conn],
        vec!["tree", "import", &import, "-z", conn],
        vec!["status", "-z", conn],
        vec!["resume", "--version", "r9", "-z", conn],
    ];
    let started = Instant::now();
    let runs = futures::future::join_all(commands.iter().map(|args| async move {
        let t = Instant::now();
        let run = support::run_async(args).await;
        (args.clone(), run, t.elapsed())
    }))
    .await;
    for (args, run, took) in runs {
        assert!(
            took < Duration::from_secs(45),
            "{label}: {args:?} took {took:?}\n{run}"
        );
        assert!(
            run.code == 1 || run.code == 3,
            "{label}: {args:?} exit code\n{run}"
        );
        assert!(
            run.stderr.contains("ZooKeeper"),
            "{label}: {args:?} does not name ZooKeeper\n{run}"
        );
        eprintln!(
            "{label}: {args:?} failed in {took:?}: {}",
            run.stderr.trim()
        );
    }
    eprintln!("{label}: all done in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_fails_in_bounded_time_when_zookeeper_is_cut_off() {
    let direct = support::chroot("cut-forever").await;
    let proxy = Proxy::start(split_chroot(&direct).0);
    let h = host_behind(&proxy, &direct, "h1", "10").await;
    h.tree(&tree(&["a"], "1.0", &["h1"]), v("r1")).await;
    let conn = h.conn.clone();
    // Refused connections (the server is gone).
    proxy.cut();
    assert_commands_fail_in_time(&h, &conn, "refused").await;
    // Accepted connections that never answer (packets vanish).
    proxy.freeze();
    assert_commands_fail_in_time(&h, &conn, "frozen").await;
    // Nothing was written.
    assert_eq!(h.hosts().await.get("version"), Some(&json!("r1")));
    assert_eq!(h.host_node().await, None);
}

#[tokio::test]
async fn a_deploy_cut_off_mid_pass_fails_in_bounded_time() {
    let direct = support::chroot("cut-mid-pass").await;
    let proxy = Proxy::start(split_chroot(&direct).0);
    let h = host_behind(&proxy, &direct, "h1", "10").await;
    h.tree(&tree(&["a", "b"], "1.0", &["h1"]), v("r1")).await;
    let times = h.scratch("times.txt");
    let times_env = times.display().to_string();
    let mut deploy = h.spawn(
        "deploy",
        &[],
        &[("ZK_TEST_SLEEP", "1"), ("ZK_TEST_TIMES", &times_env)],
    );
    wait_for("the first deploy to start", LIMIT, || {
        (!marks(&times).is_empty()).then_some(())
    })
    .await;
    proxy.freeze();
    let t = Instant::now();
    let code = deploy.wait(Duration::from_secs(60)).await;
    let took = t.elapsed();
    let out = deploy.output();
    eprintln!("deploy failed after {took:?}:\n{out}");
    assert!(took < Duration::from_secs(45), "{took:?}\n{out}");
    assert_eq!(code, 1, "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.contains("ZooKeeper"), "{out}");
    // Only the step in progress ran; the second one never started.
    assert_eq!(marks(&times).len(), 2, "{:#?}", marks(&times));
    // The agent did not halt the cluster.
    assert_not_halted(&h.hosts().await, "r1");
    assert_eq!(h.report()["outcome"], json!("abandoned"));
}

// ---------------------------------------------------------------------------------------------
// Process faults.

#[tokio::test]
async fn an_agent_restarted_after_sigkill_recovers() {
    let mut h = TestHost::fake("sigkill-restart").await;
    h.extra = "session-timeout = 2\n".into();
    h.tree(&tree(&["a"], "1.0", &["h1"]), v("r1")).await;
    let mut agent = h.spawn("agent", &[], &[]);
    h.wait_status("r1", &["done"], LIMIT).await;
    let old = agent.pid();
    agent.kill_tree().await;
    // The dead agent's node stays until its session expires.
    let node = h.host_node().await.expect("left behind");
    assert_eq!(node["pid"], json!(old));
    std::fs::remove_file(h.run_dir().join("status")).unwrap();

    let t = Instant::now();
    let agent = h.spawn("agent", &[], &[]);
    let new = agent.pid();
    let node = wait_for_async("the new host node", LIMIT, || async {
        h.host_node()
            .await
            .filter(|n| n.get("pid") == Some(&json!(new)))
    })
    .await;
    let took = t.elapsed();
    // The old session is waited out (2 s, the server's expiry), not more.
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert_eq!(node["version"], json!("r1"));
    assert_eq!(node["name"], json!("h1.example.com"));
    h.wait_status("r1", &["done"], LIMIT).await;
    assert_eq!(status_pid(&h), Some(new));
    // Converged: nothing was deployed again.
    assert_eq!(h.deploy_log("foo"), ["foo-1.0-1: /acme/a 0"]);
    let out = agent.output();
    assert!(!out.contains("Another agent is running"), "{out}");
    assert!(out.contains("waiting for its session to expire"), "{out}");
    stop(agent).await;
}

#[tokio::test]
async fn an_agent_killed_mid_step_and_restarted_halts_on_its_own_record() {
    // The same host restarting: the in-flight record was left by another process (the dead
    // one), so the restarted agent halts instead of redeploying blindly (the next *other*
    // host doing so is tests/fleet.rs).
    let mut h = TestHost::fake("sigkill-mid-step").await;
    h.extra = "session-timeout = 1\n".into();
    h.tree(&tree(&["a"], "1.0", &["h1"]), v("r1")).await;
    let times = h.scratch("times.txt");
    let times_env = times.display().to_string();
    let mut agent = h.spawn(
        "agent",
        &[],
        &[("ZK_TEST_SLEEP", "5"), ("ZK_TEST_TIMES", &times_env)],
    );
    wait_for("the deploy to start", LIMIT, || {
        (!marks(&times).is_empty()).then_some(())
    })
    .await;
    let old = agent.pid();
    agent.kill_tree().await;
    let agent = h.spawn("agent", &[], &[]);
    h.wait_status("r1", &["error"], LIMIT).await;
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    let error = hosts["halt"]["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("h1.example.com (h1) died deploying /acme/a 0 (version r1)"),
        "{error}"
    );
    assert_eq!(hosts["halt"]["host"], json!("h1"));
    let _ = old;
    // The dead script never finished, and it did not run again.
    assert_eq!(marks(&times).len(), 1);
    stop(agent).await;
}

// ---------------------------------------------------------------------------------------------
// Races with operators.

#[tokio::test]
async fn a_resume_while_agents_are_mid_pass_converges() {
    let conn = support::chroot("resume-race").await;
    let h1 = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    let h2 = TestHost::on(&conn, "h2", Pm::Fake(FakeYum::new())).await;
    h1.tree(&tree(&["a", "b", "c"], "1.0", &["h1", "h2"]), v("r1"))
        .await;
    let times = h1.scratch("times.txt");
    let times_env = times.display().to_string();
    let env = [("ZK_TEST_SLEEP", "0.7"), ("ZK_TEST_TIMES", &times_env)];
    let a1 = h1.spawn("agent", &[], &env);
    let a2 = h2.spawn("agent", &[], &env);
    wait_for("both hosts to be deploying", LIMIT, || {
        let m = marks(&times);
        let hosts: std::collections::BTreeSet<String> = m.iter().map(|m| m.host.clone()).collect();
        (hosts.len() == 2).then_some(())
    })
    .await;
    // An operator halts the cluster as a failing host would, and resumes at once, while
    // both hosts run steps.
    let record = json!({"host": "h3", "name": "h3.example.com", "version": "r1",
                        "error": "simulated", "time": now()});
    let mut props = h1.hosts().await;
    props.insert("version".into(), Value::Null);
    props.insert("halt".into(), record);
    h1.client
        .set_data("/hosts", &serde_json::to_vec(&props).unwrap(), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    support::run_async(&["resume", "--version", "r1", "-z", &conn])
        .await
        .assert_ok();
    // A second resume racing the agents' reactions to the first one.
    support::run_async(&["resume", "--version", "r2", "-z", &conn])
        .await
        .assert_ok();

    h1.wait_status("r2", &["done"], LIMIT).await;
    h2.wait_status("r2", &["done"], LIMIT).await;
    let all = marks(&times);
    assert_no_overlap(&all);
    assert_not_halted(&h1.hosts().await, "r2");
    for (h, agent) in [(&h1, a1), (&h2, a2)] {
        assert_eq!(h.host_node().await.unwrap()["version"], json!("r2"));
        let out = agent.output();
        assert!(!out.contains("panicked"), "{out}");
        assert_eq!(h.etc("foo").len(), 6, "{:?}", h.etc("foo"));
        stop(agent).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Access control.

/// ZooKeeper's digest of `user:password`: `user:base64(sha1("user:password"))`.
fn zk_digest(credentials: &str) -> String {
    let out = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(credentials.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha1sum");
    let hex = String::from_utf8(out.stdout).unwrap();
    let bytes: Vec<u8> = (0..40)
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                text.push(B64[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                text.push('=');
            }
        }
    }
    let user = credentials.split(':').next().unwrap();
    format!("{user}:{text}")
}

#[tokio::test]
async fn with_digest_auth_the_host_node_is_read_only_to_others_and_the_secret_never_leaks() {
    const SECRET: &str = "s3cr3t-Pa55word-xyzzy";
    let mut h = TestHost::fake("auth").await;
    let auth = h.scratch("zk-auth");
    std::fs::write(&auth, format!("deployer:{SECRET}\n")).unwrap();
    let mail = h.scratch("mail.txt");
    let sendmail = h.scratch("sendmail");
    std::fs::write(
        &sendmail,
        format!(
            "#!/bin/sh\necho \"ARGS: $*\" >> '{0}'\ncat >> '{0}'\n",
            mail.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sendmail, std::fs::Permissions::from_mode(0o755)).unwrap();
    h.extra = format!(
        "zookeeper-auth = file://{}\nmail-to = ops@example.com\nsendmail = {}\n",
        auth.display(),
        sendmail.display()
    );
    h.tree(&tree(&["a", "bad"], "1.0", &["h1"]), v("r1")).await;
    let env_file = h.scratch("env.txt");
    let env_env = env_file.display().to_string();
    // Verbose: even debug logging must not show the secret.
    let agent = h.spawn(
        "agent",
        &["-v"],
        &[("ZK_TEST_FAIL", "/acme/bad"), ("ZK_TEST_ENV", &env_env)],
    );
    h.wait_status("r1", &["error"], LIMIT).await;
    wait_for("the failure mail", LIMIT, || {
        std::fs::read_to_string(&mail)
            .ok()
            .filter(|m| m.contains("Command failed"))
    })
    .await;

    // ACL: READ for the world, ALL for the agent's identity. Only a client with ADMIN on
    // the node sees the digest (ZooKeeper shows others `user:x`).
    let path = format!("/hosts/{}", h.id);
    let digest = zk_digest(&format!("deployer:{SECRET}"));
    let owner = zookeeper_client::Client::connector()
        .with_auth("digest", format!("deployer:{SECRET}").as_bytes())
        .connect(&h.conn)
        .await
        .unwrap();
    let acl_seen = |acl: &[zookeeper_client::Acl]| {
        let mut found: Vec<(String, String, zookeeper_client::Permission)> = acl
            .iter()
            .map(|a| (a.scheme().to_string(), a.id().to_string(), a.permission()))
            .collect();
        found.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        found
    };
    let (acl, _) = owner.get_acl(&path).await.unwrap();
    assert_eq!(
        acl_seen(&acl),
        [
            (
                "digest".to_string(),
                digest.clone(),
                zookeeper_client::Permission::ALL
            ),
            (
                "world".to_string(),
                "anyone".to_string(),
                zookeeper_client::Permission::READ
            ),
        ]
    );
    let (acl, _) = h.client.get_acl(&path).await.unwrap();
    assert_eq!(
        acl_seen(&acl),
        [
            (
                "digest".to_string(),
                "deployer:x".to_string(),
                zookeeper_client::Permission::ALL
            ),
            (
                "world".to_string(),
                "anyone".to_string(),
                zookeeper_client::Permission::READ
            ),
        ]
    );

    // Another client without the credentials can read, not write.
    let (data, _) = h.client.get_data(&path).await.unwrap();
    let props = zkdeployment::zk::decode(&data);
    assert_eq!(props["name"], json!("h1.example.com"));
    assert_eq!(
        h.client.set_data(&path, b"{}", None).await.unwrap_err(),
        zookeeper_client::Error::NoAuth
    );
    assert_eq!(
        h.client
            .set_acl(&path, &Acls::anyone_all(), None)
            .await
            .unwrap_err(),
        zookeeper_client::Error::NoAuth
    );
    // The identity can (a no-op write of the same data).
    owner.set_data(&path, &data, None).await.unwrap();
    drop(owner);

    // Deleting is governed by the parent's ACL (`/hosts`, open: the syncer, `resume` and
    // the original's agents write there), so ZooKeeper lets anyone delete the node. The
    // agent recovers: the next pass finds its node gone and registers again.
    h.client.delete(&path, None).await.unwrap();
    h.tree(&tree(&["a"], "1.0", &["h1"]), v("r2")).await;
    h.wait_status("r2", &["done"], LIMIT).await;
    let node = wait_for_async("the host node again", LIMIT, || async {
        h.host_node()
            .await
            .filter(|n| n.get("version") == Some(&json!("r2")))
    })
    .await;
    assert_eq!(node["pid"], json!(agent.pid()));
    assert_eq!(
        h.client.set_data(&path, b"{}", None).await.unwrap_err(),
        zookeeper_client::Error::NoAuth,
        "registered again with the secured ACL"
    );
    let (data, _) = h.client.get_data(&path).await.unwrap();

    // The secret appears nowhere.
    let output = agent.output();
    assert!(output.contains("DEBUG"), "verbose logging is on");
    let mut places: Vec<(String, String)> = vec![
        ("agent output".into(), output),
        (
            "host node".into(),
            String::from_utf8_lossy(&data).into_owned(),
        ),
        (
            "/hosts".into(),
            serde_json::to_string(&h.hosts().await).unwrap(),
        ),
        ("mail".into(), std::fs::read_to_string(&mail).unwrap()),
        (
            "script environment".into(),
            std::fs::read_to_string(&env_file).unwrap(),
        ),
        (
            "status".into(),
            support::run_async(&["status", "-z", &h.conn])
                .await
                .assert_ok()
                .stdout
                .clone(),
        ),
        (
            "status --json".into(),
            support::run_async(&["status", "--json", "-z", &h.conn])
                .await
                .assert_ok()
                .stdout
                .clone(),
        ),
        (
            "the whole tree".into(),
            support::run_async(&["tree", "export", "-e", "-z", &h.conn])
                .await
                .assert_ok()
                .stdout
                .clone(),
        ),
    ];
    let mut queue = vec![h.run_dir()];
    while let Some(dir) = queue.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                queue.push(p);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                places.push((p.display().to_string(), text));
            }
        }
    }
    let names: Vec<&str> = places.iter().map(|p| p.0.as_str()).collect();
    assert!(
        names.iter().any(|n| n.ends_with("/status"))
            && names.iter().any(|n| n.ends_with("/last-pass.json")),
        "{names:?}"
    );
    for (what, text) in &places {
        assert!(!text.is_empty(), "{what} is empty");
        assert!(
            !text.contains(SECRET),
            "the secret leaks into the {what}:\n{text}"
        );
    }
    stop(agent).await;
}
