//! The zc.zk text tree format: an in-memory [`Node`] tree, the Python-literal property values
//! ([`literal`]), the parser ([`parse`](mod@parse)) and the exporter ([`export`]). Pure code, no I/O.
//!
//! A node's properties are kept exactly as they are stored in ZooKeeper: a JSON object whose
//! keys ending in `" ->"` are symbolic links and keys ending in `" =>"` are property links, and
//! whose `type` key holds the node type written as `/name : type` in text.

pub mod encoding;
pub mod export;
pub(crate) mod literal;
pub mod parse;
pub(crate) mod rollout;
pub(crate) mod spelling;

use std::collections::BTreeMap;

/// Property map of a node: sorted keys, JSON values (as stored in ZooKeeper).
pub type Props = serde_json::Map<String, serde_json::Value>;

/// Suffix of a symbolic-link key (`name ->`).
pub(crate) const LINK_SUFFIX: &str = " ->";
/// Suffix of a property-link key (`name =>`).
pub(crate) const PLINK_SUFFIX: &str = " =>";

/// One node of a parsed (or exported) tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// Properties, including `type` and link keys.
    pub props: Props,
    /// Children by name, sorted.
    pub children: BTreeMap<String, Node>,
    /// 1-based line of the text that defined this node (0 when not from text).
    pub line: usize,
    /// The node's data when it is not text (not UTF-8), byte for byte: written as it is, in
    /// text `string_value = b'…'`. `props` then holds what [`encoding::decode`] reads from it.
    pub raw: Option<Vec<u8>>,
}

impl Node {
    /// A node without properties or children.
    pub fn new() -> Node {
        Node::default()
    }

    /// The data a write of this node stores: [`Node::raw`] if set, else the encoded properties.
    pub(crate) fn data(&self) -> Vec<u8> {
        match &self.raw {
            Some(raw) => raw.clone(),
            None => encoding::encode(&self.props),
        }
    }

    /// Number of nodes in this subtree, this node excluded.
    pub fn descendants(&self) -> usize {
        self.children.values().map(|c| 1 + c.descendants()).sum()
    }

    /// The child at a relative path of `/`-separated names, if present.
    pub fn get(&self, rel: &str) -> Option<&Node> {
        let mut node = self;
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            node = node.children.get(part)?;
        }
        Some(node)
    }
}

/// Why a node name cannot be used (`None` if it can): every name the ZooKeeper server
/// refuses (its `PathUtils.validatePath`: empty, `.`, `..`, U+0000–U+001F, U+007F–U+009F,
/// U+D800–U+F8FF, U+FFF0–U+FFFF, and, as it counts UTF-16 units, anything outside the BMP),
/// so that `tree check` and the syncer's offline lint refuse what a write would fail on.
pub fn bad_node_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty node name")
    } else if name.contains('/') {
        Some("node name contains '/'")
    } else if name == "." || name == ".." {
        Some("node name is '.' or '..'")
    } else if name.chars().any(is_forbidden_char) {
        Some("node name contains a control or non-character")
    } else if name.chars().any(|c| c as u32 > 0xffff) {
        // The server checks UTF-16 code units: outside the BMP, a character is a surrogate
        // pair, and surrogates are refused (`PathUtils.validatePath`).
        Some("node name contains a character outside the Basic Multilingual Plane (an emoji, for instance), which ZooKeeper refuses")
    } else {
        None
    }
}

/// Characters that print as nothing, escaped wherever user text is quoted in a message: the
/// byte-order mark, the soft hyphen, zero-width and bidirectional format characters.
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{feff}' | '\u{00ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
    )
}

/// Characters ZooKeeper refuses in path elements (and that we refuse too).
fn is_forbidden_char(c: char) -> bool {
    let u = c as u32;
    u <= 0x1f
        || (0x7f..=0x9f).contains(&u)
        || (0xd800..=0xf8ff).contains(&u)
        || (0xfff0..=0xffff).contains(&u)
}
