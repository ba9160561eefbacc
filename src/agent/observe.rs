//! What the host has: the agent's view of its disk under `root` (docs/design.md, "A pass", the
//! observing half of Prepare; installed versions come from
//! `software::installed_version`).
//!
//! This module owns the host disk layout (docs/tree-format.md) and every file operation on it
//! that is not a package install:
//! - reading: [`observe_disk`] (installed packages, deployment markers, our `/etc/<app>`
//!   directories);
//! - the paths: [`opt_dir`], [`deploy_script`], [`etc_dir`], [`under_root`];
//! - the marker files the agent manages: [`write_script_marker`], [`remove_markers`], and the
//!   removal of unused application directories, [`remove_etc_dir`].
//!
//! Rules kept throughout:
//! - Names come from [`model`](super::model): [`app_name`] (one rule for both sides),
//!   [`deployed_name`](super::model::deployed_name) / [`script_name`] / [`parse_marker`] (escaped commas and percents).
//!   Entries whose names are not UTF-8 plain names are never ours.
//! - A marker "file" that is a directory is ignored (never read, never removed).
//! - Deleting never follows a symlink: a marker that is a symlink is removed itself, never its
//!   target, and an `/etc/<app>` that is a symlink is left alone by [`remove_etc_dir`].
//! - I/O errors carry the path they concern (`PATH: error`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::model::{
    app_name, check_plain_name, parse_marker, script_name, Installed, InstalledDeployment,
};

const DEPLOYED: &str = ".deployed";
const SCRIPT: &str = ".script";
/// Suffix of the temporary file [`write_script_marker`] renames into place.
const TMP: &str = ".tmp";

// ---------------------------------------------------------------------------------------------
// Paths.

/// `ROOT/opt/<rpm>`: where a package (RPM or checkout) lives.
pub fn opt_dir(root: &Path, rpm: &str) -> PathBuf {
    root.join("opt").join(rpm)
}

/// `ROOT/opt/<rpm>/bin/zookeeper-deploy`: the deploy script, and the content of the `.script`
/// markers of the deployments it made.
pub fn deploy_script(root: &Path, rpm: &str) -> PathBuf {
    opt_dir(root, rpm).join("bin").join("zookeeper-deploy")
}

/// `ROOT/etc/<app>`: the application's marker directory.
pub fn etc_dir(root: &Path, app: &str) -> PathBuf {
    root.join("etc").join(app)
}

/// `ROOT` joined with the absolute path `abs` (`/opt/x` under `/tmp/r` → `/tmp/r/opt/x`; with
/// the root `/`, `abs` itself).
pub fn under_root(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

// ---------------------------------------------------------------------------------------------
// Errors and small file helpers.

/// `e` with `path` prefixed to its message, same kind.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The entries of directory `dir` as (UTF-8 name, path, file type without following
/// symlinks); `None` when `dir` does not exist or is not a directory. Names that are not UTF-8
/// are skipped (none of ours is). Other errors carry the path.
fn list_dir(dir: &Path) -> io::Result<Option<Vec<(String, PathBuf, fs::FileType)>>> {
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(at(dir)(e)),
    }
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(at(dir))? {
        let entry = entry.map_err(at(dir))?;
        let path = entry.path();
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let file_type = entry.file_type().map_err(at(&path))?;
        out.push((name, path, file_type));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(out))
}

/// Is this directory entry a directory, following a symlink (a dangling symlink is not)?
fn is_dir_entry(path: &Path, file_type: &fs::FileType) -> io::Result<bool> {
    if file_type.is_dir() {
        return Ok(true);
    }
    if !file_type.is_symlink() {
        return Ok(false);
    }
    match fs::metadata(path) {
        Ok(meta) => Ok(meta.is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(at(path)(e)),
    }
}

/// Does `path` exist as something other than a directory (a file, or a symlink to one, or a
/// dangling symlink)?
fn is_file_entry(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(!is_dir_entry(path, &meta.file_type())?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(at(path)(e)),
    }
}

/// Is `path` a regular file, or a symlink to one?
fn is_regular_file(path: &Path) -> io::Result<bool> {
    match fs::metadata(path) {
        Ok(meta) => Ok(meta.is_file()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(at(path)(e)),
    }
}

/// Removes `path` itself (a symlink is removed, not its target); absent is fine.
fn remove_file_entry(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(at(path)(e)),
    }
}

/// `InvalidInput` unless `name` is a plain name (guards every path built from a name before
/// anything is written or removed).
fn plain(what: &str, name: &str) -> io::Result<()> {
    check_plain_name(what, name).map_err(|msg| io::Error::new(io::ErrorKind::InvalidInput, msg))
}

/// If `name` is one of our marker file names (`.deployed` or `.script`, accepted by
/// [`parse_marker`]), its stem (without the suffix) and the instance it names.
fn marker_of(name: &str) -> Option<(&str, (String, u32))> {
    [DEPLOYED, SCRIPT].into_iter().find_map(|suffix| {
        let parsed = parse_marker(name, suffix)?;
        Some((name.strip_suffix(suffix)?, parsed))
    })
}

/// Is `name` a leftover temporary file of [`write_script_marker`] (`<marker>.script.tmp`)?
fn is_script_tmp(name: &str) -> bool {
    name.strip_suffix(TMP)
        .is_some_and(|script| parse_marker(script, SCRIPT).is_some())
}

// ---------------------------------------------------------------------------------------------
// Observation.

/// Reads what the host has under `root` (the configured prefix of `/opt` and `/etc`):
///
/// - `packages`: the entries `R` of `ROOT/opt` that are directories (or symlinks to
///   directories) holding `bin/zookeeper-deploy` (a regular file or a symlink to one),
///   sorted. Entries whose name, or whose application name, is not a plain name are ignored.
/// - `deployments`: for each package `R` and its application `app` ([`app_name`]), each file
///   `ROOT/etc/<app>/<marker>.deployed` accepted by [`parse_marker`] whose sibling
///   `<marker>.script`
///   - holds `ROOT/opt/R/bin/zookeeper-deploy` (one trailing newline tolerated): belongs to
///     `R`; holds anything else: belongs to another package (or to none installed), skipped;
///   - is absent (or empty, or a directory): belongs to exactly one package of the application, the one named like the
///     application if installed (`z4m` rather than `z4m-4.0.0`), else the first in order
///     (never to several).
///
///   Sorted, no duplicates.
/// - `app_dirs`: the directories `D` of `ROOT/etc` that are ours: the application directory of
///   an installed package (when it exists), or a real directory holding at least one file
///   `*.deployed` / `*.script` accepted by [`parse_marker`] (so orphans whose `/opt` directory
///   is gone are found). Other `/etc` directories never are. Sorted.
/// - `versions`: left empty (filled by the pass from `software::installed_version`).
///
/// Missing `ROOT/opt` or `ROOT/etc` mean nothing installed. Errors (an unreadable directory of
/// ours, ...) carry the path. An unreadable `/etc` directory that is not an installed
/// application's is skipped: it cannot hold markers the agent (root) wrote.
pub fn observe_disk(root: &Path) -> io::Result<Installed> {
    let packages = observe_packages(root)?;
    // Packages by application, each list sorted (packages is sorted).
    let mut by_app: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rpm in &packages {
        by_app
            .entry(app_name(rpm).to_string())
            .or_default()
            .push(rpm.clone());
    }
    let mut deployments = BTreeSet::new();
    for (app, rpms) in &by_app {
        observe_app(root, app, rpms, &mut deployments)?;
    }
    let app_dirs = observe_app_dirs(root, &by_app)?;
    Ok(Installed {
        deployments: deployments.into_iter().collect(),
        packages,
        app_dirs,
        versions: BTreeMap::new(),
        controller: None,
    })
}

/// The installed applications: `ROOT/opt/R/bin/zookeeper-deploy` exists, sorted.
fn observe_packages(root: &Path) -> io::Result<Vec<String>> {
    let opt = root.join("opt");
    let mut packages = Vec::new();
    for (name, path, file_type) in list_dir(&opt)?.unwrap_or_default() {
        if check_plain_name("package", &name).is_err()
            || check_plain_name("application", app_name(&name)).is_err()
        {
            continue;
        }
        if !is_dir_entry(&path, &file_type)? {
            continue;
        }
        if is_regular_file(&deploy_script(root, &name))? {
            packages.push(name);
        }
    }
    Ok(packages)
}

/// The deployments recorded in `ROOT/etc/<app>`, attributed among `rpms` (sorted, non-empty).
fn observe_app(
    root: &Path,
    app: &str,
    rpms: &[String],
    out: &mut BTreeSet<InstalledDeployment>,
) -> io::Result<()> {
    let dir = etc_dir(root, app);
    let Some(entries) = list_dir(&dir)? else {
        return Ok(());
    };
    let default_rpm = rpms
        .iter()
        .find(|rpm| rpm.as_str() == app)
        .unwrap_or(&rpms[0]);
    let scripts: Vec<(PathBuf, &String)> = rpms
        .iter()
        .map(|rpm| (deploy_script(root, rpm), rpm))
        .collect();
    for (name, path, file_type) in entries {
        let Some((path_in_tree, n)) = parse_marker(&name, DEPLOYED) else {
            continue;
        };
        if is_dir_entry(&path, &file_type)? {
            continue;
        }
        let stem = &name[..name.len() - DEPLOYED.len()];
        let script_file = dir.join(format!("{stem}{SCRIPT}"));
        let owner = if is_file_entry(&script_file)? {
            let content = match fs::read(&script_file) {
                Ok(content) => content,
                // A dangling symlink, or removed meanwhile: no script.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(at(&script_file)(e)),
            };
            if content.is_empty() {
                Some(default_rpm)
            } else {
                let content = content.strip_suffix(b"\n").unwrap_or(&content);
                scripts
                    .iter()
                    .find(|(script, _)| script.as_os_str().as_bytes() == content)
                    .map(|(_, rpm)| *rpm)
            }
        } else {
            Some(default_rpm)
        };
        if let Some(rpm) = owner {
            out.insert(InstalledDeployment {
                app: app.to_string(),
                rpm: rpm.clone(),
                path: path_in_tree,
                n,
            });
        }
    }
    Ok(())
}

/// The directories of `ROOT/etc` that are ours (see [`observe_disk`]).
fn observe_app_dirs(
    root: &Path,
    by_app: &BTreeMap<String, Vec<String>>,
) -> io::Result<Vec<String>> {
    let etc = root.join("etc");
    let mut dirs = Vec::new();
    for (name, path, file_type) in list_dir(&etc)?.unwrap_or_default() {
        if check_plain_name("application", &name).is_err() {
            continue;
        }
        if by_app.contains_key(&name) {
            if is_dir_entry(&path, &file_type)? {
                dirs.push(name);
            }
        } else if file_type.is_dir() && holds_markers(&path)? {
            dirs.push(name);
        }
    }
    Ok(dirs)
}

/// Does the directory `dir` hold at least one marker file (not a directory)? An unreadable
/// directory holds none (see [`observe_disk`]).
fn holds_markers(dir: &Path) -> io::Result<bool> {
    let entries = match list_dir(dir) {
        Ok(entries) => entries.unwrap_or_default(),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            tracing::debug!("not looking for markers in {e}");
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    for (name, path, file_type) in entries {
        if marker_of(&name).is_some() && !is_dir_entry(&path, &file_type)? {
            return Ok(true);
        }
    }
    Ok(false)
}

// ---------------------------------------------------------------------------------------------
// Marker files.

/// Removes the `.deployed` and `.script` markers of instance `n` of `path` from
/// `ROOT/etc/<app>`, if present: the canonical names ([`deployed_name`](super::model::deployed_name),
/// [`script_name`]) and any other spelling [`parse_marker`] reads as the same instance (`%2c`,
/// `+0`), so that [`observe_disk`] no longer reports it. A symlink is removed, not its target;
/// a marker that is a real directory is left alone. A missing directory is fine.
pub fn remove_markers(root: &Path, app: &str, path: &str, n: u32) -> io::Result<()> {
    plain("application", app)?;
    let dir = etc_dir(root, app);
    let Some(entries) = list_dir(&dir)? else {
        return Ok(());
    };
    let wanted = (path.to_string(), n);
    for (name, entry_path, file_type) in entries {
        let ours = marker_of(&name).is_some_and(|(_, instance)| instance == wanted);
        if ours && !file_type.is_dir() {
            remove_file_entry(&entry_path)?;
        }
    }
    Ok(())
}

/// Writes `ROOT/etc/<app>/<marker>.script` for instance `n` of `path` deployed by `rpm`: the
/// absolute deploy script path (`ROOT/opt/<rpm>/bin/zookeeper-deploy`), no trailing newline.
/// Atomic: written to `<marker>.script.tmp` (created afresh, never through a symlink), synced,
/// then renamed over the marker. Creates `ROOT/etc/<app>` if missing. Nothing is written when
/// the marker is already a regular file with that content (a re-run at a new version).
pub fn write_script_marker(
    root: &Path,
    app: &str,
    rpm: &str,
    path: &str,
    n: u32,
) -> io::Result<()> {
    let marker = ScriptMarker::prepare(root, app, rpm, path, n)?;
    marker.sync()?;
    marker.commit()
}

/// A `.script` marker written to its temporary file and not yet in place: the deploy script
/// runs while the file is synced ([`ScriptMarker::sync`]), and the marker takes its place
/// once the script went well ([`ScriptMarker::commit`]), or is removed
/// ([`ScriptMarker::discard`]). Durable as [`write_script_marker`]'s. When the marker is in
/// place already with the same content, there is nothing to write, sync or rename: creating
/// and renaming a file cost a tenth of a millisecond or more each on ext4, between one deploy
/// script and the next.
#[derive(Debug)]
pub(crate) struct ScriptMarker {
    /// `None` when the marker is in place already.
    pending: Option<PendingMarker>,
}

/// A marker's temporary file, written, and where it goes.
#[derive(Debug)]
struct PendingMarker {
    file: fs::File,
    tmp: PathBuf,
    target: PathBuf,
}

impl ScriptMarker {
    /// Writes the marker's content to `<marker>.script.tmp` (see [`write_script_marker`]),
    /// unless the marker already holds it.
    pub(crate) fn prepare(
        root: &Path,
        app: &str,
        rpm: &str,
        path: &str,
        n: u32,
    ) -> io::Result<Self> {
        plain("application", app)?;
        plain("package", rpm)?;
        let dir = etc_dir(root, app);
        fs::create_dir_all(&dir).map_err(at(&dir))?;
        let name = script_name(path, n);
        let target = dir.join(&name);
        let tmp = dir.join(format!("{name}{TMP}"));
        remove_file_entry(&tmp)?;
        let content = deploy_script(root, rpm);
        let content = content.as_os_str().as_bytes();
        if crate::files::holds(&target, content) {
            return Ok(ScriptMarker { pending: None });
        }
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut file| {
                file.write_all(content)?;
                Ok(file)
            });
        match written {
            Ok(file) => Ok(ScriptMarker {
                pending: Some(PendingMarker { file, tmp, target }),
            }),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(at(&tmp)(e))
            }
        }
    }

    /// Syncs the temporary file to disk.
    pub(crate) fn sync(&self) -> io::Result<()> {
        match &self.pending {
            Some(p) => p.file.sync_all().map_err(at(&p.tmp)),
            None => Ok(()),
        }
    }

    /// Renames the (synced) temporary file over the marker.
    pub(crate) fn commit(self) -> io::Result<()> {
        let Some(p) = self.pending else {
            return Ok(());
        };
        fs::rename(&p.tmp, &p.target).map_err(|e| {
            let _ = fs::remove_file(&p.tmp);
            at(&p.target)(e)
        })
    }

    /// Removes the temporary file (best effort: a leftover is cleaned like any other).
    pub(crate) fn discard(self) {
        if let Some(p) = self.pending {
            let _ = fs::remove_file(&p.tmp);
        }
    }
}

/// Removes `ROOT/etc/<app>` of an application no longer wanted: first our stale files in it
/// (markers accepted by [`parse_marker`], and leftover `.script.tmp` files; symlinks removed
/// themselves, never their targets), then the directory. Returns `Ok(true)` when it is gone
/// (or was already absent), `Ok(false)` — with a warning — when something else remains in it
/// (the directory and those files are kept), or when `ROOT/etc/<app>` is a symlink or not a
/// directory (left alone).
pub fn remove_etc_dir(root: &Path, app: &str) -> io::Result<bool> {
    plain("application", app)?;
    let dir = etc_dir(root, app);
    let meta = match fs::symlink_metadata(&dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(at(&dir)(e)),
    };
    if !meta.is_dir() {
        let what = if meta.file_type().is_symlink() {
            "a symlink"
        } else {
            "not a directory"
        };
        tracing::warn!("not removing {}: {what}", dir.display());
        return Ok(false);
    }
    let mut others = Vec::new();
    for (name, path, file_type) in list_dir(&dir)?.unwrap_or_default() {
        let ours = (marker_of(&name).is_some() || is_script_tmp(&name)) && !file_type.is_dir();
        if ours {
            remove_file_entry(&path)?;
        } else {
            others.push(name);
        }
    }
    // Names that are not UTF-8 are not listed by list_dir: rmdir tells.
    match fs::remove_dir(&dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
            tracing::warn!(
                "not removing {}: it holds other files ({})",
                dir.display(),
                if others.is_empty() {
                    "with names that are not UTF-8".to_string()
                } else {
                    others.join(", ")
                }
            );
            Ok(false)
        }
        Err(e) => Err(at(&dir)(e)),
    }
}
