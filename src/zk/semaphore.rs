//! The kazoo-compatible semaphore recipe (`kazoo.recipe.lock.Semaphore`), so Python and Rust
//! processes share one count of leases.
//!
//! kazoo's layout: the semaphore node `PATH` holds `max_leases` as decimal text; each lease is
//! an ephemeral child `PATH/<uuid4 hex>` holding its holder's identifier; a taker counts the
//! leases and creates its own only while it holds the kazoo lock `PATH-__lock__` (a sibling of
//! `PATH`), so takers racing each other never exceed `max_leases` together. A lease is given
//! back by deleting it (or by its session ending).
//!
//! Two departures, both invisible to kazoo: [`try_acquire`] never waits for a lease (it
//! reports the holders when none is free, and the caller waits on their nodes, as with the
//! node locks), and a stored `max_leases` that differs from the taker's own is rewritten
//! (under the lock) instead of refused, so a change of `max-parallel` between two versions
//! needs no operator. kazoo refuses such a semaphore (`ValueError`) until the values agree.
//!
//! **Passing leases on.** Taking the guard costs each taker a wake-up and two round trips, one
//! taker after another: when many leases are freed at once (a wave of hosts ending their
//! scripts together), the takers queue behind the guard. So a guard holder that finds more
//! than one lease free passes the others on: in the transaction that creates its lease and
//! deletes its contender, it also writes the contender nodes of the takers just after it in
//! the queue, one per lease left free (as counted under the guard), with a note: its
//! `max_leases` and the semaphore node's data version that holds it. Such a taker, woken by
//! the write of its own node, creates its lease at once, in a transaction that deletes its
//! contender and checks that the data version is still the one its last list of the queue
//! read with its own `max_leases` (then the holder passed under that version: versions only
//! grow, and no holder of the guard comes between the one that passed and the takers it
//! passed to). When that check fails, it reads the note and, if that is its own
//! `max_leases`, checks the note's version instead; else it queues again, and takes no
//! passed lease then. Why the count holds:
//! - the holder passes leases only to contenders just after it, up to the first that does
//!   not watch for one (a kazoo taker, or an older agent: only contenders named
//!   `…zkd__lock__…` do), so the takers so served come before any other contender;
//! - a contender that is not first creates no lease unless one was passed to it, and then
//!   one; a contender that is first counts the leases, and those passed but not yet taken
//!   are all before it, so gone (taken, or given up): its count is right;
//! - a contender that was passed a lease never passes one on (its count would miss the
//!   leases passed to the contenders after it). One that is first without knowing whether
//!   its node was written (it never waited) passes none either.
//!
//! kazoo sees contenders ordered by sequence, leases it can count, and, on a contender passed
//! a lease, only other data (`<max_leases> <version> passed by …`) for the moment before it
//! goes.
//!
//! **Taking a freed lease at once.** The guard's holder that waits with exactly
//! `max_leases` leases held, woken by a change of the leases, knows one was given back:
//! while it holds the guard nobody else creates one (see above). So it does not read them
//! first: it creates its lease in a transaction that checks the semaphore node's data
//! version (its `max_leases`) and keeps its contender, lists the leases right after it in
//! the same round trip, and then gives the guard back in a second transaction that passes
//! the leases that list found free, as above (a task of its own sends it and retries the
//! contender's delete alone if it fails). With more than its `max_leases` held (a lower
//! `max-parallel` than the holders'), it reads them again at every change, as before.
//!
//! A taker may ask for a record node to be created with its lease, in the same transaction:
//! `PATH-__in-flight__/<lease name>` (persistent, kazoo never looks there), deleted with the
//! lease when it is given back. The agent keeps its leases' in-flight records there
//! ([`crate::agent`]): one small node per lease, so holders never write a node another
//! holder writes. (Earlier agents kept them in the guard node's data, which kazoo
//! never reads or writes either; the agent still reads them there.)

use std::time::Duration;

use zookeeper_client::{Acls, CreateMode, EventType, OneshotWatcher};

use super::lock::{
    acquire_queued, acquire_queued_checking_after, listed_beside, sequence_of, takes_batons, Extra,
    Held, Passed,
};
use super::node::{delete_own, ensure_node, make_missing_node};
use super::{
    call, call_retrying, join, list_or_empty, open_persistent, Client, ZkError, LOSS_RETRIES,
};

/// The suffix kazoo gives the lock that guards a semaphore (`PATH-__lock__`).
pub const LOCK_SUFFIX: &str = "-__lock__";

/// Longest time spent waiting for the guard lock (held by another taker for a few round
/// trips at a time) before giving up.
const GUARD_LIMIT: Duration = Duration::from_secs(60);

/// Most leases one holder passes on, in its one transaction (a few hundred bytes each, far
/// below ZooKeeper's 1 MB request limit); the next holder passes the rest.
const MAX_PASSED: usize = 256;

/// The suffix of the node holding the record nodes of the semaphore's leases.
pub const RECORDS_SUFFIX: &str = "-__in-flight__";

/// The guard lock of the semaphore at `path`.
pub fn lock_path(path: &str) -> String {
    format!("{path}{LOCK_SUFFIX}")
}

/// The node holding the record nodes of the leases of the semaphore at `path`.
pub fn records_path(path: &str) -> String {
    format!("{path}{RECORDS_SUFFIX}")
}

/// A lease this process holds; given back by [`Lease::release`] (or by the session ending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Full path of our lease node.
    pub node: String,
    /// The children of the node the taker asked to list beside the lease (empty when it does
    /// not exist), listed in the round trip that created the lease, after it; `None` when
    /// not asked or not known.
    pub beside: Option<Vec<String>>,
    /// Full path of the record node created with the lease, if one was asked for.
    pub record: Option<String>,
    /// The taker's [`Taker::after`] requests went out right after the transaction that
    /// created the lease, in its round trip (so they were answered after it).
    pub after_ran: bool,
}

/// What a taker sends right after the transaction that creates its lease, in the same round
/// trip ([`Taker::after`]): reads that must see the lease, made before its answer is known.
/// The future sends its requests at its first poll and keeps their answers itself; it runs
/// again with every transaction tried, so the answers kept are the last transaction's,
/// which is the one that made the lease when [`Lease::after_ran`] says so.
pub trait AfterTake: Sync {
    /// The requests, sent at the future's first poll.
    fn start(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

impl Lease {
    /// The lease node's name (`<uuid4 hex>`).
    pub fn name(&self) -> &str {
        self.node.rsplit('/').next().unwrap_or_default()
    }

    /// Deletes our record node (if any) and our lease node, in one transaction when it can
    /// (already gone is fine). The record never outlives the lease of a live holder: when
    /// they go one at a time, the record goes first.
    pub async fn release(self, client: &Client) -> Result<(), ZkError> {
        if let Some(record) = &self.record {
            let mut writer = client.new_multi_writer();
            let built = writer
                .add_delete(record, None)
                .and_then(|()| writer.add_delete(&self.node, None));
            if built.is_ok() {
                let commit = writer.commit();
                let done = call("delete", &self.node, async {
                    commit.await.map_err(zookeeper_client::Error::from)
                })
                .await;
                if done.is_ok() {
                    return Ok(());
                }
            }
            // One of them gone already (or the answer lost): each on its own.
            delete_if_there(client, record).await?;
        }
        self.release_keeping_record(client).await
    }

    /// Deletes our lease node only (already gone is fine): its record, if any, stays for the
    /// next holder to report (a holder that could not record its failure).
    pub async fn release_keeping_record(self, client: &Client) -> Result<(), ZkError> {
        delete_if_there(client, &self.node).await
    }
}

/// Deletes `node` (already gone is fine).
async fn delete_if_there(client: &Client, node: &str) -> Result<(), ZkError> {
    match call_retrying("delete", node, || client.delete(node, None)).await {
        Err(e) if e.is_no_node() => Ok(()),
        other => other,
    }
}

/// A lease held by someone, as found in ZooKeeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// Full path of the lease node.
    pub node: String,
    /// Its data: the holder's identifier.
    pub identifier: String,
}

/// Outcome of [`try_acquire`].
#[derive(Debug)]
pub enum TryLease {
    /// We hold a lease.
    Acquired(Lease),
    /// Every lease is taken.
    Full {
        /// The holders.
        holders: Vec<LeaseHolder>,
    },
}

/// The names of the leases of the semaphore at `path` (none if it does not exist).
pub async fn leases(client: &Client, path: &str) -> Result<Vec<String>, ZkError> {
    list_or_empty(client, path).await
}

/// The holders of the leases of the semaphore at `path`, with their identifiers.
pub async fn holders(client: &Client, path: &str) -> Result<Vec<LeaseHolder>, ZkError> {
    let names = leases(client, path).await?;
    let reads: Vec<_> = names
        .iter()
        .map(|n| {
            let node = join(path, n);
            async move {
                let got = call_retrying("get", &node, || client.get_data(&node)).await;
                (node, got)
            }
        })
        .collect();
    let mut out = Vec::new();
    for (node, got) in futures::future::join_all(reads).await {
        match got {
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

/// Tries once to take a lease of the semaphore at `path` (created if missing, with
/// `max_leases` as its data) with `identifier` as the lease's data. Waits only for the guard
/// lock, never for a lease. The children of `beside` (if given) are listed right after the
/// lease is created, in the same round trip ([`Lease::beside`]); a `record` (if given) is
/// created with the lease ([`Lease::record`]).
pub async fn try_acquire(
    client: &Client,
    path: &str,
    identifier: &str,
    max_leases: u32,
    beside: Option<&str>,
    record: Option<&[u8]>,
) -> Result<TryLease, ZkError> {
    // Full already: no need to queue for the guard (the count is checked again under it).
    let names = leases(client, path).await?;
    if names.len() >= max_leases as usize {
        return Ok(full(path, names));
    }
    let taker = Taker {
        path,
        identifier,
        max_leases,
        beside,
        record,
        after: None,
    };
    let mut baton = true;
    loop {
        let reads = under_guard_reads(path, baton, false);
        let guard =
            acquire_queued(client, &lock_path(path), identifier, GUARD_LIMIT, reads).await?;
        match under_guard(client, &taker, guard, NoWait::None).await? {
            Some(outcome) => return Ok(outcome),
            // A lease passed to us that we could not take: queue again, as a taker that is
            // passed none (so this ends).
            None => baton = false,
        }
    }
}

/// What a taker of the guard reads with the list that finds it first: the semaphore's data
/// and leases, as they are under the guard (the guard's last holder created its lease
/// before, or with, its release). With `baton`, its contender may be passed a lease. With
/// `wait` (a taker that waits for a lease), the list sent once its predecessor held the
/// guard and went away watches the leases.
fn under_guard_reads(path: &str, baton: bool, wait: bool) -> Extra<'_> {
    Extra {
        read: Some(path),
        beside: Some(path),
        baton,
        quick: false,
        watch_next: wait,
    }
}

/// Who takes a lease of which semaphore.
#[derive(Clone, Copy)]
pub struct Taker<'a> {
    /// The semaphore node.
    pub path: &'a str,
    /// The lease's data: who holds it.
    pub identifier: &'a str,
    /// The taker's `max_leases`.
    pub max_leases: u32,
    /// A node whose children are listed right after the lease is created ([`Lease::beside`]).
    pub beside: Option<&'a str>,
    /// The data of the record node created with the lease, if one is ([`Lease::record`]).
    pub record: Option<&'a [u8]>,
    /// Requests sent right after the lease's transaction ([`AfterTake`]).
    pub after: Option<&'a dyn AfterTake>,
}

/// Takes a lease of the semaphore at `path` as kazoo's blocking `acquire` does: in the guard
/// lock's queue (each taker watching the one before it), and, first in the queue, watching
/// the leases until one is free. Only the first in the queue wakes when a lease is given
/// back, so a release costs a few requests however many hosts wait. Gives up after `limit`
/// (leaving the queue): `None`. `beside` and `record` as for [`try_acquire`].
pub async fn acquire_waiting(
    client: &Client,
    path: &str,
    identifier: &str,
    max_leases: u32,
    limit: Duration,
    beside: Option<&str>,
    record: Option<&[u8]>,
) -> Result<Option<Lease>, ZkError> {
    let taker = Taker {
        path,
        identifier,
        max_leases,
        beside,
        record,
        after: None,
    };
    acquire_waiting_with(client, &taker, limit, limit, || std::future::ready(true)).await
}

/// [`acquire_waiting`], calling `on_wait` once, when the taker has waited `after` without a
/// lease (behind another taker of the guard, or first with every lease taken): the caller
/// says that it waits, and whether to go on (false gives up: `None`, the queue left). A
/// taker that waits less never calls it.
pub async fn acquire_waiting_with<F, Fut>(
    client: &Client,
    taker: &Taker<'_>,
    limit: Duration,
    after: Duration,
    mut on_wait: F,
) -> Result<Option<Lease>, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let path = taker.path;
    let start = tokio::time::Instant::now();
    let deadline = start + limit;
    let tell_at = start + after;
    // `on_wait`, once.
    let mut told = false;
    let mut first_wait = || {
        let call = (!std::mem::replace(&mut told, true)).then(&mut on_wait);
        async move {
            match call {
                Some(going_on) => going_on.await,
                None => true,
            }
        }
    };
    let mut baton = true;
    loop {
        let reads = under_guard_reads(path, baton, true);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let guard = match acquire_queued_checking_after(
            client,
            &lock_path(path),
            taker.identifier,
            left,
            tell_at.saturating_duration_since(tokio::time::Instant::now()),
            reads,
            &mut first_wait,
        )
        .await?
        {
            Some(guard) => guard,
            None => return Ok(None),
        };
        let waiting = Waiting {
            until: deadline,
            tell_at,
            first_wait: &mut first_wait,
        };
        match under_guard(client, taker, guard, Some(waiting)).await? {
            Some(TryLease::Acquired(lease)) => return Ok(Some(lease)),
            Some(TryLease::Full { .. }) => return Ok(None),
            // As in `try_acquire`.
            None => baton = false,
        }
    }
}

/// The holders as a [`TryLease::Full`] (lease nodes only: their data is not read).
fn full(path: &str, names: Vec<String>) -> TryLease {
    TryLease::Full {
        holders: names
            .into_iter()
            .map(|n| LeaseHolder {
                node: join(path, &n),
                identifier: String::new(),
            })
            .collect(),
    }
}

/// How a taker that waits for a lease waits: until when, and what it calls once it has
/// waited until `tell_at` ([`acquire_waiting_with`]; called once, however often asked).
struct Waiting<'w, W> {
    until: tokio::time::Instant,
    tell_at: tokio::time::Instant,
    first_wait: &'w mut W,
}

/// A taker that never waits for a lease.
type NoWait<'w> = Option<Waiting<'w, fn() -> std::future::Ready<bool>>>;

/// With the guard held: makes sure the semaphore node holds `max_leases`, counts the leases,
/// and creates ours if one is free, giving the guard back in the same transaction; else,
/// when `waiting`, waits for a lease to be given back (until its deadline). The guard is
/// always given back.
async fn under_guard<W, WF>(
    client: &Client,
    taker: &Taker<'_>,
    mut guard: Held,
    waiting: Option<Waiting<'_, W>>,
) -> Result<Option<TryLease>, ZkError>
where
    W: FnMut() -> WF,
    WF: std::future::Future<Output = bool>,
{
    if guard.passed == Passed::Yes {
        return take_passed(client, taker, guard).await;
    }
    // The semaphore as read with the list that found us first, if it was (the leases
    // watched, if that list did).
    let read = match (guard.read.take(), guard.beside.take()) {
        (Some((data, stat)), Some(names)) => {
            Some((Some((data, stat.version)), names, guard.beside_watch.take()))
        }
        _ => None,
    };
    let outcome = take_lease(client, taker, &guard, read, waiting).await;
    let released = match &outcome {
        // Our lease was created in the transaction that deleted the guard contender.
        Ok((_, true)) => Ok(()),
        _ => guard.release(client).await,
    };
    match (outcome, released) {
        (Ok((outcome, _)), Ok(())) => Ok(Some(outcome)),
        (Ok((TryLease::Acquired(lease), _)), Err(e)) => {
            // Our lease must not outlive an error we report (best effort: the session may
            // be gone, and then the lease with it).
            let _ = lease.release(client).await;
            Err(e)
        }
        (Ok(_), Err(e)) | (Err(e), _) => Err(e),
    }
}

/// A node's data and its data version.
type Versioned = (Vec<u8>, i32);

/// The semaphore's data (and its version; `None` when the node does not exist) and leases,
/// read together, and the watch of the leases if the read set one.
type SemaphoreRead = (Option<Versioned>, Vec<String>, Option<OneshotWatcher>);

/// The semaphore's data (and its version) and leases, read together (one round trip; the
/// leases watched when `watch`). The data is `None` when the node does not exist.
async fn read_semaphore(
    client: &Client,
    path: &str,
    watch: bool,
) -> Result<SemaphoreRead, ZkError> {
    let data = call_retrying("get", path, || client.get_data(path));
    let listed = async {
        if watch {
            call_retrying("list", path, || client.get_and_watch_children(path))
                .await
                .map(|(names, _, watcher)| (names, Some(watcher)))
        } else {
            call_retrying("list", path, || client.list_children(path))
                .await
                .map(|names| (names, None))
        }
    };
    let (data, listed) = futures::join!(data, listed);
    let data = match data {
        Ok((data, stat)) => Some((data, stat.version)),
        Err(e) if e.is_no_node() => None,
        Err(e) => return Err(e),
    };
    let (names, watcher) = match listed {
        Ok(listed) => listed,
        Err(e) if e.is_no_node() => (Vec::new(), None),
        Err(e) => return Err(e),
    };
    Ok((data, names, watcher))
}

/// With the guard held: the semaphore node made to hold `max_leases`, then our lease if one
/// is free (created with the guard's release in one transaction: the flag says so). Waits
/// for a free lease, when `waiting`.
async fn take_lease<W, WF>(
    client: &Client,
    taker: &Taker<'_>,
    guard: &Held,
    mut read: Option<SemaphoreRead>,
    mut waiting: Option<Waiting<'_, W>>,
) -> Result<(TryLease, bool), ZkError>
where
    W: FnMut() -> WF,
    WF: std::future::Future<Output = bool>,
{
    let Taker {
        path, max_leases, ..
    } = *taker;
    let wanted = max_leases.to_string();
    // The data version that held our max_leases when a change of the leases woke us.
    let mut freed: Option<i32> = None;
    loop {
        // Woken by a change of the leases: one was given back (below); taken at once.
        if let Some(version) = freed.take() {
            if let Some(made) = take_freed(client, taker, guard, version).await? {
                return Ok(made);
            }
        }
        // Read already: used unless the taker is to wait for a free lease without a watch
        // set by that read.
        let (data, names, watcher) = match read.take() {
            Some((data, names, watcher))
                if waiting.is_none() || names.len() < max_leases as usize || watcher.is_some() =>
            {
                (data, names, watcher)
            }
            _ => read_semaphore(client, path, waiting.is_some()).await?,
        };
        // The data version that holds our max_leases from now on (under the guard).
        let version = match data {
            Some((data, version)) if data == wanted.as_bytes() => version,
            Some((data, _)) => {
                tracing::info!(
                    "{path}: max_leases {:?} -> {wanted}",
                    String::from_utf8_lossy(&data)
                );
                call_retrying("set", path, || {
                    client.set_data(path, wanted.as_bytes(), None)
                })
                .await?
                .version
            }
            None => create_semaphore(client, path, &wanted).await?,
        };
        if names.len() < max_leases as usize {
            // The leases left free after ours go to the takers queued just after us, told
            // our max_leases and the data version that holds it.
            let free = max_leases as usize - names.len() - 1;
            let passed = pass_to(path, guard, free);
            let note = passed_note(max_leases, version, taker.identifier);
            let made = create_lease(client, taker, guard, &passed, &note, None, Guard::Delete)
                .await?
                .expect("a lease made alone when the transaction failed");
            return Ok((made.outcome, made.guard_deleted));
        }
        let (
            Some(Waiting {
                until,
                tell_at,
                first_wait,
            }),
            Some(watcher),
        ) = (waiting.as_mut(), watcher)
        else {
            return Ok((full(path, names), false));
        };
        let mut changed = std::pin::pin!(watcher.changed());
        // Told once the taker has waited a moment (`acquire_waiting_with`).
        let event = match tokio::time::timeout_at((*tell_at).min(*until), &mut changed).await {
            Ok(event) => event,
            Err(_) => {
                let now = tokio::time::Instant::now();
                if now >= *until || !first_wait().await {
                    return Ok((full(path, names), false));
                }
                match tokio::time::timeout_at(*until, &mut changed).await {
                    Ok(event) => event,
                    Err(_) => return Ok((full(path, names), false)),
                }
            }
        };
        // While we hold the guard, no lease is created but by us (a taker creates its lease
        // holding the guard; those passed a lease took it, or gave up, before our contender
        // came first, and our list came after): the leases, exactly `max_leases` when listed,
        // changed because one was given back. More than that (our `max_leases` is lower
        // than the holders'), or any other event, and they are read again.
        if event.event_type == EventType::NodeChildrenChanged && names.len() == max_leases as usize
        {
            freed = Some(version);
        }
    }
}

/// With the guard held, woken by a lease given back ([`take_lease`]): our lease made at once,
/// without counting the leases first, in a transaction that checks that the semaphore node's
/// data is still at `version` (our `max_leases`) and keeps our contender; the leases are
/// listed after it, in its round trip. The guard is then given back without waiting for
/// the answer, passing the leases that list found free to the takers just after us (as
/// [`take_lease`] does). `None` when the lease could not be made so (the leases are read
/// again).
async fn take_freed(
    client: &Client,
    taker: &Taker<'_>,
    guard: &Held,
    version: i32,
) -> Result<Option<(TryLease, bool)>, ZkError> {
    let made = create_lease(
        client,
        taker,
        guard,
        &[],
        &[],
        Some(version),
        Guard::KeepAndCount,
    );
    let Some(made) = made.await? else {
        return Ok(None);
    };
    let passed = match &made.leases {
        Some(names) => {
            let free = (taker.max_leases as usize).saturating_sub(names.len());
            pass_to(taker.path, guard, free)
        }
        None => Vec::new(),
    };
    let note = passed_note(taker.max_leases, version, taker.identifier);
    give_guard_back(client, taker.path, &guard.node, passed, note);
    // The task runs (and its requests leave) before the caller goes on: whatever the caller
    // does next (files, starting a process) never holds every other taker behind our
    // contender.
    tokio::task::yield_now().await;
    // The guard is given back by that task (its answer is not ours to await).
    Ok(Some((made.outcome, true)))
}

/// Gives the guard back (our contender `node` deleted) without waiting for the answer,
/// passing leases to the contenders `passed` in the same transaction; when that
/// transaction fails (a contender passed to has left, or the connection was lost), the
/// contender is deleted alone (a contender already gone is fine). A task of its own makes
/// the requests (they leave once the caller yields) and awaits the answers.
fn give_guard_back(client: &Client, path: &str, node: &str, passed: Vec<String>, note: Vec<u8>) {
    let (client, path, node) = (client.clone(), path.to_string(), node.to_string());
    tokio::spawn(async move {
        if !passed.is_empty() {
            let mut writer = client.new_multi_writer();
            let built = passed
                .iter()
                .try_for_each(|contender| writer.add_set_data(contender, &note, None))
                .and_then(|()| writer.add_delete(&node, None));
            if built.is_ok() {
                match writer.commit().await {
                    Ok(_) => {
                        tracing::debug!("{path}: passed {} leases on", passed.len());
                        return;
                    }
                    Err(e) => tracing::debug!("{path}: leases not passed on: {e}"),
                }
            }
        }
        // Every other taker waits behind our contender: its delete is tried until it went
        // through, or the session is gone (and the contender with it).
        let deadline = tokio::time::Instant::now() + GUARD_LIMIT;
        loop {
            match delete_own(&client, &node).await {
                Ok(()) => return,
                Err(e) if e.is_session_gone() => return,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    tracing::error!("{path}: cannot give the guard back ({node}): {e}");
                    return;
                }
                Err(e) => {
                    tracing::warn!("{path}: cannot give the guard back ({node}) yet: {e}");
                    tokio::time::sleep(GIVE_BACK_PAUSE).await;
                }
            }
        }
    });
}

/// The pause between two tries of giving the guard back ([`give_guard_back`]).
const GIVE_BACK_PAUSE: Duration = Duration::from_millis(100);

/// Creates the semaphore node (and its parent) holding `wanted`; gives its data version.
async fn create_semaphore(client: &Client, path: &str, wanted: &str) -> Result<i32, ZkError> {
    let create = || {
        call(
            "create",
            path,
            client.create(path, wanted.as_bytes(), &open_persistent()),
        )
    };
    // The parent usually exists: it is made only when missing.
    let created = match create().await {
        Err(e) if e.is_no_node() => match path.rsplit_once('/') {
            Some((parent, _)) if !parent.is_empty() => {
                make_missing_node(client, parent).await?;
                create().await
            }
            _ => Err(e),
        },
        other => other,
    };
    match created {
        Ok((stat, _)) => Ok(stat.version),
        Err(e) if e.is_connection_loss() || e.is_node_exists() => {
            call_retrying("set", path, || {
                client.set_data(path, wanted.as_bytes(), None)
            })
            .await
            .map(|stat| stat.version)
        }
        Err(e) => Err(e),
    }
}

/// What a guard holder writes into the contender of a taker it passes a lease to: its
/// `max_leases`, the semaphore node's data version that holds it, and who it is.
fn passed_note(max_leases: u32, version: i32, identifier: &str) -> Vec<u8> {
    format!("{max_leases} {version} passed by {identifier}").into_bytes()
}

/// The `max_leases` and data version of a [`passed_note`].
fn read_note(note: &[u8]) -> Option<(u32, i32)> {
    let text = std::str::from_utf8(note).ok()?;
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// With a lease passed to us (our contender written by the guard's holder, see the module's
/// text): our lease is made at once, in one transaction with our contender's deletion and a
/// check that the semaphore node's data is still at the version our last list read with our
/// `max_leases`; failing that, our contender's note is read, and the lease made if the
/// holder had our `max_leases`, checking the version the holder left (no holder since has
/// rewritten it). `None` when it could not be: our contender has left the queue.
async fn take_passed(
    client: &Client,
    taker: &Taker<'_>,
    mut guard: Held,
) -> Result<Option<TryLease>, ZkError> {
    // The note need not be read when our last list of the queue read our max_leases: a
    // transaction checking that version still holds it proves the holder passed under it
    // (versions only grow, and no holder of the guard comes between the holder that passed
    // and us). A version changed since sends us to the note.
    let wanted = taker.max_leases.to_string();
    let listed = guard
        .read
        .take()
        .filter(|(data, _)| data == wanted.as_bytes());
    if let Some((_, stat)) = listed {
        match make_passed(client, taker, &guard, stat.version).await {
            Ok(Some(made)) => return Ok(Some(made.outcome)),
            Ok(None) => {}
            Err(e) => {
                let _ = guard.release(client).await;
                return Err(e);
            }
        }
    }
    let note = match call_retrying("get", &guard.node, || client.get_data(&guard.node)).await {
        Ok((note, _)) => read_note(&note),
        Err(e) => {
            let _ = guard.release(client).await;
            return Err(e);
        }
    };
    match note {
        Some((k, version)) if k == taker.max_leases => {
            match make_passed(client, taker, &guard, version).await {
                // Made in the transaction that deleted our contender (never alone: not asked).
                Ok(Some(made)) => return Ok(Some(made.outcome)),
                Ok(None) => tracing::info!(
                    "{}: a lease passed to us could not be taken (max_leases rewritten since, or the connection kept failing); queueing again",
                    taker.path
                ),
                Err(e) => {
                    let _ = guard.release(client).await;
                    return Err(e);
                }
            }
        }
        _ => tracing::info!(
            "{}: a lease passed to us under another max_leases is not taken; queueing again",
            taker.path
        ),
    }
    guard.release(client).await?;
    Ok(None)
}

/// A lease passed to us made, checking that the semaphore node's data is at `version`, in
/// the transaction that deletes our contender (never alone: `None` when it cannot be).
async fn make_passed(
    client: &Client,
    taker: &Taker<'_>,
    guard: &Held,
    version: i32,
) -> Result<Option<Made>, ZkError> {
    let check = Some(version);
    create_lease(
        client,
        taker,
        guard,
        &[],
        &[],
        check,
        Guard::DeleteOrNothing,
    )
    .await
}

/// The contenders the guard's holder `guard` passes a lease to: the first `free` of those
/// just after it in its queue that watch for one, up to the first that does not (a kazoo
/// taker, or an agent before this one), as last listed. Full paths.
fn pass_to(path: &str, guard: &Held, free: usize) -> Vec<String> {
    let (Passed::No, Some(listed)) = (guard.passed, &guard.listed) else {
        return Vec::new();
    };
    let ours = guard
        .node
        .rsplit('/')
        .next()
        .and_then(sequence_of)
        .unwrap_or(i64::MAX);
    let mut after: Vec<(i64, &String)> = listed
        .iter()
        .filter_map(|n| sequence_of(n).map(|s| (s, n)))
        .filter(|(s, _)| *s > ours)
        .collect();
    after.sort();
    let lock = lock_path(path);
    after
        .into_iter()
        .take_while(|(_, name)| takes_batons(name))
        .take(free.min(MAX_PASSED))
        .map(|(_, name)| join(&lock, name))
        .collect()
}

/// What the transaction that creates a lease does with our guard contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Deleted with it; when the transaction cannot be made, the lease is made alone.
    Delete,
    /// Deleted with it; when the transaction cannot be made, nothing is (a passed lease).
    DeleteOrNothing,
    /// Kept (given back after), the leases listed right after the transaction, in its round
    /// trip; when the transaction cannot be made, nothing is.
    KeepAndCount,
}

/// A lease [`create_lease`] made.
struct Made {
    outcome: TryLease,
    /// Our guard contender was deleted in the transaction that made the lease.
    guard_deleted: bool,
    /// With [`Guard::KeepAndCount`], the leases listed right after the transaction (ours
    /// among them), when known.
    leases: Option<Vec<String>>,
}

/// Creates our lease node (and the taker's record node, if any) with the guard still held
/// (or a lease passed to us): in one transaction with the guard contender's deletion (as
/// `guard` says), else alone (only with [`Guard::Delete`]; else `None`). The transaction also
/// passes a lease to each contender of `passed` (written; one that left drops them all), and
/// checks that the semaphore node's data version is still `check`, if given (else `None`).
/// The children of the taker's `beside` are listed in the same round trip, after the
/// transaction. The node holding the records is made the first time it is missing.
async fn create_lease(
    client: &Client,
    taker: &Taker<'_>,
    held: &Held,
    passed: &[String],
    note: &[u8],
    check: Option<i32>,
    guard: Guard,
) -> Result<Option<Made>, ZkError> {
    let Taker {
        path, identifier, ..
    } = *taker;
    let name = uuid::Uuid::new_v4().simple().to_string();
    let node = join(path, &name);
    let records = records_path(path);
    let record = taker.record.map(|data| (join(&records, &name), data));
    let lease = |beside| {
        TryLease::Acquired(Lease {
            node: node.clone(),
            beside,
            record: record.as_ref().map(|(path, _)| path.clone()),
            after_ran: false,
        })
    };
    let mode = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let kept = open_persistent();
    let mut passed = passed;
    let mut records_made = false;
    let mut lost = 0;
    loop {
        let mut writer = client.new_multi_writer();
        let mut built = writer
            .add_create(&node, identifier.as_bytes(), &mode)
            .and_then(|()| match &record {
                Some((path, data)) => writer.add_create(path, data, &kept),
                None => Ok(()),
            })
            .and_then(|()| match check {
                Some(version) => writer.add_check_version(path, version),
                None => Ok(()),
            });
        for contender in passed {
            built = built.and_then(|()| writer.add_set_data(contender, note, None));
        }
        let keep = guard == Guard::KeepAndCount;
        let built = built.and_then(|()| match keep {
            true => Ok(()),
            false => writer.add_delete(&held.node, None),
        });
        if built.is_err() {
            break;
        }
        // Sent in this order (a request goes out when it is made), so answered in this order.
        let commit = writer.commit();
        let listed = taker.beside.map(|b| client.list_children(b));
        let counted = keep.then(|| client.list_children(path));
        let (committed, beside, counted, ()) = futures::join!(
            call("write", &node, async {
                commit.await.map_err(zookeeper_client::Error::from)
            }),
            listed_beside(listed, taker.beside),
            async {
                match counted {
                    Some(listed) => listed.await.ok(),
                    None => None,
                }
            },
            async {
                if let Some(after) = taker.after {
                    after.start().await;
                }
            }
        );
        match committed {
            Ok(_) => {
                if !passed.is_empty() {
                    tracing::debug!("{path}: passed {} leases on", passed.len());
                }
                let mut outcome = lease(beside);
                if let TryLease::Acquired(lease) = &mut outcome {
                    lease.after_ran = taker.after.is_some();
                }
                return Ok(Some(Made {
                    outcome,
                    guard_deleted: !keep,
                    leases: counted,
                }));
            }
            // Lost or late: it may have gone through (and a retry may find our own lease
            // there); our lease's name is unique.
            Err(e) if e.is_connection_loss() || e.is_timeout() || e.is_node_exists() => {
                if call_retrying("stat", &node, || client.check_stat(&node))
                    .await?
                    .is_some()
                {
                    return Ok(Some(Made {
                        outcome: lease(None),
                        guard_deleted: !keep,
                        leases: None,
                    }));
                }
                if e.is_node_exists() {
                    return Err(e);
                }
                // It did not (it is one transaction): a lease passed to us is taken again so.
                if guard == Guard::DeleteOrNothing && lost < LOSS_RETRIES {
                    lost += 1;
                    continue;
                }
            }
            // A contender we passed a lease to has left (or may not be written): none is
            // passed, and our own lease is taken as without passing.
            Err(e) if !passed.is_empty() => {
                tracing::debug!("{path}: leases not passed on: {e}");
                passed = &[];
                continue;
            }
            // The records' node is missing (the first record of this semaphore).
            Err(e) if e.is_no_node() && record.is_some() && !records_made => {
                make_missing_node(client, &records).await?;
                records_made = true;
                continue;
            }
            Err(e)
                if check.is_some()
                    && matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion)) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        break;
    }
    if guard != Guard::Delete {
        return Ok(None);
    }
    let mut lost = 0;
    loop {
        match call(
            "create",
            &node,
            client.create(&node, identifier.as_bytes(), &mode),
        )
        .await
        {
            Ok(_) => break,
            // Made by our transaction, answered late: ours (the name is unique).
            Err(e) if e.is_node_exists() => break,
            Err(e) if e.is_connection_loss() && lost < LOSS_RETRIES => {
                lost += 1;
                tracing::info!("{e}; looking for our lease once reconnected");
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
    if let Some((path, data)) = &record {
        // The lease is ours: it does not outlive a record that could not be made.
        if let Err(e) = create_record(client, &records, path, data).await {
            let _ = delete_if_there(client, &node).await;
            return Err(e);
        }
    }
    Ok(Some(Made {
        outcome: lease(None),
        guard_deleted: false,
        leases: None,
    }))
}

/// Creates the record node `path` (and `records`, its parent, if missing): ours whether this
/// create or a lost earlier one made it (its name is our lease's, unique).
async fn create_record(
    client: &Client,
    records: &str,
    path: &str,
    data: &[u8],
) -> Result<(), ZkError> {
    ensure_node(client, records).await?;
    match call_retrying("create", path, || {
        client.create(path, data, &open_persistent())
    })
    .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_node_exists() => Ok(()),
        Err(e) => Err(e),
    }
}
