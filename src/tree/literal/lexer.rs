//! The tokenizer: [`Lexer`] turns the expression's characters into [`Tok`]ens on demand,
//! skipping blanks, comments and backslash line continuations, and lexes names and operators.
//! String literals (prefixes, quotes, escapes) are lexed in [`string`], numbers in [`number`].
//!
//! An out-of-range number is an evaluation error, not a syntax error: the lexer records it
//! (see [`Lexer::take_deferred`]) and yields a placeholder token, so that lexing goes on.

mod number;
mod string;

use super::{err, LiteralError, INVALID_SYNTAX};

/// Operator tokens, longest first.
const OPERATORS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "...", "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "<>", "->",
    ":=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "+", "-", "*", "/", "%", "@", "&",
    "|", "^", "~", "<", ">", "=", ".", ",", ":", ";", "(", ")", "[", "]", "{", "}",
];

/// A lexical token.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Str(String),
    /// Integer literal; its magnitude is at most `u64::MAX`.
    Int(i128),
    Float(f64),
    Imaginary,
    Name(String),
    Op(&'static str),
    Eof,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// A cursor over the expression's characters.
pub(super) struct Lexer {
    chars: Vec<char>,
    pos: usize,
    /// The first evaluation error met while lexing, until [`Lexer::take_deferred`].
    deferred: Option<LiteralError>,
}

impl Lexer {
    pub(super) fn new(expr: &str) -> Self {
        Lexer {
            chars: expr.chars().collect(),
            pos: 0,
            deferred: None,
        }
    }

    /// The evaluation error recorded while lexing, if any (and forget it).
    pub(super) fn take_deferred(&mut self) -> Option<LiteralError> {
        self.deferred.take()
    }

    fn defer(&mut self, msg: impl Into<String>) {
        if self.deferred.is_none() {
            self.deferred = Some(err(msg));
        }
    }

    fn at(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }

    fn skip_blank(&mut self) {
        while let Some(c) = self.at(self.pos) {
            match c {
                ' ' | '\t' | '\x0c' | '\n' | '\r' => self.pos += 1,
                '#' => {
                    while let Some(c) = self.at(self.pos) {
                        if c == '\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                '\\' if self.at(self.pos + 1) == Some('\n') => self.pos += 2,
                '\\' if self.at(self.pos + 1) == Some('\r') => {
                    self.pos += 2;
                    if self.at(self.pos) == Some('\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    /// The next token; [`Tok::Eof`] at the end of the input.
    pub(super) fn next_token(&mut self) -> Result<Tok, LiteralError> {
        self.skip_blank();
        let Some(c) = self.at(self.pos) else {
            return Ok(Tok::Eof);
        };
        if c.is_ascii_digit()
            || (c == '.' && self.at(self.pos + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            return self.lex_number();
        }
        if c == '\'' || c == '"' {
            return self.lex_string("").map(Tok::Str);
        }
        if is_ident_start(c) {
            let start = self.pos;
            while self.at(self.pos).is_some_and(is_ident_char) {
                self.pos += 1;
            }
            let name: String = self.chars[start..self.pos].iter().collect();
            if matches!(self.at(self.pos), Some('\'' | '"')) {
                let prefix = name.to_ascii_lowercase();
                if matches!(prefix.as_str(), "u" | "b" | "r" | "ur" | "br" | "rb") {
                    return self.lex_string(&prefix).map(Tok::Str);
                }
            }
            return Ok(Tok::Name(name));
        }
        for op in OPERATORS {
            if op
                .chars()
                .enumerate()
                .all(|(i, oc)| self.at(self.pos + i) == Some(oc))
            {
                self.pos += op.len();
                return Ok(Tok::Op(op));
            }
        }
        Err(err(INVALID_SYNTAX))
    }
}

#[cfg(test)]
mod tests {
    use crate::tree::literal::tests::ok;
    use serde_json::json;

    #[test]
    fn comments() {
        assert_eq!(ok("1 # comment"), json!(1));
        assert_eq!(ok("'#' # '"), json!("#"));
        assert_eq!(ok("[1, # one\n 2]"), json!([1, 2]));
    }
}
