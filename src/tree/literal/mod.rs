//! Python literal expressions as used by the zc.zk tree format (`name = EXPR`): a safe parser
//! of Python 2/3 literals into [`serde_json::Value`] (it replaces Python's `eval` and never
//! evaluates anything), and Python-style [`repr()`] / [`py_str`] of JSON values such that
//! `parse_literal(&repr(v)) == Ok(v)` for every JSON value `v`.
//!
//! Errors are reported like Python would: syntax errors (`invalid syntax`, `unexpected EOF
//! while parsing`, bad string literals) take precedence over evaluation errors (`name 'x' is
//! not defined`, out-of-range numbers, unhashable keys, ...), which are reported in source order.
//!
//! Layout: `lexer` turns the text into tokens (with `lexer::string` for string literals and
//! their escapes, `lexer::number` for integer and float literals), `parser` builds values from
//! them ([`parse_literal`]), `repr` writes values back ([`repr()`], [`py_str`], [`repr_str`]).
//! This file holds the error type and Python's error messages, shared by all of them.

mod lexer;
mod parser;
mod repr;
#[cfg(test)]
mod tests;

pub(crate) use parser::parse_literal;
pub(crate) use repr::repr_bytes;
pub(crate) use repr::{py_str, repr, repr_str};

/// The bytes of `expr` when it is a bytes literal (`b'…'`, `B"…"`, `br'…'`, adjacent ones
/// concatenated) written in ASCII, each character of its value (escapes such as `\xff`
/// included) standing for one byte; `None` for anything else. The tree format reads
/// `string_value = b'…'`, a node's only property, as the node's data byte for byte.
pub(crate) fn bytes_literal(expr: &str) -> Option<Vec<u8>> {
    let t = expr.trim_start();
    let after_b = t.strip_prefix(['b', 'B'])?;
    let quoted = after_b.strip_prefix(['r', 'R']).unwrap_or(after_b);
    if !quoted.starts_with(['\'', '"']) || !expr.is_ascii() {
        return None;
    }
    match parse_literal(expr).ok()? {
        serde_json::Value::String(s) => s.chars().map(|c| u8::try_from(c).ok()).collect(),
        _ => None,
    }
}

/// Error of a literal expression; Display gives the Python-like reason only,
/// e.g. "invalid syntax", "unexpected EOF while parsing", "name 'foo' is not defined",
/// "integer out of range", "float out of range", "too deeply nested", "unsupported: function call".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LiteralError(pub(crate) String);

// Python's error messages, shared by the lexer and the parser.
const INVALID_SYNTAX: &str = "invalid syntax";
const UNEXPECTED_EOF: &str = "unexpected EOF while parsing";
const EOL_IN_STRING: &str = "EOL while scanning string literal";
const INT_RANGE: &str = "integer out of range";
const FLOAT_RANGE: &str = "float out of range";
const UNHASHABLE: &str = "unhashable type";

fn err(msg: impl Into<String>) -> LiteralError {
    LiteralError(msg.into())
}
