//! The expression parser: [`parse_literal`], a recursive-descent parser over the lazily lexed
//! token stream, with containers (lists, tuples, dicts, sets), unary signs, the conversion of
//! operands to JSON values and dict keys, and Python's error precedence: syntax errors abort at
//! once, evaluation errors (unknown names, ranges, unhashable keys, operators, calls, ...) are
//! deferred and the first one is reported only if the whole expression parses.

use serde_json::{Map, Number, Value};

use super::lexer::{Lexer, Tok};
use super::repr::{repr_float, repr_number};
use super::{
    err, LiteralError, FLOAT_RANGE, INT_RANGE, INVALID_SYNTAX, UNEXPECTED_EOF, UNHASHABLE,
};

/// Deepest bracket nesting accepted.
const MAX_NESTING: usize = 100;

/// Python keywords that can never start or continue a literal.
const KEYWORDS: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif",
    "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
    "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Binary operators: accepted syntactically, rejected as "invalid syntax" (nothing is evaluated).
const BINARY_OPERATORS: &[&str] = &[
    "+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>", "&", "|", "^", "<", ">", "<=", ">=",
    "==", "!=", "<>",
];
const BINARY_KEYWORDS: &[&str] = &["and", "or", "in", "is", "not", "if", "else"];

/// Parse a Python literal expression into a JSON value, without evaluating anything.
pub(crate) fn parse_literal(expr: &str) -> Result<Value, LiteralError> {
    let mut p = Parser {
        lexer: Lexer::new(expr),
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

/// Recursive-descent parser over a lazily lexed token stream. Syntax errors abort at once
/// (`Err`); evaluation errors are recorded in `deferred` (the first one wins) and parsing
/// goes on, so that a later syntax error is still reported first, as Python does.
struct Parser {
    lexer: Lexer,
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

    // ----- token stream -----

    /// The next token from the lexer; an evaluation error met while lexing it is deferred
    /// here at once, so that evaluation errors keep their source order.
    fn lex(&mut self) -> Result<Tok, LiteralError> {
        let tok = self.lexer.next_token()?;
        let lexed = self.lexer.take_deferred();
        if self.deferred.is_none() {
            self.deferred = lexed;
        }
        Ok(tok)
    }

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
mod tests;
