//! The text format offline: every grammar rule and error of zc.zk's parser, export
//! formatting, and property tests (no panics, export → parse round trip).

use proptest::prelude::*;
use serde_json::{json, Value};
use zkdeployment::tree::encoding::decode;
use zkdeployment::tree::export::{check_exportable, export_root, export_subtree};
use zkdeployment::tree::parse::{parse, parse_bytes};
use zkdeployment::tree::{Node, Props};

fn props(v: Value) -> Props {
    v.as_object().unwrap().clone()
}

fn error(text: &str) -> (usize, String) {
    let e = parse(text).expect_err("should fail");
    (e.line, e.message)
}

#[test]
fn nodes_types_and_properties() {
    let root = parse(
        "
# a comment
/a : z4m   cms
  x = 1
  y= 'two'
  z      =3.5
  flag=True
  nothing = None
  l = [1, u'a', None, True]
  t = (1, 2)
  d = {'k': 2}
  /b
    /c : svc
",
    )
    .unwrap();
    let a = &root.children["a"];
    assert_eq!(
        a.props,
        props(
            json!({"type": "z4m   cms", "x": 1, "y": "two", "z": 3.5, "flag": true, "nothing": null,
                     "l": [1, "a", null, true], "t": [1, 2], "d": {"k": 2}})
        )
    );
    assert_eq!(a.line, 3);
    assert_eq!(
        a.children["b"].children["c"].props,
        props(json!({"type": "svc"}))
    );
    assert!(root.props.is_empty());
}

#[test]
fn node_name_and_type_splitting() {
    let root = parse("/a:b\n/c : d\n/e: f\n/g :h\n/i:j : k\n").unwrap();
    assert_eq!(root.children["a:b"].props, Props::new());
    assert_eq!(root.children["c"].props, props(json!({"type": "d"})));
    assert_eq!(root.children["e"].props, props(json!({"type": "f"})));
    assert_eq!(root.children["g"].props, props(json!({"type": "h"})));
    assert_eq!(root.children["i:j"].props, props(json!({"type": "k"})));
}

#[test]
fn links_and_property_links() {
    let root =
        parse("/a\n  x -> /b/c\n  p => /b\n  q => ../b name\n  r => /b z /w\n  s=>t\n").unwrap();
    assert_eq!(
        root.children["a"].props,
        props(
            json!({"x ->": "/b/c", "p =>": "/b", "q =>": "../b name", "r =>": "/b z", "s =>": "t"})
        )
    );
}

#[test]
fn property_link_with_third_word_not_a_path_is_an_expression_error() {
    let (line, msg) = error("/a\n  q => /b z w\n");
    assert_eq!(line, 2);
    assert!(
        msg.starts_with("Error ") && msg.ends_with("in expression: '> /b z w' in line 2"),
        "{msg}"
    );
}

#[test]
fn properties_may_follow_children_and_belong_to_the_enclosing_node() {
    let root = parse("/a\n  /b\n  x = 1\n  /c\n").unwrap();
    let a = &root.children["a"];
    assert_eq!(a.props, props(json!({"x": 1})));
    assert_eq!(a.children.keys().collect::<Vec<_>>(), ["b", "c"]);
}

#[test]
fn uniform_indentation_and_tabs_count_as_one() {
    let root = parse("    /a\n      /b\n    /c\n").unwrap();
    assert_eq!(root.children.keys().collect::<Vec<_>>(), ["a", "c"]);
    let root = parse("/a\n\t/b\n\tx = 1\n").unwrap();
    assert_eq!(root.children["a"].props, props(json!({"x": 1})));
    assert!(root.children["a"].children.contains_key("b"));
}

#[test]
fn comments_blank_lines_and_trailing_space() {
    let root = parse("\n\n  # indented comment\n/a   \n   \n  x = 1 # python comment\n").unwrap();
    assert_eq!(root.children["a"].props, props(json!({"x": 1})));
}

#[test]
fn grammar_errors_name_their_line() {
    assert_eq!(error("/a\n  x ->\n"), (2, "Bad link format: 'x ->'".into()));
    assert_eq!(
        error("/a\n  x -> /b # c\n"),
        (2, "Bad link format: 'x -> /b # c'".into())
    );
    assert_eq!(
        error("/a\n  what is this\n"),
        (2, "Unrecognized data: 'what is this'".into())
    );
    assert_eq!(
        error("/a\n  x = 1\n    /b\n"),
        (3, "Can't indent under properties: '    /b'".into())
    );
    assert_eq!(
        error("/a\n    /b\n  /c\n"),
        (3, "Invalid indentation: '/c'".into())
    );
    assert_eq!(error("  /a\n/b\n"), (2, "Invalid indentation: '/b'".into()));
    assert_eq!(error("/a\n/b\n/a\n"), (3, "duplicate node: '/a'".into()));
    assert_eq!(
        error("/a\n  x = 1\n  x = 2\n"),
        (3, "duplicate property: 'x = 2'".into())
    );
    assert_eq!(
        error("/a : foo\n  type = 'bar'\n"),
        (2, "duplicate property: \"type = 'bar'\"".into())
    );
    assert_eq!(
        error("x = 1\n"),
        (1, "Can't import properties above imported nodes.".into())
    );
    assert_eq!(
        error("/a\nx = 1\n"),
        (2, "Can't import properties above imported nodes.".into())
    );
}

#[test]
fn expression_errors_have_the_original_shape() {
    assert_eq!(
        error("/a\n  x = 1+\n").1,
        "Error unexpected EOF while parsing in expression: '1+' in line 2"
    );
    assert_eq!(
        error("/a\n\n  x = foo\n").1,
        "Error name 'foo' is not defined in expression: 'foo' in line 3"
    );
    let (_, msg) = error("/a\n  x = __import__('os').system('true')\n");
    assert!(
        msg.starts_with("Error ") && msg.ends_with(" in line 2"),
        "{msg}"
    );
    let (_, msg) = error("/a\n  x = 123456789012345678901234567890\n");
    assert!(msg.contains("integer out of range"), "{msg}");
    let (_, msg) = error("/a\n  x = 1 2\n");
    assert!(msg.contains("invalid syntax"), "{msg}");
}

#[test]
fn bad_node_names_are_errors() {
    assert!(error("/a/b\n").1.contains("'/'"));
    assert_eq!(error("/..\n").0, 1);
    assert_eq!(error("/a\n  /.\n").0, 2);
    assert_eq!(error("/a\x01b\n").0, 1);
    assert!(parse("/a,b\n").unwrap().children.contains_key("a,b"));
}

#[test]
fn invalid_utf8_names_its_line() {
    let e = parse_bytes(b"/a\n  x = 1\n  y = '\xff'\n").unwrap_err();
    assert_eq!((e.line, e.message.as_str()), (3, "invalid UTF-8"));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let text: String = (0..5000)
        .map(|i| format!("{}/n\n", " ".repeat(i)))
        .collect();
    let e = parse(&text).unwrap_err();
    assert!(e.message.contains("deeper than"), "{}", e.message);
    let deep = format!(
        "/a\n  x = {}1{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(parse(&deep)
        .unwrap_err()
        .message
        .contains("too deeply nested"));
}

#[test]
fn export_format() {
    let root = parse(
        "/a : z4m   cms\n  z = 'it\\'s'\n  b = [1, u'x', None, True]\n  p => ../q name\n  l -> /x\n  k -> y\n  /c\n    f = 1.5\n/b\n",
    )
    .unwrap();
    assert_eq!(
        export_root(&root, None),
        "/a : z4m   cms\n  b = [1, 'x', None, True]\n  p => ../q name\n  z = \"it's\"\n  k -> y\n  l -> /x\n  /c\n    f = 1.5\n/b\n"
    );
    assert_eq!(export_root(&root, Some("top")).lines().next(), Some("/top"));
    assert_eq!(export_subtree("renamed", &root.children["b"]), "/renamed\n");
}

#[test]
fn string_value_and_empty_type_export() {
    let mut node = Node::new();
    node.props = props(json!({"string_value": "raw data", "type": ""}));
    assert_eq!(
        export_subtree("n", &node),
        "/n\n  string_value = 'raw data'\n  type = ''\n"
    );
}

// ---- property tests ----

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.,:@%-]{1,8}".prop_filter("plain", |s| s != "." && s != "..")
}

fn key() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_.-]{0,6}".prop_filter("not type", |s| s != "type")
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn node_props() -> BoxedStrategy<Props> {
    (
        prop::collection::btree_map(key(), value(), 0..4),
        prop::option::of("[a-z][a-z0-9 -]{0,8}[a-z0-9]"),
        prop::collection::btree_map(key(), "[a-z./][a-z0-9/._-]{0,10}", 0..2),
        prop::collection::btree_map(key(), "[a-z./][a-z0-9/._-]{0,10}( [a-z]{1,4})?", 0..2),
    )
        .prop_map(|(plain, kind, links, plinks)| {
            let mut p = Props::new();
            for (k, v) in plain {
                p.insert(k, v);
            }
            if let Some(kind) = kind {
                p.insert("type".into(), Value::String(kind));
            }
            for (k, v) in links {
                p.insert(format!("{k} ->"), Value::String(v));
            }
            for (k, v) in plinks {
                if !p.contains_key(&k) {
                    p.insert(format!("{k} =>"), Value::String(v));
                }
            }
            p
        })
        .boxed()
}

fn node() -> impl Strategy<Value = Node> {
    let props = node_props();
    let leaf = props.clone().prop_map(|props| Node {
        props,
        ..Node::default()
    });
    leaf.prop_recursive(4, 40, 4, move |inner| {
        (
            props.clone(),
            prop::collection::btree_map(name(), inner, 0..4),
        )
            .prop_map(|(props, children)| Node {
                props,
                children,
                ..Node::default()
            })
    })
}

fn strip_lines(mut n: Node) -> Node {
    n.line = 0;
    n.children = n
        .children
        .into_iter()
        .map(|(k, c)| (k, strip_lines(c)))
        .collect();
    n
}

/// Names, keys and values made of what the format gives a meaning to.
fn hostile() -> impl Strategy<Value = String> {
    "[a#:=>/ \t\n-]{0,5}"
}

/// A node with hostile names, keys, types and link targets, or with data that is not text.
fn hostile_node() -> impl Strategy<Value = Node> {
    let props = prop::collection::btree_map(
        prop_oneof![
            hostile(),
            hostile().prop_map(|k| format!("{k} ->")),
            hostile().prop_map(|k| format!("{k} =>")),
            Just("type".to_string()),
        ],
        prop_oneof![hostile().prop_map(Value::String), Just(json!(1))],
        0..4,
    );
    let raw = prop::collection::vec(any::<u8>(), 0..6).prop_map(|mut bytes| {
        bytes.push(0xff);
        bytes
    });
    let leaf = prop_oneof![
        props.prop_map(|props| Node {
            props: props.into_iter().collect(),
            ..Node::default()
        }),
        raw.prop_map(|raw| Node {
            props: decode(&raw),
            raw: Some(raw),
            ..Node::default()
        }),
    ];
    let name = hostile()
        .prop_filter("a name ZooKeeper takes", |n| {
            zkdeployment::tree::bad_node_name(n).is_none()
        })
        .boxed();
    leaf.prop_recursive(2, 8, 3, move |inner| {
        (
            inner.clone(),
            prop::collection::btree_map(name.clone(), inner, 0..3),
        )
            .prop_map(|(mut node, children)| {
                node.children = children;
                node
            })
    })
}

/// Every top node of `root` passes [`check_exportable`].
fn exportable(root: &Node) -> Result<(), String> {
    for (name, child) in &root.children {
        check_exportable(&format!("/{name}"), name, child).map_err(|e| e.to_string())?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn an_export_that_is_not_refused_parses_back_the_same(
        children in prop::collection::btree_map("[a:#=-]{1,4}", hostile_node(), 1..3)) {
        let root = Node { children, ..Node::default() };
        if exportable(&root).is_ok() {
            let text = export_root(&root, None);
            let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            prop_assert_eq!(strip_lines(back), root, "{}", text);
        }
    }

    #[test]
    fn export_then_parse_gives_the_same_tree(children in prop::collection::btree_map(name(), node(), 0..4)) {
        let root = Node { children, ..Node::default() };
        prop_assert_eq!(exportable(&root), Ok(()));
        let text = export_root(&root, None);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(strip_lines(back), root);
    }

    #[test]
    fn parser_never_panics_on_random_text(text in "(?s).{0,400}") {
        let _ = parse(&text);
    }

    #[test]
    fn parser_never_panics_on_tree_like_text(lines in prop::collection::vec(
        prop_oneof!["/[a-z:]{0,4}( : [a-z ]{0,5})?", "[a-z]{1,3} ?=>? ?[/a-z. ]{0,8}",
                    "[a-z]{1,3} ?= ?[\\[\\](){}'\"0-9a-zA-Z,:.+\\- ]{0,12}", "[a-z]{1,3} ?-> ?[/a-z]{0,5}",
                    "#.*", "[ \t]*"], 0..30),
        indents in prop::collection::vec(0usize..6, 30)) {
        let text: String = lines.iter().zip(indents.iter()).map(|(l, i)| format!("{}{l}\n", " ".repeat(*i))).collect();
        let _ = parse(&text);
    }

    #[test]
    fn parser_never_panics_on_mutated_exports(children in prop::collection::btree_map(name(), node(), 1..3),
                                             cuts in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let text = export_root(&Node { children, ..Node::default() }, None);
        let mut bytes = text.into_bytes();
        for (at, b) in cuts {
            let i = at.index(bytes.len() + 1);
            if b % 2 == 0 && i < bytes.len() { bytes.remove(i); } else { bytes.insert(i.min(bytes.len()), b); }
        }
        let _ = parse_bytes(&bytes);
    }
}
