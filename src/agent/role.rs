//! Role controllers on this host: the package a role's hosts run around their deployments
//! (`/roles/<role>` gives its type = package and `version`). An installed controller is a
//! package with `bin/starting-deployments`. With a controller, a pass runs
//! `starting-deployments /roles/<role>` before installing and `ending-deployments
//! /roles/<role>` after deploying, all inside the role's persistent lock (the recipe is in
//! [`crate::zk::role_lock`]). Node locks are not used, and a halt does not abandon a pass
//! that has started.

use std::io;
use std::path::Path;

use super::error::{Interrupt, StepError};
use crate::zk::role_lock::RoleLockError;

/// The packages under `ROOT/opt` that are role controllers (have `bin/starting-deployments`).
pub(crate) fn installed_controllers(root: &Path) -> io::Result<Vec<String>> {
    let opt = root.join("opt");
    let entries = match std::fs::read_dir(&opt) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", opt.display()))),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if super::model::check_plain_name("package", &name).is_ok()
            && entry.path().join("bin/starting-deployments").is_file()
        {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

impl From<RoleLockError> for Interrupt {
    fn from(e: RoleLockError) -> Interrupt {
        match e {
            RoleLockError::Zk(e) => Interrupt::Lost(e),
            RoleLockError::Missing(path) => StepError::RoleLockMissing(path).into(),
            RoleLockError::Stopping => Interrupt::Abandon("the agent is stopping".into()),
        }
    }
}
