//! Files written whole or not at all: a reader (or a crash) never sees half a key.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary name beside `path`, in the same directory so that a rename is atomic.
fn temporary_beside(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(".{}.{n}.tmp", std::process::id()));
    Ok(path.with_file_name(temp))
}

/// Writes `bytes` to a new temporary file of mode `mode` beside `path`, flushed to disk.
fn write_temporary(path: &Path, bytes: &[u8], mode: u32) -> io::Result<PathBuf> {
    let temp = temporary_beside(path)?;
    let result = (|| {
        // The mode from the start: the bytes are never readable by others, not even briefly.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// Flushes a directory's entries, so that a rename in it survives a crash.
fn sync_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}

/// Replaces `path` by a file holding `bytes`, of mode `mode`, atomically: written to a
/// temporary file in the same directory, then renamed over it.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let temp = write_temporary(path, bytes, mode)?;
    if let Err(e) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    sync_dir(path)
}

/// Creates `path` holding `bytes` only if it does not exist, atomically (a hard link does
/// not replace): `false` when another writer was first, whose file stays.
pub(crate) fn create_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<bool> {
    let temp = write_temporary(path, bytes, mode)?;
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            sync_dir(path)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_atomic_write_replaces_whole_with_its_mode_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&path, b"new", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(entries(dir.path()), vec!["key.pem"]);
        // A directory that is not there: an error, and nothing left behind.
        assert!(write_atomic(&dir.path().join("no/key.pem"), b"x", 0o600).is_err());
    }

    #[test]
    fn create_keeps_the_first_writer_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("account.pem");
        assert!(create_atomic(&path, b"first", 0o600).unwrap());
        assert!(!create_atomic(&path, b"second", 0o600).unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert_eq!(entries(dir.path()), vec!["account.pem"]);
    }
}
