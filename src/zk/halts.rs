//! Halt records kept outside `/hosts`, for a protected cluster (docs/security.md).
//!
//! A host that may not write `/hosts` (it is owned by the syncer's identity) still has to halt
//! the cluster when a step fails. It creates a child `halt-<sequence>` of [`HALTS`] holding
//! the halt record (`{host, name, version, error, time}`), readable by all and writable by
//! nobody. Everyone may create children of [`HALTS`]; only the syncer's identity may delete
//! them (`resume --auth`). While any child exists, the cluster is halted: every reader of the
//! cluster version applies [`effective`], which makes `version` `None` and `halt` the first
//! record, exactly as if the host had written them into `/hosts`.

use serde_json::Value;
use zookeeper_client::{Acl, Acls, CreateMode, Permission};

use super::{call, call_retrying, decode, encode, join, Client, ZkError};
use crate::tree::Props;

/// The node under which hosts record halts.
pub(crate) use super::paths::HALTS;
/// The name prefix of a halt record (a sequential node).
pub(crate) const HALT_PREFIX: &str = "halt-";
/// `/hosts`' property holding the record of a pause made by `zkdeployment pause`.
pub(crate) const PAUSE: &str = "pause";

/// The halt records, oldest first (empty when [`HALTS`] is missing or has no children).
pub(crate) async fn read_halts(client: &Client) -> Result<Vec<Value>, ZkError> {
    let mut names = match call_retrying("list", HALTS, || client.list_children(HALTS)).await {
        Ok(names) => names,
        Err(e) if e.is_no_node() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    names.retain(|n| n.starts_with(HALT_PREFIX));
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = join(HALTS, &name);
        match call_retrying("get", &path, || client.get_data(&path)).await {
            Ok((data, _)) => out.push(Value::Object(decode(&data))),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Records a halt as a new child of [`HALTS`] (readable by all, changeable by nobody).
pub async fn record_halt(client: &Client, record: &Props) -> Result<(), ZkError> {
    static READ_ONLY: [Acl; 1] = [Acl::new_const(Permission::READ, "world", "anyone")];
    let mode = CreateMode::PersistentSequential.with_acls(Acls::new(&READ_ONLY));
    let prefix = join(HALTS, HALT_PREFIX);
    // Not retried: a create whose answer was lost may have gone through, and a second record
    // would only repeat the halt.
    call(
        "create",
        &prefix,
        client.create(&prefix, &encode(record), &mode),
    )
    .await
    .map(|_| ())
}

/// Deletes every halt record; returns the records deleted, oldest first (each read just
/// before its delete, so that whoever clears them can say what was cleared).
pub(crate) async fn clear_halts(client: &Client) -> Result<Vec<Value>, ZkError> {
    let mut names = match call_retrying("list", HALTS, || client.list_children(HALTS)).await {
        Ok(names) => names,
        Err(e) if e.is_no_node() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    names.retain(|n| n.starts_with(HALT_PREFIX));
    names.sort();
    let mut cleared = Vec::new();
    for name in names {
        let path = join(HALTS, &name);
        // Records are never changed once made (read-only to all), so this read is the one
        // deleted.
        let record = match call_retrying("get", &path, || client.get_data(&path)).await {
            Ok((data, _)) => Value::Object(decode(&data)),
            Err(e) if e.is_no_node() => continue,
            Err(e) => return Err(e),
        };
        match call_retrying("delete", &path, || client.delete(&path, None)).await {
            Ok(()) => cleared.push(record),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(cleared)
}

/// Applies halt records to the properties of `/hosts`: with any record, `version` is `None`
/// and `halt` is the record already on `/hosts` if the cluster was halted there, else the
/// first record.
pub(crate) fn effective(hosts: &mut Props, halts: &[Value]) {
    let Some(first) = halts.first() else { return };
    let halted_on_hosts = hosts.get("version").is_none_or(Value::is_null)
        && hosts.get("halt").is_some_and(Value::is_object);
    hosts.insert("version".into(), Value::Null);
    if !halted_on_hosts {
        hosts.insert("halt".into(), first.clone());
    }
}

/// True when `/hosts`' properties hold a pause made by `pause` (a `false` version set by
/// hand, as the original's operators did, has none: a sync ends it, as the original's did).
pub(crate) fn is_paused(props: &Props) -> bool {
    props
        .get(PAUSE)
        .is_some_and(|r| r.is_object() && props.get("version") == Some(&Value::Bool(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn props(v: Value) -> Props {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_record_halts_the_cluster() {
        let mut p = props(json!({"version": "r1", "synced": "r1"}));
        effective(&mut p, &[]);
        assert_eq!(p["version"], json!("r1"));
        let rec = json!({"host": "h1", "error": "boom"});
        effective(&mut p, std::slice::from_ref(&rec));
        assert_eq!(p["version"], Value::Null);
        assert_eq!(p["halt"], rec);
        // A halt recorded on /hosts is kept.
        let mut p = props(json!({"version": null, "halt": {"host": "h0"}}));
        effective(&mut p, &[rec]);
        assert_eq!(p["halt"], json!({"host": "h0"}));
    }

    #[test]
    fn only_a_recorded_pause_with_a_false_version_is_a_pause() {
        let rec = json!({"user": "ann", "host": "ops1", "time": 1.0, "reason": "freeze"});
        let props = |v: Value, r: Option<Value>| {
            let mut m = Props::new();
            m.insert("version".into(), v);
            if let Some(r) = r {
                m.insert(PAUSE.into(), r);
            }
            m
        };
        assert!(is_paused(&props(json!(false), Some(rec.clone()))));
        assert!(!is_paused(&props(json!(false), None)), "a hand-made pause");
        assert!(!is_paused(&props(json!("r1"), Some(rec.clone()))));
        assert!(!is_paused(&props(Value::Null, Some(rec))));
        assert!(!is_paused(&props(json!(false), Some(Value::Null))));
    }
}
