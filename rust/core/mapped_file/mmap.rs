//! The mmap fence: with robust.rs, the only `unsafe` code in the crate.
//!
//! `MmapRegion` owns one `mmap` of a file (or of anonymous memory) and exposes bounds-checked
//! primitives only. Its safety contract, relied on by every `// SAFETY:` comment below, names
//! every writer of mapped bytes and every reader:
//!
//! 1. The mapping's length is fixed when it is created and the file is never shrunk while mapped
//!    (mqlite zeroes instead of truncating and deletes files by `unlink`, which keeps existing
//!    mappings valid). A file shrunk by a foreign process is outside the contract (SIGBUS).
//! 2. Within one process, a byte range is either being written by exactly one writer or being
//!    read, never both: `MappedFile` hands out write access only past its published position and
//!    read access only below it (see `mapped_file/mod.rs`). The writers of a file's bytes are
//!    its `FileWriter` (through the mapping), recovery (which zeroes past the valid end while
//!    no reader is open) and the warm-ahead's zero fill (item 4).
//! 3. Other processes may write the mapped file concurrently (a read-only open following a
//!    writer). A follower's mapping reports every byte as published, so item 2 does not order
//!    it against that writer. What holds instead:
//!    - The writer changes a byte of a commit-log or consume-queue file only past its published
//!      end (appends, and the zero fill of item 4) or, in recovery after its own crash, by
//!      zeroing a tail past the valid end. Published bytes stay as they are while the file
//!      exists.
//!    - A follower treats every byte of another process's file as untrusted input that may
//!      change while it reads it. Consume-queue units are copied out (`copy_out`), then
//!      validated. Commit-log records are read in place (`slice`: the follower's scan, lookups
//!      and record reads) and each is validated (size bounds, magic, CRC of the bytes as read)
//!      before its contents are used. A change racing with a read is the writer reaching
//!      bytes past its published end that the follower scanned ahead into, or zeroing a
//!      crashed tail: the follower sees a torn or zero record and rejects it. The one window
//!      left is a change between the check and the copy handed out (`extend_from_slice` of
//!      the checked bytes), which only a writer recovering from its own crash can cause, on
//!      records that were never durable.
//!    - A `&[u8]` that another process may change is outside what Rust's aliasing rules
//!      describe; it stays harmless because this process never writes those bytes and reads
//!      them only as plain bytes, whose values are checked as above, never assumed.
//!    - Publication across processes goes through 4-byte aligned atomic words, on which a
//!      thread may also sleep (a shared futex) until another process changes the word and
//!      wakes it.
//! 4. The warm-ahead's zero fill (mapped_file_queue/warm.rs) writes zeros with `pwrite` to the
//!    file, not through the mapping, over bytes the mapping's writer has not reached: on the
//!    commit log the fill fence (mapped_file_queue/fence.rs) keeps it off every byte the
//!    appender has announced or published, and on a consume queue the queue's only writer
//!    makes it itself, past its position. The page cache is shared, so those zeros appear in
//!    the mapping; they only ever land on zeros (the bytes are fallocated and unwritten), so
//!    no reader, in this process or another, can tell them from the bytes before.
//! 5. The shared writer mapping (`<store>/run/writer.shm`, crate::shared) is read and written
//!    by every writing process at once. Its words are accessed only as atomics (`atomic_u64`,
//!    `atomic_u8`), its byte strings (topic names) are written only by the holder of its robust
//!    mutex (`copy_in`) and read with `copy_out`, and no `&[u8]` of it is ever handed out. The
//!    mutex's bytes are handed only to the C library (robust.rs). Its creator initialises it
//!    before the file is renamed into place, so no other process maps it half-built. No byte
//!    of it, nor of the wake-up page, is touched before its disk blocks are reserved: a fault
//!    into a hole of a shared mapping on a full disk is a SIGBUS (shared/table.rs).
//!
//! The fence is this file and robust.rs (the process-shared robust mutex): the only two files
//! of the crate allowed `unsafe` code (tests/layering.rs checks it).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// One memory mapping, unmapped on drop.
#[derive(Debug)]
pub struct MmapRegion {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    /// A shared mapping of a file (not anonymous memory): dropping its pages loses nothing.
    file_backed: bool,
}

/// Page advice for a range of a mapping (see `MmapRegion::advise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Fault the pages in, writable, now (`MADV_POPULATE_WRITE`): the page-cache allocation,
    /// zeroing and write fault that a first write would stop for happen on the calling thread
    /// instead. The pages become dirty (zeros) ahead of the data: a writer slower than the
    /// kernel's writeback expiry may see them written twice, and the file's mtime moves.
    PopulateWrite,
    /// Drop the process's page-table entries for the pages (`MADV_DONTNEED`); the data stays in
    /// the page cache and the file, and a later access faults it back in. File mappings only.
    DontNeed,
}

// SAFETY: the region is plain memory; concurrent access is governed by the contract above, and
// every access goes through bounds-checked methods that never hand out overlapping `&mut`.
unsafe impl Send for MmapRegion {}
// SAFETY: as above; shared access only reads published ranges or uses atomics.
unsafe impl Sync for MmapRegion {}

impl MmapRegion {
    /// Maps `len` bytes of `file` shared. `populate` pre-faults the pages (MAP_POPULATE) so the
    /// first write to each page does not stall the appender.
    pub fn map_file(file: &File, len: usize, writable: bool, populate: bool) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map zero bytes",
            ));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let mut flags = libc::MAP_SHARED;
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh mapping of a valid descriptor; the kernel picks the address. The result
        // is checked for MAP_FAILED before use.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, file.as_raw_fd(), 0) };
        Self::from_raw(ptr, len, writable, true)
    }

    /// Maps `len` bytes of zeroed anonymous memory (the `:memory:` store).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map zero bytes",
            ));
        }
        // SAFETY: anonymous private mapping; no file involved; result checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        Self::from_raw(ptr, len, true, false)
    }

    fn from_raw(
        ptr: *mut libc::c_void,
        len: usize,
        writable: bool,
        file_backed: bool,
    ) -> io::Result<Self> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("null mapping"))?;
        Ok(MmapRegion {
            ptr,
            len,
            writable,
            file_backed,
        })
    }

    /// Applies `advice` to the pages overlapping `[start, end)` (clamped to the mapping).
    /// Content never changes: `DontNeed` is refused on anonymous memory (where it would zero
    /// the pages) and `PopulateWrite` on read-only mappings. Kernels without
    /// `MADV_POPULATE_WRITE` (before 5.14) report `EINVAL`; callers treat advice as optional.
    pub fn advise(&self, start: usize, end: usize, advice: Advice) -> io::Result<()> {
        let refused = match advice {
            Advice::DontNeed => !self.file_backed,
            Advice::PopulateWrite => !self.writable,
        };
        if refused {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        let end = end.min(self.len);
        let page = page_size();
        let aligned = start - start % page;
        if aligned >= end {
            return Ok(());
        }
        let flag = match advice {
            Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
            Advice::DontNeed => libc::MADV_DONTNEED,
        };
        // SAFETY: the range lies inside this mapping (clamped) and starts on a page boundary.
        // Neither advice changes what the memory holds: populating only faults pages in, and
        // dropping the PTEs of a shared file mapping re-reads the same file bytes on the next
        // access (anonymous mappings are refused above), so outstanding slices stay valid.
        let rc =
            unsafe { libc::madvise(self.ptr.as_ptr().add(aligned).cast(), end - aligned, flag) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length mappings are refused at creation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn check(&self, pos: usize, n: usize) -> bool {
        pos.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// Shared view of `[pos, pos+n)`.
    ///
    /// Contract (2): the caller reads only a range no writer in this process is writing.
    pub(super) fn slice(&self, pos: usize, n: usize) -> Option<&[u8]> {
        if !self.check(pos, n) {
            return None;
        }
        // SAFETY: in bounds (checked); the range is stable for the borrow per contract (2).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(pos), n) })
    }

    /// Exclusive view of `[pos, pos+n)` for the single writer.
    ///
    /// Contract (2): `MappedFile` calls this only through its unique `FileWriter`, only past the
    /// published position, so no shared view of these bytes exists in this process.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn slice_mut(&self, pos: usize, n: usize) -> Option<&mut [u8]> {
        if !self.writable || !self.check(pos, n) {
            return None;
        }
        // SAFETY: in bounds (checked), mapped writable, and exclusive per contract (2).
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(pos), n) })
    }

    /// Copies bytes out with a raw copy, for ranges another process may be writing (contract 3).
    pub fn copy_out(&self, pos: usize, dst: &mut [u8]) -> bool {
        if !self.check(pos, dst.len()) {
            return false;
        }
        // SAFETY: source in bounds (checked), destination is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(pos), dst.as_mut_ptr(), dst.len())
        };
        true
    }

    fn atomic_u32(&self, pos: usize) -> Option<&AtomicU32> {
        if !pos.is_multiple_of(4) || !self.check(pos, 4) {
            return None;
        }
        // SAFETY: in bounds, 4-byte aligned (the mapping is page aligned), and AtomicU32 has the
        // layout of u32; all concurrent access to this word is atomic (contract 3).
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(pos).cast::<u32>()) })
    }

    /// The 8-byte aligned word at `pos` as an atomic, for the shared writer mapping (item 5),
    /// whose words are only ever accessed atomically.
    #[inline(always)]
    pub fn atomic_u64(&self, pos: usize) -> Option<&AtomicU64> {
        if !pos.is_multiple_of(8) || !self.check(pos, 8) {
            return None;
        }
        // SAFETY: in bounds, 8-byte aligned (the mapping is page aligned), and AtomicU64 has the
        // layout of u64; all concurrent access to this word is atomic (contract 5).
        Some(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(pos).cast::<u64>()) })
    }

    /// The `N` 8-byte aligned words from `pos` as atomics (item 5), with one bounds check for
    /// all of them: the shared writer mapping's header, whose words an append reads and writes
    /// a dozen times.
    #[inline(always)]
    pub fn atomic_u64s<const N: usize>(&self, pos: usize) -> Option<&[AtomicU64; N]> {
        if !pos.is_multiple_of(8) || !self.check(pos, N * 8) {
            return None;
        }
        // SAFETY: in bounds, 8-byte aligned (the mapping is page aligned), and
        // `[AtomicU64; N]` has the layout of `[u64; N]`; all concurrent access to these words
        // is atomic (contract 5).
        Some(unsafe { &*self.ptr.as_ptr().add(pos).cast::<[AtomicU64; N]>() })
    }

    /// The byte at `pos` as an atomic (a flag of the shared writer mapping, item 5).
    pub fn atomic_u8(&self, pos: usize) -> Option<&AtomicU8> {
        if !self.check(pos, 1) {
            return None;
        }
        // SAFETY: in bounds; AtomicU8 has the layout and alignment of u8; all concurrent access
        // to this byte is atomic (contract 5).
        Some(unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().add(pos)) })
    }

    /// Copies `src` into the mapping at `pos` with a raw copy: bytes of the shared writer
    /// mapping that only the holder of its mutex writes (contract 5). False when out of bounds
    /// or read-only.
    pub fn copy_in(&self, pos: usize, src: &[u8]) -> bool {
        if !self.writable || !self.check(pos, src.len()) {
            return false;
        }
        // SAFETY: destination in bounds (checked) and mapped writable; the source is a distinct
        // Rust buffer; per contract 5 no reference to these bytes exists in this process.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(pos), src.len())
        };
        true
    }

    /// The address of `[pos, pos + n)` for the robust mutex (robust.rs), which hands it only to
    /// the C library: `None` when out of bounds, misaligned for `align` or read-only.
    #[inline]
    pub(super) fn raw_at(&self, pos: usize, n: usize, align: usize) -> Option<NonNull<u8>> {
        if !self.writable || !self.check(pos, n) || align == 0 || !pos.is_multiple_of(align) {
            return None;
        }
        // SAFETY: in bounds (checked), so the pointer stays inside this mapping and is non-null.
        NonNull::new(unsafe { self.ptr.as_ptr().add(pos) })
    }

    /// Acquire-load of the big-endian u32 at an aligned `pos`.
    pub fn load_u32_be_acquire(&self, pos: usize) -> Option<u32> {
        self.atomic_u32(pos)
            .map(|a| u32::from_be(a.load(Ordering::Acquire)))
    }

    /// Release-store of a big-endian u32 at an aligned `pos`: every byte written before it is
    /// visible to a reader (in any process) whose acquire-load sees this value.
    pub(crate) fn store_u32_be_release(&self, pos: usize, value: u32) -> bool {
        if !self.writable {
            return false;
        }
        match self.atomic_u32(pos) {
            Some(a) => {
                a.store(value.to_be(), Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Sequentially consistent compare-and-swap of the big-endian u32 at an aligned `pos` (a
    /// word other processes update too): `Ok(previous)` if it held `current` and now holds
    /// `new`, else `Err(actual)`. `Err(current)` back on a read-only or too short mapping
    /// would be ambiguous, so those report `None`.
    pub fn compare_exchange_u32_be(
        &self,
        pos: usize,
        current: u32,
        new: u32,
    ) -> Option<Result<u32, u32>> {
        if !self.writable {
            return None;
        }
        let a = self.atomic_u32(pos)?;
        Some(
            a.compare_exchange(
                current.to_be(),
                new.to_be(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .map(u32::from_be)
            .map_err(u32::from_be),
        )
    }

    /// Sleeps while the big-endian u32 at an aligned `pos` still holds `expected`: a shared
    /// `FUTEX_WAIT`, so the waker may be another process mapping the same file. Returns at once
    /// if the word differs; otherwise on a `futex_wake` of the word, after `timeout`, or on a
    /// signal. Callers re-check their condition whichever it was.
    pub fn futex_wait_be(&self, pos: usize, expected: u32, timeout: Duration) -> io::Result<()> {
        let word = self
            .atomic_u32(pos)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
        };
        // SAFETY: the word is an aligned, in-bounds u32 of this live mapping (`atomic_u32`);
        // the kernel only reads it and the timespec, which outlives the call. No FUTEX_PRIVATE
        // flag: the futex is keyed by the file page, so other processes' wakes reach it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected.to_be(),
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => Ok(()),
            _ => Err(err),
        }
    }

    /// Wakes every thread, of any process, sleeping in `futex_wait_be` on the word at `pos`.
    pub fn futex_wake(&self, pos: usize) -> io::Result<()> {
        let word = self
            .atomic_u32(pos)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: as in `futex_wait_be`; FUTEX_WAKE does not touch the word's memory.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE,
                libc::c_int::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            )
        };
        if rc >= 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// `msync(MS_SYNC)` of `[start, end)` (rounded out to pages): returns once the kernel has
    /// written those pages to the device, or the error that poisons the writer.
    pub fn flush(&self, start: usize, end: usize) -> io::Result<()> {
        let end = end.min(self.len);
        if start >= end {
            return Ok(());
        }
        let page = page_size();
        let aligned = start - start % page;
        // SAFETY: the range lies inside this mapping (clamped) and starts on a page boundary.
        let rc = unsafe {
            libc::msync(
                self.ptr.as_ptr().add(aligned).cast(),
                end - aligned,
                libc::MS_SYNC,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl MmapRegion {
    /// Lets go of the file behind the mapping while its address range stays valid: the range
    /// is replaced, in one `mmap(MAP_FIXED)`, by private anonymous memory of the same size and
    /// protection holding zeros. For a mapping that threads may still touch after its owner
    /// closed (a closed store's shared writer state): such an access reads and writes
    /// harmless private memory instead of faulting or reaching the file. Nothing is flushed.
    ///
    /// # Errors
    /// The `mmap` call's (the file then stays mapped until the region drops).
    pub fn detach_file(&self) -> io::Result<()> {
        let prot = if self.writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: ptr/len describe a mapping this value owns; MAP_FIXED replaces exactly that
        // range, so no other mapping is touched, and the range stays mapped (now anonymous) for
        // every borrow of `self` that outlives this call.
        let p = unsafe {
            libc::mmap(
                self.ptr.as_ptr().cast(),
                self.len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for MmapRegion {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nothing borrows it any more
        // (borrows are tied to &self).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The system page size (4096 if sysconf fails).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// `posix_fallocate(fd, offset, len)`; returns 0 or the error number.
pub fn posix_fallocate(fd: libc::c_int, offset: libc::off_t, len: libc::off_t) -> libc::c_int {
    // SAFETY: plain syscall on a descriptor; no memory is passed.
    unsafe { libc::posix_fallocate(fd, offset, len) }
}

/// `(total, used)` bytes of the file system holding `file` (`fstatvfs`: used is total minus
/// free, as `df` and Python's `shutil.disk_usage` count it).
// The field types are 32 or 64 bits depending on the platform.
#[allow(clippy::unnecessary_cast)]
pub fn disk_usage(file: &File) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable statvfs for the call's duration; the descriptor is open.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    let total = (st.f_blocks as u64).saturating_mul(unit);
    let free = (st.f_bfree as u64).saturating_mul(unit);
    Ok((total, total.saturating_sub(free)))
}

/// Takes an exclusive open-file-description record lock (`F_OFD_SETLK`) over the whole of
/// `fd`'s file. It conflicts with the POSIX record locks other processes take with `fcntl`
/// (Java's `FileChannel.tryLock`), and is released when the descriptor closes. Returns
/// `Ok(None)` when taken, `Ok(Some(pid))` when another process holds a conflicting lock (its
/// pid, or 0 when the holder is an open file description), else the error.
pub fn ofd_write_lock(fd: libc::c_int) -> io::Result<Option<libc::pid_t>> {
    ofd_whole_lock(fd, libc::F_WRLCK as libc::c_short)
}

/// `ofd_write_lock` taking a read (shared) lock: it conflicts with a write lock only, so the
/// processes sharing a store each hold one while a broker's `tryLock` is refused. On a
/// descriptor that holds the write lock, converts it (atomically, unlike `flock`).
pub fn ofd_read_lock(fd: libc::c_int) -> io::Result<Option<libc::pid_t>> {
    ofd_whole_lock(fd, libc::F_RDLCK as libc::c_short)
}

fn ofd_whole_lock(fd: libc::c_int, kind: libc::c_short) -> io::Result<Option<libc::pid_t>> {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: `lock` is a valid, exclusively borrowed `flock` for the duration of the call.
    if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut lock) } == 0 {
        return Ok(None);
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
        return Err(e);
    }
    // SAFETY: as for `lock`.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = kind;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: as above; F_OFD_GETLK only writes into `probe`.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut probe) };
    Ok(Some(if rc == 0 { probe.l_pid.max(0) } else { 0 }))
}

/// Takes an exclusive open-file-description record lock (`F_OFD_SETLK`, `F_WRLCK`) on bytes
/// `start..start + len` of `fd`'s file without waiting, or with `unlock` releases it
/// (`F_UNLCK`). The lock belongs to the open file description: other descriptors of the same
/// file closing do not release it, and it goes when the last descriptor of the description
/// closes (the process's death included). Returns `Ok(false)` when another open file
/// description holds a conflicting lock on part of the range, `Ok(true)` when done.
pub fn ofd_range_lock(
    fd: libc::c_int,
    start: libc::off_t,
    len: libc::off_t,
    unlock: bool,
) -> io::Result<bool> {
    let kind = if unlock { libc::F_UNLCK } else { libc::F_WRLCK };
    ofd_range(fd, kind, start, len, false)
}

/// `ofd_range_lock` taking a read (shared) lock on `start..start + len` (`len` 0: to the end of
/// any file). On a description that holds a write lock there, converts it atomically.
pub fn ofd_range_read_lock(
    fd: libc::c_int,
    start: libc::off_t,
    len: libc::off_t,
) -> io::Result<bool> {
    ofd_range(fd, libc::F_RDLCK, start, len, false)
}

/// The pid of a process holding a lock that conflicts with a read lock on `start..start +
/// len` of `fd`'s file (`F_OFD_GETLK`; a classic `fcntl` lock reports its owner's pid, an
/// OFD lock reports -1), or 0 when none is known.
pub fn ofd_range_read_conflict_pid(
    fd: libc::c_int,
    start: libc::off_t,
    len: libc::off_t,
) -> libc::pid_t {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are a valid value.
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_RDLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = start;
    probe.l_len = len;
    // SAFETY: `probe` is a valid, exclusively borrowed `flock`; F_OFD_GETLK only writes into it.
    let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut probe) };
    if rc == 0 && probe.l_type != libc::F_UNLCK as libc::c_short {
        probe.l_pid.max(0)
    } else {
        0
    }
}

/// Takes an exclusive open-file-description record lock on `start..start + len`, waiting for
/// it (`F_OFD_SETLKW`): returns once it is held. A signal interrupts the wait (`EINTR`).
pub fn ofd_range_lock_wait(
    fd: libc::c_int,
    start: libc::off_t,
    len: libc::off_t,
) -> io::Result<()> {
    ofd_range(fd, libc::F_WRLCK, start, len, true).map(drop)
}

fn ofd_range(
    fd: libc::c_int,
    kind: libc::c_int,
    start: libc::off_t,
    len: libc::off_t,
    wait: bool,
) -> io::Result<bool> {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = len;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    // SAFETY: `lock` is a valid, exclusively borrowed `flock` for the duration of the call;
    // `l_pid` is zero, as the F_OFD_* commands require.
    if unsafe { libc::fcntl(fd, cmd, &mut lock) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) if !wait => Ok(false),
        _ => Err(e),
    }
}

static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FORK_GUARD: std::sync::Once = std::sync::Once::new();

extern "C" fn bump_fork_generation() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The number of `fork()`s this process is removed from its ancestors that registered the
/// guard. A store records it at open and refuses use when it changes (the child has none of the
/// store's threads and shares its lock and mappings with the parent).
pub fn fork_generation() -> u64 {
    FORK_GUARD.call_once(|| {
        // SAFETY: registers a child-side handler that only performs an atomic increment, which
        // is async-signal-safe and valid in a freshly forked child.
        unsafe { libc::pthread_atfork(None, None, Some(bump_fork_generation)) };
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod ofd_range_tests {
    use std::fs::OpenOptions;
    use std::os::unix::io::AsRawFd;

    use super::ofd_range_lock;

    #[test]
    fn byte_locks_conflict_between_descriptions_and_survive_another_descriptor_closing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("queues.lock");
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .expect("open")
        };
        let (a, b) = (open(), open());
        // Far past the end of the (empty) file: a lock does not need the bytes to exist.
        let byte = (7_i64 << 32) + 3;
        assert!(ofd_range_lock(a.as_raw_fd(), byte, 1, false).expect("lock a"));
        assert!(!ofd_range_lock(b.as_raw_fd(), byte, 1, false).expect("lock b"));
        assert!(ofd_range_lock(b.as_raw_fd(), byte + 1, 1, false).expect("next byte"));
        // A POSIX record lock would be dropped here, with every lock of the process on the file.
        drop(open());
        assert!(!ofd_range_lock(b.as_raw_fd(), byte, 1, false).expect("still a's"));
        assert!(ofd_range_lock(a.as_raw_fd(), byte, 1, true).expect("unlock a"));
        assert!(ofd_range_lock(b.as_raw_fd(), byte, 1, false).expect("now b's"));
        drop(b);
        assert!(ofd_range_lock(a.as_raw_fd(), byte + 1, 2, false).expect("b closed"));
    }
}
