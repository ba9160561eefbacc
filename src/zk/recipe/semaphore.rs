//! kazoo's Semaphore recipe (`kazoo.recipe.lock.Semaphore`): the semaphore node `PATH` holds
//! `max_leases` as decimal text; each lease is an ephemeral child `PATH/<uuid4 hex>` holding
//! its holder's identifier; a taker counts the leases and creates its own only while it holds
//! the kazoo lock `PATH-__lock__` (a sibling of `PATH`, see [`super::lock`]), so takers never
//! exceed `max_leases` together. A lease is given back by deleting it (or by its session
//! ending).
//!
//! Three departures, all invisible to kazoo:
//! - [`Semaphore::try_acquire`] never waits for a lease (it counts the leases held when none
//!   is free), and queues for the guard only when fewer takers queue there than leases are
//!   free (two stats: one that could not get a lease does not lengthen the queue).
//! - [`Semaphore::acquire`] first takes one of [`TURNSTILES`] kazoo locks,
//!   `PATH-__turnstiles__/<NN>` (chosen by a hash of the identifier), and holds it while it
//!   waits in the guard's queue: so at most that many waiters queue for the guard, and no
//!   queue grows with the number of waiters beyond its share. kazoo's Lock has every
//!   contender list its queue on entering and when its predecessor goes: with all of a
//!   10,000-host fleet's waiters in the guard's one queue that is gigabytes of answers
//!   (docs/capacity.md). A kazoo taker queues for the guard directly, and is served in turn.
//! - A stored `max_leases` that differs from the taker's own is rewritten under the guard
//!   instead of refused, so a change of `max-parallel` needs no operator (kazoo refuses such a
//!   semaphore until the values agree).
//!
//! A taker may ask for a record node to be created with its lease, in the same transaction:
//! `PATH-__in-flight__/<lease name>` (persistent, kazoo never looks there), deleted with the
//! lease when it is given back ([`LeaseGuard::release`]). The agent keeps a lease's in-flight
//! record there.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Acls, CreateMode};

use super::lock::Lock;
use super::{bucket, wait_for, Attempt, Woken};
use crate::zk::node::{delete_own, ensure_node};
use crate::zk::{
    call, call_retrying, join, list_or_empty, open_persistent, Client, ZkError, LOSS_RETRIES,
};

/// The suffix kazoo gives the lock that guards a semaphore (`PATH-__lock__`).
pub(crate) const GUARD_SUFFIX: &str = "-__lock__";

/// The suffix of the node holding the record nodes of the semaphore's leases.
pub(crate) const RECORDS_SUFFIX: &str = "-__in-flight__";

/// The suffix of the node holding the turnstiles of the semaphore's waiters.
pub(crate) const TURNSTILES_SUFFIX: &str = "-__turnstiles__";

/// How many turnstiles a semaphore's waiters are spread over: at most this many of them
/// queue for the guard at once.
pub(crate) const TURNSTILES: u64 = 32;

/// Longest wait for the guard in [`Semaphore::try_acquire`] (each holder keeps it a few round
/// trips).
const GUARD_LIMIT: Duration = Duration::from_secs(60);

/// The guard lock of the semaphore at `path`.
pub(crate) fn guard_path(path: &str) -> String {
    format!("{path}{GUARD_SUFFIX}")
}

/// The node holding the turnstiles of the semaphore at `path`.
pub(crate) fn turnstiles_path(path: &str) -> String {
    format!("{path}{TURNSTILES_SUFFIX}")
}

/// The turnstile (a kazoo lock) of the semaphore at `path` for the taker `identifier`.
pub fn turnstile_path(path: &str, identifier: &str) -> String {
    let at = bucket(identifier, TURNSTILES);
    format!("{}/{at:02}", turnstiles_path(path))
}

/// The node holding the record nodes of the leases of the semaphore at `path`.
pub fn records_path(path: &str) -> String {
    format!("{path}{RECORDS_SUFFIX}")
}

/// A lease this process holds; given back by [`LeaseGuard::release`] (or by the session
/// ending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGuard {
    node: String,
    record: Option<String>,
}

impl LeaseGuard {
    /// Full path of our lease node.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// The lease node's name (`<uuid4 hex>`).
    pub fn name(&self) -> &str {
        self.node.rsplit('/').next().unwrap_or_default()
    }

    /// Full path of the record node created with the lease, if one was asked for.
    pub fn record(&self) -> Option<&str> {
        self.record.as_deref()
    }

    /// Deletes our record node (if any) and our lease node, in one transaction (already gone
    /// is fine). When they must go one at a time, the record goes first: it never outlives
    /// the lease of a live holder.
    pub async fn release(self, client: &Client) -> Result<(), ZkError> {
        if let Some(record) = &self.record {
            let mut writer = client.new_multi_writer();
            let built = writer
                .add_delete(record, None)
                .and_then(|()| writer.add_delete(&self.node, None));
            if built.is_ok() {
                let done = call("delete", &self.node, async {
                    writer.commit().await.map_err(zookeeper_client::Error::from)
                })
                .await;
                if done.is_ok() {
                    return Ok(());
                }
            }
            delete_own(client, record).await?;
        }
        delete_own(client, &self.node).await
    }

    /// Deletes our lease node only: its record, if any, stays for the next holder to find (a
    /// holder that could not record its failure).
    pub(crate) async fn release_keeping_record(self, client: &Client) -> Result<(), ZkError> {
        delete_own(client, &self.node).await
    }
}

/// A lease held by someone, as found in ZooKeeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// Full path of the lease node.
    pub(crate) node: String,
    /// Its data: the holder's identifier.
    pub identifier: String,
}

/// kazoo's Semaphore at `path` with `max_leases`, taken with `identifier` as the lease's data.
#[derive(Debug, Clone)]
pub struct Semaphore<'a> {
    client: &'a Client,
    path: String,
    identifier: String,
    max_leases: u32,
}

impl<'a> Semaphore<'a> {
    /// The semaphore at `path` (created when first taken) for `identifier`.
    pub fn new(client: &'a Client, path: &str, identifier: &str, max_leases: u32) -> Self {
        Semaphore {
            client,
            path: path.to_string(),
            identifier: identifier.to_string(),
            max_leases,
        }
    }

    /// Tries once to take a lease, waiting only for the guard (at most a minute), never for a
    /// lease: the lease (with a record node holding `record`, if given), or the number of
    /// leases held. It queues for the guard only while fewer takers queue there than leases
    /// are free.
    pub async fn try_acquire(
        &self,
        record: Option<&[u8]>,
    ) -> Result<Attempt<LeaseGuard, usize>, ZkError> {
        let held = children_of(self.client, &self.path).await?;
        let free = (self.max_leases as usize).saturating_sub(held);
        let guard = guard_path(&self.path);
        if free == 0 || children_of(self.client, &guard).await? >= free {
            return Ok(Attempt::Busy(held));
        }
        let guard = Lock::new(self.client, &guard, &self.identifier);
        let limit = Instant::now() + GUARD_LIMIT;
        if let Some(held) = guard.acquire(limit, &mut std::future::pending()).await? {
            let taken = self.take_if_free(record).await;
            held.release(self.client).await?;
            if let Some(lease) = taken? {
                return Ok(Attempt::Acquired(lease));
            }
        }
        Ok(Attempt::Busy(children_of(self.client, &self.path).await?))
    }

    /// Takes a lease as kazoo's blocking `acquire` does, through our turnstile: in the
    /// guard's queue, and, holding the guard, watching the leases until one is free. Gives up
    /// at `deadline`, or when `cancel` resolves first (`None`, the queues left).
    pub async fn acquire(
        &self,
        record: Option<&[u8]>,
        deadline: Instant,
        cancel: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<Option<LeaseGuard>, ZkError> {
        let turnstile = turnstile_path(&self.path, &self.identifier);
        let turnstile = Lock::new(self.client, &turnstile, &self.identifier);
        let Some(turn) = turnstile.acquire(deadline, cancel).await? else {
            return Ok(None);
        };
        let taken = self.acquire_in_guard(record, deadline, cancel).await;
        let passed = turn.release(self.client).await;
        self.kept(taken, passed).await
    }

    /// In the guard's queue, then, holding the guard, waiting for a free lease.
    async fn acquire_in_guard(
        &self,
        record: Option<&[u8]>,
        deadline: Instant,
        cancel: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<Option<LeaseGuard>, ZkError> {
        let guard = Lock::new(self.client, &guard_path(&self.path), &self.identifier);
        let Some(held) = guard.acquire(deadline, cancel).await? else {
            return Ok(None);
        };
        let taken = self.wait_free(record, deadline, cancel).await;
        let released = held.release(self.client).await;
        self.kept(taken, released).await
    }

    /// The lease `taken`, if the lock given back after it (`released`) went: else the lease
    /// goes back too and the error is the release's.
    async fn kept(
        &self,
        taken: Result<Option<LeaseGuard>, ZkError>,
        released: Result<(), ZkError>,
    ) -> Result<Option<LeaseGuard>, ZkError> {
        match (taken, released) {
            (Ok(lease), Ok(())) => Ok(lease),
            (Ok(Some(lease)), Err(e)) => {
                let _ = lease.release(self.client).await;
                Err(e)
            }
            (Err(e), _) | (Ok(None), Err(e)) => Err(e),
        }
    }

    /// With the guard held: waits until a lease is free, and takes it.
    async fn wait_free(
        &self,
        record: Option<&[u8]>,
        deadline: Instant,
        cancel: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<Option<LeaseGuard>, ZkError> {
        self.hold_max_leases().await?;
        let (client, path) = (self.client, self.path.as_str());
        loop {
            let (names, watcher) =
                call_retrying("list", path, || client.list_and_watch_children(path)).await?;
            if names.len() < self.max_leases as usize {
                return self.create_lease(record).await.map(Some);
            }
            match wait_for(watcher.changed(), deadline, cancel).await {
                Woken::Changed => {}
                Woken::Deadline | Woken::Cancelled => return Ok(None),
            }
        }
    }

    /// With the guard held: a lease, if one is free.
    async fn take_if_free(&self, record: Option<&[u8]>) -> Result<Option<LeaseGuard>, ZkError> {
        self.hold_max_leases().await?;
        if leases(self.client, &self.path).await?.len() >= self.max_leases as usize {
            return Ok(None);
        }
        self.create_lease(record).await.map(Some)
    }

    /// With the guard held: the semaphore node made to hold our `max_leases` (created, or
    /// rewritten when it holds another value).
    async fn hold_max_leases(&self) -> Result<(), ZkError> {
        let (client, path) = (self.client, self.path.as_str());
        let wanted = self.max_leases.to_string();
        loop {
            match call_retrying("get", path, || client.get_data(path)).await {
                Ok((data, _)) if data == wanted.as_bytes() => return Ok(()),
                Ok((data, stat)) => {
                    let was = String::from_utf8_lossy(&data);
                    tracing::info!("{path}: max_leases {was:?} -> {wanted}");
                    let write = || client.set_data(path, wanted.as_bytes(), Some(stat.version));
                    match call_retrying("write", path, write).await {
                        Ok(_) => return Ok(()),
                        Err(e) if bad_version(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if e.is_no_node() => {
                    if let Some(parent) = parent_of(path) {
                        ensure_node(client, parent).await?;
                    }
                    let create = || client.create(path, wanted.as_bytes(), &open_persistent());
                    match call_retrying("create", path, create).await {
                        Ok(_) => return Ok(()),
                        Err(e) if e.is_node_exists() => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// With the guard held: creates our lease (and its record node, in the same
    /// transaction). One whose answer the connection lost is looked for by its unique name.
    async fn create_lease(&self, record: Option<&[u8]>) -> Result<LeaseGuard, ZkError> {
        let name = uuid::Uuid::new_v4().simple().to_string();
        let node = join(&self.path, &name);
        let records = records_path(&self.path);
        let record = record.map(|data| (join(&records, &name), data));
        let (mut made, mut lost) = (false, 0);
        loop {
            match self.create_once(&node, record.as_ref()).await {
                Ok(()) => break,
                Err(e) if e.is_no_node() && record.is_some() && !made => {
                    ensure_node(self.client, &records).await?;
                    made = true;
                }
                Err(e) if e.is_connection_loss() && lost < LOSS_RETRIES => {
                    lost += 1;
                    let client = self.client;
                    if call_retrying("stat", &node, || client.check_stat(&node))
                        .await?
                        .is_some()
                    {
                        break;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(LeaseGuard {
            node,
            record: record.map(|(path, _)| path),
        })
    }

    /// One transaction: the lease node and, if asked, its record node.
    async fn create_once(
        &self,
        node: &str,
        record: Option<&(String, &[u8])>,
    ) -> Result<(), ZkError> {
        let op = |source| ZkError::Op {
            op: "create",
            path: node.to_string(),
            source,
        };
        let mode = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let mut writer = self.client.new_multi_writer();
        writer
            .add_create(node, self.identifier.as_bytes(), &mode)
            .map_err(op)?;
        if let Some((path, data)) = record {
            writer
                .add_create(path, data, &open_persistent())
                .map_err(op)?;
        }
        call("create", node, async {
            writer.commit().await.map_err(zookeeper_client::Error::from)
        })
        .await
        .map(|_| ())
    }
}

fn bad_version(e: &ZkError) -> bool {
    matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion))
}

/// The parent of `path`, unless it is the root.
fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) | None => None,
        Some(at) => Some(&path[..at]),
    }
}

/// The number of children of `path` (0 if it does not exist), from its stat.
async fn children_of(client: &Client, path: &str) -> Result<usize, ZkError> {
    let stat = call_retrying("stat", path, || client.check_stat(path)).await?;
    Ok(stat.map_or(0, |s| usize::try_from(s.num_children).unwrap_or(0)))
}

/// The names of the leases of the semaphore at `path` (none if it does not exist).
pub async fn leases(client: &Client, path: &str) -> Result<Vec<String>, ZkError> {
    list_or_empty(client, path).await
}

/// The holders of the leases of the semaphore at `path`, with their identifiers, by node.
pub async fn holders(client: &Client, path: &str) -> Result<Vec<LeaseHolder>, ZkError> {
    let mut out = Vec::new();
    for name in leases(client, path).await? {
        let node = join(path, &name);
        match call_retrying("get", &node, || client.get_data(&node)).await {
            Ok((data, _)) => out.push(LeaseHolder {
                node,
                identifier: String::from_utf8_lossy(&data).into_owned(),
            }),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{guard_path, parent_of, records_path};

    #[test]
    fn sibling_nodes_are_kazoos() {
        assert_eq!(
            guard_path("/agent-semaphores/a"),
            "/agent-semaphores/a-__lock__"
        );
        assert_eq!(records_path("/s"), "/s-__in-flight__");
        for (path, parent) in [("/a/b", Some("/a")), ("/a", None), ("/a/b/c", Some("/a/b"))] {
            assert_eq!(parent_of(path), parent, "{path}");
        }
    }
}
