//! Credentials for git over the network (libgit2 with its https and ssh transports), shared by
//! the syncer and git checkouts: ssh tries the ssh agent, then the user's default keys
//! (`~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`); https uses what the URL carries (a token as
//! user info) or anonymous access. Host keys are checked by libgit2 against `known_hosts`.
//! Network operations are bounded ([`bound_network`]).
//!
//! libgit2 (and with it the OpenSSL and libssh2 linked into the binary) is initialised on the
//! first git operation of the process ([`init`]), not at start-up: its initialisation runs
//! several megabytes of OpenSSL code and allocates its tables, which an agent that never
//! checks out a git package would otherwise keep resident for its whole life.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;
use std::time::Duration;

use git2::{Cred, CredentialType, FetchOptions, RemoteCallbacks};

/// The default bound on git network operations (see [`bound_network`]).
pub(crate) const DEFAULT_NETWORK_TIMEOUT: Duration = Duration::from_secs(60);

/// The bound [`init`] gives libgit2, in milliseconds.
static NETWORK_TIMEOUT_MS: AtomicI32 = AtomicI32::new(60_000);

static INIT: Once = Once::new();

/// Bounds every git network operation of this process: a connection must be made within
/// `timeout`, and a server silent for `timeout` while a request is waiting fails it. Without
/// this, libgit2 waits forever on a server that accepts a connection and never answers.
///
/// Call it before the process starts any thread. It records the bound for [`init`], and it sets
/// the certificate variables (`SSL_CERT_FILE`, `SSL_CERT_DIR`) that git2 sets on its first use
/// for the OpenSSL it links, so that the first use, whenever it comes, finds them set and
/// leaves the environment alone (changing it while other threads may read it is unsound).
pub(crate) fn bound_network(timeout: Duration) {
    let ms = i32::try_from(timeout.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    NETWORK_TIMEOUT_MS.store(ms, Ordering::SeqCst);
    // SAFETY: called at start-up, before the runtime or any other thread exists.
    unsafe {
        openssl_probe::try_init_openssl_env_vars();
    }
    if INIT.is_completed() {
        set_timeouts(ms);
    }
}

/// Changes the bound of [`bound_network`] for the git operations to come; call it only while
/// no git operation runs (the syncer's attempts, one after the other).
pub(crate) fn set_network_timeout(timeout: Duration) {
    let ms = i32::try_from(timeout.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    NETWORK_TIMEOUT_MS.store(ms, Ordering::SeqCst);
    init();
    set_timeouts(ms);
}

/// Initialises libgit2 with the bound of [`bound_network`] (once per process). Every git
/// operation calls it first.
pub(crate) fn init() {
    INIT.call_once(|| set_timeouts(NETWORK_TIMEOUT_MS.load(Ordering::SeqCst)));
}

fn set_timeouts(ms: i32) {
    // SAFETY: the options are plain integers read by later network operations; they are set
    // before the first git operation of the process (under `INIT`), or at start-up.
    unsafe {
        let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
        let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
    }
}

/// Fetch options with the credential callback (and no endless retry loop).
pub(crate) fn fetch_options<'a>() -> FetchOptions<'a> {
    init();
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
