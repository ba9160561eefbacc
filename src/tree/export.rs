//! Export of a [`Node`] tree in the zc.zk text format (zc.zk's `export_tree`).
//!
//! Node line `/name` plus ` : type` when the `type` property is a string that the node line
//! reads back as it is (else it is written as a `type = …` property); then the properties
//! sorted by key (property links as `name => target`, values as Python literals without the
//! `u` prefix), then the symbolic links sorted (`name -> target`), then the children sorted by
//! name; two spaces of indentation per level. Data that is not text ([`Node::raw`]) is
//! written as `string_value = b'…'`.
//!
//! The format has no quoting for names: a name with a blank, a property name starting with
//! `#`, a node name that reads as a link or a property (`/a->b`, `/a=1`) cannot be written.
//! [`check_exportable`] reads every line back with the parser and refuses a node whose text
//! would import as something else ([`Unwritable`]), so that parsing the output gives back
//! the same data.

use serde_json::Value;

use super::literal::{repr, repr_bytes, repr_str};
use super::parse::{classify, Item};
use super::{Node, LINK_SUFFIX, PLINK_SUFFIX};

/// A node the text format cannot write: what an export refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot export {}: {why}; the tree format cannot write it",
    repr_str(path)
)]
pub struct Unwritable {
    /// The node's path.
    pub(crate) path: String,
    /// What is wrong.
    pub(crate) why: String,
}

/// One line of a node's own text (unindented) and what it must read back as; `None` for a
/// line that cannot read back otherwise (a bytes literal this module wrote).
type Line = (String, Option<Item>);

/// The node line of `name`, and whether it carries the type.
fn head(name: &str, node: &Node) -> (Line, bool) {
    if node.raw.is_none() {
        if let Some(Value::String(kind)) = node.props.get("type") {
            let text = format!("/{name} : {kind}");
            let want = Item::Node {
                name: name.to_string(),
                kind: Some(kind.clone()),
            };
            // Read back as the parser reads a line: its trailing blanks dropped first.
            let read = classify(text.trim_end_matches(is_blank), 0);
            if !kind.is_empty() && read.as_ref() == Ok(&want) {
                return ((text, Some(want)), true);
            }
        }
    }
    let want = Item::Node {
        name: name.to_string(),
        kind: None,
    };
    ((format!("/{name}"), Some(want)), false)
}

/// The lines of `node` itself (not its children).
fn own_lines(name: &str, node: &Node) -> Vec<Line> {
    let (head, typed) = head(name, node);
    let mut out = vec![head];
    if let Some(raw) = &node.raw {
        out.push((format!("string_value = {}", repr_bytes(raw)), None));
        return out;
    }
    let mut links = Vec::new();
    for (key, value) in &node.props {
        let want = Some(Item::Prop {
            key: key.clone(),
            value: value.clone(),
        });
        if key == "type" && typed {
            continue;
        }
        if let Some(link) = key.strip_suffix(LINK_SUFFIX) {
            let target = match value {
                Value::String(s) => s.clone(),
                other => repr(other),
            };
            links.push((format!("{link} -> {target}"), want));
        } else if let (Some(plink), Value::String(target)) = (key.strip_suffix(PLINK_SUFFIX), value)
        {
            out.push((format!("{plink} => {target}"), want));
        } else {
            out.push((format!("{key} = {}", repr(value)), want));
        }
    }
    out.extend(links);
    out
}

/// Appends the lines of `node`, named `name`, at `indent`, to `out`.
pub(crate) fn export_node_lines(name: &str, node: &Node, indent: &str, out: &mut Vec<String>) {
    let inner = format!("{indent}  ");
    for (i, (text, _)) in own_lines(name, node).into_iter().enumerate() {
        let at = if i == 0 { indent } else { &inner };
        out.push(format!("{at}{text}"));
    }
    for (child_name, child) in &node.children {
        export_node_lines(child_name, child, &inner, out);
    }
}

/// Refuses `node` (named `name` in the text, at `path`) or a node of its subtree if its text
/// would not read back as the same data.
pub fn check_exportable(path: &str, name: &str, node: &Node) -> Result<(), Unwritable> {
    for (text, want) in own_lines(name, node) {
        if let Some(want) = want {
            check_line(&text, &want).map_err(|why| Unwritable {
                path: path.to_string(),
                why,
            })?;
        }
    }
    for (child_name, child) in &node.children {
        let child_path = format!("{}/{child_name}", path.trim_end_matches('/'));
        check_exportable(&child_path, child_name, child)?;
    }
    Ok(())
}

/// Checks the node line of a top node named `name` without properties (`export --name` at
/// the root).
pub(crate) fn check_top_name(path: &str, name: &str) -> Result<(), Unwritable> {
    check_exportable(path, name, &Node::new())
}

/// Why `text` does not read back as `want` (`Ok` if it does).
fn check_line(text: &str, want: &Item) -> Result<(), String> {
    let what = match want {
        Item::Node { name, .. } => format!("the node name {}", repr_str(name)),
        Item::Prop { key, value } => {
            let (kind, name) = if let Some(name) = key.strip_suffix(LINK_SUFFIX) {
                ("symbolic link", name)
            } else if let Some(name) = key.strip_suffix(PLINK_SUFFIX) {
                ("property link", name)
            } else {
                ("property", key.as_str())
            };
            if kind != "property" && !value.is_string() {
                return Err(format!(
                    "the {kind} {} holds {}, not a path",
                    repr_str(name),
                    repr(value)
                ));
            }
            format!("the {kind} {}", repr_str(name))
        }
    };
    let name = match want {
        Item::Node { name, .. } => name.as_str(),
        Item::Prop { key, .. } => key
            .strip_suffix(LINK_SUFFIX)
            .or_else(|| key.strip_suffix(PLINK_SUFFIX))
            .unwrap_or(key),
    };
    if name.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if name.contains(['\n', '\r']) {
        return Err(format!("{what} holds a newline"));
    }
    if text.contains(['\n', '\r']) {
        return Err(format!("{what} has a target with a newline"));
    }
    if name.contains(is_blank) {
        return Err(format!("{what} holds a blank (a space or a tab)"));
    }
    if text.starts_with('#') {
        return Err(format!(
            "{what} starts with '#': the line would read back as a comment"
        ));
    }
    match classify(text, 0) {
        Ok(got) if &got == want => Ok(()),
        Ok(got) => Err(format!("{what} would read back as {}", describe(&got))),
        Err(e) => Err(format!(
            "{what} does not read back (the line {} gives: {})",
            repr_str(text),
            e.message
        )),
    }
}

/// A blank as the parser sees it (Python 2's ASCII whitespace).
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

fn describe(item: &Item) -> String {
    match item {
        Item::Node { name, kind: None } => format!("the node {}", repr_str(name)),
        Item::Node {
            name,
            kind: Some(kind),
        } => format!("the node {} of type {}", repr_str(name), repr_str(kind)),
        Item::Prop { key, value } => {
            if let Some(name) = key.strip_suffix(LINK_SUFFIX) {
                format!("a symbolic link {} -> {}", repr_str(name), repr(value))
            } else if let Some(name) = key.strip_suffix(PLINK_SUFFIX) {
                format!("a property link {} => {}", repr_str(name), repr(value))
            } else {
                format!("a property {} = {}", repr_str(key), repr(value))
            }
        }
    }
}

/// Text of the children of `root` (a whole tree), optionally wrapped in a top node `name`.
pub fn export_root(root: &Node, name: Option<&str>) -> String {
    let mut out = Vec::new();
    let mut indent = String::new();
    if let Some(name) = name {
        out.push(format!("/{name}"));
        indent.push_str("  ");
    }
    for (child_name, child) in &root.children {
        export_node_lines(child_name, child, &indent, &mut out);
    }
    finish(out)
}

/// Text of one node (and its subtree) under the given name.
pub fn export_subtree(name: &str, node: &Node) -> String {
    let mut out = Vec::new();
    export_node_lines(name, node, "", &mut out);
    finish(out)
}

fn finish(lines: Vec<String>) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
