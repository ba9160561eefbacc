//! The Nagios check: a golden test for every check of docs/operations.md against a real
//! ZooKeeper, plus a stopped ZooKeeper, a garbage status file, and usage errors.

use crate::support;

use serde_json::{json, Value};
use support::{Run, ZkServer};
use zkdeployment::agent::status::format_status;
use zkdeployment::files::now;
use zookeeper_client::{Acls, Client, CreateMode};

struct Mon {
    conn: String,
    client: Client,
    dir: tempfile::TempDir,
}

impl Mon {
    async fn new(label: &str) -> Mon {
        let conn = support::chroot(label).await;
        let client = support::connect(&conn).await;
        let dir = tempfile::tempdir().unwrap();
        let cfg = format!(
            "[zkdeployment]\nhost-id = h1\nhost-name = h1.example.com\nrun-directory = {}\nzookeeper = {conn}\n",
            dir.path().join("run").display()
        );
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        std::fs::write(dir.path().join("agent.cfg"), cfg).unwrap();
        Mon { conn, client, dir }
    }

    fn status(&self, age: f64, version: &Value, status: &str) {
        let line = format_status(now() - age, 4242, version, status);
        std::fs::write(self.dir.path().join("run/status"), line).unwrap();
    }

    async fn cluster(&self, props: Value) {
        let data = serde_json::to_vec(&props).unwrap();
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        if self.client.create("/hosts", &data, &open).await.is_err() {
            self.client.set_data("/hosts", &data, None).await.unwrap();
        }
    }

    async fn host(&self, props: Value) {
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        self.client
            .create("/hosts/h1", &serde_json::to_vec(&props).unwrap(), &eph)
            .await
            .unwrap();
    }

    async fn check(&self, extra: &[&str]) -> Run {
        let cfg = self.dir.path().join("agent.cfg");
        let mut args = vec!["monitor", cfg.to_str().unwrap()];
        args.extend_from_slice(extra);
        support::run_async(&args).await
    }
}

fn expect(run: &Run, code: i32, line: &str) {
    assert_eq!(run.code, code, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    let got = run.stdout.trim_end();
    let (text, perf) = got
        .split_once(" | ")
        .unwrap_or_else(|| panic!("no perfdata: {got}"));
    assert_eq!(text, line, "{run:?}");
    assert!(
        regex::Regex::new(r"^age=\d+s;\d+;\d+;0$")
            .unwrap()
            .is_match(perf),
        "{perf}"
    );
}

#[tokio::test]
async fn ok_when_converged() {
    let m = Mon::new("mon-ok").await;
    m.cluster(json!({"version": "abc"})).await;
    m.host(json!({"name": "h1.example.com", "version": "abc"}))
        .await;
    // 5.5 s: the status file keeps the time to 1/100 s, rounded (5.0 could read as 4.996).
    m.status(5.5, &json!("abc"), "done");
    let run = m.check(&[]).await;
    expect(&run, 0, "ZKDEPLOYMENT OK - abc");
    assert!(run.stdout.contains("| age=5s;200;600;0"), "{}", run.stdout);
    // Integer versions compare as the original did, through str().
    m.cluster(json!({"version": 21})).await;
    m.client
        .set_data("/hosts/h1", br#"{"version": 21}"#, None)
        .await
        .unwrap();
    m.status(1.0, &json!(21), "done");
    expect(
        &m.check(&["-w", "10", "-e", "20"]).await,
        0,
        "ZKDEPLOYMENT OK - 21",
    );
}

#[tokio::test]
async fn critical_when_not_registered() {
    let m = Mon::new("mon-unreg").await;
    m.cluster(json!({"version": "abc"})).await;
    m.status(1.0, &json!("abc"), "done");
    expect(
        &m.check(&[]).await,
        2,
        "ZKDEPLOYMENT CRITICAL - Host not registered",
    );
}

#[tokio::test]
async fn critical_on_local_error_even_when_halted() {
    let m = Mon::new("mon-error").await;
    m.cluster(json!({"version": null, "halt": {"host": "h1", "name": "h1.example.com", "version": "v2", "error": "Command failed: x", "time": 1.0}})).await;
    m.host(json!({"version": "v1", "error": "Command failed: x"}))
        .await;
    m.status(3.0, &json!("v2"), "error");
    expect(
        &m.check(&[]).await,
        2,
        "ZKDEPLOYMENT CRITICAL - Error deploying v2: Command failed: x",
    );
}

#[tokio::test]
async fn halted_is_critical_for_the_halting_host_and_a_warning_for_others() {
    let m = Mon::new("mon-halted").await;
    m.cluster(json!({"version": "v1"})).await;
    m.host(json!({"version": "v1"})).await;
    m.status(3.0, &json!("v1"), "done");
    m.cluster(json!({"version": null, "halt": {"host": "h1", "name": "h1.example.com", "version": "v2", "error": "boom", "time": 1.0}})).await;
    expect(
        &m.check(&[]).await,
        2,
        "ZKDEPLOYMENT CRITICAL - Cluster halted by h1.example.com: boom",
    );
    m.cluster(json!({"version": null, "halt": {"host": "h9", "name": "h9.example.com", "version": "v2", "error": "boom", "time": 1.0}})).await;
    expect(
        &m.check(&[]).await,
        1,
        "ZKDEPLOYMENT WARNING - Cluster halted by h9.example.com: boom",
    );
    m.cluster(json!({"version": null})).await;
    expect(
        &m.check(&[]).await,
        1,
        "ZKDEPLOYMENT WARNING - Cluster version is None",
    );
}

#[tokio::test]
async fn paused_is_ok() {
    let m = Mon::new("mon-paused").await;
    m.cluster(json!({"version": false})).await;
    m.host(json!({"version": "v1"})).await;
    m.status(1.0, &json!("v1"), "done");
    expect(
        &m.check(&[]).await,
        0,
        "ZKDEPLOYMENT OK - Deployments paused",
    );
}

#[tokio::test]
async fn a_blocked_host_is_a_warning_for_a_node_halt_and_ok_for_a_node_pause() {
    use zkdeployment::agent::budget::{record_node_halt, FailureRecord};
    use zkdeployment::agent::status::blocked_status;
    let m = Mon::new("mon-blocked").await;
    m.cluster(json!({"version": "v2"})).await;
    m.host(json!({"name": "h1.example.com", "version": "v1"}))
        .await;
    // A hand-written status: the pass left two nodes undone.
    m.status(
        3.0,
        &json!("v2"),
        &blocked_status(&["/a/one", "/a/two apps"]),
    );
    // Neither is halted or paused any more (resumed since): judged by its age.
    expect(
        &m.check(&[]).await,
        0,
        "ZKDEPLOYMENT OK - blocked /a/one /a/two%20apps",
    );
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    m.client.create("/node-pauses", b"", &open).await.unwrap();
    m.client
        .create("/node-pauses/a,two apps", br#"{"user": "ann"}"#, &open)
        .await
        .unwrap();
    expect(
        &m.check(&[]).await,
        0,
        "ZKDEPLOYMENT OK - Deployment of /a/two apps paused",
    );
    let halt = FailureRecord {
        host: "h7".into(),
        name: "h7.example.com".into(),
        n: 0,
        version: json!("v2"),
        error: "deploy script failed".into(),
        time: now(),
    };
    assert!(record_node_halt(&m.client, "/a/two apps", &halt)
        .await
        .unwrap());
    expect(
        &m.check(&[]).await,
        1,
        "ZKDEPLOYMENT WARNING - Deployment of /a/two apps halted by h7.example.com: deploy script failed",
    );
    // Checked after the cluster halt and pause.
    m.cluster(json!({"version": false})).await;
    expect(
        &m.check(&[]).await,
        0,
        "ZKDEPLOYMENT OK - Deployments paused",
    );
    m.cluster(json!({"version": null, "halt": {"host": "h9", "name": "h9.example.com", "version": "v2", "error": "boom", "time": 1.0}})).await;
    expect(
        &m.check(&[]).await,
        1,
        "ZKDEPLOYMENT WARNING - Cluster halted by h9.example.com: boom",
    );
}

#[tokio::test]
async fn done_with_mismatches_is_critical() {
    let m = Mon::new("mon-mismatch").await;
    m.cluster(json!({"version": "v2"})).await;
    m.host(json!({"name": "h1.example.com"})).await;
    m.status(1.0, &json!("v1"), "done");
    expect(
        &m.check(&[]).await,
        2,
        "ZKDEPLOYMENT CRITICAL - Version mismatch (status: v1, cluster: v2)",
    );
    m.status(1.0, &json!("v2"), "done");
    expect(
        &m.check(&[]).await,
        2,
        "ZKDEPLOYMENT CRITICAL - No version information for host",
    );
    m.client
        .set_data("/hosts/h1", br#"{"version": "v0"}"#, None)
        .await
        .unwrap();
    expect(
        &m.check(&[]).await,
        2,
        "ZKDEPLOYMENT CRITICAL - Version mismatch (status: v2, zk: v0)",
    );
}

#[tokio::test]
async fn a_step_in_progress_is_ok_then_warning_then_critical_by_age() {
    let m = Mon::new("mon-age").await;
    m.cluster(json!({"version": "v2"})).await;
    m.host(json!({"version": "v1"})).await;
    m.status(5.0, &json!("v2"), "deploying /a 0 (foo 1.0)");
    expect(
        &m.check(&[]).await,
        0,
        "ZKDEPLOYMENT OK - deploying /a 0 (foo 1.0)",
    );
    let (run, ages) = m.check_aged(250, "deploying /a 0 (foo 1.0)", &[]).await;
    expect_any(&run, 1, ages, |age| {
        format!(
            "ZKDEPLOYMENT WARNING - Too long deploying v2 (deploying /a 0 (foo 1.0); {age} > 200)"
        )
    });
    let (run, ages) = m.check_aged(700, "installing foo", &[]).await;
    expect_any(&run, 2, ages, |age| {
        format!("ZKDEPLOYMENT CRITICAL - Too long deploying v2 (installing foo; {age} > 600)")
    });
    let (run, ages) = m
        .check_aged(50, "installing foo", &["-w", "10", "-e", "100"])
        .await;
    expect_any(&run, 1, ages, |age| {
        format!("ZKDEPLOYMENT WARNING - Too long deploying v2 (installing foo; {age} > 10)")
    });
}

impl Mon {
    /// Writes a status line of version v2 `age` seconds old and runs the check. The age the
    /// check reports lies between `age` and `age` plus the seconds the check took: the status
    /// file keeps its time to 0.01 s, so the line is written 0.01 s older (never rounded to
    /// under `age`), and the check reads the clock some time after the line was written.
    async fn check_aged(
        &self,
        age: u64,
        status: &str,
        args: &[&str],
    ) -> (Run, std::ops::RangeInclusive<u64>) {
        let started = std::time::Instant::now();
        self.status(age as f64 + 0.01, &json!("v2"), status);
        let run = self.check(args).await;
        let took = started.elapsed().as_secs_f64() + 0.02;
        (run, age..=age + took.floor() as u64)
    }
}

/// [`expect`] where the line is `line(age)` for one of `ages`.
fn expect_any(
    run: &Run,
    code: i32,
    ages: std::ops::RangeInclusive<u64>,
    line: impl Fn(u64) -> String,
) {
    let got = run.stdout.trim_end();
    let text = got.split_once(" | ").map_or(got, |(text, _)| text);
    let age = ages
        .clone()
        .find(|age| line(*age) == text)
        .unwrap_or(*ages.start());
    expect(run, code, &line(age));
}

#[tokio::test]
async fn unknown_on_garbage_status_missing_status_and_bad_config() {
    let m = Mon::new("mon-garbage").await;
    m.cluster(json!({"version": "v1"})).await;
    m.host(json!({"version": "v1"})).await;
    let run = m.check(&[]).await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stdout
            .starts_with("ZKDEPLOYMENT UNKNOWN - cannot read the status file"),
        "{run:?}"
    );
    std::fs::write(m.dir.path().join("run/status"), "\u{0}garbage here").unwrap();
    let run = m.check(&[]).await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stdout.starts_with("ZKDEPLOYMENT UNKNOWN - ") && run.stdout.contains("malformed"),
        "{run:?}"
    );
    let run = support::run_async(&["monitor", "/nonexistent/agent.cfg"]).await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stdout.starts_with(
            "ZKDEPLOYMENT UNKNOWN - cannot read the configuration: /nonexistent/agent.cfg"
        ),
        "{run:?}"
    );
    let run = support::run_async(&["monitor"]).await;
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stdout.starts_with("ZKDEPLOYMENT UNKNOWN - usage error"),
        "{run:?}"
    );
    let run = support::run_async(&["monitor", "--help"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let _ = &m.conn;
}

#[tokio::test]
async fn unknown_within_ten_seconds_when_zookeeper_is_down() {
    let mut server = ZkServer::start();
    let conn = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    std::fs::write(
        dir.path().join("run/status"),
        format_status(now(), 1, &json!("v1"), "done"),
    )
    .unwrap();
    let cfg = dir.path().join("agent.cfg");
    std::fs::write(
        &cfg,
        format!(
            "[zkdeployment]\nhost-id = h1\nrun-directory = {}\nzookeeper = {conn}\n",
            dir.path().join("run").display()
        ),
    )
    .unwrap();
    server.stop();
    let started = std::time::Instant::now();
    let run = support::run_async(&["monitor", cfg.to_str().unwrap()]).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stdout.starts_with("ZKDEPLOYMENT UNKNOWN - ") && run.stdout.contains("ZooKeeper"),
        "{run:?}"
    );
}
