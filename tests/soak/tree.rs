//! The tree the soak's syncer commits: a random walk over a small fleet's deployments. Hosts
//! `h1`..`h8` get `/acme/<node> : foo` deployments (1 or 2 instances each); hosts of the role
//! `web` get `/webapp/<node> : webapp` deployments through the role controller `webrc`
//! (`/roles/web`). Sometimes a file adds a new top-level node (`/extra<k>`), to exercise the
//! syncer's ownership of top-level nodes.

use std::collections::{BTreeMap, BTreeSet};

use super::rng::Rng;

/// The role of the role hosts.
pub const ROLE: &str = "web";

/// One `/acme` application node.
#[derive(Debug, Clone)]
pub struct AcmeNode {
    /// Deployed to these hosts, with so many instances.
    pub hosts: BTreeMap<String, u32>,
    /// A property bumped to change the node's data.
    pub rev: u32,
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
            foo: "1.0",
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
            match rng.weighted(&[5.0, 2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.7]) {
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
                    t.acme.insert(
                        k,
                        AcmeNode {
                            rev,
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
                "  /{name} : foo\n    version = '{}'\n    rev = {}\n    /deploy\n",
                self.foo, node.rev
            ));
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
                "  /{name} : webapp\n    version = '1.0'\n    rev = {rev}\n    /deploy\n      /{ROLE}\n        n = {n}\n"
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
    AcmeNode { hosts, rev: 0 }
}
