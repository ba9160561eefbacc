//! Python literal expressions as used by the zc.zk tree format (`name = EXPR`): a safe parser
//! of Python 2/3 literals into [`serde_json::Value`] (it replaces Python's `eval` and never
//! evaluates anything), and Python-style [`repr`] / [`py_str`] of JSON values such that
//! `parse_literal(&repr(v)) == Ok(v)` for every JSON value `v`.
//!
//! Errors are reported like Python would: syntax errors (`invalid syntax`, `unexpected EOF
//! while parsing`, bad string literals) take precedence over evaluation errors (`name 'x' is
//! not defined`, out-of-range numbers, unhashable keys, ...), which are reported in source order.

use serde_json::{Map, Number, Value};

/// Error of a literal expression; Display gives the Python-like reason only,
/// e.g. "invalid syntax", "unexpected EOF while parsing", "name 'foo' is not defined",
/// "integer out of range", "float out of range", "too deeply nested", "unsupported: function call".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct LiteralError(pub String);

/// Deepest bracket nesting accepted.
const MAX_NESTING: usize = 100;

const INVALID_SYNTAX: &str = "invalid syntax";
const UNEXPECTED_EOF: &str = "unexpected EOF while parsing";
const EOL_IN_STRING: &str = "EOL while scanning string literal";
const INT_RANGE: &str = "integer out of range";
const FLOAT_RANGE: &str = "float out of range";
const UNHASHABLE: &str = "unhashable type";

/// Python keywords that can never start or continue a literal.
const KEYWORDS: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif",
    "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
    "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Operator tokens, longest first.
const OPERATORS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "...", "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "<>", "->",
    ":=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "+", "-", "*", "/", "%", "@", "&",
    "|", "^", "~", "<", ">", "=", ".", ",", ":", ";", "(", ")", "[", "]", "{", "}",
];

/// Binary operators: accepted syntactically, rejected as "invalid syntax" (nothing is evaluated).
const BINARY_OPERATORS: &[&str] = &[
    "+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>", "&", "|", "^", "<", ">", "<=", ">=",
    "==", "!=", "<>",
];
const BINARY_KEYWORDS: &[&str] = &["and", "or", "in", "is", "not", "if", "else"];

fn err(msg: impl Into<String>) -> LiteralError {
    LiteralError(msg.into())
}

/// Parse a Python literal expression into a JSON value, without evaluating anything.
pub fn parse_literal(expr: &str) -> Result<Value, LiteralError> {
    let mut p = Parser {
        chars: expr.chars().collect(),
        pos: 0,
        peeked: None,
        depth: 0,
        deferred: None,
    };
    let item = p.parse_top()?;
    let value = p.value_of(item);
    match p.deferred.take() {
        Some(e) => Err(e),
        None => Ok(value),
    }
}

/// Python repr without the u prefix: 'x', 1, 1.5, True, None, [1, 'a'], {'k': 2}
pub fn repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(v, &mut out);
    out
}

/// Python str(): strings raw, everything else as repr.
pub fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => repr(other),
    }
}

/// Python repr of a string (quote choice and escapes as Python 3 repr).
pub fn repr_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_repr_str(s, &mut out);
    out
}

fn write_repr(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&repr_number(n)),
        Value::String(s) => write_repr_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr_str(k, out);
                out.push_str(": ");
                write_repr(item, out);
            }
            out.push('}');
        }
    }
}

fn repr_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        repr_float(n.as_f64().unwrap_or(0.0))
    }
}

/// Python's float repr: shortest round-trip digits, fixed notation for decimal exponents in
/// `-4..16`, scientific (`1e+16`, `1.5e-05`) otherwise.
fn repr_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.unsigned_abs())
    }
}

fn write_repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let code = c as u32;
                if code < 0x100 {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code < 0x10000 {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// A lexical token.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Str(String),
    /// Integer literal; its magnitude is at most `u64::MAX`.
    Int(i128),
    Float(f64),
    Imaginary,
    Name(String),
    Op(&'static str),
    Eof,
}

/// A parsed operand, kept richer than JSON until its context is known (unary signs apply to
/// numbers only, tuples are not hashable as keys, integer range is checked after signs).
#[derive(Debug)]
enum Item {
    Int(i128),
    Float(f64),
    Tuple(Vec<Value>),
    Val(Value),
}

impl Item {
    fn type_name(&self) -> &'static str {
        match self {
            Item::Int(_) => "int",
            Item::Float(_) => "float",
            Item::Tuple(_) => "tuple",
            Item::Val(Value::Null) => "NoneType",
            Item::Val(Value::Bool(_)) => "bool",
            Item::Val(Value::Number(_)) => "float",
            Item::Val(Value::String(_)) => "str",
            Item::Val(Value::Array(_)) => "list",
            Item::Val(Value::Object(_)) => "dict",
        }
    }
}

fn unexpected(tok: &Tok) -> LiteralError {
    match tok {
        Tok::Eof => err(UNEXPECTED_EOF),
        _ => err(INVALID_SYNTAX),
    }
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Recursive-descent parser over a lazily lexed token stream. Syntax errors abort at once
/// (`Err`); evaluation errors are recorded in `deferred` (the first one wins) and parsing
/// goes on, so that a later syntax error is still reported first, as Python does.
struct Parser {
    chars: Vec<char>,
    pos: usize,
    peeked: Option<Tok>,
    depth: usize,
    deferred: Option<LiteralError>,
}

impl Parser {
    fn defer(&mut self, msg: impl Into<String>) {
        if self.deferred.is_none() {
            self.deferred = Some(err(msg));
        }
    }

    fn at(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }

    // ----- lexer -----

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

    fn lex(&mut self) -> Result<Tok, LiteralError> {
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

    /// Digits (ASCII, any case) of `radix` with single underscores between them; the first
    /// underscore may come before any digit only when `leading_underscore`.
    fn scan_digits(
        &mut self,
        radix: u32,
        leading_underscore: bool,
    ) -> Result<String, LiteralError> {
        let mut digits = String::new();
        loop {
            match self.at(self.pos) {
                Some(c) if c.is_digit(radix) => {
                    digits.push(c);
                    self.pos += 1;
                }
                Some('_') if !digits.is_empty() || leading_underscore => {
                    if self.at(self.pos + 1).is_some_and(|c| c.is_digit(radix)) {
                        self.pos += 1;
                    } else {
                        return Err(err(INVALID_SYNTAX));
                    }
                }
                _ => return Ok(digits),
            }
        }
    }

    /// Checked conversion of ASCII digits to a magnitude; `None` when above `u64::MAX`.
    fn magnitude(digits: &str, radix: u32) -> Option<i128> {
        let mut value: u128 = 0;
        for c in digits.chars() {
            value = value
                .checked_mul(u128::from(radix))?
                .checked_add(u128::from(c.to_digit(radix)?))?;
            if value > u128::from(u64::MAX) {
                return None;
            }
        }
        i128::try_from(value).ok()
    }

    fn int_token(&mut self, digits: &str, radix: u32) -> Tok {
        match Self::magnitude(digits, radix) {
            Some(v) => Tok::Int(v),
            None => {
                self.defer(INT_RANGE);
                Tok::Int(0)
            }
        }
    }

    /// After a number: an optional Python 2 long suffix (integers only), then no identifier
    /// character may follow.
    fn finish_number(&mut self, allow_long: bool) -> Result<(), LiteralError> {
        if allow_long && matches!(self.at(self.pos), Some('l' | 'L')) {
            self.pos += 1;
        }
        if self.at(self.pos).is_some_and(is_ident_char) {
            return Err(err(INVALID_SYNTAX));
        }
        Ok(())
    }

    fn lex_number(&mut self) -> Result<Tok, LiteralError> {
        if self.at(self.pos) == Some('0') {
            let radix = match self.at(self.pos + 1) {
                Some('x' | 'X') => Some(16),
                Some('o' | 'O') => Some(8),
                Some('b' | 'B') => Some(2),
                _ => None,
            };
            if let Some(radix) = radix {
                self.pos += 2;
                let digits = self.scan_digits(radix, true)?;
                if digits.is_empty() {
                    return Err(err(INVALID_SYNTAX));
                }
                self.finish_number(true)?;
                return Ok(self.int_token(&digits, radix));
            }
        }
        let int_part = self.scan_digits(10, false)?;
        let mut is_float = false;
        let mut frac = String::new();
        if self.at(self.pos) == Some('.') {
            is_float = true;
            self.pos += 1;
            frac = self.scan_digits(10, false)?;
        }
        let mut exp = String::new();
        if matches!(self.at(self.pos), Some('e' | 'E')) {
            let sign = matches!(self.at(self.pos + 1), Some('+' | '-'));
            let digit_at = self.pos + 1 + usize::from(sign);
            if self.at(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                is_float = true;
                if self.at(self.pos + 1) == Some('-') {
                    exp.push('-');
                }
                self.pos = digit_at;
                exp.push_str(&self.scan_digits(10, false)?);
            }
        }
        if matches!(self.at(self.pos), Some('j' | 'J')) {
            self.pos += 1;
            self.finish_number(false)?;
            return Ok(Tok::Imaginary);
        }
        if is_float {
            self.finish_number(false)?;
            let text = format!(
                "{}.{}e{}",
                if int_part.is_empty() { "0" } else { &int_part },
                if frac.is_empty() { "0" } else { &frac },
                if exp.is_empty() { "0" } else { &exp }
            );
            let f: f64 = text.parse().map_err(|_| err(INVALID_SYNTAX))?;
            if f.is_finite() {
                return Ok(Tok::Float(f));
            }
            self.defer(FLOAT_RANGE);
            return Ok(Tok::Float(0.0));
        }
        self.finish_number(true)?;
        let significant = int_part.trim_start_matches('0');
        if int_part.len() > 1 && int_part.starts_with('0') && !significant.is_empty() {
            // Python 2 octal literal: 0755.
            if !significant.chars().all(|c| c.is_digit(8)) {
                return Err(err(INVALID_SYNTAX));
            }
            return Ok(self.int_token(significant, 8));
        }
        Ok(self.int_token(&int_part, 10))
    }

    /// Exactly `n` hex digits at the current position, as a code point.
    fn hex_code(&mut self, n: usize, what: &str) -> Result<u32, LiteralError> {
        let mut code: u32 = 0;
        for i in 0..n {
            match self.at(self.pos + i).and_then(|c| c.to_digit(16)) {
                Some(d) => code = code.wrapping_mul(16).wrapping_add(d),
                None => return Err(err(format!("truncated {what} escape"))),
            }
        }
        self.pos += n;
        Ok(code)
    }

    /// A `\u` (n = 4) or `\U` (n = 8) escape whose backslash and letter are consumed; a
    /// surrogate pair written as two `\u` escapes is combined, a lone surrogate is an error.
    fn unicode_escape(&mut self, n: usize) -> Result<char, LiteralError> {
        let what = if n == 4 { "\\uXXXX" } else { "\\UXXXXXXXX" };
        let code = self.hex_code(n, what)?;
        if (0xD800..0xDC00).contains(&code)
            && self.at(self.pos) == Some('\\')
            && self.at(self.pos + 1) == Some('u')
        {
            let save = self.pos;
            self.pos += 2;
            if let Ok(low) = self.hex_code(4, "\\uXXXX") {
                if (0xDC00..0xE000).contains(&low) {
                    let combined = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    if let Some(c) = char::from_u32(combined) {
                        return Ok(c);
                    }
                }
            }
            self.pos = save;
        }
        if (0xD800..0xE000).contains(&code) {
            return Err(err("surrogates not allowed"));
        }
        char::from_u32(code).ok_or_else(|| err("illegal Unicode character"))
    }

    /// A string literal with its (lowercased) prefix already consumed; `pos` is at the quote.
    fn lex_string(&mut self, prefix: &str) -> Result<String, LiteralError> {
        let raw = prefix.contains('r');
        let bytes = prefix.contains('b');
        let raw_unicode = prefix == "ur";
        let Some(quote) = self.at(self.pos) else {
            return Err(err(EOL_IN_STRING));
        };
        let triple = self.at(self.pos + 1) == Some(quote) && self.at(self.pos + 2) == Some(quote);
        self.pos += if triple { 3 } else { 1 };
        let mut out = String::new();
        loop {
            let Some(c) = self.at(self.pos) else {
                return Err(err(EOL_IN_STRING));
            };
            if c == quote {
                if !triple {
                    self.pos += 1;
                    return Ok(out);
                }
                if self.at(self.pos + 1) == Some(quote) && self.at(self.pos + 2) == Some(quote) {
                    self.pos += 3;
                    return Ok(out);
                }
            }
            if !triple && (c == '\n' || c == '\r') {
                return Err(err(EOL_IN_STRING));
            }
            self.pos += 1;
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(n) = self.at(self.pos) else {
                return Err(err(EOL_IN_STRING));
            };
            self.pos += 1;
            if raw {
                if raw_unicode && (n == 'u' || n == 'U') {
                    out.push(self.unicode_escape(if n == 'u' { 4 } else { 8 })?);
                } else {
                    out.push('\\');
                    out.push(n);
                }
                continue;
            }
            match n {
                '\n' => {}
                '\r' => {
                    if self.at(self.pos) == Some('\n') {
                        self.pos += 1;
                    }
                }
                '\\' | '\'' | '"' => out.push(n),
                'a' => out.push('\x07'),
                'b' => out.push('\x08'),
                'f' => out.push('\x0c'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'v' => out.push('\x0b'),
                '0'..='7' => {
                    let mut code = n.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match self.at(self.pos).and_then(|c| c.to_digit(8)) {
                            Some(d) => {
                                code = code * 8 + d;
                                self.pos += 1;
                            }
                            None => break,
                        }
                    }
                    if bytes {
                        code &= 0xff;
                    }
                    // At most 0o777: always a valid scalar value.
                    out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                }
                'x' => {
                    let code = self.hex_code(2, "\\xXX")?;
                    out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                }
                'u' | 'U' if !bytes => {
                    out.push(self.unicode_escape(if n == 'u' { 4 } else { 8 })?)
                }
                'N' if !bytes => return Err(err("unsupported: \\N{...} escape")),
                _ => {
                    out.push('\\');
                    out.push(n);
                }
            }
        }
    }

    // ----- token stream -----

    fn peek(&mut self) -> Result<&Tok, LiteralError> {
        let tok = match self.peeked.take() {
            Some(t) => t,
            None => self.lex()?,
        };
        Ok(self.peeked.insert(tok))
    }

    fn next(&mut self) -> Result<Tok, LiteralError> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lex(),
        }
    }

    fn peek_op(&mut self, op: &str) -> Result<bool, LiteralError> {
        Ok(matches!(self.peek()?, Tok::Op(o) if *o == op))
    }

    fn peek_name(&mut self, name: &str) -> Result<bool, LiteralError> {
        Ok(matches!(self.peek()?, Tok::Name(n) if n == name))
    }

    /// Consume the next token, which must be the operator `op`.
    fn expect_op(&mut self, op: &str) -> Result<(), LiteralError> {
        match self.next()? {
            Tok::Op(o) if o == op => Ok(()),
            t => Err(unexpected(&t)),
        }
    }

    fn enter(&mut self) -> Result<(), LiteralError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(err("too deeply nested"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    // ----- conversions -----

    fn value_of(&mut self, item: Item) -> Value {
        match item {
            Item::Int(v) => {
                if let Ok(u) = u64::try_from(v) {
                    Value::from(u)
                } else if let Ok(i) = i64::try_from(v) {
                    Value::from(i)
                } else {
                    self.defer(INT_RANGE);
                    Value::Null
                }
            }
            Item::Float(f) => match Number::from_f64(f) {
                Some(n) => Value::Number(n),
                None => {
                    self.defer(FLOAT_RANGE);
                    Value::Null
                }
            },
            Item::Tuple(items) => Value::Array(items),
            Item::Val(v) => v,
        }
    }

    /// A dict key converted the way Python's `json.dumps` does.
    fn key_of(&mut self, item: Item) -> String {
        match item {
            Item::Int(v) => v.to_string(),
            Item::Float(f) => repr_float(f),
            Item::Val(Value::String(s)) => s,
            Item::Val(Value::Bool(b)) => b.to_string(),
            Item::Val(Value::Null) => "null".to_string(),
            Item::Val(Value::Number(n)) => repr_number(&n),
            Item::Tuple(_) | Item::Val(Value::Array(_) | Value::Object(_)) => {
                self.defer(UNHASHABLE);
                String::new()
            }
        }
    }

    // ----- grammar -----

    /// `expr (',' expr)* ','?` then end of input; a bare tuple is allowed as in `eval`.
    fn parse_top(&mut self) -> Result<Item, LiteralError> {
        let first = self.parse_expr()?;
        if !self.peek_op(",")? {
            return match self.next()? {
                Tok::Eof => Ok(first),
                _ => Err(err(INVALID_SYNTAX)),
            };
        }
        let mut items = vec![self.value_of(first)];
        loop {
            match self.next()? {
                Tok::Eof => return Ok(Item::Tuple(items)),
                Tok::Op(",") => {
                    if matches!(self.peek()?, Tok::Eof) {
                        continue;
                    }
                    let item = self.parse_expr()?;
                    let value = self.value_of(item);
                    items.push(value);
                }
                _ => return Err(err(INVALID_SYNTAX)),
            }
        }
    }

    /// Consume a binary operator if one comes next.
    fn eat_binary_operator(&mut self) -> Result<bool, LiteralError> {
        let found = match self.peek()? {
            Tok::Op(o) => BINARY_OPERATORS.contains(o),
            Tok::Name(n) => BINARY_KEYWORDS.contains(&n.as_str()),
            _ => false,
        };
        if !found {
            return Ok(false);
        }
        // `not in` and `is not` are two-word operators.
        let second = match self.next()? {
            Tok::Name(n) if n == "not" => Some("in"),
            Tok::Name(n) if n == "is" => Some("not"),
            _ => None,
        };
        if let Some(second) = second {
            if self.peek_name(second)? {
                self.next()?;
            }
        }
        Ok(true)
    }

    /// An operand possibly combined with binary operators (parsed, then rejected).
    fn parse_expr(&mut self) -> Result<Item, LiteralError> {
        let mut item = self.parse_unary()?;
        while self.eat_binary_operator()? {
            self.defer(INVALID_SYNTAX);
            item = self.parse_unary()?;
        }
        Ok(item)
    }

    /// Unary `+`/`-` (any number of them) on a number.
    fn parse_unary(&mut self) -> Result<Item, LiteralError> {
        let mut negate = false;
        let mut first_sign: Option<char> = None;
        let mut unsupported = false;
        loop {
            let sign = match self.peek()? {
                Tok::Op("-") => '-',
                Tok::Op("+") => '+',
                Tok::Op("~") => '~',
                Tok::Name(n) if n == "not" => '!',
                _ => break,
            };
            self.next()?;
            match sign {
                '-' => negate = !negate,
                '+' => {}
                _ => unsupported = true,
            }
            first_sign.get_or_insert(sign);
        }
        let item = self.parse_postfix()?;
        if unsupported {
            self.defer(INVALID_SYNTAX);
        }
        let Some(sign) = first_sign else {
            return Ok(item);
        };
        Ok(match item {
            Item::Int(v) => Item::Int(if negate { -v } else { v }),
            Item::Float(f) => Item::Float(if negate { -f } else { f }),
            other => {
                if !unsupported {
                    self.defer(format!(
                        "bad operand type for unary {sign}: '{}'",
                        other.type_name()
                    ));
                }
                Item::Val(Value::Null)
            }
        })
    }

    /// An atom followed by calls, subscripts or attribute accesses (parsed, then rejected).
    fn parse_postfix(&mut self) -> Result<Item, LiteralError> {
        let mut item = self.parse_atom()?;
        loop {
            if self.peek_op("(")? {
                self.next()?;
                self.defer("unsupported: function call");
                self.parse_sequence(")")?;
            } else if self.peek_op("[")? {
                self.next()?;
                self.defer("unsupported: subscript");
                self.parse_sequence("]")?;
            } else if self.peek_op(".")? {
                self.next()?;
                match self.next()? {
                    Tok::Name(n) if !KEYWORDS.contains(&n.as_str()) => {
                        self.defer("unsupported: attribute access")
                    }
                    t => return Err(unexpected(&t)),
                }
            } else {
                return Ok(item);
            }
            item = Item::Val(Value::Null);
        }
    }

    /// Comma-separated expressions (trailing comma allowed) up to `close`; the opening
    /// bracket is already consumed.
    fn parse_sequence(&mut self, close: &str) -> Result<Vec<Value>, LiteralError> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            if self.peek_op(close)? {
                self.next()?;
                break;
            }
            let item = self.parse_expr()?;
            let value = self.value_of(item);
            items.push(value);
            match self.next()? {
                Tok::Op(",") => {}
                Tok::Op(o) if o == close => break,
                t => return Err(unexpected(&t)),
            }
        }
        self.leave();
        Ok(items)
    }

    fn parse_atom(&mut self) -> Result<Item, LiteralError> {
        match self.next()? {
            Tok::Str(mut s) => {
                while matches!(self.peek()?, Tok::Str(_)) {
                    if let Tok::Str(more) = self.next()? {
                        s.push_str(&more);
                    }
                }
                Ok(Item::Val(Value::String(s)))
            }
            Tok::Int(v) => Ok(Item::Int(v)),
            Tok::Float(f) => Ok(Item::Float(f)),
            Tok::Imaginary => {
                self.defer("unsupported: complex number");
                Ok(Item::Val(Value::Null))
            }
            Tok::Name(name) => match name.as_str() {
                "True" => Ok(Item::Val(Value::Bool(true))),
                "False" => Ok(Item::Val(Value::Bool(false))),
                "None" => Ok(Item::Val(Value::Null)),
                n if KEYWORDS.contains(&n) => Err(err(INVALID_SYNTAX)),
                n => {
                    self.defer(format!("name '{n}' is not defined"));
                    Ok(Item::Val(Value::Null))
                }
            },
            Tok::Op("(") => self.parse_paren(),
            Tok::Op("[") => Ok(Item::Val(Value::Array(self.parse_sequence("]")?))),
            Tok::Op("{") => self.parse_brace(),
            Tok::Op("...") => {
                self.defer("Ellipsis is not JSON serializable");
                Ok(Item::Val(Value::Null))
            }
            t => Err(unexpected(&t)),
        }
    }

    /// `()`, `(x)` or a tuple; `(` is consumed.
    fn parse_paren(&mut self) -> Result<Item, LiteralError> {
        self.enter()?;
        if self.peek_op(")")? {
            self.next()?;
            self.leave();
            return Ok(Item::Tuple(Vec::new()));
        }
        let first = self.parse_expr()?;
        match self.next()? {
            Tok::Op(")") => {
                self.leave();
                Ok(first)
            }
            Tok::Op(",") => {
                let first = self.value_of(first);
                let mut rest = self.parse_sequence(")")?;
                self.leave();
                rest.insert(0, first);
                Ok(Item::Tuple(rest))
            }
            t => Err(unexpected(&t)),
        }
    }

    /// A dict or a set; `{` is consumed.
    fn parse_brace(&mut self) -> Result<Item, LiteralError> {
        self.enter()?;
        if self.peek_op("}")? {
            self.next()?;
            self.leave();
            return Ok(Item::Val(Value::Object(Map::new())));
        }
        let first = self.parse_expr()?;
        match self.next()? {
            Tok::Op(":") => {
                let mut map = Map::new();
                let mut key = self.key_of(first);
                loop {
                    let item = self.parse_expr()?;
                    let value = self.value_of(item);
                    map.insert(key, value);
                    match self.next()? {
                        Tok::Op("}") => break,
                        Tok::Op(",") => {}
                        t => return Err(unexpected(&t)),
                    }
                    if self.peek_op("}")? {
                        self.next()?;
                        break;
                    }
                    let item = self.parse_expr()?;
                    key = self.key_of(item);
                    self.expect_op(":")?;
                }
                self.leave();
                Ok(Item::Val(Value::Object(map)))
            }
            Tok::Op(",") => {
                self.value_of(first);
                self.parse_sequence("}")?;
                self.leave();
                self.defer("set is not JSON serializable");
                Ok(Item::Val(Value::Null))
            }
            Tok::Op("}") => {
                self.value_of(first);
                self.leave();
                self.defer("set is not JSON serializable");
                Ok(Item::Val(Value::Null))
            }
            t => Err(unexpected(&t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn ok(expr: &str) -> Value {
        match parse_literal(expr) {
            Ok(v) => v,
            Err(e) => panic!("{expr:?} failed: {e}"),
        }
    }

    fn fails(expr: &str) -> String {
        match parse_literal(expr) {
            Ok(v) => panic!("{expr:?} parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    // ----- strings -----

    #[test]
    fn simple_strings() {
        assert_eq!(ok("'abc'"), json!("abc"));
        assert_eq!(ok("\"abc\""), json!("abc"));
        assert_eq!(ok("''"), json!(""));
        assert_eq!(ok("\"it's\""), json!("it's"));
        assert_eq!(ok("'say \"hi\"'"), json!("say \"hi\""));
        assert_eq!(ok("'héllo ☃ 😀'"), json!("héllo ☃ 😀"));
        assert_eq!(ok("  'a'  "), json!("a"));
    }

    #[test]
    fn triple_quoted_strings() {
        assert_eq!(ok("'''a'b''c'''"), json!("a'b''c"));
        assert_eq!(ok("\"\"\"x\ny\"\"\""), json!("x\ny"));
        assert_eq!(ok("''''''"), json!(""));
        assert_eq!(ok("\"\"\"say \"hi\" \"\"\""), json!("say \"hi\" "));
    }

    #[test]
    fn string_prefixes() {
        for p in [
            "u", "U", "b", "B", "r", "R", "ur", "UR", "uR", "br", "bR", "Br", "BR", "rb", "rB",
            "Rb", "RB",
        ] {
            assert_eq!(ok(&format!("{p}'x'")), json!("x"), "prefix {p}");
            assert_eq!(ok(&format!("{p}\"x\"")), json!("x"), "prefix {p}");
        }
        assert_eq!(fails("f'x'"), "invalid syntax");
        assert_eq!(fails("ub'x'"), "invalid syntax");
    }

    #[test]
    fn escapes() {
        assert_eq!(ok(r#"'\\ \' \" \n \t \r'"#), json!("\\ ' \" \n \t \r"));
        assert_eq!(ok(r"'\a\b\f\v'"), json!("\x07\x08\x0c\x0b"));
        assert_eq!(ok(r"'\0'"), json!("\0"));
        assert_eq!(ok(r"'\101\1011\7'"), json!("AA1\x07"));
        assert_eq!(ok(r"'\x41\xe9'"), json!("Aé"));
        assert_eq!(ok(r"'\u00e9\u2603'"), json!("é☃"));
        assert_eq!(ok(r"'\U0001F600'"), json!("😀"));
        assert_eq!(ok(r"'\ud83d\ude00'"), json!("😀"));
        assert_eq!(ok(r"'\q\d'"), json!("\\q\\d"));
        assert_eq!(ok("'a\\\nb'"), json!("ab"));
    }

    #[test]
    fn bad_escapes() {
        assert_eq!(fails(r"'\x4'"), "truncated \\xXX escape");
        assert_eq!(fails(r"'\u12'"), "truncated \\uXXXX escape");
        assert_eq!(fails(r"'\U0001F6'"), "truncated \\UXXXXXXXX escape");
        assert_eq!(fails(r"'\U00110000'"), "illegal Unicode character");
        assert!(parse_literal(r"'\ud800'").is_err());
        assert!(parse_literal(r"'\udc00\ud800'").is_err());
        assert!(parse_literal(r"'\ud800x'").is_err());
        assert!(parse_literal(r"'\N{DASH}'").is_err());
    }

    #[test]
    fn bytes_strings() {
        assert_eq!(ok(r"b'abc\n'"), json!("abc\n"));
        assert_eq!(ok(r"b'\u0041'"), json!("\\u0041"));
        assert_eq!(ok(r"b'\x41'"), json!("A"));
    }

    #[test]
    fn raw_strings() {
        assert_eq!(ok(r"r'a\nb'"), json!("a\\nb"));
        assert_eq!(ok(r"r'\''"), json!("\\'"));
        assert_eq!(ok(r"r'\\'"), json!("\\\\"));
        assert_eq!(ok(r"R'\d+'"), json!("\\d+"));
        assert_eq!(ok(r"br'\x41'"), json!("\\x41"));
        assert_eq!(ok(r"ur'\u0041\n'"), json!("A\\n"));
        assert_eq!(fails(r"r'\'"), "EOL while scanning string literal");
        assert_eq!(fails(r"r'abc\\\'"), "EOL while scanning string literal");
    }

    #[test]
    fn adjacent_strings_concatenate() {
        assert_eq!(ok("'a' \"b\""), json!("ab"));
        assert_eq!(ok("'a''b'u'c'"), json!("abc"));
        assert_eq!(ok("['a' 'b', 'c']"), json!(["ab", "c"]));
    }

    #[test]
    fn unterminated_strings() {
        for e in [
            "'abc",
            "\"abc",
            "'''abc''",
            "\"\"\"abc",
            "'abc\ndef'",
            "'abc\\",
            "'",
            "u'",
        ] {
            assert_eq!(fails(e), "EOL while scanning string literal", "{e:?}");
        }
    }

    // ----- numbers -----

    #[test]
    fn integers() {
        assert_eq!(ok("0"), json!(0));
        assert_eq!(ok("-12"), json!(-12));
        assert_eq!(ok("1_000"), json!(1000));
        assert_eq!(ok("00"), json!(0));
        assert_eq!(ok("0x1F"), json!(31));
        assert_eq!(ok("0X_ff"), json!(255));
        assert_eq!(ok("0o17"), json!(15));
        assert_eq!(ok("0O17"), json!(15));
        assert_eq!(ok("0b101"), json!(5));
        assert_eq!(ok("0B1_0"), json!(2));
        assert_eq!(ok("0755"), json!(493));
        assert_eq!(ok("-0755"), json!(-493));
        assert_eq!(ok("10L"), json!(10));
        assert_eq!(ok("10l"), json!(10));
        assert_eq!(ok("0xffL"), json!(255));
        assert_eq!(ok("18446744073709551615"), json!(u64::MAX));
        assert_eq!(ok("-9223372036854775808"), json!(i64::MIN));
        assert_eq!(ok("9223372036854775807"), json!(i64::MAX));
    }

    #[test]
    fn bad_integers() {
        for e in [
            "1__0", "1_", "0x", "0x_", "0b2", "0o8", "09", "0_9", "1a", "0xg", "1.5L", "1jL",
        ] {
            assert_eq!(fails(e), "invalid syntax", "{e:?}");
        }
    }

    #[test]
    fn integer_out_of_range() {
        for e in [
            "18446744073709551616",
            "-9223372036854775809",
            "-18446744073709551615",
            "0x1_0000_0000_0000_0000",
            "99999999999999999999999999999999999999999999999999999",
            "[1, 123456789012345678901234567890]",
        ] {
            assert_eq!(fails(e), "integer out of range", "{e:?}");
        }
    }

    #[test]
    fn floats() {
        assert_eq!(ok("1.5"), json!(1.5));
        assert_eq!(ok("1."), json!(1.0));
        assert_eq!(ok(".5"), json!(0.5));
        assert_eq!(ok("1e5"), json!(1e5));
        assert_eq!(ok("1E-5"), json!(1e-5));
        assert_eq!(ok("1_0.5"), json!(10.5));
        assert_eq!(ok("0755.5"), json!(755.5));
        assert_eq!(ok("-2.5e+3"), json!(-2500.0));
        assert_eq!(ok("1e-400"), json!(0.0));
        assert!(ok("1.0").is_f64());
        assert!(ok("-0.0")
            .as_f64()
            .is_some_and(|f| f == 0.0 && f.is_sign_negative()));
    }

    #[test]
    fn float_out_of_range() {
        assert_eq!(fails("1e400"), "float out of range");
        assert_eq!(fails("-1e400"), "float out of range");
        assert_eq!(fails("[1e99999999999999999999]"), "float out of range");
    }

    #[test]
    fn complex_is_rejected() {
        assert!(parse_literal("1j").is_err());
        assert!(parse_literal("1.5J").is_err());
        assert_eq!(fails("1+2j"), "invalid syntax");
    }

    #[test]
    fn unary_signs() {
        assert_eq!(ok("--1"), json!(1));
        assert_eq!(ok("- - -1"), json!(-1));
        assert_eq!(ok("+1"), json!(1));
        assert_eq!(ok("-+-1.5"), json!(1.5));
        assert_eq!(ok("-(1)"), json!(-1));
        assert_eq!(ok("-(-(18446744073709551615))"), json!(u64::MAX));
        assert_eq!(ok(&format!("{}1", "-".repeat(100_000))), json!(1));
        assert_eq!(fails("-'a'"), "bad operand type for unary -: 'str'");
        assert!(parse_literal("-[1]").is_err());
        assert!(parse_literal("-None").is_err());
        assert!(parse_literal("-True").is_err());
        assert!(parse_literal("+(1,)").is_err());
        assert!(parse_literal("~1").is_err());
        assert!(parse_literal("not 1").is_err());
    }

    // ----- names -----

    #[test]
    fn constants() {
        assert_eq!(ok("True"), json!(true));
        assert_eq!(ok("False"), json!(false));
        assert_eq!(ok("None"), json!(null));
    }

    #[test]
    fn names_are_not_defined() {
        assert_eq!(fails("foo"), "name 'foo' is not defined");
        assert_eq!(fails("true"), "name 'true' is not defined");
        assert_eq!(fails("[1, null]"), "name 'null' is not defined");
        assert!(parse_literal("foo()").is_err());
        assert!(parse_literal("os.system('x')").is_err());
        assert!(parse_literal("__import__('os')").is_err());
        assert_eq!(fails("'a'.upper()"), "unsupported: attribute access");
        assert_eq!(fails("True()"), "unsupported: function call");
        assert_eq!(fails("[1][0]"), "unsupported: subscript");
        assert_eq!(fails("lambda: 1"), "invalid syntax");
        assert_eq!(fails("foo bar"), "invalid syntax");
        assert_eq!(fails("[foo,"), "unexpected EOF while parsing");
    }

    // ----- containers -----

    #[test]
    fn lists() {
        assert_eq!(ok("[]"), json!([]));
        assert_eq!(ok("[1, 'a', None]"), json!([1, "a", null]));
        assert_eq!(ok("[1,]"), json!([1]));
        assert_eq!(ok("[ [ ] , [1 , [2]] ]"), json!([[], [1, [2]]]));
        assert_eq!(fails("[,]"), "invalid syntax");
        assert_eq!(fails("[1,,]"), "invalid syntax");
        assert_eq!(fails("[1 2]"), "invalid syntax");
        assert_eq!(fails("[1)"), "invalid syntax");
    }

    #[test]
    fn tuples_and_parentheses() {
        assert_eq!(ok("()"), json!([]));
        assert_eq!(ok("(1,)"), json!([1]));
        assert_eq!(ok("(1, 'b')"), json!([1, "b"]));
        assert_eq!(ok("(1, 2,)"), json!([1, 2]));
        assert_eq!(ok("(1)"), json!(1));
        assert_eq!(ok("((('x')))"), json!("x"));
        assert_eq!(ok("1, 2"), json!([1, 2]));
        assert_eq!(ok("1,"), json!([1]));
        assert_eq!(fails("(,)"), "invalid syntax");
    }

    #[test]
    fn dicts() {
        assert_eq!(ok("{}"), json!({}));
        assert_eq!(ok("{'a': 1, 'b': [2]}"), json!({"a": 1, "b": [2]}));
        assert_eq!(ok("{'a': 1,}"), json!({"a": 1}));
        assert_eq!(ok("{'a': 1, 'a': 2}"), json!({"a": 2}));
        assert_eq!(ok("{1: 'x', -2: 'y'}"), json!({"1": "x", "-2": "y"}));
        assert_eq!(ok("{1.5: 0, 1e16: 0}"), json!({"1.5": 0, "1e+16": 0}));
        assert_eq!(
            ok("{True: 1, False: 2, None: 3}"),
            json!({"true": 1, "false": 2, "null": 3})
        );
        assert_eq!(ok("{u'k': {'n': (1, 2)}}"), json!({"k": {"n": [1, 2]}}));
        assert_eq!(fails("{'a' 1}"), "invalid syntax");
        assert_eq!(fails("{'a': 1 'b': 2}"), "invalid syntax");
        assert_eq!(fails("{'a': 1, 'b'}"), "invalid syntax");
        assert_eq!(fails("{:1}"), "invalid syntax");
    }

    #[test]
    fn unhashable_keys() {
        assert_eq!(fails("{[1]: 2}"), "unhashable type");
        assert_eq!(fails("{{}: 2}"), "unhashable type");
        assert_eq!(fails("{(1, 2): 2}"), "unhashable type");
        assert_eq!(fails("{'a': 1, (): 2}"), "unhashable type");
    }

    #[test]
    fn sets_are_rejected() {
        assert_eq!(fails("{1, 2}"), "set is not JSON serializable");
        assert_eq!(fails("{1}"), "set is not JSON serializable");
        assert_eq!(fails("{1,}"), "set is not JSON serializable");
    }

    // ----- syntax errors -----

    #[test]
    fn operators_are_rejected() {
        for e in [
            "1+1",
            "1 - 1",
            "'a' * 3",
            "2**3",
            "1 if True else 2",
            "1 < 2",
            "1 not in []",
            "1 is not None",
        ] {
            assert_eq!(fails(e), "invalid syntax", "{e:?}");
        }
    }

    #[test]
    fn garbage_is_rejected() {
        for e in [
            "1 2", "'a' 1", "[1] x", "1 = 2", "1;", "$", "?", "a b", "1\0", "\0", "...1", "`1`",
        ] {
            assert_eq!(fails(e), "invalid syntax", "{e:?}");
        }
    }

    #[test]
    fn early_end_of_input() {
        for e in [
            "",
            "   ",
            "# just a comment",
            "1+",
            "[1,",
            "'a' +",
            "[",
            "(",
            "{",
            "{'a':",
            "{'a'",
            "-",
            "[1, [2",
            "'a'.",
        ] {
            assert_eq!(fails(e), "unexpected EOF while parsing", "{e:?}");
        }
    }

    #[test]
    fn comments() {
        assert_eq!(ok("1 # comment"), json!(1));
        assert_eq!(ok("'#' # '"), json!("#"));
        assert_eq!(ok("[1, # one\n 2]"), json!([1, 2]));
    }

    #[test]
    fn nesting_limit() {
        let ok_depth = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(parse_literal(&ok_depth).is_ok());
        let too_deep = format!("{}{}", "[".repeat(101), "]".repeat(101));
        assert_eq!(fails(&too_deep), "too deeply nested");
        assert_eq!(fails(&"[".repeat(100_000)), "too deeply nested");
        assert_eq!(fails(&"(".repeat(100_000)), "too deeply nested");
        assert_eq!(fails(&"{'a':".repeat(100_000)), "too deeply nested");
        assert_eq!(fails(&"-(".repeat(100_000)), "too deeply nested");
        assert_eq!(fails(&"f(".repeat(100_000)), "too deeply nested");
    }

    #[test]
    fn syntax_errors_win_over_evaluation_errors() {
        assert_eq!(fails("foo 'bar"), "EOL while scanning string literal");
        assert_eq!(fails("[1e400, "), "unexpected EOF while parsing");
        assert_eq!(fails("[x, y]"), "name 'x' is not defined");
    }

    // ----- repr -----

    #[test]
    fn repr_scalars() {
        assert_eq!(repr(&json!(null)), "None");
        assert_eq!(repr(&json!(true)), "True");
        assert_eq!(repr(&json!(false)), "False");
        assert_eq!(repr(&json!(1)), "1");
        assert_eq!(repr(&json!(-12)), "-12");
        assert_eq!(repr(&json!(u64::MAX)), "18446744073709551615");
        assert_eq!(repr(&json!(i64::MIN)), "-9223372036854775808");
    }

    #[test]
    fn repr_floats() {
        assert_eq!(repr(&json!(1.5)), "1.5");
        assert_eq!(repr(&json!(1.0)), "1.0");
        assert_eq!(repr(&json!(100.0)), "100.0");
        assert_eq!(repr(&json!(0.0)), "0.0");
        assert_eq!(repr(&json!(-0.0)), "-0.0");
        assert_eq!(repr(&json!(0.1)), "0.1");
        assert_eq!(repr(&json!(0.0001)), "0.0001");
        assert_eq!(repr(&json!(0.00001)), "1e-05");
        assert_eq!(repr(&json!(1.5e-5)), "1.5e-05");
        assert_eq!(repr(&json!(1e15)), "1000000000000000.0");
        assert_eq!(repr(&json!(1e16)), "1e+16");
        assert_eq!(repr(&json!(1.2345e20)), "1.2345e+20");
        assert_eq!(repr(&json!(-1e100)), "-1e+100");
        assert_eq!(repr(&json!(123.456)), "123.456");
        assert_eq!(repr(&json!(5e-324)), "5e-324");
        assert_eq!(repr(&json!(f64::MAX)), "1.7976931348623157e+308");
        assert_eq!(repr(&json!(0.1 + 0.2)), "0.30000000000000004");
    }

    #[test]
    fn repr_strings() {
        assert_eq!(repr(&json!("x")), "'x'");
        assert_eq!(repr(&json!("")), "''");
        assert_eq!(repr(&json!("it's")), "\"it's\"");
        assert_eq!(repr(&json!("say \"hi\"")), "'say \"hi\"'");
        assert_eq!(repr(&json!("it's \"x\"")), "'it\\'s \"x\"'");
        assert_eq!(repr(&json!("a\\b")), "'a\\\\b'");
        assert_eq!(repr(&json!("a\nb\tc\rd")), "'a\\nb\\tc\\rd'");
        assert_eq!(repr(&json!("\0\x07\x7f")), "'\\x00\\x07\\x7f'");
        assert_eq!(
            repr(&json!("\u{85}\u{a0}\u{2028}\u{3000}")),
            "'\\x85\\xa0\\u2028\\u3000'"
        );
        assert_eq!(repr(&json!("é☃😀")), "'é☃😀'");
        assert_eq!(repr_str("a'b"), "\"a'b\"");
    }

    #[test]
    fn repr_containers() {
        assert_eq!(repr(&json!([])), "[]");
        assert_eq!(repr(&json!({})), "{}");
        assert_eq!(repr(&json!([1, "a", null])), "[1, 'a', None]");
        assert_eq!(repr(&json!({"z": [1], "k": 2})), "{'k': 2, 'z': [1]}");
        assert_eq!(
            repr(&json!({"a": {"b": [true, 1.5]}})),
            "{'a': {'b': [True, 1.5]}}"
        );
    }

    #[test]
    fn py_str_of_values() {
        assert_eq!(py_str(&json!("it's")), "it's");
        assert_eq!(py_str(&json!("a\nb")), "a\nb");
        assert_eq!(py_str(&json!(1.5)), "1.5");
        assert_eq!(py_str(&json!(["a"])), "['a']");
        assert_eq!(py_str(&json!(null)), "None");
    }

    #[test]
    fn error_display_is_the_reason() {
        assert_eq!(
            LiteralError("invalid syntax".into()).to_string(),
            "invalid syntax"
        );
    }

    // ----- properties -----

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[ -~\\n\\t\\r'\"\\\\]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics_on_any_string(s in any::<String>()) {
            let _ = parse_literal(&s);
        }

        #[test]
        fn never_panics_on_python_like_input(
            s in "[\\[\\](){}'\"\\\\#:,.+\\-~ a-zA-Z0-9_\\n\\t\\x00é😀]{0,48}"
        ) {
            let _ = parse_literal(&s);
        }

        #[test]
        fn repr_round_trips(v in arb_json()) {
            let text = repr(&v);
            prop_assert_eq!(parse_literal(&text), Ok(v), "repr: {}", text);
        }

        #[test]
        fn mutated_repr_never_panics(
            v in arb_json(),
            edits in prop::collection::vec(
                (any::<usize>(), any::<bool>(), prop_oneof![
                    any::<u8>(),
                    prop::sample::select(b"'\"\\[](){}:,#-+.0179eEjJxXuUlLbr_ \n".to_vec()),
                ]),
                1..8,
            ),
        ) {
            let mut bytes = repr(&v).into_bytes();
            for (at, insert, byte) in edits {
                if insert || bytes.is_empty() {
                    bytes.insert(at % (bytes.len() + 1), byte);
                } else {
                    bytes.remove(at % bytes.len());
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_literal(&text);
        }
    }
}
