//! The robust mutex: a process-shared, robust `pthread_mutex_t` living in a shared file
//! mapping (`MmapRegion`), so that threads of every process mapping the file exclude each
//! other, and a holder that dies (`kill -9` included) is reported to the next locker instead
//! of leaving the lock taken forever. Part of the mmap fence (mmap.rs, contract item 5): the
//! mutex's bytes are handed only to the C library.
//!
//! Invariants
//! - The mutex is initialised once, by the creator of the mapping, before any other process
//!   can map the file (`init`); it is never initialised again while the file is mapped.
//! - A [`MutexGuard`] exists only on the thread that locked (it is neither `Send` nor `Sync`)
//!   and unlocks when dropped.
//! - After the holder died, the next locker gets [`Locked::OwnerDied`]: it holds the mutex,
//!   must repair what the dead holder left, then calls [`DeadOwner::consistent`]. Dropping a
//!   `DeadOwner` instead unlocks it unrepaired: the C library then makes the mutex
//!   unrecoverable, and every later `lock` fails with `ENOTRECOVERABLE` (the mapping must be
//!   rebuilt). A repairer that dies while repairing leaves the mutex reporting a dead owner
//!   again, so the next locker repairs from the start.
//!
//! Crash behaviour: the kernel walks a dying thread's robust list and marks each robust mutex
//! it held as owned by a dead thread (`FUTEX_OWNER_DIED`), waking one waiter.

#![allow(unsafe_code)]

use std::io;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use super::mmap::MmapRegion;

/// Bytes of a `pthread_mutex_t` in this process's C library (a mapping records it: a process
/// of another ABI must not share the mutex).
pub const MUTEX_BYTES: usize = std::mem::size_of::<libc::pthread_mutex_t>();
/// Alignment the mutex needs inside the mapping.
pub const MUTEX_ALIGN: usize = std::mem::align_of::<libc::pthread_mutex_t>();

#[inline]
fn mutex_at(region: &MmapRegion, pos: usize) -> io::Result<NonNull<libc::pthread_mutex_t>> {
    region
        .raw_at(pos, MUTEX_BYTES, MUTEX_ALIGN)
        .map(NonNull::cast)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Initialises a process-shared robust mutex at `pos` of `region` (writable, aligned). Only
/// the mapping's creator calls it, before the file is visible to other processes.
pub fn init(region: &MmapRegion, pos: usize) -> io::Result<()> {
    let mutex = mutex_at(region, pos)?;
    let mut attr = MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
    // SAFETY: `attr` is writable storage for an attribute object, initialised by this call
    // before any other use.
    check(unsafe { libc::pthread_mutexattr_init(attr.as_mut_ptr()) })?;
    // SAFETY: `attr` was initialised above; the setters only write into it; the mutex bytes
    // are inside the mapping (checked by `mutex_at`) and no other thread or process uses them
    // yet (the creator's contract); `attr` is destroyed once, after its last use.
    let rc = unsafe {
        let a = attr.as_mut_ptr();
        let mut rc = libc::pthread_mutexattr_setpshared(a, libc::PTHREAD_PROCESS_SHARED);
        if rc == 0 {
            rc = libc::pthread_mutexattr_setrobust(a, libc::PTHREAD_MUTEX_ROBUST);
        }
        if rc == 0 {
            rc = libc::pthread_mutex_init(mutex.as_ptr(), a);
        }
        libc::pthread_mutexattr_destroy(a);
        rc
    };
    check(rc)
}

/// The outcome of [`lock`]: the mutex is held either way.
#[derive(Debug)]
pub enum Locked<'r> {
    /// The previous holder unlocked it.
    Clean(MutexGuard<'r>),
    /// The previous holder died holding it (`EOWNERDEAD`): repair, then `consistent`.
    OwnerDied(DeadOwner<'r>),
}

/// The held mutex; unlocks on drop.
#[derive(Debug)]
pub struct MutexGuard<'r> {
    mutex: NonNull<libc::pthread_mutex_t>,
    // Borrows the mapping so that it outlives the guard; the raw pointer keeps the guard on
    // its thread (not Send, not Sync), as the C library requires of the unlocker.
    _region: PhantomData<&'r MmapRegion>,
}

/// The mutex, held after its previous holder died, before the repair is done.
#[derive(Debug)]
pub struct DeadOwner<'r>(MutexGuard<'r>);

/// Locks the mutex at `pos` of `region`, waiting for it. `Err`: the mutex is unrecoverable
/// (`ENOTRECOVERABLE`: a repairer gave up) or the bytes are not a mutex this process can use.
pub fn lock(region: &MmapRegion, pos: usize) -> io::Result<Locked<'_>> {
    let mutex = mutex_at(region, pos)?;
    // SAFETY: the bytes are inside the live mapping `region` borrows for 'r, aligned, and were
    // initialised as a process-shared mutex by the mapping's creator (module invariant).
    let rc = unsafe { libc::pthread_mutex_lock(mutex.as_ptr()) };
    let guard = MutexGuard {
        mutex,
        _region: PhantomData,
    };
    match rc {
        0 => Ok(Locked::Clean(guard)),
        libc::EOWNERDEAD => Ok(Locked::OwnerDied(DeadOwner(guard))),
        e => {
            // Not locked: the guard must not unlock.
            std::mem::forget(guard);
            Err(io::Error::from_raw_os_error(e))
        }
    }
}

/// [`lock`] without waiting: `Ok(None)` when another thread or process holds the mutex.
#[inline]
pub fn try_lock(region: &MmapRegion, pos: usize) -> io::Result<Option<Locked<'_>>> {
    let mutex = mutex_at(region, pos)?;
    // SAFETY: as in `lock`.
    let rc = unsafe { libc::pthread_mutex_trylock(mutex.as_ptr()) };
    let guard = MutexGuard {
        mutex,
        _region: PhantomData,
    };
    match rc {
        0 => Ok(Some(Locked::Clean(guard))),
        libc::EOWNERDEAD => Ok(Some(Locked::OwnerDied(DeadOwner(guard)))),
        e => {
            // Not locked: the guard must not unlock.
            std::mem::forget(guard);
            if e == libc::EBUSY {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(e))
            }
        }
    }
}

impl<'r> DeadOwner<'r> {
    /// Marks the mutex consistent again, once the caller repaired what the dead holder left.
    pub fn consistent(self) -> io::Result<MutexGuard<'r>> {
        // SAFETY: this thread holds the mutex (locked with EOWNERDEAD) and the mapping is
        // borrowed for 'r, so the bytes are a live, initialised mutex.
        check(unsafe { libc::pthread_mutex_consistent(self.0.mutex.as_ptr()) })?;
        Ok(self.0)
    }
}

impl Drop for MutexGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this thread holds the mutex (`lock`), and the
        // mapping is borrowed for the guard's lifetime. An unlock cannot fail for the owner.
        unsafe { libc::pthread_mutex_unlock(self.mutex.as_ptr()) };
    }
}
