//! Credentials for git over the network (libgit2 with its https and ssh transports), shared by
//! the syncer and git checkouts: ssh tries the ssh agent, then the user's default keys
//! (`~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`); https uses what the URL carries (a token as
//! user info) or anonymous access. Host keys are checked by libgit2 against `known_hosts`.
//! Network operations are bounded ([`bound_network`]).

use std::path::PathBuf;
use std::time::Duration;

use git2::{Cred, CredentialType, FetchOptions, RemoteCallbacks};

/// The default bound on git network operations (see [`bound_network`]).
pub const DEFAULT_NETWORK_TIMEOUT: Duration = Duration::from_secs(60);

/// Bounds every git network operation of this process: a connection must be made within
/// `timeout`, and a server silent for `timeout` while a request is waiting fails it. Without
/// this, libgit2 waits forever on a server that accepts a connection and never answers.
///
/// Call it before the process starts any thread (it sets a libgit2 global).
pub fn bound_network(timeout: Duration) {
    let ms = i32::try_from(timeout.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    // SAFETY: called at start-up, before the runtime or any other thread exists.
    unsafe {
        let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
        let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
    }
}

/// Fetch options with the credential callback (and no endless retry loop).
pub fn fetch_options<'a>() -> FetchOptions<'a> {
    let mut callbacks = RemoteCallbacks::new();
    let mut attempt = 0;
    callbacks.credentials(move |_url, username, allowed| {
        attempt += 1;
        let user = username.unwrap_or("git");
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user);
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            if attempt == 1 {
                return Cred::ssh_key_from_agent(user);
            }
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/root"));
            let keys: Vec<PathBuf> = ["id_ed25519", "id_ecdsa", "id_rsa"]
                .iter()
                .map(|k| home.join(".ssh").join(k))
                .filter(|p| p.exists())
                .collect();
            if let Some(key) = keys.get(attempt - 2) {
                return Cred::ssh_key(user, None, key, None);
            }
        }
        if allowed.contains(CredentialType::DEFAULT) && attempt < 3 {
            return Cred::default();
        }
        Err(git2::Error::from_str(
            "no credentials accepted (ssh agent, ~/.ssh keys, URL user info)",
        ))
    });
    let mut options = FetchOptions::new();
    options.remote_callbacks(callbacks);
    options
}
