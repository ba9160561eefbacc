//! What a hostile probe found (issue 41's high findings): two agents started at once for one
//! host, a link planted where a command writes a file, SIGHUP in the middle of a step.

use crate::support;

use std::time::Duration;

use support::agent::{v, Pm, TestHost};
use support::rpm::FakeYum;

const TREE: &str = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
";

const LIMIT: Duration = Duration::from_secs(60);

/// Two `deploy` runs started at the same moment on one configuration: exactly one runs the
/// pass, the other exits 1 with `Another agent is running`, and the deploy script runs once.
/// Before the fix, the loser of the host node's create took the node for its own
/// re-registration and ran yum and the script too (4 of 8 trials).
#[tokio::test]
async fn two_agents_started_together_for_one_host_run_one_pass() {
    for trial in 0..8 {
        let h = TestHost::fake(&format!("probe-two-{trial}")).await;
        h.tree(TREE, v("r1")).await;
        let mut a = h.spawn("deploy", &[], &[]);
        let mut b = h.spawn("deploy", &[], &[]);
        let codes = [a.wait(LIMIT).await, b.wait(LIMIT).await];
        let outputs = [a.output(), b.output()];
        let mut sorted = codes;
        sorted.sort();
        assert_eq!(
            sorted,
            [0, 1],
            "trial {trial}: exactly one pass runs\n--- a ---\n{}\n--- b ---\n{}",
            outputs[0],
            outputs[1]
        );
        let loser = &outputs[codes.iter().position(|&c| c == 1).unwrap()];
        assert!(
            loser.contains("Another agent is running"),
            "trial {trial}: {loser}"
        );
        assert_eq!(
            h.deploy_log("foo").len(),
            1,
            "trial {trial}: the deploy script ran once: {:?}",
            h.deploy_log("foo")
        );
    }
}

/// Two agent services started at the same moment on one configuration: one exits 1 with
/// `Another agent is running`, the other stays up and deploys, once (the issue's "both stayed
/// up": the service, not only a pass run by hand).
#[tokio::test]
async fn two_agent_services_started_together_for_one_host_leave_one_running() {
    for trial in 0..4 {
        let h = TestHost::fake(&format!("probe-two-services-{trial}")).await;
        h.tree(TREE, v("r1")).await;
        let mut agents = [h.spawn("agent", &[], &[]), h.spawn("agent", &[], &[])];
        let loser = support::agent::wait_for("one agent to exit", LIMIT, || {
            agents.iter_mut().position(|a| !a.running())
        })
        .await;
        let code = agents[loser].wait(LIMIT).await;
        let out = agents[loser].output();
        assert_eq!(code, 1, "trial {trial}: {out}");
        assert!(
            out.contains("Another agent is running"),
            "trial {trial}: {out}"
        );
        let winner = &mut agents[1 - loser];
        h.wait_status("r1", &["done"], LIMIT).await;
        assert!(winner.running(), "trial {trial}: {}", winner.output());
        assert_eq!(h.deploy_log("foo").len(), 1, "trial {trial}");
        winner.terminate();
        assert_eq!(winner.wait(LIMIT).await, 0, "trial {trial}");
    }
}

const SHARED: &str = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
      /h2
";

/// Sends `sig` to `pid` and to every descendant of it (as a terminal's hang-up reaches its
/// whole foreground process group).
fn signal_family(pid: u32, sig: nix::sys::signal::Signal) {
    let mut family = vec![pid];
    let mut i = 0;
    while i < family.len() {
        family.extend(support::agent::children_of(family[i]));
        i += 1;
    }
    for p in family {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), sig);
    }
}

/// Waits until the times file shows `host` started its deploy script.
async fn script_started(times: &std::path::Path, host: &str) {
    support::agent::wait_for(&format!("{host}'s script to start"), LIMIT, || {
        support::agent::lines(times)
            .iter()
            .any(|l| l.starts_with("start ") && l.split(' ').nth(4) == Some(host))
            .then_some(())
    })
    .await;
}

/// SIGHUP in the middle of a step, with a second host waiting for the node lock: the service
/// ignores it and goes on, a pass run by hand finishes its step and exits as on SIGTERM, and
/// neither the script nor the cluster suffers (before the fix: exit 129, the session and the
/// lock's in-flight record left behind, and the waiting host halted the cluster).
#[tokio::test]
async fn sighup_mid_step_never_interrupts_it() {
    for subcommand in ["agent", "deploy"] {
        let conn = support::chroot(&format!("probe-hup-{subcommand}")).await;
        let h1 = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
        let h2 = TestHost::on(&conn, "h2", Pm::Fake(FakeYum::new())).await;
        h1.tree(SHARED, v("r1")).await;
        let times = h1.scratch("times.txt");
        let times_s = times.display().to_string();
        let env = [("ZK_TEST_SLEEP", "2"), ("ZK_TEST_TIMES", times_s.as_str())];
        let mut first = h1.spawn(subcommand, &[], &env);
        script_started(&times, "h1").await;
        let mut second = h2.spawn("deploy", &[], &env);
        // h2 is queued for the node lock while h1's script runs; then the hang-up.
        tokio::time::sleep(Duration::from_millis(300)).await;
        signal_family(first.pid(), nix::sys::signal::Signal::SIGHUP);
        assert_eq!(second.wait(LIMIT).await, 0, "{}", second.output());
        assert_eq!(h1.deploy_log("foo").len(), 1, "h1's script finished once");
        assert_eq!(h2.deploy_log("foo").len(), 1, "h2 deployed after it");
        assert_eq!(h1.hosts().await["version"], v("r1"), "no halt");
        if subcommand == "agent" {
            assert!(first.running(), "the service goes on: {}", first.output());
            assert!(
                first.output().contains("SIGHUP ignored"),
                "{}",
                first.output()
            );
            h1.wait_status("r1", &["done"], LIMIT).await;
            first.terminate();
            assert_eq!(first.wait(LIMIT).await, 0, "{}", first.output());
        } else {
            // As on SIGTERM: the step finished, nothing new started (exit 0, or 3 had a step
            // been left), never 129 (killed by the signal).
            let code = first.wait(LIMIT).await;
            assert!(matches!(code, 0 | 3), "exit {code}: {}", first.output());
        }
    }
}

/// A link planted where the agent writes its metrics file, its status file or its report, or
/// at the temporary names the old writer used (`.NAME.<pid>.tmp`, the pid is public): root
/// never writes through it. Covers `deploy` (metrics file, run directory) and `status
/// --metrics`.
#[tokio::test]
async fn links_planted_where_commands_write_are_replaced_never_followed() {
    let mut h = TestHost::fake("probe-links").await;
    let textfiles = h.scratch("textfiles");
    std::fs::create_dir_all(&textfiles).unwrap();
    std::fs::create_dir_all(h.run_dir()).unwrap();
    let victim = h.scratch("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let metrics = textfiles.join("zkdeployment.prom");
    h.extra = format!("metrics-file = {}\n", metrics.display());
    h.tree(TREE, v("r1")).await;
    let plant = |path: &std::path::Path| {
        let _ = std::fs::remove_file(path);
        std::os::unix::fs::symlink(&victim, path).unwrap();
    };
    plant(&metrics);
    plant(&h.run_dir().join("status"));
    plant(&h.run_dir().join("last-pass.json"));
    // Old predictable temporary names, for every pid the next process may get.
    for name in ["zkdeployment.prom", "status", "last-pass.json"] {
        let dir = if name.ends_with(".prom") {
            &textfiles
        } else {
            &h.run_dir()
        };
        for pid in 0..200u32 {
            let guess = std::process::id() + pid;
            let _ = std::os::unix::fs::symlink(&victim, dir.join(format!(".{name}.{guess}.tmp")));
        }
    }
    h.deploy(&[]).await.assert_ok();
    let summary = textfiles.join("summary.prom");
    plant(&summary);
    support::run_async(&[
        "status",
        "-z",
        &h.conn,
        "--metrics",
        summary.to_str().unwrap(),
    ])
    .await
    .assert_ok();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for written in [&metrics, &summary, &h.run_dir().join("status")] {
        let meta = std::fs::symlink_metadata(written).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{} is a file now",
            written.display()
        );
    }
    assert!(std::fs::read_to_string(&metrics)
        .unwrap()
        .contains("zkdeployment_"));
}

/// The ZooKeeper session id of `h`'s host node, once it exists.
async fn host_session(h: &TestHost) -> i64 {
    support::agent::wait_for_async("the host node", LIMIT, || async {
        h.client
            .check_stat(&format!("/hosts/{}", h.id))
            .await
            .ok()
            .flatten()
            .map(|s| s.ephemeral_owner)
    })
    .await
}

/// An agent whose stderr nobody reads (a stalled journald or log shipper) for longer than its
/// session timeout, while its deploy script prints 300 MiB at each pass: the session survives,
/// the pass ends `done`, nothing is halted, the script ran once per pass, the agent's
/// memory stays bounded. Before the fix the agent wrote each
/// output line to stderr on the task that keeps the session alive: the write blocked, the
/// session expired and the lock's in-flight record was left for the next host to halt on.
#[tokio::test]
async fn a_stalled_log_reader_never_costs_the_session() {
    let mut h = TestHost::fake("probe-stalled-log").await;
    h.extra = "session-timeout = 4\n".into();
    h.tree(TREE, v("r1")).await;
    let config = h.config();
    // stdout and stderr to a pipe this test never reads.
    let mut agent = tokio::process::Command::new(support::bin())
        .arg("agent")
        .arg(&config)
        .env_remove("ZC_ZK_CONNECTION_STRING")
        .env("ZK_TEST_OUTPUT_MB", "300")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let session = host_session(&h).await;
    h.wait_status("r1", &["done"], LIMIT).await;
    // Longer than the session timeout with nobody reading, then a second pass.
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.set_version(v("r2")).await;
    h.wait_status("r2", &["done"], LIMIT).await;
    assert_eq!(
        host_session(&h).await,
        session,
        "the same session throughout"
    );
    assert_eq!(h.hosts().await["version"], v("r2"), "no halt");
    assert_eq!(h.deploy_log("foo").len(), 2, "{:?}", h.deploy_log("foo"));
    let peak = peak_kib(agent.id().unwrap());
    assert!(peak < PEAK_KIB, "the agent held {peak} KiB at its peak");
    // The log is read again: it says how many lines it dropped.
    let mut stderr = agent.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut text = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut text)
            .await
            .unwrap();
        String::from_utf8_lossy(&text).into_owned()
    });
    let pid = nix::unistd::Pid::from_raw(agent.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // Its exit waits (bounded) for the log it cannot write.
    let status = tokio::time::timeout(LIMIT, agent.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let log = tokio::time::timeout(LIMIT, log).await.unwrap().unwrap();
    let dropped = log
        .lines()
        .find(|l| l.ends_with(" log lines dropped (the log's reader fell behind)"));
    let count = dropped
        .and_then(|l| l.strip_prefix("zkdeployment: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        count.is_some_and(|n| n > 0),
        "no count of dropped lines in the log: {}",
        &log[log.len().saturating_sub(2000)..]
    );
}

/// The agent's peak resident memory (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Most memory an agent may hold at its peak while a step prints without end (KiB).
const PEAK_KIB: u64 = 128 * 1024;

/// A deploy script that leaves a daemon writing to its output for ever: the step ends when
/// the script exits, the agent stops reading soon after and closes the pipe (the daemon's
/// next write fails: it dies of SIGPIPE), and nothing accumulates. Before the fix the
/// daemon's output went on filling a memory file nobody read.
#[tokio::test]
async fn a_daemon_writing_for_ever_to_the_script_output_is_cut_off() {
    let h = TestHost::fake("probe-daemon-writes").await;
    h.tree(TREE, v("r1")).await;
    let daemons = h.scratch("daemons");
    let daemons_env = daemons.display().to_string();
    let env = [
        ("ZK_TEST_DAEMON", daemons_env.as_str()),
        ("ZK_TEST_DAEMON_WRITES", "1"),
    ];
    let mut agent = h.spawn("agent", &[], &env);
    h.wait_status("r1", &["done"], LIMIT).await;
    let pid: i32 = support::agent::lines(&daemons)[0].trim().parse().unwrap();
    let pid = nix::unistd::Pid::from_raw(pid);
    // Dead, or a zombie nobody reaped yet.
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    };
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !gone() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cut = gone();
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    assert!(cut, "the daemon still writes to a pipe somebody reads");
    let peak = peak_kib(agent.pid());
    assert!(peak < PEAK_KIB, "the agent held {peak} KiB at its peak");
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}
