//! packages::git: software installed as a git checkout in `/opt/<rpm>` (docs/tree-format.md, git
//! checkouts). This module owns the git version
//! grammar, the checkout markers in `DIR/.git/`, bringing a checkout to a version (clone or
//! fetch, then a forced detached checkout of REF), the `stage-build` step and the `a+rX` step
//! after it, and removing a checkout. Deciding *whether* a package is a checkout, an RPM or
//! both (and removing an RPM first) is the caller's business.
//!
//! # Version grammar
//!
//! A package version is a git checkout when it starts with `git:`:
//! - `git://LOCATION#REF` → clone LOCATION (the original's form: exactly the 6 characters
//!   `git://` are removed, so `git:///srv/repo#v1` clones `/srv/repo` and
//!   `git://git@host:org/repo.git#v1` clones `git@host:org/repo.git`);
//! - `git:LOCATION#REF` → clone LOCATION (`git:/srv/repo#main`, `git:file:///srv/repo#main`,
//!   `git:https://host/x.git#v2`);
//! - `git+ssh://LOCATION#REF` → clone `ssh://LOCATION`.
//!
//! REF is the text after the LAST `#`, required and non-empty (a branch, a tag, or a full or
//! abbreviated commit id); LOCATION non-empty. Anything else starting with `git` followed by `:`
//! or `+` is an error naming the version. A version not starting with `git:`/`git+ssh:` is not a
//! git version.
//!
//! This build of libgit2 has no network transports: local paths and `file://` URLs work, other
//! locations fail with a [`GitError::Git`] at clone or fetch time.
//!
//! # Markers (in `DIR/.git/`, so no checkout ever touches them)
//! - `.zkdeployment`: the full version string last checked out (no newline), as the original.
//! - `.zkdeployment-built`: the commit id whose `stage-build` last succeeded. A checkout is only
//!   rebuilt when its HEAD commit differs from it, and a failed build records
//!   nothing, so the next pass builds again.
//!
//! # Update
//! [`update`] clones when DIR is missing, is not a checkout, or is a checkout of another
//! LOCATION (removing DIR first); otherwise it fetches (`+refs/heads/*:refs/remotes/origin/*`
//! and `+refs/tags/*:refs/tags/*`, pruning). REF resolves as `refs/remotes/origin/REF`, else
//! `refs/tags/REF`, else a full or abbreviated commit id. When HEAD is not already that commit
//! the tree is force-checked-out to it and HEAD detached there (`reset --hard` semantics,
//! untracked files removed, ignored files kept); when HEAD already is that commit the work tree
//! is left alone, so build products survive an unchanged REF. Git work runs in
//! [`tokio::task::spawn_blocking`]; `stage-build` runs through [`crate::command`] with its
//! working directory set per command (the process never changes directory).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{AutotagOption, Commit, FetchPrune, Oid, Repository};

use crate::command::{run_checked, Cmd, CommandError};

/// The marker holding the version string of a checkout (in `DIR/.git/`).
pub(crate) const VERSION_MARKER: &str = ".zkdeployment";
/// The marker holding the commit id whose `stage-build` last succeeded (in `DIR/.git/`).
pub(crate) const BUILT_MARKER: &str = ".zkdeployment-built";
/// The build script at the top of a checkout.
pub(crate) const STAGE_BUILD: &str = "stage-build";

/// A parsed git version: where to clone from and what to check out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitVersion {
    /// What is cloned (a path, a `file://` URL, or a URL libgit2 may not support here).
    pub location: String,
    /// A branch, a tag, or a full or abbreviated commit id.
    pub reference: String,
}

/// What [`update`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    /// True if the build step ran (`stage-build` if present, then `a+rX`): the HEAD commit
    /// differed from the last one built.
    pub rebuilt: bool,
    /// The full id of the commit checked out.
    pub commit: String,
}

/// Why a git checkout could not be brought to a version.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The version is not a well-formed git version.
    #[error("{0}")]
    Version(String),
    /// libgit2 failed.
    #[error("git {what} {location}: {message}")]
    Git {
        /// What was being done (`clone`, `fetch`, `resolve`, `checkout`, …).
        what: &'static str,
        /// The LOCATION of the version.
        location: String,
        /// libgit2's message.
        message: String,
    },
    /// `stage-build` could not be run or failed (`Command failed: <argv>`).
    #[error(transparent)]
    Build(#[from] CommandError),
    /// A file-system step failed (removing, writing markers, `a+rX`).
    #[error("{0}")]
    Io(String),
}

/// `None`: not a git version. `Some(Err(msg))`: a malformed git version.
pub fn parse_version(version: &str) -> Option<Result<GitVersion, String>> {
    let (scheme, rest) = if let Some(rest) = version.strip_prefix("git://") {
        ("", rest)
    } else if let Some(rest) = version.strip_prefix("git+ssh://") {
        ("ssh://", rest)
    } else if let Some(rest) = version.strip_prefix("git:") {
        ("", rest)
    } else if version.starts_with("git+") {
        return Some(Err(format!(
            "Invalid git version {version:?}: the only git+ form is git+ssh://LOCATION#REF"
        )));
    } else {
        return None;
    };
    let Some((location, reference)) = rest.rsplit_once('#') else {
        return Some(Err(format!(
            "Invalid git version {version:?}: expected git:LOCATION#REF (no #REF)"
        )));
    };
    if location.is_empty() {
        return Some(Err(format!(
            "Invalid git version {version:?}: empty LOCATION"
        )));
    }
    if reference.is_empty() {
        return Some(Err(format!("Invalid git version {version:?}: empty REF")));
    }
    Some(Ok(GitVersion {
        location: format!("{scheme}{location}"),
        reference: reference.to_string(),
    }))
}

/// True if DIR/.git exists.
pub fn is_checkout(dir: &Path) -> bool {
    dir.join(".git").exists()
}

/// The version string recorded in DIR/.git/.zkdeployment (trimmed), if DIR is a checkout.
pub fn recorded_version(dir: &Path) -> Option<String> {
    if !is_checkout(dir) {
        return None;
    }
    read_marker(dir, VERSION_MARKER)
}

/// True if DIR is a checkout of exactly `version` whose current HEAD commit was built
/// (stage-build succeeded for it): nothing to do. (It does not fetch: a branch that moved at
/// LOCATION is only noticed by [`update`].)
pub fn is_current(dir: &Path, version: &str) -> bool {
    if recorded_version(dir).as_deref() != Some(version) {
        return false;
    }
    let Some(built) = read_marker(dir, BUILT_MARKER) else {
        return false;
    };
    head_commit(dir).is_some_and(|head| head == built)
}

/// Brings DIR to `version` (see the module documentation): clone or fetch, check REF out
/// detached, record the version, and — if the HEAD commit differs from the last one built — run
/// `DIR/stage-build` (if it exists and is executable) with DIR as its working directory, make
/// the tree world-readable (`chmod -R a+rX`), and record the commit as built. `rpm` names the
/// package in the log.
pub async fn update(dir: &Path, rpm: &str, version: &str) -> Result<Updated, GitError> {
    let parsed = match parse_version(version) {
        None => return Err(GitError::Version(format!("Not a git version: {version:?}"))),
        Some(Err(message)) => return Err(GitError::Version(message)),
        Some(Ok(parsed)) => parsed,
    };
    let (dir2, version2) = (dir.to_path_buf(), version.to_string());
    let (commit, needs_build) =
        blocking(move || checkout_blocking(&dir2, &version2, &parsed)).await?;
    if !needs_build {
        return Ok(Updated {
            rebuilt: false,
            commit,
        });
    }
    let script = dir.join(STAGE_BUILD);
    match fs::metadata(&script) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
            tracing::info!("Build {rpm} ({version})");
            run_checked(&Cmd::new([script.display().to_string()]).cwd(dir)).await?;
        }
        Ok(_) => tracing::warn!("{} is not an executable file: not run", script.display()),
        Err(_) => tracing::debug!("{rpm}: no {STAGE_BUILD}"),
    }
    let (dir2, commit2) = (dir.to_path_buf(), commit.clone());
    blocking(move || {
        make_world_readable(&dir2)?;
        write_marker(&dir2, BUILT_MARKER, &commit2)
    })
    .await?;
    Ok(Updated {
        rebuilt: true,
        commit,
    })
}

/// Removes a checkout (logs INFO `Removing checkout <rpm>`). A missing DIR is not an error.
pub fn remove(dir: &Path, rpm: &str) -> io::Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    tracing::info!("Removing checkout {rpm}");
    remove_path(dir)
}

async fn blocking<T, F>(f: F) -> Result<T, GitError>
where
    F: FnOnce() -> Result<T, GitError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(GitError::Io(format!("git task failed: {e}"))))
}

/// Clone or fetch, check out, record the version. Returns the commit and whether it needs a
/// build.
fn checkout_blocking(
    dir: &Path,
    version: &str,
    wanted: &GitVersion,
) -> Result<(String, bool), GitError> {
    crate::gitauth::init();
    let location = wanted.location.as_str();
    let git = |what: &'static str| {
        move |e: git2::Error| GitError::Git {
            what,
            location: location.to_string(),
            message: e.message().to_string(),
        }
    };
    let same_location = is_checkout(dir)
        && recorded_version(dir)
            .and_then(|old| parse_version(&old))
            .and_then(Result::ok)
            .is_some_and(|old| old.location == wanted.location);
    let repo = if same_location {
        let repo = Repository::open(dir).map_err(git("open"))?;
        repo.remote_set_url("origin", location)
            .map_err(git("set-url"))?;
        repo
    } else {
        if fs::symlink_metadata(dir).is_ok() {
            if is_checkout(dir) {
                let old = recorded_version(dir).unwrap_or_else(|| "None".to_string());
                tracing::info!("Removing conflicting checkout {old} != {version}");
            } else {
                tracing::info!("Removing {} (not a git checkout)", dir.display());
            }
            remove_path(dir).map_err(|e| io_error("remove", dir, e))?;
        }
        git2::build::RepoBuilder::new()
            .fetch_options(crate::gitauth::fetch_options())
            .clone(location, dir)
            .map_err(git("clone"))?
    };
    fetch_origin(&repo).map_err(git("fetch"))?;
    let commit = resolve(&repo, &wanted.reference).map_err(|e| GitError::Git {
        what: "resolve",
        location: location.to_string(),
        message: format!(
            "no branch, tag or commit {}: {}",
            wanted.reference,
            e.message()
        ),
    })?;
    let target = commit.id();
    let head = repo
        .head()
        .ok()
        .and_then(|h| h.peel_to_commit().ok())
        .map(|c| c.id());
    if head != Some(target) {
        let mut checkout = CheckoutBuilder::new();
        checkout.force().remove_untracked(true);
        repo.checkout_tree(commit.as_object(), Some(&mut checkout))
            .map_err(git("checkout"))?;
        repo.set_head_detached(target).map_err(git("checkout"))?;
    } else if !repo.head_detached().unwrap_or(false) {
        repo.set_head_detached(target).map_err(git("checkout"))?;
    }
    write_marker(dir, VERSION_MARKER, version)?;
    let commit = target.to_string();
    let built = read_marker(dir, BUILT_MARKER);
    let needs_build = built.as_deref() != Some(commit.as_str());
    Ok((commit, needs_build))
}

/// Fetches every branch and tag of `origin`, pruning what is gone there.
fn fetch_origin(repo: &Repository) -> Result<(), git2::Error> {
    let mut remote = repo.find_remote("origin")?;
    let mut options = crate::gitauth::fetch_options();
    // `All`, not the default auto-follow: auto-followed tags never overwrite local ones,
    // and a tag moved at LOCATION must move here too.
    options
        .prune(FetchPrune::On)
        .download_tags(AutotagOption::All);
    remote.fetch(
        &[
            "+refs/heads/*:refs/remotes/origin/*",
            "+refs/tags/*:refs/tags/*",
        ],
        Some(&mut options),
        None,
    )
}

/// REF as `refs/remotes/origin/REF`, else `refs/tags/REF`, else a full or abbreviated commit
/// id (never a stale local branch).
fn resolve<'r>(repo: &'r Repository, reference: &str) -> Result<Commit<'r>, git2::Error> {
    for name in [
        format!("refs/remotes/origin/{reference}"),
        format!("refs/tags/{reference}"),
    ] {
        if let Ok(r) = repo.find_reference(&name) {
            return r.peel_to_commit();
        }
    }
    if reference.len() == 40 {
        if let Ok(oid) = Oid::from_str(reference) {
            return repo.find_commit(oid);
        }
    }
    if reference.len() >= 4 && reference.chars().all(|c| c.is_ascii_hexdigit()) {
        return repo.find_commit_by_prefix(reference);
    }
    Err(git2::Error::from_str("not found"))
}

fn head_commit(dir: &Path) -> Option<String> {
    crate::gitauth::init();
    let repo = Repository::open(dir).ok()?;
    let commit = repo.head().ok()?.peel_to_commit().ok()?;
    Some(commit.id().to_string())
}

fn marker_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(".git").join(name)
}

fn read_marker(dir: &Path, name: &str) -> Option<String> {
    let text = fs::read_to_string(marker_path(dir, name)).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn write_marker(dir: &Path, name: &str, value: &str) -> Result<(), GitError> {
    let path = marker_path(dir, name);
    crate::files::write_atomic(&path, value.as_bytes()).map_err(|e| io_error("write", &path, e))
}

fn io_error(what: &str, path: &Path, e: io::Error) -> GitError {
    GitError::Io(format!("{what} {}: {e}", path.display()))
}

fn remove_path(path: &Path) -> io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

/// `chmod -R a+rX DIR`: read for all on everything; execute for all on directories and on files
/// with any execute bit. Symbolic links are neither changed nor followed.
fn make_world_readable(dir: &Path) -> Result<(), GitError> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = fs::symlink_metadata(&path).map_err(|e| io_error("stat", &path, e))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        let mut wanted = mode | 0o444;
        if meta.is_dir() || mode & 0o111 != 0 {
            wanted |= 0o111;
        }
        if wanted != mode {
            fs::set_permissions(&path, fs::Permissions::from_mode(wanted))
                .map_err(|e| io_error("chmod", &path, e))?;
        }
        if meta.is_dir() {
            let entries = fs::read_dir(&path).map_err(|e| io_error("read", &path, e))?;
            for entry in entries {
                pending.push(entry.map_err(|e| io_error("read", &path, e))?.path());
            }
        }
    }
    Ok(())
}
