//! kazoo's Lock and Semaphore recipes (`zk::recipe`), as behaviour: one holder of a lock at a
//! time and the holder named to a try; waiters served first come, first served; no lost
//! wake-up when a waiter in the middle of the queue leaves; a dead holder's place freed by its
//! session's end; at most K leases held at once; the lease's record made and removed with it;
//! a stored `max_leases` rewritten; waiters queueing for the guard one per turnstile, and a try
//! that does not queue behind more takers than leases are free; and kazoo's own Lock and
//! Semaphore excluding ours and ours theirs.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zkdeployment::zk::recipe::lock::{contenders, Lock, LockGuard};
use zkdeployment::zk::recipe::semaphore::{
    holders, leases, records_path, turnstile_path, LeaseGuard, Semaphore,
};
use zkdeployment::zk::recipe::{wait_for_any, Attempt};
use zkdeployment::zk::Client;

/// Longest any step of these tests may wait.
const LIMIT: Duration = Duration::from_secs(30);

fn deadline() -> Instant {
    Instant::now() + LIMIT
}

/// Takes the lock at `path` as `who` (it must be free).
async fn take(client: &Client, path: &str, who: &str) -> LockGuard {
    match Lock::new(client, path, who).try_acquire().await.unwrap() {
        Attempt::Acquired(guard) => guard,
        Attempt::Busy(holder) => panic!("{path} is held by {holder:?}"),
    }
}

/// The identifiers of the contenders of the lock at `path`, in queue order.
async fn queue(client: &Client, path: &str) -> Vec<String> {
    let found = contenders(client, path).await.unwrap();
    found.into_iter().map(|c| c.identifier).collect()
}

/// Waits (bounded, on watches of the lock node's children) until the queue of `path` is `want`.
async fn wait_queue(client: &Client, path: &str, want: &[&str]) {
    let end = deadline();
    loop {
        let (_, watcher) = client.list_and_watch_children(path).await.unwrap();
        let now = queue(client, path).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < end, "{path}: queue {now:?}, not {want:?}");
        let _ = tokio::time::timeout_at(end, watcher.changed()).await;
    }
}

/// A waiter for the lock at `path` on its own session: it sends its identifier on `order`
/// once it holds the lock, then gives it back.
fn waiter(
    conn: &str,
    path: &str,
    who: &str,
    order: tokio::sync::mpsc::UnboundedSender<String>,
) -> tokio::task::JoinHandle<()> {
    let (conn, path, who) = (conn.to_string(), path.to_string(), who.to_string());
    tokio::spawn(async move {
        let client = support::connect(&conn).await;
        let lock = Lock::new(&client, &path, &who);
        let guard = lock.acquire(deadline(), &mut std::future::pending()).await;
        let guard = guard.unwrap().expect("the waiter took the lock in time");
        order.send(who).unwrap();
        guard.release(&client).await.unwrap();
        drop(client);
    })
}

#[tokio::test]
async fn a_try_names_the_holder_and_a_release_frees_the_lock() {
    let conn = support::chroot("recipe-try").await;
    let (a, b) = (support::connect(&conn).await, support::connect(&conn).await);
    let held = take(&a, "/locks/x", "host-a").await;
    match Lock::new(&b, "/locks/x", "host-b")
        .try_acquire()
        .await
        .unwrap()
    {
        Attempt::Busy(Some(holder)) => assert_eq!(holder.identifier, "host-a"),
        other => panic!("a busy lock was {other:?}"),
    }
    // The try left no contender behind.
    assert_eq!(queue(&a, "/locks/x").await, ["host-a"]);
    held.release(&a).await.unwrap();
    let taken = take(&b, "/locks/x", "host-b").await;
    assert_eq!(queue(&a, "/locks/x").await, ["host-b"]);
    taken.release(&b).await.unwrap();
}

#[tokio::test]
async fn waiters_are_served_first_come_first_served() {
    let conn = support::chroot("recipe-fifo").await;
    let admin = support::connect(&conn).await;
    let held = take(&admin, "/l", "holder").await;
    let (send, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    let mut want = vec!["holder"];
    for who in ["w1", "w2", "w3", "w4"] {
        tasks.push(waiter(&conn, "/l", who, send.clone()));
        want.push(who);
        wait_queue(&admin, "/l", &want).await;
    }
    held.release(&admin).await.unwrap();
    let mut served = Vec::new();
    for _ in 0..4 {
        let next = tokio::time::timeout(LIMIT, order.recv()).await.unwrap();
        served.push(next.unwrap());
    }
    assert_eq!(served, ["w1", "w2", "w3", "w4"]);
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn a_waiter_leaving_the_middle_of_the_queue_loses_no_wake_up() {
    let conn = support::chroot("recipe-leave").await;
    let admin = support::connect(&conn).await;
    let held = take(&admin, "/l", "holder").await;
    // The middle waiter gives up when told to.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let middle = {
        let conn = conn.clone();
        tokio::spawn(async move {
            let client = support::connect(&conn).await;
            let mut cancel = Box::pin(async move {
                let _ = stopped.await;
            });
            let got = Lock::new(&client, "/l", "middle")
                .acquire(deadline(), &mut cancel)
                .await;
            assert!(got.unwrap().is_none(), "a cancelled wait took the lock");
            drop(client);
        })
    };
    wait_queue(&admin, "/l", &["holder", "middle"]).await;
    let (send, mut order) = tokio::sync::mpsc::unbounded_channel();
    let last = waiter(&conn, "/l", "last", send);
    wait_queue(&admin, "/l", &["holder", "middle", "last"]).await;
    stop.send(()).unwrap();
    middle.await.unwrap();
    wait_queue(&admin, "/l", &["holder", "last"]).await;
    // The last waiter now watches the holder: its release wakes it.
    held.release(&admin).await.unwrap();
    let got = tokio::time::timeout(LIMIT, order.recv()).await.unwrap();
    assert_eq!(got.as_deref(), Some("last"));
    last.await.unwrap();
}

#[tokio::test]
async fn a_dead_holders_lock_goes_to_the_next_waiter_and_a_deadline_leaves_the_queue() {
    let conn = support::chroot("recipe-dead").await;
    let admin = support::connect(&conn).await;
    let dying = support::connect(&conn).await;
    let _held = take(&dying, "/l", "dying").await;
    // A wait that reaches its deadline leaves no contender behind.
    let short = Instant::now() + Duration::from_millis(300);
    let lock = Lock::new(&admin, "/l", "patient");
    let none = lock.acquire(short, &mut std::future::pending()).await;
    assert!(none.unwrap().is_none());
    assert_eq!(queue(&admin, "/l").await, ["dying"]);
    let (send, mut order) = tokio::sync::mpsc::unbounded_channel();
    let next = waiter(&conn, "/l", "next", send);
    wait_queue(&admin, "/l", &["dying", "next"]).await;
    drop(dying);
    let got = tokio::time::timeout(LIMIT, order.recv()).await.unwrap();
    assert_eq!(got.as_deref(), Some("next"));
    next.await.unwrap();
}

#[tokio::test]
async fn a_leftover_of_our_own_session_is_removed_not_waited_for() {
    let conn = support::chroot("recipe-leftover").await;
    let client = support::connect(&conn).await;
    // A contender of this session whose owner forgot it (a dropped future).
    let forgotten = take(&client, "/l", "forgotten").await;
    let again = take(&client, "/l", "again").await;
    assert_eq!(queue(&client, "/l").await, ["again"]);
    again.release(&client).await.unwrap();
    drop(forgotten);
}

#[tokio::test]
async fn wait_for_any_wakes_when_one_holder_goes() {
    let conn = support::chroot("recipe-any").await;
    let (a, b) = (support::connect(&conn).await, support::connect(&conn).await);
    let one = take(&a, "/one", "a").await;
    let two = take(&a, "/two", "a").await;
    let nodes = vec![one.node().to_string(), two.node().to_string()];
    let release = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        two.release(&a).await.unwrap();
    };
    let mut never = std::future::pending();
    let (woken, ()) = tokio::join!(wait_for_any(&b, &nodes, deadline(), &mut never), release);
    assert_eq!(woken.unwrap(), Some(1));
    one.release(&a).await.unwrap();
}

/// Takes a lease of `/s` (K = `k`) as `who` (one must be free).
async fn lease(client: &Client, k: u32, who: &str, record: Option<&[u8]>) -> LeaseGuard {
    match Semaphore::new(client, "/s", who, k)
        .try_acquire(record)
        .await
        .unwrap()
    {
        Attempt::Acquired(lease) => lease,
        Attempt::Busy(holders) => panic!("/s is full: {holders:?}"),
    }
}

#[tokio::test]
async fn at_most_k_leases_are_held_at_once() {
    let conn = support::chroot("recipe-k").await;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (conn, inside, most) = (conn.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                let client = support::connect(&conn).await;
                let sem = Semaphore::new(&client, "/s", &format!("taker {i}"), 3);
                let mut never = std::future::pending();
                let got = sem.acquire(None, deadline(), &mut never).await;
                let lease = got.unwrap().expect("a lease in time");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(leases(&client, "/s").await.unwrap().len() <= 3);
                tokio::time::sleep(Duration::from_millis(50)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release(&client).await.unwrap();
                drop(client);
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} leases held at once");
}

#[tokio::test]
async fn a_full_semaphore_names_its_holders_and_a_record_goes_with_its_lease() {
    let conn = support::chroot("recipe-full").await;
    let client = support::connect(&conn).await;
    let first = lease(&client, 1, "host-a", Some(b"{\"in-flight\": 1}")).await;
    let record = first.record().unwrap().to_string();
    assert_eq!(record, format!("{}/{}", records_path("/s"), first.name()));
    let (data, _) = client.get_data(&record).await.unwrap();
    assert_eq!(data, b"{\"in-flight\": 1}");
    match Semaphore::new(&client, "/s", "host-b", 1)
        .try_acquire(None)
        .await
        .unwrap()
    {
        Attempt::Busy(found) => {
            assert_eq!(found, 1);
            let named = holders(&client, "/s").await.unwrap();
            let who: Vec<_> = named.iter().map(|h| h.identifier.as_str()).collect();
            assert_eq!(who, ["host-a"]);
        }
        Attempt::Acquired(lease) => panic!("a full semaphore gave {lease:?}"),
    }
    first.release(&client).await.unwrap();
    assert!(client.check_stat(&record).await.unwrap().is_none());
    assert!(holders(&client, "/s").await.unwrap().is_empty());
}

/// The number of children of `path` (0 when it does not exist).
async fn count(client: &Client, path: &str) -> usize {
    client
        .check_stat(path)
        .await
        .unwrap()
        .map_or(0, |s| s.num_children as usize)
}

#[tokio::test]
async fn waiters_queue_for_the_guard_one_per_turnstile() {
    let conn = support::chroot("recipe-turnstile").await;
    let client = support::connect(&conn).await;
    let held = lease(&client, 1, "holder", None).await;
    let names = (0..).map(|i| format!("waiter {i}"));
    let first = "waiter a".to_string();
    let turnstile = turnstile_path("/s", &first);
    let same = names
        .clone()
        .find(|w| turnstile_path("/s", w) == turnstile)
        .unwrap();
    let other = names
        .clone()
        .find(|w| turnstile_path("/s", w) != turnstile)
        .unwrap();
    let wait = |who: String| {
        let conn = conn.clone();
        tokio::spawn(async move {
            let client = support::connect(&conn).await;
            let sem = Semaphore::new(&client, "/s", &who, 1);
            let got = sem
                .acquire(None, deadline(), &mut std::future::pending())
                .await;
            got.unwrap()
                .expect("a lease in time")
                .release(&client)
                .await
                .unwrap();
            drop(client);
        })
    };
    let mut tasks = vec![wait(first.clone())];
    support::agent::wait_for_async("the first waiter holds the guard", LIMIT, || async {
        (count(&client, "/s-__lock__").await == 1).then_some(())
    })
    .await;
    tasks.push(wait(same));
    tasks.push(wait(other));
    // The waiter sharing the first one's turnstile waits in it; the other queues for the guard.
    support::agent::wait_for_async("both queued", LIMIT, || async {
        let queued = (
            count(&client, &turnstile).await,
            count(&client, "/s-__lock__").await,
        );
        (queued == (2, 2)).then_some(())
    })
    .await;
    held.release(&client).await.unwrap();
    for task in tasks {
        tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
    }
    assert_eq!(count(&client, "/s").await, 0);
    assert_eq!(count(&client, "/s-__lock__").await, 0);
    assert_eq!(count(&client, &turnstile).await, 0);
}

#[tokio::test]
async fn a_try_does_not_queue_behind_more_takers_than_leases_are_free() {
    let conn = support::chroot("recipe-try-queue").await;
    let client = support::connect(&conn).await;
    let held = lease(&client, 2, "holder", None).await;
    // One taker queues for the guard (a contender made by hand), one lease is free.
    let mode = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let queued = client
        .create("/s-__lock__/taker__lock__", b"taker", &mode)
        .await
        .unwrap();
    let path = format!("/s-__lock__/taker__lock__{}", queued.1);
    let taker = Semaphore::new(&client, "/s", "host-b", 2);
    let tried = tokio::time::timeout(LIMIT, taker.try_acquire(None)).await;
    let tried = tried.unwrap().unwrap();
    assert!(matches!(tried, Attempt::Busy(1)), "{tried:?}");
    assert_eq!(count(&client, "/s-__lock__").await, 1);
    client.delete(&path, None).await.unwrap();
    let second = lease(&client, 2, "host-b", None).await;
    second.release(&client).await.unwrap();
    held.release(&client).await.unwrap();
}

#[tokio::test]
async fn a_stored_max_leases_is_rewritten_to_the_takers() {
    let conn = support::chroot("recipe-max").await;
    let client = support::connect(&conn).await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create("/s", b"5", &open).await.unwrap();
    let held = lease(&client, 2, "host-a", None).await;
    assert_eq!(client.get_data("/s").await.unwrap().0, b"2");
    let second = lease(&client, 2, "host-b", None).await;
    let third = Semaphore::new(&client, "/s", "host-c", 2);
    let third = third.try_acquire(None).await.unwrap();
    assert!(matches!(third, Attempt::Busy(2)), "{third:?}");
    held.release(&client).await.unwrap();
    second.release(&client).await.unwrap();
}

/// kazoo's side: `lock PATH` holds `Lock(PATH, "kazoo")`; `sem PATH K` holds a lease of
/// `Semaphore(PATH, "kazoo", max_leases=K)`; `try PATH` and `trysem PATH K` print whether
/// kazoo's non-blocking acquire of that lock or semaphore got it. Each prints a line, and holds until its stdin closes.
const KAZOO: &str = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1])
zk.start(timeout=20)
mode, path = sys.argv[2], sys.argv[3]
if mode == "sem":
    held = zk.Semaphore(path, "kazoo", max_leases=int(sys.argv[4]))
    assert held.acquire(timeout=20)
    print("held", flush=True)
elif mode == "trysem":
    held = zk.Semaphore(path, "kazoo", max_leases=int(sys.argv[4]))
    print("got" if held.acquire(blocking=False) else "busy", flush=True)
elif mode == "lock":
    held = zk.Lock(path, "kazoo")
    assert held.acquire(timeout=20)
    print("held", flush=True)
else:
    held = zk.Lock(path, "kazoo")
    print("got" if held.acquire(blocking=False) else "busy", flush=True)
sys.stdin.read()
held.release()
zk.stop()
"#;

/// True if python3 has kazoo; in CI (`CI` set) its absence fails the test instead.
fn kazoo_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import kazoo"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with kazoo is required in CI (scripts/lib.sh zkd_ensure_kazoo)"
        );
        eprintln!("SKIPPED: python3 with kazoo is not available (pip install kazoo)");
    }
    ok
}

/// Runs the kazoo side with `args`; its first line, and the process (holding until dropped).
async fn kazoo(conn: &str, args: &[&str]) -> (String, tokio::process::Child) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", KAZOO, conn])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot run python3");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(LIMIT, out.next_line()).await;
    (line.unwrap().unwrap().unwrap_or_default(), child)
}

/// Closes the kazoo side's stdin: it gives back what it holds and ends its session.
async fn release(mut child: tokio::process::Child) {
    drop(child.stdin.take());
    let ended = tokio::time::timeout(LIMIT, child.wait()).await;
    assert!(ended.unwrap().unwrap().success(), "the kazoo side failed");
}

#[tokio::test]
async fn kazoos_lock_and_ours_exclude_each_other() {
    if !kazoo_available() {
        return;
    }
    let conn = support::chroot("recipe-kazoo-lock").await;
    let client = support::connect(&conn).await;
    let (line, holder) = kazoo(&conn, &["lock", "/agent-locks/a"]).await;
    assert_eq!(line, "held");
    match Lock::new(&client, "/agent-locks/a", "ours")
        .try_acquire()
        .await
        .unwrap()
    {
        Attempt::Busy(Some(holder)) => assert_eq!(holder.identifier, "kazoo"),
        other => panic!("kazoo's lock was {other:?}"),
    }
    let lock = Lock::new(&client, "/agent-locks/a", "ours");
    let mut never = std::future::pending();
    let (ours, ()) = tokio::join!(lock.acquire(deadline(), &mut never), release(holder));
    let ours = ours
        .unwrap()
        .expect("the lock once kazoo's holder gave it back");
    let (line, tried) = kazoo(&conn, &["try", "/agent-locks/a"]).await;
    assert_eq!(line, "busy");
    release(tried).await;
    ours.release(&client).await.unwrap();
}

#[tokio::test]
async fn a_kazoo_lease_counts_against_ours() {
    if !kazoo_available() {
        return;
    }
    let conn = support::chroot("recipe-kazoo-sem").await;
    let client = support::connect(&conn).await;
    let (line, holder) = kazoo(&conn, &["sem", "/s", "2"]).await;
    assert_eq!(line, "held");
    let ours = lease(&client, 2, "ours", None).await;
    let full = Semaphore::new(&client, "/s", "third", 2);
    match full.try_acquire(None).await.unwrap() {
        Attempt::Busy(found) => {
            assert_eq!(found, 2);
            let named = holders(&client, "/s").await.unwrap();
            let mut who: Vec<_> = named.iter().map(|h| h.identifier.as_str()).collect();
            who.sort();
            assert_eq!(who, ["kazoo", "ours"]);
        }
        Attempt::Acquired(lease) => panic!("a third lease of K = 2: {lease:?}"),
    }
    let sem = Semaphore::new(&client, "/s", "third", 2);
    let mut never = std::future::pending();
    let (third, ()) = tokio::join!(sem.acquire(None, deadline(), &mut never), release(holder));
    let third = third
        .unwrap()
        .expect("a lease once kazoo's holder gave it back");
    // And kazoo, counting our two leases, finds none free.
    let (line, tried) = kazoo(&conn, &["trysem", "/s", "2"]).await;
    assert_eq!(line, "busy");
    release(tried).await;
    third.release(&client).await.unwrap();
    ours.release(&client).await.unwrap();
}
