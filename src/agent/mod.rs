//! The agent: works out what the tree wants on this host ([`discover`]), what the host has
//! ([`observe`]), the steps between the two ([`plan`], pure), and runs them under ZooKeeper
//! locks ([`execute`]), reporting as it goes ([`status`]).

pub mod cluster;
pub mod daemon;
pub mod deploy;
pub mod discover;
pub mod execute;
pub mod inventory;
pub mod model;
pub mod observe;
pub mod plan;
pub mod role;
pub mod software;
pub mod status;
pub mod steps;
