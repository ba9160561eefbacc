//! The tree the soak's syncer commits: a random walk over a small fleet's deployments. Hosts
//! `h1`..`h8` get `/acme/<node> : foo` deployments (1 or 2 instances each); hosts of the role
//! `web` get `/webapp/<node> : webapp` deployments through the role controller `webrc`
//! (`/roles/web`). Sometimes a file adds a new top-level node (`/extra<k>`), to exercise the
//! syncer's ownership of top-level nodes.
//!
//! Rolling deploys (docs/rollouts.md): an `/acme` node may carry `max-parallel` (a
//! count or a percentage of its deploy targets) and `canary`, changed between commits (the
//! "change of max-parallel between versions needs no operator" rule); every `/acme` node has a
//! short `health-deadline` ([`HEALTH_DEADLINE`]). Packages `foo` 1.0 and 2.0 and `webapp` have
//! a `zookeeper-health` check (`payload.rs`), `foo` 1.4 has none.
//!
//! Failure budgets (CONTRACT 15): an `/acme` node may carry `max-failures` (a count or a
//! percentage of its deploy targets) and `on-failure = 'halt-node'`, changed between commits
//! like `max-parallel` ([`Budget`]).

use std::collections::{BTreeMap, BTreeSet};

use super::rng::Rng;

/// The role of the role hosts.
pub const ROLE: &str = "web";

/// The `health-deadline` of every `/acme` node (seconds): a check that never passes fails
/// the step after about this long.
pub const HEALTH_DEADLINE: u32 = 4;

/// A `max-parallel` value as written in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxParallel {
    /// Not written (1).
    Unset,
    /// A count.
    Count(u32),
    /// `'P%'`.
    Percent(u32),
}

impl MaxParallel {
    /// The effective K for a node with `targets` deploy targets (docs/rollouts.md).
    pub fn effective(self, targets: usize) -> usize {
        match self {
            MaxParallel::Unset => 1,
            MaxParallel::Count(n) => n.max(1) as usize,
            MaxParallel::Percent(p) => (targets * p as usize).div_ceil(100).max(1),
        }
    }
}

/// A `max-failures` value as written in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxFailures {
    /// A count.
    Count(u32),
    /// `'P%'`.
    Percent(u32),
}

/// The failure budget of a node as written: `max-failures` (None: not written, 0) and
/// `on-failure = 'halt-node'` (`halt_node`; else not written, `'halt-cluster'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// `max-failures`.
    pub max: Option<MaxFailures>,
    /// `on-failure = 'halt-node'`.
    pub halt_node: bool,
}

impl Budget {
    /// The effective F for a node with `targets` deploy targets (`P%` rounded down).
    pub fn effective(self, targets: usize) -> usize {
        match self.max {
            None => 0,
            Some(MaxFailures::Count(n)) => n as usize,
            Some(MaxFailures::Percent(p)) => targets * p as usize / 100,
        }
    }

    /// True if a failure goes through the budget (F > 0 or `halt-node`): otherwise it halts
    /// the cluster, as the original's.
    pub fn budgeted(self, targets: usize) -> bool {
        self.effective(targets) > 0 || self.halt_node
    }
}

/// One `/acme` application node.
#[derive(Debug, Clone)]
pub struct AcmeNode {
    /// Deployed to these hosts, with so many instances.
    pub hosts: BTreeMap<String, u32>,
    /// A property bumped to change the node's data.
    pub rev: u32,
    /// `max-parallel`.
    pub parallel: MaxParallel,
    /// `canary` (None: not written).
    pub canary: Option<u32>,
    /// `max-failures` and `on-failure`.
    pub budget: Budget,
}

impl AcmeNode {
    /// The effective max-parallel K of this node.
    pub fn k(&self) -> usize {
        self.parallel.effective(self.hosts.len())
    }

    /// The effective budget F of this node.
    pub fn f(&self) -> usize {
        self.budget.effective(self.hosts.len())
    }

    /// True if a failure of this node goes through its budget.
    pub fn budgeted(&self) -> bool {
        self.budget.budgeted(self.hosts.len())
    }

    /// The effective canary count (0 unless K > 1).
    pub fn c(&self) -> usize {
        if self.k() > 1 {
            self.canary.unwrap_or(0) as usize
        } else {
            0
        }
    }
}

/// Packages whose versions have a health check (`foo` 1.4 has none).
pub fn has_health(rpm: &str, version: &str) -> bool {
    !(rpm == "foo" && version == "1.4")
}

/// The whole tree of one commit.
#[derive(Debug, Clone)]
pub struct Tree {
    /// `foo`'s version (one for every node: a host may not want two versions of a package).
    pub foo: &'static str,
    /// The role controller's version.
    pub webrc: &'static str,
    /// `/acme/<name>`.
    pub acme: BTreeMap<String, AcmeNode>,
    /// `/webapp/<name>`: (instances, rev).
    pub webapp: BTreeMap<String, (u32, u32)>,
    /// An extra top-level node `/extra<k>`, if any.
    pub extra: Option<u32>,
}

const FOO: [&str; 3] = ["1.0", "1.4", "2.0"];
const WEBRC: [&str; 2] = ["1.0", "1.1"];

impl Tree {
    /// A first tree for the plain hosts `plain`.
    pub fn initial(plain: &[String], rng: &mut Rng) -> Tree {
        let mut tree = Tree {
            foo: FOO[rng.below(FOO.len())],
            webrc: "1.0",
            acme: BTreeMap::new(),
            webapp: BTreeMap::new(),
            extra: None,
        };
        for name in ["a", "b", "c", "d", "e"] {
            tree.acme.insert(name.into(), random_node(plain, rng));
        }
        for name in ["x", "y"] {
            tree.webapp
                .insert(name.into(), (1 + rng.below(2) as u32, 0));
        }
        tree
    }

    /// The next commit's tree: one to three random changes.
    pub fn mutate(&self, plain: &[String], rng: &mut Rng) -> Tree {
        let mut t = self.clone();
        for _ in 0..1 + rng.below(3) {
            match rng.weighted(&[5.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.7, 2.5, 1.5]) {
                0 => {
                    let k = pick_key(&t.acme, rng);
                    t.acme.get_mut(&k).unwrap().rev += 1;
                }
                1 => {
                    let k = pick_key(&t.webapp, rng);
                    t.webapp.get_mut(&k).unwrap().1 += 1;
                }
                2 => {
                    // Another host set for a node.
                    let k = pick_key(&t.acme, rng);
                    let rev = t.acme[&k].rev + 1;
                    let (parallel, canary) = (t.acme[&k].parallel, t.acme[&k].canary);
                    let budget = t.acme[&k].budget;
                    t.acme.insert(
                        k,
                        AcmeNode {
                            rev,
                            parallel,
                            canary,
                            budget,
                            ..random_node(plain, rng)
                        },
                    );
                }
                3 => {
                    let k = pick_key(&t.webapp, rng);
                    let w = t.webapp.get_mut(&k).unwrap();
                    w.0 = 3 - w.0;
                }
                4 if t.acme.len() < 8 => {
                    let name = ["f", "g", "h", "i", "j"][rng.below(5)];
                    t.acme
                        .entry(name.into())
                        .or_insert_with(|| random_node(plain, rng));
                }
                5 if t.acme.len() > 3 => {
                    let k = pick_key(&t.acme, rng);
                    t.acme.remove(&k);
                }
                6 => t.foo = *rng.pick(&FOO),
                7 => t.webrc = *rng.pick(&WEBRC),
                8 => {
                    t.extra = if t.extra.is_some() && rng.chance(0.5) {
                        None
                    } else {
                        Some(k_next(t.extra, rng))
                    }
                }
                9 => {
                    // Another max-parallel (and canary) for a node: K changes between versions.
                    let k = pick_key(&t.acme, rng);
                    let (parallel, canary) = random_rollout(rng);
                    let node = t.acme.get_mut(&k).unwrap();
                    node.rev += 1;
                    node.parallel = parallel;
                    node.canary = canary;
                }
                10 => {
                    // Another failure budget for a node: F changes between versions.
                    let k = pick_key(&t.acme, rng);
                    let node = t.acme.get_mut(&k).unwrap();
                    node.rev += 1;
                    node.budget = random_budget(rng);
                }
                _ => {}
            }
        }
        t
    }

    /// The repository's files.
    pub fn files(&self) -> Vec<(String, String)> {
        let mut acme = String::from("/acme\n");
        for (name, node) in &self.acme {
            acme.push_str(&format!(
                "  /{name} : foo\n    version = '{}'\n    rev = {}\n    health-deadline = {HEALTH_DEADLINE}\n",
                self.foo, node.rev
            ));
            match node.parallel {
                MaxParallel::Unset => {}
                MaxParallel::Count(n) => acme.push_str(&format!("    max-parallel = {n}\n")),
                MaxParallel::Percent(p) => acme.push_str(&format!("    max-parallel = '{p}%'\n")),
            }
            if let Some(c) = node.canary {
                acme.push_str(&format!("    canary = {c}\n"));
            }
            match node.budget.max {
                None => {}
                Some(MaxFailures::Count(n)) => acme.push_str(&format!("    max-failures = {n}\n")),
                Some(MaxFailures::Percent(p)) => {
                    acme.push_str(&format!("    max-failures = '{p}%'\n"))
                }
            }
            if node.budget.halt_node {
                acme.push_str("    on-failure = 'halt-node'\n");
            }
            acme.push_str("    /deploy\n");
            for (host, n) in &node.hosts {
                acme.push_str(&format!("      /{host}\n        n = {n}\n"));
            }
        }
        let mut roles = format!(
            "/roles\n  /{ROLE} : webrc\n    version = '{}'\n/webapp\n",
            self.webrc
        );
        for (name, (n, rev)) in &self.webapp {
            roles.push_str(&format!(
                "  /{name} : webapp\n    version = '1.0'\n    rev = {rev}\n    health-deadline = {HEALTH_DEADLINE}\n    /deploy\n      /{ROLE}\n        n = {n}\n"
            ));
        }
        let mut files = vec![
            ("acme.zk".to_string(), acme),
            ("roles.zk".to_string(), roles),
        ];
        if let Some(k) = self.extra {
            files.push(("extra.zk".into(), format!("/extra{k}\n  note = 'k{k}'\n")));
        }
        files
    }

    /// The top-level nodes the files define.
    pub fn roots(&self) -> BTreeSet<String> {
        let mut roots: BTreeSet<String> = ["acme", "roles", "webapp"].map(String::from).into();
        if let Some(k) = self.extra {
            roots.insert(format!("extra{k}"));
        }
        roots
    }

    /// What `host` deploys: (application path, instance), with `role` if it has one.
    pub fn wanted(&self, host: &str, role: bool) -> BTreeSet<(String, u32)> {
        let mut out = BTreeSet::new();
        if role {
            for (name, (n, _)) in &self.webapp {
                for i in 0..*n {
                    out.insert((format!("/webapp/{name}"), i));
                }
            }
        } else {
            for (name, node) in &self.acme {
                if let Some(n) = node.hosts.get(host) {
                    for i in 0..*n {
                        out.insert((format!("/acme/{name}"), i));
                    }
                }
            }
        }
        out
    }
}

fn k_next(extra: Option<u32>, rng: &mut Rng) -> u32 {
    extra.unwrap_or(0) + 1 + rng.below(3) as u32
}

fn pick_key<V>(map: &BTreeMap<String, V>, rng: &mut Rng) -> String {
    let keys: Vec<&String> = map.keys().collect();
    (*rng.pick(&keys)).clone()
}

fn random_node(plain: &[String], rng: &mut Rng) -> AcmeNode {
    let mut hosts = BTreeMap::new();
    let count = 2 + rng.below(plain.len() - 2);
    while hosts.len() < count {
        let h = rng.pick(plain).clone();
        hosts.insert(h, if rng.chance(0.25) { 2 } else { 1 });
    }
    let (parallel, canary) = random_rollout(rng);
    AcmeNode {
        hosts,
        rev: 0,
        parallel,
        canary,
        budget: random_budget(rng),
    }
}

/// A random failure budget: two nodes in five have none (a failure halts the cluster); the
/// others a count or a percentage (some rounding down to 0), `halt-node` or not.
fn random_budget(rng: &mut Rng) -> Budget {
    let max = match rng.weighted(&[2.0, 0.6, 1.0, 0.6, 0.6, 0.6, 0.6]) {
        0 => return Budget::default(),
        1 => None,
        2 => Some(MaxFailures::Count(1)),
        3 => Some(MaxFailures::Count(2)),
        4 => Some(MaxFailures::Percent(20)),
        5 => Some(MaxFailures::Percent(50)),
        _ => Some(MaxFailures::Count(0)),
    };
    Budget {
        max,
        halt_node: max.is_none() || rng.chance(0.5),
    }
}

/// A random `max-parallel` (a third of the nodes keep the node lock) and `canary`.
fn random_rollout(rng: &mut Rng) -> (MaxParallel, Option<u32>) {
    let parallel = match rng.weighted(&[1.5, 0.5, 1.5, 1.0, 1.0, 0.7]) {
        0 => MaxParallel::Unset,
        1 => MaxParallel::Count(1),
        2 => MaxParallel::Count(2),
        3 => MaxParallel::Count(3),
        4 => MaxParallel::Percent(30),
        _ => MaxParallel::Percent(50),
    };
    let canary = match rng.weighted(&[2.0, 0.5, 1.0, 1.0]) {
        0 => None,
        1 => Some(0),
        2 => Some(1),
        _ => Some(2),
    };
    (parallel, canary)
}
