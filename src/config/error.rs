//! [`ConfigError`], every configuration error ("exit 2", but for a value whose server cannot
//! be reached now), with its accessors, and [`quote`], the quoting of user text in messages.

use std::path::{Path, PathBuf};

/// A configuration error: its `Display` is one line naming the file, the line where one
/// applies, and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}:{line}: invalid UTF-8", path.display())]
    InvalidUtf8 { path: PathBuf, line: usize },
    #[error("{}: no [zkdeployment] section", path.display())]
    NoSection { path: PathBuf },
    #[error("{}:{line}: duplicate [zkdeployment] section (first on line {first})", path.display())]
    DuplicateSection {
        path: PathBuf,
        line: usize,
        first: usize,
    },
    #[error("{}:{line}: `key = value` line before any [section]", path.display())]
    NoSectionHeader { path: PathBuf, line: usize },
    /// `text` is the offending line, already quoted (or a placeholder when it may hold a secret).
    #[error("{}:{line}: line is not `key = value`: {text}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{}:{line}: unknown key {} in [zkdeployment]", path.display(), quote(key))]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
    },
    #[error("{}:{line}: duplicate key {} in [zkdeployment] (first on line {first})", path.display(), quote(key))]
    DuplicateKey {
        path: PathBuf,
        line: usize,
        key: String,
        first: usize,
    },
    /// A required key is absent, empty, or unset through `file://`/`http(s)://` (`detail` says
    /// why in the last case).
    #[error("{}: {key} not specified{}", at(path, *line), detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NotSpecified {
        path: PathBuf,
        line: Option<usize>,
        key: String,
        detail: Option<String>,
    },
    /// An `http(s)://` value whose server cannot be reached now (refused, timed out, 5xx):
    /// the configuration may be right, so this is not an "exit 2" error (see
    /// [`ConfigError::is_transient`]).
    #[error("{}:{line}: {key}: cannot fetch the value now: {message}", path.display())]
    Unreachable {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
    /// A bad value, or a failed `file://`/`http(s)://` fetch.
    #[error("{}:{line}: {key}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The configuration file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ConfigError::Read { path, .. }
            | ConfigError::InvalidUtf8 { path, .. }
            | ConfigError::NoSection { path }
            | ConfigError::DuplicateSection { path, .. }
            | ConfigError::NoSectionHeader { path, .. }
            | ConfigError::Syntax { path, .. }
            | ConfigError::UnknownKey { path, .. }
            | ConfigError::DuplicateKey { path, .. }
            | ConfigError::NotSpecified { path, .. }
            | ConfigError::Invalid { path, .. }
            | ConfigError::Unreachable { path, .. } => path,
        }
    }

    /// The key the error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::DuplicateKey { key, .. }
            | ConfigError::NotSpecified { key, .. }
            | ConfigError::Invalid { key, .. }
            | ConfigError::Unreachable { key, .. } => Some(key),
            _ => None,
        }
    }

    /// True if trying again later may succeed: a value's server could not be reached. Every
    /// other error is a configuration to fix (exit 2).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, ConfigError::Unreachable { .. })
    }

    /// The line of the file the error is about, if any (1-based).
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::InvalidUtf8 { line, .. }
            | ConfigError::DuplicateSection { line, .. }
            | ConfigError::NoSectionHeader { line, .. }
            | ConfigError::Syntax { line, .. }
            | ConfigError::UnknownKey { line, .. }
            | ConfigError::DuplicateKey { line, .. }
            | ConfigError::Invalid { line, .. }
            | ConfigError::Unreachable { line, .. } => Some(*line),
            ConfigError::NotSpecified { line, .. } => *line,
            ConfigError::Read { .. } | ConfigError::NoSection { .. } => None,
        }
    }
}

fn at(path: &Path, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    }
}

/// Most characters of user text shown in a message; the rest is cut (with the length shown).
const QUOTED_CHARS: usize = 200;

/// `'text'`, with control and invisible characters escaped (a byte-order mark shows as
/// `\u{feff}`, a zero-width space as `\u{200b}`), and cut after [`QUOTED_CHARS`] characters.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(4 * QUOTED_CHARS) + 2);
    out.push('\'');
    for c in s.chars().take(QUOTED_CHARS) {
        if c.is_control() || crate::tree::is_invisible(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    let total = s.chars().count();
    if total > QUOTED_CHARS {
        out.push_str(&format!("… ({total} characters)"));
    }
    out
}
