//! Python-style text of JSON values: [`repr`] (Python 3 `repr` without the `u` prefix),
//! [`py_str`] (Python `str`), [`repr_str`] (quote choice and escapes of a string),
//! [`repr_bytes`] (a `b'…'` literal of data that is not text) and Python's
//! shortest round-trip float formatting, which the parser also uses for float dict keys.

use serde_json::{Number, Value};

/// Python repr without the u prefix: 'x', 1, 1.5, True, None, [1, 'a'], {'k': 2}
pub(crate) fn repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(v, &mut out);
    out
}

/// Python str(): strings raw, everything else as repr.
pub(crate) fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => repr(other),
    }
}

/// Python repr of a string (quote choice and escapes as Python 3 repr).
pub(crate) fn repr_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_repr_str(s, &mut out);
    out
}

/// Python repr of bytes, with the `b` prefix: printable ASCII as it is (`\\` and `'`
/// escaped), `\t`, `\n`, `\r`, any other byte as `\xNN`. Plain ASCII, so that
/// [`super::bytes_literal`] reads back exactly these bytes.
pub(crate) fn repr_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 3);
    out.push_str("b'");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b' '..=b'~' => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('\'');
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

pub(super) fn repr_number(n: &Number) -> String {
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
pub(super) fn repr_float(f: f64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn repr_of_bytes() {
        assert_eq!(repr_bytes(b""), "b''");
        assert_eq!(
            repr_bytes(b"a'\\\n\r\t\x00\x7f\x80\xff~ "),
            r"b'a\'\\\n\r\t\x00\x7f\x80\xff~ '"
        );
        let every: Vec<u8> = (0..=255).collect();
        assert_eq!(
            super::super::bytes_literal(&repr_bytes(&every)),
            Some(every)
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
}
