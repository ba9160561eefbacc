//! Tests of `zkdeployment::config`: INI rules, every key, value indirection (file://, a real
//! HTTP server on 127.0.0.1), error messages, secret redaction, and a no-panic property.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use zkdeployment::config::{
    fqdn, http_get, load, parse, resolve_connection, Config, ConfigError, FetchError, Secret, Smtp,
};

const CFG: &str = "/etc/x.cfg";
const BASE: &str = "[zkdeployment]\nhost-id = h1\nrun-directory = /var/run/zkdeployment\n";

fn no_fetch(url: &str) -> Result<Option<String>, FetchError> {
    Err(FetchError::Refused(format!(
        "no network in this test ({url})"
    )))
}

fn try_parse(text: &str) -> Result<Config, ConfigError> {
    parse(Path::new(CFG), text, &no_fetch)
}

fn ok(text: &str) -> Config {
    match try_parse(text) {
        Ok(c) => c,
        Err(e) => panic!("unexpected error: {e}\n--- text:\n{text}"),
    }
}

fn err(text: &str) -> ConfigError {
    match try_parse(text) {
        Ok(c) => panic!("expected an error, got {c:?}\n--- text:\n{text}"),
        Err(e) => e,
    }
}

/// BASE plus `extra` lines (BASE fills lines 1-3).
fn with(extra: &str) -> Config {
    ok(&format!("{BASE}host-name = h1.example.com\n{extra}\n"))
}

fn with_err(extra: &str) -> String {
    err(&format!("{BASE}host-name = h1.example.com\n{extra}\n")).to_string()
}

fn assert_names(message: &str, key: &str) {
    assert!(message.starts_with(CFG), "no file in {message:?}");
    assert!(message.contains(key), "no {key:?} in {message:?}");
    assert!(!message.contains('\n'), "not one line: {message:?}");
}

// -------------------------------------------------------------------------------------------
// A tiny HTTP server: /ok/<text> answers 200 with "  <text>  \n", /missing 404, anything
// else 500.

fn server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).is_err() {
                        return;
                    }
                    loop {
                        let mut header = String::new();
                        match reader.read_line(&mut header) {
                            Ok(0) | Err(_) => break,
                            Ok(_) if header == "\r\n" || header == "\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
                    let (status, body) = if let Some(text) = path.strip_prefix("/ok/") {
                        ("200 OK", format!("  {text}  \n"))
                    } else if path == "/missing" {
                        ("404 Not Found", "not here".to_string())
                    } else {
                        ("500 Internal Server Error", "boom".to_string())
                    };
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        format!("http://{addr}")
    })
}

fn http_parse(text: &str) -> Result<Config, ConfigError> {
    parse(Path::new(CFG), text, &http_get)
}

// -------------------------------------------------------------------------------------------
// The error messages of the brief, exactly.

#[test]
fn message_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.cfg");
    let e = load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: cannot read: No such file or directory (os error 2)",
            path.display()
        )
    );
    assert!(matches!(e, ConfigError::Read { .. }));
    assert_eq!(e.path(), path);
}

#[test]
fn message_no_section() {
    assert_eq!(
        err("[other]\nhost-id = h1\n").to_string(),
        "/etc/x.cfg: no [zkdeployment] section"
    );
    assert_eq!(err("").to_string(), "/etc/x.cfg: no [zkdeployment] section");
    assert_eq!(
        err("# only a comment\n").to_string(),
        "/etc/x.cfg: no [zkdeployment] section"
    );
}

#[test]
fn host_id_not_set_is_the_host_name() {
    // Absent or empty: the host name (here set; by default the fully qualified host name).
    let c = ok("[zkdeployment]\nrun-directory = /r\nhost-name = h1.example.com\n");
    assert_eq!(c.host_id, "h1.example.com");
    let c = ok("[zkdeployment]\nhost-id =\nrun-directory = /r\nhost-name = h2\n");
    assert_eq!(c.host_id, "h2");
    let c = ok("[zkdeployment]\nrun-directory = /r\n");
    assert_eq!(c.host_id, zkdeployment::config::fqdn());
    assert_eq!(c.host_id, c.host_name);
    assert_eq!(
        err("[zkdeployment]\nhost-id = h1\n").to_string(),
        "/etc/x.cfg: run-directory not specified"
    );
    assert_eq!(
        err("[zkdeployment]\nhost-id = h1\nrun-directory:\n").to_string(),
        "/etc/x.cfg:3: run-directory not specified"
    );
}

#[test]
fn message_unknown_key() {
    let text = "# agent\n[zkdeployment]\nhost-id = h1\nrun-directory = /r\n\n; x\nhostid = h2\n";
    let e = err(text);
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:7: unknown key 'hostid' in [zkdeployment]"
    );
    assert_eq!((e.key(), e.line()), (Some("hostid"), Some(7)));
}

#[test]
fn message_session_timeout() {
    let e = err("[zkdeployment]\nhost-id = h1\nsession-timeout = abc\nrun-directory = /r\n");
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:3: session-timeout: expected seconds > 0, got 'abc'"
    );
}

#[test]
fn message_file_io_error() {
    // An I/O error other than "not found" (here: a directory) is an error, in the brief's shape.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let e = err(&format!(
        "[zkdeployment]\nrun-directory = /r\n\nhost-id = {url}\n"
    ));
    assert_eq!(
        e.to_string(),
        format!(
            "/etc/x.cfg:4: host-id: {url}: a directory; a file:// value must name a regular file"
        )
    );
    // The same for an optional key.
    let msg = with_err(&format!("role = {url}"));
    assert_eq!(
        msg,
        format!("/etc/x.cfg:5: role: {url}: a directory; a file:// value must name a regular file")
    );
}

#[test]
fn message_file_missing_required() {
    // A missing file for a required key: "<key> not specified", with the reason.
    let e = err("[zkdeployment]\nhost-id = h1\n\nrun-directory = file:///nope\n");
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:4: run-directory not specified (file:///nope: No such file or directory (os error 2))"
    );
    assert!(matches!(e, ConfigError::NotSpecified { .. }));
    // The packaged host-id = file:///etc/zkdeployment/host-id before anyone writes the file:
    // the host name.
    let c = ok("[zkdeployment]\nrun-directory = /r\nhost-name = h9\nhost-id = file:///nope\n");
    assert_eq!(c.host_id, "h9");
}

#[test]
fn message_http_500() {
    let url = format!("{}/boom", server());
    let e = http_parse(&format!(
        "[zkdeployment]\nrun-directory = /r\n\nhost-id = {url}\n"
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("/etc/x.cfg:4: host-id: cannot fetch the value now: {url}: unexpected response code 500")
    );
}

#[test]
fn message_syntax() {
    let e = err("[zkdeployment]\ngarbage\nhost-id = h1\n");
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:2: line is not `key = value`: 'garbage'"
    );
    assert_eq!(e.line(), Some(2));
}

// -------------------------------------------------------------------------------------------
// INI rules

#[test]
fn minimal_config_and_defaults() {
    let c = ok(BASE);
    assert_eq!(c.path, PathBuf::from(CFG));
    assert_eq!(c.host_id, "h1");
    assert_eq!(c.run_directory, PathBuf::from("/var/run/zkdeployment"));
    assert_eq!(c.role, None);
    assert_eq!(c.after, None);
    assert_eq!(c.zookeeper, None);
    assert!(c.zookeeper_auth.is_none());
    assert_eq!(c.session_timeout, Duration::from_secs(10));
    assert_eq!(c.root, PathBuf::from("/"));
    assert_eq!(c.host_name, fqdn());
    assert_eq!(c.yum, "yum");
    assert!(c.mail_to.is_empty());
    assert_eq!(c.mail_from, format!("zkdeployment@{}", fqdn()));
    assert_eq!(c.smtp, None);
    assert_eq!(c.sendmail, PathBuf::from("/usr/sbin/sendmail"));
    assert_eq!(c.metrics_file, None);
}

#[test]
fn colon_separator_comments_and_other_sections() {
    let c = ok("# top comment\n\
         ; another\n\
         [other]\n\
         anything = goes\n\
         host-id = not-this-one\n\
         [zkdeployment]\n\
         host-id: h7\n\
         \x20  # indented comment\n\
         run-directory=/r\n\
         after = env A=b cmd\n\
         yum = dnf # not a comment\n\
         [tail]\n\
         role = x\n");
    assert_eq!(c.host_id, "h7");
    assert_eq!(c.run_directory, PathBuf::from("/r"));
    assert_eq!(
        c.after,
        Some(vec![
            "env".to_string(),
            "A=b".to_string(),
            "cmd".to_string()
        ])
    );
    assert_eq!(c.yum, "dnf # not a comment");
    // No inline comments: "a # b" has whitespace, so it is not a plain name.
    let e = err("[zkdeployment]\nhost-id = h1\nrun-directory = /r\nrole = a # b\n");
    assert_names(&e.to_string(), "role");
}

#[test]
fn first_separator_splits() {
    let c = with("zookeeper = zk1:2181,zk2:2181/chroot");
    assert_eq!(c.zookeeper.as_deref(), Some("zk1:2181,zk2:2181/chroot"));
    let c = with("zookeeper: zk1:2181");
    assert_eq!(c.zookeeper.as_deref(), Some("zk1:2181"));
}

#[test]
fn keys_are_case_sensitive() {
    let e = err("[zkdeployment]\nHost-Id = h1\nrun-directory = /r\n");
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:2: unknown key 'Host-Id' in [zkdeployment]"
    );
    // The section name too.
    assert_eq!(
        err("[ZKDeployment]\nhost-id = h1\n").to_string(),
        "/etc/x.cfg: no [zkdeployment] section"
    );
}

#[test]
fn duplicate_key_and_section() {
    let e = err("[zkdeployment]\nhost-id = a\nrun-directory = /r\nhost-id = b\n");
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:4: duplicate key 'host-id' in [zkdeployment] (first on line 2)"
    );
    let e = err("[zkdeployment]\nhost-id = a\n[zkdeployment]\nrun-directory = /r\n");
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:3: duplicate [zkdeployment] section (first on line 1)"
    );
    // Duplicates in other sections are not our business.
    ok(&format!("[other]\na = 1\na = 2\n{BASE}"));
}

#[test]
fn key_before_any_section() {
    let e = err(&format!("host-id = h1\n{BASE}"));
    assert_eq!(
        e.to_string(),
        "/etc/x.cfg:1: `key = value` line before any [section]"
    );
}

#[test]
fn syntax_errors_anywhere() {
    assert_eq!(
        err(&format!("{BASE}[other]\nnot a pair\n")).to_string(),
        "/etc/x.cfg:5: line is not `key = value`: 'not a pair'"
    );
    assert_eq!(
        err(&format!("{BASE}= value\n")).to_string(),
        "/etc/x.cfg:4: line is not `key = value`: '= value'"
    );
    // Control characters are escaped in the echo.
    assert_eq!(
        err(&format!("{BASE}bad\x07line\n")).to_string(),
        "/etc/x.cfg:4: line is not `key = value`: 'bad\\u{7}line'"
    );
}

#[test]
fn crlf_and_bom() {
    let c =
        ok("\u{feff}[zkdeployment]\r\nhost-id = h1\r\nrun-directory = /r\r\nafter = a\r\n  b\r\n");
    assert_eq!(c.host_id, "h1");
    assert_eq!(c.after, Some(vec!["a".to_string(), "b".to_string()]));
}

#[test]
fn continuation_lines() {
    let c = ok("[zkdeployment]\nhost-id = h1\nrun-directory = /r\nmail-to = a@x.org,\n   b@y.org\n\n   , c@z.org\nrole = r\n");
    assert_eq!(c.mail_to, vec!["a@x.org", "b@y.org", "c@z.org"]);
    assert_eq!(c.role.as_deref(), Some("r"));
    // An empty first line continued: the value starts with the continuation.
    let c = ok("[zkdeployment]\nhost-id =\n  h9\nrun-directory = /r\n");
    assert_eq!(c.host_id, "h9");
    // Continuations of keys in other sections are ignored.
    let c =
        ok("[other]\nx = 1\n  host-id = nope\n[zkdeployment]\nhost-id = h1\nrun-directory = /r\n");
    assert_eq!(c.host_id, "h1");
}

#[test]
fn invalid_utf8_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.cfg");
    std::fs::write(
        &path,
        b"[zkdeployment]\nhost-id = h1\nrun-directory = /r\nrole = \xff\xfe\n",
    )
    .unwrap();
    let e = load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}:4: invalid UTF-8", path.display())
    );
}

#[test]
fn load_reads_a_real_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.cfg");
    std::fs::write(
        &path,
        "[zkdeployment]\nhost-id = h1\nrun-directory = run\nhost-name = h1.example.com\n",
    )
    .unwrap();
    let c = load(&path).unwrap();
    assert_eq!(c.path, path);
    assert_eq!(c.run_directory, dir.path().join("run"));
}

#[test]
fn error_accessors() {
    let e = err("[zkdeployment]\nhost-id = h1\nrun-directory = /r\nroot = rel\n");
    assert_eq!(e.path(), Path::new(CFG));
    assert_eq!(e.key(), Some("root"));
    assert_eq!(e.line(), Some(4));
}

// -------------------------------------------------------------------------------------------
// Keys

#[test]
fn host_id() {
    assert_eq!(
        ok("[zkdeployment]\nhost-id = app:1\nrun-directory = /r\n").host_id,
        "app:1"
    );
    assert_eq!(
        ok("[zkdeployment]\nhost-id = 42\nrun-directory = /r\n").host_id,
        "42"
    );
    for bad in ["a/b", "a b", ".", ".."] {
        let e = err(&format!(
            "[zkdeployment]\nhost-id = {bad}\nrun-directory = /r\n"
        ));
        let msg = e.to_string();
        assert!(
            msg.starts_with("/etc/x.cfg:2: host-id: expected a plain name"),
            "{msg}"
        );
        assert!(msg.contains(&format!("got '{bad}'")), "{msg}");
    }
    // A control character in a value.
    let e = err("[zkdeployment]\nhost-id = a\x01b\nrun-directory = /r\n");
    assert_names(&e.to_string(), "host-id");
}

#[test]
fn run_directory() {
    assert_eq!(
        ok("[zkdeployment]\nhost-id = h\nrun-directory = /abs/run\n").run_directory,
        PathBuf::from("/abs/run")
    );
    // Relative: against the configuration file's directory.
    assert_eq!(
        ok("[zkdeployment]\nhost-id = h\nrun-directory = run/zk\n").run_directory,
        PathBuf::from("/etc/run/zk")
    );
    let c = parse(
        Path::new("agent.cfg"),
        "[zkdeployment]\nhost-id = h\nrun-directory = run\n",
        &no_fetch,
    )
    .unwrap();
    assert_eq!(c.run_directory, PathBuf::from("run"));
}

#[test]
fn role() {
    assert_eq!(
        with("role = db:primary").role.as_deref(),
        Some("db:primary")
    );
    assert_eq!(with("role =").role, None);
    assert_eq!(with("").role, None);
    let msg = with_err("role = a/b");
    assert!(
        msg.starts_with("/etc/x.cfg:5: role: expected a plain name"),
        "{msg}"
    );
    assert_names(&with_err("role = .."), "role");
}

#[test]
fn after_examples_of_the_original() {
    assert_eq!(with("after = true").after, Some(vec!["true".to_string()]));
    let c = with("after = echo\n    'spoons are round' \n\n \"just 'cuz they are \" ");
    assert_eq!(
        c.after,
        Some(vec![
            "echo".to_string(),
            "spoons are round".to_string(),
            "just 'cuz they are ".to_string()
        ])
    );
    let c = with("after = echo ' \n    this is long text'");
    assert_eq!(
        c.after,
        Some(vec!["echo".to_string(), "\nthis is long text".to_string()])
    );
    assert_eq!(with("after =").after, None);
}

#[test]
fn after_bad_quote() {
    let msg = with_err("after = echo 'unterminated");
    assert_eq!(
        msg,
        "/etc/x.cfg:5: after: cannot split into words: missing closing quote"
    );
}

#[test]
fn zookeeper_and_connection_precedence() {
    let c = with("zookeeper = zk1:2181/prefix");
    assert_eq!(c.zookeeper.as_deref(), Some("zk1:2181/prefix"));
    assert_eq!(c.connection(Some("flag:1")), "flag:1");
    assert_eq!(c.connection(None), "zk1:2181/prefix");
    assert_eq!(with("zookeeper =").zookeeper, None);
    assert_names(&with_err("zookeeper = zk1 :2181"), "zookeeper");

    assert_eq!(
        resolve_connection(Some("a:1"), Some("b:2"), Some("c:3")),
        "a:1"
    );
    assert_eq!(resolve_connection(None, Some("b:2"), Some("c:3")), "b:2");
    assert_eq!(resolve_connection(None, None, Some("c:3")), "c:3");
    assert_eq!(resolve_connection(None, None, Some("")), "zookeeper:2181");
    assert_eq!(resolve_connection(None, None, None), "zookeeper:2181");
}

#[test]
fn zookeeper_auth_is_secret() {
    let c = with("zookeeper-auth = deployer:s3cr3t-pw");
    let auth = c.zookeeper_auth.as_ref().unwrap();
    assert_eq!(auth.expose(), "deployer:s3cr3t-pw");
    assert_eq!(format!("{auth:?}"), "<redacted>");
    assert_eq!(format!("{auth}"), "<redacted>");
    let debug = format!("{c:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
    assert_eq!(format!("{:?}", Secret::new("x:y")), "<redacted>");

    // A bad value is reported without echoing it.
    let msg = with_err("zookeeper-auth = nocolon-s3cr3t");
    assert!(
        msg.starts_with("/etc/x.cfg:5: zookeeper-auth: expected"),
        "{msg}"
    );
    assert!(!msg.contains("s3cr3t"), "{msg}");
    let msg = with_err("zookeeper-auth = :s3cr3t");
    assert!(!msg.contains("s3cr3t"), "{msg}");
    // A malformed line mentioning it is not echoed either.
    let msg = with_err("zookeeper-auth deployer s3cr3t");
    assert!(
        msg.starts_with("/etc/x.cfg:5: line is not `key = value`"),
        "{msg}"
    );
    assert!(!msg.contains("s3cr3t"), "{msg}");
    let msg = with_err("zookeeper-auth user:s3cr3t");
    assert!(msg.contains("unknown key"), "{msg}");
    assert!(!msg.contains("s3cr3t"), "{msg}");
}

#[test]
fn zookeeper_auth_from_file_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auth");
    std::fs::write(&file, "deployer:pw-from-file\n").unwrap();
    let c = with(&format!("zookeeper-auth = file://{}", file.display()));
    assert_eq!(c.zookeeper_auth.unwrap().expose(), "deployer:pw-from-file");

    let text = format!(
        "{BASE}host-name = h\nzookeeper-auth = {}/ok/deployer:pw-from-http\n",
        server()
    );
    let c = http_parse(&text).unwrap();
    assert_eq!(c.zookeeper_auth.unwrap().expose(), "deployer:pw-from-http");

    // Userinfo in a URL never shows up in an error.
    let e = parse(
        Path::new(CFG),
        &format!("{BASE}host-name = h\nzookeeper-auth = http://user:pw123@127.0.0.1:1/x\n"),
        &|_| Err(FetchError::Unreachable("refused".to_string())),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains("pw123"), "{msg}");
    assert!(msg.contains("http://<redacted>@127.0.0.1:1/x"), "{msg}");
}

#[test]
fn session_timeout() {
    assert_eq!(
        with("session-timeout = 30").session_timeout,
        Duration::from_secs(30)
    );
    assert_eq!(
        with("session-timeout = 2.5").session_timeout,
        Duration::from_millis(2500)
    );
    assert_eq!(
        with("session-timeout = .5").session_timeout,
        Duration::from_millis(500)
    );
    assert_eq!(
        with("session-timeout = 3.").session_timeout,
        Duration::from_secs(3)
    );
    assert_eq!(
        with("session-timeout =").session_timeout,
        Duration::from_secs(10)
    );
    for bad in [
        "0", "0.0", "-1", "abc", "1e3", "inf", "NaN", ".", "1.2.3", "+5", "10s",
    ] {
        assert_eq!(
            with_err(&format!("session-timeout = {bad}")),
            format!("/etc/x.cfg:5: session-timeout: expected seconds > 0, got '{bad}'")
        );
    }
    let msg = with_err("session-timeout = 99999999999");
    assert!(
        msg.starts_with("/etc/x.cfg:5: session-timeout: expected seconds > 0 and at most"),
        "{msg}"
    );
}

#[test]
fn root() {
    assert_eq!(
        with("root = /srv/staging").root,
        PathBuf::from("/srv/staging")
    );
    assert_eq!(with("root =").root, PathBuf::from("/"));
    assert_eq!(
        with_err("root = srv"),
        "/etc/x.cfg:5: root: expected an absolute path, got 'srv'"
    );
}

#[test]
fn host_name() {
    assert_eq!(with("").host_name, "h1.example.com");
    let c = ok(&format!("{BASE}host-name =\n"));
    assert_eq!(c.host_name, fqdn());
    let e = err(&format!("{BASE}host-name = a b\n"));
    assert!(e
        .to_string()
        .starts_with("/etc/x.cfg:4: host-name: expected a plain name"));
    assert_names(
        &err(&format!("{BASE}host-name = x/y\n")).to_string(),
        "host-name",
    );
}

#[test]
fn fqdn_is_sane() {
    let name = fqdn();
    assert!(!name.is_empty());
    assert!(!name.contains(char::is_whitespace), "{name:?}");
    let host = nix::unistd::gethostname().unwrap();
    let host = host.to_string_lossy();
    // Either the canonical name (with a dot) or the plain host name.
    assert!(name == host || name.contains('.'), "{name:?} vs {host:?}");
}

#[test]
fn yum() {
    assert_eq!(with("yum = /usr/bin/dnf").yum, "/usr/bin/dnf");
    assert_eq!(with("yum =").yum, "yum");
}

#[test]
fn mail_to() {
    assert_eq!(
        with("mail-to = ops@example.com, dev@example.com,, ").mail_to,
        vec!["ops@example.com", "dev@example.com"]
    );
    assert!(with("mail-to =").mail_to.is_empty());
    assert_eq!(
        with_err("mail-to = ops@example.com, nobody"),
        "/etc/x.cfg:5: mail-to: expected comma-separated mail addresses, got 'nobody'"
    );
    assert_names(&with_err("mail-to = a b@example.com"), "mail-to");
}

#[test]
fn mail_from() {
    assert_eq!(with("").mail_from, "zkdeployment@h1.example.com");
    assert_eq!(
        with("mail-from = agent@example.com").mail_from,
        "agent@example.com"
    );
    assert_eq!(
        with_err("mail-from = agent"),
        "/etc/x.cfg:5: mail-from: expected a mail address, got 'agent'"
    );
}

#[test]
fn smtp() {
    let smtp = |tls, host: &str, port| {
        Some(Smtp {
            tls,
            host: host.to_string(),
            port,
        })
    };
    assert_eq!(with("smtp = smtp://mail").smtp, smtp(false, "mail", 25));
    assert_eq!(
        with("smtp = smtp://mail.example.com:587").smtp,
        smtp(false, "mail.example.com", 587)
    );
    assert_eq!(with("smtp = smtps://mail").smtp, smtp(true, "mail", 465));
    assert_eq!(
        with("smtp = smtps://mail:2465/").smtp,
        smtp(true, "mail", 2465)
    );
    assert_eq!(with("smtp = smtp://[::1]:26").smtp, smtp(false, "::1", 26));
    assert_eq!(with("smtp = smtp://[::1]").smtp, smtp(false, "::1", 25));
    assert_eq!(with("smtp =").smtp, None);
    for bad in [
        "mail",
        "ftp://mail",
        "smtp://",
        "smtp://:25",
        "smtp://mail:0",
        "smtp://mail:x",
        "smtp://mail:70000",
        "smtp://mail:+25",
        "smtp://mail/path",
        "smtp://[::1",
        "smtp://[]:25",
        "smtp://mail:25:26",
    ] {
        let msg = with_err(&format!("smtp = {bad}"));
        assert!(
            msg.starts_with(
                "/etc/x.cfg:5: smtp: expected smtp://HOST[:PORT] or smtps://HOST[:PORT]"
            ),
            "{bad}: {msg}"
        );
    }
    // Credentials in the URL are refused without being shown.
    let msg = with_err("smtp = smtp://user:pw999@mail");
    assert!(!msg.contains("pw999"), "{msg}");
}

#[test]
fn sendmail() {
    assert_eq!(
        with("sendmail = /usr/lib/sendmail").sendmail,
        PathBuf::from("/usr/lib/sendmail")
    );
    assert_eq!(
        with("sendmail =").sendmail,
        PathBuf::from("/usr/sbin/sendmail")
    );
}

#[test]
fn metrics_file() {
    assert_eq!(
        with("metrics-file = /var/lib/node_exporter/zkdeployment.prom").metrics_file,
        Some(PathBuf::from("/var/lib/node_exporter/zkdeployment.prom"))
    );
    assert_eq!(
        with("metrics-file = m.prom").metrics_file,
        Some(PathBuf::from("/etc/m.prom"))
    );
    assert_eq!(with("metrics-file =").metrics_file, None);
}

#[test]
fn every_key_is_accepted() {
    let c = ok("[zkdeployment]\n\
         host-id = h1\n\
         run-directory = /r\n\
         role = web\n\
         after = /bin/true --flag\n\
         zookeeper = zk:2181\n\
         zookeeper-auth = u:p\n\
         session-timeout = 15\n\
         root = /tmp/root\n\
         host-name = h1.example.com\n\
         yum = dnf\n\
         mail-to = a@example.com\n\
         mail-from = z@example.com\n\
         smtp = smtp://mx\n\
         sendmail = /bin/sendmail\n\
         metrics-file = /m.prom\n");
    assert_eq!(c.role.as_deref(), Some("web"));
    assert_eq!(
        c.after,
        Some(vec!["/bin/true".to_string(), "--flag".to_string()])
    );
    assert_eq!(c.session_timeout, Duration::from_secs(15));
    assert_eq!(c.root, PathBuf::from("/tmp/root"));
    assert_eq!(c.yum, "dnf");
    assert_eq!(c.mail_to, vec!["a@example.com"]);
    assert_eq!(c.mail_from, "z@example.com");
    assert_eq!(c.sendmail, PathBuf::from("/bin/sendmail"));
    assert_eq!(c.metrics_file, Some(PathBuf::from("/m.prom")));
    assert_eq!(c.zookeeper_auth.unwrap().expose(), "u:p");
}

// -------------------------------------------------------------------------------------------
// Value indirection

#[test]
fn non_url_values_with_colons_are_plain() {
    let c = ok(
        "[zkdeployment]\nhost-id = app:1\nrun-directory = /r\nrole = db:primary\nhost-name = h\n",
    );
    assert_eq!(c.host_id, "app:1");
    assert_eq!(c.role.as_deref(), Some("db:primary"));
    // Only file:, http: and https: are fetched: the fetcher must not be called for these.
    let c = parse(
        Path::new(CFG),
        "[zkdeployment]\nhost-id = ec2:i-123\nrun-directory = /r\nrole = x-y:z\nhost-name = h\n",
        &|url| panic!("fetched {url}"),
    )
    .unwrap();
    assert_eq!(c.host_id, "ec2:i-123");
}

#[test]
fn file_values() {
    let dir = tempfile::tempdir().unwrap();
    let id = dir.path().join("host id");
    std::fs::write(&id, "\n  from-file  \n\n").unwrap();
    let role = dir.path().join("role");
    std::fs::write(&role, "db\n").unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "  \n").unwrap();
    let missing = dir.path().join("missing");

    // Required, present (a path with a space is fine).
    let c = ok(&format!(
        "[zkdeployment]\nhost-id = file://{}\nrun-directory = /r\nhost-name = h\n",
        id.display()
    ));
    assert_eq!(c.host_id, "from-file");
    // Missing: the host name.
    let c = ok(&format!(
        "[zkdeployment]\nhost-id = file://{}\nrun-directory = /r\nhost-name = h\n",
        missing.display()
    ));
    assert_eq!(c.host_id, "h");
    // Required, missing: not specified.
    let e = err(&format!(
        "[zkdeployment]\nhost-id = h\nrun-directory = file://{}\n",
        missing.display()
    ));
    assert!(matches!(e, ConfigError::NotSpecified { .. }));
    assert_eq!(
        e.to_string(),
        format!(
            "/etc/x.cfg:3: run-directory not specified (file://{}: No such file or directory (os error 2))",
            missing.display()
        )
    );
    // Required, empty file: not specified.
    let e = err(&format!(
        "[zkdeployment]\nhost-id = h\nrun-directory = file://{}\n",
        empty.display()
    ));
    assert_eq!(e.to_string(), "/etc/x.cfg:3: run-directory not specified");

    // Optional, present.
    assert_eq!(
        with(&format!("role = file://{}", role.display()))
            .role
            .as_deref(),
        Some("db")
    );
    // Optional, missing or empty: as if unset.
    assert_eq!(
        with(&format!("role = file://{}", missing.display())).role,
        None
    );
    assert_eq!(
        with(&format!("role = file://{}", empty.display())).role,
        None
    );
    assert_eq!(
        with(&format!("session-timeout = file://{}", missing.display())).session_timeout,
        Duration::from_secs(10)
    );
    // Fetched content is validated like a literal value.
    let msg = with_err(&format!("root = file://{}", role.display()));
    assert_eq!(
        msg,
        "/etc/x.cfg:5: root: expected an absolute path, got 'db'"
    );
    // file://localhost/PATH works; a relative file URL is an error.
    assert_eq!(
        with(&format!("role = file://localhost{}", role.display()))
            .role
            .as_deref(),
        Some("db")
    );
    let msg = with_err("role = file://etc/role");
    assert_eq!(
        msg,
        "/etc/x.cfg:5: role: file://etc/role: expected file:///ABSOLUTE/PATH"
    );
}

#[test]
fn file_value_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bin");
    std::fs::write(&f, b"\xff\xfe").unwrap();
    let msg = with_err(&format!("role = file://{}", f.display()));
    assert_eq!(
        msg,
        format!("/etc/x.cfg:5: role: file://{}: invalid UTF-8", f.display())
    );
}

#[test]
fn http_get_directly() {
    let base = server();
    assert_eq!(
        http_get(&format!("{base}/ok/hello")),
        Ok(Some("hello".to_string()))
    );
    assert_eq!(http_get(&format!("{base}/missing")), Ok(None));
    assert_eq!(
        http_get(&format!("{base}/error")),
        Err(FetchError::Unreachable(
            "unexpected response code 500".to_string()
        ))
    );
    // Nothing listens on port 1.
    assert!(matches!(
        http_get("http://127.0.0.1:1/"),
        Err(FetchError::Unreachable(_))
    ));
}

#[test]
fn http_values_required() {
    let base = server();
    let text =
        |v: &str| format!("[zkdeployment]\nhost-id = {v}\nrun-directory = /r\nhost-name = h\n");
    // 200: the stripped body.
    let c = http_parse(&text(&format!("{base}/ok/i-0abc"))).unwrap();
    assert_eq!(c.host_id, "i-0abc");
    // 404: unset, so the host name.
    let url = format!("{base}/missing");
    assert_eq!(http_parse(&text(&url)).unwrap().host_id, "h");
    // 404 for the required run-directory: not specified, saying why.
    let e = http_parse(&format!(
        "[zkdeployment]\nhost-id = h\nrun-directory = {url}\n"
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("/etc/x.cfg:3: run-directory not specified ({url}: 404 Not Found)")
    );
    // 500: an error.
    let url = format!("{base}/error");
    assert_eq!(
        http_parse(&text(&url)).unwrap_err().to_string(),
        format!("/etc/x.cfg:2: host-id: cannot fetch the value now: {url}: unexpected response code 500")
    );
    // Unreachable: an error naming the key.
    let e = http_parse(&text("http://127.0.0.1:1/x")).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "/etc/x.cfg:2: host-id: cannot fetch the value now: http://127.0.0.1:1/x: "
        ),
        "{msg}"
    );
}

#[test]
fn http_values_optional() {
    let base = server();
    let text = |v: &str| format!("{BASE}host-name = h\nrole = {v}\n");
    assert_eq!(
        http_parse(&text(&format!("{base}/ok/web")))
            .unwrap()
            .role
            .as_deref(),
        Some("web")
    );
    assert_eq!(
        http_parse(&text(&format!("{base}/missing"))).unwrap().role,
        None
    );
    let url = format!("{base}/error");
    assert_eq!(
        http_parse(&text(&url)).unwrap_err().to_string(),
        format!(
            "/etc/x.cfg:5: role: cannot fetch the value now: {url}: unexpected response code 500"
        )
    );
}

#[test]
fn http_value_through_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.cfg");
    std::fs::write(
        &path,
        format!(
            "[zkdeployment]\nhost-id = {}/ok/loaded\nrun-directory = /r\nhost-name = h\n",
            server()
        ),
    )
    .unwrap();
    assert_eq!(load(&path).unwrap().host_id, "loaded");
}

#[test]
fn url_with_whitespace_is_an_error() {
    let msg = with_err("role = http://example.com/a\n  b");
    assert!(msg.starts_with("/etc/x.cfg:5: role: "), "{msg}");
    assert!(msg.contains("cannot contain whitespace"), "{msg}");
}

// -------------------------------------------------------------------------------------------
// Robustness

fn ini_line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("host-id"),
        Just("run-directory"),
        Just("role"),
        Just("after"),
        Just("zookeeper"),
        Just("zookeeper-auth"),
        Just("session-timeout"),
        Just("root"),
        Just("host-name"),
        Just("mail-to"),
        Just("mail-from"),
        Just("smtp"),
        Just("metrics-file"),
        Just("bogus"),
    ];
    let value = prop_oneof![
        "[ -~]{0,12}",
        Just("http://example.invalid/x".to_string()),
        Just("file:///nonexistent/zkdeployment-test".to_string()),
        Just("smtp://[".to_string()),
        Just("smtps://h:".to_string()),
        Just("'".to_string()),
        Just("1.5".to_string()),
    ];
    prop_oneof![
        (key, prop_oneof![Just(" = "), Just(":"), Just("=")], value)
            .prop_map(|(k, s, v)| format!("{k}{s}{v}")),
        Just("[zkdeployment]".to_string()),
        Just("[other]".to_string()),
        Just("host-name = h".to_string()),
        "[ \t]{1,3}[ -~]{0,10}",
        "[#;][ -~]{0,10}",
        Just(String::new()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn parse_never_panics_on_arbitrary_text(text in any::<String>()) {
        if !text.contains("file://") {
            let _ = parse(Path::new(CFG), &text, &no_fetch);
        }
    }

    #[test]
    fn parse_never_panics_on_ini_like_text(lines in proptest::collection::vec(ini_line(), 0..16)) {
        let text = lines.join("\n");
        match parse(Path::new(CFG), &text, &no_fetch) {
            Ok(c) => {
                prop_assert!(!c.host_id.is_empty());
                prop_assert!(c.root.is_absolute());
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with(CFG));
                prop_assert!(!msg.contains('\n'));
            }
        }
    }
}

#[test]
fn tls_keys_are_paths_and_x509_needs_a_certificate() {
    let c = with("zookeeper-tls-ca = tls/ca.pem\nzookeeper-tls-cert = /tls/h1.crt\nzookeeper-tls-key = /tls/h1.key\nzookeeper-auth = x509");
    assert_eq!(
        c.tls.ca,
        Some(PathBuf::from("/etc/tls/ca.pem")),
        "relative to the file's directory"
    );
    assert_eq!(c.tls.cert, Some(PathBuf::from("/tls/h1.crt")));
    assert_eq!(c.tls.key, Some(PathBuf::from("/tls/h1.key")));
    assert!(c.zookeeper_x509 && c.zookeeper_auth.is_none() && c.has_identity());
    let c = with("zookeeper-tls-ca = /tls/ca.pem");
    assert!(c.tls.is_set() && c.tls.cert.is_none() && !c.zookeeper_x509 && !c.has_identity());
    assert!(!with("").tls.is_set());
    let e = with_err("zookeeper-auth = x509");
    assert_names(&e, "zookeeper-auth");
    assert!(e.contains("x509 needs a client certificate"), "{e}");
    let e = with_err("zookeeper-tls-ca = /ca.pem\nzookeeper-tls-cert = /h1.crt");
    assert!(e.contains("needs its key"), "{e}");
    let e = with_err("zookeeper-tls-cert = /h1.crt\nzookeeper-tls-key = /h1.key");
    assert!(e.contains("needs the CA"), "{e}");
}
