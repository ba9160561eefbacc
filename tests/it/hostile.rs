//! Hostile input: malformed and oversized tree text through `tree check`, `tree import` and
//! `sync`; names that would escape `/opt` or `/etc`; values of the wrong type; malformed
//! configurations on the command line; garbage from `yum list`; a deploy script printing
//! megabytes; and property tests that no parser panics. Every case checks the message and
//! that nothing changed.
//!
//! Covered elsewhere, not repeated here: type names `../evil` and `a/b`, a float version,
//! `version =>` loops and dangling property links (`tests/agent.rs`, `refused` cases);
//! grammar errors one by one against the original's messages (`tests/tree_parse.rs`); most
//! configuration errors through the library (`tests/config.rs`).

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};
use support::agent::{dir_snapshot, v, TestHost};

const LIMIT: Duration = Duration::from_secs(40);

// ---------------------------------------------------------------------------------------------
// Malformed trees.

/// A malformed tree: its name, its bytes, the line the error must name and a fragment of the
/// message.
struct Bad {
    name: &'static str,
    text: Vec<u8>,
    line: usize,
    message: &'static str,
}

fn bad(name: &'static str, text: impl Into<Vec<u8>>, line: usize, message: &'static str) -> Bad {
    Bad {
        name,
        text: text.into(),
        line,
        message,
    }
}

/// Every kind of error the parser reports, plus oversized and odd input.
fn corpus() -> Vec<Bad> {
    let deep: String = (0..10_000)
        .map(|i| format!("{}/n\n", " ".repeat(i)))
        .collect();
    let brackets = format!("/a\n  x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let huge = format!("/a\n  /b\n    x = '{}'\n", "x".repeat(1024 * 1024));
    let huge_line = format!("/a\n  {}\n", "y".repeat(1024 * 1024));
    vec![
        bad("bad-link", "/a\n  b ->\n", 2, "Bad link format: 'b ->'"),
        bad(
            "unrecognized",
            "/a\n  what is this\n",
            2,
            "Unrecognized data: 'what is this'",
        ),
        bad(
            "indentation",
            "/a\n    /b\n  /c\n",
            3,
            "Invalid indentation: '/c'",
        ),
        bad(
            "under-props",
            "/a\n  x = 1\n    y = 2\n",
            3,
            "Can't indent under properties",
        ),
        bad("dup-node", "/a\n  /b\n  /b\n", 3, "duplicate node: '/b'"),
        bad(
            "dup-prop",
            "/a\n  x = 1\n  x = 2\n",
            3,
            "duplicate property: 'x = 2'",
        ),
        bad(
            "props-above",
            "x = 1\n/a\n",
            1,
            "Can't import properties above imported nodes.",
        ),
        bad(
            "expr-eof",
            "/a\n  x = 1 +\n",
            2,
            "Error unexpected EOF while parsing in expression",
        ),
        bad(
            "expr-call",
            "/a\n  x = __import__('os').system('touch /tmp/pwned')\n",
            2,
            "Error name '__import__' is not defined in expression",
        ),
        bad(
            "expr-string",
            "/a\n  x = 'unterminated\n",
            2,
            "in expression",
        ),
        bad("expr-set", "/a\n  x = {1, 2}\n", 2, "in expression"),
        bad("name-slash", "/a\n  /b/c\n", 2, "node name contains '/'"),
        bad("name-dotdot", "/a\n  /..\n", 2, "node name is '.' or '..'"),
        bad("name-dot", "/.\n", 1, "node name is '.' or '..'"),
        bad(
            "name-nul",
            "/a\n  /x\0y\n",
            2,
            "node name contains a control or non-character",
        ),
        bad(
            "name-bell",
            "/a\n  /x\x07y\n",
            2,
            "node name contains a control or non-character",
        ),
        bad(
            "name-c1",
            "/a\n  /x\u{85}y\n",
            2,
            "node name contains a control or non-character",
        ),
        bad(
            "invalid-utf8",
            b"/a\n  /b\n    x = '\xff\xfe'\n".to_vec(),
            3,
            "invalid UTF-8",
        ),
        bad(
            "deep-indentation",
            deep,
            201,
            "nodes nested deeper than 200 levels",
        ),
        bad(
            "deep-brackets",
            brackets,
            2,
            "Error too deeply nested in expression",
        ),
        bad(
            "huge-value",
            huge,
            2,
            "writing /a/b would send 1048588 bytes (1048584 of data, 4 of path), over ZooKeeper's limit",
        ),
        bad("huge-line", huge_line, 2, "Unrecognized data: 'yyyy"),
    ]
}

/// Commits exactly `files` (bytes) on master of the repository at `dir`.
fn commit_bytes(dir: &Path, files: &[(&str, &[u8])]) {
    let repo = git2::Repository::open(dir)
        .or_else(|_| {
            let r = git2::Repository::init(dir)?;
            r.set_head("refs/heads/master")?;
            Ok::<_, git2::Error>(r)
        })
        .unwrap();
    let mut index = repo.index().unwrap();
    index.clear().unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
        index.add_path(Path::new(name)).unwrap();
    }
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("test", "test@example.com").unwrap();
    let parent = repo
        .find_reference("refs/heads/master")
        .ok()
        .and_then(|r| r.peel_to_commit().ok());
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    repo.commit(
        Some("refs/heads/master"),
        &sig,
        &sig,
        "test",
        &tree,
        &parents,
    )
    .unwrap();
}

const GOOD: &str = "/acme\n  /web : webapp\n    version = '1.4'\n    /deploy\n      /h1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_trees_are_refused_everywhere_and_change_nothing() {
    let h = TestHost::fake("hostile-trees").await;
    // A cluster synced once from a good repository.
    h.tree(GOOD, v("r0")).await;
    let before = h.zk_stats().await;
    let scratch = tempfile::tempdir().unwrap();
    let cases = corpus();
    let mut jobs = Vec::new();
    for case in &cases {
        let dir = scratch.path().join(case.name);
        std::fs::create_dir_all(dir.join("repo")).unwrap();
        let file = dir.join("bad.zk");
        std::fs::write(&file, &case.text).unwrap();
        // The repository: a good file and the bad one (nothing of either may be written).
        commit_bytes(
            &dir.join("repo"),
            &[("a.zk", GOOD.as_bytes()), ("bad.zk", &case.text)],
        );
        jobs.push((case, dir, file));
    }
    let conn = h.conn.clone();
    let runs = futures::future::join_all(jobs.iter().map(|(case, dir, file)| {
        let conn = conn.clone();
        async move {
            let file = file.display().to_string();
            let repo = dir.join("repo").display().to_string();
            let checkout = dir.join("checkout").display().to_string();
            let lock = dir.join("lock").display().to_string();
            let tomb = dir.join("tomb").display().to_string();
            let started = Instant::now();
            let check = support::run_async(&["tree", "check", &file]).await;
            let import = support::run_async(&["tree", "import", &file, "-z", &conn]).await;
            let sync = support::run_async(&[
                "sync",
                "-u",
                &repo,
                "-t",
                &checkout,
                "--lock-file",
                &lock,
                "--tombstone",
                &tomb,
                "-z",
                &conn,
            ])
            .await;
            (case, file, check, import, sync, started.elapsed())
        }
    }))
    .await;
    for (case, file, check, import, sync, took) in runs {
        let name = case.name;
        let expected = format!("{file}:{}: ", case.line);
        check.assert_code(1);
        assert!(
            check.stdout.starts_with(&expected) && check.stdout.contains(case.message),
            "{name}: tree check should say {expected}{}…\n{check}",
            case.message
        );
        // One line, not an echo of a megabyte.
        assert!(
            check.stdout.len() < 1024,
            "{name}: {} bytes",
            check.stdout.len()
        );
        import.assert_code(1);
        assert!(
            import.stderr.contains(&expected) && import.stderr.contains(case.message),
            "{name}: tree import\n{import}"
        );
        sync.assert_code(1);
        let expected = format!("bad.zk:{}: ", case.line);
        assert!(
            sync.stderr.contains(&expected) && sync.stderr.contains(case.message),
            "{name}: sync\n{sync}"
        );
        // No wall-clock bound here: a pathological (super-linear) parse is caught by the run
        // helpers' own kill after `support::RUN_TIMEOUT`, which fails the exit-code checks above.
        eprintln!("{name}: {took:?}");
    }
    assert_eq!(h.zk_stats().await, before, "nothing was written");
    assert_eq!(h.hosts().await["version"], json!("r0"));
}

#[tokio::test]
async fn names_with_commas_and_percent_signs_deploy_and_their_markers_round_trip() {
    let h = TestHost::fake("hostile-commas").await;
    let node =
        |name: &str| format!("  /{name} : foo\n    version = '1.0'\n    /deploy\n      /h1\n");
    let both = format!("/cust\n{}{}", node("a,b"), node("50%"));
    // `tree check` takes them; an export gives them back.
    let file = h.scratch("commas.zk");
    std::fs::write(&file, &both).unwrap();
    support::run_async(&["tree", "check", file.to_str().unwrap()])
        .await
        .assert_ok();
    h.tree(&both, v("r1")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.etc("foo"),
        [
            "cust,50%25.0.deployed",
            "cust,50%25.0.script",
            "cust,a%2Cb.0.deployed",
            "cust,a%2Cb.0.script"
        ]
    );
    assert_eq!(
        h.deploy_log("foo"),
        ["foo-1.0-1: /cust/50% 0", "foo-1.0-1: /cust/a,b 0"]
    );
    let exported = support::run_async(&["tree", "export", "/cust", "-z", &h.conn]).await;
    let exported = &exported.assert_ok().stdout;
    assert!(
        exported.contains("\n  /50% : foo\n") && exported.contains("\n  /a,b : foo\n"),
        "{exported}"
    );
    // The markers are read back as the same paths: removing one node undeploys exactly it.
    h.tree(&format!("/cust\n{}", node("50%")), v("r2")).await;
    h.deploy(&[]).await.assert_ok();
    assert_eq!(
        h.deploy_log("foo")[2..],
        ["foo-1.0-1: -u /cust/a,b 0", "foo-1.0-1: /cust/50% 0"]
    );
    assert_eq!(
        h.etc("foo"),
        ["cust,50%25.0.deployed", "cust,50%25.0.script"]
    );
    // A converged host stays converged; a forced pass redeploys exactly the one left.
    h.deploy(&[]).await.assert_ok();
    assert_eq!(h.deploy_log("foo").len(), 4);
    h.deploy(&["--force"]).await.assert_ok();
    assert_eq!(h.deploy_log("foo")[4..], ["foo-1.0-1: /cust/50% 0"]);
}

// ---------------------------------------------------------------------------------------------
// Names that would escape /opt or /etc, values of the wrong type.

/// The pass is refused before anything happens: exit 1, the message, no yum call, nothing on
/// disk, the cluster halted with the message.
async fn refused_by_agent(label: &str, app: &str, message: &str) {
    let h = TestHost::fake(label).await;
    h.tree(&format!("/acme\n{app}"), v("r1")).await;
    let run = h.deploy(&[]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains(message),
        "{label}: {message:?} missing\n{run}"
    );
    assert_eq!(h.yum_calls(), Vec::<String>::new(), "{label}");
    assert_eq!(dir_snapshot(&h.root()), Default::default(), "{label}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null, "{label}");
    assert!(
        hosts["halt"]["error"].as_str().unwrap().contains(message),
        "{label}: {hosts:?}"
    );
}

#[tokio::test]
async fn names_that_would_escape_opt_or_etc_and_versions_of_the_wrong_type_are_refused() {
    let app = |props: &str| format!("  /a\n{props}    /deploy\n      /h1\n");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "esc-type-prop",
            app("    type = '../../etc'\n    version = '1.0'\n"),
            "invalid package name '../../etc' at /acme/a",
        ),
        (
            "esc-type-dots",
            app("    type = '..'\n    version = '1.0'\n"),
            "invalid package name '..' at /acme/a",
        ),
        (
            "esc-type-option",
            app("    type = '-y'\n    version = '1.0'\n"),
            "invalid package name '-y' at /acme/a",
        ),
        (
            "esc-type-option-long",
            app("    type = '--installroot=x'\n    version = '1.0'\n"),
            "invalid package name '--installroot=x' at /acme/a",
        ),
        (
            "esc-type-nul",
            app("    type = 'foo\\x00bar'\n    version = '1.0'\n"),
            "invalid package name 'foo\\x00bar' at /acme/a",
        ),
        (
            "bad-type-list",
            app("    type = ['foo']\n    version = '1.0'\n"),
            "/acme/a",
        ),
        (
            "bad-version-list",
            app("    type = 'foo'\n    version = ['1.0']\n"),
            "Version of /acme/a is not a string: ['1.0']",
        ),
        (
            "bad-version-dict",
            app("    type = 'foo'\n    version = {'v': '1.0'}\n"),
            "Version of /acme/a is not a string: {'v': '1.0'}",
        ),
        (
            "bad-version-bool",
            app("    type = 'foo'\n    version = True\n"),
            "Version of /acme/a is not a string: True",
        ),
        (
            "bad-version-int",
            app("    type = 'foo'\n    version = 10\n"),
            "Version of /acme/a is not a string: 10",
        ),
        (
            "bad-version-blank",
            app("    type = 'foo'\n    version = '  '\n"),
            "Invalid version for /acme/a: '  '",
        ),
        (
            "bad-version-newline",
            app("    type = 'foo'\n    version = '1.0\\n--x'\n"),
            "Invalid version for /acme/a: '1.0\\n--x'",
        ),
        (
            "bad-n-huge",
            "  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n        n = 1000000000\n"
                .to_string(),
            "Invalid n for /acme/a/deploy/h1: 1000000000",
        ),
    ];
    futures::future::join_all(
        cases
            .iter()
            .map(|(label, text, message)| refused_by_agent(label, text, message)),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Malformed configurations on the command line.

#[tokio::test]
async fn malformed_configs_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let base = format!(
        "[zkdeployment]\nhost-id = h1\nrun-directory = {}\n",
        run_dir.display()
    );
    let cases: Vec<(&str, String, &str)> = vec![
        ("role-escape", format!("{base}role = ../x\n"), "role"),
        (
            "host-id-slash",
            base.replace("host-id = h1", "host-id = a/b"),
            "host-id",
        ),
        (
            "session-zero",
            format!("{base}session-timeout = 0\n"),
            "session-timeout",
        ),
        (
            "session-text",
            format!("{base}session-timeout = soon\n"),
            "session-timeout",
        ),
        (
            "zookeeper-space",
            format!("{base}zookeeper = a b:2181\n"),
            "zookeeper",
        ),
        ("unknown-key", format!("{base}colour = red\n"), "colour"),
        (
            "missing-run-directory",
            base.replace(&format!("run-directory = {}\n", run_dir.display()), ""),
            "run-directory",
        ),
        (
            "auth-shape",
            format!("{base}zookeeper-auth = no-colon\n"),
            "zookeeper-auth",
        ),
        (
            "root-relative",
            format!("{base}root = relative/path\n"),
            "root",
        ),
        (
            "mail-to",
            format!("{base}mail-to = not-an-address\n"),
            "mail-to",
        ),
        (
            "auth-file-missing",
            format!("{base}zookeeper-auth = file:///nonexistent/zk-auth\n"),
            "zookeeper-auth",
        ),
    ];
    for (name, text, key) in &cases {
        let path = dir.path().join(format!("{name}.cfg"));
        std::fs::write(&path, text).unwrap();
        let config = path.to_str().unwrap();
        for args in [
            vec!["deploy", config],
            vec!["agent", config],
            vec!["deploy", config, "--dry-run"],
        ] {
            let run = support::run_async(&args).await;
            run.assert_code(2);
            let line = run.stderr.trim();
            assert_eq!(line.lines().count(), 1, "{name} {args:?}: one line\n{run}");
            assert!(line.contains(key), "{name} {args:?}: names {key}\n{run}");
        }
        let run = support::run_async(&["monitor", config]).await;
        run.assert_code(3);
        assert!(
            run.stdout.starts_with("ZKDEPLOYMENT UNKNOWN"),
            "{name}\n{run}"
        );
        assert!(
            run.stdout.contains(key),
            "{name}: monitor names {key}\n{run}"
        );
    }
    // The secret's value is never echoed, even when it is the malformed part.
    std::fs::write(
        dir.path().join("secret.cfg"),
        format!("{base}zookeeper-auth = hunter2-no-colon\n"),
    )
    .unwrap();
    let run =
        support::run_async(&["deploy", dir.path().join("secret.cfg").to_str().unwrap()]).await;
    run.assert_code(2);
    assert!(!run.stderr.contains("hunter2"), "{run}");
    assert!(!run_dir.exists(), "nothing created");
}

// ---------------------------------------------------------------------------------------------
// Garbage from yum.

/// A yum stand-in written over the host's yum command: logs its arguments to `calls`, and
/// answers `list` with `list_output` (shell code), everything else with junk and exit 0.
fn junk_yum(path: &Path, calls: &Path, list_output: &str) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\ncase \"$*\" in\n  *list*) {list_output} ;;\n  *) head -c 3000 /dev/urandom; echo ;;\nesac\nexit 0\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn garbage_from_yum_list_fails_the_pass_cleanly() {
    let app = "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n";
    // (label, what `list` prints, expected message, expected yum commands)
    let cases: Vec<(&str, &str, &str, Vec<&str>)> = vec![
        (
            // Junk without an entry for the package (binary noise, near misses, a long
            // line): read as "not installed"; the install is then verified and found missing.
            "yum-noise",
            "head -c 20000 /dev/urandom; echo; echo 'foo-bar.noarch 1.0-1 @x'; echo 'xfoo.noarch 2.0-1'; head -c 100000 /dev/zero | tr '\\0' z; echo",
            "Failed to install foo-1.0 (installed: None)",
            vec!["-q list installed foo", "-y clean all", "-y install foo-1.0", "-q list installed foo"],
        ),
        (
            // The package's own NAME.ARCH followed by junk: a parse error before anything.
            "yum-entry-junk",
            "echo 'Installed Packages'; echo 'foo.noarch    !!not-a-version!!   @local'",
            "cannot parse `yum list installed foo`",
            vec!["-q list installed foo"],
        ),
        (
            // NAME.ARCH as the very last token.
            "yum-entry-cut",
            "printf 'Installed Packages\\nfoo.noarch'",
            "no version after foo.noarch",
            vec!["-q list installed foo"],
        ),
    ];
    for (label, list, message, calls) in cases {
        let h = TestHost::fake(label).await;
        let calls_file = h.scratch("junk-calls");
        junk_yum(Path::new(&h.yum()), &calls_file, list);
        h.tree(app, v("r1")).await;
        let run = h.deploy(&[]).await;
        run.assert_code(1);
        assert!(run.stderr.contains(message), "{label}\n{run}");
        let made: Vec<String> = support::agent::lines(&calls_file);
        assert_eq!(made, calls, "{label}");
        // Nothing deployed, no /etc, no marker; the failure halts like any other.
        assert!(!h.exists("etc"), "{label}");
        assert_eq!(h.hosts().await["version"], Value::Null, "{label}");
        assert_eq!(h.status_text(), "error");
        let report = h.report();
        let output_len = report["steps"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|s| s["output"].as_str().unwrap_or("").len())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        assert!(output_len < 64 * 1024, "{label}: {output_len}");
    }
}

// ---------------------------------------------------------------------------------------------
// A deploy script printing megabytes.

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::test]
async fn a_deploy_script_printing_megabytes_keeps_the_agent_small() {
    let h = TestHost::fake("hostile-output").await;
    h.tree(
        "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n",
        v("r1"),
    )
    .await;
    h.deploy(&[]).await.assert_ok();
    // The installed script now floods its output: 30 MB in 250-byte lines, then 20 MB in
    // one line, then (a second later, so that the agent is sampled while it runs) a last line.
    let script = h.root().join("opt/foo/bin/zookeeper-deploy");
    std::fs::write(
        &script,
        "#!/bin/sh\nyes \"$(printf '%0250d' 0)\" | head -c 30000000\nhead -c 20000000 /dev/zero | tr '\\0' y\necho\nsleep 1\necho the last line\n",
    )
    .unwrap();
    h.set_version(v("r2")).await;
    let mut deploy = h.spawn("deploy", &[], &[]);
    let pid = deploy.pid();
    let mut peak = 0;
    let mut samples = 0;
    let started = Instant::now();
    while deploy.running() {
        if let Some(rss) = vm_rss_kib(pid) {
            peak = peak.max(rss);
            samples += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let code = deploy.wait(LIMIT).await;
    assert_eq!(
        code,
        0,
        "{}",
        &deploy.output()[deploy.output().len().saturating_sub(2000)..]
    );
    eprintln!(
        "peak VmRSS {peak} KiB over {samples} samples, {:?}",
        started.elapsed()
    );
    assert!(samples > 5, "sampled the agent while it ran");
    assert!(peak < 100 * 1024, "peak VmRSS {peak} KiB");
    let report = h.report();
    let step = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == json!("deploy"))
        .unwrap()
        .clone();
    let output = step["output"].as_str().unwrap();
    assert!(output.len() < 64 * 1024, "{} bytes kept", output.len());
    assert!(
        output.ends_with("the last line\n"),
        "{}",
        &output[output.len() - 200..]
    );
    assert!(output.contains("earlier output dropped"));
    let report_size = std::fs::metadata(h.run_dir().join("last-pass.json"))
        .unwrap()
        .len();
    assert!(
        report_size < 128 * 1024,
        "last-pass.json is {report_size} bytes"
    );
}

// ---------------------------------------------------------------------------------------------
// Property tests: the parsers never panic.

/// A real configuration, every key set.
const REAL_CONFIG: &str = "[zkdeployment]
host-id = app1
host-name = app1.example.com
run-directory = /var/run/zkdeployment
role = web
after = /usr/local/bin/after-deploy --quiet 'two words'
zookeeper = zk1:2181,zk2:2181/prod
zookeeper-auth = deployer:secret
session-timeout = 7.5
root = /
yum = /usr/bin/yum
mail-to = ops@example.com, oncall@example.com
mail-from = zkdeployment@app1.example.com
smtp = smtp://mail.example.com:25
sendmail = /usr/sbin/sendmail
metrics-file = /var/lib/node_exporter/zkdeployment.prom
  continued value
; comment
# comment
[other]
x = 1
";

fn real_tree() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tree");
    let mut text = String::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    for path in names {
        if path.extension().is_some_and(|e| e == "zk") {
            text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
    }
    if text.is_empty() {
        text = GOOD.to_string();
    }
    text
}

/// A byte-level mutation: position (fraction of the length), what to do, and a payload.
fn mutations() -> impl Strategy<Value = Vec<(f64, u8, Vec<u8>)>> {
    prop::collection::vec(
        (
            0.0..1.0f64,
            0u8..4,
            prop::collection::vec(
                prop_oneof![
                    any::<u8>(),
                    Just(b'\n'),
                    Just(b' '),
                    Just(b'='),
                    Just(b'['),
                    Just(b'\''),
                    Just(b':'),
                    Just(b'/'),
                ],
                0..12,
            ),
        ),
        1..8,
    )
}

/// Applies mutations: insert, delete, replace a span, or duplicate a span.
fn mutate(base: &[u8], edits: &[(f64, u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = base.to_vec();
    for (at, kind, payload) in edits {
        let i = ((out.len() as f64) * at) as usize;
        let i = i.min(out.len());
        let end = (i + payload.len().max(1)).min(out.len());
        match kind {
            0 => {
                out.splice(i..i, payload.iter().copied());
            }
            1 => {
                out.drain(i..end);
            }
            2 => {
                out.splice(i..end, payload.iter().copied());
            }
            _ => {
                let span: Vec<u8> = out[i..end].to_vec();
                out.splice(i..i, span);
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_config_parser_never_panics_on_mutated_real_configs(edits in mutations()) {
        let bytes = mutate(REAL_CONFIG.as_bytes(), &edits);
        let text = String::from_utf8_lossy(&bytes);
        let fetch = |_: &str| -> Result<Option<String>, zkdeployment::config::FetchError> { Ok(None) };
        let _ = zkdeployment::config::parse(Path::new("/etc/zkdeployment/agent.cfg"), &text, &fetch);
    }

    #[test]
    fn the_tree_parser_never_panics_on_mutated_real_trees(edits in mutations()) {
        let bytes = mutate(real_tree().as_bytes(), &edits);
        if let Err(e) = zkdeployment::tree::parse::parse_bytes(&bytes) {
            prop_assert!(e.line >= 1);
            prop_assert!(e.message.len() < 2048, "{}", e.message);
        }
    }

    #[test]
    fn the_tree_parser_never_panics_on_nested_literals(
        opens in prop::collection::vec(prop_oneof![Just("["), Just("("), Just("{1: "), Just("-"), Just("'"), Just("u'\\\\x")], 0..400),
        closes in prop::collection::vec(prop_oneof![Just("]"), Just(")"), Just("}"), Just(","), Just("'")], 0..400),
    ) {
        let text = format!("/a\n  x = {}{}\n", opens.concat(), closes.concat());
        let _ = zkdeployment::tree::parse::parse(&text);
    }

    #[test]
    fn yum_list_parsing_never_panics(output in "(?s).{0,300}", name in "[a-z.+_-]{0,12}") {
        let _ = zkdeployment::packages::yum::parse_list_installed(&output, &name);
        let wrapped = format!("Installed Packages\n{name}.noarch\n  {output}\n");
        let _ = zkdeployment::packages::yum::parse_list_installed(&wrapped, &name);
    }

    #[test]
    fn node_data_and_status_lines_never_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
        let props = zkdeployment::zk::decode(&data);
        let again = zkdeployment::zk::decode(&zkdeployment::zk::encode(&props));
        prop_assert_eq!(again, props);
        let _ = zkdeployment::agent::status::parse_status(&String::from_utf8_lossy(&data));
    }
}

#[test]
fn a_ten_megabyte_tree_parses_in_bounded_time_and_an_error_on_its_last_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::with_capacity(11 << 20);
    let mut i = 0;
    while text.len() < 10 << 20 {
        text.push_str(&format!(
            "/app{i} : pkg{}\n  version = '1.{}'\n  props = {{'a': [1, 2.5, 'xyz'], 'b': (True, None), 'c': u'\\u00e9t\\xe9'}}\n  /deploy\n    /h1\n      n = 2\n",
            i % 50,
            i % 50
        ));
        i += 1;
    }
    let lines = text.lines().count();
    let good = dir.path().join("good.zk");
    let bad = dir.path().join("bad.zk");
    std::fs::write(&good, &text).unwrap();
    text.push_str("  oops = [1,\n");
    std::fs::write(&bad, &text).unwrap();
    let (good, bad) = (good.display().to_string(), bad.display().to_string());
    let t = Instant::now();
    let (ok, failed) = std::thread::scope(|s| {
        let ok = s.spawn(|| support::run(&["tree", "check", &good]));
        let failed = s.spawn(|| support::run(&["tree", "check", &bad]));
        (ok.join().unwrap(), failed.join().unwrap())
    });
    let took = t.elapsed();
    eprintln!("10 MB, {lines} lines: checked twice in {took:?}");
    ok.assert_ok();
    assert_eq!(ok.stdout, "");
    failed.assert_code(1);
    assert!(
        failed.stdout.starts_with(&format!(
            "{bad}:{}: Error unexpected EOF while parsing",
            lines + 1
        )),
        "{failed}"
    );
    // Bounded by `support::RUN_TIMEOUT` (the run is killed and the checks above fail); no
    // wall-clock assertion, which a loaded machine would turn into a flake.
}
