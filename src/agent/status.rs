//! The run directory's files: `status` (one line `TIME PID VERSION STATUS`, replaced
//! atomically at every step; read by the monitor; a pass that leaves application nodes
//! undone because they are halted or paused ends with STATUS `blocked PATH...`,
//! [`blocked_status`]), `host_version` (the JSON of the last
//! deployed version) and `last-pass.json` (the report of the last pass).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::plan::Step;
use crate::files::{now, write_atomic, write_replacing};
use crate::tree::literal::py_str;

/// The version as written in the status file: Python's `str()` (`None`, `False`, strings
/// unquoted), with `%` and whitespace percent-encoded so the line always splits into 4 fields.
pub(crate) fn version_token(version: &Value) -> String {
    let mut out = String::new();
    for c in py_str(version).chars() {
        match c {
            '%' => out.push_str("%25"),
            c if c.is_whitespace() || c.is_control() => {
                out.push_str(&format!("%{:02X}", c as u32 & 0xff))
            }
            c => out.push(c),
        }
    }
    if out.is_empty() {
        "''".to_string()
    } else {
        out
    }
}

/// A parsed status line.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusLine {
    /// Unix time of the write.
    pub(crate) time: f64,
    /// The agent's pid.
    pub(crate) pid: u32,
    /// The version token (see [`version_token`]).
    pub(crate) version: String,
    /// The status text (`done`, `error`, or a step).
    pub(crate) status: String,
}

/// The word a blocked pass's status starts with.
pub(crate) const BLOCKED: &str = "blocked";

/// The status of a pass that leaves the application nodes `paths` undone because they are
/// halted or paused (CONTRACT 15): `blocked PATH...`, each path with `%`, whitespace and
/// control characters percent-encoded (`%XX` per UTF-8 byte), so it stays one word.
pub fn blocked_status(paths: &[&str]) -> String {
    let mut out = BLOCKED.to_string();
    for path in paths {
        out.push(' ');
        for c in path.chars() {
            if c == '%' || c.is_whitespace() || c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            } else {
                out.push(c);
            }
        }
    }
    out
}

/// A word of [`blocked_status`] decoded (`None` if malformed).
fn decode_path(word: &str) -> Option<String> {
    let bytes = word.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = word.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl StatusLine {
    /// The application nodes a `blocked` status names ([`blocked_status`]); `None` for any
    /// other status.
    pub(crate) fn blocked(&self) -> Option<Vec<String>> {
        let mut words = self.status.split_whitespace();
        if words.next() != Some(BLOCKED) {
            return None;
        }
        Some(words.filter_map(decode_path).collect())
    }
}

/// Formats a status line.
pub fn format_status(time: f64, pid: u32, version: &Value, status: &str) -> String {
    let status: String = status
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{time:.2} {pid} {} {status}", version_token(version))
}

/// Parses a status line (split on whitespace at most 3 times).
pub fn parse_status(text: &str) -> Result<StatusLine, String> {
    let line = text.lines().next().unwrap_or("").trim();
    let mut parts = line.splitn(4, char::is_whitespace);
    let (Some(t), Some(p), Some(v), Some(s)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed status line: {line:?}"));
    };
    let time: f64 = t
        .parse()
        .map_err(|_| format!("malformed time in status line: {t:?}"))?;
    if !time.is_finite() {
        return Err(format!("malformed time in status line: {t:?}"));
    }
    let pid: u32 = p
        .parse()
        .map_err(|_| format!("malformed pid in status line: {p:?}"))?;
    Ok(StatusLine {
        time,
        pid,
        version: v.to_string(),
        status: s.trim().to_string(),
    })
}

/// One step of a pass report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct StepReport {
    /// The step's action (`deploy`, `install`, …).
    pub(crate) action: String,
    /// The step, readable.
    pub(crate) step: String,
    /// The command run last for it (argv), if any.
    pub(crate) command: Vec<String>,
    /// Its exit status, if it ran.
    pub(crate) exit: Option<i32>,
    /// Seconds.
    pub(crate) duration: f64,
    /// The tail of its output.
    pub(crate) output: String,
}

impl StepReport {
    /// A new entry for `step`, before it runs.
    pub(crate) fn of(step: &Step) -> StepReport {
        StepReport {
            action: step.action(),
            step: step.to_string(),
            command: Vec::new(),
            exit: None,
            duration: 0.0,
            output: String::new(),
        }
    }
}

/// How a pass ended, as `last-pass.json` says it.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReportOutcome {
    /// Every step ran.
    Done,
    /// A step failed; the cluster is halted.
    Error,
    /// Stopped early on purpose, or ZooKeeper failed.
    Abandoned,
}

/// The report of a pass (`last-pass.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Report {
    /// The cluster version deployed.
    pub(crate) version: Value,
    /// `done`, `error` or `abandoned`.
    pub(crate) outcome: ReportOutcome,
    /// Unix times.
    pub(crate) started: f64,
    /// Unix times.
    pub(crate) finished: f64,
    /// The steps run, in order: the plan's steps, up to the one that failed (deployments
    /// under node locks may run in another order when a node is busy).
    pub(crate) steps: Vec<StepReport>,
    /// The failure or abandonment message, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// How discovery found the deploy nodes (absent if the pass stopped before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) discovery: Option<super::discover::DiscoveryReport>,
}

/// The run directory.
#[derive(Debug, Clone)]
pub(crate) struct RunDir {
    dir: PathBuf,
}

impl RunDir {
    /// Opens (creating it if missing) the run directory.
    pub(crate) fn open(dir: &Path) -> std::io::Result<RunDir> {
        if let Ok(meta) = std::fs::metadata(dir) {
            if !meta.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{}: not a directory (a file is in the way)", dir.display()),
                ));
            }
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        Ok(RunDir {
            dir: dir.to_path_buf(),
        })
    }

    /// The run directory as it is, not created if missing (for a dry run, which changes
    /// nothing).
    pub(crate) fn existing(dir: &Path) -> RunDir {
        RunDir {
            dir: dir.to_path_buf(),
        }
    }

    /// The status file.
    pub(crate) fn status_path(&self) -> PathBuf {
        self.dir.join("status")
    }

    /// The report file.
    pub(crate) fn report_path(&self) -> PathBuf {
        self.dir.join("last-pass.json")
    }

    /// The `host_version` file.
    pub(crate) fn host_version_path(&self) -> PathBuf {
        self.dir.join("host_version")
    }

    /// `host_version`: the last deployed version (`None` if missing or unreadable).
    pub(crate) fn host_version(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.dir.join("host_version")).ok()?;
        match serde_json::from_str(text.lines().next().unwrap_or("").trim()) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!("ignoring a malformed host_version file: {e}");
                None
            }
        }
    }

    /// Records the deployed version.
    pub(crate) fn set_host_version(&self, version: &Value) -> std::io::Result<()> {
        write_replacing(
            &self.dir.join("host_version"),
            version.to_string().as_bytes(),
            true,
        )
    }

    /// Rewrites the status file.
    pub(crate) fn set_status(&self, version: &Value, status: &str) -> std::io::Result<()> {
        let line = format_status(now(), std::process::id(), version, status);
        write_replacing(&self.status_path(), line.as_bytes(), false)
    }

    /// Writes `last-pass.json`, durably.
    pub(crate) fn write_report(&self, report: &Report) -> std::io::Result<()> {
        write_atomic(&self.report_path(), &report_text(report))
    }

    /// Writes `last-pass.json` without syncing it: the report so far, written before the
    /// pass's final status (so that whoever sees that status finds the report), which the
    /// executor writes again, durably, once the pass has ended. A crash in between loses it
    /// with the status file, which is never synced either.
    pub(crate) fn write_report_draft(&self, report: &Report) -> std::io::Result<()> {
        write_replacing(&self.report_path(), &report_text(report), false)
    }
}

/// `last-pass.json`'s text: the report as indented JSON, with a final newline.
fn report_text(report: &Report) -> Vec<u8> {
    let mut text = serde_json::to_vec_pretty(report).expect("a report serialises");
    text.push(b'\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_lines_round_trip() {
        let line = format_status(
            1422556800.123,
            42,
            &json!("deadbeef"),
            "deploying /a 0 (x 1)",
        );
        assert_eq!(line, "1422556800.12 42 deadbeef deploying /a 0 (x 1)");
        let parsed = parse_status(&line).unwrap();
        assert_eq!(parsed.version, "deadbeef");
        assert_eq!(parsed.status, "deploying /a 0 (x 1)");
        assert_eq!(version_token(&json!(null)), "None");
        assert_eq!(version_token(&json!(false)), "False");
        assert_eq!(version_token(&json!(21)), "21");
        assert_eq!(version_token(&json!("a b%")), "a%20b%25");
        assert_eq!(version_token(&json!("r\u{0}1")), "r%001");
        let line = format_status(1.0, 1, &json!("v"), "deploying r\u{0}1\n");
        assert!(!line.contains('\0') && !line.contains('\n'), "{line:?}");
        assert!(parse_status("garbage").is_err());
        assert!(parse_status("x 1 v done").is_err());
        assert!(parse_status("1.0 -1 v done").is_err());
    }

    #[test]
    fn blocked_statuses_name_their_paths() {
        let status = blocked_status(&["/a/b", "/c d/100%", "/t\tab/é"]);
        assert_eq!(status, "blocked /a/b /c%20d/100%25 /t%09ab/é");
        let line = parse_status(&format_status(1.0, 7, &json!("r1"), &status)).unwrap();
        assert_eq!(
            line.blocked(),
            Some(vec!["/a/b".into(), "/c d/100%".into(), "/t\tab/é".into()])
        );
        let done = parse_status("1.0 7 r1 done").unwrap();
        assert_eq!(done.blocked(), None);
        let odd = parse_status("1.0 7 r1 blocked /x%ZZ /y").unwrap();
        assert_eq!(odd.blocked(), Some(vec!["/y".to_string()]));
    }
}
