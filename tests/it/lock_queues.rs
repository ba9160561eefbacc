//! Waiting in several node-lock queues at once (`zk::lock::acquire_queued_any`, docs/design.md,
//! "Exclusion"): a host whose every wanted node is busy queues in all of them, takes
//! the first whose turn comes and leaves the other queues; whoever queued first for a node
//! gets it first; giving up leaves no contender behind. And a try of a busy lock reads only
//! its first contender, however long the queue.

use crate::support;

use std::time::Duration;

use zkdeployment::zk::lock::{acquire_queued_any, try_lock, Extra, Held, TryLock};
use zkdeployment::zk::Client;
use zookeeper_client::{Acls, CreateMode};

/// The identifiers of the contenders of the lock at `path`, in queue order.
async fn queue(client: &Client, path: &str) -> Vec<String> {
    let contenders = zkdeployment::zk::lock::contenders(client, path)
        .await
        .unwrap();
    contenders.into_iter().map(|c| c.identifier).collect()
}

/// Takes the lock at `path` as `who` (it must be free).
async fn take(client: &Client, path: &str, who: &str) -> Held {
    match try_lock(client, path, who).await.unwrap() {
        TryLock::Acquired(held) => held,
        TryLock::Busy { holder } => panic!("{path} is held by {}", holder.identifier),
    }
}

/// What a waiter's task took (bounded wait): its client, the place's index and the lock,
/// its other queues left (the deletes' answers, the holder's to await, awaited here).
async fn taken(
    task: tokio::task::JoinHandle<(Client, Option<(usize, Held)>)>,
) -> (Client, usize, Held) {
    let (client, got) = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the waiter took a lock")
        .unwrap();
    let (index, mut held) = got.expect("the waiter took a lock before its limit");
    std::mem::take(&mut held.leaving)
        .finish(&client)
        .await
        .unwrap();
    (client, index, held)
}

/// Waits (bounded) until the queue of `path` is `want`.
async fn wait_queue(client: &Client, path: &str, want: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = queue(client, path).await;
        if now == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path}: queue {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_host_waits_in_every_queue_takes_the_first_freed_and_leaves_the_others() {
    let conn = support::chroot("lock-queues").await;
    let (x, y) = ("/agent-locks/x", "/agent-locks/y");
    let holder = support::connect(&conn).await;
    let held_x = take(&holder, x, "hx").await;
    let held_y = take(&holder, y, "hy").await;

    // W queues for x and y; then V queues for y only, behind W.
    let w_client = support::connect(&conn).await;
    let w = tokio::spawn(async move {
        let places = [(x, Extra::default()), (y, Extra::default())];
        let got = acquire_queued_any(&w_client, &places, "w", Duration::from_secs(60)).await;
        (w_client, got.unwrap())
    });
    wait_queue(&holder, x, &["hx", "w"]).await;
    wait_queue(&holder, y, &["hy", "w"]).await;
    let v_client = support::connect(&conn).await;
    let v = tokio::spawn(async move {
        let places = [(y, Extra::default())];
        let got = acquire_queued_any(&v_client, &places, "v", Duration::from_secs(60)).await;
        (v_client, got.unwrap())
    });
    wait_queue(&holder, y, &["hy", "w", "v"]).await;

    // y is freed: W (first in line) takes it and leaves x's queue; V still waits.
    held_y.release(&holder).await.unwrap();
    let (w_client, index, w_held) = taken(w).await;
    assert_eq!(index, 1, "W took x, which was never freed");
    assert_eq!(queue(&holder, x).await, ["hx"], "W is still queued for x");
    assert_eq!(queue(&holder, y).await, ["w", "v"]);
    assert!(!v.is_finished(), "V took y while W held it");

    // W lets y go: V's turn.
    w_held.release(&w_client).await.unwrap();
    let (_v_client, got) = tokio::time::timeout(Duration::from_secs(30), v)
        .await
        .expect("V took y")
        .unwrap();
    assert_eq!(got.expect("V took y before its limit").0, 0);
    assert_eq!(queue(&holder, y).await, ["v"]);
    held_x.release(&holder).await.unwrap();
}

#[tokio::test]
async fn a_quick_waiter_takes_the_lock_when_the_holder_goes_not_when_a_waiter_does() {
    let conn = support::chroot("lock-queues-quick").await;
    let x = "/agent-locks/x";
    let holder = support::connect(&conn).await;
    let held = take(&holder, x, "hx").await;
    holder.set_data(x, b"the lock's data", None).await.unwrap();
    // B queues behind the holder, then C (quick) behind B.
    let b_client = support::connect(&conn).await;
    let prefix = format!("{x}/0123456789abcdef__lock__");
    let (_, sequence) = b_client
        .create(
            &prefix,
            b"b",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let b_node = format!("{prefix}{sequence}");
    let c_client = support::connect(&conn).await;
    let c = tokio::spawn(async move {
        let extra = Extra {
            read: Some(x),
            quick: true,
            ..Extra::default()
        };
        let got = acquire_queued_any(&c_client, &[(x, extra)], "c", Duration::from_secs(60)).await;
        (c_client, got.unwrap())
    });
    wait_queue(&holder, x, &["hx", "b", "c"]).await;
    // B leaves without ever holding the lock: C, now next to the holder, still waits.
    b_client.delete(&b_node, None).await.unwrap();
    wait_queue(&holder, x, &["hx", "c"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!c.is_finished(), "C took the lock while hx held it");
    // The holder goes: C takes the lock without listing the queue again, with the lock's
    // data as read while hx held it.
    held.release(&holder).await.unwrap();
    let (_c_client, got) = tokio::time::timeout(Duration::from_secs(30), c)
        .await
        .expect("C took the lock")
        .unwrap();
    let (_, c_held) = got.expect("C took the lock before its limit");
    assert!(c_held.read.is_none(), "{c_held:?}");
    let (data, _) = &**c_held.read_before.as_ref().expect("the data read before");
    assert_eq!(data, b"the lock's data");
    assert_eq!(queue(&holder, x).await, ["c"]);
}

#[tokio::test]
async fn giving_up_leaves_no_contender_in_any_queue() {
    let conn = support::chroot("lock-queues-limit").await;
    let (x, y) = ("/agent-locks/x", "/agent-locks/y");
    let holder = support::connect(&conn).await;
    let _held_x = take(&holder, x, "hx").await;
    let _held_y = take(&holder, y, "hy").await;
    let waiter = support::connect(&conn).await;
    let places = [(x, Extra::default()), (y, Extra::default())];
    let got = acquire_queued_any(&waiter, &places, "w", Duration::from_millis(500))
        .await
        .unwrap();
    assert!(got.is_none(), "took a lock held by another");
    assert_eq!(queue(&holder, x).await, ["hx"]);
    assert_eq!(queue(&holder, y).await, ["hy"]);
}

/// The agent itself: with both its nodes' locks held by another, it waits in both queues
/// (before, it watched the holders and queued nowhere), takes the node freed first, and
/// queues again for the other once its first step is done.
#[tokio::test]
async fn an_agent_with_every_node_busy_waits_in_all_their_queues() {
    use support::agent::{fleet, lines, v, wait_for_async};
    const LIMIT: Duration = Duration::from_secs(90);
    let hosts = fleet("lock-queues-agent", 1).await;
    let h = &hosts[0];
    h.tree(
        "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n  /b : foo\n    version = '1.0'\n    /deploy\n      /h1\n",
        v("r2"),
    )
    .await;
    let (a, b) = ("/agent-locks/acme,a", "/agent-locks/acme,b");
    let held_a = take(&h.client, a, "holder").await;
    let held_b = take(&h.client, b, "holder").await;
    let times = h.scratch("times.txt");
    let tp = times.display().to_string();
    let mut run = h.spawn("deploy", &[], &[("ZK_TEST_TIMES", &tp)]);
    let queued = |q: Vec<String>| q.len() == 2 && q[0] == "holder";
    wait_for_async("the host to queue for both nodes", LIMIT, || async {
        (queued(queue(&h.client, a).await) && queued(queue(&h.client, b).await)).then_some(())
    })
    .await;
    assert!(lines(&times).is_empty(), "{:?}", lines(&times));
    // b is freed: its step runs, and the host queues for a again (a is still held).
    held_b.release(&h.client).await.unwrap();
    wait_for_async("b's step, then the queue for a", LIMIT, || async {
        let ran = lines(&times)
            .iter()
            .any(|l| l.starts_with("end") && l.contains("/acme/b"));
        (ran && queued(queue(&h.client, a).await)).then_some(())
    })
    .await;
    held_a.release(&h.client).await.unwrap();
    assert_eq!(run.wait(LIMIT).await, 0, "{}", run.output());
    let starts: Vec<String> = lines(&times)
        .into_iter()
        .filter(|l| l.starts_with("start"))
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(starts[0].contains("/acme/b"), "{starts:?}");
}

/// Creates a contender of the lock at `path` as a kazoo client would, with `who` as data;
/// gives its path.
async fn queue_up(client: &Client, path: &str, who: &str) -> String {
    let mode = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let name = format!("{path}/{}__lock__", uuid::Uuid::new_v4().simple());
    let (_, sequence) = client.create(&name, who.as_bytes(), &mode).await.unwrap();
    format!("{name}{sequence}")
}

#[tokio::test]
async fn a_try_of_a_busy_lock_reads_only_its_first_contender() {
    // Its own server: the requests it receives are this test's.
    let server = support::ZkServer::start();
    let port = server.port;
    let conn = server.connect_string();
    let path = "/agent-locks/long";
    let others = support::connect(&conn).await;
    let held = take(&others, path, "holder").await;
    for i in 0..60 {
        queue_up(&others, path, &format!("waiter {i}")).await;
    }
    let me = support::connect(&conn).await;
    // The fewest of a few tries (an idle session's ping may land in one window).
    let mut fewest = i64::MAX;
    for _ in 0..3 {
        let before = support::packets_received(port);
        match try_lock(&me, path, "me").await.unwrap() {
            TryLock::Busy { holder } => assert_eq!(holder.identifier, "holder"),
            TryLock::Acquired(_) => panic!("{path} taken past its holder"),
        }
        fewest = fewest.min(support::packets_received(port) - before);
    }
    // Five in two round trips (our create, the list and the lock node's read; then the
    // first contender's read and our delete), not one read per contender, and no second
    // list.
    assert!(
        fewest <= 5,
        "a try of a lock with 61 contenders cost {fewest} requests"
    );
    assert_eq!(queue(&me, path).await.len(), 61);
    held.release(&others).await.unwrap();
}

#[tokio::test]
async fn a_leftover_of_this_session_first_in_the_queue_is_removed() {
    let conn = support::chroot("lock-leftover").await;
    let path = "/agent-locks/left";
    let me = support::connect(&conn).await;
    zkdeployment::zk::node::ensure_node(&me, path)
        .await
        .unwrap();
    // A contender this very session left (an attempt interrupted after its create).
    queue_up(&me, path, "me, earlier").await;
    let held = take(&me, path, "me").await;
    assert_eq!(queue(&me, path).await, ["me"]);
    held.release(&me).await.unwrap();
}

#[tokio::test]
async fn a_host_checking_while_it_waits_keeps_its_place_until_a_check_says_no() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zkdeployment::zk::lock::acquire_queued_any_checking;
    let conn = support::chroot("lock-checking").await;
    let path = "/agent-locks/c";
    let holder = support::connect(&conn).await;
    let held = take(&holder, path, "holder").await;
    let places = [(path, Extra::default())];

    // Checks that say yes: the waiter stays queued (the same contender) through several,
    // and takes the lock once it is freed.
    let waiter = support::connect(&conn).await;
    let checks = AtomicUsize::new(0);
    let waiting = acquire_queued_any_checking(
        &waiter,
        &places,
        "waiter",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            checks.fetch_add(1, Ordering::SeqCst);
            true
        },
    );
    let freeing = async {
        wait_queue(&holder, path, &["holder", "waiter"]).await;
        let queued = zkdeployment::zk::lock::contenders(&holder, path)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let still = zkdeployment::zk::lock::contenders(&holder, path)
            .await
            .unwrap();
        assert_eq!(still, queued, "the waiter left its place");
        held.release(&holder).await.unwrap();
    };
    let (got, ()) = tokio::join!(waiting, freeing);
    let (i, w_held) = got.unwrap().expect("the waiter takes the lock");
    assert_eq!(i, 0);
    assert!(checks.load(Ordering::SeqCst) >= 3, "{checks:?}");
    assert_eq!(queue(&holder, path).await, ["waiter"]);
    w_held.release(&waiter).await.unwrap();

    // A check that says no: the waiter leaves the queue at once, long before the limit.
    let held = take(&holder, path, "holder").await;
    let got = acquire_queued_any_checking(
        &waiter,
        &places,
        "waiter",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { false },
    )
    .await
    .unwrap();
    assert!(got.is_none());
    assert_eq!(queue(&holder, path).await, ["holder"]);
    held.release(&holder).await.unwrap();
}

#[tokio::test]
async fn a_waiter_removes_a_leftover_of_its_own_session_just_before_it() {
    use zkdeployment::zk::lock::acquire_queued_any_checking;
    let conn = support::chroot("lock-leftover-before").await;
    let path = "/agent-locks/b";
    let holder = support::connect(&conn).await;
    let held = take(&holder, path, "holder").await;
    let me = support::connect(&conn).await;
    // A contender of this session left by an interrupted attempt, queued before our wait.
    queue_up(&me, path, "me, earlier").await;
    let places = [(path, Extra::default())];
    let waiting = acquire_queued_any_checking(
        &me,
        &places,
        "me",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || std::future::ready(true),
    );
    let freeing = async {
        wait_queue(&holder, path, &["holder", "me, earlier", "me"]).await;
        held.release(&holder).await.unwrap();
    };
    let (got, ()) = tokio::join!(waiting, freeing);
    // Its turn came once the leftover went (nobody else would remove it).
    let (_, mine) = got.unwrap().expect("the waiter takes the lock");
    assert_eq!(queue(&holder, path).await, ["me"]);
    mine.release(&me).await.unwrap();
}

/// The requests the server has received on the session `session` (`cons`), or `None` when
/// `cons` does not list it.
fn received_on(session: zookeeper_client::SessionId) -> Option<i64> {
    let address = support::zk_address();
    let port: u16 = address
        .split(',')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()?;
    support::session_received(port, session.0)
}

/// The session's received packets once they have not changed for 300 ms (bounded).
async fn received_settled(session: zookeeper_client::SessionId) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = received_on(session).expect("the session in `cons`");
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = received_on(session).expect("the session in `cons`");
        if now == last {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "session {session} never went quiet"
        );
        last = now;
    }
}

#[tokio::test]
async fn a_change_in_one_queue_sets_no_watch_again_in_the_others() {
    let conn = support::chroot("lock-queues-watches-kept").await;
    let (x, y, z) = ("/agent-locks/x", "/agent-locks/y", "/agent-locks/z");
    let holder = support::connect(&conn).await;
    let held_x = take(&holder, x, "hx").await;
    let _held_y = take(&holder, y, "hy").await;
    let _held_z = take(&holder, z, "hz").await;
    // M waits in x's queue behind the holder (a bare contender), W in all three, behind M
    // in x.
    let m_node = queue_up(&holder, x, "m").await;
    let w_client = support::connect(&conn).await;
    let w_session = w_client.session_id();
    let w = tokio::spawn(async move {
        let places = [
            (x, Extra::default()),
            (y, Extra::default()),
            (z, Extra::default()),
        ];
        let got = acquire_queued_any(&w_client, &places, "w", Duration::from_secs(60)).await;
        (w_client, got.unwrap())
    });
    wait_queue(&holder, x, &["hx", "m", "w"]).await;
    wait_queue(&holder, y, &["hy", "w"]).await;
    wait_queue(&holder, z, &["hz", "w"]).await;
    let before = received_settled(w_session).await;

    // M leaves x's queue: W lists x again and watches the holder there. Its watches in y
    // and z are still in place, and are neither removed nor set again (that was 2 removals
    // and 3 watches more).
    holder.delete(&m_node, None).await.unwrap();
    wait_queue(&holder, x, &["hx", "w"]).await;
    let after = received_settled(w_session).await;
    // The list and the new watch, and a ping the session may have sent meanwhile.
    assert!(
        after - before <= 3,
        "W sent {} requests for a change in one of its three queues",
        after - before
    );
    assert!(
        !w.is_finished(),
        "W took a lock while the holder held all three"
    );

    // The wait goes on as before: x freed, W takes it and leaves the other queues.
    held_x.release(&holder).await.unwrap();
    let (_w_client, index, _w_held) = taken(w).await;
    assert_eq!(index, 0, "W took x, the lock freed");
    assert_eq!(queue(&holder, y).await, ["hy"]);
    assert_eq!(queue(&holder, z).await, ["hz"]);
}

/// A lock node found missing is made in one create, its missing ancestors too; one made
/// meanwhile by another is fine. Under a parent that lets nobody create (least privilege),
/// the refused create is looked at again: a node there is found, a missing one is the
/// refusal.
#[tokio::test]
async fn a_missing_node_is_made_at_once_and_an_existing_one_under_a_closed_parent_is_found() {
    use zkdeployment::zk::node::make_missing_node;
    let conn = support::chroot("make-missing").await;
    let client = support::connect(&conn).await;
    make_missing_node(&client, "/a/b/c").await.unwrap();
    assert!(client.check_stat("/a/b/c").await.unwrap().is_some());
    make_missing_node(&client, "/a/b/c").await.unwrap();
    // Only the node missing: one request (no look before the create). Measured three times,
    // the fewest counted: a ping can only add to a count.
    let session = client.session_id();
    let mut counted = received_settled(session).await;
    let mut requests = Vec::new();
    for node in ["/a/b/d", "/a/b/e", "/a/b/f"] {
        make_missing_node(&client, node).await.unwrap();
        let now = received_settled(session).await;
        requests.push(now - counted);
        counted = now;
    }
    assert_eq!(
        requests.iter().min(),
        Some(&1),
        "requests to make a node whose parent exists: {requests:?}"
    );
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.create("/closed", b"", &open).await.unwrap();
    client.create("/closed/there", b"", &open).await.unwrap();
    client
        .set_acl("/closed", &Acls::anyone_read(), None)
        .await
        .unwrap();
    make_missing_node(&client, "/closed/there").await.unwrap();
    let refused = make_missing_node(&client, "/closed/missing")
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            zkdeployment::zk::ZkError::Op {
                source: zookeeper_client::Error::NoAuth,
                ..
            }
        ),
        "{refused}"
    );
}
