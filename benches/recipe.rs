//! The plain recipes' hand-off (`zk::recipe`): a lock holder gives the lock back while the
//! next contender waits in its queue (each its own ZooKeeper session, in one process); the
//! time from the release to the waiter holding the lock, and the requests the server
//! received for it (`mntr`; the release's own included). Then the same for a semaphore
//! lease with K = 1 (the guard's queue, then the leases' watch).
//!
//! Run with `cargo bench --bench recipe` (`BENCH_RECIPE_ROUNDS=200` for more rounds).

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use zkdeployment::zk::recipe::lock::Lock;
use zkdeployment::zk::recipe::semaphore::Semaphore;
use zkdeployment::zk::recipe::Attempt;
use zkdeployment::zk::Client;

/// The server's count of requests received.
fn packets() -> i64 {
    let address = support::zk_address();
    let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
    support::packets_received(port.expect("a port"))
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

/// Waits until the lock at `path` has `n` contenders.
async fn queued(client: &Client, path: &str, n: usize) {
    while client.list_children(path).await.unwrap().len() < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One lock hand-off: ms from the release to the waiter holding, and the requests.
async fn lock_handoff(a: &Client, b: &Client, path: &str) -> (f64, i64) {
    let held = match Lock::new(a, path, "a").try_acquire().await.unwrap() {
        Attempt::Acquired(held) => held,
        Attempt::Busy(holder) => panic!("busy: {holder:?}"),
    };
    let lock = Lock::new(b, path, "b");
    let mut never = std::future::pending();
    let waiting = lock.acquire(deadline(), &mut never);
    let release = async {
        queued(a, path, 2).await;
        let before = packets();
        let start = Instant::now();
        held.release(a).await.unwrap();
        (start, before)
    };
    let (got, (start, before)) = tokio::join!(waiting, release);
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let requests = packets() - before;
    got.unwrap()
        .expect("the waiter took the lock")
        .release(b)
        .await
        .unwrap();
    (ms, requests)
}

/// One lease hand-off with K = 1: ms from the release to the waiter holding, and the
/// requests.
async fn lease_handoff(a: &Client, b: &Client, path: &str) -> (f64, i64) {
    let lease = match Semaphore::new(a, path, "a", 1)
        .try_acquire(None)
        .await
        .unwrap()
    {
        Attempt::Acquired(lease) => lease,
        Attempt::Busy(holders) => panic!("full: {holders:?}"),
    };
    let sem = Semaphore::new(b, path, "b", 1);
    let mut never = std::future::pending();
    let waiting = sem.acquire(None, deadline(), &mut never);
    let guard = format!("{path}-__lock__");
    let release = async {
        queued(a, &guard, 1).await;
        // The waiter holds the guard and lists the leases; give it time to set its watch.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = packets();
        let start = Instant::now();
        lease.release(a).await.unwrap();
        (start, before)
    };
    let (got, (start, before)) = tokio::join!(waiting, release);
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let requests = packets() - before;
    got.unwrap()
        .expect("the waiter took a lease")
        .release(b)
        .await
        .unwrap();
    (ms, requests)
}

fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

fn main() {
    let rounds: usize = std::env::var("BENCH_RECIPE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let conn = support::chroot("recipe-bench").await;
        let (a, b) = (support::connect(&conn).await, support::connect(&conn).await);
        for (name, lease) in [("node-lock", false), ("lease (K = 1)", true)] {
            let (mut times, mut requests) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let (ms, n) = match lease {
                    false => lock_handoff(&a, &b, "/lock").await,
                    true => lease_handoff(&a, &b, "/sem").await,
                };
                times.push(ms);
                requests.push(n);
            }
            requests.sort();
            println!(
                "recipe {name} hand-off, {rounds} rounds: {}; requests per hand-off: median {}",
                summary(times),
                requests[requests.len() / 2]
            );
        }
    });
}
