//! Least privilege (docs/security.md) on a real ZooKeeper with digest authentication:
//! after `sync --auth`, nobody but the syncer's identity changes the tree, the index or
//! `/hosts`, nor resumes the cluster; agents with their own identities (real agent
//! processes) still register, deploy under locks, write in-flight records and halt; a host
//! cannot write another host's node; an open tree is repaired by the first `sync --auth`;
//! what the original agent does (kazoo, unauthenticated) still works; the credentials never
//! show up in output, the tombstone or the tree.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{wait_for_async, Pm, TestHost};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use support::rpm::FakeYum;
use support::Run;
use zkdeployment::zk::acl::digest_id;
use zkdeployment::zk::{decode, Client};
use zookeeper_client::{Acl, Acls, CreateMode, Error, Permission};

const LIMIT: Duration = Duration::from_secs(40);
const SYNC_SECRET: &str = "Sync-s3cr3t-plugh";
const HOST_SECRET: &str = "Host-s3cr3t-xyzzy";

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
    conn: String,
    repo: TestRepo,
    work: tempfile::TempDir,
    /// An unauthenticated client.
    anon: Client,
}

impl Env {
    async fn new(label: &str) -> Env {
        let conn = support::chroot(label).await;
        let anon = support::connect(&conn).await;
        let work = tempfile::tempdir().unwrap();
        std::fs::write(
            work.path().join("syncer.auth"),
            format!("syncer:{SYNC_SECRET}\n"),
        )
        .unwrap();
        Env {
            conn,
            repo: TestRepo::new(),
            work,
            anon,
        }
    }

    /// `file://` of the syncer's credentials.
    fn auth(&self) -> String {
        format!("file://{}", self.work.path().join("syncer.auth").display())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// Writes a host identity's credentials file and returns its `file://` URL.
    fn host_auth(&self, user: &str) -> String {
        let file = self.path(&format!("{user}.auth"));
        std::fs::write(&file, format!("{user}:{HOST_SECRET}\n")).unwrap();
        format!("file://{}", file.display())
    }

    async fn sync(&self, extra: &[&str]) -> Run {
        let (checkout, tombstone, lock) = (
            self.path("checkout"),
            self.path("tombstone"),
            self.path("lock"),
        );
        let paths = SyncPaths {
            checkout: &checkout,
            tombstone: &tombstone,
            lock: &lock,
        };
        let owned = sync_args(&self.repo.url(), &paths, &self.conn, extra);
        let args = as_strs(&owned);
        support::run_with_async(&args, None, &[("ZKDEPLOYMENT_LOG", "debug")]).await
    }

    /// A client authenticated as `user:password`.
    async fn client_as(&self, credentials: &str) -> Client {
        Client::connector()
            .with_auth("digest", credentials.as_bytes())
            .connect(&self.conn)
            .await
            .unwrap()
    }

    async fn hosts(&self) -> serde_json::Map<String, Value> {
        let (data, _) = self.anon.get_data("/hosts").await.unwrap();
        decode(&data)
    }

    async fn status_json(&self) -> Value {
        let run = support::run_async(&["status", "--json", "-z", &self.conn]).await;
        run.assert_ok();
        serde_json::from_str(&run.stdout).unwrap()
    }
}

fn sorted(acl: &[Acl]) -> Vec<(String, String, Permission)> {
    let mut v: Vec<_> = acl
        .iter()
        .map(|a| (a.scheme().to_string(), a.id().to_string(), a.permission()))
        .collect();
    v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    v
}

fn owned_acl() -> Vec<(String, String, Permission)> {
    vec![
        (
            "digest".into(),
            digest_id(&format!("syncer:{SYNC_SECRET}")),
            Permission::ALL,
        ),
        ("world".into(), "anyone".into(), Permission::READ),
    ]
}

/// Every write a client could try on the tree, the index, `/hosts` and the root: each must
/// fail with NoAuth.
async fn assert_cannot_change(client: &Client, who: &str, index_node: &str) {
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let refused = |what: &str, r: Result<(), Error>| {
        assert_eq!(r, Err(Error::NoAuth), "{who}: {what}");
    };
    refused(
        "set /acme/web",
        client
            .set_data("/acme/web", b"{\"version\": \"6.6.6\"}", None)
            .await
            .map(|_| ()),
    );
    refused(
        "create under /acme/web/deploy",
        client
            .create("/acme/web/deploy/evil", b"", &open)
            .await
            .map(|_| ()),
    );
    refused(
        "delete /acme/web/deploy/h1",
        client.delete("/acme/web/deploy/h1", None).await,
    );
    refused(
        "open the ACL of /acme",
        client
            .set_acl("/acme", Acls::anyone_all().as_ref(), None)
            .await
            .map(|_| ()),
    );
    refused(
        "create a top-level node",
        client.create("/evil", b"", &open).await.map(|_| ()),
    );
    refused(
        "set an index node",
        client.set_data(index_node, b"{}", None).await.map(|_| ()),
    );
    refused(
        "create under an index node",
        client
            .create(&format!("{index_node}/evil"), b"", &open)
            .await
            .map(|_| ()),
    );
    refused(
        "delete an index node",
        client.delete(index_node, None).await,
    );
    refused(
        "set /hosts",
        client
            .set_data("/hosts", b"{\"version\": \"evil\"}", None)
            .await
            .map(|_| ()),
    );
}

#[tokio::test]
async fn after_sync_auth_only_the_syncers_identity_changes_the_tree_index_and_hosts() {
    let env = Env::new("lp-protect").await;
    let rev = env.repo.commit(&[(
        "acme.zk",
        "/acme\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /h1\n",
    )]);
    let auth = env.auth();
    env.sync(&["--auth", &auth]).await.assert_ok();
    assert_eq!(env.hosts().await["version"], json!(rev));

    let syncer = env.client_as(&format!("syncer:{SYNC_SECRET}")).await;
    // The deployment index, whatever its layout: every node of it.
    let index = zkdeployment::zk::snapshot::read_subtree(
        &env.anon,
        "/deployment-index",
        &Default::default(),
    )
    .await
    .unwrap()
    .expect("the sync writes the index");
    let mut index_paths = vec!["/deployment-index".to_string()];
    let mut queue = vec![("/deployment-index".to_string(), &index)];
    while let Some((path, node)) = queue.pop() {
        for (name, child) in &node.children {
            let p = format!("{path}/{name}");
            index_paths.push(p.clone());
            queue.push((p, child));
        }
    }
    assert!(index_paths.len() > 1, "{index_paths:?}");
    let leaf = index_paths.last().unwrap().clone();
    let index_paths: Vec<&str> = index_paths.iter().map(String::as_str).collect();
    for path in ["/", "/acme", "/acme/web", "/acme/web/deploy/h1"]
        .into_iter()
        .chain(index_paths)
    {
        let (acl, _) = syncer.get_acl(path).await.unwrap();
        assert_eq!(sorted(&acl), owned_acl(), "{path}");
    }
    let (acl, _) = syncer.get_acl("/hosts").await.unwrap();
    assert_eq!(
        sorted(&acl),
        vec![
            owned_acl()[0].clone(),
            (
                "world".into(),
                "anyone".into(),
                Permission::READ | Permission::CREATE
            )
        ],
        "hosts may register under /hosts, nothing more"
    );

    // Nobody else: unauthenticated, or with a host's identity.
    let host = env.client_as(&format!("h1:{HOST_SECRET}")).await;
    assert_cannot_change(&env.anon, "unauthenticated", &leaf).await;
    assert_cannot_change(&host, "a host identity", &leaf).await;

    // The commands say so too.
    let change = env.path("change.zk");
    std::fs::write(&change, "/acme\n  /web : webapp\n    version = '6.6.6'\n").unwrap();
    let change = change.to_str().unwrap();
    let host_auth = env.host_auth("h1");
    for extra in [vec![], vec!["--auth", host_auth.as_str()]] {
        let mut args = vec!["tree", "import", change, "--no-trim", "-z", &env.conn];
        args.extend(extra.iter().copied());
        let run = support::run_async(&args).await;
        run.assert_code(1);
        assert!(run.stderr.contains("not authorized"), "{run}");
        let mut args = vec!["resume", "--version", "evil", "-z", &env.conn];
        args.extend(extra.iter().copied());
        support::run_async(&args).await.assert_code(1);
    }
    let (data, _) = env.anon.get_data("/acme/web").await.unwrap();
    assert_eq!(decode(&data)["version"], json!("1.4"));
    assert_eq!(env.hosts().await["version"], json!(rev));

    // The syncer's identity can; what it creates is protected.
    std::fs::write(
        env.path("change.zk"),
        "/acme\n  /web : webapp\n    version = '1.5'\n    /new\n",
    )
    .unwrap();
    support::run_async(&[
        "tree",
        "import",
        change,
        "--no-trim",
        "--auth",
        &auth,
        "-z",
        &env.conn,
    ])
    .await
    .assert_ok();
    let (data, _) = env.anon.get_data("/acme/web").await.unwrap();
    assert_eq!(decode(&data)["version"], json!("1.5"));
    let (acl, _) = syncer.get_acl("/acme/web/new").await.unwrap();
    assert_eq!(sorted(&acl), owned_acl());
    support::run_async(&[
        "resume",
        "--version",
        "r-next",
        "--auth",
        &auth,
        "-z",
        &env.conn,
    ])
    .await
    .assert_ok();
    assert_eq!(env.hosts().await["version"], json!("r-next"));

    // status: nothing open to warn about.
    let status = env.status_json().await;
    assert_eq!(status["warnings"], json!([]), "{status:#}");

    // Anyone may record a halt (a denial of service, not code execution); a sync refuses
    // until it is resumed, or forced, which clears the records.
    let read_only = CreateMode::PersistentSequential.with_acls(Acls::anyone_read());
    env.anon
        .create(
            "/hosts-halt/halt-",
            br#"{"host": "hx", "error": "stop"}"#,
            &read_only,
        )
        .await
        .unwrap();
    assert_eq!(env.status_json().await["halt"]["host"], json!("hx"));
    let next = env.repo.commit(&[(
        "acme.zk",
        "/acme\n  /web : webapp\n    version = '1.6'\n    /deploy\n      /h1\n",
    )]);
    env.sync(&["--auth", &auth]).await.assert_code(3);
    env.sync(&["--auth", &auth, "--force"]).await.assert_ok();
    let status = env.status_json().await;
    assert_eq!(status["version"], json!(next), "{status:#}");
    assert_eq!(status["halt"], Value::Null, "{status:#}");
}

#[tokio::test]
async fn a_tree_synced_before_auth_is_repaired_by_the_first_sync_auth() {
    let env = Env::new("lp-repair").await;
    env.repo.commit(&[
        ("acme.zk", &tree(&["web", "db"], "1.0", &["h1"])),
        ("roles.zkx", "/role-locks\n  /webrole\n"),
    ]);
    env.sync(&[]).await.assert_ok();
    // Open, as in version one: anyone writes, and status says so.
    env.anon.set_data("/acme/db", b"{}", None).await.unwrap();
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    env.anon
        .create("/acme/web/extra", b"{}", &open)
        .await
        .unwrap();
    env.anon.create("/foreign", b"{}", &open).await.unwrap();
    let status = env.status_json().await;
    let warnings = status["warnings"].to_string();
    assert!(
        warnings.contains("/hosts is writable by anyone"),
        "{warnings}"
    );
    assert!(warnings.contains("/acme (write"), "{warnings}");
    let text = support::run_async(&["status", "-z", &env.conn]).await;
    assert!(text.stdout.starts_with("WARNING: "), "{text}");

    // The same revision with --auth: nothing to sync, but every ACL is repaired (and
    // `/acme/db`'s data, changed by hand, is left for the next real sync).
    let auth = env.auth();
    let run = env.sync(&["--auth", &auth]).await;
    run.assert_ok();
    assert!(run.stderr.contains("repaired the ACL of"), "{run}");
    let syncer = env.client_as(&format!("syncer:{SYNC_SECRET}")).await;
    for path in [
        "/",
        "/acme",
        "/acme/db",
        "/acme/web/deploy/h1",
        "/acme/web/extra",
    ] {
        let (acl, _) = syncer.get_acl(path).await.unwrap();
        assert_eq!(sorted(&acl), owned_acl(), "{path}");
    }
    assert_eq!(
        env.anon
            .set_data("/acme/web", b"{}", None)
            .await
            .map(|_| ()),
        Err(Error::NoAuth)
    );
    // A top-level node the repository does not own is left as it is, and status warns that
    // agents would discover deployments in it.
    let status = env.status_json().await;
    assert_eq!(
        status["warnings"],
        json!(["the tree is writable by anyone: /foreign (write, create children, delete children, change the ACL) (sync --auth protects it)"]),
        "{status:#}"
    );
    syncer.delete("/foreign", None).await.unwrap();
    let status = env.status_json().await;
    assert_eq!(status["warnings"], json!([]), "{status:#}");
    // Role lock nodes from a .zkx file stay open to the hosts (persistent lock requests).
    let seq = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    env.anon
        .create("/role-locks/webrole/lr-", b"{}", &seq)
        .await
        .unwrap();
    // Repeated: nothing left to repair.
    let run = env.sync(&["--auth", &auth]).await;
    run.assert_ok();
    assert!(!run.stderr.contains("repaired the ACL of"), "{run}");

    // A role lock node a .zkx file adds under protection is open to the hosts too.
    env.repo.commit(&[
        ("acme.zk", &tree(&["web", "db"], "1.0", &["h1"])),
        ("roles.zkx", "/role-locks\n  /webrole\n  /otherrole\n"),
    ]);
    env.sync(&["--auth", &auth]).await.assert_ok();
    env.anon
        .create("/role-locks/otherrole/lr-", b"{}", &seq)
        .await
        .unwrap();

    // A mixed fleet: --open-hosts leaves /hosts to everyone, the tree stays protected,
    // and status warns about /hosts only.
    env.sync(&["--auth", &auth, "--open-hosts"])
        .await
        .assert_ok();
    let (data, _) = env.anon.get_data("/hosts").await.unwrap();
    env.anon.set_data("/hosts", &data, None).await.unwrap();
    let status = env.status_json().await;
    let warnings = status["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{status:#}");
    assert!(warnings[0]
        .as_str()
        .unwrap()
        .starts_with("/hosts is writable"));
    // A sync without the credentials cannot write the protected tree any more.
    env.repo
        .commit(&[("acme.zk", &tree(&["web"], "2.0", &["h1"]))]);
    let run = env.sync(&["--force"]).await;
    run.assert_code(1);
}

/// A host of the fleet with its own identity.
async fn host(env: &Env, id: &str) -> TestHost {
    let mut h = TestHost::on(&env.conn, id, Pm::Fake(FakeYum::new())).await;
    h.extra = format!("zookeeper-auth = {}\n", env.host_auth(id));
    h
}

#[tokio::test]
async fn agents_with_identities_register_deploy_lock_and_halt_on_a_protected_tree() {
    let env = Env::new("lp-agents").await;
    let auth = env.auth();
    let r1 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1", "h2"]))]);
    env.sync(&["--auth", &auth]).await.assert_ok();
    let h1 = host(&env, "h1").await;
    let h2 = host(&env, "h2").await;
    let slow = ("ZK_TEST_SLEEP", "1");
    let mut a1 = h1.spawn("agent", &[], &[("ZK_TEST_FAIL", "/acme/bad"), slow]);
    let mut a2 = h2.spawn("agent", &[], &[slow]);
    // While a deploy script runs, its host's in-flight record is in the lock node (created
    // under the open /agent-locks).
    let holder = wait_for_async("an in-flight record", LIMIT, || async {
        let (data, _) = env.anon.get_data("/agent-locks/acme,a").await.ok()?;
        decode(&data)
            .get("in-flight")
            .and_then(|r| r.get("host"))
            .cloned()
    })
    .await;
    assert!(holder == json!("h1") || holder == json!("h2"), "{holder}");
    h1.wait_status(&r1, &["done"], LIMIT).await;
    h2.wait_status(&r1, &["done"], LIMIT).await;
    assert_eq!(h1.deploy_log("foo").len(), 1, "{:?}", h1.deploy_log("foo"));
    assert_eq!(h2.deploy_log("foo").len(), 1);

    // A host cannot write, delete or re-ACL another host's node.
    let h2_client = env.client_as(&format!("h2:{HOST_SECRET}")).await;
    assert_eq!(
        h2_client
            .set_data("/hosts/h1", b"{}", None)
            .await
            .map(|_| ()),
        Err(Error::NoAuth)
    );
    assert_eq!(
        h2_client.delete("/hosts/h1", None).await,
        Err(Error::NoAuth)
    );
    assert_eq!(
        h2_client
            .set_acl("/hosts/h1", Acls::anyone_all().as_ref(), None)
            .await
            .map(|_| ()),
        Err(Error::NoAuth)
    );
    // Its own, yes.
    let (data, _) = h2_client.get_data("/hosts/h2").await.unwrap();
    h2_client.set_data("/hosts/h2", &data, None).await.unwrap();

    // r2 adds a node whose deploy fails on h1: h1 halts the cluster. It may not write
    // /hosts, so the halt is recorded under /hosts-halt, and everyone sees a halted cluster.
    let r2 = env.repo.commit(&[(
        "acme.zk",
        &(tree(&["a"], "1.0", &["h1", "h2"]) + &tree(&["bad"], "1.0", &["h1"])[6..]),
    )]);
    env.sync(&["--auth", &auth]).await.assert_ok();
    h1.wait_status(&r2, &["error"], LIMIT).await;
    let (halts, _) = env.anon.get_children("/hosts-halt").await.unwrap();
    assert_eq!(halts.len(), 1, "{halts:?}");
    let (data, _) = env
        .anon
        .get_data(&format!("/hosts-halt/{}", halts[0]))
        .await
        .unwrap();
    let record = decode(&data);
    assert_eq!(record["host"], json!("h1"));
    assert_eq!(record["version"], json!(r2));
    assert!(
        record["error"].as_str().unwrap().contains("/acme/bad"),
        "{record:?}"
    );
    assert_eq!(
        env.hosts().await["version"],
        json!(r2),
        "/hosts itself is unchanged"
    );
    // The record cannot be changed or removed by a host.
    let path = format!("/hosts-halt/{}", halts[0]);
    assert_eq!(
        h2_client.set_data(&path, b"{}", None).await.map(|_| ()),
        Err(Error::NoAuth)
    );
    assert_eq!(h2_client.delete(&path, None).await, Err(Error::NoAuth));
    let status = env.status_json().await;
    assert_eq!(status["version"], Value::Null, "{status:#}");
    assert_eq!(status["halt"]["host"], json!("h1"), "{status:#}");
    let text = support::run_async(&["status", "-z", &env.conn]).await;
    assert!(
        text.stdout.contains("HALTED") && text.stdout.contains("--auth"),
        "{text}"
    );
    let mon_cfg = h2.config();
    let monitor = support::run_async(&["monitor", mon_cfg.to_str().unwrap()]).await;
    assert!(
        monitor
            .stdout
            .starts_with("ZKDEPLOYMENT WARNING - Cluster halted by h1"),
        "{monitor}"
    );
    // An agent pass sees the halt too (a third host, whose pass would have nothing to do).
    let h3 = host(&env, "h3").await;
    let run = h3.deploy(&[]).await;
    run.assert_code(3);
    assert!(run.stderr.contains("cluster version is None"), "{run}");
    // The syncer refuses a halted cluster.
    let r3 = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1", "h2"]))]);
    let run = env.sync(&["--auth", &auth]).await;
    run.assert_code(3);
    assert!(run.stderr.contains("ALL STOP"), "{run}");

    // Only the syncer's identity resumes.
    let h2_auth = env.host_auth("h2");
    support::run_async(&["resume", "--auth", &h2_auth, "-z", &env.conn])
        .await
        .assert_code(1);
    support::run_async(&["resume", "-z", &env.conn])
        .await
        .assert_code(1);
    a1.terminate();
    a1.wait(LIMIT).await;
    let run = support::run_async(&["resume", "--auth", &auth, "-z", &env.conn]).await;
    run.assert_ok();
    // The record h1 made under /hosts-halt is named as cleared.
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("cleared: halted ") && l.contains(" (h1) deploying ")),
        "{run}"
    );
    let (halts, _) = env.anon.get_children("/hosts-halt").await.unwrap();
    assert!(halts.is_empty(), "{halts:?}");
    assert_eq!(env.hosts().await["version"], json!(r2));
    // The agents go on: h2 deploys the resumed version; a sync after h1 converges works.
    h2.wait_status(&r2, &["done"], LIMIT).await;
    let mut a1 = h1.spawn("agent", &[], &[]);
    h1.wait_status(&r2, &["done"], LIMIT).await;
    env.sync(&["--auth", &auth]).await.assert_ok();
    h1.wait_status(&r3, &["done"], LIMIT).await;
    h2.wait_status(&r3, &["done"], LIMIT).await;
    a1.terminate();
    a2.terminate();
    a1.wait(LIMIT).await;
    a2.wait(LIMIT).await;
}

/// What the original agent (zc.zkdeployment, through kazoo, with no credentials) does on
/// ZooKeeper — the original itself (Python 2, zc.zk) is not installable here, so its operations
/// are replayed with kazoo, unauthenticated: read the whole tree, register an open ephemeral host node, take a node lock and
/// release it, and halt by writing `/hosts`. Prints one JSON object of outcomes.
const ORIGINAL: &str = r#"
import json, sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
zk = KazooClient(hosts=sys.argv[1])
zk.start(timeout=20)
out = {"read": 0}
def walk(path):
    data, _ = zk.get(path)
    out["read"] += 1
    for child in zk.get_children(path):
        walk(path.rstrip("/") + "/" + child)
walk("/")
zk.create("/hosts/legacy", json.dumps({"name": "legacy.example.com"}).encode(), ephemeral=True)
out["registered"] = True
lock = zk.Lock("/agent-locks/acme,a", "legacy.example.com (legacy)")
out["locked"] = lock.acquire(timeout=20)
lock.release()
data, stat = zk.get("/hosts")
props = json.loads(data)
props["version"] = None
props["halt"] = {"host": "legacy", "error": "boom"}
try:
    zk.set("/hosts", json.dumps(props).encode(), stat.version)
    out["halt"] = "written"
except NoAuthError:
    out["halt"] = "NoAuth"
zk.stop()
print(json.dumps(out))
"#;

fn kazoo_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import kazoo"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with kazoo is required (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: python3 with kazoo is not available (pip install kazoo)");
    }
    ok
}

async fn original(conn: &str) -> Value {
    let out = tokio::process::Command::new("python3")
        .args(["-c", ORIGINAL, conn])
        .output()
        .await
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn the_original_agents_operations_still_work_on_a_protected_tree() {
    if !kazoo_available() {
        return;
    }
    let env = Env::new("lp-original").await;
    let auth = env.auth();
    let rev = env
        .repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["legacy", "h9"]))]);
    env.sync(&["--auth", &auth]).await.assert_ok();
    // A host without credentials (as the original runs) deploys.
    let h9 = TestHost::on(&env.conn, "h9", Pm::Fake(FakeYum::new())).await;
    h9.deploy(&[]).await.assert_ok();
    assert_eq!(h9.deploy_log("foo").len(), 1);

    // The original's operations: all but the halt, which /hosts refuses...
    let out = original(&env.conn).await;
    assert!(out["read"].as_u64().unwrap() > 6, "{out}");
    assert_eq!(out["registered"], json!(true), "{out}");
    assert_eq!(out["locked"], json!(true), "{out}");
    assert_eq!(out["halt"], json!("NoAuth"), "{out}");
    assert_eq!(env.hosts().await["version"], json!(rev));

    // ...unless /hosts is left open for a mixed fleet.
    env.sync(&["--auth", &auth, "--open-hosts"])
        .await
        .assert_ok();
    let out = original(&env.conn).await;
    assert_eq!(out["halt"], json!("written"), "{out}");
    assert_eq!(env.hosts().await["version"], Value::Null);
    support::run_async(&["resume", "--auth", &auth, "-z", &env.conn])
        .await
        .assert_ok();
}

#[tokio::test]
async fn the_syncers_credentials_never_show() {
    let env = Env::new("lp-secret").await;
    let auth = env.auth();
    let inline = format!("syncer:{SYNC_SECRET}");
    env.repo
        .commit(&[("acme.zk", &tree(&["a"], "1.0", &["h1"]))]);
    let mut outputs = vec![
        ("sync", env.sync(&["--auth", &auth]).await),
        (
            "sync inline",
            env.sync(&["--auth", &inline, "--force"]).await,
        ),
    ];
    let file = env.path("t.zk");
    std::fs::write(&file, tree(&["b"], "1.0", &["h1"])).unwrap();
    let file = file.to_str().unwrap();
    for (what, args) in [
        (
            "import",
            vec!["tree", "import", file, "--no-trim", "--auth", &inline],
        ),
        (
            "import bad",
            vec!["tree", "import", file, "--auth", "nocolon"],
        ),
        (
            "resume",
            vec!["resume", "--version", "x", "--auth", &inline],
        ),
        ("resume refused", vec!["resume", "--version", "x"]),
        ("status", vec!["status"]),
        ("status json", vec!["status", "--json"]),
        ("export", vec!["tree", "export", "-e"]),
    ] {
        let mut args = args.clone();
        args.extend(["-z", env.conn.as_str()]);
        let run = support::run_with_async(&args, None, &[("ZKDEPLOYMENT_LOG", "debug")]).await;
        outputs.push((what, run));
    }
    // The bad value is refused as a usage error that does not repeat it.
    let bad = &outputs.iter().find(|(w, _)| *w == "import bad").unwrap().1;
    bad.assert_code(2);
    assert!(
        bad.stderr.contains("--auth: expected digest credentials"),
        "{bad}"
    );
    let mut texts: Vec<(String, String)> = outputs
        .iter()
        .map(|(w, r)| (w.to_string(), format!("{}\n{}", r.stdout, r.stderr)))
        .collect();
    texts.push((
        "tombstone".into(),
        std::fs::read_to_string(env.path("tombstone")).unwrap_or_default(),
    ));
    assert!(
        texts
            .iter()
            .any(|(w, t)| w == "sync" && t.contains("DEBUG")),
        "debug logging is on"
    );
    for (what, text) in &texts {
        assert!(
            !text.contains(SYNC_SECRET),
            "the secret leaks into {what}:\n{text}"
        );
    }
}

/// A new generation of the index, and an entry an in-place update adds, are created with the
/// syncer's ACL: no moment exists in which another client could write into them before a
/// later repair (a write then would survive the repair, which only changes ACLs). Written without [`zkdeployment::sync::protect`], so only
/// the creation can have set these ACLs.
#[tokio::test]
async fn index_generations_are_created_protected() {
    use zkdeployment::sync::index::{add_in_place, prepare, write_generation};
    use zkdeployment::zk::acl::{Kind, Protection};

    let env = Env::new("lp-index-create").await;
    let credentials = format!("syncer:{SYNC_SECRET}");
    let syncer = env.client_as(&credentials).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for path in [
        "/acme",
        "/acme/web",
        "/acme/web/deploy",
        "/acme/web/deploy/h1",
    ] {
        syncer.create(path, b"{}", &open).await.unwrap();
    }
    let acl = Protection::new(&credentials).acl(Kind::Owned);
    let generation = write_generation(&syncer, Some(&acl), None).await.unwrap();
    assert_eq!(generation.paths, 1, "{generation:?}");
    // A new target: the generation is updated in place, the new entry created protected too.
    syncer
        .create("/acme/web/deploy/h2", b"{}", &open)
        .await
        .unwrap();
    let prepared = prepare(&syncer, Some(&acl), Some(&generation.name))
        .await
        .unwrap();
    let in_place = prepared.in_place.expect("an in-place update");
    let mut writer = syncer.new_multi_writer();
    let written = add_in_place(&mut writer, &generation.name, &in_place, Some(&acl)).unwrap();
    assert!(written.iter().any(|p| p.ends_with("/t-h2")), "{written:?}");
    writer.commit().await.unwrap();
    let index = zkdeployment::zk::snapshot::read_subtree(
        &env.anon,
        "/deployment-index",
        &Default::default(),
    )
    .await
    .unwrap()
    .expect("the index root exists");
    let mut queue = vec![("/deployment-index".to_string(), &index)];
    let mut checked = 0;
    while let Some((path, node)) = queue.pop() {
        let (acl, _) = syncer.get_acl(&path).await.unwrap();
        assert_eq!(sorted(&acl), owned_acl(), "{path}");
        checked += 1;
        for (name, child) in &node.children {
            queue.push((format!("{path}/{name}"), child));
        }
    }
    assert!(checked > 3, "root, generation and entries: {checked}");
    assert_eq!(
        env.anon
            .set_data("/deployment-index", b"{}", None)
            .await
            .unwrap_err(),
        Error::NoAuth
    );
}

#[tokio::test]
async fn hosts_record_failures_and_node_halts_and_only_the_operator_pauses_or_resumes_nodes() {
    use zkdeployment::agent::budget::{
        node_gate, record_failure, record_node_halt, FailureRecord, Gate,
    };
    let env = Env::new("lp-budget").await;
    env.repo
        .commit(&[("acme.zk", &tree(&["web"], "1.4", &["h1", "h2"]))]);
    let auth = env.auth();
    env.sync(&["--auth", &auth]).await.assert_ok();
    let syncer = env.client_as(&format!("syncer:{SYNC_SECRET}")).await;
    let register = vec![
        owned_acl()[0].clone(),
        (
            "world".into(),
            "anyone".into(),
            Permission::READ | Permission::CREATE,
        ),
    ];
    let (acl, _) = syncer.get_acl("/node-state").await.unwrap();
    assert_eq!(sorted(&acl), register);
    let (acl, _) = syncer.get_acl("/node-pauses").await.unwrap();
    assert_eq!(sorted(&acl), owned_acl());

    // A host's identity records its failure and a node halt.
    let host = env.client_as(&format!("h1:{HOST_SECRET}")).await;
    let failure = FailureRecord {
        host: "h1".into(),
        name: "h1.example.com".into(),
        n: 0,
        version: json!("r1"),
        error: "boom".into(),
        time: 1.0,
    };
    let verdict = record_failure(&host, "/acme/web", &failure, 1)
        .await
        .unwrap();
    assert!(verdict.is_within(), "{verdict:?}");
    assert!(record_node_halt(&host, "/acme/web", &failure)
        .await
        .unwrap());
    // Both are children of /node-state, read-only to all.
    let names = env.anon.list_children("/node-state").await.unwrap();
    assert_eq!(names.len(), 2, "{names:?}");
    let record = names.iter().find(|n| n.starts_with("fail~acme,web~r1~h1-"));
    let record = format!("/node-state/{}", record.expect("the failure record"));
    let halt = "/node-state/halt~acme,web".to_string();
    for node in [&record, &halt] {
        let (acl, _) = syncer.get_acl(node).await.unwrap();
        assert_eq!(
            sorted(&acl),
            vec![("world".into(), "anyone".into(), Permission::READ)],
            "{node}"
        );
    }
    // Neither a host nor anyone unauthenticated changes or removes them, or pauses a node.
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for (who, client) in [("a host identity", &host), ("unauthenticated", &env.anon)] {
        for node in [&record, &halt] {
            assert_eq!(
                client.delete(node, None).await,
                Err(Error::NoAuth),
                "{who}: delete {node}"
            );
            let set = client.set_data(node, b"{}", None).await.map(|_| ());
            assert_eq!(set, Err(Error::NoAuth), "{who}: set {node}");
        }
        let set_acl = client
            .set_acl("/node-state", Acls::anyone_all().as_ref(), None)
            .await;
        assert_eq!(
            set_acl.map(|_| ()),
            Err(Error::NoAuth),
            "{who}: open /node-state"
        );
        let pause = client.create("/node-pauses/acme,web", b"{}", &open).await;
        assert_eq!(pause.map(|_| ()), Err(Error::NoAuth), "{who}: pause");
    }

    // The commands: only the operator's identity pauses and resumes nodes.
    let host_auth = env.host_auth("h1");
    let zk = ["-z", env.conn.as_str()];
    for extra in [vec![], vec!["--auth", host_auth.as_str()]] {
        for cmd in ["pause", "resume"] {
            let mut args = vec![cmd, "/acme/web"];
            args.extend(zk);
            args.extend(extra.iter().copied());
            let run = support::run_async(&args).await;
            assert_eq!(run.code, 1, "{args:?}: {run}");
            assert!(
                run.stderr.contains("needs the operator's identity (--auth"),
                "{args:?}: {run}"
            );
        }
    }
    let gate = node_gate(&env.anon, "/acme/web", &json!("r1"), "h2").await;
    assert!(matches!(gate.unwrap(), Gate::Halted(_)));
    assert_eq!(
        env.anon.list_children("/node-state").await.unwrap().len(),
        2
    );

    let mut args = vec!["pause", "/acme/web", "--auth", auth.as_str()];
    args.extend(zk);
    support::run_async(&args).await.assert_ok();
    let (acl, _) = syncer.get_acl("/node-pauses/acme,web").await.unwrap();
    assert_eq!(
        sorted(&acl),
        vec![("world".into(), "anyone".into(), Permission::READ)]
    );
    let mut args = vec!["resume", "/acme/web", "--auth", auth.as_str()];
    args.extend(zk);
    let run = support::run_async(&args).await;
    run.assert_ok();
    assert!(run.stdout.contains("ended the halt"), "{run}");
    assert!(run.stdout.contains("ended the pause"), "{run}");
    let gate = node_gate(&env.anon, "/acme/web", &json!("r1"), "h1").await;
    assert_eq!(gate.unwrap(), Gate::Open);
    assert_eq!(
        env.anon.list_children("/node-state").await.unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn agents_with_identities_quarantine_and_halt_a_node_and_only_the_operator_resumes_it() {
    let env = Env::new("lp-budget-agents").await;
    let auth = env.auth();
    let mut text = tree(&["web", "other"], "1.0", &["h1", "h2", "h3"]);
    text = text.replacen(
        "    /deploy\n",
        "    max-failures = 1\n    on-failure = 'halt-node'\n    /deploy\n",
        1,
    );
    assert!(text.starts_with("/acme\n  /web"), "{text}");
    env.repo.commit(&[("acme.zk", &text)]);
    env.sync(&["--auth", &auth]).await.assert_ok();
    let (h1, h2, h3) = (
        host(&env, "h1").await,
        host(&env, "h2").await,
        host(&env, "h3").await,
    );
    let fail = [("ZK_TEST_FAIL", "/acme/web")];
    let records = || async {
        let mut names = env.anon.list_children("/node-state").await.unwrap();
        names.sort();
        names
    };

    // h1's identity records its failure, within the budget: nothing is halted.
    let run = h1.deploy_env(&[], &fail).await;
    run.assert_code(1);
    assert!(run.stderr.contains("within its budget of 1"), "{run}");
    let names = records().await;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("fail~acme,web~"), "{names:?}");
    // h2's, beyond it: the node halt, in h2's name; the cluster goes on.
    let run = h2.deploy_env(&[], &fail).await;
    run.assert_code(1);
    let (data, _) = env
        .anon
        .get_data("/node-state/halt~acme,web")
        .await
        .unwrap_or_else(|e| panic!("no node halt ({e}): {run}"));
    assert_eq!(decode(&data)["host"], json!("h2"));
    let hosts = decode(&env.anon.get_data("/hosts").await.unwrap().0);
    assert!(hosts["version"].is_string(), "{hosts:?}");
    // h3 deploys /acme/other and leaves the halted node undone.
    let run = h3.deploy(&[]).await;
    run.assert_code(3);
    assert_eq!(h3.status_text(), "blocked /acme/web");
    assert!(h3.etc("foo").iter().any(|m| m.starts_with("acme,other")));

    // A host's identity may not resume the node; the operator's may, and h3 converges.
    let zk = ["-z", env.conn.as_str()];
    let host_auth = env.host_auth("h3");
    let mut args = vec!["resume", "/acme/web", "--auth", host_auth.as_str()];
    args.extend(zk);
    let run = support::run_async(&args).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("needs the operator's identity"),
        "{run}"
    );
    assert_eq!(records().await.len(), 3, "two failure records and the halt");
    let mut args = vec!["resume", "/acme/web", "--auth", auth.as_str()];
    args.extend(zk);
    support::run_async(&args).await.assert_ok();
    assert_eq!(records().await, Vec::<String>::new());
    h3.deploy(&[]).await.assert_ok();
    assert_eq!(h3.status_text(), "done");
    assert!(h3.etc("foo").iter().any(|m| m.starts_with("acme,web")));
}
