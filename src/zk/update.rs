//! The guarded property update: read a node's properties, change them, write them back
//! only if nobody wrote in between (the node's version guards the write), and try again
//! otherwise. Used for `/hosts` (halts, `resume`), host nodes and lock nodes' in-flight
//! records, so concurrent edits by others are never clobbered.

use super::{call, call_retrying, decode, encode, Client, ZkError, LOSS_RETRIES};
use crate::tree::Props;

/// Most writes lost to someone else's write in a row before giving up: a node that changes
/// this often is not being converged on, it is being fought over.
pub(crate) const MAX_CONFLICTS: usize = 100;

/// Applies `change` to the properties of `path` with a version-guarded write, retrying when
/// someone else wrote in between. Returns false (and writes nothing) if `change` left the
/// properties as they were. `change` must be idempotent (set or remove keys): when the
/// connection breaks during the write, the properties are read again and `change` applied
/// again, so a write that did go through is not repeated (see [`call_retrying`]).
pub(crate) async fn update_props(
    client: &Client,
    path: &str,
    change: impl Fn(&mut Props),
) -> Result<bool, ZkError> {
    try_update_props(client, path, |p| {
        change(p);
        Ok::<(), ZkError>(())
    })
    .await
}

/// [`update_props`] with a change that may refuse (its error is returned, nothing written),
/// for example when the properties read show that the update no longer applies.
pub(crate) async fn try_update_props<E: From<ZkError>>(
    client: &Client,
    path: &str,
    change: impl Fn(&mut Props) -> Result<(), E>,
) -> Result<bool, E> {
    read_modify_write(client, path, change)
        .await
        .map(|(wrote, _, _)| wrote)
}

/// [`update_props`], also giving the node's properties and data version after it (what was
/// written, or what was read when nothing needed writing), for the next write.
pub(crate) async fn update_props_state(
    client: &Client,
    path: &str,
    change: impl Fn(&mut Props),
) -> Result<(Props, i32), ZkError> {
    read_modify_write(client, path, |p| {
        change(p);
        Ok::<(), ZkError>(())
    })
    .await
    .map(|(_, props, version)| (props, version))
}

/// The guarded read-modify-write loop: whether it wrote, and the properties and version after.
async fn read_modify_write<E: From<ZkError>>(
    client: &Client,
    path: &str,
    change: impl Fn(&mut Props) -> Result<(), E>,
) -> Result<(bool, Props, i32), E> {
    let mut lost = 0;
    let mut conflicts = 0;
    loop {
        let (data, stat) = call_retrying("get", path, || client.get_data(path)).await?;
        let before = decode(&data);
        let mut props = before.clone();
        change(&mut props)?;
        if props == before {
            return Ok((false, props, stat.version));
        }
        match call(
            "set",
            path,
            client.set_data(path, &encode(&props), Some(stat.version)),
        )
        .await
        {
            Ok(written) => return Ok((true, props, written.version)),
            Err(ZkError::Op {
                source: zookeeper_client::Error::BadVersion,
                ..
            }) if conflicts < MAX_CONFLICTS => conflicts += 1,
            Err(ZkError::Op {
                source: zookeeper_client::Error::BadVersion,
                ..
            }) => {
                return Err(ZkError::Op {
                    op: "set",
                    path: path.to_string(),
                    source: zookeeper_client::Error::UnexpectedError(format!(
                        "{path} kept changing ({MAX_CONFLICTS} writes lost to others in a row)"
                    )),
                }
                .into())
            }
            Err(e) if e.is_connection_loss() && lost < LOSS_RETRIES => {
                lost += 1;
                tracing::info!("{e}; reading {path} again once reconnected");
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// [`update_props`] from properties already read (`props`, at data version `version`): one
/// round trip when nobody wrote in between, else (a `BadVersion`, or a connection loss) the
/// read-modify-write of [`update_props`]. Returns what the node holds after the write and its
/// data version, for the next write.
pub(crate) async fn update_props_known(
    client: &Client,
    path: &str,
    props: &Props,
    version: i32,
    change: impl Fn(&mut Props),
) -> Result<(Props, i32), ZkError> {
    let mut new = props.clone();
    change(&mut new);
    if new == *props {
        return Ok((new, version));
    }
    match call(
        "set",
        path,
        client.set_data(path, &encode(&new), Some(version)),
    )
    .await
    {
        Ok(stat) => Ok((new, stat.version)),
        Err(e)
            if e.is_connection_loss()
                || matches!(e.source_error(), Some(zookeeper_client::Error::BadVersion)) =>
        {
            update_props_state(client, path, change).await
        }
        Err(e) => Err(e),
    }
}
