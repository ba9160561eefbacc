//! The cluster at a glance (`zkdeployment status`): the cluster version, the synced revision,
//! the halt record, one row per host (converged or not, its error, its current step), and the
//! holders and waiters of the node locks and role locks with their age. [`Overview::read`]
//! reads it; [`Overview::render`] formats it for a terminal; the JSON form is stable.

use serde::Serialize;
use serde_json::Value;

use crate::tree::literal::py_str;
use crate::zk::lock::sequence_of;
use crate::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use crate::zk::{Client, ZkError};

/// One host.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostRow {
    /// Host id.
    pub id: String,
    /// Host name.
    pub name: Value,
    /// Role.
    pub role: Value,
    /// The host's version.
    pub version: Value,
    /// True if at the cluster version.
    pub converged: bool,
    /// The last failure's message, if any.
    pub error: Value,
    /// The current step.
    pub status: Value,
}

/// One lock.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LockRow {
    /// The lock node.
    pub path: String,
    /// The holder's identifier (`host-name (host-id)` for node locks).
    pub holder: Option<String>,
    /// Identifiers of the waiting contenders, in order.
    pub waiters: Vec<String>,
    /// Seconds the holder has held it (since its request was made).
    pub age: Option<f64>,
}

/// The whole picture.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Overview {
    /// `/hosts` `version`.
    pub version: Value,
    /// `/hosts` `synced`.
    pub synced: Value,
    /// `/hosts` `halt`.
    pub halt: Value,
    /// Hosts, by id.
    pub hosts: Vec<HostRow>,
    /// Locks that have a holder or waiters.
    pub locks: Vec<LockRow>,
}

fn contenders(path: &str, lock: &ZNode, now_ms: i64) -> Option<LockRow> {
    let mut found: Vec<(i64, &String, &ZNode)> = Vec::new();
    for (name, node) in &lock.children {
        if let Some(seq) = sequence_of(name) {
            found.push((seq, name, node));
        } else if let Some(seq) = name.strip_prefix("lr-").and_then(|s| s.parse::<i64>().ok()) {
            found.push((seq, name, node));
        }
    }
    if found.is_empty() {
        return None;
    }
    found.sort_by_key(|(seq, _, _)| *seq);
    let ident = |n: &ZNode| match n.props.get("string_value") {
        Some(v) => py_str(v),
        None => {
            let who = n.props.get("requestor").map(py_str).unwrap_or_default();
            let name = n.props.get("hostname").map(py_str).unwrap_or_default();
            if name.is_empty() {
                who
            } else {
                format!("{name} ({who})")
            }
        }
    };
    let (_, _, first) = found[0];
    Some(LockRow {
        path: path.to_string(),
        holder: Some(ident(first)),
        waiters: found[1..].iter().map(|(_, _, n)| ident(n)).collect(),
        age: Some(((now_ms - first.ctime) as f64 / 1000.0).max(0.0)),
    })
}

impl Overview {
    /// Reads the overview from ZooKeeper.
    pub async fn read(client: &Client) -> Result<Overview, ZkError> {
        let hosts = read_subtree(
            client,
            "/hosts",
            &ReadOptions {
                include_ephemeral: true,
                skip: &|p| p.matches('/').count() > 2,
            },
        )
        .await?
        .unwrap_or_default();
        let version = hosts.props.get("version").cloned().unwrap_or(Value::Null);
        let rows = hosts
            .children
            .iter()
            .map(|(id, node)| {
                let get = |k: &str| node.props.get(k).cloned().unwrap_or(Value::Null);
                HostRow {
                    id: id.clone(),
                    name: get("name"),
                    role: get("role"),
                    version: get("version"),
                    converged: node.props.get("version") == Some(&version),
                    error: get("error"),
                    status: get("status"),
                }
            })
            .collect();
        let now_ms = (crate::agent::status::now() * 1000.0) as i64;
        let mut locks = Vec::new();
        for base in ["/agent-locks", "/role-locks"] {
            if let Some(tree) = read_subtree(client, base, &ReadOptions::default()).await? {
                for (name, lock) in &tree.children {
                    if let Some(row) = contenders(&format!("{base}/{name}"), lock, now_ms) {
                        locks.push(row);
                    }
                }
            }
        }
        if let Some(lock) = read_subtree(client, "/hosts-lock", &ReadOptions::default()).await? {
            if let Some(row) = contenders("/hosts-lock", &lock, now_ms) {
                locks.push(row);
            }
        }
        Ok(Overview {
            version,
            synced: hosts.props.get("synced").cloned().unwrap_or(Value::Null),
            halt: hosts.props.get("halt").cloned().unwrap_or(Value::Null),
            hosts: rows,
            locks,
        })
    }

    /// Human-readable text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let state = match &self.version {
            Value::Null => "HALTED".to_string(),
            Value::Bool(false) => "PAUSED".to_string(),
            v => py_str(v),
        };
        out.push_str(&format!(
            "cluster version: {state}   synced revision: {}\n",
            py_str(&self.synced)
        ));
        if let Value::Object(h) = &self.halt {
            out.push_str(&format!(
                "halted by {} ({}) deploying {}: {}\n",
                h.get("name").map(py_str).unwrap_or_default(),
                h.get("host").map(py_str).unwrap_or_default(),
                h.get("version").map(py_str).unwrap_or_default(),
                h.get("error").map(py_str).unwrap_or_default()
            ));
            out.push_str("  resume with: zkdeployment resume   (or --version V)\n");
        }
        let cell = |v: &Value| {
            if v.is_null() {
                "-".to_string()
            } else {
                py_str(v)
            }
        };
        let mut rows = vec![[
            "HOST".to_string(),
            "NAME".into(),
            "ROLE".into(),
            "VERSION".into(),
            "OK".into(),
            "STATUS".into(),
            "ERROR".into(),
        ]];
        for h in &self.hosts {
            rows.push([
                h.id.clone(),
                cell(&h.name),
                cell(&h.role),
                cell(&h.version),
                if h.converged {
                    "yes".into()
                } else {
                    "NO".into()
                },
                cell(&h.status),
                cell(&h.error),
            ]);
        }
        out.push_str(&table(&rows));
        if !self.locks.is_empty() {
            let mut rows = vec![[
                "LOCK".to_string(),
                "HOLDER".into(),
                "AGE".into(),
                "WAITERS".into(),
            ]];
            for l in &self.locks {
                rows.push([
                    l.path.clone(),
                    l.holder.clone().unwrap_or_else(|| "-".into()),
                    l.age.map(|a| format!("{a:.0}s")).unwrap_or_default(),
                    l.waiters.join(", "),
                ]);
            }
            out.push_str(&table(&rows));
        }
        out
    }
}

fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count().min(60));
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let c: String = c.chars().take(60).collect();
                format!("{c:<w$}", w = widths[i])
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
