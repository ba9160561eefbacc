//! Small file and clock helpers shared by every part of the program: the time now as Unix
//! seconds, and the one atomic file writer, so a reader never sees a partial file and a crash
//! never leaves an empty one: [`write_replacing`] (a temporary file in the same directory,
//! optionally `fsync`ed, renamed over the file, the directory `fsync`ed), and its durable
//! form [`write_atomic`].
//!
//! Commands run as root and write into directories other users may write to (a
//! node_exporter textfile directory, say), so a writer never follows a link and never opens a
//! file it did not make: the temporary file has an unpredictable name and is created
//! exclusively without following links (`O_CREAT | O_EXCL | O_NOFOLLOW`), and the rename
//! replaces whatever is at the final name (a planted link included) instead of writing
//! through it.

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
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    write_replacing(path, data, true)
}

/// Replaces `path` with `data` through a rename (readers see the old or the new content,
/// never a mix); with `sync`, the data and the rename reach the disk ([`write_atomic`]).
/// Files rewritten at every step (the status file, the properties snapshot) skip the sync:
/// after a crash they are rewritten anyway.
pub(crate) fn write_replacing(path: &Path, data: &[u8], sync: bool) -> std::io::Result<()> {
    let tmp = sibling(path, &format!("{}.tmp", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut f = create_new(&tmp)?;
        f.write_all(data)?;
        if sync {
            f.sync_data()?;
        }
        std::fs::rename(&tmp, path)?;
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

/// Creates `path`, which must not exist (not even as a link), for writing; never follows a
/// link, never opens a FIFO or device someone put there.
fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

/// `e`, its message naming `path`.
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Syncs the directory holding `path`, so that a rename there is durable (best effort: some
/// file systems refuse to open a directory for syncing).
fn sync_dir_of(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
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

/// Whether `path` is a regular file (not a symlink) holding exactly `content`: what a writer
/// checks to skip rewriting a file that would not change.
pub(crate) fn holds(path: &Path, content: &[u8]) -> bool {
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
pub(crate) fn replace_unless_same(path: &Path, data: &[u8]) -> std::io::Result<()> {
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

    #[test]
    fn a_planted_link_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("metrics.prom");
        // At the final name: the link itself is replaced.
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_replacing(&path, b"new", false).unwrap();
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // At the temporary file's old, predictable name: never opened.
        let old_tmp = dir
            .path()
            .join(format!(".metrics.prom.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &old_tmp).unwrap();
        write_atomic(&path, b"newer").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"newer");
        // create_new refuses a link, whatever it points at.
        assert!(create_new(&old_tmp).is_err());
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
