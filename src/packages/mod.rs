//! packages: installing software — yum RPMs and git checkouts.
//!
//! - [`yum`]: one deployment pass's view of the package manager ([`yum::Yum`]): the
//!   install/verify/downgrade algorithm, removal, and the exact parser of
//!   `yum -q list installed NAME` ([`yum::parse_list_installed`]).

pub mod git;
pub mod yum;
