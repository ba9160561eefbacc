//! Git repositories made by the tests (through git2, no `git` binary): a working repository on
//! branch `master` whose commits replace the whole set of files.

use std::path::{Path, PathBuf};

use git2::{Repository, Signature};

/// A test repository.
pub struct TestRepo {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    repo: Repository,
}

impl TestRepo {
    /// An empty repository.
    pub fn new() -> TestRepo {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("git init");
        repo.set_head("refs/heads/master").expect("HEAD -> master");
        TestRepo { dir, repo }
    }

    /// The URL to sync from (a plain path).
    pub fn url(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// The path of the working tree.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Commits exactly `files` (name, content) on `branch`, removing any other file; returns
    /// the commit id.
    pub fn commit_on(&self, branch: &str, files: &[(&str, &str)]) -> String {
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != ".git" {
                let p = entry.path();
                if p.is_dir() {
                    std::fs::remove_dir_all(p).unwrap();
                } else {
                    std::fs::remove_file(p).unwrap();
                }
            }
        }
        let mut index = self.repo.index().unwrap();
        index.clear().unwrap();
        for (name, text) in files {
            let path: PathBuf = self.dir.path().join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&path, text).unwrap();
            index.add_path(Path::new(name)).unwrap();
        }
        index.write().unwrap();
        let tree = self.repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::now("test", "test@example.com").unwrap();
        let refname = format!("refs/heads/{branch}");
        let parent = self
            .repo
            .find_reference(&refname)
            .ok()
            .and_then(|r| r.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let id = self
            .repo
            .commit(Some(&refname), &sig, &sig, "test commit", &tree, &parents)
            .unwrap();
        id.to_string()
    }

    /// [`TestRepo::commit_on`] `master`.
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
        self.commit_on("master", files)
    }
}

/// Where one syncer keeps its state: the checkout, the tombstone and the lock file.
pub struct SyncPaths<'a> {
    /// `-t`: the work tree the syncer clones into.
    pub checkout: &'a Path,
    /// `--tombstone`.
    pub tombstone: &'a Path,
    /// `--lock-file`.
    pub lock: &'a Path,
}

/// The argument vector of `zkdeployment sync -u URL -t CHECKOUT --tombstone T --lock-file L
/// -z CONN EXTRA...` (pass it to the `support::run*` helpers with [`as_strs`]).
pub fn sync_args(url: &str, paths: &SyncPaths<'_>, conn: &str, extra: &[&str]) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let mut args = vec![
        "sync".to_string(),
        "-u".to_string(),
        url.to_string(),
        "-t".to_string(),
        path(paths.checkout),
        "--tombstone".to_string(),
        path(paths.tombstone),
        "--lock-file".to_string(),
        path(paths.lock),
        "-z".to_string(),
        conn.to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Borrows an owned argument vector as the `&[&str]` the run helpers take.
pub fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
