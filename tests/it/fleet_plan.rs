//! The fleet plan (`zkdeployment plan`) on a real ZooKeeper with real agents that have run, so
//! their inventories are real: a commit with an upgrade, a downgrade, a new instance, a removed
//! deployment, a role controller change, property changes, and a property-link change that
//! changes a version is planned, then synced; the plan's per-host steps must be exactly what
//! each agent then did (its `last-pass.json`). Also: nothing is written, lint errors are the
//! syncer's, hosts whose discovery would fail, hosts without an inventory, exit codes, and
//! hosts that only re-run counted, not listed, unless `--per-host`.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{wait_for_async, Pm, Spawned, TestHost};
use support::git::TestRepo;
use support::rpm::FakeYum;
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(60);

/// The tree before: web (webapp 1.4, port through a property link) on h1, h2 and role web;
/// work (worker 1.1) on h1 and h3; cache (cache-1.2, any version) on h2; lib (foo, version
/// through a property link to /acme/versions foo) on h3 and h5 (a host without an agent).
const BEFORE: &str = "\
/acme
  /config
    port = 8080
  /versions
    foo = '1.0'
    foo_next = '1.4'
  /web : webapp
    version = '1.4'
    port => ../config port
    /deploy
      /h1
      /h2
      /web
  /work : worker
    version = '1.1'
    threads = 2
    /deploy
      /h1
      /h3
  /cache : cache-1.2
    /deploy
      /h2
  /lib : foo
    version => ../versions foo
    /deploy
      /h3
      /h5
/roles
  /web : webrc
    version = '1.0'
";

/// The role lock node (an overlay: `/role-locks` is not the repository's).
const LOCKS: &str = "/role-locks\n  /web\n";

/// The commit under review.
fn after() -> String {
    BEFORE
        .replace("port = 8080", "port = 8081")
        .replace("version = '1.4'\n    port", "version = '2.0'\n    port")
        .replace(
            "version = '1.1'\n    threads = 2",
            "version = '1.0'\n    threads = 4",
        )
        .replace("      /h3\n  /cache", "      /h3\n        n = 2\n  /cache")
        .replace("  /cache : cache-1.2\n    /deploy\n      /h2\n", "")
        .replace(
            "version => ../versions foo\n",
            "version => ../versions foo_next\n",
        )
        .replace(
            "  /web : webrc\n    version = '1.0'",
            "  /web : webrc\n    version = '1.1'",
        )
}

async fn sync(conn: &str, repo: &TestRepo, work: &std::path::Path) -> support::Run {
    let scratch = work.parent().unwrap();
    support::run_async(&[
        "sync",
        "-u",
        &repo.url(),
        "-t",
        work.to_str().unwrap(),
        "--lock-file",
        scratch.join("sync.lock").to_str().unwrap(),
        "--tombstone",
        scratch.join("tombstone").to_str().unwrap(),
        "-z",
        conn,
    ])
    .await
}

pub(crate) async fn plan(conn: &str, args: &[&str]) -> support::Run {
    let mut all = vec!["plan", "-z", conn];
    all.extend_from_slice(args);
    support::run_async(&all).await
}

/// Waits until the host node says `done` at `version` and carries an inventory of it, and
/// the pass report (written last) is that pass's.
pub(crate) async fn wait_converged(h: &TestHost, version: &str) {
    wait_for_async(
        &format!("{} converged at {version}", h.id),
        LIMIT,
        || async {
            if h.report()["version"] != json!(version) {
                return None;
            }
            h.host_node().await.filter(|n| {
                n.get("version") == Some(&json!(version))
                    && n.get("status") == Some(&json!("done"))
                    && n.get("inventory").and_then(|i| i.get("version")) == Some(&json!(version))
            })
        },
    )
    .await;
}

fn hosts_of(groups: &Value, pick: impl Fn(&Value) -> bool) -> Vec<Vec<String>> {
    groups
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| pick(g))
        .map(|g| {
            g["hosts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// Steps with each run of node-locked deployments sorted: a host takes them in the order
/// their locks come free (a busy node is passed over and taken later).
fn in_lock_order(steps: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<String> = Vec::new();
    for step in steps {
        if step.starts_with("deploy ") {
            run.push(step);
        } else {
            run.sort();
            out.append(&mut run);
            out.push(step);
        }
    }
    run.sort();
    out.append(&mut run);
    out
}

/// The steps a pass ran (`last-pass.json`).
fn ran(h: &TestHost) -> Vec<String> {
    h.report()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_plan_is_what_the_agents_then_do() {
    let conn = support::chroot("fleet-plan").await;
    let repo = TestRepo::new();
    let scratch = tempfile::tempdir().unwrap();
    let work = scratch.path().join("sync-work");
    let r1 = repo.commit(&[("acme.zk", BEFORE), ("locks.zkx", LOCKS)]);
    sync(&conn, &repo, &work).await.assert_ok();

    let mut hosts = Vec::new();
    for id in ["h1", "h2", "h3", "h4"] {
        let mut h = TestHost::on(&conn, id, Pm::Fake(FakeYum::new())).await;
        if id == "h4" {
            h.role = Some("web".into());
        }
        hosts.push(h);
    }
    let agents: Vec<Spawned> = hosts.iter().map(|h| h.spawn("agent", &[], &[])).collect();
    for h in &hosts {
        wait_converged(h, &r1).await;
    }
    // h5: registered the way the original agent does (no inventory), at the cluster version.
    let client = support::connect(&conn).await;
    let node = json!({"name": "h5.example.com", "version": r1});
    client
        .create(
            "/hosts/h5",
            node.to_string().as_bytes(),
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();

    // The current revision itself: every host only re-runs what it has.
    let plan_dir = scratch.path().join("plan-work");
    let dir = plan_dir.to_str().unwrap();
    let same = plan(&conn, &["-u", &repo.url(), "-t", dir, "--json"]).await;
    same.assert_code(0);
    let doc: Value = serde_json::from_str(&same.stdout).unwrap();
    assert_eq!(doc["changed"], json!([]), "{}", same.stdout);
    // Hosts that only re-run are counted, not listed (CONTRACT 12) ...
    let counts = json!({"changed": 0, "routine": 5, "idle": 0, "without_inventory": 1});
    assert_eq!(doc["counts"], counts);
    assert_eq!(doc["per_host"], json!(false));
    for list in ["routine", "idle", "without_inventory", "hosts"] {
        assert_eq!(doc[list], json!([]), "{list}: {}", same.stdout);
    }
    for g in doc["rollouts"].as_array().unwrap() {
        assert_eq!(g["hosts"], json!([]), "{g}");
        assert!(g["count"].as_u64().unwrap() > 0, "{g}");
    }
    let text = plan(&conn, &["-u", &repo.url(), "-t", dir]).await;
    text.assert_code(0);
    assert!(
        text.stdout
            .contains("hosts that change: 0; that only re-run what they have: 5;"),
        "{text}"
    );
    // (h5 is named once: as the reason the fleet is mixed.)
    assert!(text.stdout.contains("current tree: 1 host\n"), "{text}");
    for id in ["h1", "h2", "h3", "h4"] {
        assert!(!text.stdout.contains(id), "{id} named in\n{text}");
    }
    // ... and listed, each with its plan, with --per-host.
    let all = plan(
        &conn,
        &["-u", &repo.url(), "-t", dir, "--json", "--per-host"],
    )
    .await;
    all.assert_code(0);
    let doc: Value = serde_json::from_str(&all.stdout).unwrap();
    assert_eq!(doc["counts"], counts);
    assert_eq!(doc["per_host"], json!(true));
    assert_eq!(doc["routine"], json!(["h1", "h2", "h3", "h4", "h5"]));
    assert_eq!(doc["without_inventory"], json!(["h5"]));
    let planned: Vec<&Value> = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["id"])
        .collect();
    assert_eq!(planned, ["h1", "h2", "h3", "h4", "h5"]);
    let web = doc["rollouts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["path"] == json!("/acme/web"))
        .unwrap();
    assert_eq!(
        (&web["count"], &web["hosts"]),
        (&json!(3), &json!(["h1", "h2", "h4"]))
    );
    let text = plan(&conn, &["-u", &repo.url(), "-t", dir, "--per-host"]).await;
    text.assert_code(0);
    for line in [
        "\n  h3 (re-runs what it has)\n",
        "\n      deploy /acme/lib 0 (foo 1.0)\n",
    ] {
        assert!(text.stdout.contains(line), "{line:?} in\n{text}");
    }

    let r2 = repo.commit(&[("acme.zk", &after()), ("locks.zkx", LOCKS)]);
    let before = hosts[0].zk_stats().await;
    let run = plan(&conn, &["-u", &repo.url(), "-t", dir, "--json"]).await;
    run.assert_code(10);
    assert_eq!(
        hosts[0].zk_stats().await,
        before,
        "plan wrote to ZooKeeper\n{run}"
    );
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["revision"], json!(r2));
    assert_eq!(doc["cluster"], json!(r1));
    assert_eq!(doc["registered"], json!(5));
    let packages = &doc["packages"];
    let pkg = |change: &str, rpm: &str, from: Value, to: Value| {
        let hosts = hosts_of(packages, |g| {
            g["change"] == json!(change)
                && g["rpm"] == json!(rpm)
                && g["from"] == from
                && g["to"] == to
        });
        assert_eq!(hosts.len(), 1, "{change} {rpm} in {packages:#}");
        hosts.into_iter().next().unwrap()
    };
    assert_eq!(
        pkg("upgrade", "webapp", json!("1.4"), json!("2.0")),
        ["h1", "h2", "h4"]
    );
    assert_eq!(
        pkg("downgrade", "worker", json!("1.1"), json!("1.0")),
        ["h1", "h3"]
    );
    // A property link pointed elsewhere: a new version for h3, and for h5 (no inventory:
    // planned as if it had converged on the current tree).
    assert_eq!(
        pkg("upgrade", "foo", json!("1.0"), json!("1.4")),
        ["h3", "h5"]
    );
    assert_eq!(pkg("remove", "cache-1.2", json!("?"), Value::Null), ["h2"]);
    assert_eq!(packages.as_array().unwrap().len(), 4, "{packages:#}");

    let instances = &doc["instances"];
    assert_eq!(
        hosts_of(instances, |g| g["change"] == json!("add")
            && g["path"] == json!("/acme/work")
            && g["n"] == json!(1)),
        [["h3"]]
    );
    assert_eq!(
        hosts_of(instances, |g| g["change"] == json!("remove")
            && g["path"] == json!("/acme/cache")
            && g["n"] == json!(0)),
        [["h2"]]
    );
    assert_eq!(instances.as_array().unwrap().len(), 2, "{instances:#}");

    let props: BTreeMap<String, (Value, Vec<String>)> = doc["properties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["path"].as_str().unwrap().to_string(),
                (
                    g["changes"].clone(),
                    serde_json::from_value(g["hosts"].clone()).unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(
        props["/acme/web"],
        (
            json!([{"key": "port", "old": 8080, "new": 8081},
                   {"key": "version", "old": "1.4", "new": "2.0"}]),
            vec!["h1".to_string(), "h2".into(), "h4".into()]
        )
    );
    assert_eq!(
        props["/acme/work"].0,
        json!([{"key": "threads", "old": 2, "new": 4},
               {"key": "version", "old": "1.1", "new": "1.0"}])
    );
    assert_eq!(
        props["/acme/lib"],
        (
            json!([{"key": "version", "old": "1.0", "new": "1.4"}]),
            vec!["h3".to_string(), "h5".into()]
        )
    );
    assert_eq!(props.len(), 3);
    assert_eq!(
        hosts_of(&doc["other"], |g| g["step"]
            == json!("role controller install webrc 1.1")),
        [["h4"]]
    );
    assert_eq!(
        hosts_of(&doc["other"], |g| g["step"] == json!("remove /etc/cache")),
        [["h2"]]
    );
    assert_eq!(doc["failures"], json!([]));
    assert_eq!(doc["changed"], json!(["h1", "h2", "h3", "h4", "h5"]));
    // Every change group carries its count and its hosts.
    for kind in ["packages", "instances", "properties", "other", "rollouts"] {
        for g in doc[kind].as_array().unwrap() {
            assert_eq!(
                g["count"],
                json!(g["hosts"].as_array().unwrap().len()),
                "{kind}: {g}"
            );
        }
    }
    // h5 is the original's: a mixed fleet, every node one host at a time.
    assert!(
        doc["mixed_fleet"]
            .as_str()
            .is_some_and(|why| why.starts_with("host h5 (h5.example.com) has no 'agent'")),
        "{}",
        run.stdout
    );
    for g in doc["rollouts"].as_array().unwrap() {
        assert_eq!(
            (&g["parallel"], &g["canary"]),
            (&json!(1), &json!(0)),
            "{g}"
        );
    }

    // The text form says the same, grouped, with old → new values.
    let text = plan(&conn, &["-u", &repo.url(), "-t", dir]).await;
    text.assert_code(10);
    for expected in [
        "5 registered hosts",
        "hosts that change: 5;",
        "remove     cache-1.2  ",
        "upgrade    webapp 1.4 → 2.0",
        "3 hosts: h1, h2, h4",
        "downgrade  worker 1.1 → 1.0",
        "add        /acme/work 1 (worker)",
        "remove     /acme/cache 0 (cache-1.2)",
        "port: 8080 → 8081",
        "version: '1.0' → '1.4'",
        "role controller install webrc 1.1",
        "without an inventory, planned as if converged on the current tree: 1 host: h5",
        "mixed fleet: host h5 (h5.example.com)",
    ] {
        assert!(text.stdout.contains(expected), "{expected:?} in\n{text}");
    }

    // Sync it: each agent does exactly what its plan said.
    sync(&conn, &repo, &work).await.assert_ok();
    for h in &hosts {
        wait_converged(h, &r2).await;
    }
    let planned: BTreeMap<String, Vec<String>> = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_string(),
                serde_json::from_value(p["lines"].clone()).unwrap(),
            )
        })
        .collect();
    for h in &hosts {
        assert_eq!(h.report()["outcome"], json!("done"), "{}", h.id);
        assert_eq!(
            in_lock_order(ran(h)),
            in_lock_order(planned[&h.id].clone()),
            "{}: plan and pass differ",
            h.id
        );
    }
    assert!(planned["h3"].contains(&"deploy /acme/work 1 (worker 1.0)".to_string()));
    assert!(planned["h2"].contains(&"undeploy /acme/cache 0 (cache-1.2)".to_string()));
    for mut agent in agents {
        agent.terminate();
        assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    }
}

#[tokio::test]
async fn bad_trees_fail_as_sync_fails_them() {
    let conn = support::chroot("fleet-plan-bad").await;
    let repo = TestRepo::new();
    let scratch = tempfile::tempdir().unwrap();
    let bad = "/acme\n  /web : webapp\n    version = '1.4\n";
    repo.commit(&[("acme.zk", bad)]);
    let work = scratch.path().join("sync-work");
    let synced = sync(&conn, &repo, &work).await;
    synced.assert_code(1);
    let plan_dir = scratch.path().join("plan-work");
    let planned = plan(
        &conn,
        &["-u", &repo.url(), "-t", plan_dir.to_str().unwrap()],
    )
    .await;
    planned.assert_code(1);
    assert_eq!(planned.stdout, "");
    let error = |run: &support::Run| {
        run.stderr
            .lines()
            .find(|l| l.contains("acme.zk:3:"))
            .unwrap_or_else(|| panic!("no error line\n{run}"))
            .to_string()
    };
    assert_eq!(error(&planned), error(&synced));

    // From files: the same message, naming the path given.
    let file = scratch.path().join("acme.zk");
    std::fs::write(&file, bad).unwrap();
    let from_files = plan(&conn, &["--files", file.to_str().unwrap()]).await;
    from_files.assert_code(1);
    assert!(
        error(&from_files).contains(&format!("{}:3:", file.display())),
        "{from_files}"
    );
    // Not a tree file, or no candidate at all: usage.
    plan(&conn, &["--files", "/etc/hostname"])
        .await
        .assert_code(2);
    plan(&conn, &[]).await.assert_code(2);
    plan(&conn, &["-u", &repo.url()]).await.assert_code(2);
}

#[tokio::test]
async fn hosts_whose_pass_would_fail_are_named_with_the_error() {
    let h = TestHost::fake("fleet-plan-fail").await;
    let tree = "/acme\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /h1\n";
    h.tree(tree, json!("r1")).await;
    let mut agent = h.spawn("agent", &[], &[]);
    wait_converged(&h, "r1").await;
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("acme.zk");
    // Lints clean, but h1 is named twice (by id and by name).
    std::fs::write(&file, format!("{tree}      /h1.example.com\n")).unwrap();
    let run = plan(&h.conn, &["--files", file.to_str().unwrap(), "--json"]).await;
    run.assert_code(1);
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        doc["failures"],
        json!([{"error": "Conflicting deployments for /acme/web. Can't deploy to h1.example.com and h1.",
                "count": 1, "hosts": ["h1"]}])
    );
    assert_eq!(doc["hosts"][0]["error"], doc["failures"][0]["error"]);
    assert!(run.stderr.contains("1 host(s) would fail"), "{run}");
    let text = plan(&h.conn, &["--files", file.to_str().unwrap()]).await;
    text.assert_code(1);
    assert!(
        text.stdout
            .contains("Conflicting deployments for /acme/web"),
        "{text}"
    );
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

/// A halt recorded under `/hosts-halt` (by a host that may not write `/hosts`) halts the
/// cluster as `/hosts` `version` = None does: the plan says the cluster version is `None`.
#[tokio::test]
async fn a_recorded_halt_is_a_halted_cluster() {
    let h = TestHost::fake("fleet-plan-halt").await;
    let tree = "/acme\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /h1\n";
    h.tree(tree, json!("r1")).await;
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("acme.zk");
    std::fs::write(&file, tree).unwrap();
    let before = plan(&h.conn, &["--files", file.to_str().unwrap(), "--json"]).await;
    before.assert_code(0);
    let doc: Value = serde_json::from_str(&before.stdout).unwrap();
    assert_eq!(doc["cluster"], json!("r1"), "{before}");
    h.client
        .create(
            "/hosts-halt",
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let record: zkdeployment::tree::Props = serde_json::from_value(
        json!({"host": "h9", "name": "h9.example.com", "version": "r1", "error": "boom", "time": 1.0}),
    )
    .unwrap();
    zkdeployment::zk::halts::record_halt(&h.client, &record)
        .await
        .unwrap();
    let after = plan(&h.conn, &["--files", file.to_str().unwrap(), "--json"]).await;
    after.assert_code(0);
    let doc: Value = serde_json::from_str(&after.stdout).unwrap();
    assert_eq!(doc["cluster"], Value::Null, "{after}");
}
