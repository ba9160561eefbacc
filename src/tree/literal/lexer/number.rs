//! Number literals: decimal, hexadecimal, octal (`0o17` and Python 2 `0755`) and binary
//! integers with `_` separators and an optional Python 2 `L` suffix, floats, and imaginary
//! numbers (lexed, then rejected by the parser). Integers keep their magnitude up to
//! `u64::MAX`; larger ones, and floats that overflow, are deferred range errors.

use super::{is_ident_char, Lexer, Tok};
use crate::tree::literal::{err, LiteralError, FLOAT_RANGE, INT_RANGE, INVALID_SYNTAX};

impl Lexer {
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

    pub(super) fn lex_number(&mut self) -> Result<Tok, LiteralError> {
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
}

#[cfg(test)]
mod tests {
    use crate::tree::literal::parse_literal;
    use crate::tree::literal::tests::{fails, ok};
    use serde_json::json;

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
}
