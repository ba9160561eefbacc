//! `status` at fleet scale, pure: which hosts a status shows (`--host GLOB`, `--behind`,
//! `--failed`), and the summary of those hosts — hosts per version; converged, deploying and
//! failed; deploy targets of the tree that no registered host answers to (not registered);
//! the hosts behind the cluster version, the stalest first; and how long the cluster version
//! took to reach 50 %, 90 % and 100 % of the hosts (from `/hosts` `version-set` and each host's
//! `deployed-at`) — for the terminal, `--json` and Prometheus metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::tree::literal::py_str;

/// A host's state in the summary.
pub(crate) const CONVERGED: &str = "converged";
/// Not at the cluster version, no error.
pub(crate) const DEPLOYING: &str = "deploying";
/// Its last pass failed (it carries an error).
pub(crate) const FAILED: &str = "failed";

/// What the summary needs of a host.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostFacts<'a> {
    /// Host id.
    pub(crate) id: &'a str,
    /// Host name (`null` if unknown).
    pub(crate) name: &'a Value,
    /// Role (`null` if none).
    pub(crate) role: &'a Value,
    /// Its version.
    pub(crate) version: &'a Value,
    /// [`CONVERGED`], [`DEPLOYING`] or [`FAILED`].
    pub(crate) state: &'static str,
    /// When it last finished a pass (`deployed-at`), if known.
    pub(crate) deployed: Option<f64>,
}

/// The state of a host: failed if it carries an error (or its status says `error`), else
/// converged if at the cluster version, else deploying.
pub(crate) fn state(converged: bool, error: &Value, status: &Value) -> &'static str {
    let failed = match error {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        _ => true,
    } || status.as_str() == Some("error");
    if failed {
        FAILED
    } else if converged {
        CONVERGED
    } else {
        DEPLOYING
    }
}

/// Which hosts to show.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Filter {
    /// A glob (`*`, `?`) matched against the host id and the host name.
    pub(crate) host: Option<String>,
    /// Only hosts not at the cluster version.
    pub(crate) behind: bool,
    /// Only hosts whose last pass failed.
    pub(crate) failed: bool,
}

impl Filter {
    /// True if the host is shown.
    pub(crate) fn matches(&self, h: &HostFacts<'_>) -> bool {
        let named = self
            .host
            .as_deref()
            .is_none_or(|g| glob(g, h.id) || h.name.as_str().is_some_and(|name| glob(g, name)));
        named && (!self.behind || h.state != CONVERGED) && (!self.failed || h.state == FAILED)
    }

    /// True if no filter is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.host.is_none() && !self.behind && !self.failed
    }
}

/// Shell-style glob: `*` any run of characters, `?` one character, everything else itself.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// How many hosts run one version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct VersionCount {
    /// The version.
    pub(crate) version: Value,
    /// Hosts at it.
    pub(crate) hosts: usize,
}

/// A host behind the cluster version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Behind {
    /// Host id.
    pub(crate) id: String,
    /// Its version.
    pub(crate) version: Value,
    /// Its state ([`DEPLOYING`] or [`FAILED`]).
    pub(crate) state: &'static str,
    /// Seconds since the cluster version was set (how long it has been behind), if known.
    pub(crate) behind: Option<f64>,
    /// When it last finished a pass, if known.
    pub(crate) deployed: Option<f64>,
}

/// The roll-out of the cluster version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Rollout {
    /// The cluster version.
    pub(crate) version: Value,
    /// When it was set (`/hosts` `version-set`), if recorded for this version.
    pub(crate) started: Option<f64>,
    /// Hosts at it.
    pub(crate) reached: usize,
    /// Hosts counted.
    pub(crate) of: usize,
    /// Seconds from `started` until 50 % of the hosts had it (`null`: not yet, or unknown).
    pub(crate) p50: Option<f64>,
    /// … 90 %.
    pub(crate) p90: Option<f64>,
    /// … every host.
    pub(crate) p100: Option<f64>,
}

/// The summary of the hosts shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Summary {
    /// Registered hosts shown.
    pub(crate) hosts: usize,
    /// Hosts per version, most hosts first.
    pub(crate) versions: Vec<VersionCount>,
    /// At the cluster version.
    pub(crate) converged: usize,
    /// Not at it, no error.
    pub(crate) deploying: usize,
    /// Their last pass failed.
    pub(crate) failed: usize,
    /// Deploy targets of the tree that name no registered host (by id or name) and no role.
    pub(crate) not_registered: Vec<String>,
    /// Hosts behind the cluster version, the stalest (oldest last deploy) first.
    pub(crate) behind: Vec<Behind>,
    /// The roll-out of the cluster version.
    pub(crate) rollout: Rollout,
}

/// Seconds from `start` until `share` of `total` hosts had deployed, from the sorted delays
/// of the hosts that did; `None` if fewer did (or their times are unknown).
fn reach(delays: &[f64], total: usize, share: f64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    let need = ((total as f64) * share).ceil().max(1.0) as usize;
    delays.get(need - 1).copied()
}

/// Summarises `hosts` (already filtered). `version_set` is `/hosts` `version-set`; `targets`
/// the deploy targets of the tree; `roles` the roles known (declared or registered); `now`
/// the Unix time.
pub(crate) fn summarize(
    cluster: &Value,
    version_set: &Value,
    hosts: &[HostFacts<'_>],
    targets: &BTreeSet<String>,
    roles: &BTreeSet<String>,
    now: f64,
) -> Summary {
    let mut versions: BTreeMap<String, (Value, usize)> = BTreeMap::new();
    let mut count = BTreeMap::<&str, usize>::new();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for h in hosts {
        versions
            .entry(h.version.to_string())
            .or_insert_with(|| (h.version.clone(), 0))
            .1 += 1;
        *count.entry(h.state).or_default() += 1;
        names.insert(h.id);
        if let Some(n) = h.name.as_str() {
            names.insert(n);
        }
    }
    let mut versions: Vec<VersionCount> = versions
        .into_values()
        .map(|(version, hosts)| VersionCount { version, hosts })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.hosts));
    let started = version_set
        .get("time")
        .and_then(Value::as_f64)
        .filter(|_| version_set.get("version") == Some(cluster));
    let mut behind: Vec<Behind> = hosts
        .iter()
        .filter(|h| h.state != CONVERGED)
        .map(|h| Behind {
            id: h.id.to_string(),
            version: h.version.clone(),
            state: h.state,
            behind: started.map(|s| (now - s).max(0.0)),
            deployed: h.deployed,
        })
        .collect();
    behind.sort_by(|a, b| {
        let key = |x: &Behind| x.deployed.unwrap_or(f64::NEG_INFINITY);
        key(a).total_cmp(&key(b)).then_with(|| a.id.cmp(&b.id))
    });
    let mut delays: Vec<f64> = match started {
        Some(s) => hosts
            .iter()
            .filter(|h| h.state == CONVERGED)
            .filter_map(|h| h.deployed.map(|d| (d - s).max(0.0)))
            .collect(),
        None => Vec::new(),
    };
    delays.sort_by(f64::total_cmp);
    let reached = count.get(CONVERGED).copied().unwrap_or(0);
    let rollout = Rollout {
        version: cluster.clone(),
        started,
        reached,
        of: hosts.len(),
        p50: reach(&delays, hosts.len(), 0.5),
        p90: reach(&delays, hosts.len(), 0.9),
        p100: reach(&delays, hosts.len(), 1.0),
    };
    Summary {
        hosts: hosts.len(),
        versions,
        converged: reached,
        deploying: count.get(DEPLOYING).copied().unwrap_or(0),
        failed: count.get(FAILED).copied().unwrap_or(0),
        not_registered: targets
            .iter()
            .filter(|t| !names.contains(t.as_str()) && !roles.contains(*t))
            .cloned()
            .collect(),
        behind,
        rollout,
    }
}

/// Seconds as `42s`, `5m`, `3h`, `2d`.
pub(crate) fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Hosts listed by name in the text form; the JSON form lists them all.
const LISTED: usize = 5;

fn few(items: &[String]) -> String {
    let mut out = items[..items.len().min(LISTED)].join(", ");
    if items.len() > LISTED {
        let _ = write!(out, " and {} more", items.len() - LISTED);
    }
    out
}

impl Summary {
    /// The text form: a few lines above the host table.
    pub(crate) fn render(&self, now: f64) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "hosts: {} registered: {} converged, {} deploying, {} failed; {} not registered",
            self.hosts,
            self.converged,
            self.deploying,
            self.failed,
            self.not_registered.len()
        );
        let versions: Vec<String> = self
            .versions
            .iter()
            .map(|v| format!("{} ({})", py_str(&v.version), v.hosts))
            .collect();
        if !versions.is_empty() {
            let _ = writeln!(out, "versions: {}", few(&versions));
        }
        let r = &self.rollout;
        let at = |t: Option<f64>| t.map(duration).unwrap_or_else(|| "-".into());
        match r.started {
            Some(start) => {
                let _ = writeln!(
                    out,
                    "roll-out of {}: started {} ago, {} of {} hosts; 50% in {}, 90% in {}, 100% in {}",
                    py_str(&r.version),
                    duration(now - start),
                    r.reached,
                    r.of,
                    at(r.p50),
                    at(r.p90),
                    at(r.p100)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "roll-out of {}: {} of {} hosts (start time not recorded)",
                    py_str(&r.version),
                    r.reached,
                    r.of
                );
            }
        }
        if !self.behind.is_empty() {
            let slow: Vec<String> = self
                .behind
                .iter()
                .map(|b| {
                    let mut s = b.id.clone();
                    if let Some(t) = b.behind {
                        let _ = write!(s, " behind {}", duration(t));
                    }
                    if b.state == FAILED {
                        s.push_str(" (failed)");
                    }
                    s
                })
                .collect();
            let _ = writeln!(out, "slowest: {}", few(&slow));
        }
        if !self.not_registered.is_empty() {
            let _ = writeln!(out, "not registered: {}", few(&self.not_registered));
        }
        out
    }

    /// Prometheus text exposition (for a textfile collector).
    pub(crate) fn metrics(&self, halted: bool) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, help: &str, samples: &[(String, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            for (labels, v) in samples {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        let label = |k: &str, v: &str| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{{{k}=\"{v}\"}}")
        };
        metric(
            "zkdeployment_fleet_hosts",
            "Registered hosts by state (not_registered: deploy targets no host answers to).",
            &[
                (label("state", CONVERGED), self.converged as f64),
                (label("state", DEPLOYING), self.deploying as f64),
                (label("state", FAILED), self.failed as f64),
                (
                    label("state", "not_registered"),
                    self.not_registered.len() as f64,
                ),
            ],
        );
        let versions: Vec<(String, f64)> = self
            .versions
            .iter()
            .map(|v| (label("version", &py_str(&v.version)), v.hosts as f64))
            .collect();
        metric(
            "zkdeployment_fleet_version_hosts",
            "Registered hosts per version.",
            &versions,
        );
        metric(
            "zkdeployment_fleet_cluster_halted",
            "1 if the cluster is halted (version None).",
            &[(String::new(), if halted { 1.0 } else { 0.0 })],
        );
        let r = &self.rollout;
        let reached: Vec<(String, f64)> = [("0.5", r.p50), ("0.9", r.p90), ("1", r.p100)]
            .into_iter()
            .filter_map(|(q, t)| t.map(|t| (label("share", q), t)))
            .collect();
        metric(
            "zkdeployment_fleet_rollout_seconds",
            "Seconds the cluster version took to reach this share of the hosts (absent: not yet).",
            &reached,
        );
        let worst = self
            .behind
            .iter()
            .filter_map(|b| b.behind)
            .fold(0.0, f64::max);
        metric(
            "zkdeployment_fleet_behind_seconds",
            "How long the hosts behind the cluster version have been behind (0: none).",
            &[(String::new(), worst)],
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs() {
        assert!(glob("web*", "web01"));
        assert!(glob("*.example.com", "h1.example.com"));
        assert!(glob("h?", "h1"));
        assert!(!glob("h?", "h10"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }

    #[test]
    fn summarises_a_roll_out() {
        let (v1, v2) = (json!("r1"), json!("r2"));
        let null = Value::Null;
        let host = |id: &'static str, version: &'static Value, state, deployed| HostFacts {
            id,
            name: &Value::Null,
            role: &Value::Null,
            version,
            state,
            deployed,
        };
        let v1: &'static Value = Box::leak(Box::new(v1));
        let v2s: &'static Value = Box::leak(Box::new(v2.clone()));
        let hosts = vec![
            host("a", v2s, CONVERGED, Some(110.0)),
            host("b", v2s, CONVERGED, Some(130.0)),
            host("c", v1, DEPLOYING, Some(50.0)),
            host("d", v1, FAILED, Some(20.0)),
        ];
        let set = json!({"version": "r2", "time": 100.0});
        let targets: BTreeSet<String> = ["a", "b", "gone", "web"].map(String::from).into();
        let roles: BTreeSet<String> = ["web".to_string()].into();
        let s = summarize(&v2, &set, &hosts, &targets, &roles, 200.0);
        assert_eq!((s.converged, s.deploying, s.failed), (2, 1, 1));
        assert_eq!(s.not_registered, ["gone"]);
        assert_eq!(s.rollout.p50, Some(30.0));
        assert_eq!(s.rollout.p90, None);
        assert_eq!(s.behind[0].id, "d");
        assert_eq!(s.behind[0].behind, Some(100.0));
        assert_eq!(s.versions[0].hosts, 2);
        let text = s.render(200.0);
        assert!(text.contains("50% in 30s, 90% in -"), "{text}");
        assert!(
            text.contains("slowest: d behind 100s (failed), c behind 100s"),
            "{text}"
        );
        let m = s.metrics(false);
        assert!(
            m.contains("zkdeployment_fleet_hosts{state=\"failed\"} 1\n"),
            "{m}"
        );
        assert!(
            m.contains("zkdeployment_fleet_rollout_seconds{share=\"0.5\"} 30\n"),
            "{m}"
        );
        assert!(!m.contains("share=\"0.9\""), "{m}");
        // Another version's start time is not this one's.
        let old = json!({"version": "r1", "time": 100.0});
        let s = summarize(&v2, &old, &hosts, &targets, &roles, 200.0);
        assert_eq!(s.rollout.started, None);
        assert_eq!(s.rollout.p50, None);
        let _ = null;
    }
}
