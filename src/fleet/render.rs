//! The fleet plan for a terminal: a headline, then the changes grouped by kind, each with its
//! host count and the first few host ids; property values as the tree writes them (Python
//! literals), `old → new`; the rollout of each deployment that changes, when it is not a plain
//! one (`[max-parallel K, canary C, health check]` as `deploy --dry-run` says it).

use std::fmt::Write as _;

use serde_json::Value;

use super::plan::{FleetPlan, Group, NodeRollout};
use crate::agent::inventory::UNKNOWN_VERSION;
use crate::tree::literal::repr;

/// Host ids shown per group (the JSON form has them all).
pub const SHOWN: usize = 5;

/// `N host(s): a, b, c, d, e and K more`.
pub fn hosts_line(hosts: &[String]) -> String {
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
        let _ = writeln!(out, "  {first:<width$}  {}", hosts_line(&group.hosts));
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

/// The text form. `revision` names the candidate, `cluster` is the current cluster version.
pub fn render(plan: &FleetPlan, revision: &str, cluster: &Value) -> String {
    let mut out = String::new();
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
        plan.changed.len(),
        plan.routine.len(),
        plan.idle.len()
    );
    if !plan.without_inventory.is_empty() {
        let _ = writeln!(
            out,
            "  without an inventory, planned as if converged on the current tree: {}",
            hosts_line(&plan.without_inventory)
        );
    }
    if let Some(why) = &plan.mixed_fleet {
        let _ = writeln!(out, "  mixed fleet: {why}");
    }
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
    let rollouts: Vec<Group<NodeRollout>> = plan
        .rollouts
        .iter()
        .filter(|g| g.what.changes && !g.what.is_default())
        .cloned()
        .collect();
    section(
        &mut out,
        "Rollout (how the deployments that change go out across the fleet):",
        &rollouts,
        |r| {
            let mut text = format!("{} [{}]", r.path, r.describe());
            if r.max_parallel.is_null() {
                return text;
            }
            if plan.mixed_fleet.is_some() {
                let _ = write!(
                    text,
                    "\nmax-parallel {} in the tree: 1 while the fleet is mixed",
                    repr(&r.max_parallel)
                );
            } else if let Some(targets) = r.targets {
                let _ = write!(
                    text,
                    "\nmax-parallel {} of {targets} deploy target{}",
                    repr(&r.max_parallel),
                    if targets == 1 { "" } else { "s" }
                );
            }
            text
        },
    );
    if rollouts.iter().any(|g| g.what.health.is_none()) {
        out.push_str(
            "  (health check unknown: only a host knows; its inventory says so for the version it has installed)\n",
        );
    }
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_a_few_hosts_and_counts_the_rest() {
        let hosts: Vec<String> = (1..=7).map(|i| format!("h{i}")).collect();
        assert_eq!(hosts_line(&hosts), "7 hosts: h1, h2, h3, h4, h5 and 2 more");
        assert_eq!(hosts_line(&hosts[..1]), "1 host: h1");
    }
}
