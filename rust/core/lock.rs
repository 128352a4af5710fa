//! The store's writer lock and abort marker.
//!
//! `lock`: two exclusive locks on it, taken before recovery touches any file: an `flock` (what
//! other mqlite processes take) and an open-file-description `fcntl` record lock over the whole
//! file (it conflicts with the POSIX record lock an Apache RocketMQ broker takes with
//! `FileChannel.tryLock`, which `flock` does not see). Neither mqlite nor a broker can therefore
//! open a store the other holds. The kernel releases both the moment the holder dies (even by
//! SIGKILL), so there are no stale locks; both conflict between two opens in one process too.
//! Its content (`lock pid=<pid>`) is information only, written once the open succeeded.
//!
//! Shared writers (`StoreConfig::shared_writers`, docs/design-many-writers.md) hold both locks
//! shared instead (`flock(LOCK_SH)` and an OFD read lock over every byte below
//! [`LEADER_BYTE`], the byte whose write lock elects their leader), so that they admit each other and
//! refuse an exclusive writer (and a broker), which refuses them in turn. They open and close
//! under `open.lock` (an exclusive `flock`, [`OpenLock`]): an opener that takes `lock`
//! exclusively there is the first (no other process has the store open) and recovers, then
//! converts to shared before it lets the next opener in; a closer that can convert its shared
//! lock to an exclusive one there is the last. A `flock` conversion is not atomic in Linux (the
//! old lock goes first), which only matters against an exclusive opener, which does not take
//! `open.lock`: one slipping in between makes the conversion fail with `StoreLocked`.
//!
//! `abort`: created by the writer at open, removed at clean close; finding it at open means the
//! previous writer did not close cleanly and recovery must be abnormal. Shared writers leave
//! it to the last closer.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::mapped_file::mmap;
use crate::util::fs;

/// The byte of `lock` whose OFD write lock makes its holder the shared writers' leader
/// (leader.rs). Shared writers' read locks cover `[0, LEADER_BYTE)` only, so that it stays
/// free for the election; an exclusive writer's and a broker's whole-file locks cover it too.
pub const LEADER_BYTE: libc::off_t = 1 << 32;

/// The byte of `lock` whose OFD write lock serialises every state change of a timer among
/// shared writers (a delivery, a cancel, a reschedule: store/timer/gate.rs). Above
/// [`LEADER_BYTE`], so that shared writers' read locks leave it free.
pub const TIMER_BYTE: libc::off_t = LEADER_BYTE + 1;

/// The byte of `lock` whose OFD write lock serialises every state change of a transaction
/// among shared writers (a half, a commit, a rollback, a check: store/txn/). Above
/// [`LEADER_BYTE`] for the same reason as [`TIMER_BYTE`].
pub const TXN_BYTE: libc::off_t = LEADER_BYTE + 2;

/// Holds the writer lock (exclusive, or shared among shared writers) until dropped.
#[derive(Debug)]
pub struct StoreLock {
    file: File,
    path: PathBuf,
}

/// `open.lock`, held exclusively while a shared writer opens or closes; released when dropped.
#[derive(Debug)]
pub struct OpenLock {
    _file: File,
}

impl OpenLock {
    /// Takes `<root>/open.lock`, waiting for another opener or closer (they hold it for the
    /// length of an open or a close). `interrupted` as for `StoreLock::acquire`.
    pub fn acquire(root: &Path, mode: u32, interrupted: &mut dyn FnMut() -> bool) -> Result<Self> {
        let path = root.join("open.lock");
        let file = fs::open_rw(&path, mode)?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(OpenLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if interrupted() {
                        return Err(Error::Interrupted);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("flock", &path, e)),
            }
        }
    }
}

impl StoreLock {
    /// Takes the locks of the store at `root`, waiting up to `wait` for another writer.
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
            let held_by = match try_both(&file, &path)? {
                None => break,
                Some(h) => h,
            };
            if deadline.is_some_and(|d| Instant::now() < d) {
                if interrupted() {
                    return Err(Error::Interrupted);
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            return Err(Error::StoreLocked {
                path: root.to_path_buf(),
                holder: Some(held_by).filter(|h| !h.is_empty()),
            });
        }
        Ok(StoreLock { file, path })
    }

    /// Takes the locks of the store at `root` as a shared writer, under `open.lock` (the caller
    /// holds it). Returns the lock and whether this opener is the first: it then holds both
    /// locks exclusively, and converts them with [`StoreLock::share`] once it has recovered.
    /// Waits as `acquire` does while an exclusive writer (or a broker) holds the store.
    pub fn acquire_shared(
        root: &Path,
        wait: Option<Duration>,
        mode: u32,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<(Self, bool)> {
        let path = root.join("lock");
        let file = fs::open_rw(&path, mode)?;
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            if try_both(&file, &path)?.is_none() {
                return Ok((StoreLock { file, path }, true));
            }
            let held_by = match try_shared(&file, &path)? {
                None => return Ok((StoreLock { file, path }, false)),
                Some(h) => h,
            };
            if deadline.is_some_and(|d| Instant::now() < d) {
                if interrupted() {
                    return Err(Error::Interrupted);
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            return Err(Error::StoreLocked {
                path: root.to_path_buf(),
                holder: Some(held_by).filter(|h| !h.is_empty()),
            });
        }
    }

    /// The first shared opener, recovered: converts both locks to shared ones (module doc).
    pub fn share(&self) -> Result<()> {
        match self.file.try_lock_shared() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::StoreLocked {
                    path: self
                        .path
                        .parent()
                        .unwrap_or(self.path.as_path())
                        .to_path_buf(),
                    holder: Some("an exclusive writer that opened meanwhile".into()),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("flock", &self.path, e)),
        }
        // The read lock stops short of the leader byte, which the write lock covered: it is
        // then let go of, for the leader election (leader.rs).
        let fd = self.file.as_raw_fd();
        let converted = mmap::ofd_range_read_lock(fd, 0, LEADER_BYTE)
            .and_then(|_| mmap::ofd_range_lock(fd, LEADER_BYTE, 0, true));
        match converted {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => Ok(()),
            Err(e) => Err(Error::io("fcntl(F_OFD_SETLK)", &self.path, e)),
        }
    }

    /// A shared writer closing, under `open.lock`: whether it is the last one (its lock then
    /// becomes exclusive). Not the last, it may have lost its shared `flock` (a failed
    /// conversion drops it in Linux), which a closing writer no longer needs.
    pub fn is_last(&self) -> Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("flock", &self.path, e)),
        }
    }

    /// Writes `lock pid=<pid>` into the file (once the open has succeeded, so a failed open
    /// leaves the file as it found it).
    pub fn record_holder(&self) -> Result<()> {
        let text = format!("lock pid={}\n", std::process::id());
        self.file
            .set_len(0)
            .map_err(|e| Error::io("truncate", &self.path, e))?;
        self.file
            .write_all_at(text.as_bytes(), 0)
            .map_err(|e| Error::io("write", &self.path, e))
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Tries the `flock`, then the record lock. `Ok(None)`: both taken. `Ok(Some(who))`: one is
/// held elsewhere (neither is kept), `who` describing the holder as far as it is known.
fn try_both(file: &File, path: &Path) -> Result<Option<String>> {
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_owned())
                .unwrap_or_default();
            return Ok(Some(holder));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("flock", path, e)),
    }
    match crate::mapped_file::mmap::ofd_write_lock(file.as_raw_fd()) {
        Ok(None) => Ok(None),
        Ok(Some(pid)) => {
            let _ = file.unlock();
            let who = if pid > 0 {
                format!("an fcntl lock of pid {pid}, as an Apache RocketMQ broker takes")
            } else {
                "an fcntl lock, as an Apache RocketMQ broker takes".to_owned()
            };
            Ok(Some(who))
        }
        // A file system without record locks: the flock alone still excludes mqlite writers.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => Ok(None),
        Err(e) => {
            let _ = file.unlock();
            Err(Error::io("fcntl(F_OFD_SETLK)", path, e))
        }
    }
}

/// `try_both` taking both locks shared: `Ok(Some(who))` while an exclusive writer or a broker
/// holds one.
fn try_shared(file: &File, path: &Path) -> Result<Option<String>> {
    match file.try_lock_shared() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(path)
                .ok()
                .map(|s| format!("{} (an exclusive writer)", s.trim()))
                .unwrap_or_default();
            return Ok(Some(holder));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("flock", path, e)),
    }
    match mmap::ofd_range_read_lock(file.as_raw_fd(), 0, LEADER_BYTE) {
        Ok(true) => Ok(None),
        Ok(false) => {
            let pid = mmap::ofd_range_read_conflict_pid(file.as_raw_fd(), 0, LEADER_BYTE);
            let _ = file.unlock();
            Ok(Some(if pid > 0 {
                format!("an fcntl lock of pid {pid}, as an Apache RocketMQ broker takes")
            } else {
                "an fcntl lock, as an Apache RocketMQ broker takes".to_owned()
            }))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => Ok(None),
        Err(e) => {
            let _ = file.unlock();
            Err(Error::io("fcntl(F_OFD_SETLK)", path, e))
        }
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
    fs::sync_file(&f, &path)?;
    fs::fsync_dir(root)
}

/// Removes the abort marker durably (clean close).
pub fn remove_abort(root: &Path) -> Result<()> {
    let path = root.join("abort");
    match fs::remove_file(&path) {
        Ok(()) => fs::fsync_dir(root),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
