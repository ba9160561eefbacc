//! Tests of `zkdeployment::notify`: composing the failure mail, sending it to a real (minimal)
//! SMTP server on 127.0.0.1 and through a stand-in sendmail script, dedup through the state
//! file, output capping, and mail failures that never break the caller.

use crate::support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use zkdeployment::config::{parse, Config};
use zkdeployment::notify::{compose, notify_failure, FailureReport, Mailed, NotifyError};

// The SMTP server (no STARTTLS, no AUTH; stores every message) is tests/support/smtp.rs.
use support::smtp::{Mail, SmtpServer};

// -------------------------------------------------------------------------------------------
// Configuration and reports.

const SECRET: &str = "s3cr3t-pa55word";

fn config(extra: &str) -> Config {
    let text = format!(
        "[zkdeployment]\nhost-id = app01\nrun-directory = /tmp/unused\nhost-name = app01.example.com\n\
         zookeeper-auth = deployer:{SECRET}\n{extra}\n"
    );
    parse(Path::new("/etc/zkdeployment/agent.cfg"), &text, &|_| {
        Ok(None)
    })
    .unwrap_or_else(|e| panic!("{e}\n--- text:\n{text}"))
}

fn smtp_config(port: u16) -> Config {
    config(&format!(
        "mail-to = ops@example.com, oncall@example.org\nmail-from = agent@app01.example.com\n\
         smtp = smtp://127.0.0.1:{port}"
    ))
}

fn report(version: Value, error: &str) -> FailureReport {
    FailureReport {
        host_id: "app01".into(),
        host_name: "app01.example.com".into(),
        version,
        error: error.into(),
        step: Some("deploy /acme/web 0 (webapp 1.4)".into()),
        command: Some(vec![
            "/opt/webapp/bin/zookeeper-deploy".into(),
            "/acme/web".into(),
            "0".into(),
            "it's here".into(),
        ]),
        output: "starting\nconnecting to db\nERROR: db unreachable\n".into(),
        after_hook: false,
    }
}

const RESUME: &str = "    zkdeployment resume\n";
const RESUME_R42: &str = "    zkdeployment resume --version '\"r42\"'\n";

// -------------------------------------------------------------------------------------------
// SMTP

#[tokio::test]
async fn smtp_one_mail_per_distinct_failure() {
    let server = SmtpServer::start();
    let config = smtp_config(server.port);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("last-mail.json");

    let first = report(
        json!("r42"),
        "Command failed: /opt/webapp/bin/zookeeper-deploy",
    );
    assert_eq!(notify_failure(&config, &first, &state).await, Mailed::Sent);
    assert!(state.exists(), "state file not written");
    assert_eq!(server.messages().len(), 1);

    // The same failure again (a retry, or an agent restarted: the state is only in the file).
    assert_eq!(
        notify_failure(&config, &first, &state).await,
        Mailed::Duplicate
    );
    assert_eq!(
        notify_failure(&config, &first.clone(), &state).await,
        Mailed::Duplicate
    );
    assert_eq!(server.messages().len(), 1);

    // A different error: a second mail.
    let second = report(json!("r42"), "Command failed: yum -y install webapp-1.4");
    assert_eq!(notify_failure(&config, &second, &state).await, Mailed::Sent);
    assert_eq!(
        notify_failure(&config, &second, &state).await,
        Mailed::Duplicate
    );
    assert_eq!(server.messages().len(), 2);

    // A different version with the first error: a third mail.
    let third = report(json!("r43"), &first.error);
    assert_eq!(notify_failure(&config, &third, &state).await, Mailed::Sent);
    assert_eq!(server.messages().len(), 3);

    // The state file is small JSON holding the last pair.
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["version"], json!("r43"));
    assert_eq!(saved["error"], json!(first.error));

    // Envelope and content of the first mail.
    let received = &server.messages()[0];
    assert_eq!(received.from, "agent@app01.example.com");
    assert_eq!(received.to, vec!["ops@example.com", "oncall@example.org"]);
    assert!(!received.data.contains(SECRET), "secret leaked");
    let mail = Mail::parse(&received.data);
    assert_eq!(
        mail.header("Subject"),
        Some("zkdeployment: app01.example.com (app01) failed deploying r42")
    );
    let to = mail.header("To").unwrap();
    assert!(to.contains("ops@example.com") && to.contains("oncall@example.org"));
    assert_eq!(mail.header("From"), Some("agent@app01.example.com"));
    assert!(mail
        .header("Content-Type")
        .unwrap()
        .to_ascii_lowercase()
        .starts_with("text/plain; charset=utf-8"));
    assert_eq!(mail.header("Auto-Submitted"), Some("auto-generated"));
    let body = &mail.body;
    assert!(
        body.contains("Command failed: /opt/webapp/bin/zookeeper-deploy"),
        "{body}"
    );
    assert!(
        body.contains("Step: deploy /acme/web 0 (webapp 1.4)"),
        "{body}"
    );
    assert!(
        body.contains("Command: /opt/webapp/bin/zookeeper-deploy /acme/web 0 'it'\\''s here'"),
        "{body}"
    );
    assert!(
        body.contains("connecting to db\nERROR: db unreachable\n"),
        "{body}"
    );
    assert!(body.contains("halted"), "{body}");
    assert!(body.contains(RESUME), "{body}");
    assert!(body.contains(RESUME_R42), "{body}");
    assert!(!body.contains("bytes cut"), "{body}");

    let mail = Mail::parse(&server.messages()[1].data);
    assert!(mail
        .body
        .contains("Command failed: yum -y install webapp-1.4"));
}

#[tokio::test]
async fn smtp_output_is_capped_keeping_the_end() {
    let server = SmtpServer::start();
    let config = smtp_config(server.port);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("last-mail.json");

    let mut output = String::with_capacity(1 << 20);
    let mut n = 0;
    while output.len() < 1 << 20 {
        output.push_str(&format!(
            "line {n:07} of a chatty deploy script, ünïcode too\n"
        ));
        n += 1;
    }
    output.push_str("THE LAST LINE: it broke here\n");
    let mut failure = report(json!(7), "Command failed: deploy");
    failure.output = output.clone();

    assert_eq!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Sent
    );
    let messages = server.messages();
    assert_eq!(messages.len(), 1);
    assert!(
        messages[0].data.len() < 100_000,
        "{} bytes on the wire",
        messages[0].data.len()
    );
    let mail = Mail::parse(&messages[0].data);
    let body = &mail.body;
    assert!(body.len() < 70_000, "body of {} bytes", body.len());
    assert!(body.contains("THE LAST LINE: it broke here\n"));
    assert!(!body.contains("line 0000000 "), "the start was kept");
    assert!(body.contains(&format!("line {:07} of", n - 1)));
    // The cut line says how much was cut, and the output starts at a line after it.
    let cut_line = body
        .lines()
        .find(|l| l.starts_with("[… ") && l.ends_with(" bytes cut …]"))
        .expect("no cut line");
    let cut: usize = cut_line
        .trim_start_matches("[… ")
        .trim_end_matches(" bytes cut …]")
        .parse()
        .unwrap();
    assert!(cut > output.len() - 64 * 1024 && cut < output.len());
    let after = body.split_once(cut_line).unwrap().1;
    assert!(after.starts_with("\nline "), "{:?}", &after[..40]);
    assert!(output.ends_with(&after[1..after.find("\n\nThe cluster").unwrap() + 1]));
    // A number version: unquoted in the subject and in the resume command.
    assert_eq!(
        mail.header("Subject"),
        Some("zkdeployment: app01.example.com (app01) failed deploying 7")
    );
    assert!(
        body.contains("    zkdeployment resume --version 7\n"),
        "{body}"
    );
}

#[tokio::test]
async fn no_recipients_means_no_mail() {
    let server = SmtpServer::start();
    let config = config(&format!("smtp = smtp://127.0.0.1:{}", server.port));
    assert!(config.mail_to.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("last-mail.json");
    let failure = report(json!("r42"), "boom");
    assert_eq!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Disabled
    );
    assert_eq!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Disabled
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.connections(), 0);
    assert!(server.messages().is_empty());
    assert!(!state.exists());
}

#[tokio::test]
async fn unreachable_smtp_server_fails_quickly() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = smtp_config(port);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("last-mail.json");
    let failure = report(json!("r42"), "boom");

    let started = Instant::now();
    let mailed = notify_failure(&config, &failure, &state).await;
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "took {:?}",
        started.elapsed()
    );
    match mailed {
        Mailed::Failed(reason) => {
            assert!(reason.contains(&format!("127.0.0.1:{port}")), "{reason}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    // Not remembered: the next occurrence tries again.
    assert!(!state.exists());
    assert!(matches!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Failed(_)
    ));
}

// -------------------------------------------------------------------------------------------
// sendmail

/// Serializes the tests that write and run scripts: a script written while another thread
/// forks may fail to run with ETXTBSY.
static SCRIPTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn sendmail_gets_the_message_on_stdin() {
    let _guard = SCRIPTS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let args = dir.path().join("args");
    let stdin = dir.path().join("stdin");
    let script = write_script(
        dir.path(),
        "sendmail",
        &format!(
            "printf '%s\\n' \"$@\" > '{}'\ncat > '{}'\n",
            args.display(),
            stdin.display()
        ),
    );
    let config = config(&format!(
        "mail-to = ops@example.com,oncall@example.org\nsendmail = {}",
        script.display()
    ));
    assert!(config.smtp.is_none());
    assert_eq!(config.mail_from, "zkdeployment@app01.example.com");
    let state = dir.path().join("last-mail.json");
    let mut failure = report(json!("r42"), "Command failed: after-hook");
    failure.after_hook = true;
    failure.step = None;

    assert_eq!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Sent
    );
    let args = std::fs::read_to_string(&args).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args,
        vec![
            "-i",
            "-f",
            "zkdeployment@app01.example.com",
            "--",
            "ops@example.com",
            "oncall@example.org"
        ]
    );
    let data = std::fs::read_to_string(&stdin).unwrap();
    assert!(!data.contains(SECRET));
    let mail = Mail::parse(&data);
    assert_eq!(
        mail.header("Subject"),
        Some("zkdeployment: app01.example.com (app01) failed after deploying r42")
    );
    let to = mail.header("To").unwrap();
    assert!(to.contains("ops@example.com") && to.contains("oncall@example.org"));
    assert!(mail.body.contains("after hook"), "{}", mail.body);
    assert!(mail.body.contains("Command failed: after-hook"));
    assert!(!mail.body.contains("Step:"));
    assert!(mail.body.contains(RESUME) && mail.body.contains(RESUME_R42));

    assert_eq!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Duplicate
    );
}

#[tokio::test]
async fn failing_sendmail_is_reported_not_raised() {
    let _guard = SCRIPTS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        dir.path(),
        "sendmail",
        "cat > /dev/null\necho 'sendmail: queue is full' >&2\nexit 1\n",
    );
    let config = config(&format!(
        "mail-to = ops@example.com\nsendmail = {}",
        script.display()
    ));
    let state = dir.path().join("last-mail.json");
    let failure = report(json!("r42"), "boom");
    match notify_failure(&config, &failure, &state).await {
        Mailed::Failed(reason) => assert!(reason.contains("queue is full"), "{reason}"),
        other => panic!("expected Failed, got {other:?}"),
    }
    assert!(!state.exists());

    // A missing command likewise.
    let config = config_with_sendmail(&dir.path().join("no-such-sendmail"));
    assert!(matches!(
        notify_failure(&config, &failure, &state).await,
        Mailed::Failed(_)
    ));
}

fn config_with_sendmail(path: &Path) -> Config {
    config(&format!(
        "mail-to = ops@example.com\nsendmail = {}",
        path.display()
    ))
}

// -------------------------------------------------------------------------------------------
// compose

#[test]
fn compose_rejects_bad_addresses() {
    let failure = report(json!("r42"), "boom");
    assert!(matches!(
        compose(&failure, "not an address", &["a@example.com".into()]),
        Err(NotifyError::Address(_))
    ));
    assert!(matches!(
        compose(&failure, "a@example.com", &["<broken".into()]),
        Err(NotifyError::Address(_))
    ));
    assert!(matches!(
        compose(&failure, "a@example.com", &[]),
        Err(NotifyError::Address(_))
    ));
}

#[test]
fn compose_versions_and_missing_parts() {
    let mut failure = report(json!({"app": "1.4", "n": [1, 2]}), "boom\nsecond line");
    failure.command = None;
    failure.step = None;
    failure.output = String::new();
    let message = compose(&failure, "a@example.com", &["b@example.com".into()]).unwrap();
    let mail = Mail::parse(&String::from_utf8(message.formatted()).unwrap());
    assert_eq!(
        mail.header("Subject"),
        Some(
            "zkdeployment: app01.example.com (app01) failed deploying {'app': '1.4', 'n': [1, 2]}"
        )
    );
    let body = &mail.body;
    assert!(body.contains("    boom\n    second line\n"), "{body}");
    assert!(!body.contains("Command:"));
    assert!(body.contains("Output: none"));
    assert!(
        body.contains("    zkdeployment resume --version '{\"app\":\"1.4\",\"n\":[1,2]}'\n"),
        "{body}"
    );

    // A string that looks like a number stays a string for resume.
    let failure = report(json!("124"), "boom");
    let message = compose(&failure, "a@example.com", &["b@example.com".into()]).unwrap();
    let mail = Mail::parse(&String::from_utf8(message.formatted()).unwrap());
    assert!(mail
        .body
        .contains("    zkdeployment resume --version '\"124\"'\n"));
}
