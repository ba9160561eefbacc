//! `zkdeployment::agent::observe`: the host disk as the agent sees it (installed packages,
//! deployment markers and their attribution, our `/etc/<app>` directories), the marker file
//! operations. Every test works under a temporary directory as `root`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use zkdeployment::agent::model::{deployed_name, script_name, InstalledDeployment};
use zkdeployment::agent::observe::{
    deploy_script, etc_dir, observe_disk, opt_dir, remove_etc_dir, remove_markers, under_root,
    write_script_marker,
};

fn temp_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("zkd-observe-")
        .tempdir()
        .expect("cannot create a temporary root")
}

/// `ROOT/opt/<rpm>/bin/zookeeper-deploy`.
fn install(root: &Path, rpm: &str) {
    let script = deploy_script(root, rpm);
    fs::create_dir_all(script.parent().unwrap()).unwrap();
    fs::write(&script, "#!/bin/sh\n").unwrap();
}

/// `ROOT/etc/<app>/<marker>.deployed`.
fn deployed(root: &Path, app: &str, path: &str, n: u32) {
    let dir = etc_dir(root, app);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(deployed_name(path, n)), "").unwrap();
}

/// `ROOT/etc/<app>/<marker>.script` holding `content`.
fn script(root: &Path, app: &str, path: &str, n: u32, content: &str) {
    let dir = etc_dir(root, app);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(script_name(path, n)), content).unwrap();
}

fn dep(app: &str, rpm: &str, path: &str, n: u32) -> InstalledDeployment {
    InstalledDeployment {
        app: app.into(),
        rpm: rpm.into(),
        path: path.into(),
        n,
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------------------------------------
// Paths

#[test]
fn path_helpers() {
    let root = Path::new("/tmp/r");
    assert_eq!(opt_dir(root, "foo"), Path::new("/tmp/r/opt/foo"));
    assert_eq!(
        deploy_script(root, "z4m-4.0.0"),
        Path::new("/tmp/r/opt/z4m-4.0.0/bin/zookeeper-deploy")
    );
    assert_eq!(etc_dir(root, "z4m"), Path::new("/tmp/r/etc/z4m"));
    assert_eq!(
        under_root(root, "/opt/x/stage-build"),
        Path::new("/tmp/r/opt/x/stage-build")
    );
    let slash = Path::new("/");
    assert_eq!(under_root(slash, "/opt/x"), Path::new("/opt/x"));
    assert_eq!(
        deploy_script(slash, "foo"),
        Path::new("/opt/foo/bin/zookeeper-deploy")
    );
    assert_eq!(etc_dir(slash, "foo"), Path::new("/etc/foo"));
}

// ---------------------------------------------------------------------------------------------
// observe_disk

#[test]
fn empty_root_has_nothing() {
    let root = temp_root();
    let seen = observe_disk(root.path()).unwrap();
    assert!(seen.packages.is_empty());
    assert!(seen.deployments.is_empty());
    assert!(seen.app_dirs.is_empty());
    assert!(seen.versions.is_empty());
}

#[test]
fn packages_need_a_deploy_script() {
    let root = temp_root();
    let r = root.path();
    install(r, "foo");
    install(r, "bar-1.4");
    // No bin/zookeeper-deploy: a plain package, or a role controller.
    fs::create_dir_all(r.join("opt/plain/bin")).unwrap();
    fs::create_dir_all(r.join("opt/webrc/bin")).unwrap();
    fs::write(r.join("opt/webrc/bin/starting-deployments"), "").unwrap();
    // bin/zookeeper-deploy is a directory: not an application.
    fs::create_dir_all(r.join("opt/odd/bin/zookeeper-deploy")).unwrap();
    // A file in /opt, and a name that is not plain.
    fs::write(r.join("opt/README"), "").unwrap();
    install(r, "has space");
    // A symlink to a real script counts; a dangling one does not.
    fs::create_dir_all(r.join("opt/linked/bin")).unwrap();
    symlink(deploy_script(r, "foo"), deploy_script(r, "linked")).unwrap();
    fs::create_dir_all(r.join("opt/dangling/bin")).unwrap();
    symlink(r.join("nowhere"), deploy_script(r, "dangling")).unwrap();
    // A symlinked package directory counts.
    symlink(opt_dir(r, "foo"), opt_dir(r, "foo-link")).unwrap();

    let seen = observe_disk(r).unwrap();
    assert_eq!(seen.packages, ["bar-1.4", "foo", "foo-link", "linked"]);
    // Installed apps with no /etc directory: no app dirs, no deployments.
    assert!(seen.app_dirs.is_empty());
    assert!(seen.deployments.is_empty());
}

#[test]
fn deployments_of_one_package() {
    let root = temp_root();
    let r = root.path();
    install(r, "foo");
    deployed(r, "foo", "/cust/app", 0);
    deployed(r, "foo", "/cust/app", 1);
    deployed(r, "foo", "/other", 0);
    script(
        r,
        "foo",
        "/cust/app",
        0,
        &deploy_script(r, "foo").display().to_string(),
    );
    let seen = observe_disk(r).unwrap();
    assert_eq!(
        seen.deployments,
        [
            dep("foo", "foo", "/cust/app", 0),
            dep("foo", "foo", "/cust/app", 1),
            dep("foo", "foo", "/other", 0),
        ]
    );
    assert_eq!(seen.app_dirs, ["foo"]);
}

#[test]
fn versioned_packages_share_the_app_dir_and_scripts_tell_them_apart() {
    let root = temp_root();
    let r = root.path();
    install(r, "z4m");
    install(r, "z4m-4.0.0");
    deployed(r, "z4m", "/cust/a", 0);
    script(
        r,
        "z4m",
        "/cust/a",
        0,
        &deploy_script(r, "z4m").display().to_string(),
    );
    deployed(r, "z4m", "/cust/b", 0);
    // One trailing newline is tolerated.
    script(
        r,
        "z4m",
        "/cust/b",
        0,
        &format!("{}\n", deploy_script(r, "z4m-4.0.0").display()),
    );
    let seen = observe_disk(r).unwrap();
    assert_eq!(seen.packages, ["z4m", "z4m-4.0.0"]);
    assert_eq!(
        seen.deployments,
        [
            dep("z4m", "z4m", "/cust/a", 0),
            dep("z4m", "z4m-4.0.0", "/cust/b", 0)
        ]
    );
    assert_eq!(seen.app_dirs, ["z4m"]);
}

#[test]
fn marker_without_script_goes_to_the_unversioned_package_once() {
    let root = temp_root();
    let r = root.path();
    install(r, "z4m");
    install(r, "z4m-4.0.0");
    install(r, "z4m-3.9");
    deployed(r, "z4m", "/cust/a", 0);
    let seen = observe_disk(r).unwrap();
    assert_eq!(seen.deployments, [dep("z4m", "z4m", "/cust/a", 0)]);
}

#[test]
fn marker_without_script_goes_to_the_first_versioned_package_once() {
    let root = temp_root();
    let r = root.path();
    install(r, "z4m-4.0.0");
    install(r, "z4m-3.9");
    deployed(r, "z4m", "/cust/a", 0);
    // An empty .script (a crash while the original wrote it) counts as no script.
    deployed(r, "z4m", "/cust/b", 0);
    script(r, "z4m", "/cust/b", 0, "");
    // So does a .script that is a directory.
    deployed(r, "z4m", "/cust/c", 0);
    fs::create_dir(etc_dir(r, "z4m").join(script_name("/cust/c", 0))).unwrap();
    let seen = observe_disk(r).unwrap();
    assert_eq!(
        seen.deployments,
        [
            dep("z4m", "z4m-3.9", "/cust/a", 0),
            dep("z4m", "z4m-3.9", "/cust/b", 0),
            dep("z4m", "z4m-3.9", "/cust/c", 0),
        ]
    );
}

#[test]
fn script_of_another_package_is_skipped() {
    let root = temp_root();
    let r = root.path();
    install(r, "z4m");
    deployed(r, "z4m", "/cust/a", 0);
    // Deployed by z4m-4.0.0, no longer installed: not z4m's.
    script(
        r,
        "z4m",
        "/cust/a",
        0,
        &deploy_script(r, "z4m-4.0.0").display().to_string(),
    );
    // The same package under another root is another script.
    deployed(r, "z4m", "/cust/b", 0);
    script(r, "z4m", "/cust/b", 0, "/opt/z4m/bin/zookeeper-deploy");
    // Two trailing newlines are not tolerated.
    deployed(r, "z4m", "/cust/c", 0);
    script(
        r,
        "z4m",
        "/cust/c",
        0,
        &format!("{}\n\n", deploy_script(r, "z4m").display()),
    );
    let seen = observe_disk(r).unwrap();
    assert!(seen.deployments.is_empty(), "{:?}", seen.deployments);
    assert_eq!(seen.app_dirs, ["z4m"]);
}

#[test]
fn escaped_marker_names_round_trip() {
    let root = temp_root();
    let r = root.path();
    install(r, "cust");
    let dir = etc_dir(r, "cust");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("cust,a%2Cb.0.deployed"), "").unwrap();
    fs::write(dir.join("cust,100%25,x.2.deployed"), "").unwrap();
    assert_eq!(deployed_name("/cust/a,b", 0), "cust,a%2Cb.0.deployed");
    let seen = observe_disk(r).unwrap();
    assert_eq!(
        seen.deployments,
        [
            dep("cust", "cust", "/cust/100%/x", 2),
            dep("cust", "cust", "/cust/a,b", 0)
        ]
    );
    // What the agent writes and removes uses the same names.
    write_script_marker(r, "cust", "cust", "/cust/a,b", 0).unwrap();
    assert!(dir.join("cust,a%2Cb.0.script").is_file());
    assert_eq!(observe_disk(r).unwrap().deployments.len(), 2);
    remove_markers(r, "cust", "/cust/a,b", 0).unwrap();
    assert_eq!(names(&dir), ["cust,100%25,x.2.deployed"]);
}

#[test]
fn malformed_marker_names_are_ignored() {
    let root = temp_root();
    let r = root.path();
    install(r, "foo");
    let dir = etc_dir(r, "foo");
    fs::create_dir_all(&dir).unwrap();
    for bad in [
        "x.deployed",
        "a.b.deployed",
        "a%ZZ.1.deployed",
        ".1.deployed",
        "a.1.deployed~",
        "a.-1.deployed",
        "config.ini",
    ] {
        fs::write(dir.join(bad), "").unwrap();
    }
    // A .deployed marker that is a directory is ignored.
    fs::create_dir(dir.join(deployed_name("/dir", 0))).unwrap();
    let seen = observe_disk(r).unwrap();
    assert!(seen.deployments.is_empty(), "{:?}", seen.deployments);
    assert_eq!(seen.app_dirs, ["foo"]);
}

#[test]
fn app_dirs_are_ours_only() {
    let root = temp_root();
    let r = root.path();
    install(r, "foo");
    // foo's directory, empty.
    fs::create_dir_all(etc_dir(r, "foo")).unwrap();
    // An orphan: markers, but /opt/gone is gone. Its markers are no deployment of anything.
    deployed(r, "gone", "/cust/gone", 0);
    script(r, "gone", "/cust/gone", 0, "/opt/gone/bin/zookeeper-deploy");
    // Only a .script left.
    script(r, "half", "/cust/half", 1, "/opt/half/bin/zookeeper-deploy");
    // Unrelated directories and files of /etc.
    fs::create_dir_all(r.join("etc/ssh")).unwrap();
    fs::write(r.join("etc/ssh/sshd_config"), "Port 22\n").unwrap();
    fs::write(r.join("etc/ssh/moduli.deployed"), "").unwrap();
    fs::create_dir_all(r.join("etc/empty")).unwrap();
    fs::create_dir_all(r.join("etc/deep/sub")).unwrap();
    fs::write(r.join("etc/deep/sub/x.0.deployed"), "").unwrap();
    fs::create_dir_all(r.join(format!("etc/dironly/{}", deployed_name("/d", 0)))).unwrap();
    fs::write(r.join("etc/hosts"), "").unwrap();
    fs::write(r.join("etc/x.0.deployed"), "").unwrap();
    // A symlink to a directory with markers is not scanned (only our apps' links count).
    fs::create_dir_all(r.join("elsewhere")).unwrap();
    fs::write(r.join("elsewhere").join(deployed_name("/e", 0)), "").unwrap();
    symlink(r.join("elsewhere"), r.join("etc/linked")).unwrap();

    let seen = observe_disk(r).unwrap();
    assert_eq!(seen.app_dirs, ["foo", "gone", "half"]);
    assert!(seen.deployments.is_empty(), "{:?}", seen.deployments);
    assert_eq!(seen.packages, ["foo"]);
}

#[test]
fn installed_app_dir_may_be_a_symlink() {
    let root = temp_root();
    let r = root.path();
    install(r, "foo");
    fs::create_dir_all(r.join("data/foo")).unwrap();
    fs::create_dir_all(r.join("etc")).unwrap();
    symlink(r.join("data/foo"), etc_dir(r, "foo")).unwrap();
    fs::write(r.join("data/foo").join(deployed_name("/f", 0)), "").unwrap();
    let seen = observe_disk(r).unwrap();
    assert_eq!(seen.app_dirs, ["foo"]);
    assert_eq!(seen.deployments, [dep("foo", "foo", "/f", 0)]);
}

#[test]
fn unreadable_opt_is_an_error_with_its_path() {
    let root = temp_root();
    let r = root.path();
    // /opt is a file: listing it fails, with the path in the message.
    fs::write(r.join("opt"), "").unwrap();
    fs::create_dir_all(r.join("etc")).unwrap();
    // A file is "not a directory": nothing installed rather than an error.
    assert!(observe_disk(r).unwrap().packages.is_empty());
    fs::remove_file(r.join("opt")).unwrap();
    // A symlink loop is an error naming the path.
    symlink(r.join("opt"), r.join("opt")).unwrap();
    let err = observe_disk(r).unwrap_err();
    assert!(
        err.to_string()
            .contains(&r.join("opt").display().to_string()),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Marker operations

#[test]
fn write_script_marker_writes_the_script_path_without_newline() {
    let root = temp_root();
    let r = root.path();
    write_script_marker(r, "z4m", "z4m-4.0.0", "/cust/a", 3).unwrap();
    let file = etc_dir(r, "z4m").join("cust,a.3.script");
    let content = fs::read_to_string(&file).unwrap();
    assert_eq!(
        content,
        format!("{}/opt/z4m-4.0.0/bin/zookeeper-deploy", r.display())
    );
    // Rewriting replaces it; no temporary file is left.
    write_script_marker(r, "z4m", "z4m", "/cust/a", 3).unwrap();
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        deploy_script(r, "z4m").display().to_string()
    );
    assert_eq!(names(&etc_dir(r, "z4m")), ["cust,a.3.script"]);
    // The same content again (a re-run at a new version): the file is left as it is.
    let inode = |f: &Path| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(f).unwrap().ino()
    };
    let before = inode(&file);
    write_script_marker(r, "z4m", "z4m", "/cust/a", 3).unwrap();
    assert_eq!(inode(&file), before, "rewritten although unchanged");
    assert_eq!(names(&etc_dir(r, "z4m")), ["cust,a.3.script"]);
    // And observation reads it back.
    install(r, "z4m");
    install(r, "z4m-4.0.0");
    deployed(r, "z4m", "/cust/a", 3);
    assert_eq!(
        observe_disk(r).unwrap().deployments,
        [dep("z4m", "z4m", "/cust/a", 3)]
    );
}

#[test]
fn write_script_marker_never_writes_through_a_symlink() {
    let root = temp_root();
    let r = root.path();
    let dir = etc_dir(r, "foo");
    fs::create_dir_all(&dir).unwrap();
    let victim = r.join("victim");
    fs::write(&victim, "precious").unwrap();
    // A planted temporary file and marker that point elsewhere.
    symlink(&victim, dir.join(format!("{}.tmp", script_name("/x", 0)))).unwrap();
    symlink(&victim, dir.join(script_name("/x", 0))).unwrap();
    write_script_marker(r, "foo", "foo", "/x", 0).unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let marker = dir.join(script_name("/x", 0));
    assert!(!fs::symlink_metadata(&marker)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(names(&dir), ["x.0.script"]);
    // A symlink to a file that holds the marker's very content is replaced too.
    fs::remove_file(&marker).unwrap();
    fs::write(&victim, deploy_script(r, "foo").display().to_string()).unwrap();
    symlink(&victim, &marker).unwrap();
    write_script_marker(r, "foo", "foo", "/x", 0).unwrap();
    assert!(!fs::symlink_metadata(&marker)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn bad_names_are_refused() {
    let root = temp_root();
    let r = root.path();
    fs::create_dir_all(r.join("etc")).unwrap();
    for app in ["", ".", "..", "a/b"] {
        assert!(
            write_script_marker(r, app, "foo", "/x", 0).is_err(),
            "{app:?}"
        );
        assert!(remove_markers(r, app, "/x", 0).is_err(), "{app:?}");
        assert!(remove_etc_dir(r, app).is_err(), "{app:?}");
    }
    assert!(write_script_marker(r, "foo", "../x", "/x", 0).is_err());
    assert!(r.join("etc").is_dir());
}

#[test]
fn remove_markers_removes_both_and_only_that_instance() {
    let root = temp_root();
    let r = root.path();
    deployed(r, "foo", "/cust/a", 0);
    script(r, "foo", "/cust/a", 0, "x");
    deployed(r, "foo", "/cust/a", 1);
    deployed(r, "foo", "/cust/ab", 0);
    let dir = etc_dir(r, "foo");
    // Other spellings of the same instance go too.
    fs::write(dir.join("cust,a.+0.deployed"), "").unwrap();
    fs::write(dir.join("cust,a.00.script"), "").unwrap();
    fs::write(dir.join("config"), "").unwrap();
    remove_markers(r, "foo", "/cust/a", 0).unwrap();
    assert_eq!(
        names(&dir),
        ["config", "cust,a.1.deployed", "cust,ab.0.deployed"]
    );
    // Absent markers, or an absent directory, are fine.
    remove_markers(r, "foo", "/cust/a", 0).unwrap();
    remove_markers(r, "nosuch", "/cust/a", 0).unwrap();
}

#[test]
fn remove_markers_removes_symlinks_not_targets() {
    let root = temp_root();
    let r = root.path();
    let outside = r.join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("target"), "keep").unwrap();
    let dir = etc_dir(r, "foo");
    fs::create_dir_all(&dir).unwrap();
    symlink(outside.join("target"), dir.join(deployed_name("/a", 0))).unwrap();
    symlink(&outside, dir.join(script_name("/a", 0))).unwrap();
    remove_markers(r, "foo", "/a", 0).unwrap();
    assert!(names(&dir).is_empty());
    assert_eq!(fs::read_to_string(outside.join("target")).unwrap(), "keep");
    // A marker that is a real directory is left alone.
    fs::create_dir(dir.join(deployed_name("/a", 0))).unwrap();
    remove_markers(r, "foo", "/a", 0).unwrap();
    assert_eq!(names(&dir), ["a.0.deployed"]);
}

#[test]
fn remove_etc_dir_removes_stale_markers_then_the_dir() {
    let root = temp_root();
    let r = root.path();
    deployed(r, "old", "/cust/a", 0);
    script(r, "old", "/cust/a", 0, "/opt/old/bin/zookeeper-deploy");
    script(r, "old", "/cust/b", 2, "/opt/old/bin/zookeeper-deploy");
    fs::write(etc_dir(r, "old").join("cust,c.0.script.tmp"), "").unwrap();
    assert_eq!(observe_disk(r).unwrap().app_dirs, ["old"]);
    assert!(remove_etc_dir(r, "old").unwrap());
    assert!(!etc_dir(r, "old").exists());
    assert!(observe_disk(r).unwrap().app_dirs.is_empty());
    // Already absent.
    assert!(remove_etc_dir(r, "old").unwrap());
    // Empty.
    fs::create_dir_all(etc_dir(r, "empty")).unwrap();
    assert!(remove_etc_dir(r, "empty").unwrap());
    assert!(!etc_dir(r, "empty").exists());
}

#[test]
fn remove_etc_dir_keeps_a_dir_with_foreign_files() {
    let root = temp_root();
    let r = root.path();
    deployed(r, "app", "/cust/a", 0);
    script(r, "app", "/cust/a", 0, "/opt/app/bin/zookeeper-deploy");
    let dir = etc_dir(r, "app");
    fs::write(dir.join("app.conf"), "keep me").unwrap();
    fs::create_dir(dir.join("conf.d")).unwrap();
    assert!(!remove_etc_dir(r, "app").unwrap());
    // Our markers went, the rest stays.
    assert_eq!(names(&dir), ["app.conf", "conf.d"]);
    assert_eq!(fs::read_to_string(dir.join("app.conf")).unwrap(), "keep me");
    // A marker name that is a directory is not ours to remove either.
    fs::remove_file(dir.join("app.conf")).unwrap();
    fs::remove_dir(dir.join("conf.d")).unwrap();
    fs::create_dir(dir.join(deployed_name("/d", 0))).unwrap();
    assert!(!remove_etc_dir(r, "app").unwrap());
    assert_eq!(names(&dir), ["d.0.deployed"]);
}

#[test]
fn remove_etc_dir_never_follows_symlinks_out_of_root() {
    let root = temp_root();
    let outside = temp_root(); // another directory, outside this root
    let r = root.path();
    let o = outside.path();
    fs::write(o.join(deployed_name("/x", 0)), "outside").unwrap();
    fs::write(o.join("x.0.script"), "outside").unwrap();
    fs::create_dir_all(o.join("sub")).unwrap();
    fs::write(o.join("sub").join(deployed_name("/y", 0)), "outside").unwrap();

    // Markers that are symlinks to files and directories outside the root.
    let dir = etc_dir(r, "app");
    fs::create_dir_all(&dir).unwrap();
    symlink(
        o.join(deployed_name("/x", 0)),
        dir.join(deployed_name("/x", 0)),
    )
    .unwrap();
    symlink(o.join("sub"), dir.join(deployed_name("/y", 0))).unwrap();
    assert!(remove_etc_dir(r, "app").unwrap());
    assert!(!dir.exists());
    assert_eq!(
        names(o),
        ["sub", "x.0.deployed", "x.0.script"],
        "nothing outside the root was touched"
    );
    assert_eq!(names(&o.join("sub")), ["y.0.deployed"]);

    // /etc/<app> itself a symlink to a directory outside: left alone entirely.
    symlink(o, etc_dir(r, "linked")).unwrap();
    assert!(!remove_etc_dir(r, "linked").unwrap());
    assert!(fs::symlink_metadata(etc_dir(r, "linked"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(names(o), ["sub", "x.0.deployed", "x.0.script"]);
}

#[test]
fn full_cycle_under_a_prefix() {
    // A root other than "/": everything lives below it, the .script markers name the scripts
    // below it.
    let root = temp_root();
    let r = root.path().join("host");
    install(&r, "z4m");
    install(&r, "z4m-4.0.0");
    // z4m-4.0.0 deployed /cust/a (the script writes .deployed, the agent .script).
    deployed(&r, "z4m", "/cust/a", 0);
    write_script_marker(&r, "z4m", "z4m-4.0.0", "/cust/a", 0).unwrap();
    let script = fs::read_to_string(etc_dir(&r, "z4m").join("cust,a.0.script")).unwrap();
    assert!(script.starts_with(&r.display().to_string()), "{script}");
    let seen = observe_disk(&r).unwrap();
    assert_eq!(seen.deployments, [dep("z4m", "z4m-4.0.0", "/cust/a", 0)]);
    // Undeployed.
    remove_markers(&r, "z4m", "/cust/a", 0).unwrap();
    assert!(observe_disk(&r).unwrap().deployments.is_empty());
    // Both packages gone, the app dir is left over, then removed.
    fs::remove_dir_all(r.join("opt")).unwrap();
    assert_eq!(observe_disk(&r).unwrap().app_dirs, Vec::<String>::new());
    fs::write(etc_dir(&r, "z4m").join("cust,b.0.deployed"), "").unwrap();
    assert_eq!(observe_disk(&r).unwrap().app_dirs, ["z4m"]);
    assert!(remove_etc_dir(&r, "z4m").unwrap());
    assert!(fs::read_dir(r.join("etc")).unwrap().next().is_none());
}
