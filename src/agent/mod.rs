//! The agent: works out what the tree wants on this host ([`discover`]), what the host has
//! ([`observe`]), every step between the two ([`plan`], pure), and walks that plan
//! ([`execute`]; deployments under node locks are scheduled by [`deploy`], and each step
//! runs itself, [`steps`]; rolling deploys, semaphore leases, canaries and health checks in
//! [`rollout`] and [`health`], the pure rollout rule in [`rollout_rule`], failure budgets, node halts and pauses in
//! [`budget`]), reporting as it goes ([`status`]). Session state ([`session::Agent`]) is
//! apart from the state of one pass ([`pass::Pass`]).
//!
//! Within the agent, modules depend downward only: `daemon` → `execute` → `deploy` →
//! `rollout` → `steps` → `health` / `pass` → `session`, with `discover`, `observe`,
//! `software`, `role`, `mixed`, `budget` and `cluster` below them; `plan`, `rollout_rule`, `model`, `error` and `status` are shared vocabulary at the
//! bottom.

pub mod budget;
pub mod cluster;
pub mod daemon;
pub mod deploy;
pub mod discover;
pub mod error;
pub mod execute;
pub mod health;
pub mod inventory;
pub mod mixed;
pub mod model;
pub mod observe;
pub mod pass;
pub mod plan;
pub mod role;
pub mod rollout;
pub mod rollout_rule;
pub mod session;
pub mod software;
pub mod status;
pub mod steps;
