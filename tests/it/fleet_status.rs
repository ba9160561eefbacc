//! `status` at fleet scale with real agents: the summary (states, versions, not registered,
//! hosts behind, the roll-out times from `/hosts` `version-set` and each host's
//! `deployed-at`), the filters `--host`, `--behind`, `--failed`, the same in `--json`, and the
//! Prometheus metrics.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{wait_for_async, Pm, TestHost};
use support::git::TestRepo;
use support::rpm::FakeYum;

const LIMIT: Duration = Duration::from_secs(60);

fn tree(apps: &[(&str, &[&str])]) -> String {
    let mut text = String::from("/acme\n");
    for (app, hosts) in apps {
        text.push_str(&format!(
            "  /{app} : foo\n    version = '1.0'\n    /deploy\n"
        ));
        for h in *hosts {
            text.push_str(&format!("      /{h}\n"));
        }
    }
    text
}

async fn sync(conn: &str, repo: &TestRepo, scratch: &std::path::Path) -> support::Run {
    support::run_async(&[
        "sync",
        "-u",
        &repo.url(),
        "-t",
        scratch.join("work").to_str().unwrap(),
        "--lock-file",
        scratch.join("lock").to_str().unwrap(),
        "--tombstone",
        scratch.join("tombstone").to_str().unwrap(),
        "-z",
        conn,
    ])
    .await
}

async fn status(conn: &str, args: &[&str]) -> Value {
    let mut all = vec!["status", "--json", "-z", conn];
    all.extend_from_slice(args);
    let run = support::run_async(&all).await;
    run.assert_ok();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"))
}

fn ids(doc: &Value) -> Vec<String> {
    doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn status_summarises_the_fleet() {
    let conn = support::chroot("fleet-status").await;
    let repo = TestRepo::new();
    let scratch = tempfile::tempdir().unwrap();
    // h3 is named in the tree but never registers; `web` is a role of a registered host.
    let r1 = repo.commit(&[(
        "acme.zk",
        &tree(&[("a", &["h1", "h2", "h3"]), ("w", &["web"])]),
    )]);
    sync(&conn, &repo, scratch.path()).await.assert_ok();
    let h1 = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    let mut h2 = TestHost::on(&conn, "h2", Pm::Fake(FakeYum::new())).await;
    h2.role = None;
    let mut hw = TestHost::on(&conn, "hw", Pm::Fake(FakeYum::new())).await;
    hw.role = Some("web".into());
    let mut agents = vec![
        h1.spawn("agent", &[], &[]),
        // h2 fails deploying /acme/b, which comes with the next revision.
        h2.spawn("agent", &[], &[("ZK_TEST_FAIL", "/acme/b")]),
        hw.spawn("agent", &[], &[]),
    ];
    for h in [&h1, &h2, &hw] {
        h.wait_status(&r1, &["done"], LIMIT).await;
    }
    let doc = wait_for_async("every host converged in status", LIMIT, || async {
        let doc = status(&conn, &[]).await;
        (doc["summary"]["converged"] == json!(3)).then_some(doc)
    })
    .await;
    let s = &doc["summary"];
    assert_eq!(s["hosts"], json!(3));
    assert_eq!(s["versions"], json!([{"version": r1, "hosts": 3}]));
    assert_eq!(
        (s["deploying"].clone(), s["failed"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(s["not_registered"], json!(["h3"]));
    assert_eq!(s["behind"], json!([]));
    let rollout = &s["rollout"];
    assert_eq!(rollout["version"], json!(r1));
    assert_eq!(
        (rollout["reached"].clone(), rollout["of"].clone()),
        (json!(3), json!(3))
    );
    let started = rollout["started"]
        .as_f64()
        .expect("sync records version-set");
    let (p50, p90, p100) = (
        rollout["p50"].as_f64().unwrap(),
        rollout["p90"].as_f64().unwrap(),
        rollout["p100"].as_f64().unwrap(),
    );
    assert!(0.0 <= p50 && p50 <= p90 && p90 <= p100, "{rollout}");
    for h in doc["hosts"].as_array().unwrap() {
        let deployed = h["deployed"].as_f64().expect("agents record deployed-at");
        assert!(deployed >= started, "{h}");
        assert_eq!(h["state"], json!("converged"));
        assert_eq!(h["converged"], json!(true), "existing keys stay");
    }
    assert!(rollout["p100"].as_f64().unwrap() <= support::agent::now() - started);

    // Filters: the rows and the summary cover the hosts shown.
    let some = status(&conn, &["--host", "h?"]).await;
    assert_eq!(ids(&some), ["h1", "h2", "hw"]);
    let one = status(&conn, &["--host", "*2"]).await;
    assert_eq!(ids(&one), ["h2"]);
    assert_eq!(one["summary"]["hosts"], json!(1));
    let by_name = status(&conn, &["--host", "hw.example.*"]).await;
    assert_eq!(ids(&by_name), ["hw"]);
    assert_eq!(
        ids(&status(&conn, &["--behind"]).await),
        Vec::<String>::new()
    );

    // The next revision fails on h2 and halts the cluster.
    let r2 = repo.commit(&[(
        "acme.zk",
        &tree(&[("a", &["h1", "h2", "h3"]), ("b", &["h2"]), ("w", &["web"])]),
    )]);
    sync(&conn, &repo, scratch.path()).await.assert_ok();
    h2.wait_status(&r2, &["error"], LIMIT).await;
    let failed = wait_for_async("h2 failed in status", LIMIT, || async {
        let doc = status(&conn, &["--failed"]).await;
        (ids(&doc) == ["h2"]).then_some(doc)
    })
    .await;
    assert_eq!(failed["summary"]["failed"], json!(1));
    assert_eq!(failed["summary"]["behind"][0]["id"], json!("h2"));
    assert_eq!(failed["summary"]["behind"][0]["state"], json!("failed"));
    let behind = status(&conn, &["--behind"]).await;
    assert!(ids(&behind).contains(&"h2".to_string()), "{behind}");

    // The text form and the metrics.
    let text = support::run_async(&["status", "-z", &conn]).await;
    text.assert_ok();
    assert!(text.stdout.contains("hosts: 3 registered:"), "{text}");
    assert!(text.stdout.contains("1 failed; 1 not registered"), "{text}");
    assert!(text.stdout.contains("not registered: h3"), "{text}");
    let metrics = scratch.path().join("fleet.prom");
    support::run_async(&[
        "status",
        "-z",
        &conn,
        "--metrics",
        metrics.to_str().unwrap(),
    ])
    .await
    .assert_ok();
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.contains("zkdeployment_fleet_hosts{state=\"failed\"} 1\n"),
        "{prom}"
    );
    assert!(
        prom.contains("zkdeployment_fleet_hosts{state=\"not_registered\"} 1\n"),
        "{prom}"
    );
    assert!(
        prom.contains("zkdeployment_fleet_cluster_halted 1\n"),
        "{prom}"
    );
    for agent in &mut agents {
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
}
