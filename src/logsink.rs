//! The log's way out: every log line goes through a bounded queue to a thread of its own that
//! writes it to stderr (the journal, under systemd). Whoever logs never waits for the reader of
//! stderr: a stalled journald or log shipper, or a deploy script printing gigabytes, must not
//! stop the task that keeps the ZooKeeper session alive. When the queue is full, lines are
//! dropped and counted, and the writer says how many before the next line it writes.
//!
//! [`flush`] waits (bounded) for the queue to empty: commands call it before they exit, so
//! that what they logged comes out before their last message.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Lines the queue holds before it drops.
const QUEUE_LINES: usize = 10_000;

/// The sink: the queue's sending end and what it dropped.
struct Sink {
    send: SyncSender<Vec<u8>>,
    dropped: AtomicU64,
    /// Lines queued and not yet written, with the condition [`flush`] waits on.
    pending: Mutex<u64>,
    drained: Condvar,
}

static SINK: OnceLock<Option<Sink>> = OnceLock::new();

fn sink() -> Option<&'static Sink> {
    SINK.get_or_init(|| {
        let (send, receive) = sync_channel(QUEUE_LINES);
        let started = std::thread::Builder::new()
            .name("zkd-log".into())
            .spawn(move || write_lines(receive));
        started.ok().map(|_| Sink {
            send,
            dropped: AtomicU64::new(0),
            pending: Mutex::new(0),
            drained: Condvar::new(),
        })
    })
    .as_ref()
}

/// The writer thread: each line to stderr, after a notice of the lines dropped before it.
fn write_lines(receive: Receiver<Vec<u8>>) {
    let mut stderr = std::io::stderr();
    for line in receive {
        let Some(sink) = SINK.get().and_then(Option::as_ref) else {
            let _ = stderr.write_all(&line);
            continue;
        };
        let dropped = sink.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = writeln!(
                stderr,
                "zkdeployment: {dropped} log lines dropped (the log's reader fell behind)"
            );
        }
        let _ = stderr.write_all(&line);
        let mut pending = sink.pending.lock().unwrap_or_else(|e| e.into_inner());
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            sink.drained.notify_all();
        }
    }
}

/// Queues one formatted line (written directly when the writer thread cannot run).
fn queue(line: Vec<u8>) {
    let Some(sink) = sink() else {
        let _ = std::io::stderr().write_all(&line);
        return;
    };
    *sink.pending.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    match sink.send.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            sink.dropped.fetch_add(1, Ordering::Relaxed);
            let mut pending = sink.pending.lock().unwrap_or_else(|e| e.into_inner());
            *pending = pending.saturating_sub(1);
        }
    }
}

/// Waits until every queued line is written, at most `limit` (a stalled reader of stderr
/// must not keep a command from exiting).
pub(crate) fn flush(limit: Duration) {
    let Some(sink) = SINK.get().and_then(Option::as_ref) else {
        return;
    };
    let deadline = Instant::now() + limit;
    let mut pending = sink.pending.lock().unwrap_or_else(|e| e.into_inner());
    while *pending > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        pending = match sink.drained.wait_timeout(pending, left) {
            Ok((guard, _)) => guard,
            Err(e) => e.into_inner().0,
        };
    }
}

/// A `tracing_subscriber` writer: buffers one event's text, queues it when dropped.
#[derive(Default)]
pub(crate) struct LineWriter(Vec<u8>);

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            queue(std::mem::take(&mut self.0));
        }
    }
}

/// The `MakeWriter` of the log layer.
pub(crate) fn make_writer() -> LineWriter {
    LineWriter::default()
}
