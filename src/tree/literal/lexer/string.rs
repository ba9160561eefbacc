//! String literals: single, double and triple quotes, the `u`/`b`/`r` prefixes and their
//! combinations, and Python's escapes (`\n`, octal, `\xXX`, `\uXXXX`, `\UXXXXXXXX` with
//! surrogate pairs, raw strings).

use super::Lexer;
use crate::tree::literal::{err, LiteralError, EOL_IN_STRING};

impl Lexer {
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
    pub(super) fn lex_string(&mut self, prefix: &str) -> Result<String, LiteralError> {
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
            self.escape(n, bytes, &mut out)?;
        }
    }

    /// The escape whose letter is `n` (it and its backslash consumed) in a string that is
    /// not raw, added to `out`; `bytes` for a bytes literal (octal escapes taken modulo 256,
    /// no `\u`, `\U`, `\N`). An unknown escape stays as written.
    fn escape(&mut self, n: char, bytes: bool, out: &mut String) -> Result<(), LiteralError> {
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
            'u' | 'U' if !bytes => out.push(self.unicode_escape(if n == 'u' { 4 } else { 8 })?),
            'N' if !bytes => return Err(err("unsupported: \\N{...} escape")),
            _ => {
                out.push('\\');
                out.push(n);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::tree::literal::parse_literal;
    use crate::tree::literal::tests::{fails, ok};
    use serde_json::json;

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
}
