//! zc.zk compatibility: the documented behaviour of zc.zk's tree import, export, symbolic links,
//! property links and walk (its README.txt and tests.py), replayed against a real ZooKeeper
//! through this crate's library API (and the `tree` commands where the original had scripts).
//!
//! Expected outputs follow the original except for this project's deliberate differences
//! (README "Differences from the original"): literals are parsed, not evaluated; export writes strings as `'x'`
//! (no `u` prefix); property links export as `name => target`, so export then import gives back
//! the same data. Our import also writes only what differs (re-importing an identical tree
//! makes no write), where the original rewrote every listed node.

use crate::support;

use serde_json::{json, Value};
use zkdeployment::tree::parse::parse;
use zkdeployment::tree::Props;
use zkdeployment::zk::export::{export_tree, ExportError};
use zkdeployment::zk::import::{import_tree, ImportError, Imported, Trim};
use zkdeployment::zk::links::{property, resolve, LinkError};
use zkdeployment::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use zkdeployment::zk::{decode, encode, Client};
use zookeeper_client as zkc;

// ---------------------------------------------------------------------------------------------
// Helpers.

/// Removes the common indentation and a leading newline; every line ends with `\n`.
fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for line in lines {
        out.push_str(line.get(indent..).unwrap_or("").trim_end());
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn strings(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|s| s.to_string()).collect()
}

fn props(v: Value) -> Props {
    v.as_object().expect("an object").clone()
}

fn open() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())
}

fn ephemeral_options() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::Ephemeral.with_acls(zkc::Acls::anyone_all())
}

/// A fresh chroot and a client in it.
async fn new_zk(label: &str) -> (String, Client) {
    let conn = support::chroot(label).await;
    let client = support::connect(&conn).await;
    (conn, client)
}

async fn create(c: &Client, path: &str, data: &str) {
    c.create(path, data.as_bytes(), &open())
        .await
        .unwrap_or_else(|e| panic!("create {path}: {e}"));
}

/// An ephemeral node owned by `c`'s session (zc.zk's `register`).
async fn register(c: &Client, path: &str, data: &str) {
    c.create(path, data.as_bytes(), &ephemeral_options())
        .await
        .unwrap_or_else(|e| panic!("create ephemeral {path}: {e}"));
}

async fn set(c: &Client, path: &str, data: &str) {
    c.set_data(path, data.as_bytes(), None)
        .await
        .unwrap_or_else(|e| panic!("set {path}: {e}"));
}

async fn raw(c: &Client, path: &str) -> String {
    let (data, _) = c
        .get_data(path)
        .await
        .unwrap_or_else(|e| panic!("get {path}: {e}"));
    String::from_utf8(data).expect("utf-8 node data")
}

async fn exists(c: &Client, path: &str) -> bool {
    c.check_stat(path)
        .await
        .unwrap_or_else(|e| panic!("stat {path}: {e}"))
        .is_some()
}

async fn try_import(
    c: &Client,
    text: &str,
    at: &str,
    trim: Trim,
    dry_run: bool,
) -> Result<Imported, ImportError> {
    let tree = parse(&dedent(text)).unwrap_or_else(|e| panic!("parse error {e} in\n{text}"));
    import_tree(c, &tree, at, trim, dry_run).await
}

async fn import(c: &Client, text: &str, at: &str, trim: Trim, dry_run: bool) -> Imported {
    try_import(c, text, at, trim, dry_run)
        .await
        .unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// zc.zk's `export_tree(path)` (ephemeral nodes left out).
async fn export(c: &Client, path: &str) -> String {
    export_tree(c, path, false, None)
        .await
        .unwrap_or_else(|e| panic!("export {path}: {e}"))
}

/// zc.zk's `print_tree(path)` (ephemeral nodes included).
async fn print_tree(c: &Client, path: &str) -> String {
    export_tree(c, path, true, None)
        .await
        .unwrap_or_else(|e| panic!("export {path}: {e}"))
}

/// The whole chroot, ephemeral nodes included (a `links::NodeSource`).
async fn snapshot(c: &Client) -> ZNode {
    read_subtree(c, "/", &ReadOptions::default())
        .await
        .expect("read the tree")
        .expect("the chroot exists")
}

/// Paths of a subtree in walk order (pre-order, children sorted).
fn walk(node: &ZNode, path: &str, out: &mut Vec<String>) {
    out.push(path.to_string());
    for (name, child) in &node.children {
        let cpath = if path == "/" {
            format!("/{name}")
        } else {
            format!("{path}/{name}")
        };
        walk(child, &cpath, out);
    }
}

fn prop_of<'a>(snap: &'a ZNode, path: &str) -> &'a Props {
    &snap
        .get(path)
        .unwrap_or_else(|| panic!("no node {path} in the snapshot"))
        .props
}

// ---------------------------------------------------------------------------------------------
// The README's running example.

/// The README's first tree (`tree_text`).
const README_TREE: &str = "
/lb : ipvs
  /pools
    /cms
      # The address is fixed because it's
      # exposed externally
      address = '1.2.3.4:80'
      providers -> /cms/providers
    /retail
      address = '1.2.3.5:80'
      providers -> /cms/providers

/cms : z4m cms
  threads = 3
  /providers
  /databases
    /main
      /providers

/retail : z4m retail
  threads = 1
  /providers
  /databases
    main -> /cms/databases/main
    /ugc
      /providers
";

/// The README's updated tree (second `tree_text`).
const README_TREE_2: &str = "
/lb : ipvs
  /pools
    /cms
      # The address is fixed because it's
      # exposed externally
      address = '1.2.3.4:80'
      providers -> /cms/providers

/cms : z4m cms
  threads = 4
  /providers
  /databases
    /main
      /providers
";

/// The README's `/fooservice` (set through `properties`) with three registered servers.
async fn fooservice(c: &Client, with_servers: bool) {
    create(c, "/fooservice", r#"{"secret":"1234","threads":3}"#).await;
    create(c, "/fooservice/providers", "").await;
    if with_servers {
        for port in [8080, 8081, 8082] {
            register(
                c,
                &format!("/fooservice/providers/192.168.0.42:{port}"),
                r#"{"pid":9999}"#,
            )
            .await;
        }
    }
}

const README_EXPORT: &str = "
/cms : z4m cms
  threads = 3
  /databases
    /main
      /providers
  /providers
/fooservice
  secret = '1234'
  threads = 3
  /providers
/lb : ipvs
  /pools
    /cms
      address = '1.2.3.4:80'
      providers -> /cms/providers
    /retail
      address = '1.2.3.5:80'
      providers -> /cms/providers
/retail : z4m retail
  threads = 1
  /databases
    main -> /cms/databases/main
    /ugc
      /providers
  /providers
";

/// A chroot holding the README's state after its first `import_tree(tree_text)`.
async fn readme_setup(label: &str) -> (String, Client) {
    let (conn, c) = new_zk(label).await;
    fooservice(&c, true).await;
    let done = import(&c, README_TREE, "/", Trim::Report, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    assert_eq!(done.writes, 14, "one create per node of the text");
    (conn, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_import_into_empty_tree_then_export() {
    let (_conn, c) = readme_setup("readme-import").await;
    // The special /zookeeper node (absent in a chroot) and ephemeral nodes are left out; each
    // node lists its properties, then its links, then its children, each sorted by name.
    assert_eq!(export(&c, "/").await, dedent(README_EXPORT));
    // Types are stored as the `type` property, inner spaces kept.
    let snap = snapshot(&c).await;
    assert_eq!(
        prop_of(&snap, "/cms"),
        &props(json!({"type": "z4m cms", "threads": 3}))
    );
    assert_eq!(prop_of(&snap, "/lb"), &props(json!({"type": "ipvs"})));
    assert_eq!(
        prop_of(&snap, "/lb/pools/cms"),
        &props(json!({"address": "1.2.3.4:80", "providers ->": "/cms/providers"}))
    );
    assert_eq!(
        prop_of(&snap, "/retail/databases"),
        &props(json!({"main ->": "/cms/databases/main"}))
    );
    assert_eq!(raw(&c, "/cms").await, r#"{"threads":3,"type":"z4m cms"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_export_a_portion_with_and_without_ephemeral_nodes() {
    let (_conn, c) = readme_setup("readme-portion").await;
    assert_eq!(
        export(&c, "/fooservice").await,
        dedent(
            "
            /fooservice
              secret = '1234'
              threads = 3
              /providers
            "
        )
    );
    assert_eq!(
        print_tree(&c, "/fooservice").await,
        dedent(
            "
            /fooservice
              secret = '1234'
              threads = 3
              /providers
                /192.168.0.42:8080
                  pid = 9999
                /192.168.0.42:8081
                  pid = 9999
                /192.168.0.42:8082
                  pid = 9999
            "
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_reimport_reports_then_trims_extra_paths() {
    let (_conn, c) = readme_setup("readme-reimport").await;

    // Changes are applied; left-over nodes are reported, not removed. Top-level nodes that the
    // text leaves out (/retail, /fooservice) are neither trimmed nor reported.
    let done = import(&c, README_TREE_2, "/", Trim::Report, false).await;
    assert_eq!(
        done.lines,
        strings(&["extra path not trimmed: /lb/pools/retail"])
    );
    assert_eq!(done.writes, 1, "only /cms changed (threads 3 -> 4)");
    let expected =
        dedent(README_EXPORT).replace("threads = 3\n  /databases", "threads = 4\n  /databases");
    assert_eq!(export(&c, "/").await, expected);

    // trim=True, dry run: what it would do, and nothing done.
    let before = snapshot(&c).await;
    let done = import(&c, README_TREE_2, "/", Trim::Yes, true).await;
    assert_eq!(done.lines, strings(&["would delete /lb/pools/retail."]));
    assert_eq!(done.writes, 0);
    assert_eq!(snapshot(&c).await, before, "a dry run writes nothing");

    // trim=False: silent, and nothing trimmed (the dry run still sees it).
    let done = import(&c, README_TREE_2, "/", Trim::No, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    assert_eq!(done.writes, 0);
    let done = import(&c, README_TREE_2, "/", Trim::Yes, true).await;
    assert_eq!(done.lines, strings(&["would delete /lb/pools/retail."]));

    // trim=True.
    let done = import(&c, README_TREE_2, "/", Trim::Yes, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    assert_eq!(done.writes, 1);
    assert_eq!(
        export(&c, "/").await,
        dedent(
            "
            /cms : z4m cms
              threads = 4
              /databases
                /main
                  /providers
              /providers
            /fooservice
              secret = '1234'
              threads = 3
              /providers
            /lb : ipvs
              /pools
                /cms
                  address = '1.2.3.4:80'
                  providers -> /cms/providers
            /retail : z4m retail
              threads = 1
              /databases
                main -> /cms/databases/main
                /ugc
                  /providers
              /providers
            "
        )
    );
    // The registered (ephemeral) servers are still there.
    assert!(exists(&c, "/fooservice/providers/192.168.0.42:8080").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_export_with_a_new_name_and_import_elsewhere() {
    let (_conn, c) = readme_setup("readme-rename").await;
    let text = export_tree(&c, "/cms/databases/main", false, Some("cms"))
        .await
        .unwrap();
    assert_eq!(text, "/cms\n  /providers\n");
    create(&c, "/databases", "").await;
    let done = import(&c, &text, "/databases", Trim::Report, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    assert_eq!(
        export(&c, "/databases").await,
        "/databases\n  /cms\n    /providers\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_symbolic_links_resolve_anywhere_in_a_path() {
    let (_conn, c) = readme_setup("readme-symlinks").await;
    let snap = snapshot(&c).await;
    assert_eq!(
        resolve(&snap, "/lb/pools/cms/providers"),
        Ok("/cms/providers".to_string())
    );
    assert_eq!(
        resolve(&snap, "/retail/databases/main/providers"),
        Ok("/cms/databases/main/providers".to_string())
    );

    // The link can be in the middle of the path.
    register(&c, "/cms/providers/1.2.3.4:5", r#"{"pid":9999}"#).await;
    let snap = snapshot(&c).await;
    assert_eq!(
        resolve(&snap, "/lb/pools/cms/providers/1.2.3.4:5"),
        Ok("/cms/providers/1.2.3.4:5".to_string())
    );
    // Properties are read through links.
    assert_eq!(
        property(&snap, "/lb/pools/cms/providers/1.2.3.4:5", "pid"),
        Ok(Some(json!(9999)))
    );
    assert_eq!(
        property(&snap, "/retail/databases/main", "threads"),
        Ok(None)
    );

    // A real child shadows a link of the same name.
    create(&c, "/lb/pools/cms/providers", "").await;
    let snap = snapshot(&c).await;
    assert_eq!(
        resolve(&snap, "/lb/pools/cms/providers"),
        Ok("/lb/pools/cms/providers".to_string())
    );
    assert_eq!(
        resolve(&snap, "/lb/pools/cms/providers/1.2.3.4:5"),
        Err(LinkError::NoNode(
            "/lb/pools/cms/providers/1.2.3.4:5".to_string()
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_relative_symbolic_links() {
    let (_conn, c) = new_zk("relative-links").await;
    import(
        &c,
        "
        /a
          /b
            l -> c
            l2 -> ../c
            l3 -> ./c
            l4 -> ../b/./c/..
            gone -> ../nothing
            /c
          /c
        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let snap = snapshot(&c).await;
    assert_eq!(resolve(&snap, "/a/b/l"), Ok("/a/b/c".to_string()));
    assert_eq!(resolve(&snap, "/a/b/l2"), Ok("/a/c".to_string()));
    assert_eq!(resolve(&snap, "/a/b/l3"), Ok("/a/b/c".to_string()));
    assert_eq!(resolve(&snap, "/a/b/l4"), Ok("/a/b".to_string()));
    assert!(matches!(
        resolve(&snap, "/a/b/gone"),
        Err(LinkError::NoNode(_))
    ));
    assert_eq!(
        resolve(&snap, "/a/b/missing"),
        Err(LinkError::NoNode("/a/b/missing".to_string()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangling_symbolic_link_error_names_the_path_asked_for() {
    // zc.zk's resolve re-raises NoNodeError with its own path at every level, so the error
    // always names the path the caller asked for, as it does when a parent is missing.
    let (_conn, c) = new_zk("dangling-link").await;
    import(
        &c,
        "/a\n  /b\n    gone -> ../nothing\n    far -> /x/y/z\n",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let snap = snapshot(&c).await;
    assert_eq!(
        resolve(&snap, "/a/b/gone"),
        Err(LinkError::NoNode("/a/b/gone".to_string()))
    );
    assert_eq!(
        resolve(&snap, "/a/b/far/q"),
        Err(LinkError::NoNode("/a/b/far/q".to_string()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_property_links_at_a_non_root_import_point() {
    let (_conn, c) = new_zk("readme-plinks").await;
    fooservice(&c, false).await;
    create(&c, "/test-propery-links", "").await;
    let source = "
        /cms : z4m cms
          threads => /fooservice threads
          /databases
            /main
              /providers
          /providers
        /fooservice
          secret = u'1234'
          threads = 3
          /providers
        /lb : ipvs
          /pools
            /cms
              address = u'1.2.3.4:80'
              providers -> /cms/providers
        ";
    let done = import(&c, source, "/test-propery-links", Trim::Report, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    let snap = snapshot(&c).await;
    assert_eq!(
        prop_of(&snap, "/test-propery-links/cms").get("threads =>"),
        Some(&json!("/fooservice threads"))
    );
    assert_eq!(
        property(&snap, "/test-propery-links/cms", "threads"),
        Ok(Some(json!(3)))
    );

    // Without a property name, the referring name is used. Properties not in the text (here the
    // type) are gone; the children left out are reported (they are not top-level nodes).
    let done = import(
        &c,
        "/cms\n  threads => /fooservice\n",
        "/test-propery-links",
        Trim::Report,
        false,
    )
    .await;
    assert_eq!(
        done.lines,
        strings(&[
            "extra path not trimmed: /test-propery-links/cms/databases",
            "extra path not trimmed: /test-propery-links/cms/providers",
        ])
    );
    let snap = snapshot(&c).await;
    assert_eq!(
        prop_of(&snap, "/test-propery-links/cms"),
        &props(json!({"threads =>": "/fooservice"}))
    );
    assert_eq!(
        property(&snap, "/test-propery-links/cms", "threads"),
        Ok(Some(json!(3)))
    );

    // The link's path is absolute: it names the root's /fooservice, not the imported sibling.
    set(&c, "/fooservice", r#"{"secret":"1234","threads":7}"#).await;
    let snap = snapshot(&c).await;
    assert_eq!(
        property(&snap, "/test-propery-links/cms", "threads"),
        Ok(Some(json!(7)))
    );

    // Export writes the link so that it imports back (the original wrote `threads => = u'...'`).
    let text = export(&c, "/test-propery-links/cms").await;
    assert_eq!(
        text,
        dedent(
            "
            /cms
              threads => /fooservice
              /databases
                /main
                  /providers
              /providers
            "
        )
    );
    let done = import(&c, &text, "/test-propery-links", Trim::Report, false).await;
    assert_eq!((done.lines, done.writes), (vec![], 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_import_and_export_scripts() {
    let (conn, c) = new_zk("readme-scripts").await;
    fooservice(&c, true).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mytree.txt");
    std::fs::write(&file, "/provision\n  /node1\n  /node2\n").unwrap();
    let file = file.to_str().unwrap();

    let run = support::run_async(&["tree", "import", file, "/fooservice", "-z", &conn]).await;
    run.assert_ok();
    assert_eq!(run.stdout, "");
    let expected_print = dedent(
        "
        /fooservice
          secret = '1234'
          threads = 3
          /providers
            /192.168.0.42:8080
              pid = 9999
            /192.168.0.42:8081
              pid = 9999
            /192.168.0.42:8082
              pid = 9999
          /provision
            /node1
            /node2
        ",
    );
    assert_eq!(print_tree(&c, "/").await, expected_print);

    // Export script: `-e` includes ephemeral nodes; the default leaves them out.
    let run = support::run_async(&["tree", "export", "-e", "/fooservice", "-z", &conn]).await;
    run.assert_ok();
    assert_eq!(run.stdout, expected_print);
    let run = support::run_async(&["tree", "export", "/fooservice", "-z", &conn]).await;
    run.assert_ok();
    assert_eq!(
        run.stdout,
        "/fooservice\n  secret = '1234'\n  threads = 3\n  /providers\n  /provision\n    /node1\n    /node2\n"
    );
    let run = support::run_async(&["tree", "export", "-z", &conn]).await;
    run.assert_ok();
    assert_eq!(
        run.stdout,
        "/fooservice\n  secret = '1234'\n  threads = 3\n  /providers\n  /provision\n    /node1\n    /node2\n"
    );

    // Read from stdin, dry run.
    let before = snapshot(&c).await;
    let run = support::run_stdin_async(
        &["tree", "import", "-n", "-", "/fooservice", "-z", &conn],
        "/x\n/y",
    )
    .await;
    run.assert_ok();
    assert_eq!(run.stdout, "add /fooservice/x\nadd /fooservice/y\n");
    let run = support::run_stdin_async(&["tree", "import", "-n", "-", "-z", &conn], "/x\n/y").await;
    run.assert_ok();
    assert_eq!(run.stdout, "add /x\nadd /y\n");

    // Trim, dry run: /fooservice/provision is listed, so its children are trimmed; the import
    // point's own children (/fooservice/providers) are top-level nodes and never trimmed.
    let run = support::run_stdin_async(
        &[
            "tree",
            "import",
            "-n",
            "--trim",
            "-",
            "/fooservice",
            "-z",
            &conn,
        ],
        "/provision\n/y",
    )
    .await;
    run.assert_ok();
    assert_eq!(
        run.stdout,
        "would delete /fooservice/provision/node1.\nwould delete /fooservice/provision/node2.\nadd /fooservice/y\n"
    );
    assert_eq!(snapshot(&c).await, before, "dry runs write nothing");

    // A trailing slash on the import point is ignored (zc.zk strips it).
    let run = support::run_stdin_async(
        &["tree", "import", "-", "/fooservice/", "-z", &conn],
        "/y\n",
    )
    .await;
    run.assert_ok();
    assert!(exists(&c, "/fooservice/y").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_walk_with_and_without_ephemeral_nodes() {
    let (_conn, c) = new_zk("readme-walk").await;
    fooservice(&c, true).await;
    import(
        &c,
        "/provision\n  /node1\n  /node2\n",
        "/fooservice",
        Trim::Report,
        false,
    )
    .await;

    let mut paths = Vec::new();
    walk(&snapshot(&c).await, "/", &mut paths);
    assert_eq!(
        paths,
        strings(&[
            "/",
            "/fooservice",
            "/fooservice/providers",
            "/fooservice/providers/192.168.0.42:8080",
            "/fooservice/providers/192.168.0.42:8081",
            "/fooservice/providers/192.168.0.42:8082",
            "/fooservice/provision",
            "/fooservice/provision/node1",
            "/fooservice/provision/node2",
        ])
    );

    // Ephemeral nodes can be left out. (The original's `walk(ephemeral=False)` forgot to pass
    // the flag down and listed them anyway; leaving them out is what it documents.)
    let opts = ReadOptions {
        include_ephemeral: false,
        skip: &|_| false,
    };
    let sub = read_subtree(&c, "/fooservice", &opts)
        .await
        .unwrap()
        .unwrap();
    let mut paths = Vec::new();
    walk(&sub, "/fooservice", &mut paths);
    assert_eq!(
        paths,
        strings(&[
            "/fooservice",
            "/fooservice/providers",
            "/fooservice/provision",
            "/fooservice/provision/node1",
            "/fooservice/provision/node2",
        ])
    );
    // Walking a missing path yields nothing.
    assert_eq!(
        read_subtree(&c, "/nothing", &ReadOptions::default())
            .await
            .unwrap(),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// tests.py

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resilient_import_accepts_any_spacing_around_operators() {
    let (_conn, c) = new_zk("resilient").await;
    import(
        &c,
        "
        /test
          a=1
          b      =1
          c=      1
          ad->/x
          af          ->/x
          ae->         /x
        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    assert_eq!(
        export(&c, "/test").await,
        "/test\n  a = 1\n  b = 1\n  c = 1\n  ad -> /x\n  ae -> /x\n  af -> /x\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_errors_name_their_line_and_write_nothing() {
    let (conn, c) = new_zk("import-errors").await;
    let e = parse("\n/test\n  a= 1+\n").unwrap_err();
    assert_eq!(e.line, 3);
    assert!(
        e.message.starts_with("Error unexpected EOF while parsing"),
        "{e}"
    );
    assert!(e.message.ends_with("in expression: '1+' in line 3"), "{e}");
    let e = parse("\n/test\n  a ->\n").unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (3, "Bad link format: 'a ->'"));
    assert_eq!(
        parse("x = 1").unwrap_err().message,
        "Can't import properties above imported nodes."
    );
    assert_eq!(
        parse("/y\nx = 1").unwrap_err().message,
        "Can't import properties above imported nodes."
    );

    // Through the command: exit 1, FILE:LINE: message, and no node written (not even the
    // nodes before the bad line).
    let run = support::run_stdin_async(
        &["tree", "import", "-", "-z", &conn],
        "/ok\n/test\n  a ->\n",
    )
    .await;
    run.assert_code(1);
    assert!(run.stderr.contains("-:3: Bad link format: 'a ->'"), "{run}");
    assert!(
        c.list_children("/").await.unwrap().is_empty(),
        "nothing imported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_dry_run_prints_the_diff_and_writes_nothing() {
    let (_conn, c) = new_zk("dry-run").await;
    import(
        &c,
        "
        /test
          a=1
          b = 2
          /c1
            /c12
          /c2
          ae->         /x
          ad->         /y
        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let new_text = "
        /test
          a=2
          /c1
            /c12
              a = 1
              b -> /b
              /c123
          ae->         /z
        ";
    let before = snapshot(&c).await;
    let done = import(&c, new_text, "/", Trim::Report, true).await;
    assert_eq!(
        done.lines,
        strings(&[
            "/test a change from 1 to 2",
            "/test remove link ad -> /y",
            "/test ae link change from /x to /z",
            "/test remove property b = 2",
            "extra path not trimmed: /test/c2",
            "/test/c1/c12 add property a = 1",
            "/test/c1/c12 add link b -> /b",
            "add /test/c1/c12/c123",
        ])
    );
    assert_eq!(done.writes, 0);
    assert_eq!(snapshot(&c).await, before, "same data, versions and mzxids");
    assert_eq!(
        export(&c, "/test").await,
        "/test\n  a = 1\n  b = 2\n  ad -> /y\n  ae -> /x\n  /c1\n    /c12\n  /c2\n"
    );

    // The same import for real.
    let done = import(&c, new_text, "/", Trim::Report, false).await;
    assert_eq!(done.lines, strings(&["extra path not trimmed: /test/c2"]));
    assert_eq!(
        done.writes, 3,
        "set /test, set /test/c1/c12, create /test/c1/c12/c123"
    );
    assert_eq!(
        export(&c, "/test").await,
        "/test\n  a = 2\n  ae -> /z\n  /c1\n    /c12\n      a = 1\n      b -> /b\n      /c123\n  /c2\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_types_property_links_and_values_with_str() {
    let (_conn, c) = new_zk("dry-run-values").await;
    import(
        &c,
        "
        /p : foo
          l = [1, 'a']
          t = True
          s = 'same'
          x => /a b
          /kid
        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let before = snapshot(&c).await;
    let done = import(
        &c,
        "
        /p : bar
          l = [1, 'a', None]
          d = {'k': 2}
          s = 'same'
          x => /a
          y => /q
          /kid
            /grandkid
          /new
            /newkid
        /top
          /below
        ",
        "/",
        Trim::Yes,
        true,
    )
    .await;
    // Old keys sorted, then new keys sorted; values printed with str() (strings bare); property
    // links are ordinary properties here; a missing node is announced and not descended into.
    assert_eq!(
        done.lines,
        strings(&[
            "/p l change from [1, 'a'] to [1, 'a', None]",
            "/p remove property t = True",
            "/p type change from foo to bar",
            "/p x => change from /a b to /a",
            "/p add property d = {'k': 2}",
            "/p add property y => = /q",
            "add /p/kid/grandkid",
            "add /p/new",
            "add /top",
        ])
    );
    assert_eq!(done.writes, 0);
    assert_eq!(snapshot(&c).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_follows_links_detects_loops_and_normalises_dots() {
    let (_conn, c) = new_zk("resolve").await;
    import(
        &c,
        "
        /top
         /a
           top -> /top
           loop -> /top/a/b/loop
           /b
             top -> /top
             loop -> /top/a/loop
             /c
               top -> /top
               /d
                 name = 'd'
                 /e
                 top -> /top
                 loop -> /top/a/b/c/d/loop

        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let snap = snapshot(&c).await;
    let virtual_d = "/top/a/top/a/b/top/a/b/c/top/a/b/c/d";
    assert_eq!(
        resolve(&snap, "/top/a/b/c/d"),
        Ok("/top/a/b/c/d".to_string())
    );
    assert_eq!(resolve(&snap, virtual_d), Ok("/top/a/b/c/d".to_string()));
    let real = resolve(&snap, virtual_d).unwrap();
    assert_eq!(
        prop_of(&snap, &real),
        &props(json!({"loop ->": "/top/a/b/c/d/loop", "name": "d", "top ->": "/top"}))
    );
    assert_eq!(property(&snap, virtual_d, "name"), Ok(Some(json!("d"))));

    // Registering at the virtual path registers at the real one.
    register(&c, &format!("{real}/addr"), r#"{"pid":1}"#).await;
    let snap = snapshot(&c).await;
    let real = resolve(&snap, virtual_d).unwrap();
    assert_eq!(
        snap.get(&real).unwrap().children.keys().collect::<Vec<_>>(),
        vec!["addr", "e"]
    );

    assert_eq!(
        resolve(&snap, "/top/a/top/a/b/top/x"),
        Err(LinkError::NoNode("/top/a/top/a/b/top/x".to_string()))
    );
    assert_eq!(
        resolve(&snap, "/top/a/b/c/d/loop"),
        Err(LinkError::Loop(strings(&[
            "/top/a/b/c/d/loop",
            "/top/a/b/c/d/loop"
        ])))
    );
    assert_eq!(
        resolve(&snap, "/top/a/loop/b/c/d"),
        Err(LinkError::Loop(strings(&[
            "/top/a/loop",
            "/top/a/b/loop",
            "/top/a/loop"
        ])))
    );
    assert_eq!(
        resolve(&snap, "/top/a/b/c/d/./../.."),
        Ok("/top/a/b".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_property_links() {
    let (_conn, c) = new_zk("relative-plinks").await;
    import(
        &c,
        "

        /a
          /b
            x => c x
            xx => ./c x
            x2 => .. x
            x3 => ../c x
            x22 => ./.. x
            x33 => ./../c x
            x333 => .././c x
            /c
              x=1
          /c
            x = 3
          x = 2

        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let snap = snapshot(&c).await;
    for (key, want) in [
        ("x", 1),
        ("xx", 1),
        ("x2", 2),
        ("x22", 2),
        ("x3", 3),
        ("x33", 3),
        ("x333", 3),
    ] {
        assert_eq!(
            property(&snap, "/a/b", key),
            Ok(Some(json!(want))),
            "property {key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn property_links_named_defaulted_chained_and_through_symlinks() {
    let (_conn, c) = new_zk("plink-kinds").await;
    import(
        &c,
        "
        /conf
          threads = 4
          name = 'conf'
          /inner
            size = 10
            up => .. threads
        /alias
          real -> /conf
        /mid
          hop => /conf name
        /svc
          threads => /conf
          count => /conf threads
          size => /conf/inner
          viasym => /alias/real threads
          chain => /mid hop
          direct = 'mine'
          direct => /conf name
        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let snap = snapshot(&c).await;
    assert_eq!(
        property(&snap, "/svc", "threads"),
        Ok(Some(json!(4))),
        "name defaults to the key"
    );
    assert_eq!(
        property(&snap, "/svc", "count"),
        Ok(Some(json!(4))),
        "named property"
    );
    assert_eq!(property(&snap, "/svc", "size"), Ok(Some(json!(10))));
    assert_eq!(
        property(&snap, "/svc", "viasym"),
        Ok(Some(json!(4))),
        "symbolic link in the path"
    );
    assert_eq!(
        property(&snap, "/svc", "chain"),
        Ok(Some(json!("conf"))),
        "chains are followed"
    );
    assert_eq!(
        property(&snap, "/svc", "direct"),
        Ok(Some(json!("mine"))),
        "a real value wins over a link"
    );
    assert_eq!(property(&snap, "/svc", "nothing"), Ok(None));
    // Reading through a symbolically linked node path; `..` relative to the path as given.
    assert_eq!(
        property(&snap, "/alias/real", "threads"),
        Ok(Some(json!(4)))
    );
    assert_eq!(
        property(&snap, "/alias/real/inner", "up"),
        Ok(Some(json!(4)))
    );
    assert_eq!(property(&snap, "/conf/inner", "up"), Ok(Some(json!(4))));
    // The link itself is stored under `key =>`.
    assert_eq!(
        prop_of(&snap, "/svc").get("count =>"),
        Some(&json!("/conf threads"))
    );

    // A link with a relative path into the node itself (tests.py contains_w_property_link).
    set(&c, "/conf/inner", r#"{"c =>":".. threads"}"#).await;
    let snap = snapshot(&c).await;
    assert_eq!(property(&snap, "/conf/inner", "c"), Ok(Some(json!(4))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn property_link_loops_are_bad_property_links() {
    let (_conn, c) = new_zk("plink-loop").await;
    import(
        &c,
        "/a\n  x => ../b x\n/b\n  x => ../a x\n",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let snap = snapshot(&c).await;
    match property(&snap, "/a", "x") {
        Err(LinkError::BadPropertyLink {
            path,
            key,
            target,
            reason,
        }) => {
            assert_eq!(
                (path.as_str(), key.as_str(), target.as_str()),
                ("/a", "x", "../b x")
            );
            assert!(reason.contains("link loop: /b -> /a -> /b"), "{reason}");
        }
        other => panic!("expected BadPropertyLink (LinkLoop), got {other:?}"),
    }
    // A link to itself, too.
    import(&c, "/s\n  y => /s\n", "/", Trim::Report, false).await;
    let snap = snapshot(&c).await;
    assert!(matches!(
        property(&snap, "/s", "y"),
        Err(LinkError::BadPropertyLink { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_property_links_are_errors() {
    let (_conn, c) = new_zk("plink-bad").await;
    fooservice(&c, false).await;
    set(
        &c,
        "/fooservice/providers",
        r#"{"a =>":"/a/b","b =>":"/fooservice threads x","c =>":"","d =>":"/fooservice x","e =>":"../nothing"}"#,
    )
    .await;
    let snap = snapshot(&c).await;
    let bad = |key: &str| match property(&snap, "/fooservice/providers", key) {
        Err(LinkError::BadPropertyLink {
            path,
            key: k,
            reason,
            ..
        }) => {
            assert_eq!((path.as_str(), k.as_str()), ("/fooservice/providers", key));
            reason
        }
        other => panic!("property {key}: expected BadPropertyLink, got {other:?}"),
    };
    bad("a"); // no node /a/b
    assert!(bad("b").contains("Invalid property link"), "three words");
    bad("c"); // empty
    bad("d"); // no property x at the target
    bad("e"); // relative path to a missing node
              // A property link to a real key still works beside them.
    set(
        &c,
        "/fooservice/providers",
        r#"{"t =>":"/fooservice threads"}"#,
    )
    .await;
    let snap = snapshot(&c).await;
    assert_eq!(
        property(&snap, "/fooservice/providers", "t"),
        Ok(Some(json!(3)))
    );

    // In the text format a third word is accepted only when it starts with '/', and dropped;
    // otherwise the line is an expression error.
    let tree = parse("/n\n  q => /b z /w\n").unwrap();
    assert_eq!(tree.get("n").unwrap().props, props(json!({"q =>": "/b z"})));
    assert!(parse("/n\n  q => /b z w\n")
        .unwrap_err()
        .message
        .contains("in expression"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn property_links_edge_cases_export_and_round_trip() {
    let (_conn, c) = new_zk("plink-edge").await;
    create(
        &c,
        "/fooservice",
        r#"{"database":"/databases/foomain","favorite_color":"red","threads":1}"#,
    )
    .await;
    create(&c, "/fooservice/providers", "").await;
    import(
        &c,
        "
        /app
          threads => ..
          color = 'red'
          database -> /databases/foo
        ",
        "/fooservice",
        Trim::Report,
        false,
    )
    .await;
    let text = print_tree(&c, "/").await;
    assert_eq!(
        text,
        dedent(
            "
            /fooservice
              database = '/databases/foomain'
              favorite_color = 'red'
              threads = 1
              /app
                color = 'red'
                threads => ..
                database -> /databases/foo
              /providers
            "
        )
    );
    let snap = snapshot(&c).await;
    assert_eq!(
        property(&snap, "/fooservice/app", "threads"),
        Ok(Some(json!(1)))
    );
    assert_eq!(
        property(&snap, "/fooservice/app", "color"),
        Ok(Some(json!("red")))
    );
    assert_eq!(
        prop_of(&snap, "/fooservice/app").get("database ->"),
        Some(&json!("/databases/foo"))
    );

    // Export then import gives back the same data: nothing to write, nothing to report.
    let done = import(&c, &text, "/", Trim::Report, false).await;
    assert_eq!((done.lines, done.writes), (vec![], 0));
    assert_eq!(snapshot(&c).await, snap);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn property_links_follow_a_target_replaced_by_a_symlink() {
    let (_conn, c) = new_zk("plink-relink").await;
    import(
        &c,
        "/a\n  /b\n    x => ../c\n  /c\n    x = 1\n",
        "/",
        Trim::Report,
        false,
    )
    .await;
    assert_eq!(
        property(&snapshot(&c).await, "/a/b", "x"),
        Ok(Some(json!(1)))
    );
    import(&c, "/d\n  x = 2\n", "/", Trim::Report, false).await;
    set(&c, "/a", r#"{"c ->": "/d"}"#).await;
    c.delete("/a/c", None).await.unwrap();
    assert_eq!(
        property(&snapshot(&c).await, "/a/b", "x"),
        Ok(Some(json!(2)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_is_silent_about_ephemeral_direct_children() {
    // tests.py no_spam_when_not_trimming_ephemeral_nodes
    let (_conn, c) = new_zk("no-spam").await;
    create(
        &c,
        "/fooservice",
        r#"{"database":"/databases/foomain","favorite_color":"red","threads":1}"#,
    )
    .await;
    create(&c, "/fooservice/providers", "").await;
    register(&c, "/fooservice/providers/a:a", r#"{"pid":1234}"#).await;
    let text = "
        /fooservice
          database = u'/databases/foomain'
          favorite_color = u'red'
          threads = 1
          /providers
        ";
    for dry_run in [true, false] {
        let done = import(&c, text, "/", Trim::Yes, dry_run).await;
        assert_eq!(done.lines, Vec::<String>::new(), "dry run {dry_run}");
        assert_eq!(done.writes, 0);
    }
    assert!(exists(&c, "/fooservice/providers/a:a").await);
}

/// /app (top-level in the texts below) with ephemeral nodes at several depths.
async fn ephemeral_fixture(c: &Client) {
    for p in [
        "/app",
        "/app/deep",
        "/app/deep/a",
        "/app/old",
        "/app/old/x",
        "/app/providers",
        "/app/providers/static",
    ] {
        create(c, p, "").await;
    }
    register(c, "/app/eph0", "").await;
    register(c, "/app/deep/a/eph2", "").await;
    register(c, "/app/providers/eph1", r#"{"pid":1}"#).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_never_deletes_ephemeral_nodes_or_their_ancestors() {
    let (_conn, c) = new_zk("trim-ephemeral").await;
    ephemeral_fixture(&c).await;

    let before = snapshot(&c).await;
    let done = import(&c, "/app\n", "/", Trim::Yes, true).await;
    assert_eq!(
        done.lines,
        strings(&[
            "wouldn't delete /app/deep/a/eph2 because it's ephemeral.",
            "/app/deep/a not deleted due to ephemeral descendent.",
            "/app/deep not deleted due to ephemeral descendent.",
            "would delete /app/old/x.",
            "would delete /app/old.",
            "wouldn't delete /app/providers/eph1 because it's ephemeral.",
            "would delete /app/providers/static.",
            "/app/providers not deleted due to ephemeral descendent.",
        ])
    );
    assert_eq!(snapshot(&c).await, before);

    let done = import(&c, "/app\n", "/", Trim::Yes, false).await;
    assert_eq!(
        done.lines,
        strings(&[
            "Not deleting /app/deep/a/eph2 because it's ephemeral.",
            "/app/deep/a not deleted due to ephemeral descendent.",
            "/app/deep not deleted due to ephemeral descendent.",
            "Not deleting /app/providers/eph1 because it's ephemeral.",
            "/app/providers not deleted due to ephemeral descendent.",
        ])
    );
    assert_eq!(
        done.writes, 3,
        "delete /app/old/x, /app/old, /app/providers/static"
    );
    let mut paths = Vec::new();
    walk(&snapshot(&c).await, "/", &mut paths);
    assert_eq!(
        paths,
        strings(&[
            "/",
            "/app",
            "/app/deep",
            "/app/deep/a",
            "/app/deep/a/eph2",
            "/app/eph0",
            "/app/providers",
            "/app/providers/eph1",
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_of_a_tree_holding_registered_servers() {
    // README "Recursive deletion": the servers registered under /fooservice keep it alive.
    let (_conn, c) = new_zk("trim-servers").await;
    create(&c, "/wrap", "").await;
    create(&c, "/wrap/fooservice", r#"{"threads":3}"#).await;
    create(&c, "/wrap/fooservice/providers", "").await;
    for port in [8080, 8081, 8082] {
        register(
            &c,
            &format!("/wrap/fooservice/providers/192.168.0.42:{port}"),
            r#"{"pid":9999}"#,
        )
        .await;
    }
    let done = import(&c, "/wrap\n", "/", Trim::Yes, false).await;
    assert_eq!(
        done.lines,
        strings(&[
            "Not deleting /wrap/fooservice/providers/192.168.0.42:8080 because it's ephemeral.",
            "Not deleting /wrap/fooservice/providers/192.168.0.42:8081 because it's ephemeral.",
            "Not deleting /wrap/fooservice/providers/192.168.0.42:8082 because it's ephemeral.",
            "/wrap/fooservice/providers not deleted due to ephemeral descendent.",
            "/wrap/fooservice not deleted due to ephemeral descendent.",
        ])
    );
    assert_eq!(done.writes, 0);

    // tests.py delete_recursive_dry_run: without servers, children first.
    create(&c, "/wrap/other", "{}").await;
    create(&c, "/wrap/other/providers", "").await;
    let done = import(
        &c,
        "/wrap\n  /fooservice\n    threads = 3\n    /providers\n",
        "/",
        Trim::Yes,
        true,
    )
    .await;
    assert_eq!(
        done.lines,
        strings(&[
            "would delete /wrap/other/providers.",
            "would delete /wrap/other."
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_top_with_name() {
    // tests.py test_export_top_w_name
    let (_conn, c) = new_zk("export-name").await;
    create(
        &c,
        "/fooservice",
        r#"{"database":"/databases/foomain","favorite_color":"red","threads":1}"#,
    )
    .await;
    create(&c, "/fooservice/providers", "").await;
    let expected = dedent(
        "
        /top
          /fooservice
            database = '/databases/foomain'
            favorite_color = 'red'
            threads = 1
            /providers
        ",
    );
    assert_eq!(
        export_tree(&c, "/", false, Some("top")).await.unwrap(),
        expected
    );
}

// ---------------------------------------------------------------------------------------------
// Import.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_with_inner_spaces_round_trip() {
    let (_conn, c) = new_zk("types").await;
    let text = "/cms : z4m   cms\n  /a:b\n  /c:d : e f\n  /g: h\n";
    import(&c, text, "/", Trim::Report, false).await;
    let snap = snapshot(&c).await;
    assert_eq!(prop_of(&snap, "/cms"), &props(json!({"type": "z4m   cms"})));
    assert_eq!(
        prop_of(&snap, "/cms/a:b"),
        &Props::new(),
        "`/a:b` is a name, not a type"
    );
    assert_eq!(prop_of(&snap, "/cms/c:d"), &props(json!({"type": "e f"})));
    assert_eq!(prop_of(&snap, "/cms/g"), &props(json!({"type": "h"})));
    let out = export(&c, "/").await;
    assert_eq!(out, "/cms : z4m   cms\n  /a:b\n  /c:d : e f\n  /g : h\n");
    let done = import(&c, &out, "/", Trim::Report, false).await;
    assert_eq!((done.lines, done.writes), (vec![], 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reimport_replaces_properties_wholesale() {
    let (_conn, c) = new_zk("wholesale").await;
    import(
        &c,
        "/svc : app\n  threads = 1\n  color = 'red'\n  l -> /x\n",
        "/",
        Trim::Report,
        false,
    )
    .await;
    // Something sets a property at run time (the agent sets `version` on host nodes, say).
    set(
        &c,
        "/svc",
        r#"{"color":"red","l ->":"/x","threads":1,"type":"app","version":"1.0"}"#,
    )
    .await;
    let done = import(&c, "/svc : app\n  threads = 2\n", "/", Trim::Report, false).await;
    assert_eq!(done.writes, 1);
    assert_eq!(
        prop_of(&snapshot(&c).await, "/svc"),
        &props(json!({"type": "app", "threads": 2}))
    );
    // Dropping the type removes it too.
    import(&c, "/svc\n  threads = 2\n", "/", Trim::Report, false).await;
    assert_eq!(raw(&c, "/svc").await, r#"{"threads":2}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reimport_of_an_identical_tree_makes_no_writes() {
    let (_conn, c) = readme_setup("identical").await;
    let before = snapshot(&c).await;
    for trim in [Trim::Report, Trim::Yes, Trim::No] {
        let done = import(&c, README_TREE, "/", trim, false).await;
        assert_eq!((done.lines, done.writes), (vec![], 0), "{trim:?}");
    }
    assert_eq!(snapshot(&c).await, before, "no data version or mzxid moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_by_zc_zk_reads_the_same() {
    // Python's json.dumps: spaces after separators, any key order, non-ASCII escaped.
    let (_conn, c) = new_zk("python-json").await;
    create(
        &c,
        "/svc",
        r#"{"type": "app", "threads": 3, "name": "caf\u00e9", "l": [1, null]}"#,
    )
    .await;
    assert_eq!(
        export(&c, "/svc").await,
        "/svc : app\n  l = [1, None]\n  name = 'café'\n  threads = 3\n"
    );
    let done = import(
        &c,
        "/svc : app\n  name = u'caf\\xe9'\n  threads = 3\n  l = [1, None]\n",
        "/",
        Trim::Report,
        false,
    )
    .await;
    assert_eq!(
        done.writes, 0,
        "the same properties, however they are laid out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_deletes_nested_extra_nodes_at_every_level() {
    let (_conn, c) = new_zk("trim-nested").await;
    for p in [
        "/t",
        "/t/a",
        "/t/a/b",
        "/t/a/b/c",
        "/t/a/d",
        "/t/keep",
        "/t/keep/extra",
        "/t/keep/extra/deeper",
        "/top2",
    ] {
        create(&c, p, "").await;
    }
    let text = "/t\n  /keep\n    /k2\n";
    let done = import(&c, text, "/", Trim::Yes, true).await;
    assert_eq!(
        done.lines,
        strings(&[
            "would delete /t/a/b/c.",
            "would delete /t/a/b.",
            "would delete /t/a/d.",
            "would delete /t/a.",
            "would delete /t/keep/extra/deeper.",
            "would delete /t/keep/extra.",
            "add /t/keep/k2",
        ])
    );
    let done = import(&c, text, "/", Trim::Yes, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    assert_eq!(done.writes, 7, "6 deletes, 1 create");
    let mut paths = Vec::new();
    walk(&snapshot(&c).await, "/", &mut paths);
    assert_eq!(
        paths,
        strings(&["/", "/t", "/t/keep", "/t/keep/k2", "/top2"]),
        "top-level /top2 is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_report_lists_extra_paths_at_every_level_ephemeral_ones_too() {
    let (_conn, c) = new_zk("trim-report").await;
    ephemeral_fixture(&c).await;
    let before = snapshot(&c).await;
    let expected = strings(&[
        "extra path not trimmed: /app/deep",
        "extra path not trimmed: /app/eph0",
        "extra path not trimmed: /app/old",
        "extra path not trimmed: /app/providers/eph1",
        "extra path not trimmed: /app/providers/static",
    ]);
    for dry_run in [true, false] {
        let done = import(&c, "/app\n  /providers\n", "/", Trim::Report, dry_run).await;
        assert_eq!(done.lines, expected, "dry run {dry_run}");
        assert_eq!(done.writes, 0);
    }
    // trim=False: the same, silently.
    let done = import(&c, "/app\n  /providers\n", "/", Trim::No, false).await;
    assert_eq!((done.lines, done.writes), (vec![], 0));
    assert_eq!(snapshot(&c).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_at_a_non_root_node() {
    let (_conn, c) = new_zk("import-at").await;
    create(&c, "/cust", "").await;
    create(&c, "/cust/existing", r#"{"a":1}"#).await;
    create(&c, "/cust/existing/extra", "").await;
    create(&c, "/cust/untouched", "").await;
    let text = "/existing\n  a = 2\n/new : t\n  /kid\n";
    let done = import(&c, text, "/cust", Trim::Report, true).await;
    assert_eq!(
        done.lines,
        strings(&[
            "/cust/existing a change from 1 to 2",
            "extra path not trimmed: /cust/existing/extra",
            "add /cust/new",
        ])
    );
    let done = import(&c, text, "/cust", Trim::Yes, false).await;
    assert_eq!(done.lines, Vec::<String>::new());
    assert_eq!(
        done.writes, 4,
        "set existing, delete extra, create new and new/kid"
    );
    assert_eq!(
        export(&c, "/cust").await,
        "/cust\n  /existing\n    a = 2\n  /new : t\n    /kid\n  /untouched\n"
    );

    // Importing under a missing node is an error, and writes nothing.
    match try_import(&c, "/x\n", "/missing", Trim::Report, false).await {
        Err(ImportError::NoImportPoint(p)) => assert_eq!(p, "/missing"),
        other => panic!("expected NoImportPoint, got {other:?}"),
    }
    assert!(!exists(&c, "/missing").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_point_with_a_trailing_slash() {
    let (_conn, c) = new_zk("import-slash").await;
    create(&c, "/cust", "").await;
    let done = import(&c, "/x\n", "/cust/", Trim::Report, false).await;
    assert_eq!(done.writes, 1);
    assert!(exists(&c, "/cust/x").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_nodes_get_an_open_acl() {
    let (_conn, c) = new_zk("acl-open").await;
    import(&c, "/a\n  /b\n", "/", Trim::Report, false).await;
    for p in ["/a", "/a/b"] {
        let (acl, _) = c.get_acl(p).await.unwrap();
        assert_eq!(acl.as_slice(), &*zkc::Acls::anyone_all(), "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// Deliberate difference (README "Differences from the original"): zc.zk resets the ACL of every
// imported node to open; we leave the ACL of an existing node as the operator set it (and do
// not spend a read per node on it). New nodes get the open ACL (see imported_nodes_get_an_open_acl).
async fn import_keeps_the_acl_of_existing_nodes() {
    let (_conn, c) = new_zk("acl-reset").await;
    let narrow = [zkc::Acl::new(
        zkc::Permission::READ | zkc::Permission::WRITE | zkc::Permission::ADMIN,
        zkc::AuthId::anyone(),
    )];
    c.create(
        "/a",
        b"{}",
        &zkc::CreateMode::Persistent.with_acls(zkc::Acls::new(&narrow)),
    )
    .await
    .unwrap();
    import(&c, "/a\n  x = 1\n", "/", Trim::Report, false).await;
    let (acl, _) = c.get_acl("/a").await.unwrap();
    assert_eq!(acl.as_slice(), &narrow[..]);
    let (data, _) = c.get_data("/a").await.unwrap();
    assert_eq!(data, br#"{"x":1}"#.to_vec());
}

// ---------------------------------------------------------------------------------------------
// Export.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_export_omits_zookeeper() {
    let (_conn, c) = new_zk("export-zookeeper").await;
    // Inside a chroot, a top-level node called `zookeeper` is left out like the real one.
    create(&c, "/zookeeper", r#"{"a":1}"#).await;
    create(&c, "/zookeeper/quota", "").await;
    create(&c, "/app", "").await;
    assert_eq!(export(&c, "/").await, "/app\n");
    assert_eq!(
        export(&c, "/zookeeper").await,
        "/zookeeper\n  a = 1\n  /quota\n",
        "asked for by name"
    );

    // Without a chroot, the server's own /zookeeper is left out. On a server of its own: the
    // shared one holds other tests' nodes, some of which an export refuses (tree_roundtrip).
    let server = tokio::task::spawn_blocking(support::ZkServer::start)
        .await
        .expect("start a server");
    let unrooted = support::connect(&server.connect_string()).await;
    create(&unrooted, "/app", "").await;
    assert!(exists(&unrooted, "/zookeeper").await);
    assert_eq!(export(&unrooted, "/").await, "/app\n");
    drop(unrooted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_omits_ephemeral_nodes_unless_asked() {
    let (conn, c) = new_zk("export-ephemeral").await;
    create(&c, "/svc", "").await;
    create(&c, "/svc/providers", "").await;
    register(&c, "/svc/providers/h:1", r#"{"pid":1}"#).await;
    register(&c, "/top-eph", "").await;
    assert_eq!(export(&c, "/").await, "/svc\n  /providers\n");
    assert_eq!(
        print_tree(&c, "/").await,
        "/svc\n  /providers\n    /h:1\n      pid = 1\n/top-eph\n"
    );
    let run = support::run_async(&[
        "tree",
        "export",
        "-e",
        "--name",
        "p",
        "/svc/providers",
        "-z",
        &conn,
    ])
    .await;
    run.assert_ok();
    assert_eq!(run.stdout, "/p\n  /h:1\n    pid = 1\n");
    let run = support::run_async(&["tree", "export", "--name", "top", "-z", &conn]).await;
    run.assert_ok();
    assert_eq!(run.stdout, "/top\n  /svc\n    /providers\n");
    // Exporting an ephemeral node itself without ephemeral nodes: zc.zk printed an empty tree
    // ("\n"); it must at least not show the node.
    match export_tree(&c, "/top-eph", false, None).await {
        Ok(text) => assert!(!text.contains("top-eph"), "{text}"),
        Err(ExportError::NoNode(_)) => {}
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_of_a_missing_node_or_an_empty_tree() {
    let (conn, c) = new_zk("export-missing").await;
    assert_eq!(
        export(&c, "/").await,
        "\n",
        "an empty tree exports as an empty line, like zc.zk"
    );
    assert!(matches!(
        export_tree(&c, "/nothing", false, None).await,
        Err(ExportError::NoNode(_))
    ));
    let run = support::run_async(&["tree", "export", "/nothing", "-z", &conn]).await;
    run.assert_code(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_lists_properties_then_links_then_children() {
    let (_conn, c) = new_zk("export-order").await;
    create(
        &c,
        "/n",
        r#"{"z":1,"b ->":"/x","a":"s","type":"kind","m =>":"/p q","f":1.5,"d":{"k":[true,null]},"a ->":"/y"}"#,
    )
    .await;
    create(&c, "/n/b", "").await;
    // An empty type has no node-line spelling (zc.zk dropped it): a property keeps it.
    create(&c, "/n/a", r#"{"type":""}"#).await;
    assert_eq!(
        export(&c, "/n").await,
        dedent(
            "
            /n : kind
              a = 's'
              d = {'k': [True, None]}
              f = 1.5
              m => /p q
              z = 1
              a -> /y
              b -> /x
              /a
                type = ''
              /b
            "
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Node data encoding.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_data_encoding_on_import() {
    let (_conn, c) = new_zk("encode").await;
    import(
        &c,
        "
        /empty
        /raw
          string_value = 'hello world'
        /json
          b = 'x'
          a = 1
          l = [1, 2.5, None, True]
          t = (1, 'two')
        /typed : some type
        /sv2
          string_value = 'x'
          other = 1
        ",
        "/",
        Trim::Report,
        false,
    )
    .await;
    let expected = [
        ("/empty", "{}"),
        ("/raw", "hello world"),
        (
            "/json",
            r#"{"a":1,"b":"x","l":[1,2.5,null,true],"t":[1,"two"]}"#,
        ),
        ("/typed", r#"{"type":"some type"}"#),
        ("/sv2", r#"{"other":1,"string_value":"x"}"#),
    ];
    let snap = snapshot(&c).await;
    for (path, data) in expected {
        assert_eq!(raw(&c, path).await, data, "{path}");
        assert_eq!(&decode(data.as_bytes()), prop_of(&snap, path), "{path}");
        assert_eq!(encode(prop_of(&snap, path)), data.as_bytes(), "{path}");
    }
    assert_eq!(
        prop_of(&snap, "/raw"),
        &props(json!({"string_value": "hello world"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_data_decoding_on_export() {
    let (_conn, c) = new_zk("decode").await;
    for (path, data) in [
        ("/blank", "  \n "),
        ("/empty", ""),
        ("/hello", "hello"),
        ("/list", "[1, 2]"),
        ("/notjson", "{not json}"),
        ("/spaced", " {\"a\": 1} \n"),
    ] {
        create(&c, path, data).await;
    }
    let text = export(&c, "/").await;
    assert_eq!(
        text,
        dedent(
            "
            /blank
            /empty
            /hello
              string_value = 'hello'
            /list
              string_value = '[1, 2]'
            /notjson
              string_value = '{not json}'
            /spaced
              a = 1
            "
        )
    );
    // The same text imported back changes nothing, and raw data stays raw.
    let done = import(&c, &text, "/", Trim::Report, false).await;
    assert_eq!((done.lines, done.writes), (vec![], 0));
    assert_eq!(raw(&c, "/hello").await, "hello");
    // Dry run against raw data: no difference to print.
    let done = import(
        &c,
        "/hello\n  string_value = 'hello'\n",
        "/",
        Trim::Report,
        true,
    )
    .await;
    assert_eq!(done.lines, Vec::<String>::new());
    let done = import(
        &c,
        "/hello\n  string_value = 'bye'\n",
        "/",
        Trim::Report,
        false,
    )
    .await;
    assert_eq!(done.writes, 1);
    assert_eq!(raw(&c, "/hello").await, "bye");
}

// ---------------------------------------------------------------------------------------------
// `tree check`.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_check_reports_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.zk");
    let bad = dir.path().join("bad.zk");
    let bad2 = dir.path().join("bad2.zk");
    std::fs::write(&good, dedent(README_TREE)).unwrap();
    std::fs::write(&bad, "\n/test\n  a ->\n").unwrap();
    std::fs::write(&bad2, "x = 1\n").unwrap();
    let (good, bad, bad2) = (
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        bad2.to_str().unwrap(),
    );

    let run = support::run_async(&["tree", "check", good]).await;
    run.assert_ok();
    assert_eq!(run.stdout, "");
    let run = support::run_async(&["tree", "check", good, bad, bad2]).await;
    run.assert_code(1);
    assert_eq!(
        run.stdout,
        format!("{bad}:3: Bad link format: 'a ->'\n{bad2}:1: Can't import properties above imported nodes.\n")
    );
}
