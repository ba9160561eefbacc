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
//! and the error `<key> not specified` for the required `run-directory`. `host-id` not set is
//! the host name (`host-name`, by default the fully qualified host name), so that the shipped
//! `host-id = file:///etc/zkdeployment/host-id` works before anyone writes that file.
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
//! - this file: the public constants, the table of keys ([`KEY_TABLE`], from which the
//!   documents are made), [`Config`], [`Secret`], [`Smtp`], [`load`], [`load_connection`]
//!   (the connection keys alone, for `--config`) and [`resolve_connection`];
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
pub(crate) use auth::auth_flag;
pub use error::ConfigError;
pub use host::fqdn;
pub use parse::parse;
pub use values::{http_get, FetchError};

/// The section the agent reads.
pub(crate) const SECTION: &str = "zkdeployment";
/// Default `session-timeout`.
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `sendmail`.
pub(crate) const DEFAULT_SENDMAIL: &str = "/usr/sbin/sendmail";
/// Default `yum`.
pub(crate) const DEFAULT_YUM: &str = "yum";
/// Timeout of the GET made for `http://` and `https://` values.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// One configuration key as the documents show it: `configuration.md`, `zkdeployment.conf(5)`
/// and `zkdeployment-agent(8)` are made from [`KEY_TABLE`], the one list of keys.
#[derive(Debug, Clone, Copy)]
pub struct KeyDoc {
    /// The key.
    pub name: &'static str,
    /// The default, in words (`""`: no default, the key is unset).
    pub default: &'static str,
    /// What it means (one sentence or two).
    pub meaning: &'static str,
}

/// Every key `[zkdeployment]` accepts, with its default and meaning.
pub const KEY_TABLE: [KeyDoc; 19] = [
    KeyDoc {
        name: "host-id",
        default: "the value of host-name (the fully qualified host name)",
        meaning: "The host's identifier: the name of its node under /hosts and the name deploy \
                  nodes use. Set it (or write it to the file a file:// value names) to choose \
                  another id than the host name.",
    },
    KeyDoc {
        name: "run-directory",
        default: "(required)",
        meaning: "Holds the status file, host_version and last-pass.json; created if missing. \
                  A relative path is resolved against the configuration file's directory.",
    },
    KeyDoc {
        name: "role",
        default: "",
        meaning: "The host's role; a host with a role is configured by its role alone \
                  (deploy/<role> nodes).",
    },
    KeyDoc {
        name: "after",
        default: "",
        meaning: "A command run after each successful pass (split into words like a shell \
                  would, never run through a shell).",
    },
    KeyDoc {
        name: "zookeeper",
        default: "$ZC_ZK_CONNECTION_STRING, else zookeeper:2181",
        meaning: "The ZooKeeper connection string HOST:PORT[,HOST:PORT...][/CHROOT].",
    },
    KeyDoc {
        name: "zookeeper-auth",
        default: "",
        meaning: "Digest credentials user:password added to the session (usually \
                  file:///etc/zkdeployment/zookeeper-auth, mode 0600).",
    },
    KeyDoc {
        name: "zookeeper-tls-ca",
        default: "",
        meaning: "PEM file of the certificate authority of the ensemble's TLS certificates; \
                  set, every connection is TLS.",
    },
    KeyDoc {
        name: "zookeeper-tls-cert",
        default: "",
        meaning: "PEM file of the client certificate presented to the ensemble over TLS.",
    },
    KeyDoc {
        name: "zookeeper-tls-key",
        default: "",
        meaning: "PEM file of the private key of zookeeper-tls-cert.",
    },
    KeyDoc {
        name: "session-timeout",
        default: "10",
        meaning: "The ZooKeeper session timeout, in seconds.",
    },
    KeyDoc {
        name: "jute-maxbuffer",
        default: "1048575",
        meaning: "The largest answer accepted from a ZooKeeper server, in bytes: ZooKeeper's \
                  jute.maxbuffer, set as on the servers. A larger answer fails its request \
                  (a multi-read is split) and is never buffered.",
    },
    KeyDoc {
        name: "root",
        default: "/",
        meaning: "The file-system prefix of /opt and /etc (tests and staging).",
    },
    KeyDoc {
        name: "host-name",
        default: "the fully qualified host name",
        meaning: "The name deploy nodes may use instead of the host id.",
    },
    KeyDoc {
        name: "yum",
        default: "yum (from PATH)",
        meaning: "The package-manager command.",
    },
    KeyDoc {
        name: "mail-to",
        default: "",
        meaning: "Comma-separated addresses that get failure mail.",
    },
    KeyDoc {
        name: "mail-from",
        default: "zkdeployment@<host-name>",
        meaning: "The sender of failure mail.",
    },
    KeyDoc {
        name: "smtp",
        default: "",
        meaning: "smtp://HOST[:PORT] or smtps://HOST[:PORT]; without it, mail goes through \
                  sendmail.",
    },
    KeyDoc {
        name: "sendmail",
        default: "/usr/sbin/sendmail",
        meaning: "The sendmail-compatible command.",
    },
    KeyDoc {
        name: "metrics-file",
        default: "",
        meaning: "A Prometheus textfile-collector file, rewritten atomically after each step.",
    },
];

/// Every key `[zkdeployment]` accepts (the names of [`KEY_TABLE`]).
pub const KEYS: &[&str] = &key_names();

const fn key_names() -> [&'static str; KEY_TABLE.len()] {
    let mut names = [""; KEY_TABLE.len()];
    let mut i = 0;
    while i < KEY_TABLE.len() {
        names[i] = KEY_TABLE[i].name;
        i += 1;
    }
    names
}

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

/// Who a command that writes what the syncer owns acts as (`--auth`).
#[derive(Clone, Debug)]
pub enum Identity {
    /// Digest credentials `user:password`.
    Digest(Secret),
    /// `x509`: the TLS client certificate (`--tls-cert`, `--tls-key`).
    X509,
}

impl Identity {
    /// The digest credentials to add to the session, if any.
    pub(crate) fn digest(&self) -> Option<&Secret> {
        match self {
            Identity::Digest(s) => Some(s),
            Identity::X509 => None,
        }
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
    /// `zookeeper-auth = x509`: the client certificate is the host's identity.
    pub zookeeper_x509: bool,
    /// `zookeeper-tls-ca`, `zookeeper-tls-cert`, `zookeeper-tls-key`.
    pub tls: crate::zk::TlsFiles,
    pub session_timeout: Duration,
    /// `jute-maxbuffer`: the largest answer accepted from a server, in bytes.
    pub jute_maxbuffer: usize,
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

    /// True if the host has an identity of its own (digest credentials or its certificate).
    pub fn has_identity(&self) -> bool {
        self.zookeeper_auth.is_some() || self.zookeeper_x509
    }

    /// How the agent, `deploy` and `monitor` connect to `connection`: this file's session
    /// timeout, digest credentials and TLS files (read again at every connection).
    pub(crate) fn connect_options(&self, connection: String) -> crate::zk::ConnectOptions {
        let mut opts = crate::zk::ConnectOptions::new(connection);
        opts.session_timeout = self.session_timeout;
        opts.digest = self.zookeeper_auth.as_ref().map(|s| s.expose().to_string());
        opts.tls = self.tls.clone();
        opts.max_answer = self.jute_maxbuffer;
        opts
    }
}

/// How to reach ZooKeeper, as a configuration file says (`zookeeper`, `zookeeper-auth`,
/// `zookeeper-tls-*`): what `--config FILE` gives the commands other than the agent's.
#[derive(Clone, Debug, Default)]
pub(crate) struct ZkSettings {
    /// `zookeeper`.
    pub(crate) zookeeper: Option<String>,
    /// `zookeeper-auth` (digest credentials).
    pub(crate) zookeeper_auth: Option<Secret>,
    /// `zookeeper-auth = x509`: the client certificate is the identity.
    pub(crate) zookeeper_x509: bool,
    /// `zookeeper-tls-*`.
    pub(crate) tls: crate::zk::TlsFiles,
    /// `jute-maxbuffer`, if set.
    pub(crate) jute_maxbuffer: Option<usize>,
}

impl ZkSettings {
    /// The identity the file gives, if any.
    pub(crate) fn identity(&self) -> Option<Identity> {
        if self.zookeeper_x509 {
            Some(Identity::X509)
        } else {
            self.zookeeper_auth.clone().map(Identity::Digest)
        }
    }
}

/// Reads the connection keys of the configuration file at `path` (the others must be known
/// keys, and are not checked further: a syncer's file may hold nothing else).
pub(crate) fn load_connection(path: &Path) -> Result<ZkSettings, ConfigError> {
    let text = read_text(path)?;
    parse::parse_connection(path, &text, &http_get)
}

fn read_text(path: &Path) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        ConfigError::InvalidUtf8 {
            path: path.to_path_buf(),
            line,
        }
    })
}

/// Reads and parses the configuration file at `path`; `http(s)://` values are fetched with
/// [`http_get`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = read_text(path)?;
    parse(path, &text, &http_get)
}
