//! Git checkouts (`packages::git`) against real repositories made here with git2: the version
//! grammar, clone/fetch/checkout of branches, tags and commit ids, `stage-build` only when the
//! commit changed, the `a+rX` step, failed builds, a changed LOCATION, and removal.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Signature};
use tempfile::TempDir;
use zkdeployment::packages::git::{
    is_checkout, is_current, parse_version, recorded_version, remove, update, GitError, GitVersion,
};

const BUILD_OK: &str = "#!/bin/sh
set -e
cat VERSION >> \"$PWD/build.log\"
echo secret > secret
chmod 600 secret
mkdir -p private
chmod 700 private
echo inner > private/inner
chmod 600 private/inner
printf '#!/bin/sh\\n' > tool
chmod 700 tool
";

const BUILD_FAILS: &str = "#!/bin/sh
cat VERSION >> \"$PWD/build.log\"
exit 1
";

/// A bare source repository whose commits are built from in-memory files.
struct Source {
    _tmp: TempDir,
    path: PathBuf,
    repo: Repository,
}

impl Source {
    fn new() -> Source {
        let tmp = TempDir::new().unwrap();
        let path = tmp.path().join("source.git");
        let repo = Repository::init_bare(&path).unwrap();
        repo.set_head("refs/heads/main").unwrap();
        Source {
            _tmp: tmp,
            path,
            repo,
        }
    }

    /// A commit on `branch` (child of its tip, if any) holding `README`, `VERSION`,
    /// `.gitignore` (ignoring `build.log`) and an executable `stage-build`.
    fn commit(&self, branch: &str, version: &str, stage_build: &str) -> Oid {
        let files: [(&str, &str, i32); 4] = [
            (".gitignore", "build.log\n", 0o100644),
            ("README", &format!("readme {version}\n"), 0o100644),
            ("VERSION", &format!("{version}\n"), 0o100644),
            ("stage-build", stage_build, 0o100755),
        ];
        let mut builder = self.repo.treebuilder(None).unwrap();
        for (name, content, mode) in files {
            let blob = self.repo.blob(content.as_bytes()).unwrap();
            builder.insert(name, blob, mode).unwrap();
        }
        let tree = self.repo.find_tree(builder.write().unwrap()).unwrap();
        let refname = format!("refs/heads/{branch}");
        let parent = self
            .repo
            .find_reference(&refname)
            .ok()
            .and_then(|r| r.peel_to_commit().ok());
        let parents: Vec<_> = parent.iter().collect();
        let sig = Signature::now("Test", "test@example.com").unwrap();
        self.repo
            .commit(Some(&refname), &sig, &sig, version, &tree, &parents)
            .unwrap()
    }

    /// An annotated tag `name` at `commit` (moved if it exists).
    fn tag(&self, name: &str, commit: Oid) {
        let object = self.repo.find_object(commit, None).unwrap();
        let sig = Signature::now("Test", "test@example.com").unwrap();
        self.repo.tag(name, &object, &sig, name, true).unwrap();
    }

    fn version(&self, reference: &str) -> String {
        format!("git:{}#{reference}", self.path.display())
    }
}

/// A host root with `/opt/app` as the checkout directory.
struct Host {
    _tmp: TempDir,
    dir: PathBuf,
}

impl Host {
    fn new() -> Host {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("opt").join("app");
        fs::create_dir_all(tmp.path().join("opt")).unwrap();
        Host { _tmp: tmp, dir }
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name)).unwrap()
    }

    fn builds(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("build.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn marker(&self) -> String {
        fs::read_to_string(self.dir.join(".git/.zkdeployment")).unwrap()
    }
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn ok(location: &str, reference: &str) -> Option<Result<GitVersion, String>> {
    Some(Ok(GitVersion {
        location: location.to_string(),
        reference: reference.to_string(),
    }))
}

#[test]
fn version_grammar() {
    assert_eq!(parse_version("git:///srv/repo#v1"), ok("/srv/repo", "v1"));
    assert_eq!(
        parse_version("git://git@host:org/repo.git#v1"),
        ok("git@host:org/repo.git", "v1")
    );
    assert_eq!(parse_version("git:/srv/repo#main"), ok("/srv/repo", "main"));
    assert_eq!(
        parse_version("git:file:///srv/repo#main"),
        ok("file:///srv/repo", "main")
    );
    assert_eq!(
        parse_version("git:https://host/x.git#v2"),
        ok("https://host/x.git", "v2")
    );
    assert_eq!(
        parse_version("git:git@host:org/repo.git#main"),
        ok("git@host:org/repo.git", "main")
    );
    assert_eq!(
        parse_version("git+ssh://git@host/org/repo.git#v3"),
        ok("ssh://git@host/org/repo.git", "v3")
    );
    // REF is after the last '#'.
    assert_eq!(parse_version("git:/a#b#c"), ok("/a#b", "c"));
    assert_eq!(
        parse_version("git:/srv/repo#0123abcd"),
        ok("/srv/repo", "0123abcd")
    );

    for bad in [
        "git:#x",
        "git:/a",
        "git:/a#",
        "git://#x",
        "git:",
        "git+ssh://#x",
        "git+ssh://host/x",
        "git+https://x#y",
        "git+ssh:host/x#y",
    ] {
        match parse_version(bad) {
            Some(Err(message)) => assert!(message.contains(bad), "{bad}: {message}"),
            other => panic!("{bad}: {other:?}"),
        }
    }

    for not_git in ["gitx:/a#b", "1.0.0", "", "git", "github:x#y", "svn:/a#b"] {
        assert_eq!(parse_version(not_git), None, "{not_git}");
    }
}

#[tokio::test]
async fn first_checkout_builds_once_and_is_world_readable() {
    let source = Source::new();
    let c1 = source.commit("main", "1", BUILD_OK);
    let host = Host::new();
    let version = source.version("main");

    assert!(!is_checkout(&host.dir));
    assert!(!is_current(&host.dir, &version));
    assert_eq!(recorded_version(&host.dir), None);

    let updated = update(&host.dir, "app", &version).await.unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, c1.to_string());
    assert!(is_checkout(&host.dir));
    assert_eq!(host.marker(), version, "full version, no newline");
    assert_eq!(recorded_version(&host.dir), Some(version.clone()));
    assert_eq!(host.builds(), ["1"]);
    assert_eq!(host.read("README"), "readme 1\n");
    assert!(is_current(&host.dir, &version));
    assert!(!is_current(&host.dir, &source.version("other")));

    // The a+rX step: the build made 0600/0700 things.
    assert_eq!(mode(&host.dir.join("secret")), 0o644);
    assert_eq!(mode(&host.dir.join("private")), 0o755);
    assert_eq!(mode(&host.dir.join("private/inner")), 0o644);
    assert_eq!(mode(&host.dir.join("tool")), 0o755);
    assert_eq!(mode(&host.dir.join("stage-build")) & 0o555, 0o555);
    assert_eq!(mode(&host.dir) & 0o555, 0o555);

    // HEAD is detached at the commit.
    let repo = Repository::open(&host.dir).unwrap();
    assert!(repo.head_detached().unwrap());
    assert_eq!(repo.head().unwrap().target(), Some(c1));

    // Unchanged REF: nothing rebuilt, the work tree (build products, stray files) untouched.
    fs::write(host.dir.join("stray"), "x").unwrap();
    let again = update(&host.dir, "app", &version).await.unwrap();
    assert!(!again.rebuilt);
    assert_eq!(again.commit, c1.to_string());
    assert_eq!(host.builds(), ["1"]);
    assert!(host.dir.join("stray").exists());
    assert!(host.dir.join("secret").exists());
    assert!(is_current(&host.dir, &version));
}

#[tokio::test]
async fn moving_branch_is_fetched_and_rebuilt() {
    let source = Source::new();
    source.commit("main", "1", BUILD_OK);
    let host = Host::new();
    let version = source.version("main");
    update(&host.dir, "app", &version).await.unwrap();
    fs::write(host.dir.join("stray"), "x").unwrap();
    fs::write(host.dir.join("README"), "locally modified").unwrap();

    let c2 = source.commit("main", "2", BUILD_OK);
    let updated = update(&host.dir, "app", &version).await.unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, c2.to_string());
    assert_eq!(host.read("README"), "readme 2\n");
    assert!(!host.dir.join("stray").exists(), "untracked files removed");
    assert_eq!(host.builds(), ["1", "2"], "ignored build.log kept");
    assert_eq!(mode(&host.dir.join("secret")), 0o644);
    assert!(is_current(&host.dir, &version));

    let again = update(&host.dir, "app", &version).await.unwrap();
    assert!(!again.rebuilt);
    assert_eq!(host.builds(), ["1", "2"]);
}

#[tokio::test]
async fn switching_ref_to_tags_and_commit_ids() {
    let source = Source::new();
    let c1 = source.commit("main", "1", BUILD_OK);
    source.tag("v1", c1);
    let c2 = source.commit("main", "2", BUILD_OK);
    let c3 = source.commit("other", "3", BUILD_OK);
    let host = Host::new();

    let main = update(&host.dir, "app", &source.version("main"))
        .await
        .unwrap();
    assert_eq!(main.commit, c2.to_string());

    let tag = source.version("v1");
    let updated = update(&host.dir, "app", &tag).await.unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, c1.to_string());
    assert_eq!(host.read("VERSION"), "1\n");
    assert_eq!(host.marker(), tag);
    assert!(is_current(&host.dir, &tag));
    assert!(!is_current(&host.dir, &source.version("main")));

    // The same commit by abbreviated id: the version changes, no rebuild.
    let short = source.version(&c1.to_string()[..10]);
    let updated = update(&host.dir, "app", &short).await.unwrap();
    assert!(!updated.rebuilt);
    assert_eq!(updated.commit, c1.to_string());
    assert_eq!(host.marker(), short);

    // Another branch that is not the clone's default.
    let updated = update(&host.dir, "app", &source.version("other"))
        .await
        .unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, c3.to_string());
    assert_eq!(host.read("VERSION"), "3\n");

    // A full commit id.
    let updated = update(&host.dir, "app", &source.version(&c2.to_string()))
        .await
        .unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, c2.to_string());
    assert_eq!(host.builds(), ["2", "1", "3", "2"]);

    // A tag moved at the source is fetched (force).
    source.tag("v1", c3);
    let updated = update(&host.dir, "app", &tag).await.unwrap();
    assert_eq!(updated.commit, c3.to_string());

    // An unknown REF: a git error, the checkout and its recorded version stay as they were.
    let err = update(&host.dir, "app", &source.version("nope"))
        .await
        .unwrap_err();
    match &err {
        GitError::Git { what, location, .. } => {
            assert_eq!(*what, "resolve");
            assert_eq!(location, &source.path.display().to_string());
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("nope"), "{err}");
    assert_eq!(host.marker(), tag);
    assert!(is_current(&host.dir, &tag));

    // A branch deleted at the source is pruned: no stale origin/other is checked out.
    source
        .repo
        .find_reference("refs/heads/other")
        .unwrap()
        .delete()
        .unwrap();
    let err = update(&host.dir, "app", &source.version("other"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GitError::Git {
                what: "resolve",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn failed_build_is_retried_then_fixed() {
    let source = Source::new();
    source.commit("main", "1", BUILD_FAILS);
    let host = Host::new();
    let version = source.version("main");

    let err = update(&host.dir, "app", &version).await.unwrap_err();
    assert!(matches!(err, GitError::Build(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("Command failed: {}/stage-build", host.dir.display())
    );
    assert_eq!(recorded_version(&host.dir), Some(version.clone()));
    assert!(!is_current(&host.dir, &version));
    assert!(!host.dir.join(".git/.zkdeployment-built").exists());

    // The next pass builds again (same commit).
    assert!(update(&host.dir, "app", &version).await.is_err());
    assert_eq!(host.builds(), ["1", "1"]);

    let c2 = source.commit("main", "2", BUILD_OK);
    let updated = update(&host.dir, "app", &version).await.unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, c2.to_string());
    assert_eq!(host.builds(), ["1", "1", "2"]);
    assert!(is_current(&host.dir, &version));
}

#[tokio::test]
async fn changing_location_reclones() {
    let a = Source::new();
    a.commit("main", "a", BUILD_OK);
    let b = Source::new();
    let cb = b.commit("main", "b", BUILD_OK);
    let host = Host::new();

    update(&host.dir, "app", &a.version("main")).await.unwrap();
    fs::write(host.dir.join("stray"), "x").unwrap();

    // Same LOCATION spelt `git://`: a fetch, not a clone.
    let same = format!("git://{}#main", a.path.display());
    let updated = update(&host.dir, "app", &same).await.unwrap();
    assert!(!updated.rebuilt);
    assert!(host.dir.join("stray").exists());
    assert_eq!(host.marker(), same);

    // Another LOCATION (a file:// URL): removed and cloned afresh.
    let other = format!("git:file://{}#main", b.path.display());
    let updated = update(&host.dir, "app", &other).await.unwrap();
    assert!(updated.rebuilt);
    assert_eq!(updated.commit, cb.to_string());
    assert!(!host.dir.join("stray").exists());
    assert_eq!(host.read("VERSION"), "b\n");
    assert_eq!(
        host.builds(),
        ["b"],
        "a fresh clone: the old build.log went too"
    );
    assert_eq!(host.marker(), other);
    let repo = Repository::open(&host.dir).unwrap();
    assert_eq!(
        repo.find_remote("origin").unwrap().url().unwrap(),
        format!("file://{}", b.path.display())
    );
}

#[tokio::test]
async fn non_checkout_directory_is_replaced() {
    let source = Source::new();
    source.commit("main", "1", BUILD_OK);
    let host = Host::new();
    fs::create_dir_all(host.dir.join("bin")).unwrap();
    fs::write(host.dir.join("bin/zookeeper-deploy"), "rpm").unwrap();

    let version = source.version("main");
    update(&host.dir, "app", &version).await.unwrap();
    assert!(!host.dir.join("bin").exists());
    assert!(is_current(&host.dir, &version));
}

#[tokio::test]
async fn bad_versions_and_unreachable_locations() {
    let host = Host::new();
    for version in ["1.0.0", "git:/a", "git+https://x#y"] {
        let err = update(&host.dir, "app", version).await.unwrap_err();
        assert!(matches!(err, GitError::Version(_)), "{version}: {err:?}");
        assert!(err.to_string().contains(version), "{err}");
    }
    let missing = host.dir.with_file_name("missing");
    let err = update(&host.dir, "app", &format!("git:{}#main", missing.display()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, GitError::Git { what: "clone", .. }),
        "{err:?}"
    );
    assert!(!host.dir.exists());

    // No network transports in this build: an ssh location fails at clone, quickly.
    let err = update(&host.dir, "app", "git+ssh://git@example.invalid/x.git#main")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitError::Git { what: "clone", location, .. }
            if location == "ssh://git@example.invalid/x.git"),
        "{err:?}"
    );
}

#[tokio::test]
async fn remove_deletes_the_checkout() {
    let source = Source::new();
    source.commit("main", "1", BUILD_OK);
    let host = Host::new();
    let version = source.version("main");
    update(&host.dir, "app", &version).await.unwrap();
    assert!(is_current(&host.dir, &version));

    remove(&host.dir, "app").unwrap();
    assert!(!host.dir.exists());
    assert!(!is_checkout(&host.dir));
    assert!(!is_current(&host.dir, &version));
    remove(&host.dir, "app").unwrap();
}
