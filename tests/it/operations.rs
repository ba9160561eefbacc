//! Operating the fleet: what operators and their tools see of running agents.
//!
//! - `zkdeployment status [--json]` and `zkdeployment resume` on a cluster of three
//!   long-running agents sharing one chroot, with a halt (a failing deploy script), a node lock
//!   held by a kazoo-compatible contender and a waiter, 40-hex revisions as versions (and the
//!   Nagios check of each host at the halt);
//! - failure mail sent by the agent: to a real SMTP listener, deduplicated, harmless when the
//!   server is unreachable, through a `sendmail` stand-in;
//! - the Prometheus textfile (`metrics-file`): a strict parser of the text format, the values
//!   after passes, and a reader that never sees a partial file;
//! - the systemd notify protocol on a test-owned `NOTIFY_SOCKET` (path and abstract forms):
//!   `READY=1`, `STATUS=` per step, `WATCHDOG=1`, `STOPPING=1`;
//! - logs on stderr with levels.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{now, wait_for, wait_for_async, Pm, Spawned, TestHost};
use support::rpm::FakeYum;
use support::smtp::{Mail, SmtpServer};
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};
use zkdeployment::zk::node::ensure_node;
use zkdeployment::zk::{decode, Client};
use zookeeper_client::{Acls, CreateMode};

const LIMIT: Duration = Duration::from_secs(30);

/// A 40-hex revision (what the syncer sets as the cluster version) made from `seed`.
fn rev(seed: &str) -> String {
    seed.repeat(40 / seed.len() + 1)[..40].to_string()
}

/// A tree under `/acme`: one application per `(app, host)`, package `foo` 1.0.
fn apps(entries: &[(&str, &str)]) -> String {
    let mut text = String::new();
    for (app, host) in entries {
        text.push_str(&format!(
            "/{app} : foo\n  version = '1.0'\n  /deploy\n    /{host}\n"
        ));
    }
    text
}

/// The same, as a whole tree (`/acme` at the top).
fn acme(entries: &[(&str, &str)]) -> String {
    let mut text = String::from("/acme\n");
    for line in apps(entries).lines() {
        text.push_str(&format!("  {line}\n"));
    }
    text
}

/// Replaces what is under `/acme` (trimmed; top-level nodes such as `/hosts` are never
/// trimmed), leaving the cluster version alone.
async fn import_acme(client: &Client, entries: &[(&str, &str)]) {
    let root = parse(&acme(entries)).unwrap();
    import_tree(client, &root, "/", Trim::Yes, false)
        .await
        .unwrap();
}

/// `zkdeployment status --json` on `conn`.
async fn status_json(conn: &str) -> Value {
    let run = support::run_async(&["status", "--json", "-z", conn]).await;
    run.assert_ok();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"))
}

/// Polls `status --json` until `check` accepts it.
async fn status_until(conn: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for_async(what, LIMIT, || async {
        let s = status_json(conn).await;
        check(&s).then_some(s)
    })
    .await
}

/// True if `waiters` are `first`, then possibly h3's agent, which waits in the lock's queue
/// when /acme/c is the one node it has left (until it sees the halt).
fn only_h3_after(waiters: &Value, first: &[&str]) -> bool {
    let Some(all) = waiters.as_array() else {
        return false;
    };
    let named: Vec<&str> = all.iter().filter_map(Value::as_str).collect();
    named.len() >= first.len()
        && named[..first.len()] == *first
        && named[first.len()..]
            .iter()
            .all(|w| *w == "h3.example.com (h3)")
}

/// The row of host `id`.
fn row<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == json!(id))
        .unwrap_or_else(|| panic!("no host {id} in {status:#}"))
}

/// Asserts that `value` is an object with (at least) these keys.
#[track_caller]
fn assert_keys(value: &Value, keys: &[&str]) {
    let have: BTreeSet<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    for key in keys {
        assert!(have.contains(key), "no {key:?} in {value:#}");
    }
}

/// A kazoo-compatible contender (`<uuid4hex>__lock__<seq>`, ephemeral sequential) holding
/// `who`; returns its path.
async fn contender(client: &Client, lock: &str, who: &str) -> String {
    ensure_node(client, lock).await.unwrap();
    let prefix = format!("{lock}/{}__lock__", uuid::Uuid::new_v4().simple());
    let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, seq) = client.create(&prefix, who.as_bytes(), &mode).await.unwrap();
    format!("{prefix}{seq}")
}

/// The deploy script of `foo` on `h`, as the agent runs it.
fn foo_script(h: &TestHost) -> String {
    h.root()
        .join("opt/foo/bin/zookeeper-deploy")
        .display()
        .to_string()
}

/// Waits until `h`'s status file says `text` at `version`; on timeout, shows the agent's log.
async fn wait_agent(h: &TestHost, agent: &Spawned, version: &str, text: &str) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let status = h.status();
        let fields: Vec<&str> = status.splitn(4, ' ').collect();
        if fields.len() == 4 && fields[2] == version && fields[3] == text {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "{}: no status {text:?} at {version} after {LIMIT:?} (status: {status:?})\n--- agent ---\n{}",
                h.id,
                agent.output()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop(agent: &mut Spawned) {
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

async fn new_host(conn: &str, id: &str) -> TestHost {
    TestHost::on(conn, id, Pm::Fake(FakeYum::new())).await
}

// ---------------------------------------------------------------------------------------------
// status and resume

#[tokio::test]
async fn status_and_resume_on_a_cluster_of_agents() {
    let conn = support::chroot("ops-status").await;
    let h1 = new_host(&conn, "h1").await;
    let h2 = new_host(&conn, "h2").await;
    let h3 = new_host(&conn, "h3").await;
    let (r1, r2, r3) = (rev("a1b2c3d4e5"), rev("b2c3d4e5f6"), rev("c3d4e5f607"));
    h1.tree(&acme(&[("a", "h1"), ("b", "h2"), ("c", "h3")]), json!(r1))
        .await;
    // Someone else holds the lock of /acme/c (h3's node), and another contender waits.
    let holder = contender(&h1.client, "/agent-locks/acme,c", "someone (x)").await;
    let waiter = contender(&h1.client, "/agent-locks/acme,c", "other (y)").await;

    let mut a1 = h1.spawn("agent", &[], &[]);
    let mut a3 = h3.spawn("agent", &[], &[]);
    h1.wait_status(&r1, &["done"], LIMIT).await;
    wait_for("h3 to find /acme/c busy", LIMIT, || {
        a3.output().contains("is held by someone (x)").then_some(())
    })
    .await;

    // Before the halt: h1 converged, h3 stuck behind the lock, h2 not running yet.
    let s = status_until(&conn, "h1 done and the lock with its waiter", |s| {
        s["hosts"].as_array().map(Vec::len) == Some(2)
            && row(s, "h1")["status"] == json!("done")
            && only_h3_after(&s["locks"][0]["waiters"], &["other (y)"])
    })
    .await;
    assert_keys(&s, &["version", "synced", "halt", "hosts", "locks"]);
    assert_eq!(s["version"], json!(r1));
    assert_eq!(s["synced"], Value::Null);
    assert_eq!(s["halt"], Value::Null);
    let keys = [
        "id",
        "name",
        "role",
        "version",
        "converged",
        "error",
        "status",
    ];
    for h in s["hosts"].as_array().unwrap() {
        assert_keys(h, &keys);
    }
    // The original keys keep their values (new keys may be added: `deployed`, `state`).
    let first = row(&s, "h1");
    let want = json!({"id": "h1", "name": "h1.example.com", "role": null, "version": r1,
                      "converged": true, "error": null, "status": "done"});
    for (key, value) in want.as_object().unwrap() {
        assert_eq!(&first[key], value, "{key} in {first:#}");
    }
    let r = row(&s, "h3");
    assert_eq!(r["name"], json!("h3.example.com"));
    assert_eq!(r["version"], Value::Null);
    assert_eq!(r["converged"], json!(false));
    assert_eq!(r["error"], Value::Null);
    assert!(r["status"].is_string(), "{s:#}");
    let locks = s["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 1, "{s:#}");
    assert_keys(&locks[0], &["path", "holder", "waiters", "age"]);
    assert_eq!(locks[0]["path"], json!("/agent-locks/acme,c"));
    assert_eq!(locks[0]["holder"], json!("someone (x)"));
    let age = locks[0]["age"].as_f64().unwrap();
    assert!((0.0..60.0).contains(&age), "{age}");
    let text = support::run_async(&["status", "-z", &conn]).await;
    text.assert_ok();
    assert!(text.stdout.contains("/agent-locks/acme,c"), "{text}");
    assert!(text.stdout.contains("someone (x)"), "{text}");
    assert!(text.stdout.contains("other (y)"), "{text}");
    assert!(!text.stdout.contains("HALTED"), "{text}");

    // h2's deploy script fails: the cluster is halted.
    let started = now();
    let mut a2 = h2.spawn("agent", &[], &[("ZK_TEST_FAIL", "/acme/b")]);
    h2.wait_status(&r1, &["error"], LIMIT).await;
    let s = status_until(&conn, "h2's error on its node", |s| {
        s["hosts"].as_array().map(Vec::len) == Some(3) && row(s, "h2")["status"] == json!("error")
    })
    .await;
    assert_eq!(s["version"], Value::Null);
    assert_eq!(s["synced"], Value::Null);
    let halt = &s["halt"];
    assert_keys(halt, &["host", "name", "version", "error", "time"]);
    let error = format!("Command failed: {} /acme/b 0", foo_script(&h2));
    assert_eq!(halt["host"], json!("h2"));
    assert_eq!(halt["name"], json!("h2.example.com"));
    assert_eq!(halt["version"], json!(r1));
    assert_eq!(halt["error"], json!(error));
    let time = halt["time"].as_f64().unwrap();
    assert!(time >= started - 1.0 && time <= now() + 1.0, "{time}");
    let ids: Vec<&Value> = s["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["id"])
        .collect();
    assert_eq!(ids, [&json!("h1"), &json!("h2"), &json!("h3")]);
    // Nobody is at the cluster version while it is halted, not even hosts without a version.
    for id in ["h1", "h2", "h3"] {
        assert_eq!(row(&s, id)["converged"], json!(false), "{id}: {s:#}");
    }
    assert_eq!(row(&s, "h1")["version"], json!(r1));
    assert_eq!(row(&s, "h1")["error"], Value::Null);
    let second = row(&s, "h2");
    let want = json!({"id": "h2", "name": "h2.example.com", "role": null, "version": null,
                      "converged": false, "error": error, "status": "error"});
    for (key, value) in want.as_object().unwrap() {
        assert_eq!(&second[key], value, "{key} in {second:#}");
    }
    assert_eq!(second["state"], json!("failed"));
    assert_eq!(s["locks"][0]["holder"], json!("someone (x)"));

    // The terminal view: HALTED, who halted it and why, how to resume; fits 120 columns.
    let text = support::run_async(&["status", "-z", &conn]).await;
    text.assert_ok();
    let out = &text.stdout;
    for line in out.lines() {
        assert!(
            line.chars().count() <= 120,
            "{} chars: {line:?}\n{out}",
            line.len()
        );
    }
    assert!(out.contains("HALTED"), "{out}");
    assert!(out.contains("h2.example.com (h2)"), "{out}");
    assert!(out.contains("Command failed: "), "{out}");
    assert!(out.contains("zkdeployment resume"), "{out}");
    // No synced revision: the hint says which version to give.
    assert!(
        out.contains(&format!("zkdeployment resume --version '\"{r1}\"'")),
        "{out}"
    );
    for id in ["h1", "h2", "h3"] {
        assert!(out.contains(id), "{out}");
    }
    assert!(out.contains("someone (x)"), "{out}");

    // The Nagios check on each host: the halting host is CRITICAL, the others WARNING.
    let monitor = |h: &TestHost| {
        let config = h.config();
        async move { support::run_async(&["monitor", config.to_str().unwrap()]).await }
    };
    let run = monitor(&h2).await;
    run.assert_code(2);
    assert!(
        run.stdout.starts_with(&format!(
            "ZKDEPLOYMENT CRITICAL - Error deploying {r1}: {error} |"
        )),
        "{run}"
    );
    for h in [&h1, &h3] {
        let run = monitor(h).await;
        run.assert_code(1);
        assert!(
            run.stdout.starts_with(&format!(
                "ZKDEPLOYMENT WARNING - Cluster halted by h2.example.com: {error} |"
            )),
            "{run}"
        );
    }

    // resume without a synced revision and without --version: refused, nothing changes.
    let run = support::run_async(&["resume", "-z", &conn]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("no synced revision"), "{run}");
    assert!(run.stderr.contains("--version"), "{run}");
    let hosts = h1.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["host"], json!("h2"));

    // The operator frees the lock (the holder first: the waiter takes it) and fixes the tree.
    h1.client.delete(&holder, None).await.unwrap();
    status_until(&conn, "the waiter holding the lock", |s| {
        s["locks"][0]["holder"] == json!("other (y)")
            && only_h3_after(&s["locks"][0]["waiters"], &[])
            && s["locks"].as_array().map(Vec::len) == Some(1)
    })
    .await;
    h1.client.delete(&waiter, None).await.unwrap();
    import_acme(&h1.client, &[("a", "h1"), ("b2", "h2"), ("c", "h3")]).await;
    assert_eq!(h1.hosts().await["halt"]["host"], json!("h2"));

    let run = support::run_async(&["resume", "--version", &r2, "-z", &conn]).await;
    run.assert_ok();
    assert!(
        run.stdout.contains(&format!("cluster version set to {r2}")),
        "{run}"
    );
    // It says which halt it cleared (one recorded after the operator looked would show here).
    let cleared: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("cleared: "))
        .collect();
    assert_eq!(cleared.len(), 1, "{run}");
    assert!(
        cleared[0].starts_with("cleared: halted ")
            && cleared[0].contains(" ago by h2.example.com (h2) deploying ")
            && cleared[0].ends_with(&format!(": {error}")),
        "{run}"
    );
    let hosts = h1.hosts().await;
    assert_eq!(hosts["version"], json!(r2));
    assert_eq!(hosts.get("halt"), None);
    // Nothing to clear the second time.
    let run = support::run_async(&["resume", "--version", &r2, "-z", &conn]).await;
    run.assert_ok();
    assert!(!run.stdout.contains("cleared: "), "{run}");
    for (h, a) in [(&h1, &a1), (&h2, &a2), (&h3, &a3)] {
        wait_agent(h, a, &r2, "done").await;
    }
    assert_eq!(
        h2.deploy_log("foo"),
        ["foo-1.0-1: /acme/b 0", "foo-1.0-1: /acme/b2 0"]
    );
    assert_eq!(h2.etc("foo"), ["acme,b2.0.deployed", "acme,b2.0.script"]);
    assert_eq!(h3.deploy_log("foo"), ["foo-1.0-1: /acme/c 0"]);
    let s = status_until(&conn, "every host done at r2", |s| {
        s["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["status"] == json!("done") && h["converged"] == json!(true))
    })
    .await;
    assert_eq!(s["version"], json!(r2));
    assert_eq!(s["halt"], Value::Null);
    assert_eq!(s["locks"], json!([]));
    for id in ["h1", "h2", "h3"] {
        assert_eq!(row(&s, id)["error"], Value::Null, "{s:#}");
        assert_eq!(row(&s, id)["version"], json!(r2), "{s:#}");
    }
    let text = support::run_async(&["status", "-z", &conn]).await;
    assert!(!text.stdout.contains("HALTED"), "{text}");
    assert!(!text.stdout.contains("resume"), "{text}");

    // The syncer has imported r3 (`synced`), then some host halted the cluster: plain `resume`
    // deploys the synced revision.
    let mut props = h1.hosts().await;
    props.insert("synced".into(), json!(r3));
    props.insert("version".into(), Value::Null);
    props.insert(
        "halt".into(),
        json!({"host": "h9", "name": "h9.example.com", "version": r2,
               "error": "boom", "time": now()}),
    );
    h1.client
        .set_data("/hosts", &serde_json::to_vec(&props).unwrap(), None)
        .await
        .unwrap();
    let text = support::run_async(&["status", "-z", &conn]).await;
    assert!(text.stdout.contains("HALTED"), "{text}");
    assert!(text.stdout.contains(&r3), "{text}");
    let run = support::run_async(&["resume", "-z", &conn]).await;
    run.assert_ok();
    assert!(
        run.stdout.contains(&format!("cluster version set to {r3}")),
        "{run}"
    );
    let hosts = h1.hosts().await;
    assert_eq!(hosts["version"], json!(r3));
    assert_eq!(hosts["synced"], json!(r3));
    assert_eq!(hosts.get("halt"), None);
    for (h, a) in [(&h1, &a1), (&h2, &a2), (&h3, &a3)] {
        wait_agent(h, a, &r3, "done").await;
    }
    let s = status_until(&conn, "every host done at r3", |s| {
        s["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["converged"] == json!(true) && h["status"] == json!("done"))
    })
    .await;
    assert_eq!(s["synced"], json!(r3));

    // Logs: levels on stderr, an ERROR line for the failure, no terminal colours in a pipe.
    let out = a2.output();
    assert!(
        out.lines()
            .any(|l| l.contains(" ERROR ") && l.contains("FAILED deploying version")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.contains(" INFO ")), "{out}");
    assert!(!out.contains('\x1b'), "{out:?}");

    for a in [&mut a1, &mut a2, &mut a3] {
        stop(a).await;
    }
    let s = status_json(&conn).await;
    assert_eq!(s["hosts"], json!([]), "host nodes go with their agents");
}

#[tokio::test]
async fn status_and_resume_edge_cases() {
    let conn = support::chroot("ops-resume").await;
    let client = support::connect(&conn).await;

    // No /hosts at all.
    let run = support::run_async(&["resume", "--version", "r1", "-z", &conn]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("/hosts does not exist"), "{run}");

    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client
        .create("/hosts", br#"{"version": null}"#, &open)
        .await
        .unwrap();
    let mut s = status_json(&conn).await;
    // The fleet summary (a new key) counts nobody.
    let summary = s.as_object_mut().unwrap().remove("summary").unwrap();
    assert_eq!(summary["hosts"], json!(0));
    // An open cluster (no `sync --auth`) is warned about.
    let warnings = s.as_object_mut().unwrap().remove("warnings").unwrap();
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("/hosts is writable by anyone"),
        "{warnings}"
    );
    assert_eq!(
        s,
        json!({"version": null, "synced": null, "halt": null, "pause": null, "nodes": [], "hosts": [], "locks": [], "semaphores": []})
    );
    let text = support::run_async(&["status", "-z", &conn]).await;
    text.assert_ok();
    assert!(text.stdout.contains("HALTED"), "{text}");
    assert!(
        text.stdout.contains("zkdeployment resume --version"),
        "{text}"
    );

    // `--version null` would leave the cluster halted: refused as a usage error.
    let run = support::run_async(&["resume", "--version", "null", "-z", &conn]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("--version"), "{run}");
    // An empty or blank version is no version to deploy: refused the same way.
    for blank in ["", "  ", "\"\""] {
        let run = support::run_async(&["resume", "--version", blank, "-z", &conn]).await;
        run.assert_code(2);
        assert!(
            run.stderr.contains("--version is empty"),
            "{blank:?}: {run}"
        );
    }
    let (data, _) = client.get_data("/hosts").await.unwrap();
    assert_eq!(decode(&data)["version"], json!(null));
    // Versions are JSON when they parse: 124 is a number, '"124"' a string.
    support::run_async(&["resume", "--version", "124", "-z", &conn])
        .await
        .assert_ok();
    let (data, _) = client.get_data("/hosts").await.unwrap();
    assert_eq!(decode(&data)["version"], json!(124));
    let run = support::run_async(&["resume", "--version", "\"124\"", "-z", &conn]).await;
    run.assert_ok();
    let (data, _) = client.get_data("/hosts").await.unwrap();
    assert_eq!(decode(&data)["version"], json!("124"));

    // Role locks (the original's `lr-` recipe) and the syncer's lock are listed too.
    client.create("/role-locks", b"", &open).await.unwrap();
    client.create("/role-locks/web", b"", &open).await.unwrap();
    let eph_seq = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    for who in ["w1", "w2"] {
        let data = json!({"requestor": who, "hostname": format!("{who}.example.com")});
        client
            .create(
                "/role-locks/web/lr-",
                &serde_json::to_vec(&data).unwrap(),
                &eph_seq,
            )
            .await
            .unwrap();
    }
    contender(&client, "/hosts-lock", "syncer (cron)").await;
    // An empty lock node is not listed.
    ensure_node(&client, "/agent-locks/acme,idle")
        .await
        .unwrap();
    let s = status_json(&conn).await;
    let locks = s["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2, "{s:#}");
    assert_eq!(locks[0]["path"], json!("/role-locks/web"));
    assert_eq!(locks[0]["holder"], json!("w1.example.com (w1)"));
    assert_eq!(locks[0]["waiters"], json!(["w2.example.com (w2)"]));
    assert_eq!(locks[1]["path"], json!("/hosts-lock"));
    assert_eq!(locks[1]["holder"], json!("syncer (cron)"));
    assert_eq!(locks[1]["waiters"], json!([]));
    let text = support::run_async(&["status", "-z", &conn]).await;
    assert!(text.stdout.contains("w2.example.com (w2)"), "{text}");
    assert!(!text.stdout.contains("acme,idle"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Failure mail

/// Config lines for mail through `smtp`.
fn mail_config(smtp: &str) -> String {
    format!("mail-to = ops@example.com\nsmtp = {smtp}\n")
}

/// The messages received, parsed.
fn mails(server: &SmtpServer) -> Vec<Mail> {
    server
        .messages()
        .iter()
        .map(|m| Mail::parse(&m.data))
        .collect()
}

/// Lets the cluster deploy `version` again (as `zkdeployment resume --version` would).
async fn resume(h: &TestHost, version: &str) {
    let arg = json!(version).to_string();
    support::run_async(&["resume", "--version", &arg, "-z", &h.conn])
        .await
        .assert_ok();
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn failure_mail_is_sent_once_per_failure() {
    let server = SmtpServer::start();
    let mut h = TestHost::fake("ops-mail").await;
    h.extra = mail_config(&server.url());
    let (r1, r2) = (rev("d00d"), rev("f00d"));
    h.tree(&acme(&[("a", "h1"), ("b", "h1")]), json!(r1)).await;
    let fail = [("ZK_TEST_FAIL", "/acme/b")];
    let error = format!("Command failed: {} /acme/b 0", foo_script(&h));

    let run = h.deploy_env(&[], &fail).await;
    run.assert_code(1);
    assert!(run.stderr.contains(&error), "{run}");
    assert!(
        run.stderr.contains("failure mail sent to ops@example.com"),
        "{run}"
    );
    let messages = server.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].to, ["ops@example.com"]);
    assert_eq!(messages[0].from, "zkdeployment@h1.example.com");
    let mail = Mail::parse(&messages[0].data);
    assert_eq!(
        mail.header("Subject"),
        Some(format!("zkdeployment: h1.example.com (h1) failed deploying {r1}").as_str())
    );
    let body = &mail.body;
    assert!(body.contains("h1.example.com (h1)"), "{body}");
    assert!(body.contains(&format!("deploying version {r1}")), "{body}");
    assert!(body.contains(&error), "{body}");
    assert!(body.contains("Step: deploy /acme/b 0 (foo 1.0)"), "{body}");
    assert!(
        body.contains(&format!("Command: {} /acme/b 0", foo_script(&h))),
        "{body}"
    );
    assert!(
        body.contains("deploying /acme/b failed: the test asked for it"),
        "{body}"
    );
    assert!(body.contains("second line of output"), "{body}");
    assert!(body.contains("\n    zkdeployment resume\n"), "{body}");
    assert!(
        body.contains(&format!("zkdeployment resume --version '\"{r1}\"'")),
        "{body}"
    );

    // The same failure again (resumed at the same version): not mailed twice.
    resume(&h, &r1).await;
    let again = h.deploy_env(&[], &fail).await;
    again.assert_code(1);
    assert!(again.stderr.contains(&error), "{again}");
    assert_eq!(server.messages().len(), 1);

    // An unreachable server changes nothing about the pass: same exit, error and status.
    let port = closed_port();
    h.extra = mail_config(&format!("smtp://127.0.0.1:{port}"));
    resume(&h, &r2).await;
    let unreachable = h.deploy_env(&[], &fail).await;
    unreachable.assert_code(1);
    assert!(unreachable.stderr.contains(&error), "{unreachable}");
    assert!(
        unreachable
            .stderr
            .lines()
            .any(|l| l.contains(" WARN ") && l.contains("failure mail to ops@example.com")),
        "{unreachable}"
    );
    assert_eq!(h.status_text(), "error");
    assert_eq!(h.hosts().await["halt"]["error"], json!(error));
    assert_eq!(h.report()["outcome"], json!("error"));
    // Not remembered as mailed: once the server is back, the same failure is mailed.
    h.extra = mail_config(&server.url());
    resume(&h, &r2).await;
    h.deploy_env(&[], &fail).await.assert_code(1);
    let all = mails(&server);
    assert_eq!(all.len(), 2);
    assert!(all[1].body.contains(&format!("deploying version {r2}")));

    // After a successful pass, the same failure is news again.
    resume(&h, &r2).await;
    h.deploy(&[]).await.assert_ok();
    h.deploy_env(&["--force"], &fail).await.assert_code(1);
    assert_eq!(server.messages().len(), 3, "mailed again after a success");

    // A halt that is not a step's failure (an in-flight record left by a dead holder) does not
    // carry the command and output of the step run before it.
    resume(&h, &r2).await;
    let record = json!({"in-flight": {"host": "h7", "name": "h7.example.com", "path": "/acme/b",
                        "n": 0, "version": r1, "pid": 1, "since": 1.0}});
    ensure_node(&h.client, "/agent-locks/acme,b").await.unwrap();
    h.client
        .set_data(
            "/agent-locks/acme,b",
            &serde_json::to_vec(&record).unwrap(),
            None,
        )
        .await
        .unwrap();
    let run = h.deploy(&["--force"]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("h7.example.com (h7) died deploying"),
        "{run}"
    );
    let all = mails(&server);
    assert_eq!(all.len(), 4);
    let body = &all[3].body;
    assert!(
        body.contains("h7.example.com (h7) died deploying /acme/b 0"),
        "{body}"
    );
    assert!(!body.contains("/acme/a"), "another step's command:\n{body}");
    assert!(!body.contains("Command:"), "{body}");
}

#[tokio::test]
async fn failure_mail_goes_through_sendmail_without_smtp() {
    let mut h = TestHost::fake("ops-sendmail").await;
    let args = h.scratch("sendmail.args");
    let stdin = h.scratch("sendmail.stdin");
    let script = h.scratch("sendmail");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\ncat > '{}.tmp' && mv '{}.tmp' '{}'\n",
            args.display(),
            stdin.display(),
            stdin.display(),
            stdin.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    h.extra = format!(
        "mail-to = ops@example.com, dev@example.org\nsendmail = {}\n",
        script.display()
    );
    let r1 = rev("5e1d");
    h.tree(&acme(&[("b", "h1")]), json!(r1)).await;
    h.deploy_env(&[], &[("ZK_TEST_FAIL", "/acme/b")])
        .await
        .assert_code(1);
    let argv = support::agent::lines(&args);
    assert_eq!(
        argv,
        [
            "-i",
            "-f",
            "zkdeployment@h1.example.com",
            "--",
            "ops@example.com",
            "dev@example.org"
        ]
    );
    let mail = Mail::parse(&support::read(&stdin));
    assert_eq!(
        mail.header("Subject"),
        Some(format!("zkdeployment: h1.example.com (h1) failed deploying {r1}").as_str())
    );
    assert!(
        mail.body
            .contains(&format!("Command failed: {} /acme/b 0", foo_script(&h))),
        "{}",
        mail.body
    );
    assert!(mail.body.contains("second line of output"), "{}", mail.body);
}

// ---------------------------------------------------------------------------------------------
// Metrics

/// One sample of the text format.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed textfile: the TYPE of each metric, its HELP, and the samples.
#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    /// The value of `name{labels}`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?} in {self:#?}"))
            .value
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// A sample value as Prometheus reads it (Go's ParseFloat): no `inf`/`infinity` spellings.
fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        t if t.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) && !t.is_empty() => {
            t.parse().map_err(|e| format!("bad value {t:?}: {e}"))
        }
        t => Err(format!("bad value {t:?}")),
    }
}

/// `{a="x",b="y"}` (after the name) → labels and the rest of the line.
fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text.strip_prefix('{').ok_or("no {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !valid_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err("label value not quoted".into());
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                '\n' => return Err("newline in a label value".into()),
                c => value.push(c),
            }
        }
        let end = end.ok_or("unterminated label value")?;
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err(format!("junk after a label: {rest:?}"));
        }
    }
}

/// A strict parser of the Prometheus text format as node_exporter's textfile collector needs
/// it: HELP and TYPE lines before their samples, each metric's samples together, every sample
/// typed, values Go floats, no timestamps, no duplicate series, a final newline.
fn parse_prom(text: &str) -> Result<Exposition, String> {
    if text.is_empty() {
        return Err("empty file".into());
    }
    if !text.ends_with('\n') {
        return Err("no final newline".into());
    }
    let mut out = Exposition::default();
    let mut seen_series = BTreeSet::new();
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let at = |m: String| format!("line {}: {m}: {line:?}", i + 1);
        if line.is_empty() {
            return Err(at("empty line".into()));
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            let kind = words.next().unwrap_or("");
            if kind != "HELP" && kind != "TYPE" {
                continue;
            }
            let name = words.next().ok_or_else(|| at("no metric name".into()))?;
            if !valid_metric_name(name) {
                return Err(at("bad metric name".into()));
            }
            let rest = words.next().unwrap_or("").to_string();
            if finished.contains(name) || out.samples.iter().any(|s| s.name == name) {
                return Err(at(format!("{kind} after the samples of {name}")));
            }
            if kind == "TYPE" {
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&rest.as_str())
                {
                    return Err(at(format!("bad type {rest:?}")));
                }
                if out.types.insert(name.to_string(), rest).is_some() {
                    return Err(at("second TYPE".into()));
                }
            } else if out.helps.insert(name.to_string(), rest).is_some() {
                return Err(at("second HELP".into()));
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(at("bad metric name".into()));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(at)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before the value".into()))?;
        let fields: Vec<&str> = rest.split(' ').collect();
        if fields.len() != 1 {
            return Err(at("a timestamp or junk after the value".into()));
        }
        let value = parse_value(fields[0]).map_err(at)?;
        if !out.types.contains_key(name) {
            return Err(at(format!("{name} has no TYPE")));
        }
        if current.as_deref() != Some(name) {
            if finished.contains(name) {
                return Err(at(format!("samples of {name} not together")));
            }
            if let Some(prev) = current.replace(name.to_string()) {
                finished.insert(prev);
            }
        }
        if !seen_series.insert(format!("{name}{labels:?}")) {
            return Err(at("duplicate series".into()));
        }
        out.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(out)
}

#[test]
fn the_prometheus_parser_is_strict() {
    let good = "# HELP x_total Things.\n# TYPE x_total counter\nx_total{a=\"b\\\"c\"} 1.5\nx_total{a=\"d\"} NaN\n# TYPE y gauge\ny -Inf\n";
    let parsed = parse_prom(good).unwrap();
    assert_eq!(parsed.get("x_total", &[("a", "b\"c")]), 1.5);
    assert_eq!(parsed.types["y"], "gauge");
    for bad in [
        "",
        "# TYPE y gauge\ny 1",
        "y 1\n",
        "# TYPE y gauge\ny 1 1700000000\n",
        "# TYPE y gauge\ny inf\n",
        "# TYPE y gauge\ny 1\ny 2\n",
        "# TYPE y gauge\ny{a=b} 1\n",
        "# TYPE y gauge\n# TYPE z gauge\ny 1\nz 1\ny{a=\"1\"} 2\n",
        "# TYPE y gauge\ny 1\n# HELP y late\n",
        "# TYPE y gauge\n\ny 1\n",
        "# TYPE y nonsense\ny 1\n",
    ] {
        assert!(parse_prom(bad).is_err(), "accepted {bad:?}");
    }
}

/// Reads and parses the metrics file, if it exists and parses.
fn read_metrics(path: &Path) -> Option<Exposition> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(parse_prom(&text).unwrap_or_else(|e| panic!("{e}\n{text}")))
}

async fn wait_metrics(path: &Path, what: &str, check: impl Fn(&Exposition) -> bool) -> Exposition {
    wait_for(what, LIMIT, || read_metrics(path).filter(|m| check(m))).await
}

const DONE: &[(&str, &str)] = &[("result", "done")];
const ERROR: &[(&str, &str)] = &[("result", "error")];
const ABANDONED: &[(&str, &str)] = &[("result", "abandoned")];

#[tokio::test]
async fn metrics_follow_the_passes() {
    let mut h = TestHost::fake("ops-metrics").await;
    let path = h.scratch("zkdeployment.prom");
    h.extra = format!("metrics-file = {}\n", path.display());
    let (r1, r2, r3) = (rev("0ab1"), rev("0ab2"), rev("0ab3"));
    h.tree(&acme(&[("a", "h1")]), json!(r1)).await;
    let started = now();
    let mut agent = h.spawn("agent", &[], &[("ZK_TEST_FAIL", "/acme/bad")]);
    h.wait_status(&r1, &["done"], LIMIT).await;
    let m = wait_metrics(&path, "one pass done", |m| {
        m.get("zkdeployment_passes_total", DONE) == 1.0
    })
    .await;
    for name in [
        "zkdeployment_converged",
        "zkdeployment_cluster_halted",
        "zkdeployment_last_pass_timestamp_seconds",
        "zkdeployment_last_success_timestamp_seconds",
        "zkdeployment_pass_duration_seconds",
        "zkdeployment_passes_total",
        "zkdeployment_lock_wait_seconds_total",
    ] {
        assert!(m.types.contains_key(name), "no {name}: {m:#?}");
        assert!(m.helps.contains_key(name), "no HELP for {name}");
    }
    assert_eq!(m.types["zkdeployment_passes_total"], "counter");
    assert_eq!(m.types["zkdeployment_converged"], "gauge");
    assert_eq!(m.get("zkdeployment_converged", &[]), 1.0);
    assert_eq!(m.get("zkdeployment_cluster_halted", &[]), 0.0);
    let last_pass = m.get("zkdeployment_last_pass_timestamp_seconds", &[]);
    assert!(last_pass >= started && last_pass <= now(), "{last_pass}");
    assert_eq!(
        m.get("zkdeployment_last_success_timestamp_seconds", &[]),
        last_pass
    );
    let duration = m.get("zkdeployment_pass_duration_seconds", &[]);
    assert!(duration > 0.0 && duration < 30.0, "{duration}");
    assert_eq!(m.get("zkdeployment_passes_total", ERROR), 0.0);
    assert_eq!(m.get("zkdeployment_passes_total", ABANDONED), 0.0);
    assert_eq!(m.get("zkdeployment_lock_wait_seconds_total", &[]), 0.0);

    // A node lock held by someone else for a while: the wait is counted.
    let holder = contender(&h.client, "/agent-locks/acme,b", "someone (x)").await;
    h.tree(&acme(&[("a", "h1"), ("b", "h1")]), json!(r2)).await;
    wait_for("the agent to find /acme/b busy", LIMIT, || {
        agent
            .output()
            .contains("is held by someone (x)")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    h.client.delete(&holder, None).await.unwrap();
    h.wait_status(&r2, &["done"], LIMIT).await;
    let m = wait_metrics(&path, "two passes done", |m| {
        m.get("zkdeployment_passes_total", DONE) == 2.0
    })
    .await;
    let waited = m.get("zkdeployment_lock_wait_seconds_total", &[]);
    assert!((0.5..30.0).contains(&waited), "{waited}");
    assert_eq!(m.get("zkdeployment_converged", &[]), 1.0);

    // A failure: halted, not converged, the last success is older than the last pass.
    h.tree(&acme(&[("a", "h1"), ("b", "h1"), ("bad", "h1")]), json!(r3))
        .await;
    h.wait_status(&r3, &["error"], LIMIT).await;
    let m = wait_metrics(&path, "a failed pass", |m| {
        m.get("zkdeployment_passes_total", ERROR) == 1.0
    })
    .await;
    assert_eq!(m.get("zkdeployment_cluster_halted", &[]), 1.0);
    assert_eq!(m.get("zkdeployment_converged", &[]), 0.0);
    assert_eq!(m.get("zkdeployment_passes_total", DONE), 2.0);
    assert!(
        m.get("zkdeployment_last_success_timestamp_seconds", &[])
            < m.get("zkdeployment_last_pass_timestamp_seconds", &[])
    );
    stop(&mut agent).await;
    // No temporary files are left beside it (node_exporter reads the whole directory).
    let names: Vec<String> = std::fs::read_dir(h.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("prom"))
        .collect();
    assert_eq!(names, ["zkdeployment.prom"]);
}

#[tokio::test]
async fn a_reader_never_sees_a_partial_metrics_file() {
    let mut h = TestHost::fake("ops-metrics-atomic").await;
    let path = h.scratch("zkdeployment.prom");
    h.extra = format!("metrics-file = {}\n", path.display());
    h.tree(&acme(&[("a", "h1"), ("b", "h1")]), json!("v0"))
        .await;
    let mut agent = h.spawn("agent", &[], &[]);
    h.wait_status("v0", &["done"], LIMIT).await;

    let stop_reading = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (stop_reading, reads, path) = (stop_reading.clone(), reads.clone(), path.clone());
        std::thread::spawn(move || {
            let mut distinct = BTreeSet::new();
            while !stop_reading.load(Ordering::Relaxed) {
                let text = std::fs::read_to_string(&path).expect("the file stays in place");
                if let Err(e) = parse_prom(&text) {
                    return Err(format!("{e}\n{text:?}"));
                }
                reads.fetch_add(1, Ordering::Relaxed);
                distinct.insert(text);
            }
            Ok(distinct.len())
        })
    };
    for i in 1..=12 {
        let version = format!("v{i}");
        h.set_version(json!(version)).await;
        h.wait_status(&version, &["done"], LIMIT).await;
    }
    // At least a few thousand reads.
    wait_for("enough reads", LIMIT, || {
        (reads.load(Ordering::Relaxed) >= 3000).then_some(())
    })
    .await;
    stop_reading.store(true, Ordering::Relaxed);
    let distinct = reader.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert!(distinct >= 12, "the file changed only {distinct} times");
    let m = read_metrics(&path).unwrap();
    assert!(m.get("zkdeployment_passes_total", DONE) >= 12.0);
    stop(&mut agent).await;
}

// ---------------------------------------------------------------------------------------------
// systemd notify

/// A notify socket owned by the test, collecting every datagram (also used by
/// `agent_startup_wait`).
pub(crate) struct NotifySocket {
    messages: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NotifySocket {
    pub(crate) fn start(sock: UnixDatagram) -> NotifySocket {
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (messages.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    let text = String::from_utf8(buf[..n].to_vec()).expect("UTF-8 message");
                    m.lock().unwrap().push(text);
                }
            }
        });
        NotifySocket {
            messages,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }

    pub(crate) fn position(&self, message: &str) -> Option<usize> {
        self.messages().iter().position(|m| m == message)
    }

    pub(crate) async fn wait(&self, message: &str) -> usize {
        wait_for(&format!("{message:?} on the notify socket"), LIMIT, || {
            self.position(message)
        })
        .await
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[tokio::test]
async fn systemd_notify_ready_status_watchdog_stopping() {
    let h = TestHost::fake("ops-notify").await;
    let socket_path = h.scratch("notify.sock");
    let notify = NotifySocket::start(UnixDatagram::bind(&socket_path).unwrap());
    h.tree(&acme(&[("a", "h1")]), json!("r1")).await;
    let socket = socket_path.display().to_string();
    let mut agent = h.spawn(
        "agent",
        &[],
        &[
            ("NOTIFY_SOCKET", socket.as_str()),
            ("WATCHDOG_USEC", "400000"),
            ("ZK_TEST_SLEEP", "1"),
        ],
    );
    let ready = notify.wait("READY=1").await;
    let done = notify.wait("STATUS=done").await;
    let messages = notify.messages();
    let deploying = notify.position("STATUS=deploying").unwrap();
    let step = messages
        .iter()
        .position(|m| m.starts_with("STATUS=deploy /acme/a 0 (foo 1.0"))
        .unwrap_or_else(|| panic!("no deploy step status: {messages:#?}"));
    assert!(
        ready < deploying && deploying < step && step < done,
        "{messages:#?}"
    );
    assert_eq!(
        messages.iter().filter(|m| *m == "READY=1").count(),
        1,
        "{messages:#?}"
    );
    // Keep-alives every 200 ms, also while the (silent) deploy script runs.
    let during_step = messages[step..done]
        .iter()
        .filter(|m| *m == "WATCHDOG=1")
        .count();
    assert!(during_step >= 3, "{messages:#?}");
    // And while idle.
    let before = notify.messages().len();
    wait_for("keep-alives while idle", LIMIT, || {
        (notify.messages()[before..]
            .iter()
            .filter(|m| *m == "WATCHDOG=1")
            .count()
            >= 3)
            .then_some(())
    })
    .await;
    // A halted cluster: systemd's status says why nothing happens.
    h.set_version(Value::Null).await;
    notify
        .wait("STATUS=not deploying: the cluster is halted")
        .await;
    for m in notify.messages() {
        assert!(!m.contains('\n'), "{m:?}");
    }
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    let stopping = notify.position("STOPPING=1").expect("STOPPING=1");
    assert!(stopping > done);
    assert_eq!(
        notify
            .messages()
            .iter()
            .filter(|m| *m == "STOPPING=1")
            .count(),
        1
    );
}

#[tokio::test]
async fn systemd_notify_abstract_socket_and_foreign_watchdog_pid() {
    let h = TestHost::fake("ops-notify-abstract").await;
    use std::os::linux::net::SocketAddrExt;
    let name = format!("zkd-test-{}", uuid::Uuid::new_v4().simple());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let notify = NotifySocket::start(UnixDatagram::bind_addr(&addr).unwrap());
    h.tree(&acme(&[("a", "h1")]), json!("r1")).await;
    let socket = format!("@{name}");
    // The watchdog is meant for another process: no keep-alives from this one.
    let mut agent = h.spawn(
        "agent",
        &[],
        &[
            ("NOTIFY_SOCKET", socket.as_str()),
            ("WATCHDOG_USEC", "200000"),
            ("WATCHDOG_PID", "1"),
        ],
    );
    notify.wait("READY=1").await;
    notify.wait("STATUS=done").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    notify.wait("STOPPING=1").await;
    let messages = notify.messages();
    assert!(!messages.iter().any(|m| m == "WATCHDOG=1"), "{messages:#?}");
    assert!(
        messages.iter().any(|m| m == "STATUS=deploying"),
        "{messages:#?}"
    );
}
