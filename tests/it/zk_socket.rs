//! The ZooKeeper connection itself: the client the agent and every command use sets
//! `TCP_NODELAY` (vendor/README.md, `patches/0002-tcp-nodelay.patch`), so a batch of
//! pipelined requests is never held back by Nagle's algorithm until the server has answered
//! its first part.

use crate::support;

use std::os::fd::BorrowedFd;

use nix::sys::socket::{getpeername, getsockopt, sockopt, SockaddrStorage};
use zkdeployment::zk::connect::{connect, ConnectOptions};

/// The TCP sockets of this process connected to `port` on the loopback, each with whether
/// `TCP_NODELAY` is set on it.
fn sockets_to(port: u16) -> Vec<(i32, bool)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let entry = entry.expect("fd entry");
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .map(|target| target.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        if !is_socket {
            continue;
        }
        // SAFETY: the descriptor is only borrowed for two queries, while this process still
        // has it open (a descriptor closed meanwhile makes them fail, which is skipped).
        let fd_ref = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(peer) = getpeername::<SockaddrStorage>(fd) else {
            continue;
        };
        let Some(peer) = peer.as_sockaddr_in() else {
            continue;
        };
        if peer.port() != port {
            continue;
        }
        let nodelay = getsockopt(&fd_ref, sockopt::TcpNoDelay).expect("TCP_NODELAY readable");
        found.push((fd, nodelay));
    }
    found
}

#[tokio::test]
async fn the_zookeeper_connection_sets_tcp_nodelay() {
    let conn = support::chroot("nodelay").await;
    let (address, _) = support::split_chroot(&conn);
    let port: u16 = address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the connection string");
    let client = connect(&ConnectOptions::new(conn.clone()))
        .await
        .expect("connected");
    // A request answered: the session's connection is up.
    client.check_stat("/").await.expect("stat /");
    let sockets = sockets_to(port);
    assert!(
        !sockets.is_empty(),
        "no socket of this process is connected to port {port}"
    );
    for (fd, nodelay) in &sockets {
        assert!(
            nodelay,
            "fd {fd} to ZooKeeper ({address}) has no TCP_NODELAY"
        );
    }
}
