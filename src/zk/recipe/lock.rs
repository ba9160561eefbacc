//! kazoo's Lock recipe (`kazoo.recipe.lock.Lock`): contenders are ephemeral sequential
//! children of the lock node named `<uuid4 hex>__lock__<10-digit sequence>`, holding the
//! contender's identifier as data; the contender with the lowest sequence holds the lock.
//!
//! A waiter watches the contender just before its own and, when that one goes, lists the
//! queue again ([`Lock::acquire`]). [`Lock::try_acquire`] enters and, unless first, leaves
//! again at once, naming the holder. A contender of this very session found in the way (left
//! by an attempt that was interrupted, a dropped future) would block the lock while the
//! session lives: it is removed.

use std::future::Future;

use tokio::time::Instant;
use zookeeper_client::{Acls, CreateMode};

use super::{wait_for, Attempt, Woken};
use crate::zk::node::{delete_own, make_missing_node};
use crate::zk::{call, call_retrying, join, list_or_empty, Client, ZkError, LOSS_RETRIES};

/// The marker between a contender's prefix and its sequence number.
pub(crate) const LOCK_MARKER: &str = "__lock__";

/// Most looks at a queue in one try (each removes a leftover of ours, or finds a contender
/// gone meanwhile).
const LOOKS: usize = 20;

/// A contender of a lock, as found in ZooKeeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// Child node name.
    pub(crate) name: String,
    /// Its sequence number.
    pub(crate) sequence: i64,
    /// Its data (the identifier), as text.
    pub identifier: String,
    /// The session that created it.
    pub(crate) owner: i64,
}

/// A lock this process holds; given back by [`LockGuard::release`] (or by the session ending).
#[derive(Debug, PartialEq, Eq)]
pub struct LockGuard {
    path: String,
    node: String,
}

impl LockGuard {
    /// The lock node.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Full path of our contender node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Gives the lock back: deletes our contender (already gone is fine).
    pub async fn release(self, client: &Client) -> Result<(), ZkError> {
        delete_own(client, &self.node).await
    }

    /// Writes `data` into the lock node if its data version is still `version` and gives the
    /// lock back, in one transaction (how a holder clears the record it keeps there). The
    /// guard back when that was not known to be done: the version no longer matched (then
    /// nothing changed), or the answer was lost (then it may or may not have been applied):
    /// the caller reads the node and releases the plain way.
    pub(crate) async fn release_writing(
        self,
        client: &Client,
        data: &[u8],
        version: i32,
    ) -> Result<Result<(), LockGuard>, ZkError> {
        let op = |source| ZkError::Op {
            op: "write",
            path: self.path.clone(),
            source,
        };
        let mut writer = client.new_multi_writer();
        writer
            .add_set_data(&self.path, data, Some(version))
            .and_then(|()| writer.add_delete(&self.node, None))
            .map_err(op)?;
        let done = call("write", &self.path, async {
            writer.commit().await.map_err(zookeeper_client::Error::from)
        })
        .await;
        match done {
            Ok(_) => Ok(Ok(())),
            Err(e) if e.is_connection_loss() || e.is_timeout() => Ok(Err(self)),
            Err(e) if matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion)) => {
                Ok(Err(self))
            }
            Err(e) => Err(e),
        }
    }
}

/// kazoo's Lock at `path`, taken with `identifier` as the contender's data.
#[derive(Debug, Clone)]
pub struct Lock<'a> {
    client: &'a Client,
    path: String,
    identifier: String,
}

/// Where our contender stands in the queue.
enum Place {
    /// First: we hold the lock.
    First,
    /// Behind this contender (full path), which was there at the look.
    Behind(String),
}

impl<'a> Lock<'a> {
    /// The lock at `path` (created when first taken) for `identifier`.
    pub fn new(client: &'a Client, path: &str, identifier: &str) -> Self {
        Lock {
            client,
            path: path.to_string(),
            identifier: identifier.to_string(),
        }
    }

    /// Tries once to take the lock, never waiting: the guard, or the holder (`None` when the
    /// queue kept changing under the looks at it). A leftover of this session in the way is
    /// removed, and the lock tried again.
    pub async fn try_acquire(&self) -> Result<Attempt<LockGuard, Option<Contender>>, ZkError> {
        for _ in 0..LOOKS {
            let node = self.enter().await?;
            let placed = self.place(&node).await;
            if let Ok(Place::First) = placed {
                return Ok(Attempt::Acquired(self.guard(node)));
            }
            let left = delete_own(self.client, &node).await;
            placed?;
            left?;
            let Some(first) = first_contender(self.client, &self.path).await? else {
                continue;
            };
            if first.owner != self.client.session_id().0 {
                return Ok(Attempt::Busy(Some(first)));
            }
            self.remove_leftover(&join(&self.path, &first.name)).await?;
        }
        Ok(Attempt::Busy(None))
    }

    /// Takes the lock, waiting in its queue until `deadline` unless `cancel` resolves first
    /// (then `None`, the queue left).
    pub async fn acquire(
        &self,
        deadline: Instant,
        cancel: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<Option<LockGuard>, ZkError> {
        let node = self.enter().await?;
        let waited = self.wait_first(&node, deadline, cancel).await;
        if !matches!(waited, Ok(true)) {
            let left = delete_own(self.client, &node).await;
            waited?;
            left?;
            return Ok(None);
        }
        Ok(Some(self.guard(node)))
    }

    fn guard(&self, node: String) -> LockGuard {
        LockGuard {
            path: self.path.clone(),
            node,
        }
    }

    /// Waits until our contender `node` is first: true, or false at the deadline or when
    /// cancelled.
    async fn wait_first(
        &self,
        node: &str,
        deadline: Instant,
        cancel: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<bool, ZkError> {
        loop {
            let before = match self.place(node).await? {
                Place::First => return Ok(true),
                Place::Behind(before) => before,
            };
            let client = self.client;
            let watched =
                call_retrying("watch", &before, || client.check_and_watch_stat(&before)).await?;
            let (Some(stat), watcher) = watched else {
                continue;
            };
            if stat.ephemeral_owner == client.session_id().0 {
                self.remove_leftover(&before).await?;
                continue;
            }
            match wait_for(watcher.changed(), deadline, cancel).await {
                Woken::Changed => {}
                Woken::Deadline | Woken::Cancelled => return Ok(false),
            }
        }
    }

    /// Creates our contender (and the lock node when missing). A create whose answer the
    /// connection lost is looked for by its unique prefix before trying again, as kazoo does.
    async fn enter(&self) -> Result<String, ZkError> {
        let prefix = format!("{}{LOCK_MARKER}", uuid::Uuid::new_v4().simple());
        let wanted = join(&self.path, &prefix);
        let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (mut made, mut lost) = (false, 0);
        loop {
            let created = self
                .client
                .create(&wanted, self.identifier.as_bytes(), &mode);
            match call("create", &wanted, created).await {
                Ok((_, sequence)) => return Ok(format!("{wanted}{sequence}")),
                Err(e) if e.is_no_node() && !made => {
                    make_missing_node(self.client, &self.path).await?;
                    made = true;
                }
                Err(e) if e.is_connection_loss() && lost < LOSS_RETRIES => {
                    lost += 1;
                    let names = list_or_empty(self.client, &self.path).await?;
                    if let Some(name) = names.iter().find(|n| n.starts_with(&prefix)) {
                        return Ok(join(&self.path, name));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Lists the queue: our contender's place in it.
    async fn place(&self, node: &str) -> Result<Place, ZkError> {
        let client = self.client;
        let names = call_retrying("list", &self.path, || client.list_children(&self.path)).await?;
        let ours = node.rsplit('/').next().unwrap_or_default();
        let mut queue = ordered(&names);
        let Some(at) = queue.iter().position(|(_, name)| *name == ours) else {
            return Err(ZkError::Op {
                op: "lock",
                path: node.to_string(),
                source: zookeeper_client::Error::NoNode,
            });
        };
        Ok(match at {
            0 => Place::First,
            _ => Place::Behind(join(&self.path, queue.swap_remove(at - 1).1)),
        })
    }

    async fn remove_leftover(&self, node: &str) -> Result<(), ZkError> {
        tracing::warn!("removing {node}, left by an interrupted attempt of this session");
        delete_own(self.client, node).await
    }
}

/// The contenders among `names`, lowest sequence first.
fn ordered(names: &[String]) -> Vec<(i64, &str)> {
    let mut found: Vec<(i64, &str)> = names
        .iter()
        .filter_map(|n| sequence_of(n).map(|s| (s, n.as_str())))
        .collect();
    found.sort();
    found
}

/// The sequence number of a contender node name (kazoo: `__lock__(-?\d{10})$`), if it is one.
pub(crate) fn sequence_of(name: &str) -> Option<i64> {
    let at = name.rfind(LOCK_MARKER)?;
    let digits = &name[at + LOCK_MARKER.len()..];
    let tail = digits.strip_prefix('-').unwrap_or(digits);
    if tail.len() != 10 || !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Reads the contender `name` of the lock at `path` (`None` when it is gone).
async fn read_contender(
    client: &Client,
    path: &str,
    sequence: i64,
    name: &str,
) -> Result<Option<Contender>, ZkError> {
    let full = join(path, name);
    match call_retrying("get", &full, || client.get_data(&full)).await {
        Ok((data, stat)) => Ok(Some(Contender {
            name: name.to_string(),
            sequence,
            identifier: String::from_utf8_lossy(&data).into_owned(),
            owner: stat.ephemeral_owner,
        })),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The holder of the lock at `path`: its first contender, if any.
pub(crate) async fn first_contender(
    client: &Client,
    path: &str,
) -> Result<Option<Contender>, ZkError> {
    let names = list_or_empty(client, path).await?;
    for (sequence, name) in ordered(&names) {
        if let Some(found) = read_contender(client, path, sequence, name).await? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The contenders of the lock at `path`, lowest sequence first.
pub async fn contenders(client: &Client, path: &str) -> Result<Vec<Contender>, ZkError> {
    let names = list_or_empty(client, path).await?;
    let mut out = Vec::new();
    for (sequence, name) in ordered(&names) {
        out.extend(read_contender(client, path, sequence, name).await?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{ordered, sequence_of};

    #[test]
    fn sequences_follow_kazoos_pattern() {
        let cases = [
            ("6ec3a4d__lock__0000000012", Some(12)),
            ("x__lock__-000000001", None),
            ("x__lock__-0000000001", Some(-1)),
            ("x__lock__12", None),
            ("lr-0000000001", None),
            ("a__lock__b__lock__0000000003", Some(3)),
            ("azkd__lock__0000000004", Some(4)),
        ];
        for (name, wanted) in cases {
            assert_eq!(sequence_of(name), wanted, "{name}");
        }
    }

    #[test]
    fn the_queue_is_ordered_by_sequence_alone() {
        let names: Vec<String> = ["b__lock__0000000002", "junk", "a__lock__0000000003"]
            .iter()
            .chain(&["c__lock__0000000001"])
            .map(|s| s.to_string())
            .collect();
        let queue = ordered(&names);
        let order: Vec<&str> = queue.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            order,
            [
                "c__lock__0000000001",
                "b__lock__0000000002",
                "a__lock__0000000003"
            ]
        );
    }
}
