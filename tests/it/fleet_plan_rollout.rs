//! The fleet plan shows how each deployment rolls out (`max-parallel`, `canary`, health
//! check, the mixed-fleet rule), computed from the candidate tree and the fleet as read by
//! the agent's own rule: on a real ZooKeeper with five real agents, the rollout the plan gives
//! every deployment of every host is the one each agent then gives it (`deploy --dry-run
//! --json`), with the fleet ours alone and with an original's host node registered.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fleet_plan::{plan, wait_converged};
use serde_json::{json, Value};
use support::agent::{add_foo_health_check, v, Pm, Spawned, TestHost};
use support::rpm::FakeYum;
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(60);

/// `/acme/a` (foo 1.0, which has a health check) on h1–h5 with `settings`; `/acme/b`
/// (webapp `b_version`, no health check) on h1 and h2.
fn tree(settings: &str, b_version: &str) -> String {
    let mut text = String::from("/acme\n  /a : foo\n    version = '1.0'\n");
    text.push_str(settings);
    text.push_str("    /deploy\n");
    for i in 1..=5 {
        text.push_str(&format!("      /h{i}\n"));
    }
    text.push_str(&format!(
        "  /b : webapp\n    version = '{b_version}'\n    /deploy\n      /h1\n      /h2\n"
    ));
    text
}

/// A health check (always passing) in every payload of foo in the host's fake repository.
fn add_health_check(h: &TestHost) {
    add_foo_health_check(h, "#!/bin/sh\necho ok\n");
}

/// The rollout of each deployment among `steps` (JSON steps, as `deploy --dry-run --json`
/// and the fleet plan's `hosts[].steps` give them): `path n` → (parallel, canary, health).
fn rollouts(steps: &Value) -> BTreeMap<String, (Value, Value, Value)> {
    steps
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["action"] == "deploy")
        .map(|s| {
            (
                format!("{} {}", s["path"].as_str().unwrap(), s["n"]),
                (
                    s["parallel"].clone(),
                    s["canary"].clone(),
                    s["health"].clone(),
                ),
            )
        })
        .collect()
}

/// The fleet plan's rollout of each deployment, by host id.
fn planned(doc: &Value) -> BTreeMap<String, BTreeMap<String, (Value, Value, Value)>> {
    doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["id"].as_str().unwrap().to_string(), rollouts(&h["steps"])))
        .collect()
}

/// The fleet plan's rollout group of the application node `path`.
fn node<'a>(doc: &'a Value, path: &str) -> &'a Value {
    doc["rollouts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == json!(path))
        .unwrap_or_else(|| panic!("no rollout of {path} in {doc:#}"))
}

/// Each agent's own plan (`deploy --dry-run --json --force`) gives every deployment the
/// rollout the fleet plan gave it, and says the same of a mixed fleet.
async fn agents_agree(hosts: &[TestHost], doc: &Value) {
    let expected = planned(doc);
    for h in hosts {
        let dry = h.deploy(&["--dry-run", "--json", "--force"]).await;
        let own: Value = serde_json::from_str(&dry.stdout).unwrap_or_else(|_| panic!("{dry}"));
        assert_eq!(
            rollouts(&own["steps"]),
            expected[&h.id],
            "{}: the agent's rollout differs from the fleet plan's\n{own:#}",
            h.id
        );
        assert_eq!(
            own.get("mixed-fleet").unwrap_or(&Value::Null),
            &doc["mixed_fleet"],
            "{}",
            h.id
        );
    }
}

#[tokio::test]
async fn the_plan_shows_each_deployments_rollout_as_the_agents_compute_it() {
    let conn = support::chroot("fleet-plan-rollout").await;
    let mut hosts = Vec::new();
    for i in 1..=5 {
        let h = TestHost::on(&conn, &format!("h{i}"), Pm::Fake(FakeYum::new())).await;
        add_health_check(&h);
        hosts.push(h);
    }
    hosts[0].tree(&tree("", "1.0"), v("r1")).await;
    let agents: Vec<Spawned> = hosts.iter().map(|h| h.spawn("agent", &[], &[])).collect();
    for h in &hosts {
        wait_converged(h, "r1").await;
        let inventory = &h.host_node().await.unwrap()["inventory"];
        assert_eq!(inventory["health"], json!(["foo"]), "{}: {inventory}", h.id);
    }

    // The candidate: 30 % of /acme/a's 5 hosts at once after 1 canary; /acme/b plain, at a
    // new version.
    let candidate = tree("    max-parallel = '30%'\n    canary = 1\n", "1.4");
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("acme.zk");
    std::fs::write(&file, &candidate).unwrap();
    let file = file.to_str().unwrap();
    let run = plan(&conn, &["--files", file, "--json"]).await;
    run.assert_code(10);
    let ours: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(ours["mixed_fleet"], Value::Null, "{run}");
    let a = node(&ours, "/acme/a");
    // 30 % of 5 = 1.5, rounded up: K = 2. foo stays at the version every inventory says has
    // a health check.
    assert_eq!(a["parallel"], json!(2), "{a:#}");
    assert_eq!(a["canary"], json!(1), "{a:#}");
    assert_eq!(a["max_parallel"], json!("30%"), "{a:#}");
    assert_eq!(a["targets"], json!(5), "{a:#}");
    assert_eq!(a["health"], json!(true), "{a:#}");
    assert_eq!(a["health_deadline"], json!(300.0), "{a:#}");
    assert_eq!(a["changes"], json!(true), "{a:#}");
    assert_eq!(a["hosts"], json!(["h1", "h2", "h3", "h4", "h5"]));
    let b = node(&ours, "/acme/b");
    assert_eq!(
        (&b["parallel"], &b["canary"]),
        (&json!(1), &json!(0)),
        "{b:#}"
    );
    assert_eq!(b["max_parallel"], Value::Null, "{b:#}");
    // A new version of webapp: whether it has a health check is not known before it is
    // installed.
    assert_eq!(b["health"], Value::Null, "{b:#}");
    let text = plan(&conn, &["--files", file]).await;
    text.assert_code(10);
    for expected in [
        "/acme/a [max-parallel 2, canary 1, health check]",
        "max-parallel '30%' of 5 deploy targets",
        "5 hosts: h1, h2, h3, h4, h5",
    ] {
        assert!(text.stdout.contains(expected), "{expected:?} in\n{text}");
    }
    assert!(!text.stdout.contains("/acme/b ["), "{text}");
    assert!(!text.stdout.contains("mixed fleet"), "{text}");

    // The original's agent registers a host node without `agent`: every node K = 1.
    let client = support::connect(&conn).await;
    let old = json!({"name": "old.example.com", "version": "r1"});
    client
        .create(
            "/hosts/old",
            old.to_string().as_bytes(),
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let run = plan(&conn, &["--files", file, "--json"]).await;
    run.assert_code(10);
    let mixed: Value = serde_json::from_str(&run.stdout).unwrap();
    let why = mixed["mixed_fleet"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("host old (old.example.com) has no 'agent' property"),
        "{run}"
    );
    for g in mixed["rollouts"].as_array().unwrap() {
        assert_eq!(g["parallel"], json!(1), "{g:#}");
    }
    let text = plan(&conn, &["--files", file]).await;
    assert!(
        text.stdout.contains(&format!("mixed fleet: {why}")),
        "{text}"
    );
    assert!(
        text.stdout
            .contains("/acme/a [max-parallel 1, canary 1, health check]"),
        "{text}"
    );
    assert!(
        text.stdout
            .contains("max-parallel '30%' in the tree: 1 while the fleet is mixed"),
        "{text}"
    );

    // Synced: each agent computes the same rollouts, mixed fleet or not.
    hosts[0].tree(&candidate, v("r2")).await;
    for h in &hosts {
        wait_converged(h, "r2").await;
    }
    agents_agree(&hosts, &mixed).await;
    client.delete("/hosts/old", None).await.unwrap();
    agents_agree(&hosts, &ours).await;
    for mut agent in agents {
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
}

/// `/acme/a` (foo 1.0) on h1–h3 with `settings`.
fn budget_tree(settings: &str) -> String {
    format!("/acme\n  /a : foo\n    version = '1.0'\n{settings}    /deploy\n      /h1\n      /h2\n      /h3\n")
}

/// The effective `max-failures` and `on-failure` of `/acme/a` in `h`'s own plan
/// (`deploy --dry-run --json --force`).
async fn own_budget(h: &TestHost) -> (Value, Value) {
    let dry = h.deploy(&["--dry-run", "--json", "--force"]).await;
    let own: Value = serde_json::from_str(&dry.stdout).unwrap_or_else(|_| panic!("{dry}"));
    let step = own["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == "deploy" && s["path"] == "/acme/a")
        .unwrap_or_else(|| panic!("no deploy of /acme/a in {own:#}"))
        .clone();
    (step["max-failures"].clone(), step["on-failure"].clone())
}

#[tokio::test]
async fn the_plan_shows_each_rollouts_failure_budget_and_that_a_mixed_fleet_turns_it_off() {
    let conn = support::chroot("fleet-plan-budget").await;
    let mut hosts = Vec::new();
    for i in 1..=3 {
        hosts.push(TestHost::on(&conn, &format!("h{i}"), Pm::Fake(FakeYum::new())).await);
    }
    hosts[0].tree(&budget_tree(""), v("r1")).await;
    let agents: Vec<Spawned> = hosts.iter().map(|h| h.spawn("agent", &[], &[])).collect();
    for h in &hosts {
        wait_converged(h, "r1").await;
    }

    // The candidate gives /acme/a a budget of 40 % of its 3 hosts (1.2, rounded down: 1),
    // a failure beyond it halting only the node.
    let candidate = budget_tree("    max-failures = '40%'\n    on-failure = 'halt-node'\n");
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("acme.zk");
    std::fs::write(&file, &candidate).unwrap();
    let file = file.to_str().unwrap();
    let run = plan(&conn, &["--files", file, "--json"]).await;
    run.assert_code(10);
    let ours: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(ours["mixed_fleet"], Value::Null, "{run}");
    let a = node(&ours, "/acme/a");
    assert_eq!(a["max_failures"], json!(1), "{a:#}");
    assert_eq!(a["on_failure"], json!("halt-node"), "{a:#}");
    assert_eq!(a["max_failures_in_tree"], json!("40%"), "{a:#}");
    assert_eq!(a["targets"], json!(3), "{a:#}");
    let text = plan(&conn, &["--files", file]).await;
    text.assert_code(10);
    for expected in [
        "/acme/a [max-parallel 1, max-failures 1, on-failure halt-node]",
        "max-failures '40%' of 3 deploy targets",
    ] {
        assert!(text.stdout.contains(expected), "{expected:?} in\n{text}");
    }
    assert!(!text.stdout.contains("mixed fleet"), "{text}");

    // The original's agent registers a host node: budgets are off, and the plan says so.
    let client = support::connect(&conn).await;
    let old = json!({"name": "old.example.com", "version": "r1"});
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    client
        .create("/hosts/old", old.to_string().as_bytes(), &ephemeral)
        .await
        .unwrap();
    let run = plan(&conn, &["--files", file, "--json"]).await;
    run.assert_code(10);
    let mixed: Value = serde_json::from_str(&run.stdout).unwrap();
    let why = mixed["mixed_fleet"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("host old (old.example.com) has no 'agent' property"),
        "{run}"
    );
    let a = node(&mixed, "/acme/a");
    assert_eq!(a["max_failures"], Value::Null, "{a:#}");
    assert_eq!(a["max_failures_in_tree"], json!("40%"), "{a:#}");
    let text = plan(&conn, &["--files", file]).await;
    for expected in [
        format!("mixed fleet: {why}\n    max-failures and on-failure are ignored: every failure halts the cluster"),
        "/acme/a [max-parallel 1]".into(),
        "max-failures '40%', on-failure 'halt-node' in the tree: off while the fleet is mixed (every failure halts the cluster)".into(),
    ] {
        assert!(text.stdout.contains(&expected), "{expected:?} in\n{text}");
    }

    // Synced: each agent's own plan has the same budget, off while the fleet is mixed.
    hosts[0].tree(&candidate, v("r2")).await;
    for h in &hosts {
        wait_converged(h, "r2").await;
        assert_eq!(
            own_budget(h).await,
            (Value::Null, json!("halt-node")),
            "{}",
            h.id
        );
    }
    client.delete("/hosts/old", None).await.unwrap();
    for h in &hosts {
        assert_eq!(
            own_budget(h).await,
            (json!(1), json!("halt-node")),
            "{}",
            h.id
        );
    }
    for mut agent in agents {
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
}
