//! Proves the test harness (tests/support) against a real ZooKeeper: chroots, isolation,
//! and a test-owned server that keeps its data across a restart.

use crate::support;

use support::{chroot, connect, split_chroot, zk_address, ZkServer};
use zookeeper_client as zk;

fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroot_is_created_and_usable() {
    let conn = chroot("selftest").await;
    let (hosts, root) = split_chroot(&conn);
    assert!(root.starts_with("/t-selftest-"), "unexpected chroot {root}");
    assert_eq!(
        root.len(),
        "/t-selftest-".len() + 32,
        "expected a simple uuid in {root}"
    );

    let client = connect(&conn).await;
    assert!(
        client.list_children("/").await.unwrap().is_empty(),
        "a new chroot is empty"
    );
    client.create("/x", b"hello", &open()).await.unwrap();
    let (data, _) = client.get_data("/x").await.unwrap();
    assert_eq!(data, b"hello");

    // The same node, seen from outside the chroot.
    let unrooted = connect(hosts).await;
    let (data, _) = unrooted.get_data(&format!("{root}/x")).await.unwrap();
    assert_eq!(data, b"hello");
    assert_eq!(hosts, zk_address().split('/').next().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroots_do_not_see_each_other() {
    let a = connect(&chroot("iso-a").await).await;
    let b = connect(&chroot("iso-b").await).await;
    a.create("/only-in-a", b"a", &open()).await.unwrap();
    b.mkdir("/only-in-b/deeper", &open()).await.unwrap();

    assert_eq!(
        a.list_children("/").await.unwrap(),
        vec!["only-in-a".to_string()]
    );
    assert_eq!(
        b.list_children("/").await.unwrap(),
        vec!["only-in-b".to_string()]
    );
    assert!(b.check_stat("/only-in-a").await.unwrap().is_none());
    assert!(a.check_stat("/only-in-b").await.unwrap().is_none());
    // The same name in both chroots: two different nodes.
    b.create("/only-in-a", b"b", &open()).await.unwrap();
    assert_eq!(a.get_data("/only-in-a").await.unwrap().0, b"a");
    assert_eq!(b.get_data("/only-in-a").await.unwrap().0, b"b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroot_labels_are_sanitised() {
    let conn = chroot("odd label/with:chars").await;
    let (_, root) = split_chroot(&conn);
    assert!(
        root.starts_with("/t-odd_label_with_chars-"),
        "unexpected chroot {root}"
    );
    connect(&conn)
        .await
        .create("/y", b"", &open())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_server_keeps_data_across_restart() {
    let mut server = ZkServer::start();
    let port = server.port;
    assert_eq!(support::four_letter(port, "ruok"), "imok");
    {
        let client = connect(&server.connect_string()).await;
        client.mkdir("/keep/me", &open()).await.unwrap();
        client
            .set_data("/keep/me", b"still here", None)
            .await
            .unwrap();
    }

    server.stop();
    assert!(!server.is_running());
    assert_eq!(
        support::four_letter(port, "ruok"),
        "",
        "a stopped server does not answer"
    );

    server.restart();
    assert_eq!(server.port, port, "restart keeps the port");
    assert!(server.is_running());
    let client = connect(&server.connect_string()).await;
    assert_eq!(client.get_data("/keep/me").await.unwrap().0, b"still here");

    // A crash (SIGKILL) and a restart keep it too.
    drop(client);
    server.kill();
    server.restart();
    let client = connect(&server.connect_string()).await;
    assert_eq!(client.get_data("/keep/me").await.unwrap().0, b"still here");
}

#[test]
fn run_program_reports_code_and_output() {
    let r = support::run_program(
        "/bin/sh",
        &["-c", "echo out; echo err >&2; exit 3"],
        None,
        &[],
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (3, "out\n", "err\n")
    );
    let r = support::run_program("/bin/sh", &["-c", "tr a-z A-Z"], Some("hello\n"), &[]);
    r.assert_ok();
    assert_eq!(r.stdout, "HELLO\n");
    let r = support::run_program("/bin/sh", &["-c", "kill -TERM $$"], None, &[]);
    assert_eq!(r.code, 128 + 15);
    assert!(support::bin().ends_with("zkdeployment"));
}
