//! `tree export` then `tree import` gives back the same nodes, byte for byte, or the export is
//! refused (exit 1, nothing on standard output) with a message naming the node and what the
//! text format cannot write. Nodes are written with the plain ZooKeeper client, as another
//! client would write them; the commands run as an operator runs them.

use crate::support;

use zookeeper_client as zkc;

fn open() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())
}

/// A fresh chroot holding `/src` and `/dst`, and a client in it. Nodes without properties are
/// written as `{}` and JSON as compact JSON with sorted keys, as an import writes them (empty
/// data and other JSON spellings come back in that form, as in the original).
async fn setup(label: &str) -> (String, zkc::Client) {
    let conn = support::chroot(label).await;
    let c = support::connect(&conn).await;
    for path in ["/src", "/dst"] {
        c.create(path, b"{}", &open()).await.expect("create");
    }
    (conn, c)
}

async fn create(c: &zkc::Client, path: &str, data: &[u8]) {
    c.create(path, data, &open())
        .await
        .unwrap_or_else(|e| panic!("create {path:?}: {e}"));
}

/// Every node of the subtree at `path`, by path relative to it, with its data.
async fn nodes(c: &zkc::Client, path: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut queue = vec![String::new()];
    while let Some(rel) = queue.pop() {
        let full = match format!("{path}{rel}") {
            root if root.is_empty() => "/".to_string(),
            full => full,
        };
        let (data, _) = c
            .get_data(&full)
            .await
            .unwrap_or_else(|e| panic!("get {full:?}: {e}"));
        let mut children = c
            .list_children(&full)
            .await
            .unwrap_or_else(|e| panic!("children {full:?}: {e}"));
        children.sort();
        for child in children {
            queue.push(format!("{rel}/{child}"));
        }
        out.push((rel, data));
    }
    out.sort();
    out
}

/// `tree export /src`, then `tree import` of that text under `/dst`: returns the text, after
/// checking that `/dst/src` holds exactly the nodes and bytes of `/src`.
async fn round_trip(conn: &str, c: &zkc::Client) -> String {
    let exported = support::run_async(&["tree", "export", "/src", "-z", conn]).await;
    exported.assert_ok();
    let imported = support::run_stdin_async(
        &["tree", "import", "-", "/dst", "-z", conn],
        &exported.stdout,
    )
    .await;
    imported.assert_ok();
    let (want, got) = (nodes(c, "/src").await, nodes(c, "/dst/src").await);
    assert_eq!(
        got, want,
        "export then import changed the nodes; the text was:\n{}",
        exported.stdout
    );
    exported.stdout
}

/// `tree export /src` is refused: exit 1, nothing on standard output, and a message naming
/// `node` (its full path in the chroot) and holding `why`. Then deletes `node`, so that the
/// next case is refused for itself, and so that a root export of a shared server works.
async fn refused(conn: &str, c: &zkc::Client, node: &str, why: &str) {
    let run = support::run_async(&["tree", "export", "/src", "-z", conn]).await;
    run.assert_code(1);
    assert_eq!(run.stdout, "", "a refused export printed text\n{run}");
    assert!(
        run.stderr.contains(node) && run.stderr.contains(why),
        "the refusal should name {node:?} and say {why:?}\n{run}"
    );
    c.delete(node, None)
        .await
        .unwrap_or_else(|e| panic!("delete {node:?}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_data_written_by_another_client_round_trips() {
    let (conn, c) = setup("rt-binary").await;
    let every_byte: Vec<u8> = (0..=255u8).rev().collect();
    create(&c, "/src/all", &every_byte).await;
    create(&c, "/src/latin1", b"caf\xe9 \xff\xfe").await;
    create(&c, "/src/quotes", b"\xff'\"\\\n\r\t\x00 ").await;
    // Not UTF-8, though it would parse as a JSON object once made valid.
    create(&c, "/src/jsonish", b"{\"a\": \"\xff\"}").await;
    // Text that is not JSON (a kazoo lock contender's identifier) and UTF-8 text.
    create(&c, "/src/text", "h\u{e9}te-1 \u{1f600}\n".as_bytes()).await;
    create(&c, "/src/text/child", b"\x80").await;
    let text = round_trip(&conn, &c).await;
    assert!(
        text.contains("string_value = b'"),
        "binary data is written as a bytes literal:\n{text}"
    );
    // Importing the same text again finds nothing to change.
    let again =
        support::run_stdin_async(&["tree", "import", "-", "/dst", "-z", &conn], &text).await;
    again.assert_ok();
    assert_eq!(again.stdout, "");
    let dry =
        support::run_stdin_async(&["tree", "import", "-n", "-", "/dst", "-z", &conn], &text).await;
    dry.assert_ok();
    assert_eq!(
        dry.stdout, "",
        "a dry run after the import finds no difference"
    );
    // Bytes that decode to the same text (U+FFFD) still differ, and are written back.
    c.set_data("/dst/src/text/child", b"\x81", None)
        .await
        .expect("set");
    let dry =
        support::run_stdin_async(&["tree", "import", "-n", "-", "/dst", "-z", &conn], &text).await;
    dry.assert_ok();
    assert_eq!(
        dry.stdout,
        "/dst/src/text/child string_value change from b'\\x81' to b'\\x80'\n"
    );
    round_trip(&conn, &c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_name_with_a_spaced_colon_is_refused() {
    let (conn, c) = setup("rt-colon").await;
    // Without blanks a colon is part of the name (`/a:b`, `/a:b : t`).
    create(&c, "/src/a:b", b"{}").await;
    create(&c, "/src/c:", br#"{"type":"t"}"#).await;
    round_trip(&conn, &c).await;
    // A name given with `--name` is checked too, at the root as below it.
    for (node, name, why) in [("/src", "n : t", "blank"), ("/", "a->b", "symbolic link")] {
        let run = support::run_async(&["tree", "export", node, "--name", name, "-z", &conn]).await;
        run.assert_code(1);
        assert_eq!(run.stdout, "", "{run}");
        assert!(run.stderr.contains(why), "{run}");
    }
    create(&c, "/src/x : y", b"{}").await;
    refused(&conn, &c, "/src/x : y", "blank").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_in_names() {
    let (conn, c) = setup("rt-hash").await;
    // A node line starts with `/`, so `#` in a node name is no comment.
    create(&c, "/src/#a", br##"{"b#":1}"##).await;
    create(&c, "/src/x#", b"{}").await;
    round_trip(&conn, &c).await;
    // A property line starting with `#` is a comment: the property would be lost.
    create(&c, "/src/p", br##"{"#k":1}"##).await;
    refused(&conn, &c, "/src/p", "'#k'").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrows_in_node_names_are_refused_and_round_trip_in_property_names() {
    let (conn, c) = setup("rt-arrow").await;
    create(&c, "/src/p", br#"{"a->b":1,"c=>d":"x","e->":2}"#).await;
    round_trip(&conn, &c).await;
    create(&c, "/src/a->b", b"{}").await;
    refused(&conn, &c, "/src/a->b", "symbolic link").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_property_link_arrow_in_a_node_name_is_refused() {
    let (conn, c) = setup("rt-plink").await;
    create(&c, "/src/a=>b", b"{}").await;
    refused(&conn, &c, "/src/a=>b", "property link").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equals_in_names() {
    let (conn, c) = setup("rt-equals").await;
    // `/a=` has nothing after `=`: a node line.
    create(&c, "/src/a=", br#"{"=":2,"k=v":1}"#).await;
    round_trip(&conn, &c).await;
    create(&c, "/src/b=1", b"{}").await;
    refused(&conn, &c, "/src/b=1", "property").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newlines_in_names_are_refused() {
    let (conn, c) = setup("rt-newline").await;
    // ZooKeeper itself refuses a node name with a newline (a control character).
    assert!(c.create("/src/a\nb", b"", &open()).await.is_err());
    // A newline in a value is escaped; in a property name or a link target it cannot be.
    create(&c, "/src/v", br#"{"k":"a\nb"}"#).await;
    round_trip(&conn, &c).await;
    create(&c, "/src/p", br#"{"a\nb":1}"#).await;
    refused(&conn, &c, "/src/p", "newline").await;
    create(&c, "/src/l", br#"{"l ->":"/x\ny"}"#).await;
    refused(&conn, &c, "/src/l", "newline").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_blanks_in_node_names_are_refused() {
    let (conn, c) = setup("rt-blank-node").await;
    create(&c, "/src/ lead", b"{}").await;
    refused(&conn, &c, "/src/ lead", "blank").await;
    create(&c, "/src/trail ", b"{}").await;
    refused(&conn, &c, "/src/trail ", "blank").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn property_names_the_format_cannot_write_are_refused() {
    let (conn, c) = setup("rt-prop-names").await;
    // Types that the node line cannot carry are written as a `type = …` property.
    create(&c, "/src/t1", br#"{"type":""}"#).await;
    create(&c, "/src/t2", br#"{"type":" padded "}"#).await;
    create(&c, "/src/t3", br#"{"type":3}"#).await;
    create(&c, "/src/t4", br#"{"type":"a\nb"}"#).await;
    create(
        &c,
        "/src/t5",
        br#"{"l ->":"/x","p =>":"/y z","type":"x y"}"#,
    )
    .await;
    round_trip(&conn, &c).await;
    for (node, data, why) in [
        ("/src/b1", r#"{" k":1}"#, "blank"),
        ("/src/b2", r#"{"k ":1}"#, "blank"),
        ("/src/b3", r#"{"a b":1}"#, "blank"),
        ("/src/b4", r#"{"":1}"#, "empty"),
        // `a=> = '/x'` reads back as a property link named `a`.
        ("/src/b5", r#"{"a=>":"/x"}"#, "property link"),
        ("/src/b6", r#"{"l ->":"a b"}"#, "link"),
        ("/src/b7", r#"{"p =>":1}"#, "property link"),
    ] {
        create(&c, node, data.as_bytes()).await;
        refused(&conn, &c, node, why).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_export_with_lock_contenders_round_trips() {
    // What kazoo's recipes leave on a live cluster: contenders and leases whose data is the
    // holder's identifier (text that is not JSON, or bytes), under sequential names.
    let from = support::chroot("rt-root-from").await;
    let c = support::connect(&from).await;
    for path in ["/role-locks", "/role-locks/web", "/sem", "/sem/leases"] {
        create(&c, path, b"{}").await;
    }
    let contender = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let lock = "/role-locks/web/_c_0f3a9d2c8e1b4f6a-__lock__";
    for data in [&b"host1"[..], b"h\xf8st-2", b""] {
        c.create(lock, data, &contender).await.expect("contend");
    }
    create(&c, "/sem/leases/9b1f2e", b"host1 lease\n").await;
    let exported = support::run_async(&["tree", "export", "-e", "/", "-z", &from]).await;
    exported.assert_ok();
    let to = support::chroot("rt-root-to").await;
    let imported =
        support::run_stdin_async(&["tree", "import", "-", "/", "-z", &to], &exported.stdout).await;
    imported.assert_ok();
    let d = support::connect(&to).await;
    let mut want = nodes(&c, "").await;
    // Empty data comes back as `{}` (no properties either way), as in the original.
    for (_, data) in &mut want {
        if data.is_empty() {
            *data = b"{}".to_vec();
        }
    }
    let mut got = nodes(&d, "").await;
    // The import point itself (the chroot) is not part of the text.
    want.retain(|(rel, _)| !rel.is_empty());
    got.retain(|(rel, _)| !rel.is_empty());
    assert_eq!(got, want, "the text was:\n{}", exported.stdout);
}
