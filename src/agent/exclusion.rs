//! The place a deployment runs in (docs/design.md, "Exclusion"): how a host enters an
//! application node, holds it while the step runs, and lets it go.
//!
//! - K = 1 (`max-parallel` unset or 1, or a mixed fleet): the node lock `/agent-locks/<name>`
//!   (kazoo's Lock, [`crate::zk::recipe::lock`]), as the original.
//! - K > 1: a lease of the semaphore `/agent-semaphores/<name>` (kazoo's Semaphore,
//!   [`crate::zk::recipe::semaphore`]) with max_leases = K.
//! - `canary = C` (with K > 1): while fewer than C hosts have deployed the node's package
//!   version, hosts deploy it one at a time under the node lock. The count lives in the node
//!   lock's data, `{"canary": {"path", "version": "<rpm> <version>", "hosts": [ids]}}`
//!   ([`super::rollout_rule`]); a canary adds itself with its release, after its step (health
//!   check included) went well. A host that takes the lock and finds the canaries done lets
//!   it go and takes a lease. Only as many hosts queue in the node lock as canaries are still
//!   needed; the others wait outside it ([`super::canary`]).
//! - In-flight records and dead holders: [`super::in_flight`].
//! - The two kinds of place after a change of K (hosts of the old plan under one kind, of the
//!   new under the other): a lock holder announces itself with its in-flight record (one
//!   write), a lease holder with its lease (one create), and each looks for the other kind
//!   after its own announcement. The older announcement (by zxid) goes first, the younger
//!   gives way and waits; so the two never run together and never both give way. A lock
//!   holder that writes no record (one passing through after the canaries) is in nobody's way.

use serde_json::Value;
use tokio::time::Instant;

use super::canary::{look, wait_outside, Phase};
use super::error::Interrupt;
use super::in_flight::{
    self, clear_lock_record, dead_holder_found, dead_lease_holder, dead_lock_holder, halting,
    is_mine, lock_record, Dead, IN_FLIGHT,
};
use super::pass::Pass;
use super::plan::{Rollout, Step};
use super::rollout_rule::{add_canary, canary_count, canary_key, Canary};
use crate::tree::Props;
use crate::zk::paths::semaphore_path;
use crate::zk::recipe::lock::{first_contender, Lock, LockGuard};
use crate::zk::recipe::semaphore::{LeaseGuard, Semaphore};
use crate::zk::recipe::{wait_for_any, Attempt};
use crate::zk::{call, call_retrying, decode, encode, join, list_or_empty, Client, ZkError};

/// A deployment step that runs under its node's place.
pub(crate) struct Node<'p> {
    pub(crate) step: &'p Step,
    pub(crate) path: &'p str,
    pub(crate) lock: &'p str,
    pub(crate) n: u32,
    pub(crate) rollout: &'p Rollout,
}

impl Node<'_> {
    fn semaphore(&self) -> String {
        semaphore_path(self.path)
    }

    fn leased(&self) -> bool {
        self.rollout.parallel > 1
    }
}

/// A place held, ready for the step.
pub(crate) enum Held {
    /// The node lock, with the lock node's data and version as we wrote them (our record in
    /// it), and, for a canary, its count key.
    Lock {
        guard: LockGuard,
        known: (Props, i32),
        record: Value,
        canary: Option<Canary>,
    },
    /// A lease of the node's semaphore (our record node made with it).
    Lease(LeaseGuard),
}

impl Held {
    /// Whether this host deploys the node as one of its canaries.
    pub(crate) fn is_canary(&self) -> bool {
        matches!(
            self,
            Held::Lock {
                canary: Some(_),
                ..
            }
        )
    }

    /// The place, not counted as a canary (its step did not run, or failed).
    fn failed(self) -> Held {
        match self {
            Held::Lock {
                guard,
                known,
                record,
                ..
            } => Held::Lock {
                guard,
                known,
                record,
                canary: None,
            },
            lease => lease,
        }
    }
}

/// How a busy node is waited for.
#[derive(Debug, Clone)]
pub(crate) enum Queue {
    /// In the node lock's queue.
    Lock,
    /// In the semaphore's queue.
    Semaphore,
    /// Watching these nodes: holders of the node's other kind of place.
    Watch(Vec<String>),
    /// Outside the node lock, watching its data until the canaries are done or another one
    /// is needed.
    Canary,
}

/// What entering a node gave.
pub(crate) enum Entry {
    /// The place.
    Held(Held),
    /// Busy: who holds it, and how to wait.
    Busy { who: String, queue: Queue },
}

/// The identifier a host's contenders and leases hold: `<name> (<id>)`.
fn identifier(pass: &Pass<'_>) -> String {
    let host = &pass.agent.host;
    format!("{} ({})", host.name, host.id)
}

/// Tries to enter `node` without waiting for another host.
pub(crate) async fn try_enter(pass: &Pass<'_>, node: &Node<'_>) -> Result<Entry, Interrupt> {
    let client = &pass.agent.client;
    let id = identifier(pass);
    if node.leased() {
        match look(
            client,
            node.lock,
            &canary_key(node.step),
            node.rollout.canary,
        )
        .await?
        {
            Phase::Over => return try_enter_leased(pass, node).await,
            Phase::Wait { done, queued } => return Ok(waiting_for_canaries(node, done, queued)),
            Phase::Join => {}
        }
    }
    match Lock::new(client, node.lock, &id).try_acquire().await? {
        Attempt::Acquired(guard) => settle_lock(pass, node, guard).await,
        Attempt::Busy(holder) => Ok(Entry::Busy {
            who: holder.map_or_else(|| "another host".into(), |h| h.identifier),
            queue: Queue::Lock,
        }),
    }
}

/// Busy: `node`'s canaries are not done, and enough hosts queue for them.
fn waiting_for_canaries(node: &Node<'_>, done: usize, queued: usize) -> Entry {
    let need = node.rollout.canary;
    Entry::Busy {
        who: format!("its canaries ({done} of {need} done, {queued} in the node lock's queue)"),
        queue: Queue::Canary,
    }
}

/// Waits for `node` as `queue` says, at most until `deadline`, unless `cancel` resolves
/// first: the entry, or `None` (then the caller looks at the cluster and tries again).
pub(crate) async fn wait_enter(
    pass: &Pass<'_>,
    node: &Node<'_>,
    queue: &Queue,
    deadline: Instant,
    cancel: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Result<Option<Entry>, Interrupt> {
    let client = &pass.agent.client;
    let id = identifier(pass);
    match queue {
        Queue::Lock => match Lock::new(client, node.lock, &id)
            .acquire(deadline, cancel)
            .await?
        {
            Some(guard) => Ok(Some(settle_lock(pass, node, guard).await?)),
            None => Ok(None),
        },
        Queue::Semaphore => {
            let (sem, record) = (node.semaphore(), lease_record(pass, node));
            let semaphore = Semaphore::new(client, &sem, &id, node.rollout.parallel);
            match semaphore.acquire(Some(&record), deadline, cancel).await? {
                Some(lease) => Ok(Some(settle_lease(pass, node, lease).await?)),
                None => Ok(None),
            }
        }
        Queue::Watch(nodes) => {
            wait_for_any(client, nodes, deadline, cancel).await?;
            Ok(None)
        }
        Queue::Canary => {
            let (key, need) = (canary_key(node.step), node.rollout.canary);
            let host = &pass.agent.host.id;
            wait_outside(client, node.lock, &key, need, host, deadline, cancel).await?;
            Ok(None)
        }
    }
}

/// The node lock's data and stat (`None` while the lock node does not exist).
async fn read_lock_node(
    client: &Client,
    lock: &str,
) -> Result<Option<(Props, zookeeper_client::Stat)>, ZkError> {
    match call_retrying("get", lock, || client.get_data(lock)).await {
        Ok((data, stat)) => Ok(Some((decode(&data), stat))),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

fn canaries_done(props: &Props, node: &Node<'_>) -> bool {
    canary_count(props, &canary_key(node.step)) >= node.rollout.canary as usize
}

/// Records of holders that died counted (or halting) in one look at a place; more than this
/// many is not counted but halts the cluster, the safe fallback.
const DEAD_LOOKS: usize = 8;

/// With the node lock just taken: the lock node's data looked at (a dead holder's record is
/// counted or halts; canaries done send the host to the semaphore), our record written, and
/// no lease holder of the node older than it (else the lock is given back).
async fn settle_lock(
    pass: &Pass<'_>,
    node: &Node<'_>,
    guard: LockGuard,
) -> Result<Entry, Interrupt> {
    let client = &pass.agent.client;
    let (props, stat) = match clear_dead(pass, node).await {
        Ok(read) => read,
        Err(interrupt) => {
            let _ = guard.release(client).await;
            return Err(interrupt);
        }
    };
    let sem = node.semaphore();
    let canary = match node.leased() {
        false => None,
        true if canaries_done(&props, node) => {
            guard.release(client).await?;
            return try_enter_leased(pass, node).await;
        }
        true => Some(canary_key(node.step)),
    };
    let record = in_flight::record(pass, node.path, node.n);
    let written = write_record(client, node.lock, props, stat.version, &record).await;
    let (known, mzxid) = match written {
        Ok(written) => written,
        Err(e) => return Err(give_back_lock(client, guard, e).await),
    };
    let held = Held::Lock {
        guard,
        known,
        record,
        canary,
    };
    match older_leases(client, &sem, mzxid).await {
        Ok(older) if older.is_empty() => Ok(Entry::Held(held)),
        Ok(older) => {
            release(client, held, Release::Undone, &pass.agent.host.id).await?;
            Ok(Entry::Busy {
                who: format!("{} lease holders (max-parallel changed)", older.len()),
                queue: Queue::Watch(older),
            })
        }
        Err(e) => {
            let _ = release(client, held, Release::Undone, &pass.agent.host.id).await;
            Err(e.into())
        }
    }
}

/// With the node lock held: its data and stat once no record of a holder that died is left
/// in it or in the node's semaphore. Each one found is counted in the node's budget or halts
/// the cluster ([`dead_holder_found`], whose interrupt is the error), and is cleared.
async fn clear_dead(
    pass: &Pass<'_>,
    node: &Node<'_>,
) -> Result<(Props, zookeeper_client::Stat), Interrupt> {
    let client = &pass.agent.client;
    for _ in 0..DEAD_LOOKS {
        let (data, stat) = call_retrying("get", node.lock, || client.get_data(node.lock)).await?;
        let props = decode(&data);
        if let Some(rec) = lock_record(&props).filter(|r| !is_mine(&pass.agent.host.id, r)) {
            let canary = node.leased() && !canaries_done(&props, node);
            let gone = Value::Object(rec.clone());
            let dead = Dead::under_lock(rec, node.lock);
            let found = dead_holder_found(pass, node.path, node.rollout, dead, canary).await;
            clear_lock_record(client, node.lock, &gone, |_| {}).await?;
            found?;
            continue;
        }
        match dead_lease_holder(pass, &node.semaphore(), None).await? {
            Some(dead) => dead_holder_found(pass, node.path, node.rollout, dead, false).await?,
            None => return Ok((props, stat)),
        }
    }
    Err(too_many_dead(pass, node).await)
}

/// The cluster halt for more than [`DEAD_LOOKS`] dead holders found at once in a place.
async fn too_many_dead(pass: &Pass<'_>, node: &Node<'_>) -> Interrupt {
    let message = format!(
        "more than {DEAD_LOOKS} holders of {} died deploying it (in-flight records left in {} and {})",
        node.path,
        node.lock,
        node.semaphore()
    );
    halting(pass, message).await
}

/// [`try_enter`] for a node with K > 1 whose canaries are done: a lease.
async fn try_enter_leased(pass: &Pass<'_>, node: &Node<'_>) -> Result<Entry, Interrupt> {
    let client = &pass.agent.client;
    let (sem, record) = (node.semaphore(), lease_record(pass, node));
    let id = identifier(pass);
    let semaphore = Semaphore::new(client, &sem, &id, node.rollout.parallel);
    match semaphore.try_acquire(Some(&record)).await? {
        Attempt::Acquired(lease) => settle_lease(pass, node, lease).await,
        Attempt::Busy(_) => Ok(Entry::Busy {
            who: format!("{} lease holders", node.rollout.parallel),
            queue: Queue::Semaphore,
        }),
    }
}

/// Gives the lock back after `e` (best effort: the error is the session's, most likely).
async fn give_back_lock(client: &Client, guard: LockGuard, e: ZkError) -> Interrupt {
    let _ = guard.release(client).await;
    e.into()
}

/// Writes our in-flight record into the lock node's data `props` (read at `version`): the
/// data and version written, and the zxid of the write. A write that lost its answer, or met
/// another version, reads the data again (from a server synced first): our record found
/// there is ours.
async fn write_record(
    client: &Client,
    lock: &str,
    mut props: Props,
    mut version: i32,
    record: &Value,
) -> Result<((Props, i32), i64), ZkError> {
    for _ in 0..crate::zk::LOSS_RETRIES {
        if props.get(IN_FLIGHT) == Some(record) {
            let stat = call_retrying("stat", lock, || client.check_stat(lock)).await?;
            if let Some(stat) = stat.filter(|s| s.version == version) {
                return Ok(((props, version), stat.mzxid));
            }
        }
        let mut new = props.clone();
        new.insert(IN_FLIGHT.into(), record.clone());
        match call(
            "set",
            lock,
            client.set_data(lock, &encode(&new), Some(version)),
        )
        .await
        {
            Ok(stat) => return Ok(((new, stat.version), stat.mzxid)),
            Err(e) if e.is_connection_loss() || e.is_timeout() || bad_version(&e) => {}
            Err(e) => return Err(e),
        }
        call_retrying("sync", lock, || client.sync(lock)).await?;
        let (data, stat) = call_retrying("get", lock, || client.get_data(lock)).await?;
        (props, version) = (decode(&data), stat.version);
    }
    Err(ZkError::Op {
        op: "write",
        path: lock.to_string(),
        source: zookeeper_client::Error::BadVersion,
    })
}

fn bad_version(e: &ZkError) -> bool {
    matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion))
}

/// The lease nodes of the semaphore `sem` created before the zxid `zxid`.
async fn older_leases(client: &Client, sem: &str, zxid: i64) -> Result<Vec<String>, ZkError> {
    let mut older = Vec::new();
    for name in list_or_empty(client, sem).await? {
        let path = join(sem, &name);
        let stat = call_retrying("stat", &path, || client.check_stat(&path)).await?;
        if stat.is_some_and(|s| s.czxid < zxid) {
            older.push(path);
        }
    }
    Ok(older)
}

/// With a lease just taken: no dead holder's record in the semaphore or the node lock (each
/// one found is counted in the node's budget or halts the cluster), and no node-lock holder
/// whose record is older than our lease (else the lease is given back).
async fn settle_lease(
    pass: &Pass<'_>,
    node: &Node<'_>,
    lease: LeaseGuard,
) -> Result<Entry, Interrupt> {
    let client = &pass.agent.client;
    for _ in 0..DEAD_LOOKS {
        let found = match look_after_lease(pass, node, &lease).await {
            Ok(None) => return Ok(Entry::Held(Held::Lease(lease))),
            Ok(Some(Err((dead, canary)))) => {
                dead_holder_found(pass, node.path, node.rollout, dead, canary).await
            }
            Ok(Some(Ok(busy))) => {
                lease.release(client).await?;
                return Ok(busy);
            }
            Err(e) => Err(e.into()),
        };
        if let Err(interrupt) = found {
            let _ = lease.release(client).await;
            return Err(interrupt);
        }
    }
    let interrupt = too_many_dead(pass, node).await;
    let _ = lease.release(client).await;
    Err(interrupt)
}

/// What a new lease holder finds: nothing in its way, a dead holder (its record cleared, and
/// whether it was a canary), or an older node-lock holder to wait for (`Ok(Busy)`).
async fn look_after_lease(
    pass: &Pass<'_>,
    node: &Node<'_>,
    lease: &LeaseGuard,
) -> Result<Option<Result<Entry, (Dead, bool)>>, ZkError> {
    let client = &pass.agent.client;
    if let Some(dead) = dead_lease_holder(pass, &node.semaphore(), Some(lease.name())).await? {
        return Ok(Some(Err((dead, false))));
    }
    let Some((props, stat)) = read_lock_node(client, node.lock).await? else {
        return Ok(None);
    };
    let Some(rec) = lock_record(&props) else {
        return Ok(None);
    };
    let ours = call_retrying("stat", lease.node(), || client.check_stat(lease.node())).await?;
    if ours.is_some_and(|s| s.czxid < stat.mzxid) {
        return Ok(None);
    }
    let Some(holder) = first_contender(client, node.lock).await? else {
        let canary = !canaries_done(&props, node);
        let dead = dead_lock_holder(pass, node.lock, rec).await?;
        return Ok(dead.map(|dead| Err((dead, canary))));
    };
    Ok(Some(Ok(Entry::Busy {
        who: format!("{} (the node lock's holder)", holder.identifier),
        queue: Queue::Watch(vec![node.lock.to_string(), join(node.lock, &holder.name)]),
    })))
}

/// The in-flight record created with a lease (its record node's data).
fn lease_record(pass: &Pass<'_>, node: &Node<'_>) -> Vec<u8> {
    in_flight::record(pass, node.path, node.n)
        .to_string()
        .into_bytes()
}

/// How a place is let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Its step went well: a canary counts.
    Done,
    /// Its step did not run, or failed: our record is cleared, nothing counted.
    Undone,
    /// Our record stays (a failure whose halt could not be recorded: the next holder
    /// reports it).
    KeepRecord,
}

/// Lets the place go, as `how` says. A lock holder's record is cleared (and a canary that
/// went well counted) in the transaction that deletes its contender when the data is as we
/// wrote it, else read, changed and written first.
pub(crate) async fn release(
    client: &Client,
    held: Held,
    how: Release,
    host_id: &str,
) -> Result<(), ZkError> {
    let keep_record = how == Release::KeepRecord;
    let held = match how {
        Release::Done => held,
        _ => held.failed(),
    };
    match held {
        Held::Lease(lease) if keep_record => lease.release_keeping_record(client).await,
        Held::Lease(lease) => lease.release(client).await,
        Held::Lock { guard, .. } if keep_record => guard.release(client).await,
        Held::Lock {
            guard,
            known: (mut props, version),
            record,
            canary,
        } => {
            let lock = guard.path().to_string();
            let count = |p: &mut Props| {
                if let Some(canary) = &canary {
                    add_canary(p, canary, host_id);
                }
            };
            props.remove(IN_FLIGHT);
            count(&mut props);
            match guard
                .release_writing(client, &encode(&props), version)
                .await?
            {
                Ok(()) => Ok(()),
                Err(guard) => {
                    clear_lock_record(client, &lock, &record, count).await?;
                    guard.release(client).await
                }
            }
        }
    }
}
