//! The rollout properties of an application node (docs/rollouts.md): `max-parallel` (how
//! many hosts may deploy the node at once: a count, or a share `'P%'` of the hosts it is
//! deployed to), `canary` (how many hosts deploy a new version first, one at a time),
//! `health-deadline` (how long the health check may take), and the failure budget of CONTRACT
//! 15: `max-failures` (how many hosts may fail the node at one cluster version: a count, or a
//! share `'P%'` of its hosts rounded down) and `on-failure` (`'halt-cluster'` or
//! `'halt-node'`). Pure: the agent, `tree check` and `sync` all judge the values here, so they
//! agree on what is an error.

use serde_json::Value;

use super::literal::repr;

/// The property naming how many hosts may deploy a node at once.
pub(crate) const MAX_PARALLEL: &str = "max-parallel";
/// The property naming how many canary hosts deploy a new version first.
pub(crate) const CANARY: &str = "canary";
/// The property naming how long (seconds) the health check may take to pass.
pub(crate) const HEALTH_DEADLINE: &str = "health-deadline";
/// The property naming how many hosts may fail the node at one cluster version.
pub(crate) const MAX_FAILURES: &str = "max-failures";
/// The property naming what a failure beyond the budget stops.
pub(crate) const ON_FAILURE: &str = "on-failure";
/// The rollout properties.
pub(crate) const PROPERTIES: [&str; 5] = [
    MAX_PARALLEL,
    CANARY,
    HEALTH_DEADLINE,
    MAX_FAILURES,
    ON_FAILURE,
];

/// `health-deadline` when the node does not set it, seconds.
pub(crate) const DEFAULT_HEALTH_DEADLINE: f64 = 300.0;
/// The largest count `max-parallel` and `canary` accept (more hosts than any fleet has).
pub(crate) const MAX_COUNT: u64 = 1_000_000;
/// The longest `health-deadline` accepted: a day.
pub(crate) const MAX_HEALTH_DEADLINE: f64 = 86_400.0;

/// How many hosts may deploy a node at once, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parallel {
    /// That many hosts.
    Count(u32),
    /// That share (1–100) of the hosts the node is deployed to, rounded up, at least 1.
    Percent(u32),
}

impl Parallel {
    /// The number of hosts (K) for a node deployed to `hosts` hosts.
    pub(crate) fn effective(self, hosts: usize) -> u32 {
        match self {
            Parallel::Count(n) => n.max(1),
            Parallel::Percent(p) => {
                let k = (hosts as u64 * u64::from(p)).div_ceil(100);
                k.clamp(1, u64::from(u32::MAX)) as u32
            }
        }
    }

    /// True when the value depends on the number of hosts.
    pub(crate) fn is_percent(self) -> bool {
        matches!(self, Parallel::Percent(_))
    }
}

/// How many hosts may fail a node at one cluster version, as written (`max-failures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Budget {
    /// That many hosts (0: the first failure stops the rollout).
    Count(u32),
    /// That share (0–100) of the hosts the node is deployed to, rounded down.
    Percent(u32),
}

impl Budget {
    /// The number of hosts (F) that may fail a node deployed to `hosts` hosts.
    pub(crate) fn effective(self, hosts: usize) -> u32 {
        match self {
            Budget::Count(n) => n,
            Budget::Percent(p) => {
                let f = hosts as u64 * u64::from(p) / 100;
                f.min(u64::from(u32::MAX)) as u32
            }
        }
    }
}

/// What a failure beyond the budget stops (`on-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum OnFailure {
    /// The whole cluster (`'halt-cluster'`, the default, as the original).
    #[default]
    HaltCluster,
    /// Only this node, until an operator resumes it (`'halt-node'`).
    HaltNode,
}

impl OnFailure {
    /// The value as the tree writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OnFailure::HaltCluster => "halt-cluster",
            OnFailure::HaltNode => "halt-node",
        }
    }
}

/// The rollout settings of one application node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rollout {
    /// `max-parallel` (default 1).
    pub(crate) max_parallel: Parallel,
    /// `canary` (default 0).
    pub(crate) canary: u32,
    /// `health-deadline`, seconds (default 300).
    pub(crate) health_deadline: f64,
    /// `max-failures` (default 0).
    pub(crate) max_failures: Budget,
    /// `on-failure` (default `'halt-cluster'`).
    pub(crate) on_failure: OnFailure,
}

impl Default for Rollout {
    fn default() -> Rollout {
        Rollout {
            max_parallel: Parallel::Count(1),
            canary: 0,
            health_deadline: DEFAULT_HEALTH_DEADLINE,
            max_failures: Budget::Count(0),
            on_failure: OnFailure::HaltCluster,
        }
    }
}

/// A rollout property with a value it cannot have.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("Invalid {property} for {path}: {value} ({expected})")]
pub(crate) struct RolloutError {
    /// The property.
    pub(crate) property: &'static str,
    /// The application node.
    pub(crate) path: String,
    /// The value, as a Python literal.
    pub(crate) value: String,
    /// What is accepted.
    pub(crate) expected: &'static str,
}

/// Reads the rollout settings of the application node at `path`; `lookup` gives a property's
/// value with links already followed (`None`: not set).
pub(crate) fn parse(
    path: &str,
    mut lookup: impl FnMut(&'static str) -> Option<Value>,
) -> Result<Rollout, RolloutError> {
    let mut out = Rollout::default();
    if let Some(v) = lookup(MAX_PARALLEL) {
        out.max_parallel = max_parallel(&v).ok_or_else(|| RolloutError {
            property: MAX_PARALLEL,
            path: path.to_string(),
            value: repr(&v),
            expected: "an integer from 1 to 1000000, or a string 'P%' with P from 1 to 100",
        })?;
    }
    if let Some(v) = lookup(CANARY) {
        out.canary = count(&v, 0).ok_or_else(|| RolloutError {
            property: CANARY,
            path: path.to_string(),
            value: repr(&v),
            expected: "an integer from 0 to 1000000",
        })?;
    }
    if let Some(v) = lookup(HEALTH_DEADLINE) {
        out.health_deadline = seconds(&v).ok_or_else(|| RolloutError {
            property: HEALTH_DEADLINE,
            path: path.to_string(),
            value: repr(&v),
            expected: "a number of seconds > 0, at most 86400",
        })?;
    }
    parse_budget(path, &mut lookup, &mut out)?;
    Ok(out)
}

/// `max-failures` and `on-failure` into `out`.
fn parse_budget(
    path: &str,
    lookup: &mut impl FnMut(&'static str) -> Option<Value>,
    out: &mut Rollout,
) -> Result<(), RolloutError> {
    if let Some(v) = lookup(MAX_FAILURES) {
        out.max_failures = max_failures(&v).ok_or_else(|| RolloutError {
            property: MAX_FAILURES,
            path: path.to_string(),
            value: repr(&v),
            expected: "an integer from 0 to 1000000, or a string 'P%' with P from 0 to 100",
        })?;
    }
    if let Some(v) = lookup(ON_FAILURE) {
        out.on_failure = match v.as_str() {
            Some("halt-cluster") => OnFailure::HaltCluster,
            Some("halt-node") => OnFailure::HaltNode,
            _ => {
                return Err(RolloutError {
                    property: ON_FAILURE,
                    path: path.to_string(),
                    value: repr(&v),
                    expected: "'halt-cluster' or 'halt-node'",
                })
            }
        };
    }
    Ok(())
}

/// `'P%'` with P (ASCII digits only) from `min` to 100.
fn percent(s: &str, min: u32) -> Option<u32> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let p: u32 = digits.parse().ok()?;
    (min..=100).contains(&p).then_some(p)
}

fn max_failures(v: &Value) -> Option<Budget> {
    match v {
        Value::String(s) => percent(s, 0).map(Budget::Percent),
        other => count(other, 0).map(Budget::Count),
    }
}

/// An integer from `min` to [`MAX_COUNT`] (booleans and floats are not integers).
fn count(v: &Value, min: u64) -> Option<u32> {
    let n = v.as_u64()?;
    (min..=MAX_COUNT).contains(&n).then_some(n as u32)
}

fn max_parallel(v: &Value) -> Option<Parallel> {
    match v {
        Value::String(s) => percent(s, 1).map(Parallel::Percent),
        other => count(other, 1).map(Parallel::Count),
    }
}

fn seconds(v: &Value) -> Option<f64> {
    if !v.is_number() {
        return None;
    }
    let s = v.as_f64()?;
    (s.is_finite() && s > 0.0 && s <= MAX_HEALTH_DEADLINE).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(key: &'static str, v: Value) -> Result<Rollout, RolloutError> {
        parse("/a", |k| (k == key).then(|| v.clone()))
    }

    #[test]
    fn defaults() {
        assert_eq!(parse("/a", |_| None).unwrap(), Rollout::default());
    }

    #[test]
    fn good_values() {
        assert_eq!(
            with(MAX_PARALLEL, json!(3)).unwrap().max_parallel,
            Parallel::Count(3)
        );
        assert_eq!(
            with(MAX_PARALLEL, json!("30%")).unwrap().max_parallel,
            Parallel::Percent(30)
        );
        assert_eq!(
            with(MAX_PARALLEL, json!("100%")).unwrap().max_parallel,
            Parallel::Percent(100)
        );
        assert_eq!(with(CANARY, json!(0)).unwrap().canary, 0);
        assert_eq!(with(CANARY, json!(2)).unwrap().canary, 2);
        assert_eq!(
            with(HEALTH_DEADLINE, json!(0.5)).unwrap().health_deadline,
            0.5
        );
        assert_eq!(
            with(HEALTH_DEADLINE, json!(60)).unwrap().health_deadline,
            60.0
        );
    }

    #[test]
    fn bad_values() {
        for v in [
            json!(0),
            json!(-1),
            json!("abc"),
            json!("150%"),
            json!("0%"),
            json!("%"),
            json!("-5%"),
            json!(" 5%"),
            json!("5"),
            json!(2.0),
            json!(true),
            json!(null),
            json!([1]),
        ] {
            let e = with(MAX_PARALLEL, v.clone()).unwrap_err();
            assert_eq!(e.property, MAX_PARALLEL, "{v}");
        }
        for v in [json!(-1), json!(1.5), json!("2"), json!(false)] {
            assert!(with(CANARY, v.clone()).is_err(), "{v}");
        }
        for v in [json!(0), json!(-3), json!("10"), json!(1e9), json!(true)] {
            assert!(with(HEALTH_DEADLINE, v.clone()).is_err(), "{v}");
        }
        assert_eq!(
            with(MAX_PARALLEL, json!("150%")).unwrap_err().to_string(),
            "Invalid max-parallel for /a: '150%' (an integer from 1 to 1000000, or a string 'P%' with P from 1 to 100)"
        );
        // Above the largest count: the message says where the range ends.
        assert_eq!(
            with(CANARY, json!(MAX_COUNT + 1)).unwrap_err().to_string(),
            "Invalid canary for /a: 1000001 (an integer from 0 to 1000000)"
        );
        assert!(with(MAX_PARALLEL, json!(MAX_COUNT)).is_ok());
        assert!(with(MAX_PARALLEL, json!(MAX_COUNT + 1)).is_err());
    }

    #[test]
    fn percentages_round_up_to_at_least_one() {
        assert_eq!(Parallel::Percent(30).effective(10), 3);
        assert_eq!(Parallel::Percent(30).effective(11), 4);
        assert_eq!(Parallel::Percent(25).effective(100), 25);
        assert_eq!(Parallel::Percent(1).effective(3), 1);
        assert_eq!(Parallel::Percent(50).effective(0), 1);
        assert_eq!(Parallel::Count(7).effective(2), 7);
    }

    #[test]
    fn failure_budgets() {
        let cases = [
            (json!(0), Budget::Count(0)),
            (json!(3), Budget::Count(3)),
            (json!(1_000_000), Budget::Count(1_000_000)),
            (json!("0%"), Budget::Percent(0)),
            (json!("5%"), Budget::Percent(5)),
            (json!("100%"), Budget::Percent(100)),
        ];
        for (v, want) in cases {
            assert_eq!(
                with(MAX_FAILURES, v.clone()).unwrap().max_failures,
                want,
                "{v}"
            );
        }
        for v in [
            json!(-1),
            json!("abc"),
            json!("150%"),
            json!("%"),
            json!("5"),
            json!(1.5),
            json!(true),
            json!(null),
            json!(1_000_001),
        ] {
            let e = with(MAX_FAILURES, v.clone()).unwrap_err();
            assert_eq!(e.property, MAX_FAILURES, "{v}");
        }
        assert_eq!(
            with(MAX_FAILURES, json!("150%")).unwrap_err().to_string(),
            "Invalid max-failures for /a: '150%' (an integer from 0 to 1000000, or a string 'P%' with P from 0 to 100)"
        );
    }

    #[test]
    fn percent_budgets_round_down() {
        let table = [
            (Budget::Percent(5), 100, 5),
            (Budget::Percent(5), 99, 4),
            (Budget::Percent(5), 19, 0),
            (Budget::Percent(50), 3, 1),
            (Budget::Percent(100), 7, 7),
            (Budget::Percent(0), 10_000, 0),
            (Budget::Count(2), 1, 2),
        ];
        for (budget, hosts, f) in table {
            assert_eq!(budget.effective(hosts), f, "{budget:?} of {hosts}");
        }
    }

    #[test]
    fn on_failure_values() {
        assert_eq!(
            parse("/a", |_| None).unwrap().on_failure,
            OnFailure::HaltCluster
        );
        assert_eq!(
            with(ON_FAILURE, json!("halt-node")).unwrap().on_failure,
            OnFailure::HaltNode
        );
        assert_eq!(
            with(ON_FAILURE, json!("halt-cluster")).unwrap().on_failure,
            OnFailure::HaltCluster
        );
        for v in [json!("stop"), json!("Halt-Node"), json!(1), json!(null)] {
            assert_eq!(
                with(ON_FAILURE, v.clone()).unwrap_err().property,
                ON_FAILURE,
                "{v}"
            );
        }
        assert_eq!(
            with(ON_FAILURE, json!("stop")).unwrap_err().to_string(),
            "Invalid on-failure for /a: 'stop' ('halt-cluster' or 'halt-node')"
        );
    }
}
