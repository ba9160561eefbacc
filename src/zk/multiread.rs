//! Pipelined multi-reads: `get_data` and `get_children` requests grouped [`BATCH`] to a
//! multi-read request, with up to [`WINDOW`] requests in flight. Used by the subtree reader
//! ([`super::snapshot`]) and the agent's discovery walk. A node that does not exist is handed
//! to the caller as a `NoNode` result (it may have been deleted while the walk ran); any other
//! error ends the read.

use std::future::Future;
use std::pin::Pin;

use futures::stream::{FuturesUnordered, StreamExt};
use zookeeper_client::MultiReadResult;

use super::{call, Client, ZkError};

/// Paths read per multi-read request.
pub const BATCH: usize = 128;
/// Multi-read requests kept in flight at once.
pub const WINDOW: usize = 16;

/// One read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// Data and stat of a node.
    Data(String),
    /// Children of a node.
    Children(String),
}

impl Want {
    /// The node the read is about.
    pub fn path(&self) -> &str {
        match self {
            Want::Data(p) | Want::Children(p) => p,
        }
    }
}

type Reply = (Vec<Want>, Result<Vec<MultiReadResult>, ZkError>);

/// Sends one multi-read for a batch.
fn send(client: &Client, batch: Vec<Want>) -> Pin<Box<dyn Future<Output = Reply> + Send + '_>> {
    let mut reader = client.new_multi_reader();
    let mut bad = None;
    for want in &batch {
        let added = match want {
            Want::Data(p) => reader.add_get_data(p),
            Want::Children(p) => reader.add_get_children(p),
        };
        if let Err(source) = added {
            bad = Some(ZkError::Op {
                op: "read",
                path: want.path().to_string(),
                source,
            });
            break;
        }
    }
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
pub async fn read_all(
    client: &Client,
    mut queue: Vec<Want>,
    mut on: impl FnMut(Want, MultiReadResult, &mut Vec<Want>),
) -> Result<(), ZkError> {
    let mut in_flight = FuturesUnordered::new();
    while !queue.is_empty() || !in_flight.is_empty() {
        while in_flight.len() < WINDOW && !queue.is_empty() {
            let at = queue.len().saturating_sub(BATCH);
            in_flight.push(send(client, queue.split_off(at)));
        }
        let Some((batch, results)) = in_flight.next().await else {
            break;
        };
        for (want, result) in batch.into_iter().zip(results?) {
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
