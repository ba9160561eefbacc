//! Small file and clock helpers shared by every part of the program: the time now as Unix
//! seconds, and the atomic file writers, so a reader never sees a partial file and a crash
//! never leaves an empty one:
//! - [`write_replacing`] (temporary file in the same directory, optionally `fsync`ed, rename,
//!   `fsync` of the directory): `last-pass.json`, the properties snapshots, the metrics
//!   textfile, the mail state;
//! - [`write_swapping`], for the files rewritten at every step or pass (the status file,
//!   `host_version`, the inventory): their content is exchanged with a kept sibling's, so
//!   that no file is made or freed at each write.
//!
//! A file replaced (or a command's output file) is closed by a thread of its own
//! ([`close_later`]), not by the caller: the last close of a file no longer named frees its
//! blocks, and on a file system mounted with `discard` (common on cloud disks) that waits
//! for the disk to discard them, a millisecond or more, which would otherwise fall between
//! one deploy script and the next (see docs/performance.md).

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
/// hosts' deploy scripts (see docs/performance.md).
pub fn write_replacing(path: &Path, data: &[u8], sync: bool) -> std::io::Result<()> {
    let tmp = sibling(path, &format!("{}.tmp", std::process::id()));
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
        if sync {
            sync_dir_of(path);
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| named(path, e))
}

/// `e`, its message naming `path`.
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Syncs the directory holding `path`, so that a rename or an exchange there is durable (best
/// effort: some file systems refuse to open a directory for syncing).
fn sync_dir_of(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Replaces `path`'s content as [`write_replacing`] does (a reader sees the old or the new
/// content, never a mix), without making a file and freeing another at every write: the data
/// goes into a sibling kept for the purpose, `.NAME.next`, overwritten in place, and the two
/// names are exchanged in one step (`renameat2` with `RENAME_EXCHANGE`), so that `.NAME.next`
/// then holds the previous content, to be overwritten at the next write. For the files the
/// agent rewrites at every step or pass (the status file, the inventory, `host_version`): on
/// ext4 a file's create costs 0.07–0.2 ms and more while many files were deleted in the last
/// 30 s (without a journal, ext4 skips the inodes freed in that time, reading each), and the
/// rename frees the replaced file's blocks (a discard, with `-o discard`); a hundred agents on
/// one machine spent an eighth of their CPU there at a bump.
///
/// The sibling is overwritten only while nobody else has it open: the writer takes a write
/// lease on it (`F_SETLEASE`), which the kernel grants only to the one open file (Linux 5.3
/// and later count readers; 6.1, and the 5.4, 5.10 and 5.15 stable kernels since late 2022,
/// close a race with an open under way), and checks it is still the sibling; a reader that
/// opened `path` before an exchange and still holds it two writes later, another writer, or a
/// file system without leases (NFS, `fs.leases-enable = 0`, remembered) makes the write go
/// through [`write_replacing`]. So are the first write (no file yet), a `path` that is not a
/// regular file, a `.NAME.next` that is not a regular file of one link owned by this user
/// (removed, never written through), and a file system that cannot exchange names
/// (remembered, the sibling removed).
///
/// With `sync`, the sibling's data reaches the disk before the exchange, and the exchange
/// before the return: a path written always with `sync` is, after a crash, the old or the new
/// content. Without it (the status file, the inventory: rewritten at the agent's first pass),
/// a crash of the machine may leave either name holding an older content, or a cut one. A path
/// must be written always with `sync` or always without: after an unsynced exchange, the
/// sibling may still be the durable file on disk.
pub fn write_swapping(path: &Path, data: &[u8], sync: bool) -> std::io::Result<()> {
    match swap_in(path, data, sync) {
        Ok(true) => Ok(()),
        Ok(false) => write_replacing(path, data, sync),
        Err(e) => Err(named(path, e)),
    }
}

/// Whether [`write_swapping`] was refused what it needs (a name exchange, or a lease) here:
/// every later one then renames.
static SWAP_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// [`write_swapping`]'s exchange: `Ok(false)` when it must write through a rename instead.
fn swap_in(path: &Path, data: &[u8], sync: bool) -> std::io::Result<bool> {
    use nix::errno::Errno;
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::sync::atomic::Ordering::Relaxed;
    if SWAP_REFUSED.load(Relaxed)
        || !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
    {
        return Ok(false);
    }
    let next = sibling(path, "next");
    // Only a regular file of ours with one name is overwritten: anything else put there is
    // removed (and the write goes through a rename; the next one makes the sibling again).
    let give_up = |next: &Path| {
        let _ = std::fs::remove_file(next);
        Ok(false)
    };
    if std::fs::symlink_metadata(&next).is_ok_and(|m| !m.file_type().is_file()) {
        return give_up(&next);
    }
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(&next)
    {
        Ok(file) => file,
        // A symlink, or a FIFO nobody reads.
        Err(e) if matches!(e.raw_os_error(), Some(nix::libc::ELOOP | nix::libc::ENXIO)) => {
            return give_up(&next)
        }
        // Anything else (leased by another writer, out of descriptors): left as it is.
        Err(_) => return Ok(false),
    };
    let meta = file.metadata()?;
    // Not a regular file of ours with one name (made by someone else: overwriting it as
    // root would write into what they can read, and leasing it needs its owner).
    if !meta.is_file() || meta.nlink() != 1 || meta.uid() != nix::unistd::geteuid().as_raw() {
        drop(file);
        return give_up(&next);
    }
    let file = match overwrite_sibling(file, &meta, &next, data)? {
        Some(file) => file,
        None => return Ok(false),
    };
    if sync {
        file.sync_data()?;
    }
    match renameat2(
        AT_FDCWD,
        &next,
        AT_FDCWD,
        path,
        RenameFlags::RENAME_EXCHANGE,
    ) {
        Ok(()) => {}
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {
            refused(&next);
            return Ok(false);
        }
        // `path` went away since the look above, or anything else: the rename.
        Err(_) => return Ok(false),
    }
    if sync {
        sync_dir_of(path);
    }
    Ok(true)
}

/// Writes `data` into `file`, the sibling `next` opened (with `meta`, its metadata then), if
/// nobody else has it open and it is still `next`: else `None` (the write goes through a
/// rename). The lease that proves it is given back before the return, so that nobody opening
/// `path` after the exchange waits for it.
fn overwrite_sibling(
    file: std::fs::File,
    meta: &std::fs::Metadata,
    next: &Path,
    data: &[u8],
) -> std::io::Result<Option<std::fs::File>> {
    use nix::errno::Errno;
    use std::os::unix::fs::{FileExt, MetadataExt};
    match lease(&file, nix::libc::F_WRLCK) {
        Ok(()) => {}
        // Leases disabled (`fs.leases-enable = 0`) or not had on this file system.
        Err(Errno::EINVAL | Errno::ENOSYS) => {
            refused(next);
            return Ok(None);
        }
        // Open elsewhere (a reader of an earlier content, or another writer), or refused
        // for this file or now.
        Err(_) => return Ok(None),
    }
    // Still the sibling: another writer may have exchanged it into `path` since our open.
    if !std::fs::symlink_metadata(next)
        .is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev())
    {
        return Ok(None);
    }
    let before = file.metadata()?.len();
    file.write_all_at(data, 0)?;
    // Cut only a longer previous content (a truncation costs ext4 a walk of the extents).
    if before > data.len() as u64 {
        file.set_len(data.len() as u64)?;
    }
    // A lease no longer held was broken by an open that waited the kernel's
    // `lease-break-time` (this process stopped meanwhile): that opener may have read a mix,
    // so the content goes through a rename instead, and the sibling is not exchanged.
    if lease(&file, nix::libc::F_UNLCK).is_err() {
        return Ok(None);
    }
    Ok(Some(file))
}

/// Remembers that this file system refuses what [`write_swapping`] needs (every later write
/// renames), and removes the sibling `next` (its content is stale from now on).
fn refused(next: &Path) {
    SWAP_REFUSED.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = std::fs::remove_file(next);
}

/// `F_SETSIG`, the same on every Linux architecture (not in the `libc` crate for glibc).
const F_SETSIG: nix::libc::c_int = 10;

/// Takes (`F_WRLCK`) or gives back (`F_UNLCK`) a lease on `file`. A lease broken by another
/// process's open is signalled with `SIGURG`, whose default action is to ignore it (`SIGIO`,
/// the default, would end the agent): the lease is held for one small write, and given back
/// without being asked.
fn lease(file: &std::fs::File, kind: nix::libc::c_int) -> Result<(), nix::errno::Errno> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    if kind != nix::libc::F_UNLCK {
        // SAFETY: fcntl on an open descriptor of ours, with integer arguments.
        let set = unsafe { nix::libc::fcntl(fd, F_SETSIG, nix::libc::SIGURG) };
        nix::errno::Errno::result(set)?;
    }
    // SAFETY: as above.
    let taken = unsafe { nix::libc::fcntl(fd, nix::libc::F_SETLEASE, kind) };
    nix::errno::Errno::result(taken).map(drop)
}

/// `.NAME.SUFFIX` beside `path`.
fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    path.with_file_name(format!(".{name}.{suffix}"))
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

    /// A directory for a status file: the directory, the file's path and its sibling's.
    fn status_dir() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status");
        let next = dir.path().join(".status.next");
        (dir, path, next)
    }

    /// The inode `path` names now.
    fn inode(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path).unwrap().ino()
    }

    #[test]
    fn swapping_writes_exchange_two_files_and_make_no_other() {
        let (dir, path, next) = status_dir();
        write_swapping(&path, b"first", false).unwrap();
        let first = inode(&path);
        write_swapping(&path, b"second, longer", true).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        assert_eq!(
            std::fs::read(&next).unwrap(),
            b"first",
            "the names were not exchanged"
        );
        assert_eq!(inode(&next), first);
        let second = inode(&path);
        for i in 0..10 {
            write_swapping(&path, format!("{i}").as_bytes(), i % 3 == 0).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), format!("{i}").as_bytes());
            let now = inode(&path);
            assert!(now == first || now == second, "a new file was made");
        }
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [".status.next", "status"]);
        let err = write_swapping(&dir.path().join("missing/f"), b"x", false).unwrap_err();
        assert!(err.to_string().contains("missing/f"), "{err}");
    }

    #[test]
    fn a_swapping_write_never_overwrites_a_file_someone_holds_open() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status");
        write_swapping(&path, b"one", false).unwrap();
        write_swapping(&path, b"two", false).unwrap();
        // A reader opens "two" and reads it only after two more writes: the second would
        // overwrite that very file in place, and must not (any reader, no lock of its own).
        let mut held = std::fs::File::open(&path).unwrap();
        write_swapping(&path, b"three", false).unwrap();
        write_swapping(&path, b"four", false).unwrap();
        write_swapping(&path, b"five", false).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"five");
        let mut text = String::new();
        held.read_to_string(&mut text).unwrap();
        assert_eq!(text, "two", "the file the reader held was overwritten");
        drop(held);
        // Once the reader is gone, writes exchange again: two files, no third.
        write_swapping(&path, b"six", false).unwrap();
        let six = inode(&path);
        write_swapping(&path, b"seven", false).unwrap();
        write_swapping(&path, b"eight", false).unwrap();
        assert_eq!(inode(&path), six);
        assert_eq!(std::fs::read(&path).unwrap(), b"eight");
    }

    #[test]
    fn a_sibling_exchanged_away_after_it_was_opened_is_not_overwritten() {
        let (_dir, path, next) = status_dir();
        write_swapping(&path, b"one", false).unwrap();
        write_swapping(&path, b"two", false).unwrap();
        // A second writer opened the sibling ("one"), then the first exchanged it into
        // `path`, writing "three": the second must not write into what is now `path`.
        let opened = std::fs::OpenOptions::new().write(true).open(&next).unwrap();
        let first = inode(&next);
        std::fs::write(&next, b"three").unwrap();
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &next,
            nix::fcntl::AT_FDCWD,
            &path,
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        )
        .unwrap();
        assert_eq!(inode(&path), first);
        let meta = opened.metadata().unwrap();
        assert!(overwrite_sibling(opened, &meta, &next, b"four")
            .unwrap()
            .is_none());
        assert_eq!(std::fs::read(&path).unwrap(), b"three");
    }

    #[test]
    fn a_swapping_write_overwrites_only_its_own_sibling() {
        let (dir, path, next) = status_dir();
        let other = dir.path().join("other");
        std::fs::write(&other, b"keep").unwrap();
        write_swapping(&path, b"one", false).unwrap();
        // A symlink, a second name of another file and a FIFO put in the sibling's place are
        // removed, never written through (nor blocked on).
        std::os::unix::fs::symlink(&other, &next).unwrap();
        write_swapping(&path, b"two", false).unwrap();
        std::fs::hard_link(&other, &next).unwrap();
        write_swapping(&path, b"three", false).unwrap();
        nix::unistd::mkfifo(&next, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        write_swapping(&path, b"four", false).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"four");
        assert_eq!(std::fs::read(&other).unwrap(), b"keep");
        // A sibling another user owns (as root, the CI's user: one can be made) is removed,
        // never written into.
        if nix::unistd::geteuid().is_root() {
            let _ = std::fs::remove_file(&next);
            std::fs::write(&next, b"theirs").unwrap();
            let theirs = std::fs::File::open(&next).unwrap();
            std::os::unix::fs::chown(&next, Some(65534), Some(65534)).unwrap();
            write_swapping(&path, b"four and a half", false).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"four and a half");
            assert_eq!(std::io::read_to_string(&theirs).unwrap(), "theirs");
            assert!(!std::fs::symlink_metadata(&next).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.uid() == 65534
            }));
        }
        // `path` itself a symlink: replaced by a file, its target untouched.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        write_swapping(&path, b"five", false).unwrap();
        write_swapping(&path, b"six", false).unwrap();
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"six");
        assert_eq!(std::fs::read(&other).unwrap(), b"keep");
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
