//! The canary phase's waiting room (docs/design.md, "Canaries"): while fewer than C hosts
//! have deployed a node's version, its hosts deploy it one at a time under the node lock, and
//! only as many of them queue in that lock as canaries are still needed ([`phase`]). The
//! others wait outside it, on a watch of the lock node's data, which each canary changes when
//! it writes its in-flight record and when it releases ([`wait_outside`]). So no host lists a
//! queue that grows with the fleet: kazoo's Lock, which the node lock is, has every contender
//! list the queue on entering and when its predecessor goes.

use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::OneshotWatcher;

use super::rollout_rule::{canary_count, Canary};
use crate::zk::recipe::{bucket, wait_for, Woken};
use crate::zk::{call_retrying, decode, Client, ZkError};

/// Where a node with K > 1 stands with its canaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No canaries, or all of them done: leases.
    Over,
    /// Fewer hosts queue in the node lock than canaries are still needed: join its queue.
    Join,
    /// Enough hosts queue in the node lock for the canaries still needed: wait outside it.
    Wait { done: usize, queued: usize },
}

/// The phase of a node with `need` canaries, `done` of them done and `queued` contenders in
/// its node lock.
fn phase(need: u32, done: usize, queued: usize) -> Phase {
    let need = need as usize;
    match done >= need {
        true => Phase::Over,
        false if queued < need - done => Phase::Join,
        false => Phase::Wait { done, queued },
    }
}

/// The phase of the node whose canaries are counted under `key` in the node lock `lock`
/// (`need` of them), from one read of the lock node's data and number of children.
pub(crate) async fn look(
    client: &Client,
    lock: &str,
    key: &Canary,
    need: u32,
) -> Result<Phase, ZkError> {
    Ok(look_watching(client, lock, key, need, false).await?.0)
}

/// [`look`], with a watch on the lock node's data when `watch` is asked and the node exists.
async fn look_watching(
    client: &Client,
    lock: &str,
    key: &Canary,
    need: u32,
    watch: bool,
) -> Result<(Phase, Option<OneshotWatcher>), ZkError> {
    if need == 0 {
        return Ok((Phase::Over, None));
    }
    let read = match watch {
        true => call_retrying("watch", lock, || client.get_and_watch_data(lock))
            .await
            .map(|(data, stat, watcher)| (data, stat, Some(watcher))),
        false => call_retrying("get", lock, || client.get_data(lock))
            .await
            .map(|(data, stat)| (data, stat, None)),
    };
    let (data, stat, watcher) = match read {
        Ok(read) => read,
        Err(e) if e.is_no_node() => return Ok((Phase::Join, None)),
        Err(e) => return Err(e),
    };
    let done = canary_count(&decode(&data), key);
    let queued = usize::try_from(stat.num_children).unwrap_or(0);
    Ok((phase(need, done, queued), watcher))
}

/// Longest wait outside the node lock for its data to change before looking again: a canary
/// that died, or a holder that writes no record, leaves the queue without changing the data.
const LOOK_LIMIT: Duration = Duration::from_secs(10);

/// Waits outside the node lock `lock`, watching its data, until the canaries (`key`, `need`)
/// are done or another host may join the queue (then the caller tries the node again), at
/// most until `deadline`, unless `cancel` resolves first. After each change the host
/// `host_id` looks again at its own moment of the next second ([`look_delay`]), so that a
/// fleet's waiters do not read, and join, at once.
pub(crate) async fn wait_outside(
    client: &Client,
    lock: &str,
    key: &Canary,
    need: u32,
    host_id: &str,
    deadline: Instant,
    cancel: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Result<(), ZkError> {
    let delay = look_delay(host_id);
    loop {
        let (phase, watcher) = look_watching(client, lock, key, need, true).await?;
        let (Phase::Wait { .. }, Some(watcher)) = (phase, watcher) else {
            return Ok(());
        };
        let until = deadline.min(Instant::now() + LOOK_LIMIT);
        if wait_for(watcher.changed(), until, cancel).await != Woken::Changed {
            return Ok(());
        }
        let pause = deadline.min(Instant::now() + delay);
        if wait_for(std::future::pending::<()>(), pause, cancel).await == Woken::Cancelled {
            return Ok(());
        }
    }
}

/// A host's own moment within a second (from its id): when it looks again after a change of
/// a node lock it waits outside.
fn look_delay(host_id: &str) -> Duration {
    Duration::from_millis(bucket(host_id, 1000))
}

#[cfg(test)]
mod tests {
    use super::{look_delay, phase, Phase};

    #[test]
    fn only_as_many_hosts_queue_as_canaries_are_still_needed() {
        assert_eq!(phase(2, 0, 0), Phase::Join);
        assert_eq!(phase(2, 0, 1), Phase::Join);
        let wait = |done, queued| Phase::Wait { done, queued };
        assert_eq!(phase(2, 0, 2), wait(0, 2));
        assert_eq!(phase(2, 1, 0), Phase::Join);
        assert_eq!(phase(2, 1, 1), wait(1, 1));
        assert_eq!(phase(2, 1, 9000), wait(1, 9000));
        assert_eq!(phase(2, 2, 9000), Phase::Over);
        assert_eq!(phase(2, 3, 0), Phase::Over);
        assert_eq!(phase(0, 0, 5), Phase::Over);
    }

    #[test]
    fn each_host_looks_again_at_its_own_moment_of_the_second() {
        let delays: Vec<u128> = (0..200)
            .map(|i| look_delay(&format!("host-{i}")).as_millis())
            .collect();
        assert!(delays.iter().all(|d| *d < 1000), "{delays:?}");
        assert_eq!(look_delay("host-7"), look_delay("host-7"));
        let early = delays.iter().filter(|d| **d < 500).count();
        assert!(
            (50..150).contains(&early),
            "{early} of 200 in the first half"
        );
    }
}
