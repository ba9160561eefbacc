//! Access control lists for a protected tree (docs/security.md).
//!
//! ZooKeeper's ACLs are per node and per identity. The syncer's identity (digest credentials
//! `user:password` given with `--auth`) owns what it writes: every such node is readable by
//! everyone (`world:anyone` READ) and writable only by that identity
//! (`digest:user:base64(sha1(user:password))` ALL). The id is computed here rather than left
//! to the `auth` scheme (which the server expands to the ids of the *setting* session), so a
//! node's ACL can be compared with the one it should have and repaired when it differs.
//!
//! With `--auth x509` the owner is the syncer's TLS client certificate instead: the id is the
//! one the server reports for the session (`whoami`), which is the certificate's subject as
//! ZooKeeper's `X509AuthenticationProvider` prints it (`x509:CN=syncer,O=Example`), so no
//! rendering of distinguished names here can disagree with the server's.
//!
//! Three nodes let everyone CREATE children as well: `/hosts` (agents register their ephemeral
//! host nodes there), the agent registry ([`super::paths::AGENT_REGISTRY`], their registry
//! nodes beside them) and the halt node ([`super::halts::HALTS`], where agents that cannot
//! write `/hosts` record a halt). Nobody but the owner may change their data or delete their
//! children.

use futures::stream::{self, StreamExt};
use zookeeper_client::{Acl, AuthId, Permission};

use super::{call, Client, ZkError};

/// The ACL that [`Protection`] gives a kind of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tree and index nodes, the import root: READ for all, ALL for the owner.
    Owned,
    /// `/hosts`, the agent registry and the halt node: READ and CREATE for all, ALL for the
    /// owner.
    Register,
    /// Open to everyone (`world:anyone` ALL): zc.zk's default, and `/hosts` in a mixed fleet.
    Open,
}

/// The syncer's identity and the ACLs it writes.
#[derive(Clone)]
pub struct Protection {
    /// `digest` or `x509`.
    scheme: &'static str,
    /// `user:base64(sha1(user:password))`, or the certificate's subject.
    owner: String,
}

impl std::fmt::Debug for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protection({})", self.user())
    }
}

impl Protection {
    /// The protection owned by the identity with these digest credentials (`user:password`).
    pub fn new(credentials: &str) -> Protection {
        Protection {
            scheme: "digest",
            owner: digest_id(credentials),
        }
    }

    /// The protection owned by the TLS client certificate of `client`'s session: its `x509`
    /// id as the server reports it. An error if the session has none (no certificate, or a
    /// server without the x509 authentication provider).
    pub(crate) async fn x509(client: &Client) -> Result<Protection, ZkError> {
        let users = call("whoami", "/", client.list_auth_users()).await?;
        users
            .iter()
            .find(|u| u.scheme() == "x509")
            .map(|u| Protection {
                scheme: "x509",
                owner: u.user().to_string(),
            })
            .ok_or(ZkError::Tls(super::tls::TlsError::NoIdentity))
    }

    /// The owner's user name (never the password or its hash), or the certificate's subject.
    pub(crate) fn user(&self) -> &str {
        match self.scheme {
            "digest" => self.owner.split(':').next().unwrap_or_default(),
            _ => &self.owner,
        }
    }

    /// The ACL for a kind of node.
    pub fn acl(&self, kind: Kind) -> Vec<Acl> {
        let owner = Acl::new(Permission::ALL, AuthId::new(self.scheme, &self.owner));
        let world = |p| Acl::new(p, AuthId::anyone());
        match kind {
            Kind::Owned => vec![world(Permission::READ), owner],
            Kind::Register => vec![world(Permission::READ | Permission::CREATE), owner],
            Kind::Open => vec![world(Permission::ALL)],
        }
    }
}

/// The digest scheme's id for `user:password`: `user:base64(sha1(user:password))`.
pub fn digest_id(credentials: &str) -> String {
    let user = credentials.split(':').next().unwrap_or_default();
    format!("{user}:{}", base64(&sha1(credentials.as_bytes())))
}

/// True if the two ACLs grant the same permissions to the same ids (in any order).
pub fn same(a: &[Acl], b: &[Acl]) -> bool {
    let key = |acl: &[Acl]| {
        let mut v: Vec<(String, String, Permission)> = acl
            .iter()
            .map(|e| (e.scheme().to_string(), e.id().to_string(), e.permission()))
            .collect();
        v.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
        v
    };
    let (ka, kb) = (key(a), key(b));
    ka.len() == kb.len()
        && ka
            .iter()
            .zip(&kb)
            .all(|(x, y)| x.0 == y.0 && x.1 == y.1 && x.2.has(y.2) && y.2.has(x.2))
}

/// The permissions an ACL grants everyone (`world:anyone`), beyond READ.
pub(crate) fn open_permissions(acl: &[Acl]) -> Permission {
    let mut granted = Permission::NONE;
    for entry in acl {
        if entry.scheme() == "world" && entry.id() == "anyone" {
            granted = granted | entry.permission();
        }
    }
    granted & (Permission::WRITE | Permission::CREATE | Permission::DELETE | Permission::ADMIN)
}

/// Requests kept in flight while checking ACLs.
const WINDOW: usize = 1024;

/// Sets the ACL of every node in `nodes` (path and the ACL it should have) that has another
/// one; nodes that do not exist are skipped. Reads and writes are pipelined. Returns the
/// paths repaired.
pub(crate) async fn repair(
    client: &Client,
    nodes: &[(String, Vec<Acl>)],
) -> Result<Vec<String>, ZkError> {
    let reads = stream::iter(nodes.iter().map(|(path, want)| async move {
        let got = call("get-acl", path, client.get_acl(path)).await;
        (path, want, got)
    }))
    .buffered(WINDOW);
    futures::pin_mut!(reads);
    let mut wrong = Vec::new();
    while let Some((path, want, got)) = reads.next().await {
        match got {
            Ok((acl, _)) if same(&acl, want) => {}
            Ok(_) => wrong.push((path, want)),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    let sets = stream::iter(wrong.into_iter().map(|(path, want)| async move {
        (
            path,
            call("set-acl", path, client.set_acl(path, want, None)).await,
        )
    }))
    .buffered(WINDOW);
    futures::pin_mut!(sets);
    let mut repaired = Vec::new();
    while let Some((path, done)) = sets.next().await {
        match done {
            Ok(_) => repaired.push(path.clone()),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(repaired)
}

/// SHA-1 (FIPS 180-4). ZooKeeper's digest scheme is defined on it; it is used here for that
/// id only, never for integrity.
fn sha1(message: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut data = message.to_vec();
    let bit_len = (message.len() as u64).wrapping_mul(8);
    data.push(0x80);
    while data.len() % 64 != 56 {
        data.push(0);
    }
    data.extend_from_slice(&bit_len.to_be_bytes());
    for block in data.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                text.push(B64[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(
            hex(&sha1(&[b'a'; 1000])),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }

    #[test]
    fn digest_ids_are_zookeepers() {
        // `DigestAuthenticationProvider.generateDigest("super:test")`, ZooKeeper's docs.
        assert_eq!(
            digest_id("super:test"),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
    }

    #[test]
    fn acls_compare_as_sets_and_open_permissions_are_found() {
        let p = Protection::new("syncer:pw");
        assert_eq!(p.user(), "syncer");
        assert!(format!("{p:?}").contains("syncer") && !format!("{p:?}").contains("pw"));
        let mut owned = p.acl(Kind::Owned);
        assert!(same(&owned, &p.acl(Kind::Owned)));
        owned.reverse();
        assert!(same(&owned, &p.acl(Kind::Owned)));
        assert!(!same(&owned, &p.acl(Kind::Register)));
        assert!(!same(
            &owned,
            &Protection::new("syncer:other").acl(Kind::Owned)
        ));
        assert_eq!(open_permissions(&owned), Permission::NONE);
        assert_eq!(open_permissions(&p.acl(Kind::Register)), Permission::CREATE);
        assert!(open_permissions(&p.acl(Kind::Open)).has(Permission::WRITE));
    }
}
