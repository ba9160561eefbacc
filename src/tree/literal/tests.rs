//! Test helpers shared by the unit tests of the submodules ([`ok`], [`fails`]) and the tests
//! of the module as a whole: error display, and properties (no input makes the parser panic,
//! `parse_literal(&repr(v)) == Ok(v)`).

use super::*;
use proptest::prelude::*;
use serde_json::Value;

pub(super) fn ok(expr: &str) -> Value {
    match parse_literal(expr) {
        Ok(v) => v,
        Err(e) => panic!("{expr:?} failed: {e}"),
    }
}

pub(super) fn fails(expr: &str) -> String {
    match parse_literal(expr) {
        Ok(v) => panic!("{expr:?} parsed as {v:?}"),
        Err(e) => e.to_string(),
    }
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
