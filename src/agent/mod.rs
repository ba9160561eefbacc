//! The agent: works out what the tree wants on this host ([`discover`]), what the host has
//! ([`observe`]), every step between the two ([`plan`], pure), and walks that plan
//! ([`execute`]; deployments under node places are scheduled by [`deploy`], which waits in
//! the queues of every busy node at once ([`queues`]) and enters them through [`exclusion`]
//! (node locks, semaphore leases, canaries with the waiting room of [`canary`], the rule
//! between the two kinds) with the in-flight records of [`in_flight`]; each step runs
//! itself, [`steps`], health checks in [`health`]; the fleet facts of a rollout in
//! [`rollout`], the pure rollout rule in [`rollout_rule`], failure budgets, node halts and
//! pauses in [`budget`]), reporting as it goes ([`status`]). Session state
//! ([`session::Agent`]) is apart from the state of one pass ([`pass::Pass`]).
//!
//! Within the agent, modules depend downward only: `daemon` → `execute` → `deploy` →
//! `queues` → `exclusion` → `canary` / `in_flight` → `steps` → `health` / `pass` →
//! `session`, with `rollout`, `budget`, `discover`, `observe`, `software`, `role`, `mixed`
//! and `cluster` below them; `plan`, `rollout_rule`, `model`, `error` and `status` are
//! shared vocabulary at the bottom.

pub mod budget;
pub(crate) mod canary;
pub(crate) mod cluster;
pub mod daemon;
pub(crate) mod deploy;
pub mod discover;
pub(crate) mod error;
pub(crate) mod exclusion;
pub(crate) mod execute;
pub(crate) mod health;
pub(crate) mod in_flight;
pub mod inventory;
pub(crate) mod mixed;
pub mod model;
pub mod observe;
pub(crate) mod pass;
pub mod plan;
pub(crate) mod queues;
pub(crate) mod role;
pub(crate) mod rollout;
pub(crate) mod rollout_rule;
pub mod session;
pub(crate) mod software;
pub mod status;
pub(crate) mod steps;
