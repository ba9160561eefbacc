//! The agent as a service waits for ZooKeeper at start-up as long as it takes (issue 39): on
//! a test-owned server that is down when the agent starts, the agent tells systemd it is
//! ready and `waiting for ZooKeeper at CONN`, keeps the watchdog fed, backs off up to 30 s,
//! and converges once the server is back, as the same process. A cluster without `/hosts`
//! yet is waited for the same way. SIGTERM during the wait exits 0; `--run-once` does not
//! wait.

use crate::operations::NotifySocket;
use crate::support;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use support::agent::{v, wait_for, Pm, TestHost};
use support::rpm::FakeYum;

const TREE: &str = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";
const LIMIT: Duration = Duration::from_secs(120);

/// A host on its own server, with a tree to converge to; the server is stopped.
async fn host_on_a_stopped_server() -> (support::ZkServer, TestHost) {
    let mut server = support::ZkServer::start();
    let h = TestHost::on(&server.connect_string(), "h1", Pm::Fake(FakeYum::new())).await;
    h.tree(TREE, v("r1")).await;
    server.stop();
    (server, h)
}

#[tokio::test]
async fn the_agent_waits_for_zookeeper_at_start_up_and_converges_without_a_restart() {
    let (mut server, h) = host_on_a_stopped_server().await;
    let socket_path = h.scratch("notify.sock");
    let notify = NotifySocket::start(UnixDatagram::bind(&socket_path).unwrap());
    let socket = socket_path.display().to_string();
    let mut agent = h.spawn(
        "agent",
        &[],
        &[
            ("NOTIFY_SOCKET", socket.as_str()),
            ("WATCHDOG_USEC", "2000000"),
        ],
    );
    let pid = agent.pid();
    // Down for over a minute of attempts: until the back-off has reached its 30 s cap.
    wait_for(
        "the back-off to reach 30 s",
        Duration::from_secs(600),
        || {
            agent
                .output()
                .contains("trying again in 30 s")
                .then_some(())
        },
    )
    .await;
    assert!(agent.running(), "{}", agent.output());
    let waiting = format!(
        "STATUS=waiting for ZooKeeper at {}",
        server.connect_string()
    );
    let messages = notify.messages();
    assert!(
        messages.iter().any(|m| m.starts_with(&waiting)),
        "{messages:#?}"
    );
    assert!(messages.iter().any(|m| m == "READY=1"), "{messages:#?}");
    // Keep-alives every second through the wait (over 31 s of back-off alone).
    let keep_alives = messages.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!(
        keep_alives >= 10,
        "{keep_alives} keep-alives: {messages:#?}"
    );
    assert_eq!(h.deploy_log("foo"), Vec::<String>::new());

    server.restart();
    h.wait_status("r1", &["done"], LIMIT).await;
    assert!(agent.running(), "{}", agent.output());
    assert_eq!(agent.pid(), pid, "the same process converged");
    assert!(!h.deploy_log("foo").is_empty());
    let messages = notify.messages();
    assert_eq!(
        messages.iter().filter(|m| *m == "READY=1").count(),
        1,
        "{messages:#?}"
    );
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

#[tokio::test]
async fn sigterm_while_waiting_for_zookeeper_exits_0_and_run_once_does_not_wait() {
    let (server, h) = host_on_a_stopped_server().await;
    let mut agent = h.spawn("agent", &[], &[]);
    wait_for("the agent to wait", LIMIT, || {
        agent
            .output()
            .contains(&format!(
                "waiting for ZooKeeper at {}",
                server.connect_string()
            ))
            .then_some(())
    })
    .await;
    agent.terminate();
    assert_eq!(
        agent.wait(Duration::from_secs(20)).await,
        0,
        "{}",
        agent.output()
    );
    assert!(
        agent
            .output()
            .contains("stopped before the agent had started"),
        "{}",
        agent.output()
    );
    // One pass: no waiting, exit 1 naming ZooKeeper.
    let config = h.config().display().to_string();
    let run = support::run_async(&["agent", &config, "--run-once"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("ZooKeeper"), "{run}");
    assert!(!run.stderr.contains("waiting for"), "{run}");
}

#[tokio::test]
async fn a_cluster_without_hosts_is_waited_for_too() {
    let h = TestHost::fake("agent-wait-hosts").await;
    let mut agent = h.spawn("agent", &[], &[]);
    wait_for("the agent to wait for /hosts", LIMIT, || {
        agent
            .output()
            .contains("/hosts does not exist")
            .then_some(())
    })
    .await;
    assert!(agent.running(), "{}", agent.output());
    h.tree(TREE, v("r1")).await;
    h.wait_status("r1", &["done"], LIMIT).await;
    assert!(!h.deploy_log("foo").is_empty());
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}
