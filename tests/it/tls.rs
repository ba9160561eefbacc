//! TLS to ZooKeeper and certificate identities (CONTRACT 16) on a real ZooKeeper serving TLS
//! beside a plain port ([`support::tls::TlsZk`]), with certificates made by `openssl` at test
//! time: every command over TLS with x509 identities in the ACLs; each refusal (a plain
//! port, another CA, another name) named; bad files named (exit 2); an expired client
//! certificate (exit 1, monitor CRITICAL) and one about to expire (WARNING, the metrics
//! file); rotation of the CA and the client certificate under a running agent; kazoo over
//! TLS excluded by our node lock; no key material in any output.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{children_of, wait_for_async, Pm, TestHost};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use support::rpm::FakeYum;
use support::tls::{Pki, TlsZk};
use support::Run;
use zkdeployment::agent::status::format_status;
use zkdeployment::zk::{decode, Client};
use zookeeper_client::{Acls, CreateMode, Error};

const LIMIT: Duration = Duration::from_secs(60);
/// The syncer's certificate subject, and the id ZooKeeper's X509AuthenticationProvider
/// gives it (Java's RFC 2253 rendering: the last RDN first).
const SYNCER_SUBJECT: &str = "/CN=syncer/O=Example";
const SYNCER_ID: &str = "O=Example,CN=syncer";

/// `/acme/<path>` (package foo `version`) deployed to each of `hosts`.
fn tree(paths: &[&str], version: &str, hosts: &[&str]) -> String {
    let mut text = String::from("/acme\n");
    for path in paths {
        text.push_str(&format!(
            "  /{path} : foo\n    version = '{version}'\n    /deploy\n"
        ));
        for host in hosts {
            text.push_str(&format!("      /{host}\n"));
        }
    }
    text
}

struct Env {
    pki: Pki,
    zk: TlsZk,
    repo: TestRepo,
    work: tempfile::TempDir,
    /// A client on the plain port, unauthenticated.
    anon: Client,
}

impl Env {
    /// CA `ca`, a server certificate for 127.0.0.1, client certificates `syncer`, `h1`, `h2`.
    async fn new() -> Env {
        let pki = Pki::new();
        pki.ca("ca");
        let keystore = pki.server("ca", "server", "IP:127.0.0.1");
        pki.client("ca", "syncer", SYNCER_SUBJECT, 30);
        pki.client("ca", "h1", "/CN=h1", 30);
        pki.client("ca", "h2", "/CN=h2", 30);
        let zk = TlsZk::start(&keystore, &pki.path("ca.pem"));
        let anon = support::connect(&zk.plain_conn()).await;
        Env {
            pki,
            zk,
            repo: TestRepo::new(),
            work: tempfile::tempdir().unwrap(),
            anon,
        }
    }

    fn p(&self, name: &str) -> String {
        self.pki.path(name).display().to_string()
    }

    /// `--tls-ca ca.pem [--tls-cert NAME.crt --tls-key NAME.key]`.
    fn tls(&self, client: Option<&str>) -> Vec<String> {
        let mut args = vec!["--tls-ca".to_string(), self.p("ca.pem")];
        if let Some(name) = client {
            args.extend([
                "--tls-cert".to_string(),
                self.p(&format!("{name}.crt")),
                "--tls-key".to_string(),
                self.p(&format!("{name}.key")),
            ]);
        }
        args
    }

    /// `zkdeployment ARGS -z TLS_CONN --tls-* (client)`.
    async fn run(&self, args: &[&str], client: Option<&str>) -> Run {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["-z".to_string(), self.zk.tls_conn()]);
        all.extend(self.tls(client));
        support::run_async(&as_strs(&all)).await
    }

    async fn sync(&self, client: Option<&str>, extra: &[&str]) -> Run {
        let path = |n: &str| self.work.path().join(n);
        let (checkout, tombstone, lock) = (path("checkout"), path("tombstone"), path("lock"));
        let paths = SyncPaths {
            checkout: &checkout,
            tombstone: &tombstone,
            lock: &lock,
        };
        let mut owned = sync_args(&self.repo.url(), &paths, &self.zk.tls_conn(), extra);
        owned.extend(self.tls(client));
        support::run_with_async(&as_strs(&owned), None, &[("ZKDEPLOYMENT_LOG", "debug")]).await
    }

    /// A host whose agent connects over TLS with its certificate as its identity.
    async fn host(&self, id: &str) -> TestHost {
        let mut h = TestHost::on(&self.zk.plain_conn(), id, Pm::Fake(FakeYum::new())).await;
        h.conn = self.zk.tls_conn();
        h.extra = format!(
            "zookeeper-auth = x509\nzookeeper-tls-ca = {}\nzookeeper-tls-cert = {}\nzookeeper-tls-key = {}\n",
            self.p("ca.pem"),
            self.p(&format!("{id}.crt")),
            self.p(&format!("{id}.key")),
        );
        h
    }

    async fn hosts(&self) -> serde_json::Map<String, Value> {
        let (data, _) = self.anon.get_data("/hosts").await.unwrap();
        decode(&data)
    }
}

fn monitor_line(run: &Run) -> &str {
    run.stdout.lines().next().unwrap_or_default()
}

#[tokio::test]
async fn every_command_works_over_tls_with_certificate_identities() {
    let env = Env::new().await;
    let r1 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1", "h2"]))]);
    env.sync(Some("syncer"), &["--auth", "x509"])
        .await
        .assert_ok();
    assert_eq!(env.hosts().await["version"], json!(r1));
    // The syncer's certificate owns the tree: its id as the server reports it.
    let (acl, _) = env.anon.get_acl("/acme/a").await.unwrap();
    let ids: Vec<String> = acl
        .iter()
        .map(|a| format!("{}:{}", a.scheme(), a.id()))
        .collect();
    assert!(ids.contains(&format!("x509:{SYNCER_ID}")), "{ids:?}");
    assert!(!ids.iter().any(|i| i.starts_with("digest:")), "{ids:?}");

    // Agents deploy over TLS with their certificates: `deploy`, and a daemon (monitored).
    let h1 = env.host("h1").await;
    h1.deploy(&[]).await.assert_ok();
    assert_eq!(h1.deploy_log("foo").len(), 1);
    // h2 has a digest identity (a mixed fleet), over TLS without a client certificate.
    let mut h2 = env.host("h2").await;
    let secret = env.work.path().join("h2.auth");
    std::fs::write(&secret, "h2:H2-s3cr3t\n").unwrap();
    h2.extra = format!(
        "zookeeper-auth = file://{}\nzookeeper-tls-ca = {}\n",
        secret.display(),
        env.p("ca.pem")
    );
    let mut agent = h2.spawn("agent", &[], &[]);
    h2.wait_status(&r1, &["done"], LIMIT).await;
    let (acl, _) = env.anon.get_acl("/hosts/h2").await.unwrap();
    assert!(
        acl.iter()
            .any(|a| a.scheme() == "digest" && a.id().starts_with("h2:")),
        "{acl:?}"
    );
    let cfg = h2.config();
    let mon = support::run_async(&["monitor", cfg.to_str().unwrap()]).await;
    assert!(monitor_line(&mon).starts_with("ZKDEPLOYMENT OK"), "{mon}");

    // status, plan-free reads: status and tree export, with no client certificate.
    let status = env.run(&["status", "--json"], None).await;
    status.assert_ok();
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["version"], json!(r1), "{status:#}");
    let export = env.run(&["tree", "export", "/acme"], None).await;
    export.assert_ok();
    assert!(export.stdout.contains("version = '1.0'"), "{export}");

    // plan: a candidate tree against the registered hosts (h2's daemon).
    let candidate = env.work.path().join("candidate.zk");
    std::fs::write(&candidate, tree(&["a"], "3.0", &["h1", "h2"])).unwrap();
    let plan = env
        .run(&["plan", "--files", candidate.to_str().unwrap()], None)
        .await;
    assert!(plan.code == 0 || plan.code == 10, "{plan}");
    assert!(
        plan.stdout.contains("h2") && plan.stdout.contains("3.0"),
        "{plan}"
    );

    // tree import: the syncer's certificate may, a host's may not.
    let file = env.work.path().join("import.zk");
    std::fs::write(&file, "/imp\n  x = 1\n").unwrap();
    let f = file.to_str().unwrap();
    env.run(
        &["tree", "import", f, "/acme", "--auth", "x509"],
        Some("syncer"),
    )
    .await
    .assert_ok();
    let (acl, _) = env.anon.get_acl("/acme/imp").await.unwrap();
    assert!(
        acl.iter()
            .any(|a| a.scheme() == "x509" && a.id() == SYNCER_ID),
        "{acl:?}"
    );
    let denied = env
        .run(
            &["tree", "import", f, "/acme/a", "--auth", "x509"],
            Some("h1"),
        )
        .await;
    denied.assert_code(1);
    assert!(denied.stderr.to_lowercase().contains("auth"), "{denied}");

    // A host's certificate cannot change the tree or /hosts; it may register and lock.
    let h1_client = x509_client(&env, "h1").await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    assert_eq!(
        h1_client.set_data("/acme/a", b"{}", None).await.map(|_| ()),
        Err(Error::NoAuth)
    );
    assert_eq!(
        h1_client
            .create("/acme/a/deploy/evil", b"", &open)
            .await
            .map(|_| ()),
        Err(Error::NoAuth)
    );
    assert_eq!(
        h1_client.set_data("/hosts", b"{}", None).await.map(|_| ()),
        Err(Error::NoAuth)
    );
    assert_eq!(
        h1_client
            .set_data("/hosts/h2", b"{}", None)
            .await
            .map(|_| ()),
        Err(Error::NoAuth),
        "another host's node"
    );

    // resume of a halted cluster: a host's certificate cannot; the syncer's can.
    let syncer = x509_client(&env, "syncer").await;
    let mut props = env.hosts().await;
    props.insert("version".into(), Value::Null);
    syncer
        .set_data("/hosts", &serde_json::to_vec(&props).unwrap(), None)
        .await
        .unwrap();
    let denied = env.run(&["resume", "--auth", "x509"], Some("h1")).await;
    denied.assert_code(1);
    assert_eq!(env.hosts().await["version"], Value::Null, "{denied}");
    env.run(&["resume", "--auth", "x509"], Some("syncer"))
        .await
        .assert_ok();
    assert_eq!(env.hosts().await["version"], json!(r1));

    // A new revision reaches the daemon over TLS.
    let r2 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "2.0", &["h1", "h2"]))]);
    env.sync(Some("syncer"), &["--auth", "x509"])
        .await
        .assert_ok();
    h2.wait_status(&r2, &["done"], LIMIT).await;
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
}

/// A client over TLS whose identity is certificate `name`.
async fn x509_client(env: &Env, name: &str) -> Client {
    let ca = std::fs::read_to_string(env.pki.path("ca.pem")).unwrap();
    let crt = std::fs::read_to_string(env.pki.path(&format!("{name}.crt"))).unwrap();
    let key = std::fs::read_to_string(env.pki.path(&format!("{name}.key"))).unwrap();
    let tls = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&ca)
        .unwrap()
        .with_pem_identity(&crt, &key)
        .unwrap();
    Client::connector()
        .with_tls(tls)
        .secure_connect(&env.zk.tls_conn())
        .await
        .unwrap()
}

#[tokio::test]
async fn servers_that_do_not_prove_themselves_are_refused_and_named() {
    let env = Env::new().await;
    // A second CA, and a certificate of the right CA for another name.
    env.pki.ca("other");
    let other_store = env.pki.server("other", "other-server", "IP:127.0.0.1");
    let wrong_name = env.pki.server("ca", "named", "DNS:zk.example.org");
    let plain = env.zk.plain_conn();
    let cases: [(&str, String, &str); 3] = [
        ("plain", plain.clone(), "no TLS on this port"),
        ("other CA", String::new(), "not signed by a CA of"),
        (
            "another name",
            String::new(),
            "not valid for the name 127.0.0.1",
        ),
    ];
    let mut zk2 = None;
    for (what, conn, reason) in cases {
        let conn = match what {
            "plain" => conn,
            _ => {
                let store = if what == "other CA" {
                    &other_store
                } else {
                    &wrong_name
                };
                let zk = TlsZk::start(store, &env.pki.path("ca.pem"));
                let conn = zk.tls_conn();
                zk2 = Some(zk);
                conn
            }
        };
        let args = |cmd: &[&str]| {
            let mut v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            v.extend(["-z".to_string(), conn.clone()]);
            v.extend(env.tls(Some("h1")));
            v
        };
        for cmd in [&["status"][..], &["tree", "export", "/"][..]] {
            let run = support::run_async(&as_strs(&args(cmd))).await;
            run.assert_code(1);
            assert!(
                run.stderr.contains(&conn) && run.stderr.contains(reason),
                "{what}: {cmd:?}: {run}"
            );
        }
        // monitor: UNKNOWN, naming the reason; deploy: exit 1.
        let mut h = env.host("h1").await;
        h.conn = conn.clone();
        let cfg = h.config();
        std::fs::create_dir_all(h.run_dir()).unwrap();
        let line = format_status(zkdeployment::files::now(), 1, &json!("1"), "done");
        std::fs::write(h.run_dir().join("status"), line).unwrap();
        let mon = support::run_async(&["monitor", cfg.to_str().unwrap()]).await;
        mon.assert_code(3);
        assert!(
            monitor_line(&mon).starts_with("ZKDEPLOYMENT UNKNOWN") && mon.stdout.contains(reason),
            "{what}: {mon}"
        );
        let run = h.deploy(&[]).await;
        run.assert_code(1);
        assert!(run.stderr.contains(reason), "{what}: {run}");
    }
    drop(zk2);
    // A plain-text server named in the connection string with a CA set.
    let mixed = format!("{},tcp://{}", env.zk.tls_conn(), env.zk.plain_conn());
    let mut args = vec!["status".to_string(), "-z".to_string(), mixed];
    args.extend(env.tls(None));
    let run = support::run_async(&as_strs(&args)).await;
    run.assert_code(1);
    assert!(run.stderr.contains("plain-text (tcp://) server"), "{run}");
}

#[tokio::test]
async fn bad_files_are_named_and_keys_never_show() {
    let env = Env::new().await;
    env.pki.client("ca", "h9", "/CN=h9", 30);
    let key_text = std::fs::read_to_string(env.pki.path("h1.key")).unwrap();
    let key_body: String = key_text.lines().nth(1).unwrap().to_string();
    let junk = env.pki.path("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let missing = env.pki.path("missing.pem");
    let (p, ca) = (|n: &str| env.p(n), env.p("ca.pem"));
    let conn = env.zk.tls_conn();
    let cases: Vec<(Vec<String>, String, &str)> = vec![
        (
            vec![missing.display().to_string(), p("h1.crt"), p("h1.key")],
            missing.display().to_string(),
            "cannot read",
        ),
        (
            vec![junk.display().to_string(), p("h1.crt"), p("h1.key")],
            junk.display().to_string(),
            "not PEM",
        ),
        (
            vec![ca.clone(), p("h1.key"), p("h1.key")],
            p("h1.key"),
            "no CERTIFICATE",
        ),
        (
            vec![ca.clone(), p("h1.crt"), p("h9.key")],
            p("h9.key"),
            "does not match",
        ),
        (
            vec![ca.clone(), p("h1.crt"), p("h1.crt")],
            p("h1.crt"),
            "no PEM private key",
        ),
    ];
    let mut outputs = String::new();
    for (files, named, reason) in cases {
        let run = support::run_async(&[
            "status",
            "-z",
            &conn,
            "--tls-ca",
            &files[0],
            "--tls-cert",
            &files[1],
            "--tls-key",
            &files[2],
        ])
        .await;
        run.assert_code(2);
        assert!(
            run.stderr.contains(&named) && run.stderr.contains(reason),
            "{run}"
        );
        outputs.push_str(&format!("{run}"));
    }
    // The same through the environment variables, and the configuration file.
    let run = support::run_with_async(
        &["tree", "export", "/", "-z", &conn],
        None,
        &[
            ("ZKDEPLOYMENT_TLS_CA", ca.as_str()),
            ("ZKDEPLOYMENT_TLS_CERT", &p("h1.crt")),
            ("ZKDEPLOYMENT_TLS_KEY", &p("h9.key")),
        ],
    )
    .await;
    run.assert_code(2);
    assert!(run.stderr.contains("does not match"), "{run}");
    outputs.push_str(&format!("{run}"));
    let mut h = env.host("h1").await;
    h.extra = h.extra.replace(&p("h1.key"), &p("h9.key"));
    let run = h.deploy(&[]).await;
    run.assert_code(2);
    assert!(run.stderr.contains("does not match"), "{run}");
    outputs.push_str(&format!("{run}"));
    // A working run with debug logs, and --help: no key material either.
    let ok = support::run_with_async(
        &[
            "status",
            "-z",
            &conn,
            "--tls-ca",
            &ca,
            "--tls-cert",
            &p("h1.crt"),
            "--tls-key",
            &p("h1.key"),
        ],
        None,
        &[("ZKDEPLOYMENT_LOG", "trace")],
    )
    .await;
    outputs.push_str(&format!("{ok}"));
    outputs.push_str(&support::run_async(&["status", "--help"]).await.stdout);
    assert!(!outputs.contains(&key_body), "the key's PEM body shows");
    assert!(
        !outputs.contains("PRIVATE KEY"),
        "key material shows:\n{outputs}"
    );
}

#[tokio::test]
async fn expired_and_expiring_client_certificates() {
    let env = Env::new().await;
    let r1 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1"]))]);
    env.sync(Some("syncer"), &["--auth", "x509"])
        .await
        .assert_ok();
    // h1's certificate expires in 5 days: deploys, monitor WARNING, the metrics file says when.
    env.pki.client("ca", "h1", "/CN=h1", 5);
    let mut h1 = env.host("h1").await;
    let metrics = env.work.path().join("h1.prom");
    h1.extra
        .push_str(&format!("metrics-file = {}\n", metrics.display()));
    let mut agent = h1.spawn("agent", &[], &[]);
    h1.wait_status(&r1, &["done"], LIMIT).await;
    let cfg = h1.config();
    let mon = support::run_async(&["monitor", cfg.to_str().unwrap()]).await;
    mon.assert_code(1);
    assert!(
        monitor_line(&mon).starts_with("ZKDEPLOYMENT WARNING - TLS client certificate")
            && mon.stdout.contains("h1.crt")
            && mon.stdout.contains("(in 5 days)"),
        "{mon}"
    );
    let text = support::read(&metrics);
    let expiry: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("zkdeployment_tls_client_cert_expiry_timestamp_seconds "))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    let in_days = (expiry - zkdeployment::files::now()) / 86_400.0;
    assert!((4.9..5.01).contains(&in_days), "{in_days}");
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());

    // Expired: commands exit 1 (not a configuration error), monitor CRITICAL.
    env.pki.client("ca", "h1", "/CN=h1", -1);
    let run = h1.deploy(&["--force"]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("h1.crt") && run.stderr.contains("expired"),
        "{run}"
    );
    let run = env.run(&["status"], Some("h1")).await;
    run.assert_code(1);
    assert!(run.stderr.contains("expired"), "{run}");
    let mon = support::run_async(&["monitor", cfg.to_str().unwrap()]).await;
    mon.assert_code(2);
    assert!(
        monitor_line(&mon).starts_with("ZKDEPLOYMENT CRITICAL - TLS client certificate")
            && mon.stdout.contains("expired"),
        "{mon}"
    );
}

#[tokio::test]
async fn a_running_agent_follows_a_new_ca_and_a_renewed_certificate() {
    // Without a restart: the server's new certificate verifies only with the new CA file,
    // and the expired certificate is refused until the renewed one is on disk.
    let mut env = Env::new().await;
    let r1 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1"]))]);
    env.sync(Some("syncer"), &["--auth", "x509"])
        .await
        .assert_ok();
    // The agent's files are copies it reads again at every new connection.
    let agent_dir = env.work.path().join("h1-tls");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let copy = |from: &str, to: &str| {
        std::fs::copy(env.pki.path(from), agent_dir.join(to)).unwrap();
    };
    copy("ca.pem", "ca.pem");
    copy("h1.crt", "h1.crt");
    copy("h1.key", "h1.key");
    let mut h1 = env.host("h1").await;
    let a = |n: &str| agent_dir.join(n).display().to_string();
    h1.extra = format!(
        "zookeeper-auth = x509\nzookeeper-tls-ca = {}\nzookeeper-tls-cert = {}\nzookeeper-tls-key = {}\nsession-timeout = 2\n",
        a("ca.pem"),
        a("h1.crt"),
        a("h1.key")
    );
    let mut agent = h1.spawn("agent", &[], &[]);
    h1.wait_status(&r1, &["done"], LIMIT).await;

    // A new CA: the server restarts with its certificate (and trusts client certificates of
    // both CAs during the change); the agent gets the new CA file, and first a certificate
    // that has expired: it logs that and keeps trying.
    env.pki.ca("ca2");
    let store2 = env.pki.server("ca2", "server2", "IP:127.0.0.1");
    env.pki.client("ca2", "h1-old", "/CN=h1", -1);
    env.pki.client("ca2", "h1-new", "/CN=h1", 30);
    let both = env.pki.path("both.pem");
    let bundle = std::fs::read_to_string(env.pki.path("ca.pem")).unwrap()
        + &std::fs::read_to_string(env.pki.path("ca2.pem")).unwrap();
    std::fs::write(&both, bundle).unwrap();
    replace(&env.pki.path("ca2.pem"), &agent_dir.join("ca.pem"));
    replace(&env.pki.path("h1-old.crt"), &agent_dir.join("h1.crt"));
    replace(&env.pki.path("h1-old.key"), &agent_dir.join("h1.key"));
    env.zk.restart_with(&store2, &both);
    wait_for_async(
        "the agent's log of its expired certificate",
        LIMIT,
        || async { agent.output().contains("expired").then_some(()) },
    )
    .await;
    assert!(agent.running(), "{}", agent.output());
    // The renewal written to disk takes effect at the next attempt.
    replace(&env.pki.path("h1-new.crt"), &agent_dir.join("h1.crt"));
    replace(&env.pki.path("h1-new.key"), &agent_dir.join("h1.key"));

    // The syncer (its CA file is the new one too) bumps the version: the agent, never
    // restarted, reconnects with the new files and deploys.
    let anon = support::connect(&env.zk.plain_conn()).await;
    env.anon = anon;
    let r2 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "2.0", &["h1"]))]);
    std::fs::copy(env.pki.path("ca2.pem"), env.pki.path("ca.pem")).unwrap();
    env.sync(Some("syncer"), &["--auth", "x509"])
        .await
        .assert_ok();
    h1.wait_status(&r2, &["done"], LIMIT).await;
    assert!(agent.running(), "{}", agent.output());
    // The host node is registered under the same identity.
    let (acl, _) = env.anon.get_acl("/hosts/h1").await.unwrap();
    assert!(
        acl.iter()
            .any(|a| a.scheme() == "x509" && a.id() == "CN=h1"),
        "{acl:?}"
    );
    agent.terminate();
    assert_eq!(agent.wait(LIMIT).await, 0, "{}", agent.output());
    let key = std::fs::read_to_string(env.pki.path("h1-new.key")).unwrap();
    let output = agent.output();
    assert!(
        !output.contains("PRIVATE KEY") && !output.contains(key.lines().nth(1).unwrap()),
        "{output}"
    );
}

/// Replaces `to` by a copy of `from` atomically (as a certificate manager would).
fn replace(from: &Path, to: &Path) {
    let tmp: PathBuf = to.with_extension("new");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// kazoo over TLS (the installed kazoo has `use_ssl`): it takes the node lock our TLS agent
/// holds only once the agent has released it.
const KAZOO_LOCK: &str = r#"
import json, sys
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
conn, ca, crt, key, timeout = sys.argv[1:6]
zk = KazooClient(hosts=conn, use_ssl=True, ca=ca, certfile=crt, keyfile=key, verify_certs=True)
zk.start(timeout=20)
lock = zk.Lock("/agent-locks/acme,a", "kazoo.example.com (kazoo)")
try:
    got = lock.acquire(timeout=float(timeout))
except LockTimeout:
    got = False
if got:
    lock.release()
zk.stop()
print(json.dumps({"locked": got}))
"#;

async fn kazoo_lock(env: &Env, timeout: &str) -> Value {
    let out = tokio::process::Command::new("python3")
        .args([
            "-c",
            KAZOO_LOCK,
            &env.zk.tls_conn(),
            &env.p("ca.pem"),
            &env.p("h2.crt"),
            &env.p("h2.key"),
            timeout,
        ])
        .output()
        .await
        .expect("python3 with kazoo (scripts/lib.sh zkd_ensure_kazoo)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn kazoo_over_tls_is_excluded_by_our_node_lock() {
    let env = Env::new().await;
    let r1 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1"]))]);
    env.sync(Some("syncer"), &["--auth", "x509"])
        .await
        .assert_ok();
    let h1 = env.host("h1").await;
    // The deploy script sleeps until the test kills its `sleep`.
    let mut agent = h1.spawn("agent", &[], &[("ZK_TEST_SLEEP", "3600")]);
    wait_for_async("h1's in-flight record", LIMIT, || async {
        let (data, _) = env.anon.get_data("/agent-locks/acme,a").await.ok()?;
        decode(&data).get("in-flight").cloned()
    })
    .await;
    assert_eq!(kazoo_lock(&env, "1").await, json!({"locked": false}));
    // End the script: the agent finishes the step and releases the lock; kazoo gets it.
    let mut family = vec![agent.pid()];
    let mut i = 0;
    while i < family.len() {
        family.extend(children_of(family[i]));
        i += 1;
    }
    for pid in &family[1..] {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "sleep" {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    h1.wait_status(&r1, &["done", "error"], LIMIT).await;
    assert_eq!(kazoo_lock(&env, "30").await, json!({"locked": true}));
    agent.terminate();
    agent.wait(LIMIT).await;
}
