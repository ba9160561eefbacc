//! Per application node state of CONTRACT 15: node halts, failure records and node pauses,
//! keyed by the node's path ([`state_key`]: `/cust/app` → `cust,app`). Layout:
//!
//! ```text
//! /node-state                                   everyone: read, create; owner: all
//! /node-state/halt~<key>                        {host, name, version, error, time}
//! /node-state/fail~<key>~<vkey>~<host-id>-<seq> {host, name, n, version, error, time, budget}
//! /node-pauses                                  everyone: read; owner: all
//! /node-pauses/<key>                            {path, user, host, time, reason}
//! ```
//!
//! Every record is a child of one node and read-only to all from its creation; deleting one
//! takes DELETE on the parent, which only the owner (the syncer's identity, `sync --auth`)
//! has on a protected cluster. So a host's identity can add failure records and node halts
//! and change or remove none, and cannot create a pause. (Hosts make no directory of their
//! own: a node a host made could not name the owner, whose digest id the server masks from
//! everyone else.) `<vkey>` is the cluster version ([`version_key`]); neither `<key>` nor
//! `<vkey>` holds a `~`.
//!
//! A failure record is a sequential node: the server numbers the children of [`NODE_STATE`]
//! in the order their creates are applied, so the records form one total order, and a host
//! that lists the children after making its record sees every record numbered before it.
//! The place of a host among the failed hosts of a node at a version is the number of
//! distinct hosts among its records numbered up to the host's first ([`place`]): exact,
//! whatever the number of hosts failing at once. A record made twice (a create retried after
//! a connection loss) names the same host and changes no place.

use serde_json::{json, Value};
use zookeeper_client::{Acl, Acls, CreateMode, Permission};

use super::paths::{path_key, path_of_key, NODE_PAUSES, NODE_STATE};
use super::{call_retrying, decode, encode, join, list_or_empty, Client, ZkError};
use crate::tree::Props;

/// The name prefix of a node halt.
pub const HALT_PREFIX: &str = "halt~";
/// The name prefix of a failure record.
pub(crate) const FAIL_PREFIX: &str = "fail~";

/// Records nobody may change (deleting one takes DELETE on its parent).
static READ_ONLY: [Acl; 1] = [Acl::new_const(Permission::READ, "world", "anyone")];

/// The key of an application node: its [`path_key`] with `~` written `%7E`.
pub(crate) fn state_key(path: &str) -> String {
    path_key(path).replace('~', "%7E")
}

/// The path of a [`state_key`], if `key` is one.
pub fn path_of_state_key(key: &str) -> Option<String> {
    if key.contains('~') {
        return None;
    }
    path_of_key(&key.replace("%7E", "~"))
}

/// `/node-state/halt~<key>`.
pub(crate) fn halt_path(path: &str) -> String {
    join(NODE_STATE, &format!("{HALT_PREFIX}{}", state_key(path)))
}

/// `/node-pauses/<key>`.
pub(crate) fn pause_path(path: &str) -> String {
    join(NODE_PAUSES, &state_key(path))
}

/// A cluster version as part of a node name: the string itself (other JSON values as JSON
/// text), every byte outside `A-Z a-z 0-9 . _ -` written `%XX`; empty written `%`.
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
    if out.is_empty() {
        out.push('%');
    }
    out
}

/// The name prefix of `host`'s failure records of `path` at `version` (the server appends
/// the sequence number).
pub(crate) fn record_prefix(path: &str, version: &Value, host: &str) -> String {
    format!(
        "{FAIL_PREFIX}{}~{}~{host}-",
        state_key(path),
        version_key(version)
    )
}

/// A failure record's name, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordName<'a> {
    /// The whole name.
    pub name: &'a str,
    /// The node's [`state_key`].
    pub key: &'a str,
    /// The [`version_key`].
    pub vkey: &'a str,
    /// The failed host's id.
    pub host: &'a str,
    /// The sequence number.
    pub seq: i64,
}

/// The parts of a failure record's name, if it is one.
pub fn parse_record(name: &str) -> Option<RecordName<'_>> {
    let rest = name.strip_prefix(FAIL_PREFIX)?;
    let (key, rest) = rest.split_once('~')?;
    let (vkey, rest) = rest.split_once('~')?;
    let (host, seq) = rest.rsplit_once('-')?;
    if key.is_empty() || vkey.is_empty() || host.is_empty() {
        return None;
    }
    if seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(RecordName {
        name,
        key,
        vkey,
        host,
        seq: seq.parse().ok()?,
    })
}

/// The records among `names` of the node `key` at the version `vkey`.
pub(crate) fn records_of<'a>(names: &'a [String], key: &str, vkey: &str) -> Vec<RecordName<'a>> {
    names
        .iter()
        .filter_map(|n| parse_record(n))
        .filter(|r| r.key == key && r.vkey == vkey)
        .collect()
}

/// The failed hosts of some records, each by its first record, in order.
pub(crate) fn first_records<'a>(records: &[RecordName<'a>]) -> Vec<RecordName<'a>> {
    let mut sorted = records.to_vec();
    sorted.sort_by_key(|r| r.seq);
    let mut out: Vec<RecordName<'a>> = Vec::new();
    for r in sorted {
        if !out.iter().any(|o| o.host == r.host) {
            out.push(r);
        }
    }
    out
}

/// The place (1 for the first) of `host` among the failed hosts of `records` (one node at one
/// version), `host` having a record numbered `seq`: one more than the number of other hosts
/// with a record numbered before `host`'s first. Records numbered after it never change it.
pub(crate) fn place(records: &[RecordName<'_>], host: &str, seq: i64) -> usize {
    let first = records
        .iter()
        .filter(|r| r.host == host)
        .map(|r| r.seq)
        .fold(seq, i64::min);
    let mut before: Vec<&str> = records
        .iter()
        .filter(|r| r.host != host && r.seq < first)
        .map(|r| r.host)
        .collect();
    before.sort_unstable();
    before.dedup();
    before.len() + 1
}

/// What is recorded for one application node.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeState {
    /// The application node's path.
    pub(crate) path: String,
    /// The node halt record, if halted.
    pub(crate) halt: Option<Value>,
    /// The node pause record, if paused.
    pub(crate) pause: Option<Value>,
    /// The failure records at the version read, each host's first record only, in order.
    pub(crate) failed: Vec<Value>,
}

impl NodeState {
    /// True when nothing is recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.halt.is_none() && self.pause.is_none() && self.failed.is_empty()
    }
}

/// The data of `path` as JSON (`None`: no such node).
pub(crate) async fn get_json(client: &Client, path: &str) -> Result<Option<Value>, ZkError> {
    match call_retrying("get", path, || client.get_data(path)).await {
        Ok((data, _)) => Ok(Some(Value::Object(decode(&data)))),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The first record of every failed host among `records`, in order (a record deleted
/// meanwhile is skipped).
async fn read_failed(client: &Client, records: &[RecordName<'_>]) -> Result<Vec<Value>, ZkError> {
    let firsts = first_records(records);
    // Pipelined: a node that many hosts failed costs one round trip, not one per host.
    let reads = firsts
        .iter()
        .map(|r| async move { get_json(client, &join(NODE_STATE, r.name)).await });
    let found = futures::future::try_join_all(reads).await?;
    Ok(firsts
        .iter()
        .zip(found)
        .filter_map(|(r, record)| {
            let mut record = record?;
            if let Some(map) = record.as_object_mut() {
                map.entry("host").or_insert_with(|| json!(r.host));
            }
            Some(record)
        })
        .collect())
}

/// The state of the node at `path` from the children of [`NODE_STATE`] (`names`): its halt,
/// its pause, and its failure records at `version`.
async fn node_from(
    client: &Client,
    names: &[String],
    path: &str,
    version: &Value,
) -> Result<NodeState, ZkError> {
    let key = state_key(path);
    let halted = names.contains(&format!("{HALT_PREFIX}{key}"));
    let records = records_of(names, &key, &version_key(version));
    Ok(NodeState {
        path: path.to_string(),
        halt: match halted {
            true => get_json(client, &halt_path(path)).await?,
            false => None,
        },
        pause: get_json(client, &pause_path(path)).await?,
        failed: read_failed(client, &records).await?,
    })
}

/// The state of the node at `path`: its halt, its pause, and its failure records at
/// `version`.
pub(crate) async fn read_node(
    client: &Client,
    path: &str,
    version: &Value,
) -> Result<NodeState, ZkError> {
    let names = list_or_empty(client, NODE_STATE).await?;
    node_from(client, &names, path, version).await
}

/// The halt and the pause of the node at `path` (no failure records).
pub(crate) async fn read_holds(client: &Client, path: &str) -> Result<NodeState, ZkError> {
    Ok(NodeState {
        path: path.to_string(),
        halt: get_json(client, &halt_path(path)).await?,
        pause: get_json(client, &pause_path(path)).await?,
        failed: Vec::new(),
    })
}

/// The state of every node that has a halt, a pause or failure records at `version`, by
/// path.
pub(crate) async fn read_all(client: &Client, version: &Value) -> Result<Vec<NodeState>, ZkError> {
    let names = list_or_empty(client, NODE_STATE).await?;
    let mut keys: Vec<String> = list_or_empty(client, NODE_PAUSES).await?;
    keys.extend(names.iter().filter_map(|n| {
        let key = n.strip_prefix(HALT_PREFIX);
        key.or_else(|| parse_record(n).map(|r| r.key))
            .map(String::from)
    }));
    let mut paths: Vec<String> = keys.iter().filter_map(|k| path_of_state_key(k)).collect();
    paths.sort();
    paths.dedup();
    let mut out = Vec::new();
    for path in paths {
        let state = node_from(client, &names, &path, version).await?;
        if !state.is_empty() {
            out.push(state);
        }
    }
    Ok(out)
}

/// Creates a read-only child of [`NODE_STATE`] at `at` (sequential with `sequential`),
/// making [`NODE_STATE`] (open) if it is missing, which a protected root refuses. Returns
/// the sequence number (-1 if not sequential); `None` if a node is there already.
async fn create_record(
    client: &Client,
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
    let mut made_root = false;
    loop {
        // Retried after a connection loss: a second record of the same host changes no place
        // (records are counted by host), and a halt found there is this host's or an earlier.
        match call_retrying("create", at, || client.create(at, &data, &mode)).await {
            Ok((_, seq)) => return Ok(Some(if sequential { seq.into_i64() } else { -1 })),
            Err(e) if e.is_node_exists() && !sequential => return Ok(None),
            Err(e) if e.is_no_node() && !made_root => {
                made_root = true;
                super::node::make_missing_node(client, NODE_STATE).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Records a failure of `host` on `path` at `version`; returns its sequence number and the
/// records of that node at that version, listed after it was made.
pub(crate) async fn add_failure(
    client: &Client,
    path: &str,
    version: &Value,
    host: &str,
    record: &Props,
) -> Result<(i64, Vec<String>), ZkError> {
    let prefix = join(NODE_STATE, &record_prefix(path, version, host));
    let seq = create_record(client, &prefix, record, true)
        .await?
        .expect("a sequential node is always made");
    let names = list_or_empty(client, NODE_STATE).await?;
    let (key, vkey) = (state_key(path), version_key(version));
    let mine = names
        .into_iter()
        .filter(|n| parse_record(n).is_some_and(|r| r.key == key && r.vkey == vkey))
        .collect();
    Ok((seq, mine))
}

/// Records a node halt of `path`; false if the node was halted already (that halt stays).
pub(crate) async fn add_halt(client: &Client, path: &str, record: &Props) -> Result<bool, ZkError> {
    Ok(create_record(client, &halt_path(path), record, false)
        .await?
        .is_some())
}

/// Records a node pause of `path`, making [`NODE_PAUSES`] with `root_acl` if it is missing;
/// the pause record it replaced, if any.
pub(crate) async fn add_pause(
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
    let root = CreateMode::Persistent.with_acls(Acls::new(root_acl));
    match call_retrying("create", NODE_PAUSES, || {
        client.create(NODE_PAUSES, b"", &root)
    })
    .await
    {
        Err(e) if !e.is_node_exists() => return Err(e),
        _ => {}
    }
    call_retrying("create", &at, || client.create(&at, &data, &mode)).await?;
    Ok(previous)
}

/// What [`clear_node`] removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Cleared {
    /// The halt record removed.
    pub(crate) halt: Option<Value>,
    /// The pause record removed.
    pub(crate) pause: Option<Value>,
    /// How many failure records were removed (every cluster version).
    pub(crate) failures: usize,
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

/// Deletes the failure records among the children of [`NODE_STATE`] that `doomed` picks;
/// how many.
async fn delete_records(
    client: &Client,
    doomed: impl Fn(&RecordName<'_>) -> bool,
) -> Result<usize, ZkError> {
    let mut deleted = 0;
    for name in list_or_empty(client, NODE_STATE).await? {
        if !parse_record(&name).is_some_and(|r| doomed(&r)) {
            continue;
        }
        let at = join(NODE_STATE, &name);
        match call_retrying("delete", &at, || client.delete(&at, None)).await {
            Ok(()) => deleted += 1,
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Ends the halt and the pause of `path` and deletes its failure records at every cluster
/// version.
pub(crate) async fn clear_node(client: &Client, path: &str) -> Result<Cleared, ZkError> {
    let key = state_key(path);
    Ok(Cleared {
        pause: take(client, &pause_path(path)).await?,
        halt: take(client, &halt_path(path)).await?,
        failures: delete_records(client, |r| r.key == key).await?,
    })
}

/// Deletes the failure records of every cluster version but `keep` (they quarantine nobody
/// any more); how many.
pub(crate) async fn prune_failures(client: &Client, keep: &Value) -> Result<usize, ZkError> {
    let vkey = version_key(keep);
    delete_records(client, |r| r.vkey != vkey).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn layout() {
        assert_eq!(state_key("/cust/a,b~c"), "cust,a%2Cb%7Ec");
        for path in ["/cust/a,b~c", "/x/%7E", "/a"] {
            assert_eq!(path_of_state_key(&state_key(path)).as_deref(), Some(path));
        }
        assert_eq!(path_of_state_key("a~b"), None);
        assert_eq!(halt_path("/c/app"), "/node-state/halt~c,app");
        assert_eq!(pause_path("/c/app"), "/node-pauses/c,app");
        assert_eq!(
            record_prefix("/c/app", &json!("r1"), "web-1"),
            "fail~c,app~r1~web-1-"
        );
    }

    #[test]
    fn version_keys_are_name_parts_without_tildes() {
        assert_eq!(version_key(&json!("r1.2-x_y")), "r1.2-x_y");
        assert_eq!(version_key(&json!(124)), "124");
        assert_eq!(version_key(&json!("a/b c%~")), "a%2Fb%20c%25%7E");
        assert_eq!(version_key(&json!("")), "%");
        assert_eq!(version_key(&json!("é")), "%C3%A9");
        assert_ne!(version_key(&json!("a/b")), version_key(&json!("a%2Fb")));
    }

    #[test]
    fn record_names_parse() {
        let r = parse_record("fail~c,app~r1~web~01-0000000012").unwrap();
        assert_eq!(
            (r.key, r.vkey, r.host, r.seq),
            ("c,app", "r1", "web~01", 12)
        );
        assert_eq!(parse_record("fail~c,app~r1~h1-12"), None);
        assert_eq!(parse_record("fail~c,app~r1~-0000000001"), None);
        assert_eq!(parse_record("halt~c,app"), None);
        let n = names(&[
            "fail~a~r1~b-0000000002",
            "fail~a~r1~a-0000000001",
            "fail~a~r1~b-0000000000",
            "fail~a~r2~c-0000000003",
            "fail~z~r1~d-0000000004",
            "halt~a",
        ]);
        let hosts: Vec<(&str, i64)> = first_records(&records_of(&n, "a", "r1"))
            .iter()
            .map(|r| (r.host, r.seq))
            .collect();
        assert_eq!(hosts, vec![("b", 0), ("a", 1)]);
    }

    #[test]
    fn a_place_counts_the_distinct_hosts_before_a_hosts_first_record() {
        let n = names(&[
            "fail~k~v~a-0000000000",
            "fail~k~v~a-0000000001",
            "fail~k~v~b-0000000002",
            "fail~k~v~c-0000000003",
            "fail~k~v~b-0000000004",
            "fail~k~v~d-0000000005",
        ]);
        let all = records_of(&n, "k", "v");
        assert_eq!(place(&all, "a", 1), 1, "a second record of the first host");
        assert_eq!(place(&all, "b", 4), 2);
        assert_eq!(place(&all, "c", 3), 3);
        assert_eq!(place(&all, "d", 5), 4);
        // Records numbered after one's own never change its place.
        assert_eq!(place(&all[..3], "b", 2), 2);
        // The own record missing from the list (deleted by a resume meanwhile).
        assert_eq!(place(&all, "e", 3), 3);
        assert_eq!(place(&[], "e", 9), 1);
    }
}
