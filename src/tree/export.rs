//! Export of a [`Node`] tree in the zc.zk text format (zc.zk's `export_tree`).
//!
//! Node line `/name` plus ` : type` when the `type` property is non-empty; then the properties
//! sorted by key (property links as `name => target`, values as Python literals without the `u`
//! prefix), then the symbolic links sorted (`name -> target`), then the children sorted by name;
//! two spaces of indentation per level. Parsing the output gives back the same data.

use serde_json::Value;

use super::literal::{py_str, repr};
use super::{Node, LINK_SUFFIX, PLINK_SUFFIX};

/// Appends the lines of `node`, named `name`, at `indent`, to `out`.
pub fn export_node_lines(name: &str, node: &Node, indent: &str, out: &mut Vec<String>) {
    let mut head = format!("{indent}/{name}");
    if let Some(kind) = node.props.get("type").filter(|v| truthy(v)) {
        head.push_str(" : ");
        head.push_str(&py_str(kind));
    }
    out.push(head);
    let inner = format!("{indent}  ");
    let mut links = Vec::new();
    for (key, value) in &node.props {
        if key == "type" {
            continue;
        }
        if let Some(link) = key.strip_suffix(LINK_SUFFIX) {
            links.push(format!("{inner}{link} -> {}", py_str(value)));
        } else if let (Some(plink), Value::String(target)) = (key.strip_suffix(PLINK_SUFFIX), value)
        {
            out.push(format!("{inner}{plink} => {target}"));
        } else {
            out.push(format!("{inner}{key} = {}", repr(value)));
        }
    }
    out.extend(links);
    for (child_name, child) in &node.children {
        export_node_lines(child_name, child, &inner, out);
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

/// Python truthiness of a JSON value.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().map(|f| f != 0.0).unwrap_or(true),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}
