//! Looking values up in the `[zkdeployment]` entries, with indirection applied: `file://` (read
//! here, size-limited) and `http(s)://` (through the `fetch` given to [`parse`](fn@super::parse),
//! normally [`http_get`]); "not set" versus required; unknown keys; URL redaction in messages.

use std::path::Path;

use super::error::quote;
use super::ini::Entry;
use super::{ConfigError, HTTP_TIMEOUT, KEYS, SECRET_KEY};

/// Largest accepted body of an `http(s)://` value.
const MAX_HTTP_BODY: u64 = 1024 * 1024;
/// Largest accepted content of a `file://` value.
const MAX_VALUE_FILE: u64 = 1024 * 1024;

pub(super) struct Values<'a> {
    pub(super) path: &'a Path,
    pub(super) entries: Vec<(String, Entry)>,
    pub(super) fetch: &'a dyn Fn(&str) -> Result<Option<String>, FetchError>,
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
    pub(super) fn check_keys(&self) -> Result<(), ConfigError> {
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

    pub(super) fn invalid(&self, key: &str, message: String) -> ConfigError {
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
            Err(FetchError::Unreachable(message)) => Err(ConfigError::Unreachable {
                path: self.path.to_path_buf(),
                line: self.line_of(key),
                key: key.to_string(),
                message: format!("{}: {message}", redact_url(url)),
            }),
            Err(FetchError::Refused(message)) => {
                Err(self.invalid(key, format!("{}: {message}", redact_url(url))))
            }
        }
    }

    pub(super) fn required(&self, key: &str) -> Result<String, ConfigError> {
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

    pub(super) fn optional(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.lookup(key)? {
            Lookup::Set(value) => Ok(Some(value)),
            Lookup::Unset { .. } => Ok(None),
        }
    }

    /// [`Values::optional`] for credentials: a `file://` or `http(s)://` value that gives
    /// nothing (a missing or empty file, a 404) is an error rather than "not set", since
    /// running without them would silently drop the authentication (and, for
    /// `zookeeper-auth`, leave the host node writable by anyone).
    pub(super) fn optional_strict(&self, key: &str) -> Result<Option<String>, ConfigError> {
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
pub(super) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<redacted>{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// A file's content, refusing more than [`MAX_VALUE_FILE`] bytes, and anything but a regular
/// file: a FIFO (opened without blocking, so that no writer is waited for), a device
/// (`file:///dev/zero`), a directory.
fn read_limited(file: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(file)?;
    let kind = opened.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(std::io::Error::other(format!(
            "{what}; a file:// value must name a regular file"
        )));
    }
    let mut bytes = Vec::new();
    opened.take(MAX_VALUE_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_VALUE_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_VALUE_FILE} bytes"
        )));
    }
    Ok(bytes)
}
/// Why an `http(s)://` value could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The server could not be reached or did not answer in time (refused, timed out, name
    /// not resolved, connection reset, a 5xx answer): trying again later may work.
    #[error("{0}")]
    Unreachable(String),
    /// The server answered, and the answer is not a value (a 403, a body that is not UTF-8
    /// or is too large): the configuration is wrong.
    #[error("{0}")]
    Refused(String),
}

/// GET `url` (10 s timeout, redirects followed, proxies from the environment): the body,
/// stripped, for 2xx; `Ok(None)` for 404; [`FetchError::Unreachable`] for transport errors
/// and 5xx answers; [`FetchError::Refused`] for other statuses and bodies that are not UTF-8
/// (or over 1 MiB).
pub fn http_get(url: &str) -> Result<Option<String>, FetchError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(url)
        .call()
        .map_err(|e| FetchError::Unreachable(e.to_string()))?;
    let status = response.status().as_u16();
    if status == 404 {
        return Ok(None);
    }
    if (500..600).contains(&status) {
        return Err(FetchError::Unreachable(format!(
            "unexpected response code {status}"
        )));
    }
    if !(200..300).contains(&status) {
        return Err(FetchError::Refused(format!(
            "unexpected response code {status}"
        )));
    }
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_HTTP_BODY)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => FetchError::Refused(e.to_string()),
            e => FetchError::Unreachable(e.to_string()),
        })?;
    let text = String::from_utf8(body)
        .map_err(|_| FetchError::Refused("response body is not UTF-8".to_string()))?;
    Ok(Some(text.trim().to_string()))
}
