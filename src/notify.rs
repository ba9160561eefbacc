//! Failure mail (docs/operations.md; the original mailed nothing).
//!
//! # What
//!
//! One plain-text (UTF-8) mail per failure that halts the cluster: the host, the cluster
//! version being deployed, the failure message (the host's `error` property), the step, the
//! failing command (shell-quoted) and the tail of its output (at most [`OUTPUT_LIMIT`] bytes,
//! the end kept), then why the cluster is halted and the exact `zkdeployment resume` commands
//! that end the halt. Nothing else from the configuration goes into it: in particular never
//! `zookeeper-auth`.
//!
//! # When
//!
//! The agent calls [`notify_failure`] after it has recorded a failed step or a failed after
//! hook, if `mail-to` is set (otherwise it does nothing and returns [`Mailed::Disabled`]).
//!
//! # How
//!
//! With `smtp = smtp://HOST[:PORT]`: plain SMTP, no TLS. With `smtps://`: TLS from the start of
//! the connection (rustls, the webpki roots, the certificate checked against HOST). Without
//! `smtp`: the `sendmail` command (`sendmail -i -f FROM -- TO...`, the message on its stdin).
//! A send is bounded by [`SEND_TIMEOUT`] (for sendmail too: the command is killed).
//!
//! # Dedup
//!
//! The pair (cluster version, error message) of the last mail sent is remembered in a small
//! JSON file (the caller passes its path, in the run directory): a failure equal to it is not
//! mailed again ([`Mailed::Duplicate`]), so retries of the same failure, also across agent
//! restarts, send one mail. A different failure is mailed and becomes the remembered one. A
//! mail that could not be sent is not remembered, so the next occurrence tries again.
//! [`forget_failure`] clears the memory (e.g. after a successful pass).
//!
//! # Failures of the mail itself
//!
//! [`notify_failure`] never fails its caller: a bad address, an unreachable server or a failing
//! sendmail is logged with `tracing::warn!` and returned as [`Mailed::Failed`].

use std::path::Path;
use std::time::Duration;

use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::Mailbox;
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSendmailTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::Value;

use crate::config::Config;
use crate::tree::literal::py_str;

/// Most bytes of command output a mail carries (the end is kept).
pub(crate) const OUTPUT_LIMIT: usize = 64 * 1024;
/// Bound on one send: connection, SMTP dialogue or sendmail run.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Most characters of the version text in the subject.
const SUBJECT_VERSION_LIMIT: usize = 200;
/// When the kept output starts mid-line, it is moved to the next line start if one is this close.
const LINE_ALIGN_LIMIT: usize = 1024;

/// What failed, for the mail.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FailureReport {
    pub host_id: String,
    pub host_name: String,
    /// The cluster version being deployed.
    pub version: Value,
    /// The failure message (the host's `error` property).
    pub error: String,
    /// The step, readable (e.g. `deploy /acme/web 0 (webapp 1.4)`).
    pub step: Option<String>,
    /// The failing command's argument vector.
    pub command: Option<Vec<String>>,
    /// The tail of its output.
    pub output: String,
    /// True when the after hook failed (the pass itself succeeded).
    pub after_hook: bool,
}

/// What [`notify_failure`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mailed {
    /// `mail-to` is not set.
    Disabled,
    /// One mail sent.
    Sent,
    /// The same (version, error) was the last failure mailed: nothing sent.
    Duplicate,
    /// The mail could not be composed or sent (already logged); the reason.
    Failed(String),
}

/// Why a mail could not be composed or sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotifyError {
    #[error("bad mail address: {0}")]
    Address(String),
    #[error("cannot build the mail: {0}")]
    Build(String),
    #[error("cannot send the mail: {0}")]
    Send(String),
}

/// The subject: `zkdeployment: <host_name> (<host_id>) failed deploying <version>` (`failed after
/// deploying` for an after hook), the version as Python's `str()` shows it (strings unquoted),
/// control characters replaced by spaces and a long version shortened.
pub(crate) fn subject(report: &FailureReport) -> String {
    let version: String = py_str(&report.version)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let version = match version.char_indices().nth(SUBJECT_VERSION_LIMIT) {
        Some((at, _)) => format!("{}…", &version[..at]),
        None => version,
    };
    let what = if report.after_hook {
        "failed after deploying"
    } else {
        "failed deploying"
    };
    format!(
        "zkdeployment: {} ({}) {what} {version}",
        one_line(&report.host_name),
        one_line(&report.host_id)
    )
}

/// The text of the mail (see the module documentation).
pub(crate) fn body(report: &FailureReport) -> String {
    let version = py_str(&report.version);
    let mut out = String::new();
    if report.after_hook {
        out.push_str(&format!(
            "The after hook failed on {} ({}) after deploying version {version}.\n\n",
            report.host_name, report.host_id
        ));
    } else {
        out.push_str(&format!(
            "zkdeployment failed on {} ({}) deploying version {version}.\n\n",
            report.host_name, report.host_id
        ));
    }

    out.push_str("Error:\n");
    out.push_str(&indent(&report.error));
    out.push('\n');

    if let Some(step) = &report.step {
        out.push_str(&format!("Step: {step}\n"));
    }
    if let Some(command) = &report.command {
        out.push_str(&format!("Command: {}\n", shell_words::join(command)));
    }
    if report.step.is_some() || report.command.is_some() {
        out.push('\n');
    }

    let (tail, cut) = output_tail(&report.output, OUTPUT_LIMIT);
    if tail.trim().is_empty() && cut == 0 {
        out.push_str("Output: none\n\n");
    } else {
        if cut > 0 {
            out.push_str(&format!("Output (the last {} bytes):\n", tail.len()));
            out.push_str(&format!("[… {cut} bytes cut …]\n"));
        } else {
            out.push_str("Output:\n");
        }
        out.push_str(tail);
        if !tail.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }

    out.push_str(
        "The cluster is halted: this host set the cluster version (the `version` of /hosts)\n\
         to null and recorded the failure as the halt. No host deploys anything until an\n\
         operator resumes the cluster; hosts keep running what they have.\n\n",
    );
    let version_arg =
        shell_words::quote(&serde_json::to_string(&report.version).unwrap_or_default())
            .into_owned();
    out.push_str(&format!(
        "After fixing the cause, resume with\n\n    zkdeployment resume\n\n\
         to deploy the last synced revision of the tree, or with\n\n    \
         zkdeployment resume --version {version_arg}\n\n\
         to deploy version {version} again.\n"
    ));
    out
}

/// The message: From `from`, To each of `to`, the [`subject`] and the [`body`] as UTF-8
/// `text/plain`, marked `Auto-Submitted: auto-generated`.
pub fn compose(report: &FailureReport, from: &str, to: &[String]) -> Result<Message, NotifyError> {
    let from: Mailbox = from
        .parse()
        .map_err(|e| NotifyError::Address(format!("mail-from {from:?}: {e}")))?;
    if to.is_empty() {
        return Err(NotifyError::Address("no recipients".into()));
    }
    let mut builder = Message::builder()
        .from(from)
        .subject(subject(report))
        .header(ContentType::TEXT_PLAIN)
        .message_id(None);
    for address in to {
        let mailbox: Mailbox = address
            .parse()
            .map_err(|e| NotifyError::Address(format!("mail-to {address:?}: {e}")))?;
        builder = builder.to(mailbox);
    }
    let mut message = builder
        .body(body(report))
        .map_err(|e| NotifyError::Build(error_chain(&e)))?;
    message.headers_mut().insert_raw(HeaderValue::new(
        HeaderName::new_from_ascii_str("Auto-Submitted"),
        "auto-generated".into(),
    ));
    Ok(message)
}

/// Sends `message` through `config.smtp` (`smtp://`: plain, `smtps://`: implicit TLS), or the
/// `config.sendmail` command when `smtp` is not set, within [`SEND_TIMEOUT`].
pub(crate) async fn send(config: &Config, message: Message) -> Result<(), NotifyError> {
    match tokio::time::timeout(SEND_TIMEOUT, send_unbounded(config, message)).await {
        Ok(result) => result,
        Err(_) => Err(NotifyError::Send(format!(
            "{}: timed out after {} s",
            transport_name(config),
            SEND_TIMEOUT.as_secs()
        ))),
    }
}

async fn send_unbounded(config: &Config, message: Message) -> Result<(), NotifyError> {
    let name = transport_name(config);
    match &config.smtp {
        Some(smtp) => {
            let builder = if smtp.tls {
                AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host)
                    .map_err(|e| NotifyError::Send(format!("{name}: {}", error_chain(&e))))?
            } else {
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host)
            };
            let transport = builder
                .port(smtp.port)
                .timeout(Some(SEND_TIMEOUT))
                .hello_name(ClientId::Domain(config.host_name.clone()))
                .build::<Tokio1Executor>();
            // One connection per message (no pool: a failure mail is rare, and the pool's code
            // would be resident in every agent); lettre says QUIT after it.
            transport
                .send(message)
                .await
                .map(drop)
                .map_err(|e| NotifyError::Send(format!("{name}: {}", error_chain(&e))))
        }
        None => {
            let transport = AsyncSendmailTransport::<Tokio1Executor>::new_with_command(
                config.sendmail.as_os_str(),
            );
            transport
                .send(message)
                .await
                .map_err(|e| NotifyError::Send(format!("{name}: {}", error_chain(&e))))
        }
    }
}

/// Mails `report` to `config.mail_to` unless that is empty or the same (version, error) was the
/// last failure mailed (remembered in `state_file`). Never fails: problems are logged and
/// returned as [`Mailed::Failed`].
pub async fn notify_failure(config: &Config, report: &FailureReport, state_file: &Path) -> Mailed {
    if config.mail_to.is_empty() {
        return Mailed::Disabled;
    }
    if let Some((version, error)) = read_state(state_file) {
        if version == report.version && error == report.error {
            tracing::debug!(
                "failure mail not sent again: version {} error {:?} was mailed already",
                py_str(&report.version),
                report.error
            );
            return Mailed::Duplicate;
        }
    }
    let result = match compose(report, &config.mail_from, &config.mail_to) {
        Ok(message) => send(config, message).await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let reason = e.to_string();
        tracing::warn!("failure mail to {}: {reason}", config.mail_to.join(", "));
        return Mailed::Failed(reason);
    }
    tracing::info!("failure mail sent to {}", config.mail_to.join(", "));
    if let Err(e) = write_state(state_file, &report.version, &report.error) {
        tracing::warn!(
            "cannot record the failure mailed in {}: {e}",
            state_file.display()
        );
    }
    Mailed::Sent
}

/// Forgets the last failure mailed, so that the same failure is mailed again when it recurs
/// (e.g. after a successful pass). A missing file is not an error.
pub(crate) fn forget_failure(state_file: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(state_file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The last `limit` bytes of `output` (starting at a character boundary, and at a line start
/// when one is near) and how many bytes were cut before them.
fn output_tail(output: &str, limit: usize) -> (&str, usize) {
    if output.len() <= limit {
        return (output, 0);
    }
    let mut start = output.len() - limit;
    while !output.is_char_boundary(start) {
        start += 1;
    }
    if start > 0 && output.as_bytes()[start - 1] != b'\n' {
        let window_end = (start + LINE_ALIGN_LIMIT).min(output.len());
        if let Some(nl) = output.as_bytes()[start..window_end]
            .iter()
            .position(|&b| b == b'\n')
        {
            if start + nl + 1 < output.len() {
                start += nl + 1;
            }
        }
    }
    (&output[start..], start)
}

fn indent(text: &str) -> String {
    let text = text.trim_end_matches('\n');
    if text.is_empty() {
        return "    (no message)\n".into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.split('\n') {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn transport_name(config: &Config) -> String {
    match &config.smtp {
        Some(smtp) => {
            let scheme = if smtp.tls { "smtps" } else { "smtp" };
            if smtp.host.contains(':') {
                format!("{scheme}://[{}]:{}", smtp.host, smtp.port)
            } else {
                format!("{scheme}://{}:{}", smtp.host, smtp.port)
            }
        }
        None => config.sendmail.display().to_string(),
    }
}

/// The error and its sources, `: `-separated, without repeating a source already shown.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.trim().to_string()
}

/// The (version, error) of the last mail, if the file holds one.
fn read_state(path: &Path) -> Option<(Value, String)> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}", path.display());
            return None;
        }
    };
    let value: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!("ignoring {}: {e}", path.display());
            return None;
        }
    };
    let version = value.get("version")?.clone();
    let error = value.get("error")?.as_str()?.to_string();
    Some((version, error))
}

/// Replaces the state file atomically (see [`crate::files::write_atomic`]).
fn write_state(path: &Path, version: &Value, error: &str) -> std::io::Result<()> {
    let time = crate::files::now();
    let text = serde_json::json!({ "version": version, "error": error, "time": time }).to_string();
    crate::files::write_atomic(path, (text + "\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        let s = "é".repeat(10);
        let (tail, cut) = output_tail(&s, 5);
        assert_eq!(tail, "éé");
        assert_eq!(cut, 16);
        assert_eq!(output_tail("abc", 5), ("abc", 0));
    }

    #[test]
    fn tail_starts_at_a_line_when_near() {
        let s = "aaaa\nbbbb\ncccc\n";
        let (tail, cut) = output_tail(s, 12);
        assert_eq!(tail, "bbbb\ncccc\n");
        assert_eq!(cut, 5);
    }
}
