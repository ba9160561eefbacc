//! The vendored ZooKeeper client (`vendor/`): the published crate plus the patches in
//! `vendor/patches`, nothing else (`scripts/check-vendor.sh`), and `vendor/README.md` names
//! exactly those patches.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `scripts/check-vendor.sh` on `dir`: whether it passed, and what it printed.
fn check(dir: &Path) -> (bool, String) {
    let out = Command::new(root().join("scripts/check-vendor.sh"))
        .arg(dir)
        .output()
        .expect("scripts/check-vendor.sh runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A copy of `vendor/zookeeper-client` to spoil.
fn copy_of_vendor(scratch: &Path) -> PathBuf {
    let copy = scratch.join("zookeeper-client");
    let status = Command::new("cp")
        .arg("-a")
        .arg(root().join("vendor/zookeeper-client"))
        .arg(&copy)
        .status()
        .expect("cp runs");
    assert!(status.success(), "copying vendor/zookeeper-client failed");
    copy
}

#[test]
fn the_vendored_client_is_the_published_crate_plus_the_patches() {
    let (ok, text) = check(&root().join("vendor/zookeeper-client"));
    assert!(ok, "{text}");
    assert!(
        text.contains("zookeeper-client 0.11.2 plus 5 patches"),
        "{text}"
    );
}

#[test]
fn a_change_outside_the_patches_is_named() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = copy_of_vendor(scratch.path());
    let lib = copy.join("src/lib.rs");
    let mut text = std::fs::read_to_string(&lib).unwrap();
    text.push_str("// an unlisted change\n");
    std::fs::write(&lib, text).unwrap();
    let (ok, text) = check(&copy);
    assert!(!ok, "{text}");
    assert!(text.contains("src/lib.rs"), "{text}");
}

#[test]
fn a_file_added_to_the_copy_is_named() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = copy_of_vendor(scratch.path());
    std::fs::write(copy.join("src/extra.rs"), "// not in the crate\n").unwrap();
    let (ok, text) = check(&copy);
    assert!(!ok, "{text}");
    assert!(text.contains("src/extra.rs"), "{text}");
}

#[test]
fn a_patched_line_changed_again_is_found() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = copy_of_vendor(scratch.path());
    let endpoint = copy.join("src/endpoint.rs");
    let text = std::fs::read_to_string(&endpoint).unwrap();
    assert!(
        text.contains("Duration::from_secs(1);"),
        "the cap is in the copy"
    );
    std::fs::write(
        &endpoint,
        text.replace("Duration::from_secs(1);", "Duration::from_secs(2);"),
    )
    .unwrap();
    let (ok, text) = check(&copy);
    assert!(!ok, "{text}");
    assert!(text.contains("0003-cap-reconnect-wait.patch"), "{text}");
}

/// `vendor/README.md` names every patch in `vendor/patches`, and no other.
#[test]
fn the_readme_lists_exactly_the_patches() {
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("vendor/patches"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".patch"))
        .collect();
    on_disk.sort();
    let readme = std::fs::read_to_string(root().join("vendor/README.md")).unwrap();
    let mut named: Vec<String> = readme
        .split(|c: char| c.is_whitespace() || "`()[],;:".contains(c))
        .filter_map(|w| w.strip_prefix("patches/"))
        .filter(|w| w.ends_with(".patch"))
        .map(str::to_string)
        .collect();
    named.sort();
    named.dedup();
    assert_eq!(named, on_disk);
}
