//! The integration tests, one binary (linked once) with a module per concern. They run
//! against a real ZooKeeper, real agent processes, real git repositories, a yum 3 fake and a
//! real dnf sandbox; the shared helpers are in `tests/support/` (see its documentation).
//!
//! Run one concern with a filter: `cargo nextest run --locked --test it 'agent::'`. A new
//! concern is a new file here, declared below (a file directly under `tests/` would be a
//! binary of its own, linking the whole crate again).

#[path = "../support/mod.rs"]
mod support;

mod agent;
mod agent_daemon;
mod agent_dnf;
mod agent_git;
mod agent_observe;
mod agent_startup_signal;
mod agent_startup_wait;
mod budget;
mod budget_agent;
mod cli_options;
mod config;
mod defects;
mod docs;
mod ensemble;
mod faults;
mod fleet;
mod fleet_plan;
mod fleet_plan_rollout;
mod fleet_status;
mod function_length;
mod git_checkout;
mod harness_selftest;
mod health_session;
mod host_node_writes;
mod hostile;
mod imports;
mod index;
mod index_differential;
mod least_privilege;
mod man_pages;
mod mixed_registry;
mod monitor;
mod notify;
mod operations;
mod packaging;
mod pause;
mod plan_report;
mod probe;
mod probe_checks;
mod probe_medium;
mod recipes;
mod role_lock_faults;
mod roles;
mod rollout;
mod rollout_cross;
mod rollout_switch;
mod sync;
mod syncer_checks;
mod tls;
mod tree_parse;
mod tree_roundtrip;
mod vendor;
mod yum;
mod zc_zk_compat;
mod zk_socket;
