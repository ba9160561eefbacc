//! zkdeployment: a host convergence agent for RPM fleets driven by a ZooKeeper tree.
//!
//! The crate is a functional core with a thin imperative shell:
//! - [`tree`]: the zc.zk text format (literals, parse, export, merge). Pure, no I/O.
//! - [`zk`]: the ZooKeeper side (connection, node encoding, links, import/export, walk).
//! - [`cli`]: the command-line front end (the imperative shell).

pub mod agent;
pub mod cli;
pub mod command;
pub mod config;
pub mod fleet;
pub mod gitauth;
pub mod metrics;
pub mod monitor;
pub mod notify;
pub mod overview;
pub mod packages;
pub mod resume;
pub mod sync;
pub mod systemd;
pub mod tree;
pub mod zk;
