//! The agent: works out what the tree wants on this host ([`discover`]), what the host has
//! ([`observe`]), every step between the two ([`plan`], pure), and walks that plan
//! ([`execute`]; each step runs itself, [`steps`], deployments under node locks through
//! [`deploy`]), reporting as it goes ([`status`]). Session state ([`session::Agent`]) is
//! apart from the state of one pass ([`pass::Pass`]).
//!
//! Within the agent, modules import downward only: `daemon` → `execute` → `steps` →
//! `deploy` → `pass` → `session`; `plan`, `model`, `error` and `status` are shared
//! vocabulary below them all.

pub mod cluster;
pub mod daemon;
pub mod deploy;
pub mod discover;
pub mod error;
pub mod execute;
pub mod inventory;
pub mod model;
pub mod observe;
pub mod pass;
pub mod plan;
pub mod role;
pub mod session;
pub mod software;
pub mod status;
pub mod steps;
