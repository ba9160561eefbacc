//! Failure budgets, node halts and node pauses (CONTRACT 15) on a real ZooKeeper: the exact
//! count of failed hosts when several fail at once (each host its own session), a host's
//! place kept across a second failure, node gates (quarantined, halted, paused, open) across
//! cluster versions, and the commands `pause PATH` / `resume PATH` (real `zkdeployment`
//! processes): what they refuse, what `status` (text, `--json`, `--metrics`) and a cluster
//! `resume` show, and a mixed fleet refused unless `--force`.

use crate::support;

use std::sync::Arc;

use serde_json::{json, Value};
use support::Run;
use zkdeployment::agent::budget::{
    node_gate, record_failure, record_node_halt, FailureRecord, Gate, Verdict,
};
use zkdeployment::zk::Client;
use zookeeper_client::{Acls, CreateMode};

/// `/acme/app` (with a budget) and `/acme/other`, deployed to h1..h5; `/acme` itself has no
/// deploy node.
const TREE: &str = "/acme
  /app : foo
    version = '1.0'
    max-failures = 2
    on-failure = 'halt-node'
    /deploy
      /h1
      /h2
      /h3
      /h4
      /h5
  /other : bar
    version = '1.0'
    /deploy
      /h1
";

struct Env {
    conn: String,
    client: Client,
}

impl Env {
    async fn new(label: &str) -> Env {
        let conn = support::chroot(label).await;
        let client = support::connect(&conn).await;
        let root = zkdeployment::tree::parse::parse(TREE).unwrap();
        zkdeployment::zk::import::import_tree(
            &client,
            &root,
            "/",
            zkdeployment::zk::import::Trim::Yes,
            false,
        )
        .await
        .unwrap();
        let hosts = json!({"version": "r1", "synced": "r1"});
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        client
            .create("/hosts", &serde_json::to_vec(&hosts).unwrap(), &open)
            .await
            .unwrap();
        Env { conn, client }
    }

    async fn zkd(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["-z", self.conn.as_str()]);
        support::run_async(&all).await
    }

    async fn status_json(&self) -> Value {
        let run = self.zkd(&["status", "--json"]).await;
        run.assert_ok();
        serde_json::from_str(&run.stdout).unwrap()
    }
}

fn failure(host: &str, version: &str, error: &str) -> FailureRecord {
    FailureRecord {
        host: host.into(),
        name: format!("{host}.example.com"),
        n: 0,
        version: json!(version),
        error: error.into(),
        time: zkdeployment::files::now(),
    }
}

/// `hosts` fail `/acme/app` at `version` at once, each from its own session, with budget F;
/// their verdicts by host.
async fn fail_at_once(conn: &str, hosts: &[&str], version: &str, budget: u32) -> Vec<Verdict> {
    let mut clients = Vec::new();
    for _ in hosts {
        clients.push(support::connect(conn).await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(hosts.len()));
    let mut tasks = Vec::new();
    for (client, host) in clients.into_iter().zip(hosts) {
        let start = start.clone();
        let record = failure(host, version, &format!("{host} failed"));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let verdict = record_failure(&client, "/acme/app", &record, budget).await;
            drop(client);
            verdict.unwrap()
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test]
async fn concurrent_failures_are_counted_exactly() {
    let env = Env::new("budget-concurrent").await;
    let hosts = ["h1", "h2", "h3", "h4", "h5"];
    // Several rounds, each at its own cluster version: a fresh count every time.
    for round in 0..4 {
        let version = format!("r{round}");
        let verdicts = fail_at_once(&env.conn, &hosts, &version, 2).await;
        let within = verdicts.iter().filter(|v| v.is_within()).count();
        assert_eq!(within, 2, "round {round}: {verdicts:?}");
        let mut places: Vec<usize> = verdicts
            .iter()
            .map(|v| match v {
                Verdict::Within { place, .. } | Verdict::Beyond { place, .. } => *place,
            })
            .collect();
        places.sort_unstable();
        assert_eq!(places, [1, 2, 3, 4, 5], "round {round}: {verdicts:?}");
        for v in &verdicts {
            match v {
                Verdict::Within { place, budget } => assert!(*place <= 2 && *budget == 2),
                Verdict::Beyond { place, budget } => assert!(*place > 2 && *budget == 2),
            }
        }
    }
    // Every failed host is quarantined at its version, and only there.
    for host in hosts {
        let gate = node_gate(&env.client, "/acme/app", &json!("r0"), host)
            .await
            .unwrap();
        let Gate::Quarantined(record) = gate else {
            panic!("{host}: {gate:?}")
        };
        assert_eq!(record["host"], json!(host));
        assert_eq!(record["error"], json!(format!("{host} failed")));
        assert_eq!(record["budget"], json!(2));
        let gate = node_gate(&env.client, "/acme/app", &json!("r9"), host).await;
        assert_eq!(gate.unwrap(), Gate::Open);
        let gate = node_gate(&env.client, "/acme/other", &json!("r0"), host).await;
        assert_eq!(gate.unwrap(), Gate::Open);
    }
}

#[tokio::test]
async fn a_host_keeps_its_place_and_later_hosts_are_beyond() {
    let env = Env::new("budget-serial").await;
    let c = &env.client;
    let at = |host| failure(host, "r1", "boom");
    let v = record_failure(c, "/acme/app", &at("h1"), 1).await.unwrap();
    assert_eq!(
        v,
        Verdict::Within {
            place: 1,
            budget: 1
        }
    );
    // h1 failing again (another instance) spends nothing more.
    let v = record_failure(c, "/acme/app", &at("h1"), 1).await.unwrap();
    assert_eq!(
        v,
        Verdict::Within {
            place: 1,
            budget: 1
        }
    );
    let v = record_failure(c, "/acme/app", &at("h2"), 1).await.unwrap();
    assert_eq!(
        v,
        Verdict::Beyond {
            place: 2,
            budget: 1
        }
    );
    let v = record_failure(c, "/acme/app", &at("h3"), 1).await.unwrap();
    assert_eq!(
        v,
        Verdict::Beyond {
            place: 3,
            budget: 1
        }
    );
    // A budget of 0: the first failure is beyond it. Version keys escape what a node name
    // cannot hold.
    let odd = failure("h1", "a/b c", "x");
    let v = record_failure(c, "/acme/other", &odd, 0).await.unwrap();
    assert_eq!(
        v,
        Verdict::Beyond {
            place: 1,
            budget: 0
        }
    );
    let gate = node_gate(c, "/acme/other", &json!("a/b c"), "h1").await;
    assert!(matches!(gate.unwrap(), Gate::Quarantined(_)));

    // A new cluster version (here by `resume --version`) deletes the records of the others:
    // they quarantine nobody any more.
    record_failure(c, "/acme/app", &failure("h4", "r2", "x"), 1)
        .await
        .unwrap();
    env.zkd(&["resume", "--version", "r2"]).await.assert_ok();
    let names = c.list_children("/node-state").await.unwrap();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("fail~acme,app~r2~h4-"), "{names:?}");
    let gate = node_gate(c, "/acme/app", &json!("r2"), "h4").await;
    assert!(matches!(gate.unwrap(), Gate::Quarantined(_)));
}

#[tokio::test]
async fn a_node_halt_holds_at_every_version_until_resume_path() {
    let env = Env::new("budget-halt").await;
    let c = &env.client;
    let f = failure("h3", "r1", "deploy script failed");
    let v = record_failure(c, "/acme/app", &f, 0).await.unwrap();
    assert!(!v.is_within());
    assert!(record_node_halt(c, "/acme/app", &f).await.unwrap());
    // A second halt keeps the first.
    let later = failure("h4", "r1", "later");
    assert!(!record_node_halt(c, "/acme/app", &later).await.unwrap());
    for version in ["r1", "r2"] {
        let gate = node_gate(c, "/acme/app", &json!(version), "h1")
            .await
            .unwrap();
        let Gate::Halted(halt) = gate else {
            panic!("{version}: {gate:?}")
        };
        assert_eq!(halt["host"], json!("h3"));
        assert_eq!(halt["error"], json!("deploy script failed"));
        let mut keys: Vec<&String> = halt.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["error", "host", "name", "time", "version"]);
    }
    // The host that halted it is quarantined at its version (its pass ends `error`).
    let gate = node_gate(c, "/acme/app", &json!("r1"), "h3").await.unwrap();
    assert!(matches!(gate, Gate::Quarantined(_)), "{gate:?}");
    assert_eq!(
        node_gate(c, "/acme/other", &json!("r1"), "h1")
            .await
            .unwrap(),
        Gate::Open
    );

    // status shows the node, in text and JSON, and its metrics.
    let status = env.zkd(&["status"]).await;
    status.assert_ok();
    assert!(
        status
            .stdout
            .contains("node /acme/app: halted; 1 failed host, budget 0 (h3)\n  halted "),
        "{status}"
    );
    assert!(
        status
            .stdout
            .contains("deploying r1:\n    deploy script failed\n"),
        "{status}"
    );
    let json = env.status_json().await;
    let node = &json["nodes"][0];
    assert_eq!(node["path"], json!("/acme/app"));
    assert_eq!(node["state"], json!("halted"));
    assert_eq!(node["budget"], json!(0));
    assert_eq!(node["halt"]["host"], json!("h3"));
    assert_eq!(node["pause"], Value::Null);
    let failed = node["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    let mut keys: Vec<&String> = failed[0].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["error", "host", "n", "name", "time", "version"]);
    let metrics = env.zkd(&["status", "--metrics", "-"]).await;
    metrics.assert_ok();
    for line in [
        "zkdeployment_fleet_node_failed_hosts{path=\"/acme/app\"} 1",
        "zkdeployment_fleet_node_quarantined_hosts{path=\"/acme/app\"} 0",
        "zkdeployment_fleet_node_halted{path=\"/acme/app\"} 1",
        "zkdeployment_fleet_node_paused{path=\"/acme/app\"} 0",
    ] {
        assert!(
            metrics.stdout.lines().any(|l| l == line),
            "{line}\n{metrics}"
        );
    }

    // A cluster resume leaves the node halt, and says how to end it.
    let run = env.zkd(&["resume"]).await;
    run.assert_ok();
    assert!(
        run.stdout
            .contains("still in force: node /acme/app: halted"),
        "{run}"
    );
    assert!(
        run.stdout
            .contains("end with: zkdeployment resume /acme/app"),
        "{run}"
    );

    // resume PATH ends it, clears the failure records, and wakes the agents.
    let (_, before) = c.get_data("/hosts").await.unwrap();
    let run = env.zkd(&["resume", "/acme/app"]).await;
    run.assert_ok();
    assert!(run.stdout.contains("/acme/app: ended the halt"), "{run}");
    assert!(run.stdout.contains("cleared 1 failure record(s)"), "{run}");
    let (_, after) = c.get_data("/hosts").await.unwrap();
    assert!(after.mzxid > before.mzxid, "/hosts not written");
    for host in ["h1", "h3"] {
        let gate = node_gate(c, "/acme/app", &json!("r1"), host).await.unwrap();
        assert_eq!(gate, Gate::Open, "{host}");
    }
    assert_eq!(env.status_json().await["nodes"], json!([]));
    // Counting starts again.
    let v = record_failure(c, "/acme/app", &failure("h5", "r1", "x"), 1).await;
    assert_eq!(
        v.unwrap(),
        Verdict::Within {
            place: 1,
            budget: 1
        }
    );
}

#[tokio::test]
async fn node_pauses_stop_a_node_until_resume_path() {
    let env = Env::new("budget-pause").await;
    let c = &env.client;
    let run = env
        .zkd(&["pause", "/acme/app", "--reason", "bad mirror"])
        .await;
    run.assert_ok();
    assert!(run.stdout.contains("/acme/app paused"), "{run}");
    let gate = node_gate(c, "/acme/app", &json!("r1"), "h1").await.unwrap();
    let Gate::Paused(record) = gate else {
        panic!("{gate:?}")
    };
    assert_eq!(record["reason"], json!("bad mirror"));
    assert_eq!(record["path"], json!("/acme/app"));
    assert!(record["user"].as_str().is_some_and(|u| !u.is_empty()));
    // The cluster goes on: only the node is paused.
    assert_eq!(
        zkdeployment::zk::decode(&c.get_data("/hosts").await.unwrap().0)["version"],
        json!("r1")
    );
    assert_eq!(
        node_gate(c, "/acme/other", &json!("r1"), "h1")
            .await
            .unwrap(),
        Gate::Open
    );
    let status = env.zkd(&["status"]).await;
    assert!(
        status.stdout.contains("node /acme/app: paused; paused "),
        "{status}"
    );
    assert!(status.stdout.contains(": bad mirror"), "{status}");
    let json = env.status_json().await;
    assert_eq!(json["nodes"][0]["state"], json!("paused"));
    assert_eq!(json["nodes"][0]["budget"], Value::Null);
    assert_eq!(json["nodes"][0]["pause"]["reason"], json!("bad mirror"));
    // Pausing again replaces the record.
    let run = env
        .zkd(&["pause", "/acme/app", "--reason", "still bad"])
        .await;
    run.assert_ok();
    assert!(run.stdout.contains("replaced: paused"), "{run}");

    let run = env.zkd(&["resume", "/acme/app"]).await;
    run.assert_ok();
    assert!(run.stdout.contains("ended the pause"), "{run}");
    assert!(run.stdout.contains(": still bad"), "{run}");
    assert_eq!(
        node_gate(c, "/acme/app", &json!("r1"), "h1").await.unwrap(),
        Gate::Open
    );
}

#[tokio::test]
async fn paths_that_are_not_application_nodes_are_refused() {
    let env = Env::new("budget-paths").await;
    for (args, code, text) in [
        (vec!["pause", "acme/app"], 2, "is not a node path"),
        (vec!["pause", "/acme/app/"], 2, "is not a node path"),
        (vec!["resume", "/acme/../x"], 2, "is not a node path"),
        (vec!["pause", "--force"], 2, "--force"),
        (
            vec!["resume", "/acme/app", "--version", "r2"],
            2,
            "--version",
        ),
        (
            vec!["pause", "/acme"],
            1,
            "/acme is not an application node of the tree: it has no type",
        ),
        (
            vec!["pause", "/nope"],
            1,
            "/nope is not an application node of the tree: no such node",
        ),
        (
            vec!["pause", "/acme/app/deploy"],
            1,
            "is not an application node",
        ),
        (
            vec!["resume", "/nope"],
            1,
            "/nope is not an application node of the tree",
        ),
    ] {
        let run = env.zkd(&args).await;
        assert_eq!(run.code, code, "{args:?}: {run}");
        assert!(run.stderr.contains(text), "{args:?}: {run}");
    }
    // Nothing was paused.
    assert_eq!(env.status_json().await["nodes"], json!([]));
    // A node removed from the tree that still has a halt can be resumed.
    record_node_halt(&env.client, "/gone/app", &failure("h1", "r1", "x"))
        .await
        .unwrap();
    env.zkd(&["resume", "/gone/app"]).await.assert_ok();
    assert_eq!(env.status_json().await["nodes"], json!([]));
}

#[tokio::test]
async fn a_mixed_fleet_refuses_node_pauses_unless_forced() {
    let env = Env::new("budget-mixed").await;
    // The original's agent: a host node without the `agent` property.
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    env.client
        .create("/hosts/old1", br#"{"name": "old1.example.com"}"#, &eph)
        .await
        .unwrap();
    let run = env.zkd(&["pause", "/acme/app"]).await;
    assert_eq!(run.code, 1, "{run}");
    assert!(run.stderr.contains("host old1 (old1.example.com)"), "{run}");
    assert!(run.stderr.contains("--force"), "{run}");
    assert_eq!(env.status_json().await["nodes"], json!([]));
    let run = env.zkd(&["pause", "/acme/app", "--force"]).await;
    run.assert_ok();
    let json = env.status_json().await;
    assert_eq!(json["nodes"][0]["state"], json!("paused"));
    let status = env.zkd(&["status"]).await;
    assert!(
        status
            .stdout
            .contains("max-failures and on-failure are ignored"),
        "{status}"
    );
}
