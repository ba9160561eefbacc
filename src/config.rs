//! The agent's configuration file (CONTRACT section 2): reading, INI parsing, value indirection
//! (`file://`, `http://`, `https://`), defaults and validation. This module owns the file format
//! and every "exit 2" configuration error; it does no ZooKeeper or deployment work.
//!
//! # Format
//!
//! INI as Python's `configparser` reads it for the original, restricted to what the original
//! used:
//!
//! - section headers `[name]`; only `[zkdeployment]` is read, every other section is ignored
//!   (its lines must still be well-formed INI). A `[DEFAULT]` section is not inherited.
//! - `key = value` or `key: value`: the first `=` or `:` splits, key and value are stripped, keys
//!   are case-sensitive, there are no inline comments (`a = b # c` has the value `b # c`).
//! - full-line comments start with `#` or `;` (after optional indentation).
//! - a line indented deeper than the key line it follows continues that key's value: it is
//!   stripped and appended after a `\n`; blank lines and comments inside a value are skipped.
//! - in `[zkdeployment]`, a duplicate key, an unknown key, a duplicate section, a line that is
//!   not `key = value` anywhere in the file, and invalid UTF-8 are errors naming the line.
//!
//! # Value indirection
//!
//! A value that starts with `file://` is replaced by the content of that file (the path after
//! `file://` must be absolute, i.e. `file:///etc/...`; no percent-decoding), stripped of
//! surrounding whitespace. A value that starts with `http://` or `https://` is replaced by the
//! stripped body of a GET (10 s timeout): a 404 means "not set", any other non-2xx status is
//! an error. A missing file likewise means "not set". Nothing else is a URL: `host-id = app:1`
//! and `role = db:primary` are plain values (the original's bug 8.1 item 17 is fixed).
//!
//! "Not set" (absent, empty, or unset through indirection) gives the default for optional keys
//! and the error `<key> not specified` for the required `host-id` and `run-directory`.
//!
//! # Paths
//!
//! A relative `run-directory` or `metrics-file` is resolved against the directory of the
//! configuration file's path as given (`agent.cfg` with `run-directory = run` gives `run` joined
//! to the current directory, `/etc/zkdeployment/agent.cfg` gives `/etc/zkdeployment/run`).
//!
//! # Secrets
//!
//! `zookeeper-auth` is held in a [`Secret`], whose `Debug` and `Display` print `<redacted>`. No
//! error message repeats its value, and a malformed line that mentions it is not echoed.
//!
//! # `after`
//!
//! Split with POSIX shell-word rules by the `shell-words` crate. It differs from Python's
//! `shlex.split` in rare cases: a word starting with `#` begins a comment, and a backslash
//! before a newline joins lines.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The section the agent reads.
pub const SECTION: &str = "zkdeployment";
/// The connection string used when neither the flag, the file nor the environment gives one.
pub const DEFAULT_CONNECTION: &str = "zookeeper:2181";
/// The environment variable consulted after the flag and the file.
pub const CONNECTION_ENV: &str = "ZC_ZK_CONNECTION_STRING";
/// Default `session-timeout`.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `sendmail`.
pub const DEFAULT_SENDMAIL: &str = "/usr/sbin/sendmail";
/// Default `yum`.
pub const DEFAULT_YUM: &str = "yum";
/// Timeout of the GET made for `http://` and `https://` values.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Every key `[zkdeployment]` accepts.
pub const KEYS: &[&str] = &[
    "host-id",
    "run-directory",
    "role",
    "after",
    "zookeeper",
    "zookeeper-auth",
    "session-timeout",
    "root",
    "host-name",
    "yum",
    "mail-to",
    "mail-from",
    "smtp",
    "sendmail",
    "metrics-file",
];

/// Largest accepted body of an `http(s)://` value.
const MAX_HTTP_BODY: u64 = 1024 * 1024;
/// Largest accepted content of a `file://` value.
const MAX_VALUE_FILE: u64 = 1024 * 1024;
/// ZooKeeper carries the session timeout as an `i32` of milliseconds.
const MAX_SESSION_TIMEOUT_MS: f64 = i32::MAX as f64;
const SECRET_KEY: &str = "zookeeper-auth";

/// A credential that never shows up in `Debug` or `Display` output.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where failure mail goes when `smtp` is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Smtp {
    /// `smtps://`: TLS from the start of the connection.
    pub tls: bool,
    /// Host name or IP address (an IPv6 address without its brackets).
    pub host: String,
    /// Default 25 for `smtp://`, 465 for `smtps://`.
    pub port: u16,
}

/// The validated `[zkdeployment]` section, defaults filled in.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    pub host_id: String,
    /// Relative values are resolved against the configuration file's directory.
    pub run_directory: PathBuf,
    /// Empty value -> `None`.
    pub role: Option<String>,
    /// The argument vector of the after-pass hook; empty -> `None`.
    pub after: Option<Vec<String>>,
    /// The connection string, if the file sets one (see [`Config::connection`]).
    pub zookeeper: Option<String>,
    /// Digest credentials `user:password`.
    pub zookeeper_auth: Option<Secret>,
    pub session_timeout: Duration,
    /// Absolute; default `/`.
    pub root: PathBuf,
    /// Default: [`fqdn()`].
    pub host_name: String,
    pub yum: String,
    pub mail_to: Vec<String>,
    /// Default `zkdeployment@<host_name>`.
    pub mail_from: String,
    pub smtp: Option<Smtp>,
    pub sendmail: PathBuf,
    /// Relative values are resolved against the configuration file's directory.
    pub metrics_file: Option<PathBuf>,
}

impl Config {
    /// The connection string: `flag`, else the file's `zookeeper`, else the environment variable
    /// `ZC_ZK_CONNECTION_STRING` (if non-empty), else `zookeeper:2181`.
    pub fn connection(&self, flag: Option<&str>) -> String {
        let env = std::env::var(CONNECTION_ENV).ok();
        resolve_connection(flag, self.zookeeper.as_deref(), env.as_deref())
    }
}

/// The precedence of [`Config::connection`], for callers without a configuration file
/// (`sync`, `status`, `tree ...`): `flag`, then `file`, then a non-empty `env`, then
/// `zookeeper:2181`.
pub fn resolve_connection(flag: Option<&str>, file: Option<&str>, env: Option<&str>) -> String {
    flag.or(file)
        .or(env.filter(|e| !e.trim().is_empty()).map(str::trim))
        .unwrap_or(DEFAULT_CONNECTION)
        .to_string()
}

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
            | ConfigError::Invalid { path, .. } => path,
        }
    }

    /// The key the error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::DuplicateKey { key, .. }
            | ConfigError::NotSpecified { key, .. }
            | ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
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
            | ConfigError::Invalid { line, .. } => Some(*line),
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

/// `'text'`, with control characters escaped.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Reads and parses the configuration file at `path`; `http(s)://` values are fetched with
/// [`http_get`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let bytes = std::fs::read(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
            return Err(ConfigError::InvalidUtf8 {
                path: path.to_path_buf(),
                line,
            });
        }
    };
    parse(path, &text, &http_get)
}

/// Parses configuration text read from `path` (used for messages and to resolve relative
/// paths). Pure except for reading `file://` values, `fetch` (called for `http(s)://` values:
/// `Ok(Some(body))`, `Ok(None)` for a 404, `Err(message)` otherwise) and, when `host-name` is
/// not set, [`fqdn()`].
pub fn parse(
    path: &Path,
    text: &str,
    fetch: &dyn Fn(&str) -> Result<Option<String>, String>,
) -> Result<Config, ConfigError> {
    let entries = read_ini(path, text)?;
    let values = Values {
        path,
        entries,
        fetch,
    };
    values.check_keys()?;

    let host_id = values.required("host-id")?;
    check_plain_name(&host_id).map_err(|m| values.invalid("host-id", m))?;

    let run_directory = values.required("run-directory")?;
    let run_directory = resolve_path(path, &run_directory);

    let role = values.optional("role")?;
    if let Some(role) = &role {
        check_plain_name(role).map_err(|m| values.invalid("role", m))?;
    }

    let after = match values.optional("after")? {
        None => None,
        Some(v) => {
            let words = shell_words::split(&v).map_err(|_| {
                values.invalid(
                    "after",
                    "cannot split into words: missing closing quote".into(),
                )
            })?;
            Some(words).filter(|w| !w.is_empty())
        }
    };

    let zookeeper = values.optional("zookeeper")?;
    if let Some(z) = &zookeeper {
        if z.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(values.invalid(
                "zookeeper",
                format!(
                    "expected a connection string HOST:PORT[,...][/CHROOT], got {}",
                    quote(z)
                ),
            ));
        }
    }

    let zookeeper_auth = match values.optional_strict(SECRET_KEY)? {
        None => None,
        Some(v) => {
            let ok = match v.split_once(':') {
                Some((user, _)) => {
                    !user.is_empty() && !v.chars().any(|c| c.is_control() || c == '\n')
                }
                None => false,
            };
            if !ok {
                return Err(values.invalid(
                    SECRET_KEY,
                    "expected digest credentials user:password (value not shown)".into(),
                ));
            }
            Some(Secret(v))
        }
    };

    let session_timeout = match values.optional("session-timeout")? {
        None => DEFAULT_SESSION_TIMEOUT,
        Some(v) => parse_seconds(&v).map_err(|m| values.invalid("session-timeout", m))?,
    };

    let root = match values.optional("root")? {
        None => PathBuf::from("/"),
        Some(v) => {
            let p = PathBuf::from(&v);
            if !p.is_absolute() {
                return Err(values.invalid(
                    "root",
                    format!("expected an absolute path, got {}", quote(&v)),
                ));
            }
            p
        }
    };

    let host_name = match values.optional("host-name")? {
        None => fqdn(),
        Some(v) => {
            check_plain_name(&v).map_err(|m| values.invalid("host-name", m))?;
            v
        }
    };

    let yum = match values.optional("yum")? {
        None => DEFAULT_YUM.to_string(),
        Some(v) => {
            if v.chars().any(char::is_control) {
                return Err(values.invalid("yum", format!("expected a command, got {}", quote(&v))));
            }
            v
        }
    };

    let mail_to = match values.optional("mail-to")? {
        None => Vec::new(),
        Some(v) => {
            let mut out = Vec::new();
            for item in v
                .split([',', '\n'])
                .map(str::trim)
                .filter(|s| !s.is_empty())
            {
                if !looks_like_address(item) {
                    return Err(values.invalid(
                        "mail-to",
                        format!(
                            "expected comma-separated mail addresses, got {}",
                            quote(item)
                        ),
                    ));
                }
                out.push(item.to_string());
            }
            out
        }
    };

    let mail_from = match values.optional("mail-from")? {
        None => format!("zkdeployment@{host_name}"),
        Some(v) => {
            if !looks_like_address(&v) {
                return Err(values.invalid(
                    "mail-from",
                    format!("expected a mail address, got {}", quote(&v)),
                ));
            }
            v
        }
    };

    let smtp = match values.optional("smtp")? {
        None => None,
        Some(v) => Some(parse_smtp(&v).map_err(|m| values.invalid("smtp", m))?),
    };

    let sendmail = match values.optional("sendmail")? {
        None => PathBuf::from(DEFAULT_SENDMAIL),
        Some(v) => {
            if v.chars().any(char::is_control) {
                return Err(values.invalid(
                    "sendmail",
                    format!("expected a command path, got {}", quote(&v)),
                ));
            }
            PathBuf::from(v)
        }
    };

    let metrics_file = values
        .optional("metrics-file")?
        .map(|v| resolve_path(path, &v));

    Ok(Config {
        path: path.to_path_buf(),
        host_id,
        run_directory,
        role,
        after,
        zookeeper,
        zookeeper_auth,
        session_timeout,
        root,
        host_name,
        yum,
        mail_to,
        mail_from,
        smtp,
        sendmail,
        metrics_file,
    })
}

// ---------------------------------------------------------------------------------------------
// INI reading

struct Entry {
    value: String,
    line: usize,
}

/// The `[zkdeployment]` entries in file order (key, entry); `NoSection` if there is none.
fn read_ini(path: &Path, text: &str) -> Result<Vec<(String, Entry)>, ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut entries: Vec<(String, Entry)> = Vec::new();
    let mut first_line: HashMap<String, usize> = HashMap::new();
    let mut section_line: Option<usize> = None;
    let mut in_any_section = false;
    let mut in_ours = false;
    // The indentation of the last key line, while continuation lines may follow it.
    let mut current: Option<usize> = None;

    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let stripped = raw.trim();
        if stripped.is_empty() || stripped.starts_with('#') || stripped.starts_with(';') {
            continue;
        }
        let indent = raw.chars().take_while(|c| c.is_whitespace()).count();
        if let Some(key_indent) = current {
            if indent > key_indent {
                if in_ours {
                    if let Some((_, entry)) = entries.last_mut() {
                        if !entry.value.is_empty() {
                            entry.value.push('\n');
                        }
                        entry.value.push_str(stripped);
                    }
                }
                continue;
            }
        }
        if stripped.len() >= 2 && stripped.starts_with('[') && stripped.ends_with(']') {
            let name = &stripped[1..stripped.len() - 1];
            in_any_section = true;
            current = None;
            in_ours = name == SECTION;
            if in_ours {
                if let Some(first) = section_line {
                    return Err(ConfigError::DuplicateSection {
                        path: path.to_path_buf(),
                        line,
                        first,
                    });
                }
                section_line = Some(line);
            }
            continue;
        }
        let Some(split) = stripped.find(['=', ':']) else {
            return Err(syntax(path, line, stripped));
        };
        let key = stripped[..split].trim();
        let value = stripped[split + 1..].trim();
        if key.is_empty() {
            return Err(syntax(path, line, stripped));
        }
        if !in_any_section {
            return Err(ConfigError::NoSectionHeader {
                path: path.to_path_buf(),
                line,
            });
        }
        current = Some(indent);
        if !in_ours {
            continue;
        }
        if let Some(&first) = first_line.get(key) {
            return Err(ConfigError::DuplicateKey {
                path: path.to_path_buf(),
                line,
                key: key.to_string(),
                first,
            });
        }
        first_line.insert(key.to_string(), line);
        entries.push((
            key.to_string(),
            Entry {
                value: value.to_string(),
                line,
            },
        ));
    }
    if section_line.is_none() {
        return Err(ConfigError::NoSection {
            path: path.to_path_buf(),
        });
    }
    Ok(entries)
}

fn syntax(path: &Path, line: usize, text: &str) -> ConfigError {
    let text = if text.contains(SECRET_KEY) {
        "(not shown: it mentions zookeeper-auth)".to_string()
    } else {
        quote(text)
    };
    ConfigError::Syntax {
        path: path.to_path_buf(),
        line,
        text,
    }
}

// ---------------------------------------------------------------------------------------------
// Values

struct Values<'a> {
    path: &'a Path,
    entries: Vec<(String, Entry)>,
    fetch: &'a dyn Fn(&str) -> Result<Option<String>, String>,
}

/// The outcome of looking a key up, indirection applied.
enum Lookup {
    Set(String),
    /// Absent (`line` None), empty, or unset through a URL (`why` says which URL and why).
    Unset {
        line: Option<usize>,
        why: Option<String>,
    },
}

impl Values<'_> {
    fn check_keys(&self) -> Result<(), ConfigError> {
        for (key, entry) in &self.entries {
            if !KEYS.contains(&key.as_str()) {
                let key = if key.contains(SECRET_KEY) {
                    "(not shown: it mentions zookeeper-auth)".to_string()
                } else {
                    key.clone()
                };
                return Err(ConfigError::UnknownKey {
                    path: self.path.to_path_buf(),
                    line: entry.line,
                    key,
                });
            }
        }
        Ok(())
    }

    fn line_of(&self, key: &str) -> usize {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0, |(_, e)| e.line)
    }

    fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line: self.line_of(key),
            key: key.to_string(),
            message,
        }
    }

    fn lookup(&self, key: &str) -> Result<Lookup, ConfigError> {
        let Some((_, entry)) = self.entries.iter().find(|(k, _)| k == key) else {
            return Ok(Lookup::Unset {
                line: None,
                why: None,
            });
        };
        let line = Some(entry.line);
        let value = entry.value.as_str();
        let fetched = if let Some(rest) = value.strip_prefix("file://") {
            Some(self.read_file_value(key, value, rest)?)
        } else if value.starts_with("http://") || value.starts_with("https://") {
            Some(self.fetch_value(key, value)?)
        } else {
            None
        };
        let value = match fetched {
            None => value.to_string(),
            Some(Ok(content)) => content,
            Some(Err(why)) => {
                return Ok(Lookup::Unset {
                    line,
                    why: Some(why),
                })
            }
        };
        if value.is_empty() {
            Ok(Lookup::Unset { line, why: None })
        } else {
            Ok(Lookup::Set(value))
        }
    }

    /// `Ok(Ok(content))`, `Ok(Err(why))` when the file does not exist, `Err` otherwise.
    fn read_file_value(
        &self,
        key: &str,
        url: &str,
        rest: &str,
    ) -> Result<Result<String, String>, ConfigError> {
        check_url(url).map_err(|m| self.invalid(key, m))?;
        let file = rest.strip_prefix("localhost").unwrap_or(rest);
        if !file.starts_with('/') {
            return Err(self.invalid(
                key,
                format!("{}: expected file:///ABSOLUTE/PATH", redact_url(url)),
            ));
        }
        match read_limited(Path::new(file)) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Ok(Ok(text.trim().to_string())),
                Err(_) => Err(self.invalid(key, format!("{}: invalid UTF-8", redact_url(url)))),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Err(format!("{}: {e}", redact_url(url))))
            }
            Err(e) => Err(self.invalid(key, format!("{}: {e}", redact_url(url)))),
        }
    }

    fn fetch_value(&self, key: &str, url: &str) -> Result<Result<String, String>, ConfigError> {
        check_url(url).map_err(|m| self.invalid(key, m))?;
        match (self.fetch)(url) {
            Ok(Some(body)) => Ok(Ok(body.trim().to_string())),
            Ok(None) => Ok(Err(format!("{}: 404 Not Found", redact_url(url)))),
            Err(message) => Err(self.invalid(key, format!("{}: {message}", redact_url(url)))),
        }
    }

    fn required(&self, key: &str) -> Result<String, ConfigError> {
        match self.lookup(key)? {
            Lookup::Set(value) => Ok(value),
            Lookup::Unset { line, why } => Err(ConfigError::NotSpecified {
                path: self.path.to_path_buf(),
                line,
                key: key.to_string(),
                detail: why,
            }),
        }
    }

    fn optional(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.lookup(key)? {
            Lookup::Set(value) => Ok(Some(value)),
            Lookup::Unset { .. } => Ok(None),
        }
    }

    /// [`Values::optional`] for credentials: a `file://` or `http(s)://` value that gives
    /// nothing (a missing or empty file, a 404) is an error rather than "not set", since
    /// running without them would silently drop the authentication (and, for
    /// `zookeeper-auth`, leave the host node writable by anyone).
    fn optional_strict(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let indirect = self
            .entries
            .iter()
            .find(|(k, _)| k == key)
            .is_some_and(|(_, e)| {
                ["file://", "http://", "https://"]
                    .iter()
                    .any(|p| e.value.starts_with(p))
            });
        match self.lookup(key)? {
            Lookup::Set(value) => Ok(Some(value)),
            Lookup::Unset { why, .. } if indirect => Err(self.invalid(
                key,
                format!(
                    "{}; set, so it must give the credentials",
                    why.unwrap_or_else(|| "the value it refers to is empty".into())
                ),
            )),
            Lookup::Unset { .. } => Ok(None),
        }
    }
}

/// A `file://` URL may hold spaces (it is a path), an `http(s)://` one may not; neither may hold
/// control characters (a value continued over several lines, for instance).
fn check_url(url: &str) -> Result<(), String> {
    let space_ok = url.starts_with("file://");
    if url
        .chars()
        .any(|c| c.is_control() || (c.is_whitespace() && !space_ok))
    {
        Err(format!(
            "{}: a URL cannot contain whitespace or control characters",
            quote(&redact_url(url))
        ))
    } else {
        Ok(())
    }
}

/// The URL with any `user:password@` replaced, so that errors never show credentials.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<redacted>{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// A file's content, refusing more than [`MAX_VALUE_FILE`] bytes (`file:///dev/zero`).
fn read_limited(file: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(MAX_VALUE_FILE + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_VALUE_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_VALUE_FILE} bytes"
        )));
    }
    Ok(bytes)
}

fn resolve_path(config: &Path, value: &str) -> PathBuf {
    let p = PathBuf::from(value);
    if p.is_absolute() {
        return p;
    }
    match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p,
    }
}

/// A host id, host name or role: one ZooKeeper node name.
fn check_plain_name(value: &str) -> Result<(), String> {
    let bad = value.is_empty()
        || value == "."
        || value == ".."
        || value
            .chars()
            .any(|c| c == '/' || c.is_whitespace() || c.is_control());
    if bad {
        Err(format!(
            "expected a plain name (no '/', whitespace or control characters, not '.' or '..'), got {}",
            quote(value)
        ))
    } else {
        Ok(())
    }
}

fn looks_like_address(value: &str) -> bool {
    value.contains('@')
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',')
}

fn parse_seconds(value: &str) -> Result<Duration, String> {
    let message = || format!("expected seconds > 0, got {}", quote(value));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let well_formed = match value.split_once('.') {
        None => !value.is_empty() && digits(value),
        Some((whole, frac)) => {
            digits(whole) && digits(frac) && !(whole.is_empty() && frac.is_empty())
        }
    };
    if !well_formed {
        return Err(message());
    }
    let seconds: f64 = value.parse().map_err(|_| message())?;
    if seconds <= 0.0 || !seconds.is_finite() {
        return Err(message());
    }
    if seconds * 1000.0 > MAX_SESSION_TIMEOUT_MS {
        return Err(format!(
            "expected seconds > 0 and at most {}, got {}",
            (MAX_SESSION_TIMEOUT_MS / 1000.0).floor(),
            quote(value)
        ));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| message())
}

fn parse_smtp(value: &str) -> Result<Smtp, String> {
    let message = || {
        format!(
            "expected smtp://HOST[:PORT] or smtps://HOST[:PORT], got {}",
            quote(&redact_url(value))
        )
    };
    let (tls, rest) = if let Some(rest) = value.strip_prefix("smtp://") {
        (false, rest)
    } else if let Some(rest) = value.strip_prefix("smtps://") {
        (true, rest)
    } else {
        return Err(message());
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty()
        || rest
            .chars()
            .any(|c| matches!(c, '/' | '@' | '?' | '#') || c.is_whitespace() || c.is_control())
    {
        return Err(message());
    }
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(message)?;
        if host.is_empty() || !host.contains(':') {
            return Err(message());
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(message)?),
        };
        (host, port)
    } else {
        match rest.split_once(':') {
            None => (rest, None),
            Some((host, port)) => (host, Some(port)),
        }
    };
    if host.is_empty() || host.contains(['[', ']']) {
        return Err(message());
    }
    let port = match port {
        None if tls => 465,
        None => 25,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && digits_only(p) => n,
            _ => return Err(message()),
        },
    };
    Ok(Smtp {
        tls,
        host: host.to_string(),
        port,
    })
}

fn digits_only(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

// ---------------------------------------------------------------------------------------------
// Host and network

/// The host's fully qualified name, like Python's `socket.getfqdn()`: the canonical name
/// `getaddrinfo(AI_CANONNAME)` gives for `gethostname()`, if it contains a dot, else the host
/// name itself (`localhost` if even that fails).
pub fn fqdn() -> String {
    let host = match nix::unistd::gethostname() {
        Ok(h) => h.to_string_lossy().into_owned(),
        Err(_) => return "localhost".to_string(),
    };
    if host.is_empty() {
        return "localhost".to_string();
    }
    match canonical_name(&host) {
        Some(name) if name.contains('.') => name,
        _ => host,
    }
}

fn canonical_name(host: &str) -> Option<String> {
    use nix::libc;
    let node = CString::new(host).ok()?;
    // SAFETY: addrinfo is plain data (integers and pointers); all-zero is a valid value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut result: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: node is NUL-terminated, hints is initialised, result is written by the call.
    let rc = unsafe { libc::getaddrinfo(node.as_ptr(), std::ptr::null(), &hints, &mut result) };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: result is a valid list returned by getaddrinfo; ai_canonname is NUL-terminated or
    // null; the list is freed exactly once, after the name has been copied.
    unsafe {
        let name = (*result).ai_canonname;
        let out = if name.is_null() {
            None
        } else {
            Some(CStr::from_ptr(name).to_string_lossy().into_owned())
        };
        libc::freeaddrinfo(result);
        out.filter(|n| !n.is_empty())
    }
}

/// GET `url` (10 s timeout, redirects followed, proxies from the environment): the body,
/// stripped, for 2xx; `Ok(None)` for 404; `Err("unexpected response code N")` for other
/// statuses; `Err(message)` for transport errors and bodies that are not UTF-8 (or over 1 MiB).
pub fn http_get(url: &str) -> Result<Option<String>, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    if status == 404 {
        return Ok(None);
    }
    if !(200..300).contains(&status) {
        return Err(format!("unexpected response code {status}"));
    }
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_HTTP_BODY)
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8(body).map_err(|_| "response body is not UTF-8".to_string())?;
    Ok(Some(text.trim().to_string()))
}
