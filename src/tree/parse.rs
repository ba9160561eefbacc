//! Parser of the zc.zk text tree format.
//!
//! The grammar and the error messages are zc.zk's (`parse_tree`): each line is classified by
//! trying, in order, a property link (`name => target`), a property (`name = <literal>`), a
//! symbolic link (`name -> target`) and a node (`/name [: type]`); indentation builds the tree.
//! Differences from the original, all deliberate: property values are Python literals parsed by
//! [`super::literal`] (never evaluated), every error names its line, node names must be usable
//! as ZooKeeper path elements, and nesting is bounded so no input can exhaust the stack.
//! `string_value = b'…'` as a node's only property is the node's data byte for byte
//! ([`Node::raw`] when it is not UTF-8), as the original wrote a Python 2 byte string.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::encoding::{decode, request_bytes, MAX_NODE_DATA};
use super::literal::{bytes_literal, parse_literal, repr_str};
use super::{bad_node_name, Node, Props, LINK_SUFFIX, PLINK_SUFFIX};

/// Deepest node nesting accepted (ZooKeeper paths are bounded anyway).
pub(crate) const MAX_DEPTH: usize = 200;

/// A parse error: the 1-based line and the original's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// The message, in the original's words (e.g. `Bad link format: 'a ->'`).
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Longest piece of the offending text an error message quotes.
const QUOTED_CHARS: usize = 200;

/// The offending text as the original quotes it (Python's `repr`), cut to [`QUOTED_CHARS`]
/// characters so a huge line cannot make a huge message.
fn quoted(text: &str) -> String {
    let shown = match text.char_indices().nth(QUOTED_CHARS) {
        None => repr_str(text),
        Some((at, _)) => format!(
            "{}… ({} characters)",
            repr_str(&text[..at]),
            text.chars().count()
        ),
    };
    // A byte-order mark or a zero-width space would be invisible in the message.
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        if super::is_invisible(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Longest error message: text quoted in a message is cut already, but a message may carry
/// other user text (a literal's error naming a 1 MB token); it never repeats a whole line.
const MAX_MESSAGE_CHARS: usize = 1000;

fn err(line: usize, message: impl Into<String>) -> ParseError {
    let mut message = message.into();
    if let Some((at, _)) = message.char_indices().nth(MAX_MESSAGE_CHARS) {
        let total = message.chars().count();
        message.truncate(at);
        message.push_str(&format!("… (message cut, {total} characters)"));
    }
    ParseError { line, message }
}

/// Python 2's `str.strip()` whitespace (ASCII only).
fn is_py_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

// zc.zk's line patterns (Python regular expressions, `\s` being Python 2's ASCII whitespace and
// `.` anything but a newline), matched by hand with the same backtracking outcome; the tests
// check them against the regular expressions on generated lines. By hand because a regular
// expression engine would be the biggest piece of code in the binary, and all of the binary's
// code stays resident in the agent (docs/design.md, "Memory").
//
//   property link: (?P<name>\S+)\s*=>\s*(?P<target>\S+(\s+\S+)?)(\s+(?P<pname>/\S+))?
//   property:      (?P<name>\S+)\s*=\s*(?P<expr>\S.*)
//   link:          (?P<name>\S+)\s*->\s*(?P<target>\S+)
//   node:          /(?P<name>\S+)(\s*:\s*(?P<type>\S.*))?

/// End of the run of whitespace (`ws = true`) or non-whitespace starting at `i`.
fn run(s: &[u8], i: usize, ws: bool) -> usize {
    i + s[i.min(s.len())..]
        .iter()
        .take_while(|&&b| is_py_space(b as char) == ws)
        .count()
}

/// `\S.*$` from `i`: the rest of the line if it starts with a non-space and has no newline.
fn rest_from(s: &[u8], i: usize) -> Option<usize> {
    (i < s.len() && !is_py_space(s[i] as char) && !s[i..].contains(&b'\n')).then_some(i)
}

/// `^(\S+)\s*SEP\s*` then `tail(s, after)`; the name is as long as possible (greedy `\S+`).
/// Returns the end of the name and what `tail` found.
fn split_at<T>(
    s: &[u8],
    sep: &[u8],
    tail: impl Fn(&[u8], usize) -> Option<T>,
) -> Option<(usize, T)> {
    let k = run(s, 0, false);
    (1..=k).rev().find_map(|i| {
        let j = run(s, i, true);
        if !s[j..].starts_with(sep) {
            return None;
        }
        tail(s, run(s, j + sep.len(), true)).map(|t| (i, t))
    })
}

/// A property link: `(name end, target range)`.
fn match_plink(s: &[u8]) -> Option<(usize, (usize, usize))> {
    split_at(s, b"=>", |s, t0| {
        let n = s.len();
        let a = run(s, t0, false);
        if a == t0 {
            return None;
        }
        // `(\s+/\S+)?$` after `end`.
        let pname_then_end = |end: usize| {
            end == n || {
                let w = run(s, end, true);
                w > end && s.get(w) == Some(&b'/') && run(s, w + 1, false) == n && w + 1 < n
            }
        };
        // The optional second word of the target first (greedy), then without it.
        if a < n {
            let w = run(s, a, true);
            let b = run(s, w, false);
            if b > w && pname_then_end(b) {
                return Some((t0, b));
            }
        }
        pname_then_end(a).then_some((t0, a))
    })
}

/// A property: `(name end, start of the expression)`.
fn match_property(s: &[u8]) -> Option<(usize, usize)> {
    split_at(s, b"=", rest_from)
}

/// A symbolic link: `(name end, start of the target)`.
fn match_link(s: &[u8]) -> Option<(usize, usize)> {
    split_at(s, b"->", |s, t| {
        (t < s.len() && run(s, t, false) == s.len()).then_some(t)
    })
}

/// A node: `(name end, start of the type)`.
fn match_node(s: &[u8]) -> Option<(usize, Option<usize>)> {
    if s.first() != Some(&b'/') {
        return None;
    }
    let k = run(s, 1, false);
    (2..=k).rev().find_map(|i| {
        let j = run(s, i, true);
        if s.get(j) == Some(&b':') {
            if let Some(t) = rest_from(s, run(s, j + 1, true)) {
                return Some((i, Some(t)));
            }
        }
        (i == s.len()).then_some((i, None))
    })
}

/// What one line holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// `/name [: kind]`.
    Node { name: String, kind: Option<String> },
    /// A property, a symbolic link (`name ->` key) or a property link (`name =>` key).
    Prop { key: String, value: Value },
}

/// The property that holds data that is not JSON (see [`super::encoding`]).
const STRING_VALUE: &str = "string_value";

/// What a line (stripped of its indentation, not a comment) holds; an error names `lineno`.
pub(crate) fn classify(stripped: &str, lineno: usize) -> Result<Item, ParseError> {
    // Every boundary the matchers return is next to an ASCII character: slicing is safe.
    let b = stripped.as_bytes();
    if let Some((name, (t0, t1))) = match_plink(b) {
        return Ok(Item::Prop {
            key: format!("{}{PLINK_SUFFIX}", &stripped[..name]),
            value: Value::String(stripped[t0..t1].to_string()),
        });
    }
    if let Some((name, e)) = match_property(b) {
        let expr = &stripped[e..];
        let value = parse_literal(expr).map_err(|e| {
            err(
                lineno,
                format!("Error {e} in expression: {} in line {lineno}", quoted(expr)),
            )
        })?;
        return Ok(Item::Prop {
            key: stripped[..name].to_string(),
            value,
        });
    }
    if let Some((name, t)) = match_link(b) {
        return Ok(Item::Prop {
            key: format!("{}{LINK_SUFFIX}", &stripped[..name]),
            value: Value::String(stripped[t..].to_string()),
        });
    }
    if let Some((name, kind)) = match_node(b) {
        return Ok(Item::Node {
            name: stripped[1..name].to_string(),
            kind: kind.map(|t| stripped[t..].to_string()),
        });
    }
    if stripped.contains("->") {
        Err(err(
            lineno,
            format!("Bad link format: {}", quoted(stripped)),
        ))
    } else {
        Err(err(
            lineno,
            format!("Unrecognized data: {}", quoted(stripped)),
        ))
    }
}

/// A node under construction (arena entry).
struct Building {
    props: Props,
    children: BTreeMap<String, usize>,
    line: usize,
    /// The bytes of a `string_value = b'…'` line.
    bytes: Option<Vec<u8>>,
}

enum Entry {
    Node(usize),
    Prop,
}

/// Parses text into a root node whose children are the top-level nodes.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    let mut arena = vec![Building {
        props: Props::new(),
        children: BTreeMap::new(),
        line: 0,
        bytes: None,
    }];
    // The indentation stack of zc.zk: (indent, entry), starting with the root at -1.
    let mut stack: Vec<(isize, Entry)> = vec![(-1, Entry::Node(0))];
    for (i, raw) in text.split('\n').enumerate() {
        let lineno = i + 1;
        let line = raw.trim_end_matches(is_py_space);
        if line.is_empty() {
            continue;
        }
        let stripped = line.trim_start_matches(is_py_space);
        if stripped.starts_with('#') {
            continue;
        }
        let indent = (line.chars().count() - stripped.chars().count()) as isize;
        let item = classify(stripped, lineno)?;

        let parent = place(&mut stack, indent, line, stripped, lineno)?;
        match item {
            Item::Node { name, kind } => {
                if let Some(why) = bad_node_name(&name) {
                    return Err(err(lineno, format!("{why}: {}", quoted(stripped))));
                }
                if stack.len() - 1 > MAX_DEPTH {
                    return Err(err(
                        lineno,
                        format!("nodes nested deeper than {MAX_DEPTH} levels"),
                    ));
                }
                if arena[parent].children.contains_key(&name) {
                    return Err(err(lineno, format!("duplicate node: {}", quoted(stripped))));
                }
                let mut props = Props::new();
                if let Some(kind) = kind {
                    props.insert("type".to_string(), Value::String(kind));
                }
                let idx = arena.len();
                arena.push(Building {
                    props,
                    children: BTreeMap::new(),
                    line: lineno,
                    bytes: None,
                });
                arena[parent].children.insert(name, idx);
                let top = stack.len() - 1;
                stack[top] = (indent, Entry::Node(idx));
            }
            Item::Prop { key, value } => {
                if parent == 0 {
                    return Err(err(lineno, "Can't import properties above imported nodes."));
                }
                if arena[parent].props.contains_key(&key) {
                    return Err(err(
                        lineno,
                        format!("duplicate property: {}", quoted(stripped)),
                    ));
                }
                if key == STRING_VALUE {
                    arena[parent].bytes = bytes_literal(raw_line_expr(stripped));
                }
                arena[parent].props.insert(key, value);
            }
        }
    }
    let root = assemble(&mut arena, 0);
    check_sizes(&root, "")?;
    Ok(root)
}

/// Places a line indented by `indent` on the indentation `stack`: a deeper line goes under
/// the entry above it (which must be a node), a shallower one closes entries down to its
/// level (which must exist). Returns the arena index of the line's parent node; the line's
/// own entry is the stack's top (a property until the caller says otherwise).
fn place(
    stack: &mut Vec<(isize, Entry)>,
    indent: isize,
    line: &str,
    stripped: &str,
    lineno: usize,
) -> Result<usize, ParseError> {
    let top_indent = stack.last().map(|e| e.0).unwrap_or(-1);
    if indent > top_indent {
        if !matches!(stack.last(), Some((_, Entry::Node(_)))) {
            return Err(err(
                lineno,
                format!("Can't indent under properties: {}", quoted(line)),
            ));
        }
        stack.push((indent, Entry::Prop));
    } else {
        while stack.len() > 1 && indent < stack[stack.len() - 1].0 {
            stack.pop();
        }
        if indent > stack[stack.len() - 1].0 {
            return Err(err(
                lineno,
                format!("Invalid indentation: {}", quoted(stripped)),
            ));
        }
    }
    match stack[stack.len() - 2].1 {
        Entry::Node(idx) => Ok(idx),
        Entry::Prop => unreachable!("a property never has entries above it"),
    }
}

/// Refuses a node whose write ZooKeeper would not take (its path and its properties, encoded,
/// over [`MAX_NODE_DATA`]): the server would drop the connection of whoever sends it.
fn check_sizes(node: &Node, path: &str) -> Result<(), ParseError> {
    for (name, child) in &node.children {
        let child_path = format!("{path}/{name}");
        let data = child.data().len();
        let bytes = request_bytes(&child_path, data);
        if bytes > MAX_NODE_DATA {
            return Err(err(
                child.line,
                format!(
                    "writing {child_path} would send {bytes} bytes ({data} of data, {} of \
                     path), over ZooKeeper's limit of {MAX_NODE_DATA} bytes (jute.maxbuffer)",
                    child_path.len()
                ),
            ));
        }
        check_sizes(child, &child_path)?;
    }
    Ok(())
}

/// Parses bytes, reporting invalid UTF-8 with the line it is on.
pub fn parse_bytes(bytes: &[u8]) -> Result<Node, ParseError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(e) => {
            let line = 1 + bytes[..e.valid_up_to()]
                .iter()
                .filter(|b| **b == b'\n')
                .count();
            Err(err(line, "invalid UTF-8"))
        }
    }
}

/// The expression of a `name = EXPR` line (the line is known to be a property).
fn raw_line_expr(stripped: &str) -> &str {
    match match_property(stripped.as_bytes()) {
        Some((_, e)) => &stripped[e..],
        None => "",
    }
}

fn assemble(arena: &mut Vec<Building>, idx: usize) -> Node {
    let mut props = std::mem::take(&mut arena[idx].props);
    let kids = std::mem::take(&mut arena[idx].children);
    let line = arena[idx].line;
    let mut raw = None;
    // `string_value = b'…'` alone: the node's data is exactly those bytes.
    if let Some(bytes) = arena[idx].bytes.take().filter(|_| props.len() == 1) {
        match String::from_utf8(bytes) {
            Ok(text) => {
                props.insert(STRING_VALUE.to_string(), Value::String(text));
            }
            Err(e) => {
                props = decode(e.as_bytes());
                raw = Some(e.into_bytes());
            }
        }
    }
    let children = kids
        .into_iter()
        .map(|(name, c)| (name, assemble(arena, c)))
        .collect();
    Node {
        props,
        children,
        line,
        raw,
    }
}

#[cfg(test)]
mod pattern_tests {
    //! The hand matchers against zc.zk's regular expressions (the `regex` crate, a
    //! dev-dependency), on generated lines made of the characters that matter.

    use super::*;
    use proptest::prelude::*;
    use regex::Regex;

    fn re(p: &str) -> Regex {
        let p = p
            .replace(r"\S", r"[^ \t\n\r\x0B\x0C]")
            .replace(r"\s", r"[ \t\n\r\x0B\x0C]");
        Regex::new(&format!("^(?:{p})$")).unwrap()
    }

    fn check(line: &str) {
        let b = line.as_bytes();
        let plink = re(r"(?P<name>\S+)\s*=>\s*(?P<target>\S+(\s+\S+)?)(\s+(?P<pname>/\S+))?");
        let want = plink.captures(line).map(|m| {
            (
                m["name"].len(),
                (
                    m.name("target").unwrap().start(),
                    m.name("target").unwrap().end(),
                ),
            )
        });
        assert_eq!(match_plink(b), want, "property link {line:?}");
        let property = re(r"(?P<name>\S+)\s*=\s*(?P<expr>\S.*)");
        let want = property
            .captures(line)
            .map(|m| (m["name"].len(), m.name("expr").unwrap().start()));
        assert_eq!(match_property(b), want, "property {line:?}");
        let link = re(r"(?P<name>\S+)\s*->\s*(?P<target>\S+)");
        let want = link
            .captures(line)
            .map(|m| (m["name"].len(), m.name("target").unwrap().start()));
        assert_eq!(match_link(b), want, "link {line:?}");
        let node = re(r"/(?P<name>\S+)(\s*:\s*(?P<type>\S.*))?");
        let want = node.captures(line).map(|m| {
            (
                m.name("name").unwrap().end(),
                m.name("type").map(|t| t.start()),
            )
        });
        assert_eq!(match_node(b), want, "node {line:?}");
    }

    #[test]
    fn known_lines() {
        for line in [
            "",
            "/",
            "/a",
            "/a : t",
            "/a:t",
            "/a :",
            "/a: t x",
            "/a\t:\tt",
            "//",
            "/a b",
            "a = 1",
            "a=1",
            "a =",
            "a = b = c",
            "a=b=c",
            "= 1",
            "a == 1",
            "a = \n1",
            "a -> b",
            "a->b",
            "a -> b c",
            "a->",
            "a -> -> b",
            "a => b",
            "a => b c",
            "a => b /c",
            "a => b c /d",
            "a => b /c d",
            "a => b c d",
            "a=>b",
            "a => /b",
            "x => a /p q",
            "a=>b=>c",
            "é = 'é'",
            "/é : ü",
            "a -> é",
            "a => é /ü",
        ] {
            check(line);
        }
    }

    proptest! {
        #[test]
        fn matchers_agree_with_the_regular_expressions(line in "[ \t\n/ab=>:\\-é]{0,14}") {
            check(&line);
        }
    }
}
