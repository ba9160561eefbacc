//! The kazoo-compatible lock recipe (`kazoo.recipe.lock.Lock`), so Python and Rust processes
//! exclude each other: contenders are ephemeral sequential children of the lock node named
//! `<uuid4 hex>__lock__<10-digit sequence>`, holding the contender's identifier as data; the
//! lowest sequence holds the lock.
//!
//! [`try_lock`] never blocks (kazoo's `acquire(blocking=False)`): it enters, and leaves again at
//! once if it is not first, reporting the current holder.
//!
//! A waiter in a queue watches the contender just before its own. With [`Extra::quick`], a
//! waiter whose predecessor was the first contender at its last list (the holder) takes the
//! lock as soon as that contender goes, without listing again: no contender older than its
//! own can have appeared since (sequence numbers only grow).
//!
//! A taker of a semaphore's guard that may be passed a lease ([`Extra::baton`], see
//! [`crate::zk::semaphore`]) names its contender `<uuid4 hex>zkd__lock__<sequence>` (kazoo
//! orders contenders by the sequence alone) and, while it waits, watches its own node too.

use futures::FutureExt;
use zookeeper_client::{Acls, CreateMode, EventType, MultiReadResult, OneshotWatcher, Stat};

use super::multiread::{self, Want};
use super::node::{delete_own, make_missing_node};
use super::{call, call_retrying, join, Client, ZkError, LOSS_RETRIES};

/// The marker between the contender's prefix and its sequence number.
pub const LOCK_MARKER: &str = "__lock__";

/// The end of the prefix of a contender that may be passed a lease ([`Extra::baton`]):
/// `<uuid4 hex>zkd__lock__<sequence>`. kazoo's contenders (`<uuid4 hex>__lock__…`) never end
/// so, and kazoo orders contenders by their sequence alone.
pub const BATON_MARKER: &str = "zkd__lock__";

/// Whether the contender `name` was made by a taker that watches for a passed lease.
pub fn takes_batons(name: &str) -> bool {
    name.contains(BATON_MARKER)
}

/// A lock this process holds; released by [`Held::release`] (or by the session ending).
#[derive(Debug)]
pub struct Held {
    /// Full path of our contender node.
    pub node: String,
    /// The data and stat of the node the taker asked to read (the lock node, or another), when
    /// they were read in the same round trip as the list that found us first (after our
    /// contender was created, so no later holder wrote them).
    pub read: Option<(Vec<u8>, Stat)>,
    /// The children of the node the taker asked to list beside the lock (empty when it does
    /// not exist), listed in that same round trip; `None` when not asked or not known.
    pub beside: Option<Vec<String>>,
    /// The contenders as listed when that list found us first (`None` when not known).
    pub listed: Option<Vec<String>>,
    /// Whether a lease was passed to our contender ([`Extra::baton`]).
    pub passed: Passed,
    /// With [`Extra::quick`], when the lock became ours without a list: the data and stat of
    /// the node the taker asked to read, as read with the last list, while the contender
    /// just before ours held the lock (it may have written them since). `read` is then
    /// `None`, and `beside` is that list's.
    pub read_before: Option<Box<(Vec<u8>, Stat)>>,
    /// Our contenders in the other queues we waited in, their deletes not yet sent, or not
    /// yet answered, and the watches the wait kept, removed when the deletes are sent
    /// ([`Leaving`]).
    pub leaving: Leaving,
    /// With [`Extra::watch_next`]: the watch set by the list of `beside` that found us first
    /// (then `beside` is that list's), if it set one.
    pub beside_watch: Option<OneshotWatcher>,
}

/// Our contenders in queues we leave: their deletes sent by [`Leaving::send`] (by the
/// holder, right after the requests its step waits for, so that those are not answered behind
/// the deletes' commits, and they share their round trip), or else by [`Leaving::finish`],
/// which awaits their answers. Dropped unfinished, sent deletes still reach the server unless
/// the connection is lost, and an unsent one is sent (in both cases a contender left is
/// found again as a leftover of this session, and removed).
#[derive(Default)]
pub struct Leaving {
    /// Not sent yet (also when dropped); boxed, to keep a `Held` small.
    unsent: Option<Box<Unsent>>,
    /// In a mutex only so that a `Held` can be shared (`Sync`); never locked twice.
    sent: Vec<(String, std::sync::Mutex<LeavingAnswer>)>,
}

/// What [`Leaving::send`] has yet to do.
struct Unsent {
    /// The client to send the deletes through.
    client: Client,
    /// The contenders to delete.
    nodes: Vec<String>,
    /// The watches the wait kept on predecessors, dropped with the deletes' sending (each
    /// dropped unfired costs a `RemoveWatches` request), so that the requests the step waits
    /// for go first. In a mutex only for `Sync`, as `sent`.
    watches: std::sync::Mutex<Vec<PredecessorWatch>>,
}

type LeavingAnswer = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), zookeeper_client::Error>> + Send>,
>;

impl std::fmt::Debug for Leaving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sent: Vec<&str> = self.sent.iter().map(|(node, _)| node.as_str()).collect();
        f.debug_struct("Leaving")
            .field("unsent", &self.unsent.as_ref().map(|unsent| &unsent.nodes))
            .field(
                "watches",
                &self.unsent.as_ref().map_or(0, |unsent| {
                    unsent.watches.lock().map_or(0, |watches| watches.len())
                }),
            )
            .field("sent", &sent)
            .finish()
    }
}

impl Leaving {
    /// The contenders `nodes`, to be deleted ([`Leaving::send`]), and the `watches` to drop
    /// then.
    fn later<'n>(
        client: &Client,
        nodes: impl Iterator<Item = &'n String>,
        watches: Vec<PredecessorWatch>,
    ) -> Self {
        let nodes: Vec<String> = nodes.cloned().collect();
        let unsent = (!nodes.is_empty() || !watches.is_empty()).then(|| {
            Box::new(Unsent {
                client: client.clone(),
                nodes,
                watches: std::sync::Mutex::new(watches),
            })
        });
        Leaving {
            unsent,
            sent: Vec::new(),
        }
    }

    /// Sends the deletes not sent yet, now (the client writes them with the requests made
    /// before the caller yields), and then drops the watches kept (their removals go after
    /// the deletes).
    pub fn send(&mut self) {
        let Some(unsent) = self.unsent.take() else {
            return;
        };
        let Unsent {
            client,
            nodes,
            watches,
        } = *unsent;
        for node in nodes {
            let answer: LeavingAnswer = Box::pin(client.delete(&node, None));
            self.sent.push((node, std::sync::Mutex::new(answer)));
        }
        drop(watches);
    }

    /// Sends the deletes not sent yet and awaits the answers (a delete the connection lost is
    /// sent again; a contender already gone is left).
    pub async fn finish(self, client: &Client) -> Result<(), ZkError> {
        self.finish_keeping(client).await.map_err(|(e, _)| e)
    }

    /// [`Leaving::finish`], giving back with the error the contenders not known to be gone,
    /// to be left again (by another `finish`).
    pub async fn finish_keeping(mut self, client: &Client) -> Result<(), (ZkError, Leaving)> {
        self.send();
        let mut failed = None;
        let mut kept = Vec::new();
        for (node, answer) in std::mem::take(&mut self.sent) {
            if failed.is_some() {
                kept.push(node);
                continue;
            }
            let answer = answer.into_inner().unwrap_or_else(|e| e.into_inner());
            let left = match call("delete", &node, answer).await {
                Err(e) if e.is_connection_loss() || e.is_timeout() => {
                    delete_own(client, &node).await
                }
                left => left,
            };
            match left {
                Ok(()) => {}
                Err(e) if e.is_no_node() => {}
                Err(e) => {
                    failed = Some(e);
                    kept.push(node);
                }
            }
        }
        match failed {
            None => Ok(()),
            Some(e) => Err((e, Leaving::later(client, kept.iter(), Vec::new()))),
        }
    }
}

impl Drop for Leaving {
    /// Deletes not sent yet are sent (their answers not awaited).
    fn drop(&mut self) {
        self.send();
    }
}

/// Whether a contender of a semaphore's guard was passed a lease by the guard's holder (see
/// [`crate::zk::semaphore`]): the holder writes the contender node of the takers just after
/// it, in the transaction that creates its own lease and deletes its contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// Known not passed (its own node watched, unwritten, when the list found it first): the
    /// holder may pass leases on.
    No,
    /// Passed: it may take its lease now, without the guard, and never passes one on.
    Yes,
    /// Not known (not a taker that watches for a passed lease, or not watched yet): it takes
    /// its lease as the guard's holder, and passes none on.
    Unknown,
}

impl Held {
    /// Deletes our contender node (again after a connection loss: a delete that went
    /// through answers `NoNode` the second time).
    pub async fn release(self, client: &Client) -> Result<(), ZkError> {
        let (left, released) =
            futures::join!(self.leaving.finish(client), delete_own(client, &self.node));
        left.and(released)
    }
}

/// Writes `data` into `path` if its data version is still `version`, and deletes our node
/// `node`, in one transaction, the request sent before this returns (the answer is the
/// future's): a request the caller makes next goes out after it, and shares its round trip.
/// The answer is false (nothing changed, or nothing known after a connection loss) when the
/// version no longer matches.
pub fn send_write_and_delete<'a>(
    client: &'a Client,
    path: &str,
    data: &[u8],
    version: i32,
    node: &str,
) -> Result<impl std::future::Future<Output = Result<bool, ZkError>> + Send + 'a, ZkError> {
    let op = |source| ZkError::Op {
        op: "write",
        path: path.to_string(),
        source,
    };
    let mut writer = client.new_multi_writer();
    writer.add_set_data(path, data, Some(version)).map_err(op)?;
    writer.add_delete(node, None).map_err(op)?;
    let commit = writer.commit();
    let path = path.to_string();
    Ok(async move {
        match call("write", &path, async {
            commit.await.map_err(zookeeper_client::Error::from)
        })
        .await
        {
            Ok(_) => Ok(true),
            Err(e)
                if e.is_connection_loss()
                    || matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion)) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    })
}

/// A contender of a lock, as found in ZooKeeper.
#[derive(Debug, Clone, PartialEq)]
pub struct Contender {
    /// Child node name.
    pub name: String,
    /// Its sequence number.
    pub sequence: i64,
    /// Its data (the identifier), as text.
    pub identifier: String,
    /// The session that created it.
    pub owner: i64,
}

/// Outcome of [`try_lock`].
#[derive(Debug)]
pub enum TryLock {
    /// We hold it.
    Acquired(Held),
    /// Someone else does.
    Busy {
        /// The holder (the lowest contender).
        holder: Contender,
    },
}

/// The sequence number of a contender node name (kazoo: `__lock__(-?\d{10})$`), if it is one.
pub fn sequence_of(name: &str) -> Option<i64> {
    let at = name.rfind(LOCK_MARKER)?;
    let digits = &name[at + LOCK_MARKER.len()..];
    let tail = digits.strip_prefix('-').unwrap_or(digits);
    if tail.len() != 10 || !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The holder of the lock at `path` (its lowest contender, with its identifier) and its
/// node's stat, if any.
pub async fn first_contender(
    client: &Client,
    path: &str,
) -> Result<Option<(Contender, Stat)>, ZkError> {
    let names = match call_retrying("list", path, || client.list_children(path)).await {
        Ok(names) => names,
        Err(e) if e.is_no_node() => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some((sequence, name)) = first_of(&names) else {
        return Ok(None);
    };
    let name = name.clone();
    let full = join(path, &name);
    match call_retrying("get", &full, || client.get_data(&full)).await {
        Ok((data, stat)) => Ok(Some((
            Contender {
                name,
                sequence,
                identifier: String::from_utf8_lossy(&data).into_owned(),
                owner: stat.ephemeral_owner,
            },
            stat,
        ))),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Lists the contenders of the lock at `path`, lowest sequence first (with identifiers).
pub async fn contenders(client: &Client, path: &str) -> Result<Vec<Contender>, ZkError> {
    let names = match call_retrying("list", path, || client.list_children(path)).await {
        Ok(names) => names,
        Err(e) if e.is_no_node() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found: Vec<(i64, String)> = names
        .into_iter()
        .filter_map(|n| sequence_of(&n).map(|s| (s, n)))
        .collect();
    found.sort();
    let reads: Vec<_> = found
        .iter()
        .map(|(_, n)| client.get_data(&join(path, n)))
        .collect();
    let mut out = Vec::new();
    for ((sequence, name), read) in found.into_iter().zip(reads) {
        let full = join(path, &name);
        let mut read = Some(read);
        let got = call_retrying("get", &full, || {
            let again = read.take();
            let client = client.clone();
            let full = full.clone();
            async move {
                match again {
                    Some(pipelined) => pipelined.await,
                    None => client.get_data(&full).await,
                }
            }
        })
        .await;
        match got {
            Ok((data, stat)) => out.push(Contender {
                name,
                sequence,
                identifier: String::from_utf8_lossy(&data).into_owned(),
                owner: stat.ephemeral_owner,
            }),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Tries once to take the lock at `path` (created if missing) with `identifier` as data.
///
/// Connection losses are survived as kazoo does: a create whose answer was lost is looked
/// for by its unique prefix before trying again. A contender left by this very session (an
/// earlier attempt that failed after its create) is removed once it is first in the queue (a
/// leftover would block the lock for everyone while the session lives; a waiter in the queue
/// removes one just before it, [`acquire_queued_any_checking`]). On any error after the
/// create, our contender is removed again (best effort).
///
/// A lock found busy costs two round trips: the create with the list (and reads), then the
/// first contender's read with the delete of ours. Ours is so deleted before the first one
/// is known: when that one turns out to be a leftover of ours, or gone, the try starts
/// again with a new contender, behind any made meanwhile (a try holds no place in the
/// queue).
pub async fn try_lock(client: &Client, path: &str, identifier: &str) -> Result<TryLock, ZkError> {
    try_lock_beside(client, path, identifier, None).await
}

/// [`try_lock`], also listing the children of `beside` (if given) in the round trip that
/// creates our contender ([`Held::beside`]).
pub async fn try_lock_beside(
    client: &Client,
    path: &str,
    identifier: &str,
    beside: Option<&str>,
) -> Result<TryLock, ZkError> {
    // One round trip when the lock node exists and nobody else holds it: our create, the
    // list of contenders and the lock node's data (and the list beside) go out together,
    // and the session answers them in that order.
    let extra = Extra {
        read: Some(path),
        beside,
        ..Extra::default()
    };
    let session = client.session_id().0;
    let mut tries = 0;
    let (node, listed) = loop {
        tries += 1;
        let Created { node, found } = create_listing(client, path, identifier, extra).await?;
        let Some(found) = found else {
            break (node, None);
        };
        if is_first(&found.names, &node) {
            if found.read.is_none() {
                break (node, Some(found.names));
            }
            return Ok(TryLock::Acquired(Held {
                node,
                read: found.read,
                beside: found.beside,
                listed: Some(found.names),
                read_before: None,
                leaving: Leaving::default(),
                passed: Passed::Unknown,
                beside_watch: found.beside_watch,
            }));
        }
        // Busy: the first contender read and ours deleted in one round trip (two fewer
        // than listing again, then reading, then deleting).
        let Some((sequence, first)) = first_of(&found.names).map(|(s, n)| (s, n.clone())) else {
            break (node, Some(found.names));
        };
        let full = join(path, &first);
        let (read, left) = futures::join!(
            call_retrying("get", &full, || client.get_data(&full)),
            delete_own(client, &node)
        );
        left?;
        match read {
            // A leftover of an interrupted attempt of this session, which would block the
            // lock for everyone while the session lives: removed, and the lock tried again.
            Ok((_, stat)) if stat.ephemeral_owner == session && tries < DECIDE_ROUNDS => {
                tracing::warn!("removing {full}, left by an interrupted attempt of this session");
                delete_own(client, &full).await?;
            }
            // Gone meanwhile: the lock tried again.
            Err(e) if e.is_no_node() && tries < DECIDE_ROUNDS => {}
            Ok((_, stat)) if stat.ephemeral_owner == session => {
                return Ok(TryLock::Busy { holder: unknown() })
            }
            Ok((data, stat)) => {
                return Ok(TryLock::Busy {
                    holder: Contender {
                        name: first,
                        sequence,
                        identifier: String::from_utf8_lossy(&data).into_owned(),
                        owner: stat.ephemeral_owner,
                    },
                })
            }
            Err(e) if e.is_no_node() => return Ok(TryLock::Busy { holder: unknown() }),
            Err(e) => return Err(e),
        }
    };
    let decided = decide(client, path, &node, listed).await;
    if !matches!(decided, Ok(TryLock::Acquired(_))) {
        // Busy, or failed: leave the queue (an error here is the session's, reported by
        // the next request anyway).
        if let Err(e) = delete_own(client, &node).await {
            if decided.is_ok() {
                return Err(e);
            }
        }
    }
    decided
}

/// What a taker reads with each list of the contenders, in the same round trip.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra<'a> {
    /// A node whose data (and stat) is read.
    pub read: Option<&'a str>,
    /// A node whose children are listed (none when it does not exist).
    pub beside: Option<&'a str>,
    /// The contender is named with [`BATON_MARKER`] and watches its own node while it waits:
    /// a write of it by the guard's holder passes it a lease ([`Passed::Yes`]).
    pub baton: bool,
    /// A waiter whose predecessor was the first contender at the last list (the holder)
    /// takes the lock when that contender goes away, without listing again: no contender
    /// older than ours can appear, so ours is the first ([`Held::read_before`]). Not for a
    /// taker that needs the list or the reads to be fresh (the semaphore's guard, which
    /// counts the leases under it), nor with `baton`.
    pub quick: bool,
    /// With `beside`: the list sent once the contender just before ours went away (the list
    /// likely to find us first) lists `beside` with a watch, kept in [`Held::beside_watch`].
    /// A taker that, first, waits for a change of `beside` (the semaphore's guard, whose
    /// first taker waits for a lease) so waits without another round trip. The other lists
    /// set no watch: a change of `beside` would wake every waiter (as it is, it wakes those
    /// whose predecessor went away since the last change: the watch is one-shot).
    pub watch_next: bool,
}

/// One list of the contenders and what was read with it ([`Extra`]); the reads are given
/// only when they were answered (else `None`).
struct Found {
    names: Vec<String>,
    read: Option<(Vec<u8>, Stat)>,
    beside: Option<Vec<String>>,
    /// The watch the list of `beside` set, if it was asked to.
    beside_watch: Option<OneshotWatcher>,
}

/// Our contender, and the list (and reads) answered after its create, if they were.
struct Created {
    node: String,
    found: Option<Found>,
}

/// Lists the contenders of `path` and reads what `extra` asks for, in one round trip
/// (sent in that order, so answered in that order). An error of the list is the error; a
/// read that fails is only unknown. With `watch`, `beside` is listed with a watch.
async fn list_reading(
    client: &Client,
    path: &str,
    extra: Extra<'_>,
    watch: bool,
) -> Result<Found, ZkError> {
    if !watch && (extra.read.is_some() || extra.beside.is_some()) && !multiread::missing() {
        match list_reading_at_once(client, path, extra).await {
            Err(e) if multiread::refused(&e) => {}
            found => return found,
        }
    }
    let list = client.list_children(path);
    let get = extra.read.map(|node| client.get_data(node));
    let (beside, beside_watch) = match extra.beside {
        Some(node) if watch => {
            let listed = call("list", node, client.list_and_watch_children(node));
            (None, Some(listed))
        }
        Some(node) => (Some(client.list_children(node)), None),
        None => (None, None),
    };
    let (names, read, beside, watched) = futures::join!(
        call("list", path, list),
        async {
            match (get, extra.read) {
                (Some(get), Some(node)) => call("get", node, get).await.ok(),
                _ => None,
            }
        },
        listed_beside(beside, extra.beside),
        async {
            match beside_watch {
                Some(listed) => match listed.await {
                    Ok((names, watcher)) => Some((Some(names), Some(watcher))),
                    Err(e) if e.is_no_node() => Some((Some(Vec::new()), None)),
                    Err(_) => Some((None, None)),
                },
                None => None,
            }
        },
    );
    let (beside, beside_watch) = match watched {
        Some((names, watcher)) => (names, watcher),
        None => (beside, None),
    };
    Ok(Found {
        names: names?,
        read,
        beside,
        beside_watch,
    })
}

/// [`list_reading`] without a watch, as one multi-read: one request where three took three
/// turns of the server's queue (it answers a session's requests one at a time), and the
/// list and the reads from one snapshot.
async fn list_reading_at_once(
    client: &Client,
    path: &str,
    extra: Extra<'_>,
) -> Result<Found, ZkError> {
    let mut wants = vec![Want::Children(path.to_string())];
    wants.extend(extra.read.map(|node| Want::Data(node.to_string())));
    wants.extend(extra.beside.map(|node| Want::Children(node.to_string())));
    let mut reader = client.new_multi_reader();
    multiread::add_wants(&mut reader, &wants).map_err(|(want, source)| ZkError::Op {
        op: "list",
        path: want.path().to_string(),
        source,
    })?;
    let mut results = call("list", path, reader.commit()).await?.into_iter();
    let names = match results.next() {
        Some(MultiReadResult::Children { children }) => children,
        Some(MultiReadResult::Error { err }) => {
            return Err(ZkError::Op {
                op: "list",
                path: path.to_string(),
                source: err,
            })
        }
        _ => return Err(multiread::unexpected(path, "no list")),
    };
    // A read that fails is only unknown, as in [`list_reading`].
    let read = extra.read.and_then(|_| match results.next() {
        Some(MultiReadResult::Data { data, stat }) => Some((data, stat)),
        _ => None,
    });
    let beside = extra.beside.and_then(|node| {
        results
            .next()
            .and_then(|result| multiread::children(node, result).ok())
    });
    Ok(Found {
        names,
        read,
        beside,
        beside_watch: None,
    })
}

/// The answer of a list of the children of `node` sent beside an acquisition: the names
/// (none when the node does not exist), or `None` when not asked or not answered.
pub(super) async fn listed_beside(
    list: Option<impl std::future::Future<Output = Result<Vec<String>, zookeeper_client::Error>>>,
    node: Option<&str>,
) -> Option<Vec<String>> {
    match (list, node) {
        (Some(list), Some(node)) => match call("list", node, list).await {
            Ok(names) => Some(names),
            Err(e) if e.is_no_node() => Some(Vec::new()),
            Err(_) => None,
        },
        _ => None,
    }
}

/// Creates our contender under `path` (and `path` when missing), lists the contenders and
/// reads what `extra` asks for, in the same round trip (sent in that order, so answered in
/// that order). The list and the reads are given only when they were answered after our
/// create (else the caller lists again).
async fn create_listing(
    client: &Client,
    path: &str,
    identifier: &str,
    extra: Extra<'_>,
) -> Result<Created, ZkError> {
    let prefix = contender_prefix(extra.baton);
    let ours = join(path, &prefix);
    let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let create = client.create(&ours, identifier.as_bytes(), &mode);
    let (created, found) = futures::join!(
        call("create", &ours, create),
        list_reading(client, path, extra, false)
    );
    match created {
        Ok((_, seq)) => Ok(Created {
            node: format!("{ours}{seq}"),
            found: found.ok(),
        }),
        // The lock node usually exists: it is made only when missing.
        Err(e) if e.is_no_node() => {
            make_missing_node(client, path).await?;
            Ok(Created {
                node: create_contender(client, path, identifier, extra.baton).await?,
                found: None,
            })
        }
        Err(e) if e.is_connection_loss() => {
            tracing::info!("{e}; looking for our contender once reconnected");
            let names = call_retrying("list", path, || client.list_children(path)).await?;
            let node = match names.iter().find(|n| n.starts_with(&prefix)) {
                Some(name) => join(path, name),
                None => create_contender(client, path, identifier, extra.baton).await?,
            };
            Ok(Created { node, found: None })
        }
        Err(e) => Err(e),
    }
}

/// The prefix of a new contender: `<uuid4 hex>__lock__`, or `<uuid4 hex>zkd__lock__` for a
/// taker that watches for a passed lease.
fn contender_prefix(baton: bool) -> String {
    let id = uuid::Uuid::new_v4().simple();
    match baton {
        true => format!("{id}{BATON_MARKER}"),
        false => format!("{id}{LOCK_MARKER}"),
    }
}

/// Creates our ephemeral sequential contender under `path`, returning its full path.
async fn create_contender(
    client: &Client,
    path: &str,
    identifier: &str,
    baton: bool,
) -> Result<String, ZkError> {
    let prefix = contender_prefix(baton);
    let ours = join(path, &prefix);
    let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let mut lost = 0;
    loop {
        match call(
            "create",
            &ours,
            client.create(&ours, identifier.as_bytes(), &mode),
        )
        .await
        {
            Ok((_, seq)) => return Ok(format!("{ours}{seq}")),
            Err(e) if e.is_connection_loss() && lost < LOSS_RETRIES => {
                lost += 1;
                tracing::info!("{e}; looking for our contender once reconnected");
                let names = call_retrying("list", path, || client.list_children(path)).await?;
                if let Some(name) = names.iter().find(|n| n.starts_with(&prefix)) {
                    return Ok(join(path, name));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Takes the lock at `path` (created if missing), waiting in its queue as kazoo's blocking
/// `acquire` does: each contender watches the one just before it, so a release wakes one
/// waiter, not all of them. Reads what `extra` asks for with every list of the contenders;
/// the held lock carries what was read with the list that found it first. Gives up
/// (removing our contender) after `limit`.
pub async fn acquire_queued(
    client: &Client,
    path: &str,
    identifier: &str,
    limit: std::time::Duration,
    extra: Extra<'_>,
) -> Result<Held, ZkError> {
    match acquire_queued_any(client, &[(path, extra)], identifier, limit).await? {
        Some((_, held)) => Ok(held),
        None => Err(ZkError::Timeout {
            op: "lock",
            path: path.to_string(),
        }),
    }
}

/// Waits in the queue of every lock of `places` at once (each with what to read with its
/// lists, as [`acquire_queued`]) and takes the first one whose turn comes (the first in
/// `places`' order when several come together); the deletes that leave the other queues go
/// with the holder's next requests ([`Held::leaving`]).
/// `None` after `limit` (every contender of ours removed).
///
/// A host that wants several busy nodes is so served in the order it began to wait, as its
/// peers are: whoever has waited longest for a node gets it when it is freed. (Watching the
/// holders instead, and racing for a freed node, lets a host queued for its last node take
/// every node it waits for first, and leaves nodes idle while hosts with more work left are
/// still waiting: `scripts/rollout-model.py`.)
pub async fn acquire_queued_any(
    client: &Client,
    places: &[(&str, Extra<'_>)],
    identifier: &str,
    limit: std::time::Duration,
) -> Result<Option<(usize, Held)>, ZkError> {
    let keep_waiting = || std::future::ready(true);
    acquire_queued_any_checking(client, places, identifier, limit, limit, keep_waiting).await
}

/// [`acquire_queued_any`], asking `check` every `every` whether to go on waiting: the host
/// keeps its places in the queues while it does (a check costs what `check` asks; the
/// watches are kept), and leaves them all when it says no (`None`, as after `limit`).
pub async fn acquire_queued_any_checking<F, Fut>(
    client: &Client,
    places: &[(&str, Extra<'_>)],
    identifier: &str,
    limit: std::time::Duration,
    every: std::time::Duration,
    check: F,
) -> Result<Option<(usize, Held)>, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    queue_and_wait(client, places, identifier, limit, every, every, check).await
}

/// Takes the lock at `path` as [`acquire_queued`] does, asking `check` whether to go on once
/// it has waited `after` (then only): a taker still waiting says so, and may give up
/// (`None`, our contender removed). `None` too after `limit`.
pub async fn acquire_queued_checking_after<F, Fut>(
    client: &Client,
    path: &str,
    identifier: &str,
    limit: std::time::Duration,
    after: std::time::Duration,
    extra: Extra<'_>,
    check: F,
) -> Result<Option<Held>, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let places = [(path, extra)];
    let got = queue_and_wait(client, &places, identifier, limit, after, limit, check).await?;
    Ok(got.map(|(_, held)| held))
}

/// [`acquire_queued_any_checking`], the first check after `first` (the next ones `every`
/// after the last).
async fn queue_and_wait<F, Fut>(
    client: &Client,
    places: &[(&str, Extra<'_>)],
    identifier: &str,
    limit: std::time::Duration,
    first: std::time::Duration,
    every: std::time::Duration,
    mut check: F,
) -> Result<Option<(usize, Held)>, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut next_check = tokio::time::Instant::now() + first;
    // Every create and first list (and reads) in one round trip, answered in that order.
    let created = futures::future::join_all(
        places
            .iter()
            .map(|(path, extra)| create_listing(client, path, identifier, *extra)),
    )
    .await;
    let mut nodes = Vec::with_capacity(places.len());
    let mut found = Vec::with_capacity(places.len());
    let mut failed = None;
    for made in created {
        match made {
            Ok(Created { node, found: f }) => {
                nodes.push(node);
                found.push(f);
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        // The contenders made in the other queues go again.
        let _ = leave_queues(client, &nodes, None).await;
        return Err(e);
    }
    let sequences: Vec<i64> = nodes
        .iter()
        .map(|node| sequence_of(node.rsplit('/').next().unwrap_or_default()).unwrap_or(i64::MAX))
        .collect();
    // The own-node watches of the places whose contender may be passed a lease, set with
    // the first wait.
    let mut own: Vec<Option<OwnWatch<'_>>> = places.iter().map(|_| None).collect();
    // Per place: whether the contender before ours just went away ([`Extra::watch_next`]).
    let mut holder_gone = vec![false; places.len()];
    // Per place: the watch on the contender before ours, kept from one wait to the next
    // while it is still that contender's.
    let mut watching: Vec<Option<PredecessorWatch>> = places.iter().map(|_| None).collect();
    let waited = async {
        loop {
            // The queues not listed since their last change, listed together.
            let stale: Vec<usize> = (0..places.len()).filter(|&i| found[i].is_none()).collect();
            let lists = futures::future::join_all(stale.iter().map(|&i| {
                let (path, extra) = places[i];
                let watch = extra.watch_next && std::mem::take(&mut holder_gone[i]);
                async move {
                    match list_reading(client, path, extra, watch).await {
                        Err(e) if e.is_connection_loss() => Ok(Found {
                            names: call_retrying("list", path, || client.list_children(path))
                                .await?,
                            read: None,
                            beside: None,
                            beside_watch: None,
                        }),
                        other => other,
                    }
                }
            }))
            .await;
            for (i, listed) in stale.into_iter().zip(lists) {
                found[i] = Some(listed?);
            }
            let mut predecessors = Vec::with_capacity(places.len());
            // Per place: whether its predecessor is the first contender (the holder).
            let mut holder_next = Vec::with_capacity(places.len());
            for (i, now) in found.iter().enumerate() {
                let names = now.as_ref().map(|f| f.names.as_slice()).unwrap_or_default();
                let older: Vec<(i64, &String)> = names
                    .iter()
                    .filter_map(|n| sequence_of(n).map(|s| (s, n)))
                    .filter(|(s, _)| *s < sequences[i])
                    .collect();
                match older.iter().max() {
                    None => return Ok(Some((i, passed_now(&mut own[i]), false))),
                    Some((_, predecessor)) => predecessors.push(join(places[i].0, predecessor)),
                }
                holder_next.push(older.len() == 1);
            }
            let now = tokio::time::Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Ok(None);
            }
            let until_check = next_check.saturating_duration_since(now);
            for (i, (_, extra)) in places.iter().enumerate() {
                if extra.baton && own[i].is_none() {
                    own[i] = Some(OwnWatch::set(client, nodes[i].clone()));
                }
            }
            // Only the watches not kept are set (a kept one fires as a new one would: a
            // session's events and answers come in order).
            let gone = watch_predecessors(client, &predecessors, &mut watching).await?;
            // A predecessor already gone counts as its watch fired. What happened before
            // (a lease passed to us, a kept watch fired) comes first, as it would have in a
            // wait; then the first gone place that is ours now, else the first gone. The
            // other gone places are listed again.
            let already = match gone.is_empty() {
                true => None,
                false => {
                    if let Some((i, passed)) = own_event(&mut own).now_or_never() {
                        if passed {
                            return Ok(Some((i, Passed::Yes, false)));
                        }
                        // Our own node went away or changed otherwise: every queue
                        // concerned is looked at again, as after a wait.
                        found[i] = None;
                        for &j in &gone {
                            holder_gone[j] = true;
                            found[j] = None;
                        }
                        continue;
                    }
                    next_fired(&mut watching).now_or_never()
                }
            };
            let first_gone = gone
                .iter()
                .find(|&&i| places[i].1.quick && holder_next[i])
                .or(gone.first())
                .map(|&i| (i, EventType::NodeDeleted));
            let ours_now = |w: &Option<(usize, EventType)>| {
                matches!(w, Some((i, EventType::NodeDeleted)) if places[*i].1.quick && holder_next[*i])
            };
            let picked = if ours_now(&already) || !ours_now(&first_gone) {
                already.or(first_gone)
            } else {
                first_gone
            };
            let woken = match picked {
                Some((i, event)) => {
                    for &j in gone.iter().filter(|&&j| j != i) {
                        holder_gone[j] = true;
                        found[j] = None;
                    }
                    Some((i, event))
                }
                // A lease passed to us ends the wait at once, whatever our place.
                None => tokio::select! {
                    biased;
                    (i, passed) = own_event(&mut own) => {
                        if passed {
                            return Ok(Some((i, Passed::Yes, false)));
                        }
                        // Our own node went away or changed otherwise: look at the queue
                        // again.
                        found[i] = None;
                        continue;
                    }
                    fired = tokio::time::timeout(
                        left.min(until_check),
                        next_fired(&mut watching),
                    ) => fired.ok(),
                },
            };
            match woken {
                // The contender before ours was passed a lease: it goes soon; watched again
                // (not listed again: nothing before it changed).
                Some((i, EventType::NodeDataChanged)) if places[i].1.baton => {}
                // The holder went away, and ours was next: no contender older than ours can
                // have been created since the list that showed it (sequence numbers only
                // grow), so ours is the first now.
                Some((i, EventType::NodeDeleted)) if places[i].1.quick && holder_next[i] => {
                    return Ok(Some((i, passed_now(&mut own[i]), true)));
                }
                Some((i, event)) => {
                    holder_gone[i] = event == EventType::NodeDeleted;
                    found[i] = None;
                }
                None if tokio::time::Instant::now() >= deadline => return Ok(None),
                None => {
                    if !check().await {
                        return Ok(None);
                    }
                    next_check = tokio::time::Instant::now() + every;
                    // The one just before us may be a leftover of this session (an earlier
                    // attempt interrupted after its create): nobody else removes it.
                    for (i, predecessor) in predecessors.iter().enumerate() {
                        if our_leftover(client, predecessor, &nodes).await? {
                            tracing::warn!(
                                "removing {predecessor}, left by an interrupted attempt of this session"
                            );
                            delete_own(client, predecessor).await?;
                            found[i] = None;
                        }
                    }
                }
            }
        }
    }
    .await;
    drop(own);
    match waited {
        Ok(Some((i, passed, quick))) => {
            // The other queues are left in the round trip of the holder's next requests,
            // after them.
            let others = nodes.iter().enumerate().filter(|&(j, _)| j != i);
            let kept = watching.into_iter().flatten().collect();
            let leaving = Leaving::later(client, others.map(|(_, node)| node), kept);
            // Found first by a list, or passed a lease while waiting (then with what the
            // last list read), or next to a holder that went away (`quick`).
            let last = found[i].take();
            let node = nodes.swap_remove(i);
            let (read, beside, listed, beside_watch) = match last {
                Some(f) => (f.read, f.beside, Some(f.names), f.beside_watch),
                None => (None, None, None, None),
            };
            let (read, read_before) = if quick {
                (None, read.map(Box::new))
            } else {
                (read, None)
            };
            Ok(Some((
                i,
                Held {
                    node,
                    read,
                    beside,
                    listed: listed.filter(|_| passed != Passed::Yes && !quick),
                    passed,
                    read_before,
                    leaving,
                    beside_watch,
                },
            )))
        }
        Ok(None) => {
            leave_queues(client, &nodes, None).await?;
            Ok(None)
        }
        Err(e) => {
            let _ = leave_queues(client, &nodes, None).await;
            Err(e)
        }
    }
}

/// A watch on the contender just before ours in a queue, kept across [`queue_and_wait`]'s
/// waits until it fires or that contender is no longer the one before ours: a watch dropped
/// unfired costs the server a `RemoveWatches` request, and setting it again one more. (Also
/// the watches of [`wait_for_any`], on other nodes.)
struct PredecessorWatch {
    /// The contender watched.
    node: String,
    /// Resolves with the event.
    fired: std::pin::Pin<Box<dyn std::future::Future<Output = EventType> + Send>>,
}

/// Sets the watches of `predecessors` (one per place) that `watching` does not hold yet
/// (every request in one round trip), dropping those on other nodes. Gives the places whose
/// predecessor was already gone.
async fn watch_predecessors(
    client: &Client,
    predecessors: &[String],
    watching: &mut [Option<PredecessorWatch>],
) -> Result<Vec<usize>, ZkError> {
    let to_set: Vec<usize> = (0..predecessors.len())
        .filter(|&i| {
            watching[i]
                .as_ref()
                .is_none_or(|kept| kept.node != predecessors[i])
        })
        .collect();
    for &i in &to_set {
        watching[i] = None;
    }
    let set = futures::future::join_all(to_set.iter().map(|&i| {
        let node = &predecessors[i];
        call_retrying("watch", node, || client.check_and_watch_stat(node))
    }))
    .await;
    let mut gone = Vec::new();
    for (&i, watched) in to_set.iter().zip(set) {
        match watched? {
            (None, _) => gone.push(i),
            (Some(_), watcher) => {
                watching[i] = Some(PredecessorWatch {
                    node: predecessors[i].clone(),
                    fired: Box::pin(async move { watcher.changed().await.event_type }),
                });
            }
        }
    }
    Ok(gone)
}

/// The first of `watching`'s watches to fire: its place and event (that watch is then
/// gone from `watching`). Pending for ever when none is held.
async fn next_fired(watching: &mut [Option<PredecessorWatch>]) -> (usize, EventType) {
    futures::future::poll_fn(|cx| {
        for (i, slot) in watching.iter_mut().enumerate() {
            if let Some(kept) = slot {
                if let std::task::Poll::Ready(event) = kept.fired.as_mut().poll(cx) {
                    *slot = None;
                    return std::task::Poll::Ready((i, event));
                }
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The watch of our own contender node, for a lease passed to it ([`Extra::baton`]):
/// resolves to true when the node was written (passed), false when it went away.
struct OwnWatch<'a> {
    seen: std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>,
    /// Set once the watch is in place with the node unwritten: from then on a write of it
    /// reaches us before the answer to any later request of ours.
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// What `seen` resolved to, once it did.
    done: Option<bool>,
}

impl<'a> OwnWatch<'a> {
    /// Sends the watch of `node` (its request goes out now, with the requests made next).
    fn set(client: &'a Client, node: String) -> Self {
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = armed.clone();
        let watch = client.check_and_watch_stat(&node);
        let seen = Box::pin(async move {
            match watch.await {
                Ok((Some(stat), _)) if stat.version > 0 => true,
                Ok((Some(_), watcher)) => {
                    flag.store(true, std::sync::atomic::Ordering::Release);
                    let event = watcher.changed().await;
                    event.event_type == zookeeper_client::EventType::NodeDataChanged
                }
                // Gone, or not known: never taken for a passed lease.
                Ok((None, _)) | Err(_) => {
                    tracing::debug!("{node}: own contender not watched");
                    false
                }
            }
        });
        OwnWatch {
            seen,
            armed,
            done: None,
        }
    }
}

/// The first own-node watch of `own` to resolve: its index, and whether a lease was passed.
async fn own_event(own: &mut [Option<OwnWatch<'_>>]) -> (usize, bool) {
    futures::future::poll_fn(|cx| {
        for (i, w) in own.iter_mut().enumerate() {
            if let Some(w) = w {
                if w.done.is_none() {
                    if let std::task::Poll::Ready(passed) = w.seen.as_mut().poll(cx) {
                        w.done = Some(passed);
                        return std::task::Poll::Ready((i, passed));
                    }
                }
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Whether a lease was passed to the contender found first by a list: known only when its
/// own-node watch was in place before that list (a write of the node reaches us before the
/// list's answer, ZooKeeper keeping a session's events and answers in order).
fn passed_now(own: &mut Option<OwnWatch<'_>>) -> Passed {
    let Some(w) = own else {
        return Passed::Unknown;
    };
    if w.done.is_none() {
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        if let std::task::Poll::Ready(passed) = w.seen.as_mut().poll(&mut cx) {
            w.done = Some(passed);
        }
    }
    match w.done {
        Some(true) => Passed::Yes,
        Some(false) => Passed::Unknown,
        None if w.armed.load(std::sync::atomic::Ordering::Acquire) => Passed::No,
        None => Passed::Unknown,
    }
}

/// Whether `node` is a contender of this session other than `ours` (one stat).
async fn our_leftover(client: &Client, node: &str, ours: &[String]) -> Result<bool, ZkError> {
    if ours.iter().any(|n| n == node) {
        return Ok(false);
    }
    let stat = call_retrying("stat", node, || client.check_stat(node)).await?;
    Ok(stat.is_some_and(|s| s.ephemeral_owner == client.session_id().0))
}

/// Removes our contenders `nodes` (all at once), but the one at `keep`.
async fn leave_queues(
    client: &Client,
    nodes: &[String],
    keep: Option<usize>,
) -> Result<(), ZkError> {
    let left = futures::future::join_all(
        nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != keep)
            .map(|(_, node)| delete_own(client, node)),
    )
    .await;
    left.into_iter().collect()
}

/// Whether the contender `node` (a full path) has the lowest sequence among `names`.
fn is_first(names: &[String], node: &str) -> bool {
    let name = node.rsplit('/').next().unwrap_or_default();
    first_of(names).is_some_and(|(_, n)| n == name)
}

/// Whether our contender `node` holds the lock. Only the first contender is read, whatever
/// the length of the queue (reading every contender cost a waiter one request per host
/// queued, at every try: 200 per host in a rollout of 100 hosts under one node lock). A
/// first contender of our own session other than ours is a leftover of an interrupted
/// attempt, which would block the lock for everyone while the session lives: it is removed,
/// and the queue looked at again (a leftover further back is removed once it is first).
/// `listed`: the contenders as just listed (after our create), for the first look.
async fn decide(
    client: &Client,
    path: &str,
    node: &str,
    mut listed: Option<Vec<String>>,
) -> Result<TryLock, ZkError> {
    let name = node.rsplit('/').next().unwrap_or_default();
    let session = client.session_id().0;
    let mut first = None;
    for _ in 0..DECIDE_ROUNDS {
        let names = match listed.take() {
            Some(names) => names,
            None => call_retrying("list", path, || client.list_children(path)).await?,
        };
        if is_first(&names, node) {
            return Ok(TryLock::Acquired(Held {
                node: node.to_string(),
                read: None,
                beside: None,
                listed: Some(names),
                passed: Passed::Unknown,
                read_before: None,
                leaving: Leaving::default(),
                beside_watch: None,
            }));
        }
        let Some((sequence, lowest)) = first_of(&names) else {
            break;
        };
        let lowest = lowest.clone();
        let full = join(path, &lowest);
        let (data, stat) = match call_retrying("get", &full, || client.get_data(&full)).await {
            Ok(read) => read,
            // Gone meanwhile: look again.
            Err(e) if e.is_no_node() => continue,
            Err(e) => return Err(e),
        };
        let contender = Contender {
            name: lowest,
            sequence,
            identifier: String::from_utf8_lossy(&data).into_owned(),
            owner: stat.ephemeral_owner,
        };
        if contender.owner == session && contender.name != name {
            tracing::warn!("removing {full}, left by an interrupted attempt of this session");
            delete_own(client, &full).await?;
            continue;
        }
        first = Some(contender);
        break;
    }
    Ok(TryLock::Busy {
        holder: first.unwrap_or_else(unknown),
    })
}

/// A holder not known (the queue kept changing under the looks at it).
fn unknown() -> Contender {
    Contender {
        name: String::new(),
        sequence: -1,
        identifier: String::new(),
        owner: 0,
    }
}

/// The first contender of `names` (the lowest sequence) and its sequence.
fn first_of(names: &[String]) -> Option<(i64, &String)> {
    names
        .iter()
        .filter_map(|n| sequence_of(n).map(|s| (s, n)))
        .min()
}

/// Most looks at a lock's queue in one [`decide`], and most tries in one
/// [`try_lock_beside`] (each removes a leftover of ours, or finds the first contender gone).
const DECIDE_ROUNDS: usize = 20;

/// Waits until one of the given contender nodes goes away (or changes), or `limit` passes:
/// how a process that found every lock it wants busy waits, on watches rather than polling.
/// Gives the index of a node that went away or changed (`None` after `limit`, or after a
/// pause of at most 100 ms when `nodes` is empty).
pub async fn wait_for_any(
    client: &Client,
    nodes: &[String],
    limit: std::time::Duration,
) -> Result<Option<usize>, ZkError> {
    if nodes.is_empty() {
        // Nothing to watch (no node known): a short pause, not a busy loop.
        tokio::time::sleep(limit.min(std::time::Duration::from_millis(100))).await;
        return Ok(None);
    }
    // Every watch is set in the same round trip; a node already gone ends the wait at once.
    let mut watching: Vec<Option<PredecessorWatch>> = nodes.iter().map(|_| None).collect();
    if let Some(&i) = watch_predecessors(client, nodes, &mut watching)
        .await?
        .first()
    {
        return Ok(Some(i));
    }
    Ok(tokio::time::timeout(limit, next_fired(&mut watching))
        .await
        .ok()
        .map(|(i, _)| i))
}

#[cfg(test)]
mod tests {
    use super::sequence_of;

    #[test]
    fn sequences_follow_kazoos_pattern() {
        assert_eq!(sequence_of("6ec3a4d__lock__0000000012"), Some(12));
        assert_eq!(sequence_of("x__lock__-000000001"), None);
        assert_eq!(sequence_of("x__lock__-0000000001"), Some(-1));
        assert_eq!(sequence_of("x__lock__12"), None);
        assert_eq!(sequence_of("lr-0000000001"), None);
        assert_eq!(sequence_of("a__lock__b__lock__0000000003"), Some(3));
    }
}
