//! The checks and parsers of single values: plain names (`host-id`, `role`, `host-name`), mail
//! addresses, `session-timeout` seconds, the `smtp` URL, and relative paths.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::quote;
use super::values::redact_url;
use super::Smtp;

/// ZooKeeper carries the session timeout as an `i32` of milliseconds.
const MAX_SESSION_TIMEOUT_MS: f64 = i32::MAX as f64;

pub(super) fn resolve_path(config: &Path, value: &str) -> PathBuf {
    let p = PathBuf::from(value);
    if p.is_absolute() {
        return p;
    }
    match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p,
    }
}

/// A host id, host name or role: one ZooKeeper node name (by the server's path rules:
/// [`crate::tree::bad_node_name`]), with no whitespace either.
pub(super) fn check_plain_name(value: &str) -> Result<(), String> {
    let bad = value.is_empty()
        || value == "."
        || value == ".."
        || value
            .chars()
            .any(|c| c == '/' || c.is_whitespace() || c.is_control());
    if bad {
        return Err(format!(
            "expected a plain name (no '/', whitespace or control characters, not '.' or '..'), got {}",
            quote(value)
        ));
    }
    match crate::tree::bad_node_name(value) {
        Some(why) => Err(format!(
            "{why}: {} cannot be a ZooKeeper node name",
            quote(value)
        )),
        None => Ok(()),
    }
}

pub(super) fn looks_like_address(value: &str) -> bool {
    value.contains('@')
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',')
}

pub(super) fn parse_seconds(value: &str) -> Result<Duration, String> {
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

pub(super) fn parse_smtp(value: &str) -> Result<Smtp, String> {
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
