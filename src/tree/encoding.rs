//! zc.zk's node data encoding, and the most data a node may hold ([`MAX_NODE_DATA`]). Pure:
//! the tree format checks node sizes with it, and the ZooKeeper side reads and writes with
//! it (re-exported as `crate::zk::{decode, encode, MAX_NODE_DATA}`).
//!
//! Reading: empty or blank data is `{}`; data that, stripped, starts with `{` and ends with `}`
//! is a JSON object (if it does not parse, the raw text is kept as `string_value`); anything
//! else is `{"string_value": <raw>}`. Writing: a map holding only `string_value` is stored as
//! the raw string, anything else as compact JSON with sorted keys.

use serde_json::Value;

use crate::tree::Props;

/// The most node data this crate writes: ZooKeeper's default request limit (`jute.maxbuffer`,
/// 1 MiB − 1) less room for the request's framing, ACLs and a chroot; the path counts
/// against it ([`request_bytes`]). The tree parser refuses
/// bigger nodes ([`crate::tree::parse`](mod@crate::tree::parse)), and imports check again before sending.
pub const MAX_NODE_DATA: usize = 1024 * 1024 - 4096;

/// What a write of `data_len` bytes at `path` counts against [`MAX_NODE_DATA`]: the server
/// reads the whole request (path and data) into one buffer of at most `jute.maxbuffer` bytes,
/// so a long path leaves less room for data.
pub(crate) fn request_bytes(path: &str, data_len: usize) -> usize {
    path.len() + data_len
}

/// Decodes node data into properties.
pub fn decode(data: &[u8]) -> Props {
    let text = String::from_utf8_lossy(data);
    let stripped = text.trim();
    let mut props = Props::new();
    if stripped.is_empty() {
        return props;
    }
    if stripped.starts_with('{') && stripped.ends_with('}') {
        if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(stripped) {
            return map;
        }
        tracing::warn!("bad JSON data in node, read as string_value");
    }
    props.insert("string_value".to_string(), Value::String(text.into_owned()));
    props
}

/// Encodes properties as node data.
pub fn encode(props: &Props) -> Vec<u8> {
    if props.len() == 1 {
        if let Some(Value::String(s)) = props.get("string_value") {
            return s.as_bytes().to_vec();
        }
    }
    serde_json::to_vec(props).expect("a JSON map always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Props {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn decodes_the_three_shapes() {
        assert_eq!(decode(b""), Props::new());
        assert_eq!(decode(b"  \n "), Props::new());
        assert_eq!(
            decode(br#" {"a": 1, "b": [true, null]} "#),
            map(json!({"a": 1, "b": [true, null]}))
        );
        assert_eq!(decode(b"hello"), map(json!({"string_value": "hello"})));
        assert_eq!(
            decode(b"{not json}"),
            map(json!({"string_value": "{not json}"}))
        );
        assert_eq!(decode(b"[1,2]"), map(json!({"string_value": "[1,2]"})));
    }

    #[test]
    fn a_time_written_reads_back_as_the_same_number() {
        // An in-flight record is cleared only when the record read back equals the one
        // written (a holder's release after a connection loss): about 1 in 10 such times
        // read back 1 ulp off with serde_json's default float parsing (no `float_roundtrip`),
        // and the record was then left for the next holder to halt on.
        let record = map(json!({"in-flight": {"host": "h2", "since": 1795763350.0000145_f64}}));
        assert_eq!(decode(&encode(&record)), record);
        for i in 0..10_000u32 {
            let since = 1795763350.0 + f64::from(i) * 0.0000073;
            let record = map(json!({"in-flight": {"since": since}}));
            assert_eq!(decode(&encode(&record)), record, "{since}");
        }
    }

    #[test]
    fn encodes_compact_sorted_json_or_raw_string() {
        assert_eq!(
            encode(&map(json!({"b": 1, "a": "x"}))),
            br#"{"a":"x","b":1}"#.to_vec()
        );
        assert_eq!(
            encode(&map(json!({"string_value": "raw text"}))),
            b"raw text".to_vec()
        );
        assert_eq!(
            encode(&map(json!({"string_value": 1}))),
            br#"{"string_value":1}"#.to_vec()
        );
        assert_eq!(encode(&Props::new()), b"{}".to_vec());
    }
}
