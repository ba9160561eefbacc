//! The semaphore's guard at a wave's turn: `K` lease holders give their leases back at once
//! while `K` takers wait for a lease (in the guard's queue or their turnstiles; each its own
//! ZooKeeper session, in one process, so that the machine's CPU is not what is measured);
//! the time from the releases to the last taker holding its lease, and the requests the
//! server received meanwhile (`mntr`; the releases' own included).
//!
//! Run with `cargo bench --bench guard` (`BENCH_GUARD_K=25,100` for other values of K).

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use zkdeployment::zk::recipe::semaphore::Semaphore;
use zkdeployment::zk::recipe::Attempt;
use zkdeployment::zk::Client;

/// The server's count of requests received.
fn packets() -> i64 {
    let address = support::zk_address();
    let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
    support::packets_received(port.expect("a port"))
}

/// `rounds` turns with `k` leases: for each, the time from the releases to the last new
/// holder in ms, and the requests the server received for it.
async fn turn(conn: &str, k: u32, rounds: usize) -> Vec<(f64, i64)> {
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..(2 * k) {
        clients.push(support::connect(conn).await);
    }
    let sem = "/guard-bench";
    let mut times = Vec::new();
    for _ in 0..rounds {
        let (holders, takers) = clients.split_at(k as usize);
        let mut leases = Vec::new();
        for c in holders {
            match Semaphore::new(c, sem, "holder", k)
                .try_acquire(None)
                .await
                .unwrap()
            {
                Attempt::Acquired(lease) => leases.push(lease),
                Attempt::Busy(_) => panic!("full"),
            }
        }
        let waiting = takers.iter().enumerate().map(|(i, c)| async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let got = Semaphore::new(c, sem, &format!("taker {i}"), k)
                .acquire(None, deadline, &mut std::future::pending())
                .await
                .unwrap()
                .expect("a lease");
            (Instant::now(), got)
        });
        let waiting = futures::future::join_all(waiting);
        let release = async {
            // Every taker queued first: in the guard's queue (one of them holding it), or
            // behind another in its turnstile.
            while queued(&holders[0], sem).await < k as usize {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let before = packets();
            let at = (Instant::now(), before);
            let released = leases.drain(..).zip(holders).map(|(l, c)| l.release(c));
            futures::future::join_all(released).await;
            at
        };
        let ((got, after), (at, before)) =
            futures::join!(async { (waiting.await, packets()) }, release);
        let last = got.iter().map(|(t, _)| *t).max().unwrap();
        times.push((
            last.duration_since(at).as_secs_f64() * 1000.0,
            after - before,
        ));
        let back = got.into_iter().zip(takers).map(|((_, l), c)| l.release(c));
        futures::future::join_all(back).await;
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    times
}

/// The takers queued for a lease of `sem`: the guard's contenders, and those waiting behind
/// another in a turnstile (a turnstile's holder queues for the guard).
async fn queued(client: &Client, sem: &str) -> usize {
    let children =
        |path: String| async move { client.list_children(&path).await.unwrap_or_default() };
    let mut count = children(format!("{sem}-__lock__")).await.len();
    let turnstiles = format!("{sem}-__turnstiles__");
    for turnstile in children(turnstiles.clone()).await {
        let waiting = children(format!("{turnstiles}/{turnstile}")).await.len();
        count += waiting.saturating_sub(1);
    }
    count
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ks: Vec<u32> = std::env::var("BENCH_GUARD_K")
        .unwrap_or_else(|_| "10,25,50".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    rt.block_on(async {
        let conn = support::chroot("bench-guard").await;
        println!("the guard at a wave's turn: K leases given back at once, K takers queued");
        for k in ks {
            let t = turn(&conn, k, 7).await;
            let (median, requests) = t[t.len() / 2];
            println!(
                "  K = {k}: releases -> last taker holding a lease: median {median:.1} ms (min {:.1}, max {:.1}); {requests} requests",
                t[0].0,
                t[t.len() - 1].0
            );
        }
    });
}
