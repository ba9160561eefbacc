//! The syncer's git side, through libgit2: clone `URL` into `DIR` if missing, else fetch; the
//! tree is the commit at `origin/BRANCH`, checked out hard (detached). Network and repository
//! errors are retried with back-off before they are reported, all attempts within one bound
//! (`sync --git-timeout`, default [`DEFAULT_BOUND`]): each attempt may wait on the network for
//! its share of the time left, so a server that accepts connections and never answers fails
//! the sync within the bound, with a message naming the server.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use git2::build::CheckoutBuilder;
use git2::{Repository, ResetType};

use super::desired::{is_tree_file, SourceFile};

/// Attempts before a git error is reported, and the first back-off (doubled each time).
const ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The default bound on fetching, every attempt included.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(90);

/// A checked-out revision and its tree files.
#[derive(Debug, Clone)]
pub(crate) struct Checkout {
    /// The full commit id.
    pub(crate) revision: String,
    /// The top-level `.zk` / `.zkx` files of that commit (links inside the repository read
    /// as the file they name).
    pub(crate) files: Vec<SourceFile>,
    /// Why entries that look like tree files were skipped (one line each).
    pub(crate) skipped: Vec<String>,
}

/// Links followed, at most, from one tree file (as the kernel's `MAXSYMLINKS`).
const MAX_LINK_HOPS: usize = 40;

/// A git symbolic link's file mode.
const LINK_MODE: i32 = 0o120000;

/// A git failure, after retries.
#[derive(Debug, thiserror::Error)]
#[error("git {what} ({url} → {dir}): {message}")]
pub struct GitError {
    /// What was being done.
    pub(crate) what: &'static str,
    /// Repository URL.
    pub(crate) url: String,
    /// Working directory.
    pub(crate) dir: String,
    /// libgit2's message.
    pub(crate) message: String,
}

/// Brings `dir` to `origin/branch` of `url` and returns the revision and its tree files,
/// within `bound` (attempts and back-off included).
pub(crate) async fn update(
    url: &str,
    dir: &Path,
    branch: &str,
    bound: Duration,
) -> Result<Checkout, GitError> {
    let started = Instant::now();
    let deadline = started + bound;
    let mut delay = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        // An equal share of the time left for each attempt still to come.
        let share = deadline.saturating_duration_since(Instant::now()) / (ATTEMPTS + 1 - attempt);
        crate::gitauth::set_network_timeout(share.max(Duration::from_millis(100)));
        let (url2, dir2, branch2) = (url.to_string(), dir.to_path_buf(), branch.to_string());
        let result = tokio::task::spawn_blocking(move || update_blocking(&url2, &dir2, &branch2))
            .await
            .unwrap_or_else(|e| Err(("run", e.to_string())));
        let (what, message) = match result {
            Ok(checkout) => {
                for skipped in &checkout.skipped {
                    tracing::warn!("{skipped}");
                }
                return Ok(checkout);
            }
            Err(failed) => failed,
        };
        let permanent = what == "read" || what == "repository";
        if permanent || attempt >= ATTEMPTS || Instant::now() + delay >= deadline {
            let message = if permanent {
                message
            } else {
                format!(
                    "{} failed after {attempt} attempt(s) in {} s (bound: {} s, --git-timeout): \
                     {message}",
                    server(url),
                    started.elapsed().as_secs(),
                    bound.as_secs()
                )
            };
            return Err(GitError {
                what,
                url: url.to_string(),
                dir: dir.display().to_string(),
                message,
            });
        }
        tracing::warn!(
            "git {what} failed (attempt {attempt} of {ATTEMPTS}), retrying in {delay:?}: {message}"
        );
        tokio::time::sleep(delay).await;
        delay *= 2;
        attempt += 1;
    }
}

/// The server a repository URL names (`host[:port]`, credentials left out), or the URL itself
/// when it names no server (a path).
fn server(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // scp-like `[user@]host:path`.
        return match url.split_once(':') {
            Some((host, _)) if !host.contains('/') => {
                format!("the git server {}", host.rsplit('@').next().unwrap_or(host))
            }
            _ => format!("the repository {url}"),
        };
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or(authority);
    if host.is_empty() {
        format!("the repository {scheme}://{rest}")
    } else {
        format!("the git server {host}")
    }
}

type Step<T> = Result<T, (&'static str, String)>;

fn step<T>(what: &'static str, r: Result<T, git2::Error>) -> Step<T> {
    r.map_err(|e| (what, e.message().to_string()))
}

/// The local path a repository URL names (a plain path or `file://`), if it names one.
fn local_path(url: &str) -> Option<&Path> {
    if let Some(rest) = url.strip_prefix("file://") {
        return Some(Path::new(rest.strip_prefix("localhost").unwrap_or(rest)));
    }
    if url.contains("://") {
        return None;
    }
    // scp-like `host:path` (git's rule: a colon before any slash).
    match (url.find(':'), url.find('/')) {
        (Some(colon), Some(slash)) if colon < slash => None,
        (Some(_), None) => None,
        _ => Some(Path::new(url)),
    }
}

/// Removes the lock files (`HEAD.lock`, `index.lock`, a ref's `.lock`) a sync that was
/// killed left in its checkout's git directory `git_dir`: libgit2 refuses to write where one
/// is, so every later sync would fail. Only this syncer writes there (the caller holds the
/// sync's lock file), so a lock file found is stale.
fn clear_stale_locks(git_dir: &Path) {
    let mut dirs = vec![git_dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let (path, kind) = (entry.path(), entry.file_type());
            match kind {
                Ok(k) if k.is_dir() && entry.file_name() != "objects" => dirs.push(path),
                Ok(k) if k.is_file() && path.extension().is_some_and(|x| x == "lock") => {
                    match std::fs::remove_file(&path) {
                        Ok(()) => tracing::warn!(
                            "removed {}, left by a sync that was stopped",
                            path.display()
                        ),
                        Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
                    }
                }
                _ => {}
            }
        }
    }
}

fn update_blocking(url: &str, dir: &Path, branch: &str) -> Step<Checkout> {
    crate::gitauth::init();
    if let Some(path) = local_path(url) {
        if !path.exists() {
            // libgit2 would say "unsupported URL protocol".
            return Err(("repository", format!("{} does not exist", path.display())));
        }
    }
    let refspec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
    let repo = if dir.join(".git").exists() || dir.join("HEAD").exists() {
        let git_dir = dir.join(".git");
        clear_stale_locks(if git_dir.exists() { &git_dir } else { dir });
        let repo = step("open", Repository::open(dir))?;
        step("set-url", repo.remote_set_url("origin", url))?;
        repo
    } else {
        if dir.exists()
            && std::fs::read_dir(dir)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true)
        {
            return Err((
                "clone",
                format!("{} exists and is not a git checkout", dir.display()),
            ));
        }
        step(
            "clone",
            git2::build::RepoBuilder::new()
                .fetch_options(crate::gitauth::fetch_options())
                .clone(url, dir),
        )?
    };
    {
        // The branch may not be the clone's default one: fetch it explicitly.
        let mut remote = step("remote", repo.find_remote("origin"))?;
        let mut opts = crate::gitauth::fetch_options();
        step(
            "fetch",
            remote.fetch(&[refspec.as_str()], Some(&mut opts), None),
        )?;
    }
    let reference = format!("refs/remotes/origin/{branch}");
    let commit = step(
        "branch",
        repo.find_reference(&reference)
            .and_then(|r| r.peel_to_commit()),
    )
    .map_err(|(w, m)| (w, format!("no branch {branch} at origin: {m}")))?;
    step("checkout", repo.set_head_detached(commit.id()))?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force().remove_untracked(true);
    step(
        "checkout",
        repo.reset(commit.as_object(), ResetType::Hard, Some(&mut checkout)),
    )?;
    let tree = step("read", commit.tree())?;
    let (files, skipped) = tree_files(&repo, &tree)?;
    Ok(Checkout {
        revision: commit.id().to_string(),
        files,
        skipped,
    })
}

/// The top-level tree files of `tree`, sorted by name, and the entries skipped: submodules
/// and directories named like a tree file, names that are not UTF-8. A link is read as the
/// file it names inside the repository; a link out of it is an error naming the file.
fn tree_files(repo: &Repository, tree: &git2::Tree) -> Step<(Vec<SourceFile>, Vec<String>)> {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for entry in tree.iter() {
        let raw = entry.name_bytes();
        let Ok(name) = std::str::from_utf8(raw) else {
            if raw.ends_with(b".zk") || raw.ends_with(b".zkx") {
                let shown = String::from_utf8_lossy(raw);
                skipped.push(format!("skipped {shown:?}: its name is not UTF-8"));
            }
            continue;
        };
        if !is_tree_file(name) {
            continue;
        }
        let bytes = match entry.kind() {
            Some(git2::ObjectType::Blob) if entry.filemode() == LINK_MODE => {
                read_link(repo, tree, name, &entry)?
            }
            Some(git2::ObjectType::Blob) => {
                step("read", repo.find_blob(entry.id()))?.content().to_vec()
            }
            Some(git2::ObjectType::Commit) => {
                skipped.push(format!("skipped {name}: a submodule, not a file"));
                continue;
            }
            _ => {
                skipped.push(format!("skipped {name}: a directory, not a file"));
                continue;
            }
        };
        files.push(SourceFile {
            name: name.to_string(),
            bytes,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((files, skipped))
}

/// The content of the file the link `name` (an entry of the top-level `tree`) names, links
/// followed inside the repository; a link out of it, to nothing or to a directory is an error.
fn read_link(
    repo: &Repository,
    tree: &git2::Tree,
    name: &str,
    entry: &git2::TreeEntry,
) -> Step<Vec<u8>> {
    let refuse = |why: String| ("read", format!("tree file {name}: {why}"));
    let mut dir: Vec<String> = Vec::new();
    let mut id = entry.id();
    for _ in 0..MAX_LINK_HOPS {
        let target = step("read", repo.find_blob(id))?.content().to_vec();
        let target = String::from_utf8_lossy(&target).into_owned();
        let path = inside(&dir, &target)
            .ok_or_else(|| refuse(format!("a link out of the repository ({target})")))?;
        let found = tree
            .get_path(Path::new(&path.join("/")))
            .map_err(|_| refuse(format!("a link to nothing ({target})")))?;
        match found.kind() {
            Some(git2::ObjectType::Blob) if found.filemode() == LINK_MODE => {
                id = found.id();
                dir = path[..path.len() - 1].to_vec();
            }
            Some(git2::ObjectType::Blob) => {
                return Ok(step("read", repo.find_blob(found.id()))?.content().to_vec())
            }
            _ => return Err(refuse(format!("a link to a directory ({target})"))),
        }
    }
    Err(refuse(format!("more than {MAX_LINK_HOPS} links")))
}

/// The components of `target` (a link's text) taken from the directory `dir` of the
/// repository, or `None` if it leaves the repository (absolute, or `..` above its top).
fn inside(dir: &[String], target: &str) -> Option<Vec<String>> {
    if target.starts_with('/') {
        return None;
    }
    let mut path = dir.to_vec();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                path.pop()?;
            }
            _ => path.push(part.to_string()),
        }
    }
    (!path.is_empty()).then_some(path)
}
