//! The systemd notify protocol for the agent's `Type=notify` service: `READY=1` once started,
//! `STATUS=` per step, `STOPPING=1`, and the watchdog keep-alive (`WATCHDOG=1` every half
//! `WATCHDOG_USEC`). Keep-alives are sent only while the agent makes progress: the pass marks
//! progress at every step and every line of command output ([`progress`]), and a step that
//! stays silent longer than [`SILENCE_LIMIT`] stops the keep-alives, so systemd restarts an
//! agent stuck in a pass instead of a healthy watchdog task hiding it. Without
//! `NOTIFY_SOCKET`, everything here does nothing.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long a step may go without any progress before keep-alives stop.
pub(crate) const SILENCE_LIMIT: Duration = Duration::from_secs(3600);

static LAST_PROGRESS: AtomicU64 = AtomicU64::new(0);
static BUSY: AtomicBool = AtomicBool::new(false);

fn now_secs() -> u64 {
    crate::files::now() as u64
}

/// Marks progress (a step started or ended, a command printed a line, the agent is idle).
pub(crate) fn progress() {
    LAST_PROGRESS.store(now_secs(), Ordering::Relaxed);
}

/// Marks the start (true) or the end (false) of a step; an idle agent is always healthy.
pub(crate) fn busy(on: bool) {
    progress();
    BUSY.store(on, Ordering::Relaxed);
}

/// True if keep-alives should be sent now: idle, or busy with recent progress.
pub(crate) fn healthy() -> bool {
    let last = LAST_PROGRESS.load(Ordering::Relaxed);
    !BUSY.load(Ordering::Relaxed) || now_secs().saturating_sub(last) <= SILENCE_LIMIT.as_secs()
}

/// Sends a notify message (`READY=1`, `STATUS=...`); errors are ignored, as sd_notify does.
pub(crate) fn notify(message: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    let result = if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()) {
            Ok(addr) => sock.send_to_addr(message.as_bytes(), &addr),
            Err(e) => Err(e),
        }
    } else {
        sock.send_to(message.as_bytes(), &path)
    };
    if let Err(e) = result {
        tracing::debug!("sd_notify {message:?} failed: {e}");
    }
}

/// `STATUS=<text>` (single line).
pub(crate) fn status(text: &str) {
    notify(&format!("STATUS={}", text.replace('\n', " ")));
}

/// The keep-alive interval (half of `WATCHDOG_USEC`), if the watchdog is on for this process.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Sends keep-alives forever while progress is recent (spawn it on the agent's runtime).
pub(crate) async fn watchdog(interval: Duration) {
    progress();
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        if healthy() {
            notify("WATCHDOG=1");
        } else {
            let last = LAST_PROGRESS.load(Ordering::Relaxed);
            tracing::error!(
                "a step made no progress for {} s: withholding watchdog keep-alives",
                now_secs() - last
            );
        }
    }
}
