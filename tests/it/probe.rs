//! What a hostile probe found (issue 41's high findings): two agents started at once for one
//! host, a link planted where a command writes a file, SIGHUP in the middle of a step.

use crate::support;

use std::time::Duration;

use support::agent::{v, TestHost};

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
