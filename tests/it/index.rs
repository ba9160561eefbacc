//! The deployment index (docs/design.md, "The deployment index") on a real ZooKeeper, with the real
//! syncer (from
//! real git repositories) and real agent processes: what `sync` writes, that agents read it
//! instead of walking, that `--walk` gives the same steps, and that a stale index is never
//! acted on — `tree import`, a foreign writer (the original's syncer, any ZooKeeper client)
//! followed by a version bump, `resume`, a halt and resume, and a sync that failed half-way.
//! Also: the layout shows the original agent's walk no deploy node, big targets are chunked,
//! the node is reserved (tree files may not define it, export leaves it out unless `-e`).

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use support::agent::{Pm, TestHost};
use support::git::{as_strs, sync_args, SyncPaths, TestRepo};
use support::rpm::FakeYum;
use support::Run;
use zkdeployment::tree::Props;
use zkdeployment::zk::index::{generation_nodes, walk_deploy_nodes};
use zkdeployment::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use zkdeployment::zk::{decode, encode};
use zookeeper_client::{Acls, CreateMode};

const INDEX: &str = "/deployment-index";

/// One host (h1, fake yum) and a git repository synced into its chroot.
struct Cluster {
    h: TestHost,
    repo: TestRepo,
    work: tempfile::TempDir,
}

/// Applications for other hosts, so that a walk reads many more nodes than the index.
fn filler(count: usize) -> String {
    let mut text = String::from("/filler\n");
    for i in 0..count {
        text.push_str(&format!(
            "  /app{i} : webapp\n    version = '1.0'\n    /deploy\n      /other{}\n",
            i % 7
        ));
    }
    text
}

const ACME: &str = "/acme
  /config
    threads = 4
  /web : foo
    version => ../config foo_version
    /deploy
      /h1
        n = 2
  /db : webapp
    version = '1.0'
    /deploy
      /h1.example.com
  /jobs : worker
    version = '1.1'
    /deploy
      /someone-else
";

/// The acme tree with foo at `foo_version`.
fn acme(foo_version: &str) -> String {
    ACME.replace(
        "    threads = 4\n",
        &format!("    threads = 4\n    foo_version = '{foo_version}'\n"),
    )
}

impl Cluster {
    async fn new(label: &str) -> Cluster {
        let conn = support::chroot(label).await;
        let h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
        Cluster {
            h,
            repo: TestRepo::new(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
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
        let owned = sync_args(&self.repo.url(), &paths, &self.h.conn, extra);
        let args = as_strs(&owned);
        support::run_async(&args).await
    }

    /// Commits the acme tree (foo at `foo_version`) and the filler, and syncs.
    async fn commit_and_sync(&self, foo_version: &str) -> String {
        let acme = acme(foo_version);
        let rev = self
            .repo
            .commit(&[("acme.zk", &acme), ("filler.zk", &filler(60))]);
        self.sync(&[]).await.assert_ok();
        rev
    }

    /// `deploy --dry-run --json --force [extra]`: the plan as JSON.
    async fn plan(&self, extra: &[&str]) -> Value {
        let mut args = vec!["--dry-run", "--json", "--force"];
        args.extend_from_slice(extra);
        let run = self.h.deploy(&args).await;
        assert!(run.code == 0 || run.code == 10, "{run}");
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"))
    }

    /// The discovery source of a dry run, checking that the walk gives the same steps.
    async fn source(&self) -> String {
        let indexed = self.plan(&[]).await;
        let walked = self.plan(&["--walk"]).await;
        assert_eq!(walked["discovery"]["source"], json!("walk"));
        assert_eq!(
            indexed["steps"], walked["steps"],
            "the same steps either way"
        );
        indexed["discovery"]["source"].as_str().unwrap().to_string()
    }

    async fn root(&self) -> (serde_json::Map<String, Value>, i64) {
        let (data, stat) = self.h.client.get_data(INDEX).await.unwrap();
        (decode(&data), stat.mzxid)
    }

    async fn whole(&self) -> ZNode {
        read_subtree(&self.h.client, "/", &ReadOptions::default())
            .await
            .unwrap()
            .unwrap()
    }
}

fn deploy_paths(plan: &Value) -> Vec<String> {
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["action"] == json!("deploy"))
        .map(|s| format!("{} {}", s["path"].as_str().unwrap(), s["n"]))
        .collect()
}

#[tokio::test]
async fn a_sync_writes_the_index_and_the_agent_reads_it_instead_of_walking() {
    let c = Cluster::new("index-basic").await;
    let rev = c.commit_and_sync("1.0").await;
    let (root, root_mzxid) = c.root().await;
    assert_eq!(root["version"], json!(rev));
    assert_eq!(root["format"], json!(1));
    let (_, hosts) = c.h.client.get_data("/hosts").await.unwrap();
    assert_eq!(
        hosts.mzxid, root_mzxid,
        "the root and /hosts are written by one transaction"
    );
    let generation = root["generation"].as_str().unwrap().to_string();
    let (entry, _) =
        c.h.client
            .get_data(&format!("{INDEX}/{generation}/t-h1"))
            .await
            .unwrap();
    assert_eq!(decode(&entry)["paths"], json!(["/acme/web/deploy/h1"]));

    let indexed = c.plan(&[]).await;
    let walked = c.plan(&["--walk"]).await;
    assert_eq!(indexed["discovery"]["source"], json!("index"), "{indexed}");
    assert_eq!(walked["discovery"]["source"], json!("walk"));
    assert_eq!(indexed["steps"], walked["steps"]);
    assert_eq!(
        deploy_paths(&indexed),
        ["/acme/db 0", "/acme/web 0", "/acme/web 1"]
    );
    let (ir, wr) = (
        indexed["discovery"]["reads"].as_u64().unwrap(),
        walked["discovery"]["reads"].as_u64().unwrap(),
    );
    // 2 deploy nodes: at most 2 × 2 + 10 reads; the walk lists every children list.
    assert!(ir <= 2 * 2 + 10, "index reads {ir}");
    assert!(wr > 180, "walk reads {wr}");

    // A real pass reports it too.
    c.h.deploy(&[]).await.assert_ok();
    assert_eq!(c.h.report()["discovery"]["source"], json!("index"));
    assert_eq!(c.h.deploy_log("foo").len(), 2);

    // Export leaves the index out unless -e; a resync keeps it (never trimmed); resyncs that
    // change no deploy node keep the one live generation.
    let plain = support::run_async(&["tree", "export", "-z", &c.h.conn]).await;
    plain.assert_ok();
    assert!(
        !plain.stdout.contains("deployment-index"),
        "{}",
        plain.stdout
    );
    assert!(plain.stdout.contains("/acme"));
    let all = support::run_async(&["tree", "export", "-e", "-z", &c.h.conn]).await;
    assert!(all.stdout.contains("/deployment-index"), "{}", all.stdout);
    for v in ["1.4", "2.0", "1.0"] {
        c.commit_and_sync(v).await;
    }
    let (gens, _) = c.h.client.get_children(INDEX).await.unwrap();
    assert_eq!(gens, vec!["g1".to_string()]);
    assert_eq!(c.source().await, "index");
}

#[tokio::test]
async fn a_tree_file_may_not_define_the_index() {
    let c = Cluster::new("index-reserved").await;
    c.repo
        .commit(&[("acme.zk", ACME), ("bad.zk", "/deployment-index\n  /x\n")]);
    let run = c.sync(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("/deployment-index is reserved"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn tree_import_then_a_version_bump_is_walked() {
    let c = Cluster::new("index-import").await;
    c.commit_and_sync("1.0").await;
    assert_eq!(c.source().await, "index");
    // zkdeployment tree import of a new deployment for h1 (top-level nodes are not trimmed).
    let file = c.path("more.zk");
    std::fs::write(
        &file,
        "/more\n  /app : worker\n    version = '1.1'\n    /deploy\n      /h1\n",
    )
    .unwrap();
    support::run_async(&["tree", "import", file.to_str().unwrap(), "-z", &c.h.conn])
        .await
        .assert_ok();
    assert!(
        c.root().await.0.get("version").is_none(),
        "tree import invalidates the index"
    );
    c.h.set_version(json!("by-hand")).await;
    assert_eq!(c.source().await, "walk");
    assert!(deploy_paths(&c.plan(&[]).await).contains(&"/more/app 0".to_string()));
    // The next sync (its tree keeps the imported top-level node) must not make the old
    // generation live again: it does not hold /more.
    c.commit_and_sync("1.0-again").await;
    assert_eq!(c.source().await, "index");
    assert!(deploy_paths(&c.plan(&[]).await).contains(&"/more/app 0".to_string()));
}

/// The nodes of the live generation, with their czxid and mzxid.
async fn live_entries(c: &Cluster) -> (String, Vec<(String, i64, i64)>) {
    let (root, _) = c.root().await;
    let generation = root["generation"].as_str().unwrap().to_string();
    let base = format!("{INDEX}/{generation}");
    let mut out = Vec::new();
    let mut todo = vec![base.clone()];
    while let Some(p) = todo.pop() {
        let (_, stat) = c.h.client.get_data(&p).await.unwrap();
        out.push((p.clone(), stat.czxid, stat.mzxid));
        let (children, _) = c.h.client.get_children(&p).await.unwrap();
        todo.extend(children.iter().map(|ch| format!("{p}/{ch}")));
    }
    out.sort();
    (generation, out)
}

#[tokio::test]
async fn a_sync_that_changes_no_deploy_node_writes_no_index_entry() {
    let c = Cluster::new("index-reuse").await;
    c.commit_and_sync("1.0").await;
    assert_eq!(c.source().await, "index");
    let (generation, entries) = live_entries(&c).await;
    assert!(entries.len() > 2, "{entries:?}");
    // A new commit that changes a property (not a deploy node), then one that changes nothing.
    for foo in ["1.1", "1.1"] {
        let rev = c.commit_and_sync(foo).await;
        let (root, _) = c.root().await;
        assert_eq!(root["version"], json!(rev));
        assert_eq!(
            live_entries(&c).await,
            (generation.clone(), entries.clone())
        );
        let (children, _) = c.h.client.get_children(INDEX).await.unwrap();
        assert_eq!(children, vec![generation.clone()]);
        assert_eq!(c.source().await, "index");
    }
    // A change of deploy nodes updates that generation in place (see
    // a_sync_that_changes_a_few_deploy_nodes_writes_only_their_entries).
    let rev = c
        .repo
        .commit(&[("acme.zk", &acme("1.2")), ("filler.zk", &filler(61))]);
    c.sync(&[]).await.assert_ok();
    let (root, _) = c.root().await;
    assert_eq!(root["version"], json!(rev));
    let (name, now) = live_entries(&c).await;
    assert_eq!(name, generation);
    assert_ne!(now, entries);
    assert_eq!(c.source().await, "index");
}

/// The live generation's name, the root's `mzxid`, and every node of the generation with its
/// properties and `mzxid`.
async fn live_nodes(c: &Cluster) -> (String, i64, BTreeMap<String, (Props, i64)>) {
    let (root, root_mzxid) = c.root().await;
    let generation = root["generation"].as_str().unwrap().to_string();
    let mut out = BTreeMap::new();
    let mut todo = vec![format!("{INDEX}/{generation}")];
    while let Some(p) = todo.pop() {
        let (data, stat) = c.h.client.get_data(&p).await.unwrap();
        let (children, _) = c.h.client.get_children(&p).await.unwrap();
        todo.extend(children.iter().map(|ch| format!("{p}/{ch}")));
        out.insert(p, (decode(&data), stat.mzxid));
    }
    (generation, root_mzxid, out)
}

/// What a full rebuild of the index would write as generation `name`: the syncer's walk of
/// the tree as it is, laid out as a whole generation.
async fn rebuilt(c: &Cluster, name: &str) -> BTreeMap<String, Props> {
    let (paths, _) = walk_deploy_nodes(&c.h.client, &|_| true).await.unwrap();
    generation_nodes(name, &paths)
        .into_iter()
        .map(|(p, d)| (p, decode(&d)))
        .collect()
}

/// A sync that changes a few deploy nodes among many updates the live generation in place,
/// in its transaction: the index then equals a full rebuild, the generation keeps its name,
/// and only the generation's node and the entries that changed were written (their `mzxid`
/// is the root's, every other entry's is as before). A running agent deploys what the change
/// asks for, from the index.
#[tokio::test]
async fn a_sync_that_changes_a_few_deploy_nodes_writes_only_their_entries() {
    let c = Cluster::new("index-in-place").await;
    let first = c.commit_and_sync("1.0").await;
    let mut agent = c.h.spawn("agent", &[], &[]);
    let limit = Duration::from_secs(60);
    c.h.wait_status(&first, &["done"], limit).await;
    let (generation, _, mut before) = live_nodes(&c).await;
    let props = |nodes: &BTreeMap<String, (Props, i64)>| -> BTreeMap<String, Props> {
        nodes
            .iter()
            .map(|(p, (d, _))| (p.clone(), d.clone()))
            .collect()
    };
    assert_eq!(props(&before), rebuilt(&c, &generation).await);
    let extra = "  /extra : worker\n    version = '1.1'\n    /deploy\n      /h1\n";
    // 1. h1 gains a deployment, other4 a filler application.
    // 2. h1 loses it again, and /acme/jobs' only target (someone-else) goes.
    let commits = [
        (format!("{}{extra}", acme("1.0")), filler(61)),
        (
            acme("1.0").replace("    /deploy\n      /someone-else\n", ""),
            filler(61),
        ),
    ];
    let changed = [vec!["t-h1", "t-other4"], vec!["t-h1", "t-someone-else"]];
    for ((acme_text, filler_text), changed) in commits.iter().zip(changed) {
        let rev = c
            .repo
            .commit(&[("acme.zk", acme_text), ("filler.zk", filler_text)]);
        c.sync(&[]).await.assert_ok();
        let (name, root_mzxid, after) = live_nodes(&c).await;
        assert_eq!(name, generation, "the live generation, updated in place");
        assert_eq!(props(&after), rebuilt(&c, &generation).await, "{rev}");
        let base = format!("{INDEX}/{generation}");
        for (path, (data, mzxid)) in &after {
            let entry = path
                .strip_prefix(&format!("{base}/"))
                .map(|e| e.split('/').next().unwrap());
            let written = entry.is_none_or(|e| changed.contains(&e));
            if written {
                assert_eq!(*mzxid, root_mzxid, "{path} written with the root");
            } else {
                assert_eq!(
                    Some(&(data.clone(), *mzxid)),
                    before.get(path),
                    "{path} untouched"
                );
            }
        }
        for gone in before.keys().filter(|p| !after.contains_key(*p)) {
            assert!(
                changed.iter().any(|t| gone.contains(&format!("/{t}"))),
                "{gone} deleted"
            );
        }
        c.h.wait_status(&rev, &["done"], limit).await;
        assert_eq!(c.h.report()["discovery"]["source"], json!("index"), "{rev}");
        if changed.contains(&"t-other4") {
            // The first commit: worker deployed once.
            assert_eq!(c.h.deploy_log("worker").len(), 1);
        }
        before = after;
    }
    // The second: /acme/extra undeployed.
    let undeployed = c.h.report()["steps"].as_array().unwrap().iter().any(|s| {
        s["step"]
            .as_str()
            .is_some_and(|t| t.starts_with("undeploy /acme/extra 0"))
    });
    assert!(undeployed, "{}", c.h.report());
    assert_eq!(c.source().await, "index");
    agent.terminate();
    assert_eq!(agent.wait(limit).await, 0, "{}", agent.output());
}

/// An index node written after the root (what a reader sees when a sync updates the live
/// generation between its read of the root and its read of the entries) is not trusted:
/// the pass walks, until the next sync.
#[tokio::test]
async fn an_index_entry_newer_than_the_root_is_walked() {
    let c = Cluster::new("index-newer").await;
    c.commit_and_sync("1.0").await;
    assert_eq!(c.source().await, "index");
    let (root, _) = c.root().await;
    let entry = format!("{INDEX}/{}/t-h1", root["generation"].as_str().unwrap());
    let (data, _) = c.h.client.get_data(&entry).await.unwrap();
    c.h.client.set_data(&entry, &data, None).await.unwrap();
    assert_eq!(c.source().await, "walk");
    c.commit_and_sync("1.4").await;
    assert_eq!(c.source().await, "index");
}

/// An entry naming a node that is not `<app>/deploy/<target>`, written in the transaction
/// that writes `/hosts` and the root (so every `mzxid` check passes), is not trusted: the
/// pass walks (the same steps as `--walk`: foo deployed, not uninstalled) and warns naming
/// the entry.
#[tokio::test]
async fn an_index_entry_naming_no_deploy_node_is_walked_with_a_warning() {
    let c = Cluster::new("index-wrong-entry").await;
    c.commit_and_sync("1.0").await;
    let (root, _) = c.root().await;
    let entry = format!("{INDEX}/{}/t-h1", root["generation"].as_str().unwrap());
    let (data, _) = c.h.client.get_data(&entry).await.unwrap();
    let mut props: Props = decode(&data);
    assert_eq!(props["paths"], json!(["/acme/web/deploy/h1"]), "{props:?}");
    props.insert("paths".into(), json!(["/acme/config"]));
    let (hosts, _) = c.h.client.get_data("/hosts").await.unwrap();
    let (root_data, _) = c.h.client.get_data(INDEX).await.unwrap();
    let mut writer = c.h.client.new_multi_writer();
    writer.add_set_data("/hosts", &hosts, None).unwrap();
    writer.add_set_data(INDEX, &root_data, None).unwrap();
    writer.add_set_data(&entry, &encode(&props), None).unwrap();
    writer.commit().await.unwrap();
    assert_eq!(c.source().await, "walk");
    let plan = c.plan(&[]).await;
    assert_eq!(
        deploy_paths(&plan),
        ["/acme/db 0", "/acme/web 0", "/acme/web 1"]
    );
    let run = c.h.deploy(&["--dry-run", "--json", "--force"]).await;
    assert!(
        run.stderr.contains("WARN")
            && run.stderr.contains(&entry)
            && run.stderr.contains("/acme/config"),
        "{run}"
    );
}

/// A reader's read-ahead guess (the generation of its last snapshot, `next_guess`) keeps
/// naming the live generation across syncs: one that changes no deploy node (the generation
/// made live again), one that changes a few (updated in place), and one after `tree import`
/// (a new generation): each time its entries come with the root, and the deploy nodes are
/// the walk's.
#[tokio::test]
async fn the_read_ahead_keeps_hitting_across_syncs() {
    use zkdeployment::agent::discover::{read_snapshot_guessing, Mode};
    use zkdeployment::agent::model::Host;
    use zkdeployment::zk::index::{read_index, IndexAnswer};
    let c = Cluster::new("index-guess-hits").await;
    let first = c.commit_and_sync("1.0").await;
    let host = Host {
        id: c.h.id.clone(),
        name: c.h.name.clone(),
        role: None,
    };
    let client = &c.h.client;
    let mut guess = read_snapshot_guessing(
        client,
        &host,
        Mode::Index(&json!(first)),
        &Default::default(),
    )
    .await
    .unwrap()
    .next_guess();
    let import = c.path("more.zk");
    std::fs::write(
        &import,
        "/more\n  /app : worker\n    version = '1.1'\n    /deploy\n      /h1\n",
    )
    .unwrap();
    for step in ["reused", "in place", "new"] {
        let rev = match step {
            "reused" => c.commit_and_sync("1.4").await,
            "in place" => {
                let rev = c
                    .repo
                    .commit(&[("acme.zk", &acme("1.4")), ("filler.zk", &filler(61))]);
                c.sync(&[]).await.assert_ok();
                rev
            }
            _ => {
                support::run_async(&["tree", "import", import.to_str().unwrap(), "-z", &c.h.conn])
                    .await
                    .assert_ok();
                c.commit_and_sync("2.0").await
            }
        };
        let version = json!(rev);
        let read = read_index(client, &host.targets(), Some(&version), &guess)
            .await
            .unwrap();
        let walked = read_snapshot_guessing(client, &host, Mode::Walk, &Default::default())
            .await
            .unwrap();
        assert_eq!(
            read.answer,
            IndexAnswer::Paths(walked.deploy_nodes.clone()),
            "{step}"
        );
        assert!(read.hit, "{step}: {guess:?} missed {:?}", read.generation);
        let snap = read_snapshot_guessing(client, &host, Mode::Index(&version), &guess)
            .await
            .unwrap();
        assert_eq!(snap.deploy_nodes, walked.deploy_nodes, "{step}");
        guess = snap.next_guess();
    }
}

#[tokio::test]
async fn a_foreign_writer_then_a_version_bump_is_walked() {
    let c = Cluster::new("index-foreign").await;
    let rev = c.commit_and_sync("1.0").await;
    // What the original's syncer (or any ZooKeeper client) does: write the tree, bump.
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let cl = &c.h.client;
    cl.create(
        "/acme/extra",
        &encode(
            json!({"type": "webapp", "version": "1.0"})
                .as_object()
                .unwrap(),
        ),
        &open,
    )
    .await
    .unwrap();
    cl.create("/acme/extra/deploy", b"", &open).await.unwrap();
    cl.create("/acme/extra/deploy/h1", b"", &open)
        .await
        .unwrap();
    c.h.set_version(json!("foreign")).await;
    assert_eq!(c.source().await, "walk");
    assert!(deploy_paths(&c.plan(&[]).await).contains(&"/acme/extra 0".to_string()));
    // Even a write of /hosts that puts back the very version the index claims is walked.
    c.h.set_version(json!(rev)).await;
    assert_eq!(c.root().await.0["version"], json!(rev));
    assert_eq!(c.source().await, "walk");
    // The next sync trims the foreign node (it is under a .zk node) and writes a fresh index.
    c.commit_and_sync("1.4").await;
    assert_eq!(c.source().await, "index");
    assert!(!deploy_paths(&c.plan(&[]).await).contains(&"/acme/extra 0".to_string()));
}

#[tokio::test]
async fn resume_and_halt_then_resume_are_walked() {
    let c = Cluster::new("index-resume").await;
    let rev = c.commit_and_sync("1.0").await;
    // resume of a running cluster at its synced version changes nothing, not even /hosts:
    // the index stays good.
    support::run_async(&["resume", "-z", &c.h.conn])
        .await
        .assert_ok();
    assert_eq!(c.h.hosts().await["version"], json!(rev));
    assert_eq!(c.source().await, "index");
    // resume --version writes /hosts: walked from then on, even back at the index's version.
    support::run_async(&["resume", "--version", "\"elsewhere\"", "-z", &c.h.conn])
        .await
        .assert_ok();
    assert_eq!(c.source().await, "walk");
    support::run_async(&[
        "resume",
        "--version",
        &json!(rev).to_string(),
        "-z",
        &c.h.conn,
    ])
    .await
    .assert_ok();
    assert_eq!(c.source().await, "walk");

    // A real halt: the agent fails to install, halts the cluster; someone fixes the tree by
    // hand (no tree import, no sync) and resumes the same version.
    c.commit_and_sync("1.4").await;
    assert_eq!(c.source().await, "index");
    if let Pm::Fake(yum) = &c.h.pm {
        yum.set_fail(Some("install foo"));
    }
    c.h.deploy(&[]).await.assert_code(1);
    assert_eq!(c.h.hosts().await["version"], Value::Null, "halted");
    if let Pm::Fake(yum) = &c.h.pm {
        yum.set_fail(None);
    }
    let (data, _) = c.h.client.get_data("/acme/config").await.unwrap();
    let mut config = decode(&data);
    config.insert("foo_version".into(), json!("2.0"));
    c.h.client
        .set_data("/acme/config", &encode(&config), None)
        .await
        .unwrap();
    support::run_async(&["resume", "-z", &c.h.conn])
        .await
        .assert_ok();
    assert_eq!(c.source().await, "walk");
    let plan = c.plan(&[]).await;
    let install = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == json!("install"))
        .unwrap()
        .clone();
    assert_eq!(
        install["version"],
        json!("2.0"),
        "the fixed tree, not the index's"
    );
    c.h.deploy(&[]).await.assert_ok();
    assert_eq!(c.h.report()["discovery"]["source"], json!("walk"));
}

#[tokio::test]
async fn a_sync_that_failed_half_way_leaves_no_index_to_trust() {
    let c = Cluster::new("index-half").await;
    let old = c.commit_and_sync("1.0").await;
    assert_eq!(c.source().await, "index");
    // An ephemeral node where the new tree needs a parent makes the apply fail part-way.
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    c.h.client.create("/zzz", b"", &open).await.unwrap();
    c.h.client.create("/zzz/blocker", b"", &eph).await.unwrap();
    let acme = acme("1.0").replace("/someone-else", "/someone-else\n      /h1");
    let new = c.repo.commit(&[
        ("acme.zk", &format!("{acme}/zzz\n  /blocker\n    /child\n")),
        ("filler.zk", &filler(60)),
    ]);
    let run = c.sync(&[]).await;
    run.assert_code(1);
    assert_eq!(c.h.hosts().await["version"], json!(old));
    assert!(c.root().await.0.get("version").is_none(), "invalidated");
    // The agent (re-running its pass at the old version) walks the half-written tree.
    assert_eq!(c.source().await, "walk");
    // The obstacle goes away; the next sync completes the tree and the index.
    c.h.client.delete("/zzz/blocker", None).await.unwrap();
    c.sync(&[]).await.assert_ok();
    assert_eq!(c.h.hosts().await["version"], json!(new));
    assert_eq!(c.source().await, "index");
}

/// The original agent walks the whole tree and takes every path ending in
/// `/deploy/<host id, name or role>` as a deploy node: nothing under the index may match,
/// whatever the targets are called.
#[tokio::test]
async fn the_original_agents_walk_finds_no_deploy_node_in_the_index() {
    let c = Cluster::new("index-original").await;
    let tree = "/odd
  /a : foo
    version = '1.0'
    /deploy
      /deploy
      /h1
      /t-h1
  /deploy : foo
    version = '1.0'
    /deploy
      /deploy
";
    c.repo.commit(&[("odd.zk", tree)]);
    c.sync(&[]).await.assert_ok();
    let whole = c.whole().await;
    let index = whole.get(INDEX).expect("the index");
    let mut paths = Vec::new();
    fn walk(path: &str, node: &ZNode, out: &mut Vec<String>) {
        out.push(path.to_string());
        for (name, child) in &node.children {
            walk(&format!("{path}/{name}"), child, out);
        }
    }
    walk(INDEX, index, &mut paths);
    assert!(paths.len() > 3, "{paths:?}");
    for p in &paths {
        let parent = p.rsplit_once('/').unwrap().0;
        assert!(
            !parent.ends_with("/deploy") && !p.contains("/deploy/"),
            "{p} looks like a deploy node to the original agent"
        );
    }
    // The target named `deploy` is indexed all the same.
    let generation = c.root().await.0["generation"].as_str().unwrap().to_string();
    let entry = index
        .get(&format!("{generation}/t-deploy"))
        .expect("an entry for the target `deploy`");
    assert_eq!(
        entry.props["paths"],
        json!([
            "/odd/a/deploy/deploy",
            "/odd/deploy/deploy",
            "/odd/deploy/deploy/deploy"
        ])
    );
}

/// A target with many deploy nodes is chunked, and read whole: written in a new generation,
/// updated in place (every chunk rewritten), and, when the change is more than one
/// transaction may carry, written as a new generation again.
#[tokio::test]
async fn a_target_with_many_deploy_nodes_is_chunked_and_read_whole() {
    let c = Cluster::new("index-chunks").await;
    let many = |letter: &str, count: usize| {
        let long = letter.repeat(90);
        let mut text = String::from("/many\n");
        for i in 0..count {
            text.push_str(&format!(
                "  /{long}{i:05} : webapp\n    version = '1.0'\n    /deploy\n      /h1\n"
            ));
        }
        text
    };
    // Written whole; then every path renamed (about 340 KiB of entries: updated in place);
    // then 5,000 paths (more than an in-place update may send: a new generation).
    let mut first = None;
    for (letter, count, same) in [("x", 3000, false), ("y", 3000, true), ("z", 5000, false)] {
        c.repo.commit(&[("many.zk", &many(letter, count))]);
        c.sync(&[]).await.assert_ok();
        let generation = c.root().await.0["generation"].as_str().unwrap().to_string();
        if let Some(first) = &first {
            assert_eq!(
                &generation == first,
                same,
                "{letter}: {first} then {generation}"
            );
        }
        first.get_or_insert(generation.clone());
        let (entry, _) =
            c.h.client
                .get_data(&format!("{INDEX}/{generation}/t-h1"))
                .await
                .unwrap();
        let entry = decode(&entry);
        let chunks = entry["chunks"].as_u64().unwrap();
        assert!(chunks >= 2, "{chunks} chunks");
        assert!(entry.len() < 1024 * 1024);
        let indexed = c.plan(&[]).await;
        let walked = c.plan(&["--walk"]).await;
        assert_eq!(indexed["discovery"]["source"], json!("index"));
        assert_eq!(deploy_paths(&indexed).len(), count);
        assert_eq!(indexed["steps"], walked["steps"]);
    }
}

/// A daemon woken by a sync reads the index with the new version, in the same round trip,
/// and its pass uses what it read: the log says so, the report says the index answered, and
/// the steps are the walk's. A version `/hosts` holds that the index does not describe (a
/// plain version bump after a `tree import`) gets no discovery ahead: that pass walks.
#[tokio::test]
async fn a_daemon_woken_by_a_sync_discovers_with_the_version_read() {
    let c = Cluster::new("index-ahead-daemon").await;
    let first = c.commit_and_sync("1.0").await;
    let mut agent = c.h.spawn("agent", &[], &[]);
    c.h.wait_status(&first, &["done"], Duration::from_secs(60))
        .await;
    let second = c.commit_and_sync("1.4").await;
    c.h.wait_status(&second, &["done"], Duration::from_secs(60))
        .await;
    assert_eq!(c.h.report()["discovery"]["source"], json!("index"));
    // A bump the index does not describe: walked, not read ahead.
    c.h.set_version(json!("bumped")).await;
    c.h.wait_status("bumped", &["done"], Duration::from_secs(60))
        .await;
    assert_eq!(c.h.report()["discovery"]["source"], json!("walk"));
    agent.terminate();
    assert_eq!(agent.wait(Duration::from_secs(30)).await, 0);
    let log = agent.output();
    let ahead: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("discovery (Index, read with the version)"))
        .collect();
    assert_eq!(ahead.len(), 1, "one pass discovered ahead:\n{log}");
    assert!(log.contains("discovery (Walk)"), "{log}");
}
