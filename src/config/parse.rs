//! [`parse`]: the `[zkdeployment]` entries read by the INI reader, looked up with indirection
//! applied, validated key by key and assembled into a [`Config`], defaults filled in.

use std::path::{Path, PathBuf};

use super::error::quote;
use super::ini::read_ini;
use super::validate::{
    check_plain_name, looks_like_address, parse_seconds, parse_smtp, resolve_path,
};
use super::values::{FetchError, Values};
use super::{
    fqdn, Config, ConfigError, Secret, ZkSettings, DEFAULT_SENDMAIL, DEFAULT_SESSION_TIMEOUT,
    DEFAULT_YUM, SECRET_KEY,
};
use crate::zk::tls::TlsFiles;

/// Parses configuration text read from `path` (used for messages and to resolve relative
/// paths). Pure except for reading `file://` values, `fetch` (called for `http(s)://` values:
/// `Ok(Some(body))`, `Ok(None)` for a 404, a [`FetchError`] otherwise) and, when `host-name` is
/// not set, [`fqdn()`].
pub fn parse(
    path: &Path,
    text: &str,
    fetch: &dyn Fn(&str) -> Result<Option<String>, FetchError>,
) -> Result<Config, ConfigError> {
    let entries = read_ini(path, text)?;
    let values = Values {
        path,
        entries,
        fetch,
    };
    values.check_keys()?;

    let run_directory = values.required("run-directory")?;
    let run_directory = resolve_path(path, &run_directory);

    let role = values.optional("role")?;
    if let Some(role) = &role {
        check_plain_name(role).map_err(|m| values.invalid("role", m))?;
    }
    let after = after(&values)?;
    let ZkSettings {
        zookeeper,
        zookeeper_auth,
        zookeeper_x509,
        tls,
        jute_maxbuffer,
    } = connection(&values)?;
    let jute_maxbuffer = jute_maxbuffer.unwrap_or(crate::zk::DEFAULT_JUTE_MAXBUFFER);
    let session_timeout = match values.optional("session-timeout")? {
        None => DEFAULT_SESSION_TIMEOUT,
        Some(v) => parse_seconds(&v).map_err(|m| values.invalid("session-timeout", m))?,
    };
    let root = root(&values)?;
    let (host_name, host_id) = host_names(&values)?;
    let yum = command(&values, "yum", "a command")?.unwrap_or_else(|| DEFAULT_YUM.to_string());
    let (mail_to, mail_from) = mail_addresses(&values, &host_name)?;
    let smtp = match values.optional("smtp")? {
        None => None,
        Some(v) => Some(parse_smtp(&v).map_err(|m| values.invalid("smtp", m))?),
    };
    let sendmail = command(&values, "sendmail", "a command path")?
        .map_or_else(|| PathBuf::from(DEFAULT_SENDMAIL), PathBuf::from);
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
        zookeeper_x509,
        tls,
        session_timeout,
        jute_maxbuffer,
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

/// `after`: the command split into words (`None` when unset or empty).
fn after(values: &Values<'_>) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(v) = values.optional("after")? else {
        return Ok(None);
    };
    let words = shell_words::split(&v).map_err(|_| {
        values.invalid(
            "after",
            "cannot split into words: missing closing quote".into(),
        )
    })?;
    Ok(Some(words).filter(|w| !w.is_empty()))
}

/// `root`: an absolute path, `/` when unset.
fn root(values: &Values<'_>) -> Result<PathBuf, ConfigError> {
    let Some(v) = values.optional("root")? else {
        return Ok(PathBuf::from("/"));
    };
    let p = PathBuf::from(&v);
    if !p.is_absolute() {
        return Err(values.invalid(
            "root",
            format!("expected an absolute path, got {}", quote(&v)),
        ));
    }
    Ok(p)
}

/// `host-name` (the machine's name when unset) and `host-id` (the host name when unset, nor
/// the file a `file://` value names), both plain names.
fn host_names(values: &Values<'_>) -> Result<(String, String), ConfigError> {
    let host_name = match values.optional("host-name")? {
        None => fqdn(),
        Some(v) => {
            check_plain_name(&v).map_err(|m| values.invalid("host-name", m))?;
            v
        }
    };
    let host_id = values
        .optional("host-id")?
        .unwrap_or_else(|| host_name.clone());
    check_plain_name(&host_id).map_err(|m| values.invalid("host-id", m))?;
    Ok((host_name, host_id))
}

/// A command key (`yum`, `sendmail`): any text without control characters; `what` names
/// what is expected in the error.
fn command(values: &Values<'_>, key: &str, what: &str) -> Result<Option<String>, ConfigError> {
    let value = values.optional(key)?;
    if let Some(v) = &value {
        if v.chars().any(char::is_control) {
            return Err(values.invalid(key, format!("expected {what}, got {}", quote(v))));
        }
    }
    Ok(value)
}

/// `mail-to` (comma- or line-separated addresses, none when unset) and `mail-from`
/// (`zkdeployment@HOST-NAME` when unset).
fn mail_addresses(
    values: &Values<'_>,
    host_name: &str,
) -> Result<(Vec<String>, String), ConfigError> {
    let mut mail_to = Vec::new();
    if let Some(v) = values.optional("mail-to")? {
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
            mail_to.push(item.to_string());
        }
    }
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
    Ok((mail_to, mail_from))
}

/// [`super::load_connection`]'s parser: the connection keys only.
pub(super) fn parse_connection(
    path: &Path,
    text: &str,
    fetch: &dyn Fn(&str) -> Result<Option<String>, FetchError>,
) -> Result<ZkSettings, ConfigError> {
    let values = Values {
        path,
        entries: read_ini(path, text)?,
        fetch,
    };
    values.check_keys()?;
    connection(&values)
}

/// `zookeeper`, `zookeeper-auth` and `zookeeper-tls-*`, checked.
fn connection(values: &Values<'_>) -> Result<ZkSettings, ConfigError> {
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
    let mut zookeeper_x509 = false;
    let zookeeper_auth = match values.optional_strict(SECRET_KEY)? {
        None => None,
        Some(v) if v == "x509" => {
            zookeeper_x509 = true;
            None
        }
        Some(v) => {
            if !super::auth::is_digest(&v) {
                return Err(values.invalid(
                    SECRET_KEY,
                    "expected digest credentials user:password (value not shown)".into(),
                ));
            }
            Some(Secret(v))
        }
    };
    let file = |key: &str| -> Result<Option<PathBuf>, ConfigError> {
        Ok(values.optional(key)?.map(|v| resolve_path(values.path, &v)))
    };
    let tls = TlsFiles {
        ca: file("zookeeper-tls-ca")?,
        cert: file("zookeeper-tls-cert")?,
        key: file("zookeeper-tls-key")?,
    };
    tls.check_combination()
        .map_err(|e| values.invalid("zookeeper-tls-cert", e.to_string()))?;
    if zookeeper_x509 && tls.cert.is_none() {
        return Err(values.invalid(
            SECRET_KEY,
            "x509 needs a client certificate: zookeeper-tls-ca, zookeeper-tls-cert and zookeeper-tls-key".into(),
        ));
    }
    Ok(ZkSettings {
        zookeeper,
        zookeeper_auth,
        zookeeper_x509,
        tls,
        jute_maxbuffer: jute_maxbuffer(values)?,
    })
}

/// `jute-maxbuffer`: bytes, from 64 KiB (an answer must hold the largest node name and a
/// stat) to 2 GiB - 1 (a frame's length is a signed 32-bit number).
fn jute_maxbuffer(values: &Values<'_>) -> Result<Option<usize>, ConfigError> {
    const KEY: &str = "jute-maxbuffer";
    let Some(v) = values.optional(KEY)? else {
        return Ok(None);
    };
    match v.parse::<usize>() {
        Ok(n) if (64 * 1024..=i32::MAX as usize).contains(&n) => Ok(Some(n)),
        _ => Err(values.invalid(
            KEY,
            format!(
                "expected a number of bytes from 65536 to {}, got {}",
                i32::MAX,
                quote(&v)
            ),
        )),
    }
}
