//! Small file and clock helpers shared by every part of the program: the time now as Unix
//! seconds, and the one atomic file writer (temporary file in the same directory, `fsync`,
//! rename, `fsync` of the directory) used for the status file, `host_version`,
//! `last-pass.json`, the properties snapshots, the metrics textfile and the mail state, so a
//! reader never sees a partial file and a crash never leaves an empty one.

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
        std::fs::rename(&tmp, path)?;
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

/// Whether `path` is a regular file (not a symlink) holding exactly `content`: what a writer
/// checks to skip rewriting a file that would not change.
pub fn holds(path: &Path, content: &[u8]) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Only a regular file is opened: a FIFO or a device planted there is never read (and,
    // swapped in after this look, opened without blocking and refused by the check below).
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file()) {
        return false;
    }
    let Ok(mut file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    let mut found = Vec::with_capacity(content.len() + 1);
    // One byte more than expected tells a longer file apart.
    let read = (&mut file)
        .take(content.len() as u64 + 1)
        .read_to_end(&mut found);
    regular && read.is_ok() && found == content
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
