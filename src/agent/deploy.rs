//! Running deployments. Without a role controller each instance runs under its node lock
//! (`/agent-locks/<name>`, kazoo's recipe): a host holds at most one node lock, goes on with
//! another pending node of the run when one is busy, and waits only when every pending node
//! is busy: in the queues of all their node locks at once, taking the first whose turn comes
//! (else on watches of the holders). After taking a lock and before the script runs, an in-flight record
//! goes into the lock node's data; it is cleared when the step has ended, so a record found by
//! the next holder means its writer died mid-step, and that host halts the cluster naming it.
//! A node whose `max-parallel` K is above 1 is entered with a lease of its semaphore instead
//! (and its canaries under the node lock): see [`super::rollout`]. After a successful deploy
//! script, the package's health check runs while the lock or lease is still held
//! ([`super::steps`], [`super::health`]). With a role controller, the role lock covers the
//! whole pass and node locks are not used (those deployments run as any other step,
//! [`super::plan::Step::run`]). The deploy script itself is the step's work
//! ([`super::steps`]).

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::error::Interrupt;
use super::pass::{Pass, StatusAnswer};
use super::plan::{Lock, Rollout, Step};
use super::rollout::{
    add_canary, canary_key, dead_lease_holder, deploy_leased, died_in_flight,
    execute_ready_halting, halt_for_dead_holder, halted, in_canary_phase, in_flight_record,
    is_mine, look_before_locked_step, Canary, LookAfterTake, Looked,
};
use crate::zk::encode;
use crate::zk::lock::{
    acquire_queued_any_checking, first_contender, send_write_and_delete, try_lock_beside,
    wait_for_any, Contender, Extra, Held, Leaving, TryLock,
};
use crate::zk::paths::semaphore_path;
use crate::zk::semaphore::{self, Lease, TryLease};
use crate::zk::update::{update_props, update_props_known};
use crate::zk::{call, call_retrying, decode, join, Client, ZkError};

/// Longest wait on busy locks before looking again (in a lock's queue: checking the
/// cluster and the holders, keeping its place).
const LOCK_RECHECK: Duration = Duration::from_secs(10);
/// Longest stay in the node locks' queues before leaving them and trying every node again.
const QUEUE_LIMIT: Duration = Duration::from_secs(600);

/// How long a host with one node left waits for a lease before it says so (its status) and
/// checks the cluster. At a version bump, the hosts beyond the first K would otherwise all
/// write their status while the first K take their leases and write theirs, and the server
/// commits writes one after another, a session's later requests waiting for its write.
const SAY_WAITING_AFTER: Duration = Duration::from_millis(250);

/// Most node-lock queues a host waits in at once (beyond, it watches the holders).
const MAX_QUEUES: usize = 16;

/// How a host entered an application node, or why it could not.
enum Entry {
    /// Its node lock (K = 1, or a canary: then the canary version key).
    Lock { held: Held, canary: Option<Canary> },
    /// A lease of its semaphore (K > 1), with what was read right after it was taken, if
    /// the reads went with it ([`LookAfterTake`]).
    Lease {
        lease: Lease,
        looked: Option<Looked>,
    },
    /// Every place is taken: the lock or semaphore, the nodes to watch, and who holds them;
    /// `cross` when it is taken by hosts under the node's other kind of place (a lock holder
    /// while leases are wanted, or leases while the lock is), after a change of K.
    Busy {
        place: String,
        nodes: Vec<String>,
        who: String,
        cross: bool,
    },
}

impl Entry {
    /// Gives back the lock or lease taken, if any.
    async fn give_back(self, client: &Client) -> Result<(), ZkError> {
        match self {
            Entry::Lock { held, .. } => held.release(client).await,
            Entry::Lease { lease, .. } => lease.release(client).await,
            Entry::Busy { .. } => Ok(()),
        }
    }
}

/// A node lock's release whose request is on its way (with the holder's last write): its
/// answer is awaited once the host's next request has gone out too, so that the two share a
/// round trip. It completes the release itself if the transaction could not be applied.
type Releasing<'a> = futures::future::BoxFuture<'a, Result<(), ZkError>>;

/// Runs a run of deployments under their node locks (or semaphore leases), in plan order
/// except that a busy node is passed over and taken later.
pub async fn run_node_locked(pass: &mut Pass<'_>, run: &[Step]) -> Result<(), Interrupt> {
    let agent = pass.agent;
    let identifier = format!("{} ({})", agent.host.name, agent.host.id);
    let mut pending: Vec<NodeLocked<'_>> = run
        .iter()
        .filter_map(|step| match step {
            Step::Deploy {
                lock: Lock::Node(lock),
                path,
                n,
                rollout,
                ..
            } => Some(NodeLocked {
                step,
                lock,
                path,
                n: *n,
                rollout,
                busy: None,
                lock_queue: false,
            }),
            _ => None,
        })
        .collect();
    let mut waited_since: Option<Instant> = None;
    // The waiting status last written: rewritten only when it changes, so that its age
    // (what the monitor reports) counts from the start of the wait.
    let mut waiting: Option<String> = None;
    // A node is entered at once: a node taken is checked for in its step's own first round
    // trip (the checkpoint before its script), and a round that takes nothing checks the
    // cluster before it waits.
    // The lock or lease taken while waiting in a queue, for the one pending node.
    let mut ready: Option<Entry> = None;
    // The node whose holder went away while the host waited.
    let mut focus: Option<usize> = None;
    // The last node's release, answered after the next node's first request went out.
    let mut releasing: Option<Releasing<'_>> = None;
    while !pending.is_empty() {
        let mut ran = None;
        // Where the last node tried can be waited for in a queue.
        let mut queue = Queue::No;
        // Woken by one node's holder: that node only (the others' holders are still
        // watched); else every node, in plan order.
        let order: Vec<usize> = match focus.take() {
            Some(i) => vec![i],
            None => (0..pending.len()).collect(),
        };
        for i in order {
            let node = &pending[i];
            // A lease may wait in the guard's queue: the release is settled first, so that a
            // release the server could not apply is completed before any wait.
            if node.rollout.parallel > 1 {
                if let Some(release) = releasing.take() {
                    release.await?;
                }
            }
            // The last node pending waits in its semaphore guard's queue from the start.
            let last = pending.len() == 1;
            let wait = LeaseWait {
                began: Cell::new(None),
                shown: RefCell::new(waiting.take()),
            };
            let entered = match ready.take() {
                Some(entry) => Ok(entry),
                None => enter(pass, node, &identifier, last.then_some(&wait)).await,
            };
            if let Some(since) = wait.began.take() {
                waited_since.get_or_insert(since);
            }
            waiting = wait.shown.into_inner();
            if let Some(release) = releasing.take() {
                if let Err(e) = release.await {
                    if let Ok(entry) = entered {
                        // Best effort: the error is the session's, most likely.
                        let _ = entry.give_back(&agent.client).await;
                    }
                    return Err(e.into());
                }
            }
            let entry = entered?;
            match entry {
                Entry::Busy {
                    place,
                    nodes,
                    who,
                    cross,
                } => {
                    tracing::info!("{place} is held by {who}; trying another node");
                    queue = if cross {
                        // Watched: its own queue does not order the other kind of place.
                        Queue::No
                    } else if place != node.lock {
                        Queue::Semaphore(place)
                    } else if node.rollout.parallel <= 1 {
                        Queue::Lock
                    } else {
                        // A canary's turn: taken only as `enter` decides.
                        Queue::No
                    };
                    let text = format!("{} held by {who}", node.path);
                    pending[i].lock_queue = matches!(queue, Queue::Lock);
                    pending[i].busy = Some((nodes, text));
                }
                entry => {
                    if let Some(since) = waited_since.take() {
                        let waited = since.elapsed().as_secs_f64();
                        tracing::info!("waited {waited:.1} s for node locks");
                        pass.metrics.lock_wait += waited;
                    }
                    match entry {
                        Entry::Lock { held, canary } => {
                            releasing = deploy_locked(pass, node, held, canary).await?;
                        }
                        Entry::Lease { lease, looked } => {
                            let sem = semaphore_path(node.path);
                            deploy_leased(pass, node.step, &sem, lease, looked).await?
                        }
                        Entry::Busy { .. } => {}
                    }
                    ran = Some(i);
                    break;
                }
            }
        }
        match ran {
            Some(i) => {
                pending.remove(i);
                waiting = None;
            }
            None => {
                pass.checkpoint().await?;
                waited_since.get_or_insert_with(Instant::now);
                tracing::info!("every pending node is locked by another host; waiting");
                // What every pending node waits for, as last found.
                let (mut busy, mut owner, mut holders) = (Vec::new(), Vec::new(), Vec::new());
                for (i, node) in pending.iter().enumerate() {
                    if let Some((nodes, text)) = &node.busy {
                        busy.extend(nodes.iter().cloned());
                        owner.extend(nodes.iter().map(|_| i));
                        holders.push(text.clone());
                    }
                }
                // The status says what the host waits for, and for whom (not the step it
                // last ran).
                let text = waiting_status(&holders);
                if waiting.as_ref() != Some(&text) {
                    pass.status(&text).await;
                    waiting = Some(text);
                }
                // One node left: wait in its queue, as kazoo's blocking `acquire` does (a
                // release wakes the next in line only, not every host waiting).
                match (queue, &pending[..]) {
                    (Queue::Semaphore(sem), [node]) => {
                        let record = lease_record(pass, node);
                        let got = semaphore::acquire_waiting(
                            &agent.client,
                            &sem,
                            &identifier,
                            node.rollout.parallel,
                            LOCK_RECHECK,
                            Some(node.lock),
                            Some(&record),
                        )
                        .await?;
                        ready = match got {
                            Some(lease) => {
                                match cross_busy_for_lease(&agent.client, node, &lease).await? {
                                    // The next round watches the lock's holder.
                                    Some(_) => {
                                        lease.release(&agent.client).await?;
                                        None
                                    }
                                    None => Some(lease),
                                }
                            }
                            None => None,
                        }
                        .map(|lease| Entry::Lease {
                            lease,
                            looked: None,
                        });
                    }
                    _ if pending.len() <= MAX_QUEUES && pending.iter().all(|n| n.lock_queue) => {
                        // Every pending node's lock is busy: wait in all their queues at
                        // once, and take the first whose turn comes (docs/design.md, "Exclusion":
                        // the host that has waited longest gets a freed node).
                        let sems: Vec<String> =
                            pending.iter().map(|n| semaphore_path(n.path)).collect();
                        let places: Vec<(&str, Extra<'_>)> = pending
                            .iter()
                            .zip(&sems)
                            .map(|(n, sem)| {
                                // `quick`: the host next to a holder takes the lock when
                                // the holder goes, without a list ([`LockData::Before`]).
                                let extra = Extra {
                                    read: Some(n.lock),
                                    beside: Some(sem.as_str()),
                                    baton: false,
                                    quick: true,
                                    watch_next: false,
                                };
                                (n.lock, extra)
                            })
                            .collect();
                        // Every LOCK_RECHECK the host checks the cluster (a stop, a halt or
                        // a pause ends the wait) and who holds each node (for its status),
                        // keeping its places in the queues; after QUEUE_LIMIT it leaves them
                        // and tries every node again.
                        let shown = std::sync::Mutex::new(waiting.clone());
                        let (watching, client): (&Pass<'_>, &Client) = (pass, &agent.client);
                        let nodes: Vec<(&str, &str)> =
                            pending.iter().map(|n| (n.path, n.lock)).collect();
                        let check = || async {
                            if watching.checkpoint().await.is_err() {
                                return false;
                            }
                            let text = holders_now(client, &nodes).await;
                            let changed = {
                                let mut last = shown.lock().expect("waiting status");
                                let changed = text.is_some() && *last != text;
                                if changed {
                                    last.clone_from(&text);
                                }
                                changed
                            };
                            if let (true, Some(text)) = (changed, &text) {
                                watching.status(text).await;
                            }
                            true
                        };
                        let got = acquire_queued_any_checking(
                            &agent.client,
                            &places,
                            &identifier,
                            QUEUE_LIMIT,
                            LOCK_RECHECK,
                            check,
                        )
                        .await?;
                        waiting = shown.into_inner().expect("waiting status");
                        if let Some((i, held)) = got {
                            let busy = cross_busy_for_lock(&agent.client, &pending[i], &held).await;
                            let busy = match busy {
                                Ok(busy) => busy,
                                Err(e) => {
                                    // Best effort (also the other queues' deletes): the
                                    // error is the session's, most likely.
                                    let _ = held.release(&agent.client).await;
                                    return Err(e.into());
                                }
                            };
                            match busy {
                                // The next round watches the leases.
                                Some(_) => held.release(&agent.client).await?,
                                None => {
                                    ready = Some(Entry::Lock { held, canary: None });
                                    focus = Some(i);
                                }
                            }
                        }
                    }
                    _ => {
                        let woken = wait_for_any(&agent.client, &busy, LOCK_RECHECK).await?;
                        focus = woken.and_then(|k| owner.get(k).copied());
                    }
                }
            }
        }
    }
    if let Some(release) = releasing {
        release.await?;
    }
    Ok(())
}

/// A host with one node left, waiting for a lease in [`enter_semaphore`]: when its wait
/// began (set once it said it waits), and the waiting status last written (written again
/// only when it changes, so that its age, what the monitor reports, counts from the start
/// of the wait).
struct LeaseWait {
    began: Cell<Option<Instant>>,
    shown: RefCell<Option<String>>,
}

/// Where a host may wait for a node it found busy.
enum Queue {
    /// In the node lock's queue (K = 1).
    Lock,
    /// In the queue of the semaphore's guard (K > 1).
    Semaphore(String),
    /// Watching the holders (a canary's turn, or a node held across kinds).
    No,
}

/// A deployment step under its node lock (or a lease of its semaphore).
struct NodeLocked<'p> {
    step: &'p Step,
    lock: &'p str,
    path: &'p str,
    n: u32,
    rollout: &'p Rollout,
    /// When last found busy: the nodes to watch (the holders) and who holds it.
    busy: Option<(Vec<String>, String)>,
    /// When last found busy, it was its node lock, held by a host of its own kind (K = 1, no
    /// canary, not across kinds): a host may wait in that lock's queue.
    lock_queue: bool,
}

/// Tries to enter a node: its node lock when K = 1 or while its canaries are not done,
/// else a lease of its semaphore (K > 1). Never waits for another host, but for a lease
/// when `waits` is given (the host's last node pending: see [`enter_semaphore`]).
async fn enter(
    pass: &Pass<'_>,
    node: &NodeLocked<'_>,
    identifier: &str,
    waits: Option<&LeaseWait>,
) -> Result<Entry, Interrupt> {
    let client = &pass.agent.client;
    let lock = node.lock;
    let canary = in_canary_phase(client, node.step, node.rollout).await?;
    if node.rollout.parallel <= 1 || canary {
        // The semaphore's leases are listed with the create (for the check across kinds).
        let sem = semaphore_path(node.path);
        return Ok(
            match try_lock_beside(client, lock, identifier, Some(&sem)).await? {
                TryLock::Busy { holder } => Entry::Busy {
                    // A holder not known (the queue kept changing) is not watched: the
                    // wait is then a short pause before the next try.
                    nodes: match holder.name.is_empty() {
                        true => Vec::new(),
                        false => vec![format!("{lock}/{}", holder.name)],
                    },
                    place: lock.to_string(),
                    who: holder.identifier,
                    cross: false,
                },
                TryLock::Acquired(held) if !canary => {
                    match cross_busy_for_lock(client, node, &held).await? {
                        Some(busy) => {
                            held.release(client).await?;
                            busy
                        }
                        None => Entry::Lock { held, canary: None },
                    }
                }
                TryLock::Acquired(held) if canary => {
                    // The canaries may have finished while we took the lock: then the others
                    // hold leases, and so must we.
                    if in_canary_phase(client, node.step, node.rollout).await? {
                        match cross_busy_for_lock(client, node, &held).await? {
                            Some(busy) => {
                                held.release(client).await?;
                                busy
                            }
                            None => Entry::Lock {
                                held,
                                canary: Some(canary_key(node.step)),
                            },
                        }
                    } else {
                        held.release(client).await?;
                        enter_semaphore(pass, node, identifier, None).await?
                    }
                }
                TryLock::Acquired(held) => Entry::Lock { held, canary: None },
            },
        );
    }
    enter_semaphore(pass, node, identifier, waits).await
}

/// Tries to take a lease of the node's semaphore (K = its `parallel`).
///
/// With `waits` (the host's last node pending), the host queues in the semaphore guard's
/// queue at once and waits there for a lease, up to [`LOCK_RECHECK`]: once it has waited
/// [`SAY_WAITING_AFTER`], it says so in its status (unless it already says so) and checks the
/// cluster (a halt, a stop or a new version ends the wait), and records in `waits` when the
/// wait began. A host that tried first and then queued took the guard twice: at a version
/// bump, every host but the first K took it in turn only to find every lease taken, one
/// after another.
async fn enter_semaphore(
    pass: &Pass<'_>,
    node: &NodeLocked<'_>,
    identifier: &str,
    waits: Option<&LeaseWait>,
) -> Result<Entry, Interrupt> {
    let sem = semaphore_path(node.path);
    let client = &pass.agent.client;
    let record = lease_record(pass, node);
    let look = LookAfterTake::new(client, &sem, node.lock);
    let taker = semaphore::Taker {
        path: &sem,
        identifier,
        max_leases: node.rollout.parallel,
        beside: Some(node.lock),
        record: Some(&record),
        after: look.wanted().then_some(&look as &dyn semaphore::AfterTake),
    };
    let holders = || format!("{} lease holders", node.rollout.parallel);
    let tried = match waits {
        Some(wait) => {
            let start = Instant::now();
            let on_wait = || async move {
                wait.began.set(Some(start));
                let text = waiting_status(&[format!("{} held by {}", node.path, holders())]);
                // Written only when it changed: its age counts from the start of the wait.
                let fresh = wait.shown.borrow().as_ref() != Some(&text);
                let say = async {
                    if fresh {
                        pass.status(&text).await;
                    }
                };
                let (checked, ()) = tokio::join!(pass.checkpoint(), say);
                if fresh {
                    *wait.shown.borrow_mut() = Some(text);
                }
                checked.is_ok()
            };
            let got = semaphore::acquire_waiting_with(
                client,
                &taker,
                LOCK_RECHECK,
                SAY_WAITING_AFTER,
                on_wait,
            )
            .await?;
            match got {
                Some(lease) => TryLease::Acquired(lease),
                // Waited long enough, or the cluster said to stop: the caller checks.
                None => {
                    return Ok(Entry::Busy {
                        place: sem.clone(),
                        who: holders(),
                        nodes: Vec::new(),
                        cross: false,
                    })
                }
            }
        }
        None => {
            semaphore::try_acquire(
                client,
                &sem,
                identifier,
                taker.max_leases,
                taker.beside,
                taker.record,
            )
            .await?
        }
    };
    Ok(match tried {
        TryLease::Acquired(lease) => match cross_busy_for_lease(client, node, &lease).await? {
            Some(busy) => {
                lease.release(client).await?;
                busy
            }
            None => {
                let looked = if lease.after_ran { look.take() } else { None };
                Entry::Lease { lease, looked }
            }
        },
        TryLease::Full { holders } => {
            let named: Vec<&str> = holders
                .iter()
                .map(|h| h.identifier.as_str())
                .filter(|i| !i.is_empty())
                .collect();
            Entry::Busy {
                place: sem.clone(),
                who: if named.is_empty() {
                    format!("{} lease holders", holders.len())
                } else {
                    named.join(", ")
                },
                nodes: holders.into_iter().map(|h| h.node).collect(),
                cross: false,
            }
        }
    })
}

/// The in-flight record created with a lease of the node's semaphore (its record node's
/// data), so that taking the lease and recording the step cost one transaction.
fn lease_record(pass: &Pass<'_>, node: &NodeLocked<'_>) -> Vec<u8> {
    in_flight_record(pass, node.path, node.n)
        .to_string()
        .into_bytes()
}

/// With the node lock just taken (`held`): busy if leases of the node's semaphore older than
/// our contender are still held (hosts deploying the node under a K above 1, before K became
/// 1). The older of the two kinds of place goes first, so a lock holder and a lease holder
/// never run together, and never both give way.
///
/// No request when the semaphore had no lease right after our contender was created (listed
/// in that round trip): a lease is never older than a node created before it, and a lease
/// created later finds an older lock contender (ours, or the one we queue behind) and gives
/// way.
async fn cross_busy_for_lock(
    client: &Client,
    node: &NodeLocked<'_>,
    held: &Held,
) -> Result<Option<Entry>, ZkError> {
    if held.beside.as_ref().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    let sem = semaphore_path(node.path);
    let older = older_leases(client, &sem, &held.node).await?;
    Ok((!older.is_empty()).then(|| Entry::Busy {
        place: sem,
        who: format!("{} lease holders (max-parallel changed)", older.len()),
        nodes: older,
        cross: true,
    }))
}

/// With a lease just taken: busy if the node lock is held by a contender older than our
/// lease (a host deploying the node with K = 1, before K grew, or a canary).
///
/// No request when the node lock had no contender right after our lease was created (listed
/// in that round trip): a later contender is younger than our lease and gives way to it. On
/// an error the lease is given back (with its in-flight record: no step ran).
async fn cross_busy_for_lease(
    client: &Client,
    node: &NodeLocked<'_>,
    lease: &Lease,
) -> Result<Option<Entry>, ZkError> {
    if lease.beside.as_ref().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    let holder = match older_lock_holder(client, node.lock, &lease.node).await {
        Ok(holder) => holder,
        Err(e) => {
            // Best effort: the error is the session's, most likely.
            let _ = lease.clone().release(client).await;
            return Err(e);
        }
    };
    Ok(holder.map(|holder| Entry::Busy {
        place: node.lock.to_string(),
        who: format!("{} (the node lock's holder)", holder.identifier),
        nodes: vec![format!("{}/{}", node.lock, holder.name)],
        cross: true,
    }))
}

/// The lease nodes of the semaphore `sem` created before the node `ours`.
async fn older_leases(client: &Client, sem: &str, ours: &str) -> Result<Vec<String>, ZkError> {
    let (mine, names) = tokio::join!(
        call_retrying("stat", ours, || client.check_stat(ours)),
        semaphore::leases(client, sem),
    );
    let (Some(mine), names) = (mine?, names?) else {
        return Ok(Vec::new());
    };
    let paths: Vec<String> = names.iter().map(|n| join(sem, n)).collect();
    let stats = futures::future::join_all(
        paths
            .iter()
            .map(|p| call_retrying("stat", p, || client.check_stat(p))),
    )
    .await;
    let mut older = Vec::new();
    for (path, stat) in paths.into_iter().zip(stats) {
        if stat?.is_some_and(|s| s.czxid < mine.czxid) {
            older.push(path);
        }
    }
    Ok(older)
}

/// The holder of the node lock `lock` (its first contender), if it was created before the
/// node `ours`.
async fn older_lock_holder(
    client: &Client,
    lock: &str,
    ours: &str,
) -> Result<Option<Contender>, ZkError> {
    let (mine, holder) = tokio::join!(
        call_retrying("stat", ours, || client.check_stat(ours)),
        first_contender(client, lock),
    );
    let (Some(mine), Some((holder, stat))) = (mine?, holder?) else {
        return Ok(None);
    };
    Ok((stat.czxid < mine.czxid).then_some(holder))
}

/// One deployment with its node lock held: the in-flight record around the step (and, for
/// a canary, its count in the same write that clears the record), then the release. A
/// failure halts the cluster before the lock is released. After a step that went well, the
/// release is usually sent and not yet answered: the caller awaits it ([`Releasing`]).
async fn deploy_locked<'a>(
    pass: &mut Pass<'a>,
    node: &NodeLocked<'_>,
    mut held: Held,
    canary: Option<Canary>,
) -> Result<Option<Releasing<'a>>, Interrupt> {
    let read = match (held.read.take(), held.read_before.take()) {
        (Some((data, stat)), _) => LockData::Fresh(data, stat),
        (None, Some(before)) => {
            let (data, stat) = *before;
            LockData::Before(data, stat)
        }
        (None, None) => LockData::Unknown,
    };
    // The deletes that leave the other queues are sent after the step's first requests and
    // awaited while it runs, or (after an early return) with the release.
    let (result, leave) = locked(pass, node, read, canary, &mut held.leaving).await;
    let agent = pass.agent;
    let releasing = leave_lock(&agent.client, node.lock, held, leave, &agent.host.id);
    if result.is_ok() {
        return Ok(Some(releasing));
    }
    let released = releasing.await;
    // The step's own outcome first: a failed release only hides it.
    result?;
    released.map_err(Interrupt::from)?;
    Ok(None)
}

/// What the lock node's data becomes when its holder lets go.
enum Leave {
    /// Nothing written (nothing of ours is there, or a failed halt left the record).
    AsIs,
    /// The in-flight record `record` removed (ours, or that of a dead holder we halted for),
    /// and, for a canary that succeeded, this host counted: written with the release in one
    /// transaction when the data we last wrote is known, else read, changed and written
    /// (then only if the record there is still `record`: never another holder's).
    Clear {
        known: Option<(crate::tree::Props, i32)>,
        canary: Option<Canary>,
        record: Value,
    },
}

/// What the holder of a node lock knows of the lock node's data when it starts its step.
enum LockData {
    /// Read with the list that found our contender first.
    Fresh(Vec<u8>, zookeeper_client::Stat),
    /// Read with the last list, while the contender just before ours held the lock; it went
    /// away since ([`crate::zk::lock::Extra::quick`]).
    Before(Vec<u8>, zookeeper_client::Stat),
    /// Not read.
    Unknown,
}

/// The lock node's data and version as the last holder left them, guessed from what was
/// read while it held the lock: when that read shows an in-flight record not ours, the
/// holder's one write since (if any) is the release that cleared it (a holder writes its
/// record once and clears it once; a holder that finds a dead holder's record halts and
/// clears that). So the guess is the read without the record, at the next version. Our
/// record is then written guarded by that version: when the guess is wrong (the holder died
/// and left its record, or anything else wrote), the write fails and the data is read
/// again. A canary count the last holder added with its release (deploying under another
/// plan: another version, `max-parallel` or view of a mixed fleet) is lost by a right guess:
/// its version needs one canary more, never one less.
fn guess_after_holder(
    data: &[u8],
    stat: &zookeeper_client::Stat,
    ours: impl Fn(&serde_json::Map<String, Value>) -> bool,
) -> Option<(crate::tree::Props, i32)> {
    let mut props = decode(data);
    match props.remove("in-flight") {
        Some(Value::Object(rec)) if !ours(&rec) => Some((props, stat.version + 1)),
        _ => None,
    }
}

/// What became of our in-flight record's write.
enum Written {
    /// Written: the lock node's data and version now.
    Yes((crate::tree::Props, i32)),
    /// A guess, and the data had another version: nothing written.
    Wrong,
    /// A guess, and the answer was lost: written or not (a record of ours found in the data
    /// read next is ours).
    Unknown,
}

/// Writes our in-flight record into the lock node's data `props` at `version`: with
/// [`update_props_known`], or, when `props` and `version` are a guess
/// ([`guess_after_holder`]), guarded by that version alone.
async fn write_record(
    client: &Client,
    lock: &str,
    props: &crate::tree::Props,
    version: i32,
    guess: bool,
    record: &Value,
) -> Result<Written, ZkError> {
    let insert = |p: &mut crate::tree::Props| {
        p.insert("in-flight".into(), record.clone());
    };
    if !guess {
        return update_props_known(client, lock, props, version, insert)
            .await
            .map(Written::Yes);
    }
    let mut new = props.clone();
    insert(&mut new);
    let set = client.set_data(lock, &encode(&new), Some(version));
    match call("set", lock, set).await {
        Ok(stat) => Ok(Written::Yes((new, stat.version))),
        Err(e) if matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion)) => {
            Ok(Written::Wrong)
        }
        Err(e) if e.is_connection_loss() || e.is_timeout() => Ok(Written::Unknown),
        Err(e) => Err(e),
    }
}

/// The deployment itself, with the lock held: what the release must write. The step's
/// status on the host node is answered beside the step (or before an early return).
async fn locked<'a>(
    pass: &mut Pass<'a>,
    node: &NodeLocked<'_>,
    read: LockData,
    canary: Option<Canary>,
    leaving: &mut Leaving,
) -> (Result<(), Interrupt>, Leave) {
    let mut said = None;
    let done = holding(pass, node, read, canary, leaving, &mut said).await;
    answered(said).await;
    done
}

/// Awaits a status's answer, if one is pending.
async fn answered(said: Option<StatusAnswer<'_>>) {
    if let Some(answer) = said {
        answer.await;
    }
}

/// [`locked`]'s body; `said`: the step's status written ahead, its answer not yet awaited.
async fn holding<'a>(
    pass: &mut Pass<'a>,
    node: &NodeLocked<'_>,
    read: LockData,
    canary: Option<Canary>,
    leaving: &mut Leaving,
    said: &mut Option<StatusAnswer<'a>>,
) -> (Result<(), Interrupt>, Leave) {
    let agent = pass.agent;
    let (step, lock) = (node.step, node.lock);
    let is_ours = |rec: &serde_json::Map<String, Value>| is_mine(&agent.host.id, rec);
    let record = in_flight_record(pass, node.path, node.n);
    let ours = |known| Leave::Clear {
        known,
        canary: None,
        record: record.clone(),
    };
    let label = step.status_text().unwrap_or_default();
    let sem = semaphore_path(node.path);
    let quick = matches!(read, LockData::Before(..));
    let mut read = read;
    // Whether the session may have reconnected to a server behind the holder's release.
    let mut lost = false;
    // The step's script, made ready in the round trip before it (dropped unrun, it leaves
    // no file behind but the properties snapshot).
    let mut ready = None;
    // Twice at most: again with the data read when a guess was wrong.
    let (known, checked, leased) = loop {
        // A status written ahead in the last try is answered before anything else is done.
        answered(said.take()).await;
        // The script made ready in the last try is dropped before it is made again: its
        // `.script` marker's temporary file has one name, which the new one takes (dropped
        // after, the old one would remove the new one's file).
        drop(ready.take());
        let guessed = match &read {
            LockData::Before(data, stat) => guess_after_holder(data, stat, is_ours),
            _ => None,
        };
        let guess = guessed.is_some();
        let got = match (guessed, std::mem::replace(&mut read, LockData::Unknown)) {
            (Some(guess), _) => Ok(guess),
            (None, LockData::Fresh(data, stat)) => Ok((decode(&data), stat.version)),
            // A round trip before the step's: the deletes that leave the other queues go
            // now (one of those nodes may be ours already, for nothing).
            (None, _) => {
                leaving.send();
                if quick {
                    read_after_quick_take(&agent.client, lock, lost).await
                } else {
                    call_retrying("get", lock, || agent.client.get_data(lock))
                        .await
                        .map(|(data, stat)| (decode(&data), stat.version))
                }
            }
        };
        let (lock_props, version) = match got {
            Ok(got) => got,
            Err(e) => return (Err(e.into()), Leave::AsIs),
        };
        if let Some(Value::Object(rec)) = lock_props.get("in-flight") {
            if !is_ours(rec) {
                leaving.send();
                let message = died_in_flight(rec, lock);
                let dead = Leave::Clear {
                    known: None,
                    canary: None,
                    record: Value::Object(rec.clone()),
                };
                return match halt_for_dead_holder(pass, message).await {
                    Ok(interrupt) => (Err(interrupt), dead),
                    Err(e) => (Err(e.into()), Leave::AsIs),
                };
            }
        }
        // The checkpoint, our in-flight record (version-guarded) and the status on the host
        // node in one round trip; the hand-off between hosts is made of these. A checkpoint
        // that abandons the pass clears the record again. The checkpoint comes with whether
        // the node's semaphore keeps records (of lease holders that may have died before K
        // became 1), in one multi-read sent first. The status's write comes after them and
        // is not waited for (its answer comes while the step starts): the server answers a
        // session's writes in order. The deletes that leave other queues go last, their
        // answers awaited while the step runs (sent before the record, their commits would
        // come before its answer). The status file is written and the step's script made
        // ready meanwhile, once the requests have left (the client's connection task sends
        // them when this task yields).
        let ((checked, leased), written, answer, (), made) = tokio::join!(
            look_before_locked_step(pass, &sem, lock),
            write_record(&agent.client, lock, &lock_props, version, guess, &record),
            pass.status_ahead(&label),
            async { leaving.send() },
            async {
                tokio::task::yield_now().await;
                step.ready(pass)
            },
        );
        *said = Some(answer);
        ready = made;
        match written {
            Ok(Written::Yes(known)) => break (known, checked, leased),
            // The guess was wrong: read the data.
            Ok(Written::Wrong) => continue,
            // Not known: read the data, from a server synced first.
            Ok(Written::Unknown) => {
                lost = true;
                continue;
            }
            // Without our record known to be written after a guess, the data may hold the
            // record of a holder that died: it stays, for the next holder to report.
            Err(e) if guess => return (Err(e.into()), Leave::AsIs),
            Err(e) => return (Err(e.into()), ours(None)),
        }
    };
    // Unless the step starts now, the status's answer is awaited first: the host node's
    // next write (by whatever comes next) would wait for it. (The other queues' deletes are
    // then awaited by the release.)
    if checked.is_err() || !matches!(leased, Ok(false)) {
        answered(said.take()).await;
    }
    if let Err(interrupt) = checked {
        return (Err(interrupt), ours(Some(known)));
    }
    let dead = match leased {
        Ok(false) => Ok(None),
        Ok(true) => dead_lease_holder(pass, &sem, None).await,
        Err(e) => Err(e),
    };
    match dead {
        Ok(None) => {}
        Ok(Some(message)) => {
            // Our own record goes with the release, halted or not.
            return match halt_for_dead_holder(pass, message).await {
                Ok(interrupt) => (Err(interrupt), ours(Some(known))),
                Err(e) => (Err(e.into()), ours(Some(known))),
            };
        }
        Err(e) => return (Err(e.into()), ours(Some(known))),
    }
    let ((), ran, left) = tokio::join!(
        answered(said.take()),
        execute_ready_halting(pass, step, ready),
        std::mem::take(leaving).finish_keeping(&agent.client),
    );
    // Contenders not known to be gone are left again by the release.
    let left = left.map_err(|(e, kept)| {
        tracing::warn!("cannot leave the other node locks' queues: {e}");
        *leaving = kept;
        e
    });
    let result = match ran {
        Ok(result) => result,
        // The halt could not be recorded: the record stays for the next holder to report.
        Err(e) => return (Err(e.into()), Leave::AsIs),
    };
    // A canary counts once its step (health check included) went well.
    let canary = canary.filter(|_| result.is_ok());
    (
        // The step's own outcome first: a queue not left only fails the pass after it.
        result
            .map_err(halted)
            .and_then(|()| left.map_err(Into::into)),
        Leave::Clear {
            known: Some(known),
            canary,
            record,
        },
    )
}

/// The lock node's data and version, read after a quick take ([`LockData::Before`]): from
/// the server that told us the holder went (it has applied the holder's release), or, after
/// a connection loss (`lost`, or on this read), from a server synced first: this session has
/// seen no answer since its last list, so a server it reconnects to may not have applied the
/// release yet.
async fn read_after_quick_take(
    client: &Client,
    lock: &str,
    lost: bool,
) -> Result<(crate::tree::Props, i32), ZkError> {
    if !lost {
        match call("get", lock, client.get_data(lock)).await {
            Ok((data, stat)) => return Ok((decode(&data), stat.version)),
            Err(e) if e.is_connection_loss() || e.is_timeout() => {}
            Err(e) => return Err(e),
        }
    }
    call_retrying("sync", lock, || client.sync(lock)).await?;
    let (data, stat) = call_retrying("get", lock, || client.get_data(lock)).await?;
    Ok((decode(&data), stat.version))
}

/// Lets the lock go, writing what `leave` says into the lock node first. When the data we
/// last wrote is known, the write and the release go out at once, in one transaction, before
/// this returns; the future answers it (completing the release when the transaction could
/// not be applied).
fn leave_lock<'a>(
    client: &'a Client,
    lock: &str,
    held: Held,
    leave: Leave,
    host_id: &'a str,
) -> Releasing<'a> {
    let lock = lock.to_string();
    let Leave::Clear {
        known,
        canary,
        record,
    } = leave
    else {
        return Box::pin(async move { held.release(client).await });
    };
    let sent = known.map(|(mut props, version)| {
        clear_record(&mut props, canary.as_ref(), host_id);
        send_write_and_delete(client, &lock, &encode(&props), version, &held.node)
    });
    Box::pin(async move {
        if let Some(answer) = sent {
            if answer?.await? {
                return held.leaving.finish(client).await;
            }
        }
        finish_release(client, &lock, held, &record, canary.as_ref(), host_id).await
    })
}

/// Removes our in-flight record from the lock node's data `p` (and, for a canary that
/// succeeded, counts this host).
fn clear_record(p: &mut crate::tree::Props, canary: Option<&Canary>, host_id: &str) {
    p.remove("in-flight");
    if let Some(canary) = canary {
        add_canary(p, canary, host_id);
    }
}

/// The release when the lock node's data changed since we last wrote it (or is not known):
/// read, clear our record, write, then delete our contender.
async fn finish_release(
    client: &Client,
    lock: &str,
    held: Held,
    record: &Value,
    canary: Option<&Canary>,
    host_id: &str,
) -> Result<(), ZkError> {
    update_props(client, lock, |p| {
        if p.get("in-flight") == Some(record) {
            clear_record(p, canary, host_id);
        }
    })
    .await?;
    held.release(client).await
}

/// The waiting status for the nodes `(path, lock)` from their locks' holders now (the first
/// contender of each), `None` when none is held.
async fn holders_now(client: &Client, nodes: &[(&str, &str)]) -> Option<String> {
    let firsts =
        futures::future::join_all(nodes.iter().map(|(_, lock)| first_contender(client, lock)))
            .await;
    let holders: Vec<String> = nodes
        .iter()
        .zip(firsts)
        .filter_map(|((path, _), first)| match first {
            Ok(Some((holder, _))) => Some(format!("{path} held by {}", holder.identifier)),
            _ => None,
        })
        .collect();
    (!holders.is_empty()).then(|| waiting_status(&holders))
}

/// The status of a host waiting for node locks: the first few nodes and their holders.
fn waiting_status(holders: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = format!(
        "waiting for node locks: {}",
        holders[..holders.len().min(SHOWN)].join(", ")
    );
    if holders.len() > SHOWN {
        text.push_str(&format!(" and {} more", holders.len() - SHOWN));
    }
    text
}
