//! zkdeployment: a host convergence agent for RPM fleets driven by a ZooKeeper tree.
//!
//! # Layout
//!
//! A functional core with a thin imperative shell. Modules import downward only, with no
//! circles: `cli` → `fleet` → `agent` / `sync` / `monitor` / `overview` / `resume` → `packages` /
//! `notify` / `metrics` / `systemd` / `config` → `zk` → `tree`; `command`, `files` and
//! `gitauth` are leaves any of them may use (`monitor` reads the agent's status file with
//! `agent::status`, and the syncer's tombstone with `sync::local`, the one definitions of
//! their formats).
//!
//! - [`cli`]: the command line (clap definitions, one ZooKeeper argument for every command,
//!   exit codes, dispatch). The imperative shell.
//! - [`agent`]: one host's convergence: discover what the tree wants, observe what the host
//!   has, plan every step between the two (pure), walk the plan under ZooKeeper locks, report.
//! - [`sync`]: the syncer: git → one merged, linted tree → one guarded diff into ZooKeeper.
//! - [`monitor`]: the Nagios check of one host (`zkdeployment monitor`).
//! - [`overview`]: the cluster at a glance (`zkdeployment status`).
//! - [`fleet`]: the fleet plan (`zkdeployment plan`): the agent's discovery and planner
//!   applied to a candidate tree for every registered host.
//! - [`summary`]: `status` at fleet scale: filters, the summary, its metrics (pure).
//! - [`resume`]: ending a halt (`zkdeployment resume`).
//! - [`packages`]: installing software: yum RPMs and git checkouts.
//! - [`notify`]: failure mail.
//! - [`metrics`]: the agent's Prometheus textfile.
//! - [`systemd`]: the systemd notify protocol and watchdog.
//! - [`config`]: the agent's configuration file.
//! - [`zk`]: ZooKeeper: connection (TLS included), where things live (`/hosts`, host nodes,
//!   lock paths, reserved roots), the guarded property update, pipelined reads, links, import/export,
//!   the kazoo lock and semaphore recipes, the persistent role lock, the ACLs of a protected
//!   tree, the halt records under `/hosts-halt`, and the node halts, failure records and
//!   node pauses of failure budgets (`/node-state`, `/node-pauses`).
//! - [`tree`]: the zc.zk text format (literals, parse, export, merge), node size limit and
//!   the rollout properties (`max-parallel`, `canary`, `health-deadline`).
//!   Pure, no I/O.
//! - [`command`]: running external commands (argv, environment, streamed output, tail).
//! - [`files`]: the time now and the one atomic file writer (durable, or not synced for the
//!   files rewritten at every step).
//! - [`gitauth`]: credentials for git over the network.
//! - [`logsink`]: the log's non-blocking way to stderr (a bounded queue, a writer thread).
//!
//! # Visibility
//!
//! Modules, items and fields are `pub(crate)`. `pub` marks only what is used from outside the
//! library: by the binary (`src/main.rs`), the integration tests (`tests/`), the benchmarks
//! (`benches/`) and `examples/docs.rs`. `unreachable_pub` is denied below, so a `pub` item
//! that nothing outside can reach does not build; an item that none of them uses any more
//! goes back to `pub(crate)` (building every target says whether one still does).

#![deny(unreachable_pub)]

pub mod agent;
pub mod cli;
pub mod command;
pub mod config;
pub mod files;
pub mod fleet;
pub(crate) mod gitauth;
pub(crate) mod logsink;
pub(crate) mod metrics;
pub(crate) mod monitor;
pub mod notify;
pub(crate) mod overview;
pub mod packages;
pub(crate) mod pause;
pub(crate) mod resume;
pub(crate) mod summary;
pub mod sync;
pub(crate) mod systemd;
pub mod tree;
pub mod zk;
