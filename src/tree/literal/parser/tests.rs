//! Unit tests of the parser, through [`parse_literal`]: unary signs, names and constants,
//! containers, dict keys, rejected operators and calls, syntax errors, the nesting limit and
//! the precedence of syntax errors over evaluation errors.

use crate::tree::literal::parse_literal;
use crate::tree::literal::tests::{fails, ok};
use serde_json::json;

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
