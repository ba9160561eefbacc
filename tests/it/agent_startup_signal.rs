//! A defect the soak (`tests/soak/`, issue 15) found: SIGTERM while `zkdeployment agent`
//! starts — it connects, then registers, and registering waits up to `session-timeout` + 2 s
//! for a dead predecessor's host node to go — killed the process by the signal's default
//! action (the handler was installed only once `start` returned): no exit 0 (docs/operations.md,
//! "The agent under systemd"), and its session stayed open until it expired. Fixed by issue 15's
//! session work (the agent listens before it starts); this is the soak's reproducer, kept as
//! a regression test.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::agent::{dead_pid, v, wait_for, TestHost};
use zookeeper_client::{Acls, CreateMode};

const TREE: &str = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";

#[tokio::test]
async fn sigterm_while_the_agent_registers_exits_0() {
    let h = TestHost::fake("agent-startup-term").await;
    h.tree(TREE, v("r1")).await;
    // A dead agent's host node, its session still open: the new agent waits it out.
    let other = support::connect(&h.conn).await;
    let props = json!({"name": "h1.example.com", "pid": dead_pid(), "version": "r0"});
    other
        .create(
            "/hosts/h1",
            props.to_string().as_bytes(),
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let mut agent = h.spawn("agent", &[], &[]);
    wait_for("the agent to wait", Duration::from_secs(20), || {
        agent
            .output()
            .contains("left by a previous agent")
            .then_some(())
    })
    .await;
    agent.terminate();
    // It was 143 (killed by SIGTERM), its session left open.
    assert_eq!(
        agent.wait(Duration::from_secs(20)).await,
        0,
        "{}",
        agent.output()
    );
    drop(other);
}
