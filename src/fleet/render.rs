//! The fleet plan for a terminal: a headline, then the changes grouped by kind, each with its
//! host count and the first few host ids; property values as the tree writes them (Python
//! literals), `old → new`; the rollout of each deployment that changes, when it is not a plain
//! one (`[max-parallel K, canary C, health check]` as `deploy --dry-run` says it). Hosts that
//! do not change are counted, never named, unless the plan is per host; then every host's
//! steps follow.

use std::fmt::Write as _;

use serde_json::Value;

use super::plan::{FleetPlan, Group, NodeRollout};
use crate::agent::inventory::UNKNOWN_VERSION;
use crate::agent::rollout::BUDGETS_OFF;
use crate::tree::literal::repr;

/// Host ids shown per group (the JSON form has them all).
pub(crate) const SHOWN: usize = 5;

/// `N host(s): a, b, c, d, e and K more`.
pub(crate) fn hosts_line(hosts: &[String]) -> String {
    let mut out = format!(
        "{} host{}: {}",
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        hosts[..hosts.len().min(SHOWN)].join(", ")
    );
    if hosts.len() > SHOWN {
        let _ = write!(out, " and {} more", hosts.len() - SHOWN);
    }
    out
}

/// `count` hosts of which `hosts` are named: [`hosts_line`] when all are, else
/// `N hosts, K that change: a, b` (or `N hosts` when none is).
pub(crate) fn counted_line(count: usize, hosts: &[String]) -> String {
    if hosts.len() == count {
        return hosts_line(hosts);
    }
    let mut out = format!("{count} host{}", if count == 1 { "" } else { "s" });
    if !hosts.is_empty() {
        let named = hosts_line(hosts);
        let (_, ids) = named.split_once(": ").unwrap_or(("", &named));
        let _ = write!(out, ", {} that change: {ids}", hosts.len());
    }
    out
}

fn value(v: &Value) -> String {
    if v.is_null() {
        "(none)".to_string()
    } else {
        repr(v)
    }
}

fn section<K>(out: &mut String, title: &str, groups: &[Group<K>], what: impl Fn(&K) -> String) {
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}");
    let lines: Vec<(String, &Group<K>)> = groups.iter().map(|g| (what(&g.what), g)).collect();
    let width = lines
        .iter()
        .map(|(w, _)| w.lines().next().unwrap_or("").chars().count())
        .max()
        .unwrap_or(0)
        .min(60);
    for (text, group) in lines {
        let mut parts = text.lines();
        let first = parts.next().unwrap_or("");
        let hosts = counted_line(group.count, &group.hosts);
        let _ = writeln!(out, "  {first:<width$}  {hosts}");
        for more in parts {
            let _ = writeln!(out, "      {more}");
        }
    }
}

/// A git revision (40 hex digits) shortened to 12, as `git log --oneline` shows it.
fn short(s: &str) -> &str {
    if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        &s[..12]
    } else {
        s
    }
}

fn version(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("*")
}

/// The text form. `revision` names the candidate, `cluster` is the current cluster version;
/// `per_host` adds every host's steps.
pub(crate) fn render(plan: &FleetPlan, revision: &str, cluster: &Value, per_host: bool) -> String {
    let mut out = String::new();
    header(&mut out, plan, revision, cluster);
    section(&mut out, "Packages:", &plan.packages, |p| match p.change {
        "install" => format!("install    {} {}", p.rpm, version(&p.to)),
        "remove" => match p.from.as_deref() {
            Some(v) if v != UNKNOWN_VERSION => format!("remove     {} {v}", p.rpm),
            _ => format!("remove     {}", p.rpm),
        },
        change => format!(
            "{change:<10} {} {} → {}",
            p.rpm,
            version(&p.from),
            version(&p.to)
        ),
    });
    section(&mut out, "Instances:", &plan.instances, |i| {
        format!("{:<10} {} {} ({})", i.change, i.path, i.n, i.rpm)
    });
    section(
        &mut out,
        "Properties (these deployments re-run with the new values):",
        &plan.properties,
        |p| {
            let mut text = p.path.clone();
            for c in &p.changes {
                let _ = write!(text, "\n{}: {} → {}", c.key, value(&c.old), value(&c.new));
            }
            text
        },
    );
    rollout_section(&mut out, plan);
    section(&mut out, "Other steps:", &plan.other, |o| o.step.clone());
    section(
        &mut out,
        "Failures (these passes would fail before changing anything, and halt the cluster):",
        &plan.failures,
        |f| f.error.clone(),
    );
    if !plan.has_changes() && !plan.has_failures() {
        out.push_str("\nNo changes: every host would only re-run what it has.\n");
    }
    if per_host {
        hosts_section(&mut out, plan);
    }
    out
}

/// The plan's first lines: what is planned against what, and how many hosts change.
fn header(out: &mut String, plan: &FleetPlan, revision: &str, cluster: &Value) {
    let _ = writeln!(
        out,
        "Plan for {} (cluster version now {}): {} registered host{}",
        short(revision),
        short(&crate::tree::literal::py_str(cluster)),
        plan.registered,
        if plan.registered == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "  hosts that change: {}; that only re-run what they have: {}; with nothing to do: {}",
        plan.counts.changed, plan.counts.routine, plan.counts.idle
    );
    if plan.counts.without_inventory > 0 {
        let _ = writeln!(
            out,
            "  without an inventory, planned as if converged on the current tree: {}",
            counted_line(plan.counts.without_inventory, &plan.without_inventory)
        );
    }
    if let Some(why) = &plan.mixed_fleet {
        let _ = writeln!(out, "  mixed fleet: {why}");
        let _ = writeln!(out, "    {BUDGETS_OFF}");
    }
}

/// How the deployments that change roll out (those with other than the default rollout).
fn rollout_section(out: &mut String, plan: &FleetPlan) {
    let rollouts: Vec<Group<NodeRollout>> = plan
        .rollouts
        .iter()
        .filter(|g| g.what.changes && !g.what.is_default())
        .cloned()
        .collect();
    section(
        out,
        "Rollout (how the deployments that change go out across the fleet):",
        &rollouts,
        |r| {
            let mut text = format!("{} [{}]", r.path, r.describe());
            let mixed = plan.mixed_fleet.is_some();
            text.push_str(&parallel_note(r, mixed));
            text.push_str(&budget_note(r, mixed));
            text
        },
    );
    if rollouts.iter().any(|g| g.what.health.is_none()) {
        out.push_str(
            "  (health check unknown: only a host knows; its inventory says so for the version it has installed)\n",
        );
    }
}

/// What the rollout line adds about `max-parallel` as the tree writes it: what a percentage
/// counts, or that a mixed fleet makes it 1.
fn parallel_note(r: &NodeRollout, mixed: bool) -> String {
    let written = repr(&r.max_parallel);
    match r.targets {
        _ if r.max_parallel.is_null() => String::new(),
        _ if mixed => format!("\nmax-parallel {written} in the tree: 1 while the fleet is mixed"),
        Some(targets) if r.max_parallel.is_string() => {
            format!("\nmax-parallel {written} of {}", deploy_targets(targets))
        }
        _ => String::new(),
    }
}

/// What the rollout line adds about the failure budget as the tree writes it: what a
/// percentage counts, or that a mixed fleet turns the budget off.
fn budget_note(r: &NodeRollout, mixed: bool) -> String {
    if !r.sets_budget() {
        return String::new();
    }
    let written = if r.max_failures_in_tree.is_null() {
        format!("on-failure '{}'", r.on_failure)
    } else {
        format!(
            "max-failures {}, on-failure '{}'",
            repr(&r.max_failures_in_tree),
            r.on_failure
        )
    };
    match r.targets {
        _ if mixed => format!(
            "\n{written} in the tree: off while the fleet is mixed (every failure halts the cluster)"
        ),
        Some(targets) if r.max_failures_in_tree.is_string() => format!(
            "\nmax-failures {} of {}",
            repr(&r.max_failures_in_tree),
            deploy_targets(targets)
        ),
        _ => String::new(),
    }
}

/// `N deploy target(s)`.
fn deploy_targets(n: usize) -> String {
    format!("{n} deploy target{}", if n == 1 { "" } else { "s" })
}

/// Every host's steps (`plan --per-host`), as `deploy --dry-run` prints them.
fn hosts_section(out: &mut String, plan: &FleetPlan) {
    out.push_str("\nHosts:\n");
    for host in &plan.hosts {
        let how = if host.error.is_some() {
            "fails"
        } else if host.changes {
            "changes"
        } else if host.steps.is_empty() {
            "nothing to do"
        } else {
            "re-runs what it has"
        };
        let _ = writeln!(out, "  {} ({how})", host.id);
        for line in host.error.iter().chain(&host.lines) {
            let _ = writeln!(out, "      {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_a_few_hosts_and_counts_the_rest() {
        let hosts: Vec<String> = (1..=7).map(|i| format!("h{i}")).collect();
        assert_eq!(hosts_line(&hosts), "7 hosts: h1, h2, h3, h4, h5 and 2 more");
        assert_eq!(hosts_line(&hosts[..1]), "1 host: h1");
        assert_eq!(counted_line(7, &hosts), hosts_line(&hosts));
        assert_eq!(
            counted_line(9, &hosts),
            "9 hosts, 7 that change: h1, h2, h3, h4, h5 and 2 more"
        );
        assert_eq!(counted_line(3, &hosts[..1]), "3 hosts, 1 that change: h1");
        assert_eq!(counted_line(1, &[]), "1 host");
    }
}
