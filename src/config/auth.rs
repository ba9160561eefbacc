//! `--auth AUTH` on the command line (`sync`, `tree import`, `resume`): digest credentials
//! `user:password`, or a `file://`/`http(s)://` value giving them, under the same rules as the
//! configuration file's `zookeeper-auth` (indirection, stripping, a reference that gives
//! nothing is an error). Messages never show the value.

use std::path::Path;

use super::ini::Entry;
use super::values::Values;
use super::{http_get, ConfigError, FetchError, Secret, SECRET_KEY};

/// True if `value` has the shape of digest credentials: a non-empty user, a `:`, and no
/// control characters.
pub(super) fn is_digest(value: &str) -> bool {
    match value.split_once(':') {
        Some((user, _)) => !user.is_empty() && !value.chars().any(char::is_control),
        None => false,
    }
}

/// Why an `--auth` value was refused (the message names the flag, never the value).
#[derive(Debug, thiserror::Error)]
#[error("--auth: {0}")]
pub(crate) struct AuthError(String);

/// Resolves an `--auth` value (see the module documentation).
pub(crate) fn auth_flag(value: &str) -> Result<Secret, AuthError> {
    auth_flag_with(value, &http_get)
}

/// [`auth_flag`] with the GET for `http(s)://` values given.
pub(crate) fn auth_flag_with(
    value: &str,
    fetch: &dyn Fn(&str) -> Result<Option<String>, FetchError>,
) -> Result<Secret, AuthError> {
    let values = Values {
        path: Path::new("--auth"),
        entries: vec![(
            SECRET_KEY.to_string(),
            Entry {
                value: value.trim().to_string(),
                line: 0,
            },
        )],
        fetch,
    };
    let found = values.optional_strict(SECRET_KEY).map_err(|e| match e {
        ConfigError::Invalid { message, .. } | ConfigError::Unreachable { message, .. } => {
            AuthError(message)
        }
        _ => AuthError("cannot read the credentials".into()),
    })?;
    match found {
        Some(v) if is_digest(&v) => Ok(Secret(v)),
        Some(_) => Err(AuthError(
            "expected digest credentials user:password (value not shown)".into(),
        )),
        None => Err(AuthError(
            "empty: expected digest credentials user:password or file:///PATH".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_http(_: &str) -> Result<Option<String>, FetchError> {
        Err(FetchError::Unreachable("no network in tests".into()))
    }

    #[test]
    fn values_follow_the_config_rules_and_never_show_the_secret() {
        assert_eq!(
            auth_flag_with("syncer:s3cr3t", &no_http).unwrap().expose(),
            "syncer:s3cr3t"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("auth");
        std::fs::write(&file, "syncer:from-file\n").unwrap();
        let url = format!("file://{}", file.display());
        assert_eq!(
            auth_flag_with(&url, &no_http).unwrap().expose(),
            "syncer:from-file"
        );
        let served = |_: &str| Ok(Some("web:pw".to_string()));
        assert_eq!(
            auth_flag_with("https://vault/x", &served).unwrap().expose(),
            "web:pw"
        );
        for bad in ["nocolon-s3cr3t", ":s3cr3t", "", "  "] {
            let e = auth_flag_with(bad, &no_http).unwrap_err().to_string();
            assert!(e.starts_with("--auth: "), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
        let missing = format!("file://{}/missing", dir.path().display());
        let e = auth_flag_with(&missing, &no_http).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("must give"), "{e}");
        std::fs::write(&file, "nocolon-s3cr3t\n").unwrap();
        let e = auth_flag_with(&url, &no_http).unwrap_err().to_string();
        assert!(e.contains("user:password") && !e.contains("s3cr3t"), "{e}");
    }
}
