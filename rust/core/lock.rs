//! The store's writer lock and abort marker.
//!
//! `lock`: an exclusive `flock` taken before recovery touches any file. The kernel releases it
//! the moment the holder dies (even by SIGKILL), so there are no stale locks; it also conflicts
//! between two opens in one process. Its content (`lock pid=<pid>`) is information only.
//!
//! `abort`: created by the writer at open, removed at clean close; finding it at open means the
//! previous writer did not close cleanly and recovery must be abnormal.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::util::fs;

/// Holds the exclusive writer lock until dropped.
#[derive(Debug)]
pub struct StoreLock {
    file: File,
    path: PathBuf,
}

impl StoreLock {
    /// Takes the lock of the store at `root`, waiting up to `wait` for another writer.
    /// `interrupted` is asked between two attempts; once it says true the wait ends with
    /// `Error::Interrupted`.
    pub fn acquire(
        root: &Path,
        wait: Option<Duration>,
        mode: u32,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<Self> {
        let path = root.join("lock");
        let file = fs::open_rw(&path, mode)?;
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if deadline.is_some_and(|d| Instant::now() < d) {
                        if interrupted() {
                            return Err(Error::Interrupted);
                        }
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    let holder = std::fs::read_to_string(&path)
                        .ok()
                        .map(|s| s.trim().to_owned());
                    return Err(Error::StoreLocked {
                        path: root.to_path_buf(),
                        holder,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("flock", &path, e)),
            }
        }
        let text = format!("lock pid={}\n", std::process::id());
        file.set_len(0)
            .map_err(|e| Error::io("truncate", &path, e))?;
        file.write_all_at(text.as_bytes(), 0)
            .map_err(|e| Error::io("write", &path, e))?;
        Ok(StoreLock { file, path })
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the flock as well; unlock explicitly for clarity.
        let _ = self.file.unlock();
    }
}

/// True if the abort marker exists (the previous writer crashed).
pub fn abort_exists(root: &Path) -> bool {
    root.join("abort").exists()
}

/// Creates the abort marker durably.
pub fn create_abort(root: &Path, mode: u32) -> Result<()> {
    let path = root.join("abort");
    let mut f = fs::open_rw(&path, mode)?;
    f.set_len(0).map_err(|e| Error::io("truncate", &path, e))?;
    write!(f, "{}", std::process::id()).map_err(|e| Error::io("write", &path, e))?;
    f.sync_all().map_err(|e| Error::io("fsync", &path, e))?;
    fs::fsync_dir(root)
}

/// Removes the abort marker durably (clean close).
pub fn remove_abort(root: &Path) -> Result<()> {
    let path = root.join("abort");
    match std::fs::remove_file(&path) {
        Ok(()) => fs::fsync_dir(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("unlink", &path, e)),
    }
}
