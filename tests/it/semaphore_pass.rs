//! Passing leases on (`zk::semaphore`, docs/design.md, "Exclusion"): the guard's holder that finds
//! several leases free passes them to the takers just after it in the guard's queue, who take
//! them without the guard. Each test queues real takers (one ZooKeeper session each) behind a
//! contender that the test controls, so the order of the queue is known.
//! - a lease is passed past a contender that never acts, as far as the free leases go;
//! - never past a contender that does not watch for one (a kazoo taker);
//! - never beyond `max_leases`, leases held by others counted;
//! - a taker whose `max_leases` differs from the semaphore's does not take a passed lease: it
//!   queues again and makes the semaphore hold its own value, as without passing;
//! - the guard's holder woken by leases given back makes its own at once, and passes on only
//!   what is free after it; one whose `max_leases` is lower than the leases held waits until
//!   fewer than its own are held.

use crate::support;

use std::time::Duration;

use tokio::task::JoinHandle;
use zkdeployment::zk::lock::{BATON_MARKER, LOCK_MARKER};
use zkdeployment::zk::semaphore::{acquire_waiting, leases, lock_path, Lease};
use zkdeployment::zk::Client;
use zookeeper_client::{Acls, CreateMode};

/// The semaphore's path in each test's chroot.
const SEM: &str = "/sem";

/// How long a taker waits at most (a test that needs longer has failed).
const LIMIT: Duration = Duration::from_secs(30);

/// Creates a contender in the guard's queue that never acts (kept until deleted): named as
/// a taker that watches for a passed lease (`marked`), or as kazoo names its contenders.
async fn inert_contender(client: &Client, marked: bool) -> String {
    let marker = if marked { BATON_MARKER } else { LOCK_MARKER };
    let prefix = format!(
        "{}/{}{marker}",
        lock_path(SEM),
        uuid::Uuid::new_v4().simple()
    );
    let mode = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, seq) = client.create(&prefix, b"inert", &mode).await.unwrap();
    format!("{prefix}{seq}")
}

/// The number of contenders in the guard's queue.
async fn queued(client: &Client) -> usize {
    client
        .list_children(&lock_path(SEM))
        .await
        .map(|c| c.len())
        .unwrap_or(0)
}

/// Waits (bounded) until the guard's queue has `n` contenders.
async fn wait_queued(client: &Client, n: usize) {
    let deadline = std::time::Instant::now() + LIMIT;
    while queued(client).await != n {
        assert!(
            std::time::Instant::now() < deadline,
            "the guard's queue never held {n} contenders"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A taker's task: its session and its lease once it holds one.
type Taker = JoinHandle<(Client, Lease)>;

/// A taker on its own session, queued (and waiting) for a lease of `max_leases`; the
/// caller waits until its contender is the `n`th in the queue.
async fn taker(conn: &str, admin: &Client, max_leases: u32, n: usize) -> Taker {
    let client = support::connect(conn).await;
    let task = tokio::spawn(async move {
        let got = acquire_waiting(&client, SEM, "taker", max_leases, LIMIT, None, None).await;
        let lease = got.unwrap().expect("a lease within the limit");
        // The session (and with it the lease) lives as long as the test keeps it.
        (client, lease)
    });
    wait_queued(admin, n).await;
    task
}

/// The guard's node, and the first contender (one of the test's): the takers queue behind it.
async fn blocked_guard(admin: &Client) -> String {
    admin
        .mkdir(
            &lock_path(SEM),
            &zookeeper_client::CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    inert_contender(admin, false).await
}

/// Waits for a taker (bounded).
async fn holds(task: Taker) -> (Client, Lease) {
    tokio::time::timeout(LIMIT, task)
        .await
        .expect("the taker got no lease")
        .unwrap()
}

/// Asserts that `task` still waits half a second on (`why` says what it would mean), with
/// `held` leases out.
async fn still_waiting(admin: &Client, task: &Taker, held: usize, why: &str) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!task.is_finished(), "{why}");
    assert_eq!(leases(admin, SEM).await.unwrap().len(), held);
}

/// Whether `node` exists.
async fn exists(client: &Client, node: &str) -> bool {
    client.check_stat(node).await.unwrap().is_some()
}

#[tokio::test]
async fn a_lease_is_passed_past_a_contender_that_never_acts() {
    let conn = support::chroot("sem-pass-past").await;
    let admin = support::connect(&conn).await;
    let blocker = blocked_guard(&admin).await;
    let first = taker(&conn, &admin, 5, 2).await;
    let second = taker(&conn, &admin, 5, 3).await;
    let inert = inert_contender(&admin, true).await;
    wait_queued(&admin, 4).await;
    let third = taker(&conn, &admin, 5, 5).await;
    admin.delete(&blocker, None).await.unwrap();
    // The first takes the guard and passes the free leases to the three after it (the inert
    // one among them): the third holds one although a contender before it never left.
    let leased = [holds(first).await, holds(second).await, holds(third).await];
    assert!(
        exists(&admin, &inert).await,
        "the inert contender is still queued"
    );
    let held = leases(&admin, SEM).await.unwrap();
    assert_eq!(held.len(), 3, "{held:?}");
    for (_, lease) in &leased {
        assert!(held.iter().any(|n| n == lease.name()), "{lease:?}");
    }
}

#[tokio::test]
async fn no_lease_is_passed_past_a_contender_that_does_not_watch_for_one() {
    let conn = support::chroot("sem-pass-kazoo").await;
    let admin = support::connect(&conn).await;
    let blocker = blocked_guard(&admin).await;
    let first = taker(&conn, &admin, 5, 2).await;
    // As kazoo names its contenders: it would take its turn as the guard's holder only.
    let kazoo = inert_contender(&admin, false).await;
    wait_queued(&admin, 3).await;
    let second = taker(&conn, &admin, 5, 4).await;
    admin.delete(&blocker, None).await.unwrap();
    let _first = holds(first).await;
    // The second waits behind the kazoo contender, which holds the guard from now on.
    let why = "a lease was passed past kazoo's contender";
    still_waiting(&admin, &second, 1, why).await;
    admin.delete(&kazoo, None).await.unwrap();
    let _second = holds(second).await;
    assert_eq!(leases(&admin, SEM).await.unwrap().len(), 2);
}

#[tokio::test]
async fn leases_are_passed_only_as_far_as_max_leases_goes() {
    let conn = support::chroot("sem-pass-count").await;
    let admin = support::connect(&conn).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    admin.create(SEM, b"3", &open).await.unwrap();
    // A lease held by someone else (as kazoo's are: an ephemeral child).
    let other = format!("{SEM}/{}", uuid::Uuid::new_v4().simple());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    admin.create(&other, b"someone", &ephemeral).await.unwrap();
    let blocker = blocked_guard(&admin).await;
    let first = taker(&conn, &admin, 3, 2).await;
    let second = taker(&conn, &admin, 3, 3).await;
    let third = taker(&conn, &admin, 3, 4).await;
    admin.delete(&blocker, None).await.unwrap();
    // One lease held, three at most: the first takes one and passes the last free one on.
    let _first = holds(first).await;
    let _second = holds(second).await;
    let why = "more than max_leases were handed out";
    still_waiting(&admin, &third, 3, why).await;
    // Someone gives one back: the third, first in the guard's queue now, takes it.
    admin.delete(&other, None).await.unwrap();
    let _third = holds(third).await;
    assert_eq!(leases(&admin, SEM).await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_taker_with_another_max_leases_queues_again_instead_of_taking_a_passed_lease() {
    let conn = support::chroot("sem-pass-change").await;
    let admin = support::connect(&conn).await;
    let blocker = blocked_guard(&admin).await;
    let first = taker(&conn, &admin, 5, 2).await;
    // A taker of the next version, whose max-parallel is 4: it reads the semaphore's 5 while
    // it waits (the first taker makes the node hold 5 when it takes the guard).
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    admin.create(SEM, b"5", &open).await.unwrap();
    let second = taker(&conn, &admin, 4, 3).await;
    admin.delete(&blocker, None).await.unwrap();
    let _first = holds(first).await;
    let _second = holds(second).await;
    // It took its lease as the guard's holder, so the semaphore holds its value.
    let (data, _) = admin.get_data(SEM).await.unwrap();
    assert_eq!(data, b"4");
    assert_eq!(leases(&admin, SEM).await.unwrap().len(), 2);
    assert_eq!(queued(&admin).await, 0);
}

/// The contenders in the guard's queue, in queue order (full paths).
async fn contenders(client: &Client) -> Vec<String> {
    let guard = lock_path(SEM);
    let mut names = client.list_children(&guard).await.unwrap();
    names.sort_by_key(|n| n.rsplit("__lock__").next().unwrap_or_default().to_string());
    names.into_iter().map(|n| format!("{guard}/{n}")).collect()
}

#[tokio::test]
async fn a_lease_passed_under_a_max_leases_since_rewritten_is_not_taken() {
    let conn = support::chroot("sem-pass-stale").await;
    let admin = support::connect(&conn).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    admin.create(SEM, b"3", &open).await.unwrap();
    let blocker = blocked_guard(&admin).await;
    // Both takers read the semaphore at data version 0 when they queued.
    let second = taker(&conn, &admin, 3, 2).await;
    let third = taker(&conn, &admin, 3, 3).await;
    // Rewritten since (as a holder with another max_leases would, then back): data version
    // 2. The version a taker read is no longer the semaphore's: it reads its note.
    admin.set_data(SEM, b"4", None).await.unwrap();
    admin.set_data(SEM, b"3", None).await.unwrap();
    let queue = contenders(&admin).await;
    // The test passes leases as a holder would: to the first taker under the data version
    // before the rewrites (that taker must queue again, at the back), then to the next
    // under the current one (it takes its lease past the blocker).
    admin
        .set_data(&queue[1], b"3 0 passed by the test", None)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let now = contenders(&admin).await;
        if now.len() == 3 && !now.contains(&queue[1]) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "queue {now:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    admin
        .set_data(&queue[2], b"3 2 passed by the test", None)
        .await
        .unwrap();
    let _third = holds(third).await;
    let why = "a lease passed under a stale data version was taken";
    still_waiting(&admin, &second, 1, why).await;
    admin.delete(&blocker, None).await.unwrap();
    let _second = holds(second).await;
    assert_eq!(leases(&admin, SEM).await.unwrap().len(), 2);
}

/// The semaphore made with `max_leases` as its data, and `n` leases held by others (as
/// kazoo's are: ephemeral children, here of `admin`'s session); their nodes.
async fn held_by_others(admin: &Client, max_leases: u32, n: usize) -> Vec<String> {
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let data = max_leases.to_string();
    admin.create(SEM, data.as_bytes(), &open).await.unwrap();
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut others = Vec::new();
    for _ in 0..n {
        let other = format!("{SEM}/{}", uuid::Uuid::new_v4().simple());
        admin.create(&other, b"someone", &ephemeral).await.unwrap();
        others.push(other);
    }
    others
}

#[tokio::test]
async fn a_guard_holder_woken_by_leases_given_back_takes_one_and_passes_only_the_free_ones() {
    let conn = support::chroot("sem-freed").await;
    let admin = support::connect(&conn).await;
    // Every lease held by others.
    let others = held_by_others(&admin, 3, 3).await;
    // Queued behind a contender first (so the first taker knows, once first, that no lease
    // was passed to it: it may pass leases on).
    let blocker = blocked_guard(&admin).await;
    let first = taker(&conn, &admin, 3, 2).await;
    let second = taker(&conn, &admin, 3, 3).await;
    let third = taker(&conn, &admin, 3, 4).await;
    admin.delete(&blocker, None).await.unwrap();
    // The first holds the guard and waits, watching the leases (the others watch the
    // contender before theirs).
    let why = "a lease was made with every lease held";
    still_waiting(&admin, &first, 3, why).await;
    // Two given back at once: the first, woken by the change, makes its lease without
    // reading the leases first, then passes on what the list after its lease found free
    // (one), and no more.
    let mut writer = admin.new_multi_writer();
    writer.add_delete(&others[0], None).unwrap();
    writer.add_delete(&others[1], None).unwrap();
    writer.commit().await.unwrap();
    let _first = holds(first).await;
    let _second = holds(second).await;
    let why = "more than max_leases were handed out";
    still_waiting(&admin, &third, 3, why).await;
    // One more given back: the third, first in the queue now, takes it.
    admin.delete(&others[2], None).await.unwrap();
    let _third = holds(third).await;
    assert_eq!(leases(&admin, SEM).await.unwrap().len(), 3);
    // Its contender goes after its lease (given back once the lease is made).
    wait_queued(&admin, 0).await;
}

#[tokio::test]
async fn a_guard_holder_whose_max_leases_is_lower_waits_until_fewer_are_held() {
    let conn = support::chroot("sem-lowered").await;
    let admin = support::connect(&conn).await;
    // Five leases held under max_leases 5 (by the hosts of the last version).
    let others = held_by_others(&admin, 5, 5).await;
    let blocker = blocked_guard(&admin).await;
    // A taker of the next version, whose max-parallel is 2: it makes the semaphore hold 2,
    // and waits while 2 or more are held.
    let first = taker(&conn, &admin, 2, 2).await;
    admin.delete(&blocker, None).await.unwrap();
    let why = "a lease was made with more than max_leases held";
    still_waiting(&admin, &first, 5, why).await;
    assert_eq!(admin.get_data(SEM).await.unwrap().0, b"2");
    // One given back: four held, still more than two.
    admin.delete(&others[0], None).await.unwrap();
    still_waiting(&admin, &first, 4, why).await;
    admin.delete(&others[1], None).await.unwrap();
    admin.delete(&others[2], None).await.unwrap();
    still_waiting(&admin, &first, 2, why).await;
    // Down to one: the taker's turn.
    admin.delete(&others[3], None).await.unwrap();
    let _first = holds(first).await;
    assert_eq!(leases(&admin, SEM).await.unwrap().len(), 2);
    wait_queued(&admin, 0).await;
}
