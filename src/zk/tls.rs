//! TLS to ZooKeeper (CONTRACT 16): the CA, client certificate and key files, read again for
//! every new connection (so files replaced on disk take effect at the next connection); why a
//! server was refused (a TLS handshake of our own, whose error names the reason); the client
//! certificate's identity and expiry.
//!
//! Nothing here ever prints a file's content: errors name the file and the reason only.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};

/// The three files of a TLS connection. With `ca` set every connection is TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM CA bundle the server's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// PEM client certificate (chain).
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub key: Option<PathBuf>,
}

/// The environment variables of the `--tls-*` flags.
pub(crate) const ENV_CA: &str = "ZKDEPLOYMENT_TLS_CA";
/// See [`ENV_CA`].
pub(crate) const ENV_CERT: &str = "ZKDEPLOYMENT_TLS_CERT";
/// See [`ENV_CA`].
pub(crate) const ENV_KEY: &str = "ZKDEPLOYMENT_TLS_KEY";

/// What is wrong with the TLS files. Messages name the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{what} {}: cannot read it: {error}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A file is not what it should be (not PEM, no certificate, no key).
    #[error("{what} {}: {reason}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// The key is not the certificate's.
    #[error("TLS client key {} does not match the certificate {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    /// A combination of files that cannot work.
    #[error("{0}")]
    Incomplete(String),
    /// The server gives the session no `x509` identity.
    #[error(
        "the server reports no x509 identity for the session: is a client certificate set \
         (--tls-cert, --tls-key), and the server's authProvider.x509 configured?"
    )]
    NoIdentity,
    /// The client certificate has expired: not a configuration error (a renewal written to
    /// disk takes effect at the next connection).
    #[error(
        "TLS client certificate {} expired at {} (Unix time {not_after}); renew it",
        path.display(),
        utc(*not_after)
    )]
    Expired { path: PathBuf, not_after: i64 },
}

impl TlsError {
    /// True for errors in the configuration (exit 2); false for an expired certificate.
    pub(crate) fn is_config(&self) -> bool {
        !matches!(self, TlsError::Expired { .. })
    }
}

const CA: &str = "TLS CA file";
const CERT: &str = "TLS client certificate";
const KEY: &str = "TLS client key";

/// The client certificate's identity and validity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCert {
    /// The certificate file.
    pub(crate) path: PathBuf,
    /// Its subject, as x509-parser prints it (for messages).
    pub(crate) subject: String,
    /// Its notAfter, Unix seconds.
    pub(crate) not_after: i64,
}

/// The files read and checked, ready for one connection.
pub(crate) struct Loaded {
    /// For the ZooKeeper client.
    pub(crate) options: zookeeper_client::TlsOptions,
    /// The same trust and identity, for [`refusal`]'s handshake.
    pub(crate) config: Arc<ClientConfig>,
    /// The client certificate, if any.
    pub(crate) client: Option<ClientCert>,
    /// The CA file (for messages).
    pub(crate) ca: PathBuf,
}

impl TlsFiles {
    /// True if TLS is on (a CA is set).
    pub fn is_set(&self) -> bool {
        self.ca.is_some()
    }

    /// Each of `flag`, else `file`, else the environment variable.
    pub(crate) fn resolve(flag: &TlsFiles, file: &TlsFiles) -> TlsFiles {
        let env = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        TlsFiles {
            ca: flag.ca.clone().or(file.ca.clone()).or_else(|| env(ENV_CA)),
            cert: flag
                .cert
                .clone()
                .or(file.cert.clone())
                .or_else(|| env(ENV_CERT)),
            key: flag
                .key
                .clone()
                .or(file.key.clone())
                .or_else(|| env(ENV_KEY)),
        }
    }

    /// The combination rules: a certificate and a key go together, and need a CA.
    pub(crate) fn check_combination(&self) -> Result<(), TlsError> {
        let incomplete = |m: &str| Err(TlsError::Incomplete(m.to_string()));
        match (&self.ca, &self.cert, &self.key) {
            (_, Some(_), None) => {
                incomplete("a TLS client certificate needs its key (zookeeper-tls-key, --tls-key)")
            }
            (_, None, Some(_)) => incomplete(
                "a TLS client key needs its certificate (zookeeper-tls-cert, --tls-cert)",
            ),
            (None, Some(_), Some(_)) => incomplete(
                "a TLS client certificate needs the CA of the servers (zookeeper-tls-ca, --tls-ca)",
            ),
            _ => Ok(()),
        }
    }

    /// Reads and checks the files (`None` without a CA). An expired client certificate is
    /// not refused here (see [`Loaded::check_expiry`]).
    pub(crate) fn load(&self) -> Result<Option<Loaded>, TlsError> {
        self.check_combination()?;
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        let ca_text = read_text(CA, ca)?;
        let roots = read_roots(ca, &ca_text)?;
        let builder = ClientConfig::builder().with_root_certificates(roots);
        let mut options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&ca_text)
            .map_err(|_| invalid(CA, ca, "no usable CA certificate"))?;
        let (config, client) = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let cert_text = read_text(CERT, cert)?;
                let chain = read_certs(CERT, cert, &cert_text)?;
                let key_text = read_text(KEY, key)?;
                let private = PrivateKeyDer::from_pem_slice(key_text.as_bytes()).map_err(|_| {
                    invalid(KEY, key, "no PEM private key (PKCS#8, PKCS#1 or SEC1)")
                })?;
                let client = client_cert(cert, &chain[0])?;
                let provider = builder.crypto_provider().clone();
                rustls::sign::CertifiedKey::from_der(chain.clone(), private.clone_key(), &provider)
                    .map_err(|e| match e {
                        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                            cert: cert.clone(),
                            key: key.clone(),
                        },
                        _ => invalid(KEY, key, "not a usable private key"),
                    })?;
                options = options
                    .with_pem_identity(&cert_text, &key_text)
                    .map_err(|_| invalid(KEY, key, "not a usable private key"))?;
                let config = builder
                    .with_client_auth_cert(chain, private)
                    .map_err(|_| invalid(KEY, key, "not a usable private key"))?;
                (config, Some(client))
            }
            _ => (builder.with_no_client_auth(), None),
        };
        Ok(Some(Loaded {
            options,
            config: Arc::new(config),
            client,
            ca: ca.clone(),
        }))
    }

    /// The client certificate's identity and expiry, if one is set (for `monitor` and the
    /// metrics file).
    pub(crate) fn client_cert(&self) -> Result<Option<ClientCert>, TlsError> {
        let Some(cert) = &self.cert else {
            return Ok(None);
        };
        let text = read_text(CERT, cert)?;
        let chain = read_certs(CERT, cert, &text)?;
        client_cert(cert, &chain[0]).map(Some)
    }
}

/// Reads and checks the files now (exit 2 material) without connecting; an expired client
/// certificate is reported as [`TlsError::Expired`].
pub(crate) fn check_files(files: &TlsFiles) -> Result<(), TlsError> {
    match files.load()? {
        Some(loaded) => loaded.check_expiry(crate::files::now() as i64),
        None => Ok(()),
    }
}

impl Loaded {
    /// Refuses an expired client certificate (before any connection is tried).
    pub(crate) fn check_expiry(&self, now: i64) -> Result<(), TlsError> {
        match &self.client {
            Some(c) if c.not_after < now => Err(TlsError::Expired {
                path: c.path.clone(),
                not_after: c.not_after,
            }),
            _ => Ok(()),
        }
    }
}

fn invalid(what: &'static str, path: &Path, reason: &str) -> TlsError {
    TlsError::Invalid {
        what,
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn read_text(what: &'static str, path: &Path) -> Result<String, TlsError> {
    let bytes = std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        error,
    })?;
    String::from_utf8(bytes).map_err(|_| invalid(what, path, "not PEM (not text)"))
}

fn read_certs(
    what: &'static str,
    path: &Path,
    text: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|_| invalid(what, path, "not PEM (a malformed BEGIN/END section)"))?;
    if certs.is_empty() {
        return Err(invalid(what, path, "not PEM: no CERTIFICATE section"));
    }
    Ok(certs)
}

fn read_roots(path: &Path, text: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(CA, path, text)? {
        roots.add(cert).map_err(|e| {
            invalid(
                CA,
                path,
                &format!("a certificate is not usable as a CA ({e})"),
            )
        })?;
    }
    Ok(roots)
}

fn client_cert(path: &Path, der: &CertificateDer<'_>) -> Result<ClientCert, TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|_| invalid(CERT, path, "not an X.509 certificate"))?;
    Ok(ClientCert {
        path: path.to_path_buf(),
        subject: cert.subject().to_string(),
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a Unix time.
pub(crate) fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The servers of a connection string (`host:port` each, the chroot and any `tcp+tls://`
/// prefix dropped). With TLS a server marked `tcp://` (plain text) is refused.
pub(crate) fn tls_servers(connection: &str) -> Result<Vec<String>, String> {
    let mut servers = Vec::new();
    for entry in connection
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        if entry.starts_with("tcp://") {
            return Err(format!(
                "{entry}: a plain-text (tcp://) server in the connection string, with a TLS CA set"
            ));
        }
        let server = entry.strip_prefix("tcp+tls://").unwrap_or(entry);
        let server = server.split('/').next().unwrap_or_default();
        if server.is_empty() {
            continue;
        }
        // The client library verifies this name (and panics on one that is not a name).
        let host = match server.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => h,
            _ => server,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if ServerName::try_from(host.to_string()).is_err() {
            return Err(format!(
                "{server}: not a host name or IP address a certificate can name"
            ));
        }
        servers.push(server.to_string());
    }
    Ok(servers)
}

/// Longest wait for each step of [`refusal`]'s handshake.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why `server` (`host[:port]`, port 2181 if none) refuses a TLS connection made with
/// `config`: `Ok(None)` if the handshake succeeds, `Ok(Some(reason))` for a TLS refusal (no
/// TLS on the port, a certificate that does not verify), `Err(reason)` if the server cannot
/// be reached at all. Blocking: run it on a blocking thread.
pub(crate) fn refusal(
    config: Arc<ClientConfig>,
    ca: &Path,
    server: &str,
) -> Result<Option<String>, String> {
    let (host, target) = match server.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), server.to_string()),
        _ => (server.to_string(), format!("{server}:2181")),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = ServerName::try_from(host.clone())
        .map_err(|_| format!("{server}: not a host name or IP address"))?;
    let addr = target
        .to_socket_addrs()
        .map_err(|e| format!("{server}: cannot resolve the name ({e})"))?
        .next()
        .ok_or_else(|| format!("{server}: the name resolves to no address"))?;
    let mut sock =
        TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(|e| format!("{server}: {e}"))?;
    let _ = sock.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = sock.set_write_timeout(Some(PROBE_TIMEOUT));
    let mut conn = rustls::ClientConnection::new(config, name)
        .map_err(|e| format!("{server}: cannot start a TLS handshake ({e})"))?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            return Ok(Some(format!("{server}: {}", reason(&e, ca, &host))));
        }
    }
    // TLS 1.3: the server judges our certificate after the handshake; its alert comes next.
    let _ = conn.writer().flush();
    let _ = conn.complete_io(&mut sock);
    let mut buf = [0u8; 1];
    match conn.reader().read(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            Ok(Some(format!("{server}: {}", reason(&e, ca, &host))))
        }
        _ => Ok(None),
    }
}

/// Words for a failed handshake.
fn reason(e: &std::io::Error, ca: &Path, host: &str) -> String {
    use std::io::ErrorKind::*;
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return match tls {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    format!("its certificate is not signed by a CA of {}", ca.display())
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    format!("its certificate is not valid for the name {host}")
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "its certificate has expired".to_string()
                }
                other => format!("its certificate does not verify: {other:?}"),
            },
            rustls::Error::AlertReceived(alert) => {
                format!("the server ended the TLS handshake ({alert:?}): does it trust our client certificate?")
            }
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                "it does not speak TLS on this port (a plain-text port?)".to_string()
            }
            other => format!("TLS handshake failed: {other}"),
        };
    }
    match e.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
            "it closed the connection during the TLS handshake: no TLS on this port (a plain-text port?)".to_string()
        }
        WouldBlock | TimedOut => format!(
            "no answer to the TLS handshake within {} s (a plain-text port?)",
            PROBE_TIMEOUT.as_secs()
        ),
        _ => format!("TLS handshake failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_prints_civil_time() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn combinations_and_plain_servers_are_refused() {
        let p = |s: &str| Some(PathBuf::from(s));
        let ok = TlsFiles {
            ca: p("/ca"),
            cert: p("/c"),
            key: p("/k"),
        };
        assert!(ok.check_combination().is_ok());
        let no_key = TlsFiles {
            key: None,
            ..ok.clone()
        };
        assert!(no_key
            .check_combination()
            .unwrap_err()
            .to_string()
            .contains("needs its key"));
        let no_ca = TlsFiles {
            ca: None,
            ..ok.clone()
        };
        assert!(no_ca
            .check_combination()
            .unwrap_err()
            .to_string()
            .contains("CA"));
        assert!(TlsFiles::default().load().unwrap().is_none());
        assert_eq!(
            tls_servers("a:1,tcp+tls://b:2/chroot").unwrap(),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        assert_eq!(tls_servers("a:1/x/y").unwrap(), vec!["a:1".to_string()]);
        assert!(tls_servers("a:1,tcp://b:2")
            .unwrap_err()
            .contains("tcp://b:2"));
        assert!(tls_servers("tcp://b:2/x")
            .unwrap_err()
            .contains("tcp://b:2"));
    }

    #[test]
    fn missing_and_non_pem_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let files = TlsFiles {
            ca: Some(missing.clone()),
            ..Default::default()
        };
        let e = files.load().err().unwrap();
        assert!(
            e.is_config() && e.to_string().contains("missing.pem"),
            "{e}"
        );
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello secret-content\n").unwrap();
        let files = TlsFiles {
            ca: Some(junk),
            ..Default::default()
        };
        let e = files.load().err().unwrap().to_string();
        assert!(e.contains("junk.pem") && e.contains("not PEM"), "{e}");
        assert!(!e.contains("secret-content"), "{e}");
    }
}
