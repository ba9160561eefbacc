//! The agent's configuration file (docs/configuration.md): reading, INI parsing, value indirection
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
//! and `role = db:primary` are plain values (the original read them as URLs).
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
//!
//! # Layout
//!
//! - this file: the public constants, [`Config`], [`Secret`], [`Smtp`], [`load`] and
//!   [`resolve_connection`];
//! - `parse.rs`: [`parse()`], key by key, from INI entries to a [`Config`];
//! - `ini.rs`: the INI reader (sections, continuation lines, comments, line numbers);
//! - `values.rs`: value lookup and indirection (`file://`, `http(s)://`, [`http_get`]);
//! - `validate.rs`: the checks and parsers of single values (names, seconds, `smtp`, paths);
//! - `error.rs`: [`ConfigError`] and message quoting;
//! - `host.rs`: [`fqdn`];
//! - `auth.rs`: [`auth_flag`], the `--auth` flag under the `zookeeper-auth` rules.

mod auth;
mod error;
mod host;
mod ini;
mod parse;
mod validate;
mod values;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::zk::connect::connection_string;
/// The connection string precedence lives with the ZooKeeper connection.
pub use crate::zk::connect::{resolve_connection, CONNECTION_ENV, DEFAULT_CONNECTION};
pub use auth::{auth_flag, AuthError};
pub use error::ConfigError;
pub use host::fqdn;
pub use parse::parse;
pub use values::{http_get, FetchError};

/// The section the agent reads.
pub const SECTION: &str = "zkdeployment";
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
        connection_string(flag, self.zookeeper.as_deref())
    }
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
