//! A fleet on a 3-server ZooKeeper ensemble (`tests/support/ensemble.rs`) survives losing the
//! leader mid-deploy: three long-running agents, each with its own fake yum and a connection
//! string listing the three servers, deploy application nodes with slow deploy scripts; the
//! leader is killed (SIGKILL) while they work. The sessions move to the surviving servers,
//! passes interrupted by a lost connection are run again, the fleet converges, and the deploys
//! of one application node never overlap across hosts (the node locks held throughout).

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::agent::{lines, v, wait_for, Pm, Spawned, TestHost};
use support::ensemble::Ensemble;
use support::rpm::FakeYum;
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(40);
const HOSTS: [&str; 3] = ["h1", "h2", "h3"];
const NODES: [&str; 4] = ["a", "b", "c", "d"];

fn tree() -> String {
    let mut text = String::from("/acme\n");
    for node in NODES {
        text.push_str(&format!(
            "  /{node} : foo\n    version = '1.0'\n    /deploy\n"
        ));
        for host in HOSTS {
            text.push_str(&format!("      /{host}\n"));
        }
    }
    text
}

/// A script run from `ZK_TEST_TIMES`.
#[derive(Debug, Clone)]
struct Run {
    path: String,
    host: String,
    start: f64,
    end: Option<f64>,
}

/// The runs recorded so far, in start order (an unfinished one has no end).
fn runs(file: &std::path::Path) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for line in lines(file) {
        let f: Vec<&str> = line.split(' ').collect();
        let (what, path, host, time) = (f[0], f[2], f[4], f[5].parse::<f64>().unwrap());
        if what == "start" {
            out.push(Run {
                path: path.into(),
                host: host.into(),
                start: time,
                end: None,
            });
        } else {
            let open = out
                .iter_mut()
                .rev()
                .find(|r| r.path == path && r.host == host && r.end.is_none())
                .unwrap_or_else(|| panic!("an end without a start: {line}"));
            open.end = Some(time);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_converges_when_the_leader_dies_mid_deploy() {
    // Slow steps: the leader dies while scripts run.
    fleet_survives_losing_the_leader("0.6").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_converges_when_the_leader_dies_amid_lock_traffic() {
    // Quick steps: the leader dies while lock and in-flight writes are in flight (before the
    // connection-loss retries, an in-flight record whose clearing was cut off made the next
    // holder halt the cluster for a host that had not died).
    fleet_survives_losing_the_leader("0.05").await;
}

async fn fleet_survives_losing_the_leader(sleep: &str) {
    let t0 = Instant::now();
    let mut ensemble = tokio::task::spawn_blocking(Ensemble::start).await.unwrap();
    eprintln!("ensemble up in {:?}", t0.elapsed());
    let servers = ensemble.connect_string();
    let root = format!("/t-ensemble-{}", uuid::Uuid::new_v4().simple());
    {
        let client = support::connect(&servers).await;
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        client.create(&root, b"", &open).await.unwrap();
    }
    let conn = format!("{servers}{root}");
    let mut hosts = Vec::new();
    for id in HOSTS {
        hosts.push(TestHost::on(&conn, id, Pm::Fake(FakeYum::new())).await);
    }
    hosts[0].tree(&tree(), v("r1")).await;
    let times = hosts[0].scratch("times.txt");
    let times_env = times.display().to_string();
    let env = [
        ("ZK_TEST_SLEEP", sleep),
        ("ZK_TEST_TIMES", times_env.as_str()),
    ];
    let agents: Vec<Spawned> = hosts.iter().map(|h| h.spawn("agent", &[], &env)).collect();

    // Kill the leader once every host is deploying.
    wait_for("every host deploying", LIMIT, || {
        let r = runs(&times);
        HOSTS
            .iter()
            .all(|h| r.iter().any(|run| run.host == *h))
            .then_some(())
    })
    .await;
    let leader = ensemble.leader();
    let killed_at = Instant::now();
    tokio::task::block_in_place(|| ensemble.kill(leader));
    eprintln!("killed server {} (the leader)", leader + 1);

    let deadline = Instant::now() + LIMIT;
    while !hosts.iter().all(|h| h.status_text() == "done") {
        if Instant::now() >= deadline {
            let mut report = String::new();
            for (h, agent) in hosts.iter().zip(&agents) {
                report.push_str(&format!(
                    "=== {}: status {:?}\n{}\n",
                    h.id,
                    h.status(),
                    agent.output()
                ));
            }
            panic!(
                "the fleet did not converge in {LIMIT:?}\n{report}\n{:#?}\n{}",
                runs(&times),
                ensemble.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "converged {:?} after the kill ({:?} in all)",
        killed_at.elapsed(),
        t0.elapsed()
    );
    for (h, agent) in hosts.iter().zip(&agents) {
        let out = agent.output();
        let count = |what: &str| out.lines().filter(|l| l.contains(what)).count();
        eprintln!(
            "{}: {} requests repeated after a connection loss, {} passes abandoned",
            h.id,
            count("once reconnected"),
            count("Abandoning deployment")
        );
    }
    let new_leader = tokio::task::block_in_place(|| ensemble.leader());
    assert_ne!(new_leader, leader);

    // Every node deployed on every host; per node, the runs never overlap.
    let all = runs(&times);
    let mut by_node: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in &all {
        assert!(run.end.is_some(), "unfinished: {run:?}\n{all:#?}");
        by_node.entry(run.path.as_str()).or_default().push(run);
    }
    assert_eq!(by_node.len(), NODES.len(), "{all:#?}");
    for (node, runs) in &by_node {
        for host in HOSTS {
            assert!(
                runs.iter().any(|r| r.host == host),
                "{node} on {host}: {all:#?}"
            );
        }
        for pair in runs.windows(2) {
            assert!(
                pair[0].end.unwrap() <= pair[1].start,
                "deploys of {node} overlap: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    let props = hosts[0].hosts().await;
    assert_eq!(props.get("version"), Some(&json!("r1")), "{props:?}");
    assert_eq!(props.get("halt"), None, "{props:?}");
    for (h, agent) in hosts.iter().zip(agents) {
        let node = h.host_node().await.expect("registered");
        assert_eq!(node["version"], json!("r1"));
        assert_eq!(node["pid"], json!(agent.pid()));
        assert_eq!(h.etc("foo").len(), 2 * NODES.len(), "{:?}", h.etc("foo"));
        assert_eq!(node.get("error"), None::<&Value>);
        let mut agent = agent;
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
    // Lock nodes: free, no in-flight record left.
    for node in NODES {
        let lock = format!("/agent-locks/acme,{node}");
        let (data, _) = hosts[0].client.get_data(&lock).await.unwrap();
        assert_eq!(zkdeployment::zk::decode(&data).get("in-flight"), None);
    }
    // The old leader comes back as a follower.
    tokio::task::block_in_place(|| ensemble.restart(leader));
    assert_eq!(ensemble.mode(leader).as_deref(), Some("follower"));
    eprintln!("done in {:?}", t0.elapsed());
}
