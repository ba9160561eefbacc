//! Failure budgets, node halts and node pauses (CONTRACT 15), as the deploy scheduler uses
//! them: may this host start a step of node N ([`node_gate`], [`node_gates`])? A step of N
//! failed: is this host within N's budget or beyond it ([`record_failure`])? Beyond it with
//! `on-failure = 'halt-node'`: halt N ([`record_node_halt`]). What is stored where, and why
//! the count is exact when many hosts fail at once, is in [`crate::zk::node_state`].
//!
//! The rule ([`verdict`], pure): with an effective budget F (`max-failures` of the plan's rollout), the
//! hosts whose place among the failed hosts of N at one cluster version is at most F are
//! within it (quarantined for N at that version); the (F+1)-th and every later one is
//! beyond it. A host keeps the place of its first record: failing N twice spends nothing more.

use serde_json::{json, Value};

use super::plan::Rollout;
use crate::tree::rollout::OnFailure;
use crate::tree::Props;
use crate::zk::multiread::{self, read_at_once, Want};
use crate::zk::node_state::{
    add_failure, add_halt, get_json, halt_path, parse_record, pause_path, place, records_of,
    state_key, version_key, HALT_PREFIX,
};
use crate::zk::paths::{NODE_PAUSES, NODE_STATE};
use crate::zk::{join, list_or_empty, Client, ZkError};

/// Why a budget question could not be answered. The scheduler's safe fallback is the
/// cluster halt.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// This identity may not create under [`NODE_STATE`] (missing on a protected cluster:
    /// `sync --auth` creates it).
    #[error("not allowed to record under {NODE_STATE} ({0}); on a protected cluster `sync --auth` creates it")]
    NotAllowed(ZkError),
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(ZkError),
}

impl From<ZkError> for BudgetError {
    fn from(e: ZkError) -> BudgetError {
        if e.is_no_auth() {
            BudgetError::NotAllowed(e)
        } else {
            BudgetError::Zk(e)
        }
    }
}

/// May a host start a step of a node at a cluster version?
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Yes.
    Open,
    /// No: this host failed the node at this version (its first failure record). Its pass
    /// ends `error`. Checked first: a host that failed the node is quarantined, whatever else.
    Quarantined(Value),
    /// No: the node is halted (`{host, name, version, error, time}`), at every version, until
    /// `resume PATH`. The pass ends `blocked`.
    Halted(Value),
    /// No: the node is paused (`{user, host, time, reason}`). The pass ends `blocked`.
    Paused(Value),
}

/// A host's failure of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureRecord {
    /// The failed host's id (for a dead holder found in the node's lock: the dead holder's).
    pub host: String,
    /// Its name.
    pub name: String,
    /// The instance that failed.
    pub n: u32,
    /// The cluster version of the pass.
    pub version: Value,
    /// What failed.
    pub error: String,
    /// When (Unix time).
    pub time: f64,
}

impl FailureRecord {
    /// The failure record stored: these fields and the budget the host applied.
    fn props(&self, budget: u32) -> Props {
        let mut p = self.halt_props();
        p.insert("n".into(), json!(self.n));
        p.insert("budget".into(), json!(budget));
        p
    }

    /// The node halt record: `{host, name, version, error, time}`.
    fn halt_props(&self) -> Props {
        let Value::Object(p) = json!({
            "host": self.host,
            "name": self.name,
            "version": self.version,
            "error": self.error,
            "time": self.time,
        }) else {
            unreachable!("an object")
        };
        p
    }
}

/// Within or beyond the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The host is quarantined for the node at this version; nothing is halted.
    Within {
        /// The host's place among the failed hosts (1 for the first).
        place: usize,
        /// The effective budget F.
        budget: u32,
    },
    /// The rollout of the node stops: `on-failure` says whether the cluster or the node.
    Beyond {
        /// The host's place among the failed hosts (F + 1 or later).
        place: usize,
        /// The effective budget F.
        budget: u32,
    },
}

impl Verdict {
    /// True when within the budget.
    pub fn is_within(self) -> bool {
        matches!(self, Verdict::Within { .. })
    }

    /// In words, for the halt's or the host's error: `failed host 3 of /a at budget 2`.
    pub(crate) fn describe(self, path: &str) -> String {
        let (Verdict::Within { place, budget } | Verdict::Beyond { place, budget }) = self;
        let within = if self.is_within() { "within" } else { "beyond" };
        format!("failed host {place} of {path}, {within} its budget of {budget} (max-failures)")
    }
}

/// The rule: place `place` against budget F.
pub(crate) fn verdict(place: usize, budget: u32) -> Verdict {
    if place <= budget as usize {
        Verdict::Within { place, budget }
    } else {
        Verdict::Beyond { place, budget }
    }
}

/// Records `failure` of the node at `path` (at `failure.version`) with effective budget
/// `budget`, and says whether the host is within it. Exact under concurrent failures: the
/// record is a sequential node, and the place is counted from the records numbered up to the
/// host's first ([`crate::zk::node_state`]).
pub async fn record_failure(
    client: &Client,
    path: &str,
    failure: &FailureRecord,
    budget: u32,
) -> Result<Verdict, BudgetError> {
    let (seq, names) = add_failure(
        client,
        path,
        &failure.version,
        &failure.host,
        &failure.props(budget),
    )
    .await?;
    let records: Vec<_> = names.iter().filter_map(|n| parse_record(n)).collect();
    let place = place(&records, &failure.host, seq);
    Ok(verdict(place, budget))
}

/// Halts the node at `path`: `{host, name, version, error, time}` of `failure`. False if it
/// was halted already (the first halt stays).
pub async fn record_node_halt(
    client: &Client,
    path: &str,
    failure: &FailureRecord,
) -> Result<bool, BudgetError> {
    Ok(add_halt(client, path, &failure.halt_props()).await?)
}

/// What counting a failure of a node did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Counted {
    /// Within the budget: the failed host is quarantined; the words say its place.
    Within(String),
    /// Beyond it (or a canary) with `on-failure = 'halt-node'`: the node is halted.
    NodeHalted(String),
    /// The cluster must halt: beyond the budget (or a canary) with `'halt-cluster'`, or the
    /// count or the node halt could not be recorded (then no words: the safe fallback).
    HaltCluster(Option<String>),
}

impl Counted {
    /// Whether the cluster must halt.
    pub(crate) fn halts_cluster(&self) -> bool {
        matches!(self, Counted::HaltCluster(_))
    }

    /// `error` with what the count said: `ERROR (WHY)`, `ERROR (WHY; the node is halted)`, or
    /// `ERROR` alone when it could not be counted.
    pub(crate) fn annotate(&self, error: &str) -> String {
        match self {
            Counted::Within(why) | Counted::HaltCluster(Some(why)) => format!("{error} ({why})"),
            Counted::NodeHalted(why) => format!("{error} ({why}; the node is halted)"),
            Counted::HaltCluster(None) => error.to_string(),
        }
    }
}

/// Counts `failure` of the node at `path` whose rollout is `rollout` (a node with a budget,
/// [`crate::agent::plan::Rollout::budgeted`]); a canary spends no budget and stops the rollout.
pub(crate) async fn count_failure(
    client: &Client,
    rollout: &Rollout,
    path: &str,
    failure: &FailureRecord,
    canary: bool,
) -> Counted {
    let why = match canary {
        true => format!("a canary of {path}"),
        false => {
            let budget = rollout.max_failures.unwrap_or(0);
            match record_failure(client, path, failure, budget).await {
                Ok(v) if v.is_within() => return Counted::Within(v.describe(path)),
                Ok(v) => v.describe(path),
                Err(e) => {
                    tracing::error!("cannot count the failure in the budget of {path}: {e}");
                    return Counted::HaltCluster(None);
                }
            }
        }
    };
    if rollout.on_failure != OnFailure::HaltNode {
        return Counted::HaltCluster(Some(why));
    }
    match record_node_halt(client, path, failure).await {
        Ok(_) => Counted::NodeHalted(why),
        Err(e) => {
            tracing::error!("cannot halt {path}: {e}; halting the cluster");
            Counted::HaltCluster(Some(why))
        }
    }
}

/// [`node_gates`] for one node.
pub async fn node_gate(
    client: &Client,
    path: &str,
    version: &Value,
    host: &str,
) -> Result<Gate, BudgetError> {
    let mut gates = node_gates(client, &[path], version, host).await?;
    Ok(gates.pop().unwrap_or(Gate::Open))
}

/// The gate of every node of `paths` for `host` at `version`, in order. One multi-read lists
/// the node halts, failure records and node pauses of the whole cluster (two lists without
/// multi-read), whatever the number of nodes; a record found is then read (one read for each
/// node that is not open).
pub(crate) async fn node_gates(
    client: &Client,
    paths: &[&str],
    version: &Value,
    host: &str,
) -> Result<Vec<Gate>, BudgetError> {
    let (state, paused) = list_state(client).await?;
    let vkey = version_key(version);
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        let key = state_key(path);
        let own = records_of(&state, &key, &vkey)
            .into_iter()
            .filter(|r| r.host == host)
            .min_by_key(|r| r.seq);
        let own = own.map(|r| r.name.to_string());
        let halted = state.contains(&format!("{HALT_PREFIX}{key}"));
        let gate = gate_of(client, path, own, halted, paused.contains(&key)).await?;
        out.push(gate);
    }
    Ok(out)
}

/// The children of [`NODE_STATE`] and of [`NODE_PAUSES`] (none where missing), in one
/// multi-read when the server has it.
async fn list_state(client: &Client) -> Result<(Vec<String>, Vec<String>), ZkError> {
    if !multiread::missing() {
        let wants = [
            Want::Children(NODE_STATE.into()),
            Want::Children(NODE_PAUSES.into()),
        ];
        match read_at_once(client, &wants).await {
            Ok(results) => {
                let mut it = results.into_iter();
                let (Some(state), Some(paused)) = (it.next(), it.next()) else {
                    return Err(multiread::unexpected(NODE_STATE, "not 2 results"));
                };
                return Ok((
                    multiread::children(NODE_STATE, state)?,
                    multiread::children(NODE_PAUSES, paused)?,
                ));
            }
            Err(e) if multiread::refused(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((
        list_or_empty(client, NODE_STATE).await?,
        list_or_empty(client, NODE_PAUSES).await?,
    ))
}

/// The gate of one node: quarantined (`own`: the name of this host's first record, read
/// now), halted, paused, or open. A record deleted meanwhile (`resume PATH`) does not count.
async fn gate_of(
    client: &Client,
    path: &str,
    own: Option<String>,
    halted: bool,
    paused: bool,
) -> Result<Gate, ZkError> {
    if let Some(name) = own {
        if let Some(record) = get_json(client, &join(NODE_STATE, &name)).await? {
            return Ok(Gate::Quarantined(record));
        }
    }
    if halted {
        if let Some(record) = get_json(client, &halt_path(path)).await? {
            return Ok(Gate::Halted(record));
        }
    }
    if paused {
        if let Some(record) = get_json(client, &pause_path(path)).await? {
            return Ok(Gate::Paused(record));
        }
    }
    Ok(Gate::Open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_f_plus_first_host_and_later_ones_are_beyond() {
        assert_eq!(
            verdict(1, 0),
            Verdict::Beyond {
                place: 1,
                budget: 0
            }
        );
        assert!(verdict(1, 1).is_within());
        assert!(verdict(2, 2).is_within());
        assert!(!verdict(3, 2).is_within());
        assert!(!verdict(4, 2).is_within());
        assert_eq!(
            verdict(3, 2).describe("/a/b"),
            "failed host 3 of /a/b, beyond its budget of 2 (max-failures)"
        );
    }

    #[test]
    fn records_carry_what_the_contract_names() {
        let f = FailureRecord {
            host: "h1".into(),
            name: "h1.example.com".into(),
            n: 2,
            version: json!("r7"),
            error: "boom".into(),
            time: 12.5,
        };
        assert_eq!(
            Value::Object(f.props(3)),
            json!({"host": "h1", "name": "h1.example.com", "n": 2, "version": "r7",
                   "error": "boom", "time": 12.5, "budget": 3})
        );
        let halt = f.halt_props();
        let mut keys: Vec<&str> = halt.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["error", "host", "name", "time", "version"]);
    }
}
