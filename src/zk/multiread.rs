//! Pipelined multi-reads: `get_data` and `get_children` requests grouped [`BATCH`] to a
//! multi-read request, with up to [`WINDOW`] requests in flight. Used by the subtree reader
//! ([`super::snapshot`]) and the agent's discovery walk. A node that does not exist is handed
//! to the caller as a `NoNode` result (it may have been deleted while the walk ran); any other
//! error ends the read. A batch whose answer is over the client's limit (`jute-maxbuffer`) is
//! read again in batches of half its size, and so are the reads after it. [`read_at_once`] reads a few nodes in one multi-read (an atomic
//! snapshot, one request), for as long as the server knows the request ([`missing`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use zookeeper_client::{MultiReadResult, MultiReader};

use super::{call, call_retrying, Client, ZkError};

/// Paths read per multi-read request.
pub(crate) const BATCH: usize = 128;
/// Multi-read requests kept in flight at once.
pub(crate) const WINDOW: usize = 16;

/// One read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Want {
    /// Data and stat of a node.
    Data(String),
    /// Children of a node.
    Children(String),
}

impl Want {
    /// The node the read is about.
    pub(crate) fn path(&self) -> &str {
        match self {
            Want::Data(p) | Want::Children(p) => p,
        }
    }
}

type Reply = (Vec<Want>, Result<Vec<MultiReadResult>, ZkError>);

/// Adds the reads of `wants` to `reader`; an error comes with the read refused.
pub(crate) fn add_wants<'w>(
    reader: &mut MultiReader<'_>,
    wants: &'w [Want],
) -> Result<(), (&'w Want, zookeeper_client::Error)> {
    wants.iter().try_for_each(|want| {
        match want {
            Want::Data(p) => reader.add_get_data(p),
            Want::Children(p) => reader.add_get_children(p),
        }
        .map_err(|e| (want, e))
    })
}

/// Sends one multi-read for a batch.
fn send(client: &Client, batch: Vec<Want>) -> Pin<Box<dyn Future<Output = Reply> + Send + '_>> {
    let mut reader = client.new_multi_reader();
    let bad = add_wants(&mut reader, &batch)
        .err()
        .map(|(want, source)| ZkError::Op {
            op: "read",
            path: want.path().to_string(),
            source,
        });
    let commit = reader.commit();
    Box::pin(async move {
        if let Some(e) = bad {
            return (batch, Err(e));
        }
        let first = batch.first().map(Want::path).unwrap_or("/").to_string();
        let r = call("read", &first, commit).await;
        (batch, r)
    })
}

/// Runs the reads of `queue`, pipelined, calling `on` with each result; `on` may queue more.
pub(crate) async fn read_all(
    client: &Client,
    mut queue: Vec<Want>,
    mut on: impl FnMut(Want, MultiReadResult, &mut Vec<Want>),
) -> Result<(), ZkError> {
    let mut in_flight = FuturesUnordered::new();
    let mut batch_len = BATCH;
    while !queue.is_empty() || !in_flight.is_empty() {
        while in_flight.len() < WINDOW && !queue.is_empty() {
            let at = queue.len().saturating_sub(batch_len);
            in_flight.push(send(client, queue.split_off(at)));
        }
        let Some((mut batch, results)) = in_flight.next().await else {
            break;
        };
        let results = match results {
            // An answer over the client's limit was discarded: its halves are read apart (a
            // node alone over the limit is the error, naming it).
            Err(ZkError::AnswerTooLarge { .. }) if batch.len() > 1 => {
                batch_len = batch_len.min(batch.len() / 2);
                queue.append(&mut batch);
                continue;
            }
            other => other?,
        };
        for (want, result) in batch.into_iter().zip(results) {
            if let MultiReadResult::Error { err } = &result {
                if *err != zookeeper_client::Error::NoNode {
                    return Err(ZkError::Op {
                        op: "read",
                        path: want.path().to_string(),
                        source: err.clone(),
                    });
                }
            }
            on(want, result, &mut queue);
        }
    }
    Ok(())
}

/// Set once the server refused a multi-read: from then on this process reads one by one.
static MISSING: AtomicBool = AtomicBool::new(false);

/// Whether the server refused a multi-read (ZooKeeper < 3.6): read node by node instead.
pub(crate) fn missing() -> bool {
    MISSING.load(Ordering::Relaxed)
}

/// Whether `error` is the server's refusal of a multi-read; if so, [`missing`] says so from
/// now on.
pub(crate) fn refused(error: &ZkError) -> bool {
    let no = matches!(
        error,
        ZkError::Op {
            source: zookeeper_client::Error::Unimplemented,
            ..
        }
    );
    if no {
        MISSING.store(true, Ordering::Relaxed);
    }
    no
}

/// Reads `wants` in one multi-read (an atomic snapshot), again after a connection loss; an
/// error names the first node.
pub(crate) async fn read_at_once(
    client: &Client,
    wants: &[Want],
) -> Result<Vec<MultiReadResult>, ZkError> {
    let first = wants.first().map_or("/", Want::path);
    let results = call_retrying("read", first, || {
        // A reader's request is taken by its commit: a new one for every attempt.
        let mut reader = client.new_multi_reader();
        match add_wants(&mut reader, wants).map_err(|(_, e)| e) {
            Ok(()) => reader.commit().left_future(),
            Err(e) => futures::future::ready(Err(e)).right_future(),
        }
    })
    .await?;
    if results.len() != wants.len() {
        return Err(unexpected(first, &format!("not {} results", wants.len())));
    }
    Ok(results)
}

/// A multi-read answer of the wrong shape.
pub(crate) fn unexpected(path: &str, what: &str) -> ZkError {
    ZkError::Op {
        op: "read",
        path: path.to_string(),
        source: zookeeper_client::Error::UnexpectedError(format!("multi-read: {what}")),
    }
}

/// The data and stat of a multi-read's data result (`None`: the node does not exist).
pub(crate) fn data_and_stat(
    path: &str,
    result: MultiReadResult,
) -> Result<Option<(Vec<u8>, zookeeper_client::Stat)>, ZkError> {
    match result {
        MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
        MultiReadResult::Error {
            err: zookeeper_client::Error::NoNode,
        } => Ok(None),
        MultiReadResult::Error { err } => Err(ZkError::Op {
            op: "get",
            path: path.to_string(),
            source: err,
        }),
        _ => Err(unexpected(path, "no data")),
    }
}

/// The children of a multi-read's children result (none if the node does not exist).
pub(crate) fn children(path: &str, result: MultiReadResult) -> Result<Vec<String>, ZkError> {
    match result {
        MultiReadResult::Children { children } => Ok(children),
        MultiReadResult::Error {
            err: zookeeper_client::Error::NoNode,
        } => Ok(Vec::new()),
        MultiReadResult::Error { err } => Err(ZkError::Op {
            op: "list",
            path: path.to_string(),
            source: err,
        }),
        _ => Err(unexpected(path, "no children")),
    }
}
