//! A loopback TCP proxy owned by a test, to inject network faults between a client (the
//! agent, a command) and a ZooKeeper server: the reliable way to make a session expire while
//! the server stays up.
//!
//! [`Proxy::start`] listens on `127.0.0.1:0` and forwards every connection to the target.
//! - [`Proxy::cut`]: drops every connection at once and refuses new ones (accepted, then
//!   closed at once) until [`Proxy::restore`]: a server that went away.
//! - [`Proxy::freeze`]: keeps the connections open but forwards nothing either way, and
//!   accepts new connections without forwarding them: a partition where packets vanish (TCP
//!   notices nothing; only the client's own timeouts can). Ended by [`Proxy::restore`], after
//!   which only new connections work again (frozen ones are dropped, as a real partition
//!   that lasted long enough would have done).
//!
//! Plain threads (no async runtime), so it works under any test runtime; the threads stop
//! when the proxy is dropped.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OPEN: u8 = 0;
const CUT: u8 = 1;
const FROZEN: u8 = 2;

struct Shared {
    mode: AtomicU8,
    stopped: AtomicBool,
    /// Bumped on every cut / restore: a connection made in an older epoch is dead.
    epoch: AtomicU64,
    /// Both ends of every live connection, to shut them down on a cut.
    conns: Mutex<Vec<(u64, TcpStream)>>,
}

/// A TCP proxy from `127.0.0.1:<port>` to a target address.
pub struct Proxy {
    /// The port it listens on.
    pub port: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<new port>` to `target` (`host:port`).
    pub fn start(target: &str) -> Proxy {
        let target: SocketAddr = target
            .parse()
            .unwrap_or_else(|e| panic!("proxy target {target:?}: {e}"));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            mode: AtomicU8::new(OPEN),
            stopped: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept_loop(listener, target, s))
            .expect("start the proxy thread");
        Proxy { port, shared }
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Drops every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.shared.mode.store(CUT, Ordering::SeqCst);
        self.drop_all();
    }

    /// Forwards nothing any more (connections stay open, new ones are accepted and left
    /// hanging) until [`Proxy::restore`].
    pub fn freeze(&self) {
        self.shared.mode.store(FROZEN, Ordering::SeqCst);
    }

    /// Forwards new connections again (connections from before a cut or freeze stay dead).
    pub fn restore(&self) {
        self.drop_all();
        self.shared.mode.store(OPEN, Ordering::SeqCst);
    }

    fn drop_all(&self) {
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        let conns = std::mem::take(&mut *self.shared.conns.lock().unwrap());
        for (_, stream) in conns {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.drop_all();
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let _ = client.set_nonblocking(false);
        match shared.mode.load(Ordering::SeqCst) {
            CUT => {
                let _ = client.shutdown(Shutdown::Both);
                continue;
            }
            FROZEN => {
                // Accepted, never answered; dropped at the next restore.
                let epoch = shared.epoch.load(Ordering::SeqCst);
                shared.conns.lock().unwrap().push((epoch, client));
                continue;
            }
            _ => {}
        }
        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let epoch = shared.epoch.load(Ordering::SeqCst);
        {
            let mut conns = shared.conns.lock().unwrap();
            for s in [&client, &server] {
                if let Ok(clone) = s.try_clone() {
                    conns.push((epoch, clone));
                }
            }
        }
        for (from, to) in [
            (client.try_clone(), server.try_clone()),
            (server.try_clone(), client.try_clone()),
        ] {
            let (Ok(from), Ok(to)) = (from, to) else {
                continue;
            };
            let s = shared.clone();
            std::thread::spawn(move || pump(from, to, epoch, s));
        }
    }
}

/// Copies bytes from `from` to `to` while the connection's epoch is current and the proxy is
/// not frozen (then bytes are read and dropped).
fn pump(mut from: TcpStream, mut to: TcpStream, epoch: u64, shared: Arc<Shared>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if shared.epoch.load(Ordering::SeqCst) != epoch || shared.stopped.load(Ordering::SeqCst) {
            break;
        }
        if shared.mode.load(Ordering::SeqCst) == FROZEN {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
