//! Credentials for git over the network (libgit2 with its https and ssh transports), shared by
//! the syncer and git checkouts: ssh tries the ssh agent, then the user's default keys
//! (`~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`); https uses what the URL carries (a token as
//! user info) or anonymous access. Host keys are checked by libgit2 against `known_hosts`.

use std::path::PathBuf;

use git2::{Cred, CredentialType, FetchOptions, RemoteCallbacks};

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
