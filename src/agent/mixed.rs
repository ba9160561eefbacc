//! Is the fleet mixed? (docs/design.md, "Exclusion", mixed fleets.) While any registered host
//! node lacks [`AGENT_PROPERTY`] (the original's agent, which knows only the node locks),
//! every node uses the node lock with K = 1.
//!
//! The check costs O(1) whatever the size of the fleet. Our agents register the ephemeral
//! host node `/hosts/<id>` and the ephemeral registry node `/agent-registry/<id>` in one
//! transaction of one session (`super::cluster::register`), and both go in one transaction
//! when the session ends; the original's agents never create registry nodes. So at any
//! atomic snapshot every registry child has a host node of ours beside it, and
//! `numChildren(/hosts) - numChildren(/agent-registry)` counts the host nodes that may be
//! the original's. One multi-read of the two nodes' stats answers:
//!
//! - counts equal: not mixed;
//! - counts differ (an original agent, an older zkdeployment that writes no registry node,
//!   `/agent-registry` missing): both lists, read in one multi-read, and only the host nodes
//!   not in the registry are read (an older version of ours carries `agent`: not mixed).
//!   That answer is kept, keyed by the children versions (`cversion`) of both nodes, so an
//!   unchanged fleet costs the one multi-read again;
//! - a server without multi-read (ZooKeeper < 3.6): every host node, as version one did,
//!   read again only when the children of `/hosts` changed.

use std::sync::Mutex;

use zookeeper_client::{MultiReadResult, Stat};

use crate::tree::literal::py_str;
use crate::zk::multiread::{self, children, read_at_once, Want};
use crate::zk::paths::{AGENT_PROPERTY, AGENT_REGISTRY, HOSTS};
use crate::zk::{call_retrying, decode, join, Client, ZkError};

/// What this process last found about a fleet whose counts differ: whether it is mixed, as
/// of the children versions of `/hosts` and `/agent-registry` (-1: none, or not read).
pub(crate) type MixedCache = Mutex<Option<((i32, i32), Option<String>)>>;

/// What `deploy --dry-run`, `status` and `plan` add below a mixed fleet's reason.
pub(crate) const BUDGETS_OFF: &str =
    "max-failures and on-failure are ignored: every failure halts the cluster";

/// What the agent, `status` and the fleet plan say of a mixed fleet whose first original
/// host is `id` (`name`).
pub(crate) fn mixed_reason(id: &str, name: &str) -> String {
    format!(
        "host {id} ({name}) has no '{AGENT_PROPERTY}' property (the original's agent): every node uses the node lock, max-parallel 1"
    )
}

/// Why the fleet is mixed: the first (by sorted id) registered host node without
/// [`AGENT_PROPERTY`] that has no registry node (see the module doc).
pub(crate) async fn mixed_fleet(
    client: &Client,
    cache: &MixedCache,
) -> Result<Option<String>, ZkError> {
    Ok(mixed_fleet_and_stats(client, cache, &[]).await?.0)
}

/// [`mixed_fleet`], with the stats of the nodes `nodes` (`None`: it does not exist) read in
/// the same multi-read: one request, where a request beside it would wait for the server's
/// next turn at this session (it answers a session's requests one at a time).
pub(crate) async fn mixed_fleet_and_stats(
    client: &Client,
    cache: &MixedCache,
    nodes: &[String],
) -> Result<(Option<String>, Vec<Option<Stat>>), ZkError> {
    if multiread::missing() {
        return one_by_one(client, cache, nodes).await;
    }
    // One atomic read of both stats. Two separate reads would not do: a host of ours leaving
    // (or arriving) between them shifts one count and not the other, and the difference
    // could then equal zero while an original agent is registered.
    let mut wants = vec![Want::Data(HOSTS.into()), Want::Data(AGENT_REGISTRY.into())];
    wants.extend(nodes.iter().map(|n| Want::Data(n.clone())));
    let read = read_at_once(client, &wants).await;
    let results = match read {
        Ok(results) => results,
        Err(e) if multiread::refused(&e) => {
            tracing::debug!("the server has no multi-read (ZooKeeper < 3.6): the mixed-fleet check reads every host node");
            return one_by_one(client, cache, nodes).await;
        }
        Err(e) => return Err(e),
    };
    let mut results = results.into_iter();
    let (Some(hosts), Some(registry)) = (results.next(), results.next()) else {
        return Err(unexpected("not 2 results"));
    };
    let stats = nodes
        .iter()
        .zip(results)
        .map(|(node, result)| stat(node, result))
        .collect::<Result<Vec<_>, _>>()?;
    let hosts = stat(HOSTS, hosts)?.ok_or_else(no_hosts)?;
    let registry = stat(AGENT_REGISTRY, registry)?;
    let registered = registry.map_or(0, |s| s.num_children);
    if hosts.num_children == registered {
        return Ok((None, stats));
    }
    let key = (hosts.cversion, registry.map_or(-1, |s| s.cversion));
    if let Some((known, why)) = cache.lock().expect("mixed fleet cache").as_ref() {
        if *known == key {
            return Ok((why.clone(), stats));
        }
    }
    Ok((read_hosts(client, cache, true).await?, stats))
}

/// [`mixed_fleet_and_stats`] without a multi-read: the stats one by one.
async fn one_by_one(
    client: &Client,
    cache: &MixedCache,
    nodes: &[String],
) -> Result<(Option<String>, Vec<Option<Stat>>), ZkError> {
    let (mixed, stats) = futures::join!(
        read_hosts(client, cache, false),
        futures::future::join_all(
            nodes
                .iter()
                .map(|n| call_retrying("stat", n, || client.check_stat(n)))
        )
    );
    Ok((mixed?, stats.into_iter().collect::<Result<_, _>>()?))
}

/// A multi-read answer of the wrong shape.
fn unexpected(what: &str) -> ZkError {
    multiread::unexpected(HOSTS, what)
}

/// `/hosts` missing.
fn no_hosts() -> ZkError {
    ZkError::Op {
        op: "read",
        path: HOSTS.to_string(),
        source: zookeeper_client::Error::NoNode,
    }
}

/// The stat of a multi-read's data result (`None`: the node does not exist).
fn stat(path: &str, result: MultiReadResult) -> Result<Option<Stat>, ZkError> {
    Ok(multiread::data_and_stat(path, result)?.map(|(_, stat)| stat))
}

/// Lists the host nodes (and, with `atomic`, the registry in the same multi-read), reads
/// the host nodes that have no registry node, and keeps the answer in `cache`. Without
/// `atomic` (no multi-read) every host node is read, keyed by `/hosts`'s children version.
async fn read_hosts(
    client: &Client,
    cache: &MixedCache,
    atomic: bool,
) -> Result<Option<String>, ZkError> {
    let (key, mut ids) = if atomic {
        let wants = [HOSTS, AGENT_REGISTRY]
            .into_iter()
            .flat_map(|p| [Want::Data(p.into()), Want::Children(p.into())])
            .collect::<Vec<_>>();
        let results = read_at_once(client, &wants).await?;
        let [hosts, host_ids, registry, registered]: [MultiReadResult; 4] = results
            .try_into()
            .map_err(|_| unexpected("not 4 results"))?;
        let hosts = stat(HOSTS, hosts)?.ok_or_else(no_hosts)?;
        let registry = stat(AGENT_REGISTRY, registry)?;
        let registered: std::collections::HashSet<String> =
            children(AGENT_REGISTRY, registered)?.into_iter().collect();
        let ids: Vec<String> = children(HOSTS, host_ids)?
            .into_iter()
            .filter(|id| !registered.contains(id))
            .collect();
        ((hosts.cversion, registry.map_or(-1, |s| s.cversion)), ids)
    } else {
        let (ids, stat) = call_retrying("list", HOSTS, || client.get_children(HOSTS)).await?;
        if let Some((known, why)) = cache.lock().expect("mixed fleet cache").as_ref() {
            if *known == (stat.cversion, -1) {
                return Ok(why.clone());
            }
        }
        ((stat.cversion, -1), ids)
    };
    ids.sort();
    let reads = ids.iter().map(|id| {
        let path = join(HOSTS, id);
        async move {
            let got = call_retrying("get", &path, || client.get_data(&path)).await;
            (id, got)
        }
    });
    let mut why = None;
    for (id, got) in futures::future::join_all(reads).await {
        match got {
            Ok((data, _)) => {
                let props = decode(&data);
                if props.get(AGENT_PROPERTY).is_none() {
                    let name = props.get("name").map(py_str).unwrap_or_default();
                    why = Some(mixed_reason(id, &name));
                    break;
                }
            }
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    *cache.lock().expect("mixed fleet cache") = Some((key, why.clone()));
    Ok(why)
}
