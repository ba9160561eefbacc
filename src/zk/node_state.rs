//! Per application node state of CONTRACT 15: node halts, failure records and node pauses,
//! keyed by the node's path ([`path_key`]: `/cust/app` → `cust,app`). Layout:
//!
//! ```text
//! /node-state                                     everyone: read, create; owner: all
//! /node-state/<key>                  {"path"}     made by whoever needs it, ACL of /node-state
//! /node-state/<key>/halt             {host, name, version, error, time}      read-only to all
//! /node-state/<key>/failures                      ACL of /node-state
//! /node-state/<key>/failures/<vkey>  {"version"}  ACL of /node-state
//! /node-state/<key>/failures/<vkey>/<host-id>-<seq>
//!                                    {host, name, n, version, error, time, budget}
//!                                                                         read-only to all
//! /node-pauses                                    everyone: read; owner: all
//! /node-pauses/<key>                 {path, user, host, time, reason}    read-only to all
//! ```
//!
//! `<vkey>` is the cluster version ([`version_key`]). A failure record is a persistent
//! sequential node named after its host: the server numbers the children of one parent in
//! the order their creates are applied, so the records of one node at one version form one
//! total order, and a host that sees its own record also sees every record numbered before
//! it. The place of a host among the failed hosts is the number of distinct hosts among the
//! records numbered up to its first one ([`place`]): exact, whatever the number of hosts
//! failing at once. A record made twice (a create retried after a connection loss) names the
//! same host and changes no place.
//!
//! Nodes made by hosts copy the ACL of [`NODE_STATE`], so a protected cluster (`sync --auth`
//! creates [`NODE_STATE`] readable and creatable by all, [`NODE_PAUSES`] readable by all,
//! both owned by the syncer's identity) lets a host add records and a halt but never change
//! or delete one (records and halts are read-only to all; deleting takes the parent's DELETE,
//! which only the owner has), nor create a pause.

use serde_json::{json, Value};
use zookeeper_client::{Acl, Acls, CreateMode, Permission};

use super::paths::{path_key, path_of_key, NODE_PAUSES, NODE_STATE};
use super::{call_retrying, decode, encode, join, list_or_empty, Client, ZkError};
use crate::tree::Props;

/// The name of a node's halt record.
pub const HALT: &str = "halt";
/// The name of the node holding a node's failure records, by cluster version.
pub const FAILURES: &str = "failures";

/// Records nobody may change (deleting one takes DELETE on its parent).
static READ_ONLY: [Acl; 1] = [Acl::new_const(Permission::READ, "world", "anyone")];

/// `/node-state/<key>`.
pub fn node_dir(path: &str) -> String {
    join(NODE_STATE, &path_key(path))
}

/// `/node-state/<key>/halt`.
pub fn halt_path(path: &str) -> String {
    join(&node_dir(path), HALT)
}

/// `/node-state/<key>/failures/<vkey>`: the failure records of `path` at `version`.
pub fn failures_dir(path: &str, version: &Value) -> String {
    join(&join(&node_dir(path), FAILURES), &version_key(version))
}

/// `/node-pauses/<key>`.
pub fn pause_path(path: &str) -> String {
    join(NODE_PAUSES, &path_key(path))
}

/// A cluster version as a node name: the string itself (other JSON values as JSON text),
/// every byte outside `A-Z a-z 0-9 . _ -` written `%XX`; `.` and `..` written `%2E`.
pub fn version_key(version: &Value) -> String {
    let text = match version {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() || out.bytes().all(|b| b == b'.') {
        out = "%2E".repeat(out.len().max(1));
    }
    out
}

/// The name prefix of `host`'s failure records (the server appends the sequence number).
pub fn record_prefix(host: &str) -> String {
    format!("{host}-")
}

/// The host and sequence number of a failure record's name, if it is one.
pub fn parse_record(name: &str) -> Option<(&str, i64)> {
    let (host, seq) = name.rsplit_once('-')?;
    if host.is_empty() || seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((host, seq.parse().ok()?))
}

/// The failed hosts of some record names, each once, in the order of their first record.
pub fn hosts_in_order<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, i64)> {
    let mut records: Vec<(&str, i64)> = names.into_iter().filter_map(parse_record).collect();
    records.sort_by_key(|(_, seq)| *seq);
    let mut out: Vec<(&str, i64)> = Vec::new();
    for (host, seq) in records {
        if !out.iter().any(|(h, _)| *h == host) {
            out.push((host, seq));
        }
    }
    out
}

/// The place (1 for the first) of `host` among the failed hosts of `names`, `host` having a
/// record numbered `seq`: one more than the number of other hosts with a record numbered
/// before `host`'s first. Records numbered after it never change it.
pub fn place<'a>(names: impl IntoIterator<Item = &'a str>, host: &str, seq: i64) -> usize {
    let records: Vec<(&str, i64)> = names.into_iter().filter_map(parse_record).collect();
    let first = records
        .iter()
        .filter(|(h, _)| *h == host)
        .map(|(_, s)| *s)
        .fold(seq, i64::min);
    let mut before: Vec<&str> = records
        .iter()
        .filter(|(h, s)| *h != host && *s < first)
        .map(|(h, _)| *h)
        .collect();
    before.sort_unstable();
    before.dedup();
    before.len() + 1
}

/// What is recorded for one application node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeState {
    /// The application node's path.
    pub path: String,
    /// The node halt record, if halted.
    pub halt: Option<Value>,
    /// The node pause record, if paused.
    pub pause: Option<Value>,
    /// The failure records at the version read, each host's first record only, in order.
    pub failed: Vec<Value>,
}

impl NodeState {
    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.halt.is_none() && self.pause.is_none() && self.failed.is_empty()
    }
}

/// The data of `path` as JSON (`None`: no such node).
async fn get_json(client: &Client, path: &str) -> Result<Option<Value>, ZkError> {
    match call_retrying("get", path, || client.get_data(path)).await {
        Ok((data, _)) => Ok(Some(Value::Object(decode(&data)))),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The failure record names at `dir` (none if it does not exist).
pub async fn record_names(client: &Client, dir: &str) -> Result<Vec<String>, ZkError> {
    list_or_empty(client, dir).await
}

/// The first record of every failed host at `dir`, in order (a record deleted meanwhile is
/// skipped).
pub async fn read_failed(client: &Client, dir: &str) -> Result<Vec<Value>, ZkError> {
    let names = record_names(client, dir).await?;
    let mut out = Vec::new();
    for (host, seq) in hosts_in_order(names.iter().map(String::as_str)) {
        let name = names
            .iter()
            .find(|n| parse_record(n) == Some((host, seq)))
            .expect("a listed name");
        if let Some(mut record) = get_json(client, &join(dir, name)).await? {
            if let Some(map) = record.as_object_mut() {
                map.entry("host").or_insert_with(|| json!(host));
            }
            out.push(record);
        }
    }
    Ok(out)
}

/// The state of the node at `path`: its halt, its pause, and its failure records at
/// `version`.
pub async fn read_node(client: &Client, path: &str, version: &Value) -> Result<NodeState, ZkError> {
    Ok(NodeState {
        path: path.to_string(),
        halt: get_json(client, &halt_path(path)).await?,
        pause: get_json(client, &pause_path(path)).await?,
        failed: read_failed(client, &failures_dir(path, version)).await?,
    })
}

/// The halt and the pause of the node at `path` (no failure records).
pub async fn read_holds(client: &Client, path: &str) -> Result<NodeState, ZkError> {
    Ok(NodeState {
        path: path.to_string(),
        halt: get_json(client, &halt_path(path)).await?,
        pause: get_json(client, &pause_path(path)).await?,
        failed: Vec::new(),
    })
}

/// The state of every node that has a halt, a pause or failure records at `version`, by
/// path.
pub async fn read_all(client: &Client, version: &Value) -> Result<Vec<NodeState>, ZkError> {
    let mut keys = list_or_empty(client, NODE_STATE).await?;
    keys.extend(list_or_empty(client, NODE_PAUSES).await?);
    let mut paths: Vec<String> = keys.iter().filter_map(|k| path_of_key(k)).collect();
    paths.sort();
    paths.dedup();
    let mut out = Vec::new();
    for path in paths {
        let state = read_node(client, &path, version).await?;
        if !state.is_empty() {
            out.push(state);
        }
    }
    Ok(out)
}

/// The ACL nodes made under [`NODE_STATE`] get: its own. [`NODE_STATE`] is made (open) if
/// missing, which a protected root refuses: then the error says to run `sync --auth`.
async fn state_acl(client: &Client) -> Result<Vec<Acl>, ZkError> {
    match call_retrying("get-acl", NODE_STATE, || client.get_acl(NODE_STATE)).await {
        Ok((acl, _)) => return Ok(acl),
        Err(e) if !e.is_no_node() => return Err(e),
        Err(_) => {}
    }
    super::node::make_missing_node(client, NODE_STATE).await?;
    let (acl, _) = call_retrying("get-acl", NODE_STATE, || client.get_acl(NODE_STATE)).await?;
    Ok(acl)
}

/// Creates `path` with `data` and `acl`; true if made, false if it was there.
async fn create_if_missing(
    client: &Client,
    path: &str,
    data: &Value,
    acl: &[Acl],
) -> Result<bool, ZkError> {
    let mode = CreateMode::Persistent.with_acls(Acls::new(acl));
    let Value::Object(props) = data else {
        unreachable!("node data is an object")
    };
    match call_retrying("create", path, || {
        client.create(path, &encode(props), &mode)
    })
    .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.is_node_exists() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Makes `/node-state/<key>` (and, with a version, `failures/<vkey>` under it) where missing,
/// with the ACL of [`NODE_STATE`].
pub async fn make_dirs(
    client: &Client,
    path: &str,
    version: Option<&Value>,
) -> Result<(), ZkError> {
    let acl = state_acl(client).await?;
    let dir = node_dir(path);
    create_if_missing(client, &dir, &json!({"path": path}), &acl).await?;
    if let Some(version) = version {
        let failures = join(&dir, FAILURES);
        create_if_missing(client, &failures, &json!({}), &acl).await?;
        let at = failures_dir(path, version);
        create_if_missing(client, &at, &json!({"version": version}), &acl).await?;
    }
    Ok(())
}

/// Creates a read-only node at `at` (sequential with `sequential`), making the node's
/// directories first if a parent is missing. Returns the sequence number (-1 if not
/// sequential); `None` if a node is there already.
async fn create_record(
    client: &Client,
    path: &str,
    version: Option<&Value>,
    at: &str,
    record: &Props,
    sequential: bool,
) -> Result<Option<i64>, ZkError> {
    let kind = if sequential {
        CreateMode::PersistentSequential
    } else {
        CreateMode::Persistent
    };
    let mode = kind.with_acls(Acls::new(&READ_ONLY));
    let data = encode(record);
    let mut made_dirs = false;
    loop {
        // Retried after a connection loss: a second record of the same host changes no place
        // (records are counted by host), and a halt found there is this host's or an earlier.
        match call_retrying("create", at, || client.create(at, &data, &mode)).await {
            Ok((_, seq)) => return Ok(Some(if sequential { seq.into_i64() } else { -1 })),
            Err(e) if e.is_node_exists() && !sequential => return Ok(None),
            Err(e) if e.is_no_node() && !made_dirs => {
                made_dirs = true;
                make_dirs(client, path, version).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Records a failure of `record["host"]` on `path` at `version`; returns its sequence number
/// and the record names at that version listed after it was made.
pub async fn add_failure(
    client: &Client,
    path: &str,
    version: &Value,
    host: &str,
    record: &Props,
) -> Result<(i64, Vec<String>), ZkError> {
    let dir = failures_dir(path, version);
    let prefix = join(&dir, &record_prefix(host));
    let seq = create_record(client, path, Some(version), &prefix, record, true)
        .await?
        .expect("a sequential node is always made");
    Ok((seq, record_names(client, &dir).await?))
}

/// Records a node halt of `path`; false if the node was halted already (that halt stays).
pub async fn add_halt(client: &Client, path: &str, record: &Props) -> Result<bool, ZkError> {
    Ok(
        create_record(client, path, None, &halt_path(path), record, false)
            .await?
            .is_some(),
    )
}

/// Records a node pause of `path` with `acl` for [`NODE_PAUSES`] if it must be made; the
/// pause record it replaced, if any.
pub async fn add_pause(
    client: &Client,
    path: &str,
    record: &Props,
    root_acl: &[Acl],
) -> Result<Option<Value>, ZkError> {
    let at = pause_path(path);
    let previous = get_json(client, &at).await?;
    if previous.is_some() {
        super::node::delete_own(client, &at).await?;
    }
    let mode = CreateMode::Persistent.with_acls(Acls::new(&READ_ONLY));
    let data = encode(record);
    match call_retrying("create", &at, || client.create(&at, &data, &mode)).await {
        Ok(_) => return Ok(previous),
        Err(e) if !e.is_no_node() => return Err(e),
        Err(_) => {}
    }
    create_if_missing(client, NODE_PAUSES, &json!({}), root_acl).await?;
    call_retrying("create", &at, || client.create(&at, &data, &mode)).await?;
    Ok(previous)
}

/// What [`clear_node`] removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cleared {
    /// The halt record removed.
    pub halt: Option<Value>,
    /// The pause record removed.
    pub pause: Option<Value>,
    /// How many failure records were removed (every cluster version).
    pub failures: usize,
}

/// Deletes `at` if it is there; its data as JSON if it was.
async fn take(client: &Client, at: &str) -> Result<Option<Value>, ZkError> {
    let Some(record) = get_json(client, at).await? else {
        return Ok(None);
    };
    match call_retrying("delete", at, || client.delete(at, None)).await {
        Ok(()) => Ok(Some(record)),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Ends the halt and the pause of `path` and deletes its failure records at every cluster
/// version (with the version directories, unless a record was made meanwhile).
pub async fn clear_node(client: &Client, path: &str) -> Result<Cleared, ZkError> {
    let mut cleared = Cleared {
        pause: take(client, &pause_path(path)).await?,
        halt: take(client, &halt_path(path)).await?,
        failures: 0,
    };
    let failures = join(&node_dir(path), FAILURES);
    for version in list_or_empty(client, &failures).await? {
        let dir = join(&failures, &version);
        for name in list_or_empty(client, &dir).await? {
            let at = join(&dir, &name);
            match call_retrying("delete", &at, || client.delete(&at, None)).await {
                Ok(()) => cleared.failures += 1,
                Err(e) if e.is_no_node() => {}
                Err(e) => return Err(e),
            }
        }
        match call_retrying("delete", &dir, || client.delete(&dir, None)).await {
            Err(e)
                if !e.is_no_node()
                    && !matches!(e.source_error(), Some(zookeeper_client::Error::NotEmpty)) =>
            {
                return Err(e)
            }
            _ => {}
        }
    }
    Ok(cleared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn layout() {
        assert_eq!(node_dir("/cust/a,b"), "/node-state/cust,a%2Cb");
        assert_eq!(halt_path("/c/app"), "/node-state/c,app/halt");
        assert_eq!(
            failures_dir("/c/app", &json!("r1")),
            "/node-state/c,app/failures/r1"
        );
        assert_eq!(pause_path("/c/app"), "/node-pauses/c,app");
    }

    #[test]
    fn version_keys_are_node_names() {
        assert_eq!(version_key(&json!("r1.2-x_y")), "r1.2-x_y");
        assert_eq!(version_key(&json!(124)), "124");
        assert_eq!(version_key(&json!("a/b c%")), "a%2Fb%20c%25");
        assert_eq!(version_key(&json!(".")), "%2E");
        assert_eq!(version_key(&json!("..")), "%2E%2E");
        assert_eq!(version_key(&json!("")), "%2E");
        assert_eq!(version_key(&json!("é")), "%C3%A9");
        assert_ne!(version_key(&json!("a/b")), version_key(&json!("a%2Fb")));
    }

    #[test]
    fn record_names_parse() {
        assert_eq!(parse_record("h1-0000000003"), Some(("h1", 3)));
        assert_eq!(parse_record("web-01-0000000012"), Some(("web-01", 12)));
        assert_eq!(parse_record("h1-12"), None);
        assert_eq!(parse_record("-0000000001"), None);
        assert_eq!(parse_record("halt"), None);
        let n = names(&[
            "b-0000000002",
            "a-0000000001",
            "b-0000000000",
            "c-0000000003",
        ]);
        assert_eq!(
            hosts_in_order(n.iter().map(String::as_str)),
            vec![("b", 0), ("a", 1), ("c", 3)]
        );
    }

    #[test]
    fn a_place_counts_the_distinct_hosts_before_a_hosts_first_record() {
        let n = names(&[
            "a-0000000000",
            "a-0000000001",
            "b-0000000002",
            "c-0000000003",
            "b-0000000004",
            "d-0000000005",
        ]);
        let it = || n.iter().map(String::as_str);
        assert_eq!(place(it(), "a", 1), 1, "a second record of the first host");
        assert_eq!(place(it(), "b", 4), 2);
        assert_eq!(place(it(), "c", 3), 3);
        assert_eq!(place(it(), "d", 5), 4);
        // Records numbered after one's own never change its place.
        assert_eq!(place(it().take(3), "b", 2), 2);
        // The own record missing from the list (deleted by a resume meanwhile).
        assert_eq!(place(it(), "e", 3), 3);
        assert_eq!(place(std::iter::empty(), "e", 9), 1);
    }
}
