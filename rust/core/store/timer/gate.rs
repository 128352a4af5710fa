//! The gate: the one lock (one per kind of state: the timers' and the transactions') under which a timer, of either source (the timer log or a
//! delay level), changes state. A delivery pass (the re-puts of due timers of both sources), a
//! cancel and a reschedule each take it around "look at the timer, append the record that
//! changes it", so that for one timer exactly one of them wins and each answer is what the log
//! says when the gate is let go.
//!
//! Two layers: a mutex for the threads of this store handle, then (shared writers only) the
//! OFD write lock on the gate's byte of the store's `lock` file (`TIMER_BYTE` for timers,
//! `TXN_BYTE` for transactions, store/txn/), through a descriptor of
//! the gate's own, for the other processes (and other handles of the store in this process:
//! OFD locks conflict between open file descriptions, not between processes).
//!
//! Invariants
//! - Held across the look and the append: whatever the holder read (the progress, the log to
//!   its end) stays true until it appends and lets go.
//! - Taken before the timer service's state mutex, never after it.
//! - An exclusive writer takes the mutex only: its whole-file lock already keeps every other
//!   process out (and would conflict with the byte lock). On a file system without record
//!   locks (`EINVAL`, `ENOLCK`) the mutex only too: there every shared writer leads (leader.rs).
//!
//! Crash behaviour: a holder killed at any point leaves the byte to the kernel, which
//! releases it. Its append, if it began, was made under the append lock: the record is whole
//! in the log, or the next appender's repair removes it (docs/design-many-writers.md). The next
//! holder reads the log afresh, so there is nothing to repair here.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::mapped_file::mmap;
use crate::util::fs;

/// See the module doc.
#[derive(Debug)]
pub(in crate::store) struct Gate {
    /// The descriptor whose OFD lock is the byte (`None`: the mutex alone).
    file: Mutex<Option<File>>,
    path: std::path::PathBuf,
    /// The byte of `lock` this gate locks.
    byte: libc::off_t,
}

/// Holds the gate until dropped.
#[derive(Debug)]
pub(in crate::store) struct Held<'a> {
    file: MutexGuard<'a, Option<File>>,
    /// The byte locked (`None`: the mutex alone).
    byte: Option<libc::off_t>,
}

impl Gate {
    /// A gate on byte `byte` of the `lock` file of the store at `root`; `shared`: the store is
    /// opened by shared writers.
    ///
    /// # Errors
    /// `Io` when `lock` cannot be opened.
    pub(in crate::store) fn new(
        root: Option<&Path>,
        shared: bool,
        mode: u32,
        byte: libc::off_t,
    ) -> Result<Self> {
        let path = root.map(|r| r.join("lock")).unwrap_or_default();
        let file = match (root, shared) {
            (Some(_), true) => Some(fs::open_rw(&path, mode)?),
            _ => None,
        };
        Ok(Gate {
            file: Mutex::new(file),
            path,
            byte,
        })
    }

    /// Store close: the descriptor is closed (a closed store holds none of the store's files
    /// open); later takes use the mutex alone.
    pub(in crate::store) fn release(&self) {
        drop(self.file.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Takes the gate if no thread or process holds it; `None` when one does.
    ///
    /// # Errors
    /// As `take`.
    pub(in crate::store) fn try_take(&self) -> Result<Option<Held<'_>>> {
        let file = match self.file.try_lock() {
            Ok(f) => f,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
        };
        let Some(fd) = file.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(Some(Held { file, byte: None }));
        };
        match mmap::ofd_range_lock(fd, self.byte, 1, false) {
            Ok(true) => Ok(Some(Held {
                file,
                byte: Some(self.byte),
            })),
            Ok(false) => Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => {
                Ok(Some(Held { file, byte: None }))
            }
            Err(e) => Err(Error::io("fcntl(F_OFD_SETLK)", &self.path, e)),
        }
    }

    /// Takes the gate, waiting for the thread or process that holds it.
    ///
    /// # Errors
    /// `Io` when the byte lock fails for another reason than an interrupted wait or a file
    /// system without record locks.
    pub(in crate::store) fn take(&self) -> Result<Held<'_>> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(fd) = file.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(Held { file, byte: None });
        };
        loop {
            match mmap::ofd_range_lock_wait(fd, self.byte, 1) {
                Ok(()) => {
                    return Ok(Held {
                        file,
                        byte: Some(self.byte),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => {
                    return Ok(Held { file, byte: None })
                }
                Err(e) => return Err(Error::io("fcntl(F_OFD_SETLKW)", &self.path, e)),
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let (Some(byte), Some(f)) = (self.byte, self.file.as_ref()) {
            // A failed unlock leaves the byte to the descriptor's close (the store's).
            let _ = mmap::ofd_range_lock(f.as_raw_fd(), byte, 1, true);
        }
    }
}
