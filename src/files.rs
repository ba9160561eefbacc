//! Small file and clock helpers shared by every part of the program: the time now as Unix
//! seconds, and the one atomic file writer (temporary file in the same directory, `fsync`,
//! rename, `fsync` of the directory) used for the status file, `host_version`,
//! `last-pass.json`, the properties snapshots, the metrics textfile and the mail state, so a
//! reader never sees a partial file and a crash never leaves an empty one.
//!
//! A file replaced (or a command's output file) is closed by a thread of its own
//! ([`close_later`]), not by the caller: the last close of a file no longer named frees its
//! blocks, and on a file system mounted with `discard` (common on cloud disks) that waits
//! for the disk to discard them, a millisecond or more, which would otherwise fall between
//! one deploy script and the next (see the README's rolling-deploy figures).

use std::io::Write;
use std::path::Path;

/// Unix time now, as a float.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Writes `data` to `path` atomically and durably: a temporary file in the same directory,
/// written and `fsync`ed, renamed over `path`, then the directory `fsync`ed. An error names
/// `path`; the temporary file is removed on failure.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    write_replacing(path, data, true)
}

/// Replaces `path` with `data` through a rename (readers see the old or the new content,
/// never a mix); with `sync`, the data and the rename reach the disk ([`write_atomic`]).
/// Files rewritten at every step (the status file, the properties snapshot) skip the sync:
/// after a crash they are rewritten anyway, and an fsync costs milliseconds between two
/// hosts' deploy scripts (see the README's rolling-deploy figures).
pub fn write_replacing(path: &Path, data: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        if sync {
            f.sync_data()?;
        }
        // The file replaced, held open through the rename: its blocks are freed when the
        // closing thread lets it go, not in the rename.
        let replaced = open_regular(path);
        std::fs::rename(&tmp, path)?;
        if let Some(file) = replaced {
            close_later(file);
        }
        // The rename itself is durable once the directory is synced (best effort: some file
        // systems refuse to open a directory for syncing).
        if sync {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    })
}

/// `path` opened for reading if it is a regular file (not a symlink, a FIFO or a device):
/// what [`holds`] reads, and what a rename over it is about to replace.
fn open_regular(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // Only a regular file is opened: a device or a FIFO planted there is never opened (and,
    // swapped in after this look, opened without blocking and refused by the check below).
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    file.metadata().is_ok_and(|m| m.is_file()).then_some(file)
}

/// Closes `file` on the closing thread (started at the first call), so that whatever its
/// last close costs (freeing and discarding the blocks of a file no longer named) is not
/// the caller's; closed at once if that thread cannot be started.
pub fn close_later(file: std::fs::File) {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::OnceLock;
    static CLOSING: OnceLock<Option<Sender<std::fs::File>>> = OnceLock::new();
    let closing = CLOSING.get_or_init(|| {
        let (send, receive) = channel::<std::fs::File>();
        std::thread::Builder::new()
            .name("zkd-close".into())
            .spawn(move || {
                for file in receive {
                    drop(file);
                    #[cfg(test)]
                    CLOSED_LATER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            })
            .ok()
            .map(|_| send)
    });
    // A file the thread can no longer take is closed here.
    if let Some(send) = closing {
        let _ = send.send(file);
    }
}

/// How many files the closing thread has closed ([`close_later`]).
#[cfg(test)]
static CLOSED_LATER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether `path` is a regular file (not a symlink) holding exactly `content`: what a writer
/// checks to skip rewriting a file that would not change.
pub fn holds(path: &Path, content: &[u8]) -> bool {
    use std::io::Read;
    let Some(mut file) = open_regular(path) else {
        return false;
    };
    let mut found = Vec::with_capacity(content.len() + 1);
    // One byte more than expected tells a longer file apart.
    let read = (&mut file)
        .take(content.len() as u64 + 1)
        .read_to_end(&mut found);
    read.is_ok() && found == content
}

/// [`write_replacing`] without the sync, and nothing at all when `path` is a regular file that
/// holds `data` already: a re-run at a new version usually writes what is there, and a
/// create and a rename cost a tenth of a millisecond or more each on ext4.
pub fn replace_unless_same(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if holds(path, data) {
        return Ok(());
    }
    write_replacing(path, data, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_the_file_and_leave_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let err = write_atomic(&dir.path().join("missing/f"), b"x").unwrap_err();
        assert!(err.to_string().contains("missing/f"), "{err}");
    }

    /// How many files of `dir` this process holds open that no longer have a name there.
    fn held_unnamed(dir: &Path) -> usize {
        let prefix = dir.display().to_string();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|target| target.display().to_string())
            .filter(|t| t.starts_with(&prefix) && t.ends_with(" (deleted)"))
            .count()
    }

    #[test]
    fn a_replaced_file_is_held_through_the_rename_and_closed_by_the_closing_thread() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_replacing(&path, b"first", false).unwrap();
        let before = CLOSED_LATER.load(SeqCst);
        for i in 0..20 {
            write_replacing(&path, format!("{i}").as_bytes(), i % 2 == 0).unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"19");
        // Each replaced file went to the closing thread, which closed it: none stays open.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let held = held_unnamed(dir.path());
            let closed = CLOSED_LATER.load(SeqCst) - before;
            if closed >= 20 && held == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{closed} of 20 replaced files closed by the closing thread; {held} still open"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Only what a rename replaces is held: nothing when the path was missing, and never
        // a FIFO (opening it could block) or a symlink's target.
        assert!(open_regular(&dir.path().join("missing")).is_none());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_regular(&fifo).is_none());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(open_regular(&link).is_none());
        assert!(open_regular(&path).is_some());
    }

    #[test]
    fn the_same_content_is_not_written_again() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        replace_unless_same(&path, b"one").unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        replace_unless_same(&path, b"one").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "rewritten");
        // A longer or shorter content, or a symlink to the same content, is replaced.
        replace_unless_same(&path, b"one1").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one1");
        replace_unless_same(&path, b"on").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"on");
        let other = dir.path().join("other");
        std::fs::write(&other, b"two").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert!(!holds(&link, b"two"));
        replace_unless_same(&link, b"two").unwrap();
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&link).unwrap(), b"two");
        // A FIFO is not opened (reading it would block), and is replaced.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(!holds(&fifo, b""));
        replace_unless_same(&fifo, b"three").unwrap();
        assert_eq!(std::fs::read(&fifo).unwrap(), b"three");
    }
}
