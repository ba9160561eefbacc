//! Rolling deploys in a pass (docs/design.md, "Exclusion"): what each application node's rollout
//! properties mean on this fleet now ([`RolloutPlan`]), and the exclusion a deployment runs
//! under.
//!
//! - K = 1 (`max-parallel` unset or 1, or a mixed fleet): the node lock `/agent-locks/<name>`
//!   of section 4, unchanged.
//! - K > 1: a lease of the kazoo-compatible semaphore `/agent-semaphores/<name>`
//!   ([`crate::zk::semaphore`]) with max_leases = K. Each lease's in-flight record is a node
//!   of its own, `/agent-semaphores/<name>-__in-flight__/<lease>`, created in the transaction
//!   that creates the lease and deleted in the one that deletes it; a host that takes a lease
//!   and finds a record whose lease is gone (its writer died mid-step) halts the cluster
//!   naming it. A live holder's record never outlives its lease, so "record present after
//!   its lease was seen gone" proves the writer died. (Earlier agents kept the records in
//!   the data of the guard lock node `/agent-semaphores/<name>-__lock__`, as
//!   `{"in-flight": {<lease>: record}}`: they are read there too, with the same rule.)
//! - `canary = C` (with K > 1): while fewer than C hosts have deployed the node's package
//!   version (health check included), hosts deploy it one at a time under the node lock; the
//!   count lives in the node lock's data, `{"canary": {"path": P, "version": "<rpm> <version>",
//!   "hosts": [ids]}}`, and a canary adds itself (in the same write that clears its in-flight
//!   record) only after its step succeeded, still holding the lock. A failing canary halts
//!   the cluster, so no other host starts that version; the next version starts a new count.
//! - Mixed fleets: while any registered host node lacks `agent` (the original's agent, which
//!   knows only the node locks), every node uses the node lock with K = 1 (the check, O(1)
//!   whatever the fleet's size: [`super::mixed`]).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use zookeeper_client::MultiReadResult;

use super::cluster::{effective_version, halt};
use super::discover::Discovered;
use super::error::{Failure, Interrupt, StepError};
use super::pass::Pass;
use super::plan::{Rollout, Step};
use super::steps::ReadyScript;
use crate::files::now;
use crate::tree::literal::py_str;
use crate::tree::rollout::{self as settings, Rollout as Settings};
use crate::tree::Props;
use crate::zk::halts::HALTS;
use crate::zk::multiread::{self, Want};
use crate::zk::paths::node_lock_path as lock_path;
use crate::zk::paths::HOSTS;
use crate::zk::semaphore::{self, Lease};
use crate::zk::update::update_props;
use crate::zk::{call_retrying, decode, join, list_or_empty, Client, ZkError};

pub use super::mixed::{mixed_fleet, mixed_fleet_and_stats, mixed_reason, MixedCache};
pub use crate::zk::paths::AGENT_PROPERTY;

/// The rollout of every application node of a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolloutPlan {
    /// By application node path.
    pub nodes: BTreeMap<String, Rollout>,
    /// Why every node falls back to the node lock with K = 1, if it does.
    pub mixed: Option<String>,
}

/// The rollout settings of a node as discovered (its properties with links followed).
pub fn node_settings(found: &Discovered, path: &str) -> Settings {
    let props = found.properties.get(path);
    settings::parse(path, |k| props.and_then(|p| p.get(k)).cloned()).unwrap_or_default()
}

/// What the rollout of a pass's deployments depends on beyond the tree: read from ZooKeeper
/// by the agent ([`read_fleet_facts`]), or taken from what `zkdeployment plan` read
/// (`crate::fleet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetFacts {
    /// Why the fleet is mixed, if it is (it matters only when a node wants K > 1).
    pub mixed: Option<String>,
    /// The number of deploy targets (children of `<node>/deploy`) of application nodes whose
    /// `max-parallel` is a percentage; a node not here counts 0.
    pub targets: BTreeMap<String, usize>,
}

/// The application nodes among `steps`' deployments, each with its package and its rollout
/// settings as discovered (a bad value reads as the defaults: discovery reported it).
pub fn wanted_rollouts<'a>(
    found: &Discovered,
    steps: &'a [Step],
) -> BTreeMap<&'a str, (&'a str, Settings)> {
    let mut wanted = BTreeMap::new();
    for step in steps {
        if let Step::Deploy { path, rpm, .. } = step {
            wanted.insert(path.as_str(), (rpm.as_str(), node_settings(found, path)));
        }
    }
    wanted
}

/// True if a node of `wanted` asks for K > 1: only then does the mixed-fleet rule matter
/// (and the agent reads the host nodes).
pub fn wants_parallel(wanted: &BTreeMap<&str, (&str, Settings)>) -> bool {
    wanted
        .values()
        .any(|(_, r)| r.max_parallel != settings::Parallel::Count(1))
}

/// The nodes of `wanted` whose `max-parallel` is a percentage (of their deploy targets).
pub fn percent_nodes<'a>(wanted: &BTreeMap<&'a str, (&'a str, Settings)>) -> Vec<&'a str> {
    wanted
        .iter()
        .filter(|(_, (_, r))| r.max_parallel.is_percent())
        .map(|(path, _)| *path)
        .collect()
}

/// The rollout of every application node among `steps`' deployments, pure: from the
/// discovered settings, what is known of the fleet (`facts`), and `health` (whether a package
/// has a health check). The mixed-fleet note is kept only when a node wants K > 1.
pub fn plan_rollouts(
    found: &Discovered,
    steps: &[Step],
    facts: &FleetFacts,
    mut health: impl FnMut(&str) -> bool,
) -> RolloutPlan {
    let wanted = wanted_rollouts(found, steps);
    let mut plan = RolloutPlan {
        mixed: facts.mixed.clone().filter(|_| wants_parallel(&wanted)),
        ..RolloutPlan::default()
    };
    for (path, (rpm, r)) in wanted {
        let parallel = if plan.mixed.is_some() {
            1
        } else {
            r.max_parallel
                .effective(facts.targets.get(path).copied().unwrap_or(0))
        };
        plan.nodes.insert(
            path.to_string(),
            Rollout {
                parallel,
                canary: r.canary,
                health: health(rpm),
                health_deadline_ms: (r.health_deadline * 1000.0) as u64,
            },
        );
    }
    plan
}

/// Reads what [`plan_rollouts`] needs of the fleet for the application nodes at `paths`
/// (a pass's discovered deployments, before it knows which it will run): whether the fleet
/// is mixed (only when one of them wants K > 1) and the deploy targets of those whose
/// `max-parallel` is a percentage, in one round trip. Sent before the yum queries, answered
/// while they run.
pub async fn read_fleet_facts(
    client: &Client,
    mixed_cache: &MixedCache,
    found: &Discovered,
    paths: &[&str],
) -> Result<FleetFacts, ZkError> {
    let wanted: BTreeMap<&str, (&str, Settings)> = paths
        .iter()
        .map(|path| (*path, ("", node_settings(found, path))))
        .collect();
    // A node whose max-parallel is a percentage wants K > 1: its deploy node's stat is read
    // with the mixed-fleet check (one multi-read). The targets are the stat's `numChildren`,
    // not a list of them: a few bytes whatever the fleet's size (a list of 10,000 host names
    // would be about 100 KB, for every host, on every pass).
    let percent = percent_nodes(&wanted);
    if !wants_parallel(&wanted) {
        return Ok(FleetFacts::default());
    }
    let deploy_nodes: Vec<String> = percent.iter().map(|path| join(path, "deploy")).collect();
    let (mixed, stats) = mixed_fleet_and_stats(client, mixed_cache, &deploy_nodes).await?;
    let mut facts = FleetFacts {
        mixed,
        ..FleetFacts::default()
    };
    for (path, stat) in percent.into_iter().zip(stats) {
        let count = stat.map_or(0, |s| usize::try_from(s.num_children).unwrap_or(0));
        facts.targets.insert(path.to_string(), count);
    }
    Ok(facts)
}

/// The canary record a deployment counts in: its node's path and its version key (package
/// and version). Two nodes whose lock names collide (`/a/b`, `/a,b`) share a lock node, so
/// the record names the path; a record without one (written by an agent that did not name
/// it) is taken as this node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Canary {
    /// The application node's path.
    pub(crate) path: String,
    /// `<rpm> <version>`.
    pub(crate) key: String,
}

impl Canary {
    /// True if the node lock's canary record `c` is this deployment's.
    fn matches(&self, c: &serde_json::Map<String, Value>) -> bool {
        c.get("version").and_then(Value::as_str) == Some(self.key.as_str())
            && c.get("path")
                .is_none_or(|p| p.as_str() == Some(self.path.as_str()))
    }
}

/// The canary count of a deployment, from the node lock's data.
fn canary_count(lock_props: &crate::tree::Props, canary: &Canary) -> usize {
    match lock_props.get("canary") {
        Some(Value::Object(c)) if canary.matches(c) => {
            c.get("hosts").and_then(Value::as_array).map_or(0, Vec::len)
        }
        _ => 0,
    }
}

/// The canary record of a deployment: its node's path, its package and version.
pub(crate) fn canary_key(step: &Step) -> Canary {
    match step {
        Step::Deploy {
            rpm, version, path, ..
        } => Canary {
            path: path.clone(),
            key: format!("{rpm} {}", version.as_deref().unwrap_or("*")),
        },
        _ => Canary {
            path: String::new(),
            key: String::new(),
        },
    }
}

/// Reads the node lock's data (`{}` if it does not exist yet).
async fn lock_data(client: &Client, lock: &str) -> Result<crate::tree::Props, ZkError> {
    match call_retrying("get", lock, || client.get_data(lock)).await {
        Ok((data, _)) => Ok(decode(&data)),
        Err(e) if e.is_no_node() => Ok(Default::default()),
        Err(e) => Err(e),
    }
}

/// True while the canaries of `step`'s version are not all done.
pub async fn in_canary_phase(
    client: &Client,
    step: &Step,
    node: &Rollout,
) -> Result<bool, ZkError> {
    if node.canary == 0 || node.parallel <= 1 {
        return Ok(false);
    }
    let Step::Deploy { path, .. } = step else {
        return Ok(false);
    };
    let props = lock_data(client, &lock_path(path)).await?;
    Ok(canary_count(&props, &canary_key(step)) < node.canary as usize)
}

/// Adds this host to the canaries of `canary` in the node lock's data `p` (a record of
/// another node or version is replaced).
pub(crate) fn add_canary(p: &mut crate::tree::Props, canary: &Canary, host_id: &str) {
    let mut hosts: Vec<Value> = match p.get("canary") {
        Some(Value::Object(c)) if canary.matches(c) => c
            .get("hosts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    if !hosts.iter().any(|h| h.as_str() == Some(host_id)) {
        hosts.push(json!(host_id));
    }
    let record = json!({"path": canary.path, "version": canary.key, "hosts": hosts});
    p.insert("canary".into(), record);
}

/// One deployment holding a lease of the semaphore `sem` (its in-flight record made with
/// it): first the records of dead holders (halt, naming the first), then the step and its
/// health check, then the lease given back with its record in one transaction. A failure
/// halts the cluster before the lease is given back; a failure that could not be recorded
/// leaves the record for the next holder to report.
pub(super) async fn deploy_leased(
    pass: &mut Pass<'_>,
    step: &Step,
    sem: &str,
    lease: Lease,
    looked: Option<Looked>,
) -> Result<(), Interrupt> {
    let (result, keep_record) = leased(pass, step, sem, &lease, looked).await;
    let client = &pass.agent.client;
    let released = match keep_record {
        true => lease.release_keeping_record(client).await,
        false => lease.release(client).await,
    };
    // The step's own outcome first: a failed release only hides it.
    result?;
    released.map_err(Interrupt::from)
}

/// The deployment itself, with the lease held; true when our record is to stay. `looked`:
/// what [`LookAfterTake`] read right after the lease was taken, if it did.
async fn leased(
    pass: &mut Pass<'_>,
    step: &Step,
    sem: &str,
    lease: &Lease,
    looked: Option<Looked>,
) -> (Result<(), Interrupt>, bool) {
    let Step::Deploy { path, .. } = step else {
        return (Ok(()), false);
    };
    let label = step.to_string();
    let lock = lock_path(path);
    // Read in the lease's round trip: the status is written while the step starts. Else
    // the checkpoint, the status and every record of a holder that may have died, in one
    // round trip, the status's write last: the server answers a session's requests in
    // order, and a read sent after a write waits for the write to be committed (behind
    // every other host's writes at a busy turn) before it is read.
    let status_left = looked.is_some();
    let found = match looked {
        Some(looked) => look_before_step(pass, sem, lease.name(), &lock, Some(looked)).await,
        None => {
            let (found, ()) = tokio::join!(
                look_before_step(pass, sem, lease.name(), &lock, None),
                pass.status(&label),
            );
            found
        }
    };
    let found = match found {
        Ok(found) => found,
        Err(interrupt) => return (Err(interrupt), false),
    };
    // A dead holder under a lease first, else one under the node lock: the first found halts.
    let dead = match found.suspected {
        true => dead_lease_holder(pass, sem, Some(lease.name())).await,
        false => Ok(None),
    };
    let dead = match dead {
        Ok(None) if found.lock_record => dead_lock_holder(pass, &lock).await,
        dead => dead,
    };
    match dead {
        Ok(None) => {}
        Ok(Some(message)) => {
            return match halt_for_dead_holder(pass, message).await {
                Ok(interrupt) => (Err(interrupt), false),
                Err(e) => (Err(e.into()), false),
            }
        }
        Err(e) => return (Err(e.into()), false),
    }
    let ran = if status_left {
        // The status's write is made (and the file written) before the step starts, and
        // answered while it runs.
        let ((), ran) = tokio::join!(pass.status_beside(&label), execute_halting(pass, step));
        ran
    } else {
        execute_halting(pass, step).await
    };
    match ran {
        Ok(result) => (result.map_err(halted), false),
        // The halt could not be recorded: the record stays for the next holder to report.
        Err(e) => (Err(e.into()), true),
    }
}

/// What [`LookAfterTake`] read: the cluster version (halts counted) and the records found.
pub(super) type Looked = Result<(Value, BeforeStep), ZkError>;

/// A lease holder's look before its step ([`snapshot_before_step`]), sent right after the
/// transaction that creates its lease ([`semaphore::AfterTake`]), in its round trip: the
/// step then starts one round trip after that transaction went out, not two. Read after the
/// transaction (a session's requests are answered in order), the snapshot sees our lease,
/// as a look made once the lease is known to be ours would.
pub(super) struct LookAfterTake<'c> {
    client: &'c Client,
    sem: &'c str,
    lock: &'c str,
    found: std::sync::Mutex<Option<Looked>>,
}

impl<'c> LookAfterTake<'c> {
    /// The look for the semaphore `sem` of the node whose lock is `lock`.
    pub(super) fn new(client: &'c Client, sem: &'c str, lock: &'c str) -> Self {
        LookAfterTake {
            client,
            sem,
            lock,
            found: Default::default(),
        }
    }

    /// Whether to send it: not to a server without multi-read.
    pub(super) fn wanted(&self) -> bool {
        !multiread::missing()
    }

    /// What the last look read.
    pub(super) fn take(&self) -> Option<Looked> {
        self.found.lock().expect("look after take").take()
    }
}

impl semaphore::AfterTake for LookAfterTake<'_> {
    fn start(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            // Our own lease is among the leases read, so no record of ours is a suspect.
            let found = snapshot_before_step(self.client, self.sem, "", self.lock).await;
            *self.found.lock().expect("look after take") = Some(found);
        })
    }
}

/// What a lease holder finds before its step ([`look_before_step`]).
#[derive(Debug)]
pub(super) struct BeforeStep {
    /// The semaphore keeps a record whose lease is gone, not ours: a holder that died.
    suspected: bool,
    /// The node lock keeps an in-flight record: a holder that died under the lock (K was 1,
    /// or it was a canary) is named by the next host whichever way it enters.
    lock_record: bool,
}

/// A lease holder's checkpoint and its look for records of holders that may have died, in
/// one multi-read: the cluster version and the halt records, the semaphore's records, its
/// guard's data (earlier agents' records) and its leases, and the node lock's data. One
/// request, where six took six turns of the server's queue at a busy turn (it answers a
/// session's requests one at a time). The multi-read is an atomic snapshot, so a record
/// whose lease it does not list is a holder's that died (or kept its record): a holder takes
/// and gives back both in one transaction. `looked`: the multi-read made already, in the
/// lease's round trip ([`LookAfterTake`]). A server without multi-read (ZooKeeper < 3.6)
/// gets the reads one by one, as [`suspected_lease_records`] makes them.
async fn look_before_step(
    pass: &Pass<'_>,
    sem: &str,
    ours: &str,
    lock: &str,
    looked: Option<Looked>,
) -> Result<BeforeStep, Interrupt> {
    pass.stopping()?;
    let client = &pass.agent.client;
    let snapshot = match looked {
        Some(looked) => Some(looked),
        None if !multiread::missing() => Some(snapshot_before_step(client, sem, ours, lock).await),
        None => None,
    };
    match snapshot {
        Some(Ok((version, found))) => {
            pass.judge(&version)?;
            return Ok(found);
        }
        Some(Err(e)) if !multiread::refused(&e) => return Err(e.into()),
        _ => {}
    }
    let (checked, suspected, lock_record) = tokio::join!(
        pass.checkpoint(),
        suspected_lease_records(client, sem, Some(ours)),
        has_lock_record(client, lock),
    );
    checked?;
    Ok(BeforeStep {
        suspected: suspected?,
        lock_record: lock_record?,
    })
}

/// A node lock holder's checkpoint and its look for records of lease holders that may have
/// died (before K became 1), in one multi-read ([`snapshot_before_step`]: the lock's data it
/// reads too is not needed, the holder read it with its list). Sent ahead of the holder's
/// writes of its status and record, it is answered without waiting for them: where the
/// checkpoint's two reads and the records' four took six requests, the last four answered
/// only after both writes. Without multi-read (ZooKeeper < 3.6), the reads one by one.
/// The first result is the checkpoint's (any error is given there); the second, whether a
/// lease record's holder is gone.
pub(super) async fn look_before_locked_step(
    pass: &Pass<'_>,
    sem: &str,
    lock: &str,
) -> (Result<(), Interrupt>, Result<bool, ZkError>) {
    if let Err(stop) = pass.stopping() {
        return (Err(stop), Ok(false));
    }
    let client = &pass.agent.client;
    if pass.controlled {
        // A role controller's pass has no checkpoint ([`Pass::checkpoint`]).
        return (Ok(()), suspected_lease_records(client, sem, None).await);
    }
    if !multiread::missing() {
        match snapshot_before_step(client, sem, "", lock).await {
            Ok((version, found)) => return (pass.judge(&version), Ok(found.suspected)),
            Err(e) if !multiread::refused(&e) => return (Err(e.into()), Ok(false)),
            Err(_) => {}
        }
    }
    tokio::join!(
        pass.checkpoint(),
        suspected_lease_records(client, sem, None)
    )
}

/// [`look_before_step`]'s multi-read: the cluster version (halts counted) and what it found.
async fn snapshot_before_step(
    client: &Client,
    sem: &str,
    ours: &str,
    lock: &str,
) -> Result<(Value, BeforeStep), ZkError> {
    let guard = semaphore::lock_path(sem);
    let records = semaphore::records_path(sem);
    let wants = [
        Want::Data(HOSTS.into()),
        Want::Children(HALTS.into()),
        Want::Children(records.clone()),
        Want::Data(guard.clone()),
        Want::Children(sem.into()),
        Want::Data(lock.into()),
    ];
    let got = multiread::read_at_once(client, &wants).await?;
    let [hosts, halts, kept, legacy, live, lock_data]: [MultiReadResult; 6] = got
        .try_into()
        .map_err(|_| multiread::unexpected(HOSTS, "not 6 results"))?;
    let hosts = multiread::data(HOSTS, hosts)?.ok_or_else(|| ZkError::Op {
        op: "get",
        path: HOSTS.into(),
        source: zookeeper_client::Error::NoNode,
    })?;
    let version = effective_version(&hosts, multiread::children(HALTS, halts))?;
    let props = |path: &str, result| -> Result<Props, ZkError> {
        Ok(multiread::data(path, result)?.map_or_else(Props::default, |d| decode(&d)))
    };
    let live = multiread::children(sem, live)?;
    let gone = |k: &String| !live.contains(k) && k != ours;
    let in_guard = match props(&guard, legacy)?.get("in-flight") {
        Some(Value::Object(m)) => m.keys().any(gone),
        _ => false,
    };
    let suspected = in_guard || multiread::children(&records, kept)?.iter().any(gone);
    let lock_record = props(lock, lock_data)?.contains_key("in-flight");
    Ok((
        version,
        BeforeStep {
            suspected,
            lock_record,
        },
    ))
}

/// Whether the semaphore `sem` keeps a record whose lease is gone (not `ours`): in the
/// records' node, or (earlier agents) in the guard's data. Listed in one round trip,
/// the records before and after the leases. (A record whose lease lives is its holder's
/// business.)
pub(super) async fn suspected_lease_records(
    client: &Client,
    sem: &str,
    ours: Option<&str>,
) -> Result<bool, ZkError> {
    let guard = semaphore::lock_path(sem);
    let records = semaphore::records_path(sem);
    let (kept, legacy, live, still) = tokio::join!(
        list_or_empty(client, &records),
        lock_data(client, &guard),
        semaphore::leases(client, sem),
        list_or_empty(client, &records),
    );
    let (kept, legacy, live, still) = (kept?, legacy?, live?, still?);
    let gone = |k: &String| !live.contains(k) && Some(k.as_str()) != ours;
    let in_guard = match legacy.get("in-flight") {
        Some(Value::Object(m)) => m.keys().any(gone),
        _ => false,
    };
    // A record listed before the leases, its lease not among them, and the record listed
    // again after them: a holder that gave its lease back took its record with it (in one
    // transaction), so only a holder that died (or kept its record) leaves one. Without the
    // second list, every lease given back between the first two lists was a suspect.
    Ok(in_guard || kept.iter().any(|k| gone(k) && still.contains(k)))
}

/// Removes the in-flight record of lease `name` from the guard node's properties.
fn clear_record(p: &mut Props, name: &str) {
    if let Some(Value::Object(m)) = p.get_mut("in-flight") {
        m.remove(name);
        if m.is_empty() {
            p.remove("in-flight");
        }
    }
}

/// The in-flight record a holder writes into its lock node (or creates with its lease)
/// before it runs a deploy step: who runs what, so the next holder can name a holder that died.
pub(super) fn in_flight_record(pass: &Pass<'_>, path: &str, n: u32) -> Value {
    let agent = pass.agent;
    json!({
        "host": agent.host.id, "name": agent.host.name, "path": path, "n": n,
        "version": pass.version, "pid": std::process::id(), "since": now(),
    })
}

/// Runs a deploy step while its lock or lease is held; a failure halts the cluster before the
/// caller lets the lock or lease go. The outer error is a failure to record the halt.
pub(super) async fn execute_halting(
    pass: &mut Pass<'_>,
    step: &Step,
) -> Result<Result<(), Interrupt>, ZkError> {
    execute_ready_halting(pass, step, None).await
}

/// [`execute_halting`], with the step's script made ready already ([`Step::ready`]).
pub(super) async fn execute_ready_halting(
    pass: &mut Pass<'_>,
    step: &Step,
    ready: Option<Result<ReadyScript, StepError>>,
) -> Result<Result<(), Interrupt>, ZkError> {
    let result = step.execute_ready(pass, ready).await;
    if let Err(Interrupt::Fail(failure)) = &result {
        let agent = pass.agent;
        halt(
            &agent.client,
            &agent.host,
            &pass.version,
            &failure.error.to_string(),
        )
        .await?;
    }
    Ok(result)
}

/// Halts the cluster for a holder that died mid-step (its in-flight record is still there),
/// and gives the interrupt that ends this host's step.
pub(super) async fn halt_for_dead_holder(
    pass: &Pass<'_>,
    message: String,
) -> Result<Interrupt, ZkError> {
    let agent = pass.agent;
    halt(&agent.client, &agent.host, &pass.version, &message).await?;
    Ok(Interrupt::Fail(Failure {
        error: StepError::DiedInFlight(message),
        halted: true,
    }))
}

/// A failed step's interrupt, marked as having halted the cluster.
pub(super) fn halted(i: Interrupt) -> Interrupt {
    match i {
        Interrupt::Fail(Failure { error, .. }) => Interrupt::Fail(Failure {
            error,
            halted: true,
        }),
        other => other,
    }
}

/// True if the node lock `lock` holds an in-flight record.
async fn has_lock_record(client: &Client, lock: &str) -> Result<bool, ZkError> {
    Ok(lock_data(client, lock).await?.contains_key("in-flight"))
}

/// The message naming a node-lock holder that died mid-step, for a host entering the node
/// with a lease: the lock node's in-flight record while the lock has no contender (a live
/// holder clears its record before it releases), read again to be sure. The record is
/// cleared; one left by this very process (an earlier session) silently.
async fn dead_lock_holder(pass: &Pass<'_>, lock: &str) -> Result<Option<String>, ZkError> {
    let agent = pass.agent;
    let contenders = match call_retrying("list", lock, || agent.client.list_children(lock)).await {
        Ok(c) => c,
        Err(e) if e.is_no_node() => Vec::new(),
        Err(e) => return Err(e),
    };
    if !contenders.is_empty() {
        // A holder (it will clear its record), or waiters: the first of them will look.
        return Ok(None);
    }
    let Some(Value::Object(rec)) = lock_data(&agent.client, lock).await?.remove("in-flight") else {
        return Ok(None);
    };
    update_props(&agent.client, lock, |p| {
        p.remove("in-flight");
    })
    .await?;
    if is_mine(&agent.host.id, &rec) {
        return Ok(None);
    }
    Ok(Some(died_in_flight(&rec, lock)))
}

/// The message naming a node lock's holder that died mid-step, from its in-flight record
/// `rec` left in `lock`.
pub(super) fn died_in_flight(rec: &serde_json::Map<String, Value>, lock: &str) -> String {
    died_with_record(rec, &format!("in-flight record left in {lock}"))
}

/// `<name> (<host>) died deploying <path> <n> (version <v>) since <t>: <left>`, from an
/// in-flight record `rec`.
fn died_with_record(rec: &serde_json::Map<String, Value>, left: &str) -> String {
    let field = |k: &str| rec.get(k).map(py_str).unwrap_or_default();
    format!(
        "{} ({}) died deploying {} {} (version {}) since {}: {left}",
        field("name"),
        field("host"),
        field("path"),
        field("n"),
        field("version"),
        field("since"),
    )
}

/// The message naming a lease holder that died mid-step, if the semaphore's records show
/// one (its record is cleared): first those in the guard's data (earlier agents), then
/// the record nodes. Records left by this very process (an earlier session) are cleared
/// silently.
/// `ours`: the lease we hold, if any (a host entering under the node lock holds none, and
/// still names a lease holder that died before K became 1).
pub(super) async fn dead_lease_holder(
    pass: &Pass<'_>,
    sem: &str,
    ours: Option<&str>,
) -> Result<Option<String>, ZkError> {
    if let Some(message) = dead_in_guard(pass, sem, ours).await? {
        return Ok(Some(message));
    }
    let agent = pass.agent;
    let client = &agent.client;
    let records = semaphore::records_path(sem);
    // The records listed before the leases, in one round trip.
    let (first, live) = tokio::join!(
        list_or_empty(client, &records),
        semaphore::leases(client, sem)
    );
    let (first, live) = (first?, live?);
    let suspects = first
        .iter()
        .filter(|k| !live.contains(k) && Some(k.as_str()) != ours);
    // A live holder's record goes with its lease (or before it): a record still there after
    // its lease was seen gone was left by a holder that died.
    for key in suspects {
        let node = join(&records, key);
        let data = match call_retrying("get", &node, || client.get_data(&node)).await {
            Ok((data, _)) => data,
            Err(e) if e.is_no_node() => continue,
            Err(e) => return Err(e),
        };
        let rec = match serde_json::from_slice(&data) {
            Ok(Value::Object(rec)) => rec,
            _ => Default::default(),
        };
        match call_retrying("delete", &node, || client.delete(&node, None)).await {
            Err(e) if e.is_no_node() => {}
            other => other?,
        }
        if is_mine(&pass.agent.host.id, &rec) {
            continue;
        }
        return Ok(Some(died_with_record(
            &rec,
            &format!("in-flight record of lease {key} left in {records}"),
        )));
    }
    Ok(None)
}

/// Whether an in-flight record was written by this very process.
pub(super) fn is_mine(host_id: &str, rec: &serde_json::Map<String, Value>) -> bool {
    rec.get("host").and_then(Value::as_str) == Some(host_id)
        && rec.get("pid").and_then(Value::as_u64) == Some(u64::from(std::process::id()))
}

/// [`dead_lease_holder`] for the records kept in the guard's data by earlier agents.
async fn dead_in_guard(
    pass: &Pass<'_>,
    sem: &str,
    ours: Option<&str>,
) -> Result<Option<String>, ZkError> {
    let agent = pass.agent;
    let guard = semaphore::lock_path(sem);
    let guard = guard.as_str();
    let records = |props: crate::tree::Props| match props.get("in-flight") {
        Some(Value::Object(m)) => m.clone(),
        _ => Default::default(),
    };
    let first = records(lock_data(&agent.client, guard).await?);
    if first.is_empty() {
        return Ok(None);
    }
    let live = semaphore::leases(&agent.client, sem).await?;
    let suspects: Vec<&String> = first
        .keys()
        .filter(|k| !live.contains(k) && Some(k.as_str()) != ours)
        .collect();
    if suspects.is_empty() {
        return Ok(None);
    }
    // A live holder clears its record before deleting its lease: a record still there after
    // its lease was seen gone was left by a holder that died.
    let again = records(lock_data(&agent.client, guard).await?);
    for key in suspects {
        let Some(Value::Object(rec)) = again.get(key) else {
            continue;
        };
        clear_lease_record(&agent.client, guard, key).await?;
        if is_mine(&pass.agent.host.id, rec) {
            continue;
        }
        return Ok(Some(died_with_record(
            rec,
            &format!("in-flight record of lease {key} left in {guard}"),
        )));
    }
    Ok(None)
}

/// Removes the in-flight record of lease `name` from the guard node.
async fn clear_lease_record(client: &Client, guard: &str, name: &str) -> Result<(), ZkError> {
    update_props(client, guard, |p| clear_record(p, name))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary(path: &str) -> Canary {
        Canary {
            path: path.into(),
            key: "foo 1.0".into(),
        }
    }

    #[test]
    fn a_canary_record_counts_for_its_own_path_or_one_without_a_path() {
        let mut p = crate::tree::Props::new();
        add_canary(&mut p, &canary("/a,b"), "h1");
        assert_eq!(canary_count(&p, &canary("/a,b")), 1);
        assert_eq!(canary_count(&p, &canary("/a/b")), 0);
        add_canary(&mut p, &canary("/a/b"), "h2");
        assert_eq!(
            p["canary"],
            json!({"path": "/a/b", "version": "foo 1.0", "hosts": ["h2"]})
        );
        let old = json!({"version": "foo 1.0", "hosts": ["h1", "h3"]});
        p.insert("canary".into(), old);
        assert_eq!(canary_count(&p, &canary("/a/b")), 2);
    }
}
