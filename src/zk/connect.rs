//! Connecting to ZooKeeper: connection strings (with an optional chroot), session timeout,
//! digest authentication, TLS (the files read again for every connection, see [`super::tls`]),
//! and a bounded wait for the first connection.

use std::time::Duration;

use super::tls::{refusal, tls_servers, Loaded, TlsFiles};
use super::{Client, ZkError};

/// The default connection string when neither a flag, the config nor the environment sets one.
pub const DEFAULT_CONNECTION: &str = "zookeeper:2181";

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `host:port[,host:port…][/chroot]`.
    pub(crate) connection: String,
    /// Session timeout.
    pub(crate) session_timeout: Duration,
    /// `user:password` for the `digest` scheme.
    pub(crate) digest: Option<String>,
    /// How long to try before giving up on the first connection.
    pub(crate) connect_timeout: Duration,
    /// TLS: with a CA, every connection is TLS.
    pub(crate) tls: TlsFiles,
    /// The largest answer accepted, in bytes (`jute-maxbuffer`).
    pub(crate) max_answer: usize,
}

/// ZooKeeper's default `jute.maxbuffer` (0xfffff bytes, just under 1 MiB): the largest
/// answer a client accepts unless `jute-maxbuffer` says otherwise. The largest node data this
/// crate writes ([`super::MAX_NODE_DATA`]) reads back well within it.
pub const DEFAULT_JUTE_MAXBUFFER: usize = 0xfffff;

impl ConnectOptions {
    /// Options with the given connection string and the defaults (10 s session).
    pub fn new(connection: impl Into<String>) -> ConnectOptions {
        ConnectOptions {
            connection: connection.into(),
            session_timeout: Duration::from_secs(10),
            digest: None,
            connect_timeout: Duration::from_secs(10),
            tls: TlsFiles::default(),
            max_answer: DEFAULT_JUTE_MAXBUFFER,
        }
    }
}

/// The environment variable holding a connection string (zc.zk's).
pub const CONNECTION_ENV: &str = "ZC_ZK_CONNECTION_STRING";

/// The precedence of connection strings, everywhere: `flag`, then the config file's `file`,
/// then a non-empty `env`, then [`DEFAULT_CONNECTION`].
pub fn resolve_connection(flag: Option<&str>, file: Option<&str>, env: Option<&str>) -> String {
    flag.or(file)
        .or(env.filter(|e| !e.trim().is_empty()).map(str::trim))
        .unwrap_or(DEFAULT_CONNECTION)
        .to_string()
}

/// [`resolve_connection`] with `env` read from [`CONNECTION_ENV`].
pub(crate) fn connection_string(flag: Option<&str>, file: Option<&str>) -> String {
    let env = std::env::var(CONNECTION_ENV).ok();
    resolve_connection(flag, file, env.as_deref())
}

/// Connects, failing with a clear error after `connect_timeout`. With TLS, the files are read
/// (again) now, an expired client certificate is refused before any connection, and a
/// connection refused by every server for a TLS reason (no TLS, a certificate that does not
/// verify) fails at once with the servers' reasons.
pub async fn connect(opts: &ConnectOptions) -> Result<Client, ZkError> {
    let fail = |reason: String| ZkError::Connect {
        conn: opts.connection.clone(),
        reason,
    };
    if let Some(chroot) = opts.connection.find('/').map(|i| &opts.connection[i..]) {
        if chroot.len() > 1 && chroot.ends_with('/') {
            return Err(fail("the chroot must not end with '/'".into()));
        }
    }
    let tls = opts.tls.load()?;
    let mut connector = Client::connector()
        .with_session_timeout(opts.session_timeout)
        .with_connection_timeout(opts.connect_timeout.min(opts.session_timeout))
        .with_max_frame_len(opts.max_answer);
    if let Some(digest) = &opts.digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    let result = match &tls {
        None => {
            tokio::time::timeout(opts.connect_timeout, connector.connect(&opts.connection)).await
        }
        Some(tls) => {
            tls.check_expiry(crate::files::now() as i64)?;
            let servers = tls_servers(&opts.connection).map_err(fail)?;
            connector = connector.with_tls(tls.options.clone());
            let attempt = tokio::time::timeout(
                opts.connect_timeout,
                connector.secure_connect(&opts.connection),
            );
            tokio::select! {
                r = attempt => r,
                Some(why) = all_refuse(tls, &servers) => return Err(fail(why)),
            }
        }
    };
    match result {
        Ok(Ok(client)) => {
            super::session::track(&client);
            Ok(client)
        }
        Ok(Err(e)) => Err(fail(format!(
            "{e}{}",
            diagnose(&opts.connection, tls.as_ref()).await
        ))),
        Err(_) => Err(fail(format!(
            "no session within {} s{}",
            opts.connect_timeout.as_secs_f64(),
            diagnose(&opts.connection, tls.as_ref()).await
        ))),
    }
}

/// How long a TLS connection may take before [`all_refuse`] looks at why: a connection that
/// works is made well within it, so the servers see no probe then.
const PROBE_DELAY: Duration = Duration::from_millis(300);

/// After [`PROBE_DELAY`], `Some(reasons)` if every server refuses a TLS connection for a TLS
/// reason; `None` if one accepts it or cannot be reached at all (the connection attempt then
/// tells).
async fn all_refuse(tls: &Loaded, servers: &[String]) -> Option<String> {
    tokio::time::sleep(PROBE_DELAY).await;
    let probes = servers.iter().map(|server| {
        let (config, ca, server) = (tls.config.clone(), tls.ca.clone(), server.clone());
        tokio::task::spawn_blocking(move || refusal(config, &ca, &server))
    });
    let mut reasons = Vec::new();
    for probe in futures::future::join_all(probes).await {
        match probe {
            Ok(Ok(Some(why))) => reasons.push(why),
            _ => return None,
        }
    }
    (!reasons.is_empty()).then(|| format!("TLS refused: {}", reasons.join("; ")))
}

/// Why each server of a connection string cannot be reached, for the error message: a name
/// that does not resolve, a refused connection, no answer. `""` if every server accepts a
/// connection (the failure is then the ZooKeeper handshake's). The servers are probed at
/// once, each TCP connect bounded by [`PROBE_TIMEOUT`] (name resolution by the resolver's own
/// timeout).
async fn diagnose(connection: &str, tls: Option<&Loaded>) -> String {
    if let Some(tls) = tls {
        return diagnose_tls(connection, tls).await;
    }
    let hosts = connection.split('/').next().unwrap_or("");
    let probes = hosts
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(probe);
    let problems: Vec<String> = futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect();
    if problems.is_empty() {
        String::new()
    } else {
        format!(" ({})", problems.join("; "))
    }
}

/// [`diagnose`] with TLS: each server's TLS handshake, or why it cannot be reached.
async fn diagnose_tls(connection: &str, tls: &Loaded) -> String {
    let servers = tls_servers(connection).unwrap_or_default();
    let probes = servers.iter().map(|server| {
        let (config, ca, server) = (tls.config.clone(), tls.ca.clone(), server.clone());
        tokio::task::spawn_blocking(move || refusal(config, &ca, &server))
    });
    let problems: Vec<String> = futures::future::join_all(probes)
        .await
        .into_iter()
        .filter_map(|r| match r {
            Ok(Ok(None)) => None,
            Ok(Ok(Some(why))) | Ok(Err(why)) => Some(why),
            Err(e) => Some(format!("the TLS probe failed: {e}")),
        })
        .collect();
    if problems.is_empty() {
        String::new()
    } else {
        format!(" ({})", problems.join("; "))
    }
}

/// Longest wait for a TCP connection when diagnosing a failed connect.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What is wrong with reaching one `host[:port]` (port 2181 if none), if anything.
async fn probe(server: &str) -> Option<String> {
    let has_port = server
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && !h.ends_with(':') && p.parse::<u16>().is_ok());
    let target = if has_port {
        server.to_string()
    } else {
        format!("{server}:2181")
    };
    let addrs: Vec<std::net::SocketAddr> = match tokio::net::lookup_host(&target).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => return Some(format!("{server}: cannot resolve the name ({e})")),
    };
    let mut last = None;
    for addr in addrs {
        match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => return None,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                last = Some(format!("{server}: connection refused"));
            }
            Ok(Err(e)) => last = Some(format!("{server}: {e}")),
            Err(_) => last = Some(format!("{server}: no answer to a TCP connect")),
        }
    }
    Some(last.unwrap_or_else(|| format!("{server}: the name resolves to no address")))
}
