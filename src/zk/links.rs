//! Symbolic links (`name -> target`) and property links (`name => path [property]`), resolved
//! as zc.zk does, over any [`NodeSource`] (a snapshot read with [`super::read_subtree`]).
//!
//! Path resolution: `.` and `..` are normalised; an existing path is itself; otherwise the
//! parent is resolved and, if it has a property `"<name> ->"`, resolution continues at its
//! target (relative targets are relative to the parent). Property reading: a key that is absent
//! but has a `"<key> =>"` link reads the linked node's property (the link's second word, or the
//! same key), following chains. Loops and dangling links are errors.

use serde_json::Value;

use super::snapshot::ZNode;
use crate::tree::{Props, LINK_SUFFIX, PLINK_SUFFIX};

/// Longest chain of links followed before giving up.
const MAX_HOPS: usize = 256;

/// Read access to a tree of nodes by absolute path.
pub trait NodeSource {
    /// The properties of the node at `path`, if it exists.
    fn props_at(&self, path: &str) -> Option<&Props>;
}

/// A snapshot read at `/` is a node source.
impl NodeSource for ZNode {
    fn props_at(&self, path: &str) -> Option<&Props> {
        self.get(path).map(|n| &n.props)
    }
}

/// A parsed text tree (its root at `/`) is a node source too, so links can be checked offline.
impl NodeSource for crate::tree::Node {
    fn props_at(&self, path: &str) -> Option<&Props> {
        self.get(path).map(|n| &n.props)
    }
}

/// Why a link could not be followed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    /// The path does not exist, even through links.
    #[error("no node {0}")]
    NoNode(String),
    /// The links form a loop (the paths visited).
    #[error("link loop: {}", .0.join(" -> "))]
    Loop(Vec<String>),
    /// A property link that cannot be followed.
    #[error("bad property link {key} => {target} in {path}: {reason}")]
    BadPropertyLink {
        /// Node holding the link.
        path: String,
        /// The property name.
        key: String,
        /// The link's text.
        target: String,
        /// Why it failed.
        reason: String,
    },
}

/// Normalises `/./` and `/x/../` the way zc.zk does; the empty result is the root.
pub(crate) fn normalize(path: &str) -> String {
    let mut path = path.to_string();
    loop {
        let once = replace_dot(&path);
        let next = replace_dotdot(&once);
        if next == path {
            break;
        }
        path = next;
    }
    if path.is_empty() {
        "/".to_string()
    } else {
        path
    }
}

/// zc.zk's `re.sub(r'/\.(/|$)', r'\1', path)`: every `/.` followed by `/` or the end, left to
/// right, becomes what followed it.
fn replace_dot(path: &str) -> String {
    let s = path.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with(b"/.") && matches!(s.get(i + 2), None | Some(b'/')) {
            // The match takes the `/` after it too (the search goes on after it).
            if s.get(i + 2).is_some() {
                out.push(b'/');
            }
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    // Only ASCII `/.` pairs were removed: the rest is the input's UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// zc.zk's `re.sub(r'/[^/]+/\.\.(/|$)', r'\1', path)`: every `/x/..` followed by `/` or the
/// end, left to right, becomes what followed it.
fn replace_dotdot(path: &str) -> String {
    let s = path.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'/' {
            let r = i + 1 + s[i + 1..].iter().take_while(|&&b| b != b'/').count();
            if r > i + 1 && s[r..].starts_with(b"/..") && matches!(s.get(r + 3), None | Some(b'/'))
            {
                if s.get(r + 3).is_some() {
                    out.push(b'/');
                }
                i = r + 4;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_default()
}

fn join(base: &str, name: &str) -> String {
    if base == "/" {
        format!("/{name}")
    } else {
        format!("{base}/{name}")
    }
}

/// Resolves `path` through symbolic links to the path of an existing node.
pub fn resolve(src: &dyn NodeSource, path: &str) -> Result<String, LinkError> {
    resolve_seen(src, path, &[]).map_err(|e| match e {
        LinkError::NoNode(_) => LinkError::NoNode(path.to_string()),
        other => other,
    })
}

fn resolve_seen(src: &dyn NodeSource, path: &str, seen: &[String]) -> Result<String, LinkError> {
    let path = normalize(path);
    if src.props_at(&path).is_some() {
        return Ok(path);
    }
    if path == "/" {
        return Err(LinkError::NoNode(path));
    }
    if seen.contains(&path) || seen.len() >= MAX_HOPS {
        let mut chain = seen.to_vec();
        chain.push(path);
        return Err(LinkError::Loop(chain));
    }
    let (base, name) = path
        .rsplit_once('/')
        .ok_or_else(|| LinkError::NoNode(path.clone()))?;
    let base =
        resolve_seen(src, if base.is_empty() { "/" } else { base }, seen).map_err(|e| match e {
            LinkError::NoNode(_) => LinkError::NoNode(path.clone()),
            other => other,
        })?;
    let direct = join(&base, name);
    if src.props_at(&direct).is_some() {
        return Ok(direct);
    }
    let props = src
        .props_at(&base)
        .ok_or_else(|| LinkError::NoNode(path.clone()))?;
    let target = match props.get(&format!("{name}{LINK_SUFFIX}")) {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => return Err(LinkError::NoNode(path.clone())),
    };
    let target = if target.starts_with('/') {
        target
    } else {
        join(&base, &target)
    };
    let mut seen = seen.to_vec();
    seen.push(path.clone());
    resolve_seen(src, &target, &seen)
}

/// Reads property `key` of the node at `path` (resolved through symbolic links), following
/// property links. `Ok(None)` if the node has neither the key nor a link for it.
pub fn property(src: &dyn NodeSource, path: &str, key: &str) -> Result<Option<Value>, LinkError> {
    let real = resolve(src, path)?;
    property_seen(src, path, &real, key, &mut Vec::new())
}

fn property_seen(
    src: &dyn NodeSource,
    path: &str,
    real: &str,
    key: &str,
    seen: &mut Vec<String>,
) -> Result<Option<Value>, LinkError> {
    let props = src
        .props_at(real)
        .ok_or_else(|| LinkError::NoNode(real.to_string()))?;
    if let Some(v) = props.get(key) {
        return Ok(Some(v.clone()));
    }
    let Some(link) = props.get(&format!("{key}{PLINK_SUFFIX}")) else {
        return Ok(None);
    };
    let bad = |reason: String| LinkError::BadPropertyLink {
        path: path.to_string(),
        key: key.to_string(),
        target: crate::tree::literal::py_str(link),
        reason,
    };
    let Value::String(text) = link else {
        return Err(bad("the link is not a string".into()));
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() || words.len() > 2 {
        return Err(bad("Invalid property link".into()));
    }
    let target = if words[0].starts_with('/') {
        words[0].to_string()
    } else {
        join(path, words[0])
    };
    let target = resolve(src, &target).map_err(|e| bad(e.to_string()))?;
    if seen.contains(&target) || seen.len() >= MAX_HOPS {
        let mut chain = seen.clone();
        chain.push(target);
        return Err(bad(LinkError::Loop(chain).to_string()));
    }
    seen.push(target.clone());
    let name = words.get(1).copied().unwrap_or(key);
    match property_seen(src, &target, &target, name, seen) {
        Ok(Some(v)) => Ok(Some(v)),
        Ok(None) => Err(bad(format!("no property {name} in {target}"))),
        Err(e) => Err(bad(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn normalize_agrees_with_zc_zk_regular_expressions() {
        use proptest::prelude::*;
        let dot = regex::Regex::new(r"/\.(/|$)").unwrap();
        let dotdot = regex::Regex::new(r"/[^/]+/\.\.(/|$)").unwrap();
        let check = |path: &str| {
            assert_eq!(replace_dot(path), dot.replace_all(path, "$1"), "{path:?}");
            assert_eq!(
                replace_dotdot(path),
                dotdot.replace_all(path, "$1"),
                "{path:?}"
            );
        };
        for path in [
            "/./././x",
            "/a/../..",
            "/../..",
            "/a/./../b/.",
            "/.",
            "/..",
            "/a/..b/..",
            "/é/../ü",
        ] {
            check(path);
        }
        proptest!(|(path in "[/.aé]{0,16}")| check(&path));
    }

    use super::*;

    #[test]
    fn normalizes_dots() {
        assert_eq!(normalize("/a/./b"), "/a/b");
        assert_eq!(normalize("/a/b/../c"), "/a/c");
        assert_eq!(normalize("/a/b/c/../../d"), "/a/d");
        assert_eq!(normalize("/a/.."), "/");
        assert_eq!(normalize("/a/."), "/a");
    }
}
