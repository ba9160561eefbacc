//! Differential property test of the deployment index: on generated trees (symbolic links,
//! property links, roles, host ids and names, `n`, subtypes, versioned package names, and
//! every kind of error discovery reports), the plan made from the index equals the plan made
//! by the walk, host by host. Each case is imported into its own chroot of one real ZooKeeper;
//! the index is written by the syncer's own code and made live as a sync does.

use crate::support;

use proptest::prelude::*;
use serde_json::json;
use zkdeployment::agent::discover::{
    discover_ahead, discover_guessing, read_snapshot_guessing, read_snapshot_with, Mode, Source,
};
use zkdeployment::agent::model::{Host, Installed};
use zkdeployment::agent::plan::{plan, Inputs};
use zkdeployment::sync::index::{live_data, write_generation};
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};
use zkdeployment::zk::index::Guess;
use zkdeployment::zk::Client;

/// The targets deploy nodes may name.
const TARGETS: [&str; 6] = ["h1", "h1.example.com", "h2", "web", "db", "deploy"];

fn hosts() -> Vec<Host> {
    let host = |id: &str, name: &str, role: Option<&str>| Host {
        id: id.into(),
        name: name.into(),
        role: role.map(String::from),
    };
    vec![
        host("h1", "h1.example.com", None),
        host("h2", "h2.example.com", None),
        host("h3", "h3.example.com", Some("web")),
        host("h2", "h2.example.com", Some("db")),
        host("deploy", "deploy", None),
        host("nobody", "nobody.example.com", None),
    ]
}

/// One generated application node.
#[derive(Debug, Clone)]
struct App {
    group: usize,
    ty: usize,
    version: usize,
    targets: Vec<(usize, usize)>,
}

const TYPES: [&str; 9] = [
    "type = 'foo'",
    "type = 'foo sub'",
    "type = 'cache-1.2'",
    "type = 'bar-1.4 x'",
    "type = 'a b c'",
    "type = 42",
    "type => /shared",
    "",
    "type = '-bad'",
];
const VERSIONS: [&str; 8] = [
    "version = '1.0'",
    "version = '2.0'",
    "",
    "version = 7",
    "version => /shared",
    "version => /shared other",
    "version => /missing",
    "version => ../link/app0",
];
const NS: [&str; 5] = ["", "n = 0", "n = 2", "n = 'x'", "n => /shared"];

fn tree_text(apps: &[App], controller: bool, links: bool) -> String {
    let mut text = String::from(
        "/shared\n  type = 'shared-pkg'\n  version = '3.0'\n  other = '4.0'\n  n = 3\n",
    );
    if controller {
        text.push_str("/roles\n  /web : rc\n    version = '1'\n  /db : rc\n");
    }
    for g in 0..3 {
        text.push_str(&format!("/g{g}\n"));
        if links {
            text.push_str("  link -> /g0\n");
        }
        for (i, app) in apps.iter().enumerate().filter(|(_, a)| a.group == g) {
            text.push_str(&format!("  /app{i}\n"));
            for line in [TYPES[app.ty], VERSIONS[app.version]] {
                if !line.is_empty() {
                    text.push_str(&format!("    {line}\n"));
                }
            }
            if !app.targets.is_empty() {
                text.push_str("    /deploy\n");
                let mut seen = Vec::new();
                for (t, n) in &app.targets {
                    if seen.contains(t) {
                        continue;
                    }
                    seen.push(*t);
                    text.push_str(&format!("      /{}\n", TARGETS[*t]));
                    if !NS[*n].is_empty() {
                        text.push_str(&format!("        {}\n", NS[*n]));
                    }
                }
            }
        }
    }
    text
}

fn app() -> impl Strategy<Value = App> {
    (
        0..3usize,
        prop_oneof![4 => 0..4usize, 1 => 0..TYPES.len()],
        prop_oneof![4 => 0..3usize, 1 => 0..VERSIONS.len()],
        prop::collection::vec(
            (
                0..TARGETS.len(),
                prop_oneof![4 => Just(0usize), 1 => 0..NS.len()],
            ),
            0..4,
        ),
    )
        .prop_map(|(group, ty, version, targets)| App {
            group,
            ty,
            version,
            targets,
        })
}

/// Imports the tree, then does what a sync does last: write a generation and, in one
/// transaction, set `/hosts` version and make the generation live.
async fn publish(client: &Client, text: &str) {
    let tree = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    import_tree(client, &tree, "/", Trim::Yes, false)
        .await
        .unwrap();
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let _ = client.create("/hosts", b"{}", &open).await;
    let generation = write_generation(client, None, None).await.unwrap();
    let hosts = serde_json::to_vec(&json!({"version": "v1"})).unwrap();
    let root = live_data(&json!("v1"), &generation);
    let mut writer = client.new_multi_writer();
    writer.add_set_data("/hosts", &hosts, None).unwrap();
    writer
        .add_set_data("/deployment-index", &root, None)
        .unwrap();
    writer.commit().await.unwrap();
}

/// Discovery and plan for a host, from the index and from the walk: the results (or error
/// messages) must be equal, and the index must have been used. The index's are the same
/// whatever was guessed read ahead with its root: the live generation and every node needed
/// (all used), or a wrong generation and nodes of no use.
async fn compare(client: &Client, host: &Host) {
    let version = json!("v1");
    let outcome = |mode, guess: Guess| async move {
        match discover_guessing(client, host, mode, &guess).await {
            Ok((d, snap)) => {
                let steps = plan(Inputs {
                    wanted: &d.deployments,
                    controller: d.controller.as_ref(),
                    role: host.role.as_deref(),
                    installed: &Installed::default(),
                    after: None,
                })
                .map_err(|e| e.to_string());
                (Ok((d, steps)), snap.source)
            }
            Err(e) => (Err(e.to_string()), None),
        }
    };
    let (indexed, source) = outcome(Mode::Index(&version), Guess::default()).await;
    let (walked, _) = outcome(Mode::Walk, Guess::default()).await;
    assert_eq!(indexed, walked, "host {host:?}");
    if indexed.is_ok() {
        assert_eq!(source, Some(Source::Index), "host {host:?}");
    }
    // Errors too were found from the index: it was trusted, its deploy nodes are the walk's.
    let from_index = read_snapshot_with(client, host, Mode::Index(&version))
        .await
        .unwrap();
    let from_walk = read_snapshot_with(client, host, Mode::Walk).await.unwrap();
    assert_eq!(from_index.source, Some(Source::Index));
    assert_eq!(
        from_index.deploy_nodes, from_walk.deploy_nodes,
        "host {host:?}"
    );
    // Read ahead: right, then wrong.
    let right = Guess {
        generation: from_index.generation.clone(),
        nodes: from_index.next_guess().nodes,
    };
    let wrong = Guess {
        generation: Some("g999".into()),
        nodes: vec!["/g0".into(), "/nowhere".into()],
    };
    for guess in [right, wrong] {
        // Discovery ahead of a pass (at the version /hosts holds) finds what the pass's own
        // finds, errors included, and says which version it describes.
        match discover_ahead(client, host, &guess).await {
            Ok(Some((d, snap))) => {
                assert_eq!(snap.version.as_ref(), Some(&version));
                let (d_index, _) = discover_guessing(client, host, Mode::Index(&version), &guess)
                    .await
                    .unwrap();
                assert_eq!(d, d_index, "host {host:?}");
            }
            Ok(None) => panic!("no discovery ahead from a live index: host {host:?}"),
            Err(e) => assert_eq!(Some(e.to_string()), indexed.as_ref().err().cloned()),
        }
        let snap = read_snapshot_guessing(client, host, Mode::Index(&version), &guess)
            .await
            .unwrap();
        assert_eq!(snap.deploy_nodes, from_walk.deploy_nodes, "{guess:?}");
        let (guessed, source) = outcome(Mode::Index(&version), guess.clone()).await;
        assert_eq!(guessed, walked, "host {host:?}, {guess:?}");
        if guessed.is_ok() {
            assert_eq!(source, Some(Source::Index), "host {host:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn the_index_plan_equals_the_walk_plan(
        apps in prop::collection::vec(app(), 1..10),
        controller in any::<bool>(),
        links in any::<bool>(),
    ) {
        let text = tree_text(&apps, controller, links);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let conn = support::chroot("index-diff").await;
            let client = support::connect(&conn).await;
            publish(&client, &text).await;
            for host in hosts() {
                compare(&client, &host).await;
            }
        });
    }
}

/// A reader that guesses right (the generation it last used and the one after it, the nodes
/// it last needed) reads the index's root, its entries and every node discovery needs in one
/// multi-read, and sees the new generation's data; a wrong generation costs the entries' read
/// again, a guess short of a node costs the nodes' read again, and neither changes the answer.
#[tokio::test]
async fn a_right_guess_reads_the_index_and_the_nodes_at_once() {
    use zkdeployment::zk::index::{read_index, IndexAnswer};
    let conn = support::chroot("index-guess").await;
    let client = support::connect(&conn).await;
    let host = hosts().remove(0);
    let tree = |v: &str| format!("/a : foo\n  version = '{v}'\n  /deploy\n    /h1\n");
    publish(&client, &tree("1.0")).await;
    let version = json!("v1");
    let first = read_snapshot_with(&client, &host, Mode::Index(&version))
        .await
        .unwrap();
    let guess = first.next_guess();
    let Some(g1) = &first.generation else {
        panic!("no generation: {first:?}");
    };
    assert_eq!(guess.generation.as_ref(), Some(g1));
    let g2 = format!("g{}", g1[1..].parse::<u64>().unwrap() + 1);
    assert_eq!(
        guess.nodes,
        ["/", "/a", "/a/deploy/h1"],
        "the nodes the first read needed"
    );
    // The next sync writes the next generation, as guessed.
    publish(&client, &tree("2.0")).await;
    // Root and /hosts, two generations and their 2 targets' entries, the 3 nodes: 11, at once.
    let at_once = 2 + 2 * 3 + 3;
    let read = read_index(&client, &host.targets(), Some(&version), &guess)
        .await
        .unwrap();
    assert_eq!(read.generation.as_ref(), Some(&g2), "after {g1}");
    assert_eq!(read.answer, IndexAnswer::Paths(vec!["/a/deploy/h1".into()]));
    assert!(read.hit);
    assert_eq!(read.reads, at_once);
    assert_eq!(read.ahead.len(), 3);
    let snap = read_snapshot_guessing(&client, &host, Mode::Index(&version), &guess)
        .await
        .unwrap();
    assert_eq!(snap.reads, at_once, "no node read again");
    assert_eq!(snap.nodes["/a"]["version"], json!("2.0"));
    // A generation not live: its entries are read again (3 more).
    let wrong = Guess {
        generation: Some("g7".into()),
        nodes: guess.nodes.clone(),
    };
    let read = read_index(&client, &host.targets(), Some(&version), &wrong)
        .await
        .unwrap();
    assert_eq!(read.answer, IndexAnswer::Paths(vec!["/a/deploy/h1".into()]));
    assert!(!read.hit);
    assert_eq!(read.reads, at_once + 3);
    // Short of a node: the nodes are read again, all 3 (one snapshot).
    let short = Guess {
        generation: guess.generation.clone(),
        nodes: vec!["/".into()],
    };
    let snap = read_snapshot_guessing(&client, &host, Mode::Index(&version), &short)
        .await
        .unwrap();
    assert_eq!(snap.reads, 2 + 2 * 3 + 1 + 3);
    assert_eq!(snap.nodes["/a"]["version"], json!("2.0"));
    assert_eq!(snap.deploy_nodes, ["/a/deploy/h1"]);
}

/// Discovery ahead of a pass answers only from an index that describes the version `/hosts`
/// holds, and says which; when `/hosts` was written after the index (a resume, a halt, a
/// hand edit), it answers nothing and walks nothing: the pass discovers as always.
#[tokio::test]
async fn discovery_ahead_answers_only_from_a_live_index() {
    let conn = support::chroot("index-ahead").await;
    let client = support::connect(&conn).await;
    let host = hosts().remove(0);
    publish(&client, "/a : foo\n  version = '1.0'\n  /deploy\n    /h1\n").await;
    let (found, snap) = discover_ahead(&client, &host, &Guess::default())
        .await
        .unwrap()
        .expect("an answer from the live index");
    assert_eq!(snap.version, Some(json!("v1")));
    assert_eq!(snap.source, Some(Source::Index));
    assert_eq!(snap.deploy_nodes, ["/a/deploy/h1"]);
    assert_eq!(found.deployments.len(), 1);
    client
        .set_data("/hosts", br#"{"version": "v2"}"#, None)
        .await
        .unwrap();
    let ahead = discover_ahead(&client, &host, &Guess::default())
        .await
        .unwrap();
    assert!(ahead.is_none(), "{ahead:?}");
}
