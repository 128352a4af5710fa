//! MappedFile: one fixed-size, memory-mapped file of a `MappedFileQueue`.
//!
//! On disk: `<dir>/<20-digit start offset>`, exactly `size` bytes: fallocated whole
//! (`Reserve::Whole`), or a fallocated prefix followed by a hole (`Reserve::Grow`, alloc.rs).
//!
//! Invariants
//! - `published <= size`; bytes below `published` are immutable while the store runs.
//! - `reserved` only grows while a mapping lives, and bytes below it have disk blocks
//!   (fallocated or written). The writer writes through the mapping only below it
//!   (`append_with` refuses past it), and grows it first (`FileWriter::make_room`): a write
//!   into a hole on a full disk would be a SIGBUS, a failed fallocate is a `StoreFull` error.
//!   Page faulting ahead (`populate`, `advise`, `zero_fill`) stays below it too. A mapping of
//!   a file on disk with `Reserve::Grow` (opened at load, or mapped again after its queue let
//!   go of it) starts with nothing counted as reserved, whatever was reserved before: its
//!   writer reserves again (fallocate) ahead of itself before its first write.
//! - At most one `FileWriter` exists per mapping at a time (dropping it lets another be
//!   taken, at the published position); it writes only at or past `published`, so readers
//!   (limited to `[0, published)`) never see a byte being written.
//! - `flushed <= published`: `flushed` only advances after a successful msync.
//!
//! Crash behaviour: a process crash keeps every byte written to the mapping (the kernel owns the
//! page cache). After an OS crash or power loss only bytes below the last successful flush are
//! guaranteed; recovery (commit_log/recovery.rs) finds the valid end and zeroes the rest.
//!
//! Writers: the owner of the `FileWriter` (the commit-log appender or the dispatcher), and
//! `zero_fill`, which `pwrite`s zeros past the writer's position only (mmap.rs, contract item
//! 4). Readers: any thread, through `slice` (published bytes) or `copy_out` (read-only opens of
//! other processes' files); mmap.rs item 3 says what followers rely on.
//!
//! Descriptors: a mapping does not need its descriptor, so none is kept: the file is opened,
//! given its length and first reservation (the descriptor at hand does it) and mapped, and the
//! descriptor closed. Bytes are made durable with `msync` on the mapping. The few calls that
//! need a descriptor later (the creation's `fsync`, the warm-ahead's zero fill, growing a
//! reservation, a writer's `pwrite`s) reopen the file by path (`reopen`) and check that it is
//! still the file mapped here (same device and inode), so a file deleted and created again
//! under the same name is never synced, reserved or written by mistake; a writer keeps the
//! descriptor it reopened for `pwrite`s until it is dropped, the other calls close theirs
//! before they return, with one exception: the zero fill of a file reserved whole (the
//! commit log's, filled ahead of its writer a chunk at a time) keeps the descriptor it
//! reopened until the file's writer is dropped (the file is full), so that the fill costs no
//! `open` per chunk. A store therefore holds one descriptor per live writer that appends with
//! `pwrite` (the commit log's) and at most two kept for the fill (the file being written and
//! the one prepared after it), whatever the number of files it maps.
//!
//! Identity: every file on disk remembers the device and inode it mapped, so a follower can
//! tell the file it maps from another one created later under the same name (`is_file_at`),
//! and a reopen finds out whether the name still names it.

pub mod alloc;
pub mod mmap;
pub mod robust;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::util::fs;
use crate::util::kill_point::kill_point;
pub use alloc::Reserve;
use mmap::{Advice, MmapRegion};

/// The most bytes one `MADV_POPULATE_WRITE` call of [`MappedFile::populate`] faults in. The
/// kernel holds the process's mmap lock for reading through the whole call, so an `mmap`,
/// `munmap` or `brk` of any thread (an allocator growing or trimming its heap) waits for all
/// of it: about a millisecond per MiB on the 2-vCPU VM, where 1 MiB calls made a 128 B
/// batch append wait 1 to 8 ms in `brk` a few hundred times per 2 million messages. In
/// steps, such a wait is a fraction of a millisecond, and the writer can use each step's
/// pages as soon as they are ready.
pub const POPULATE_STEP: u64 = 64 << 10;

/// One mapped file.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    from_offset: u64,
    size: u64,
    region: MmapRegion,
    // Whether the mapping (and a reopened descriptor) is writable.
    writable: bool,
    // (device, inode) of the mapped file; `None` for anonymous memory.
    identity: Option<(u64, u64)>,
    published: AtomicU64,
    flushed: AtomicU64,
    // Bytes `[0, reserved)` have disk blocks (see the module doc).
    reserved: AtomicU64,
    reserve: Reserve,
    writer_taken: AtomicBool,
    // The zero fill's descriptor of a file reserved whole, kept from its first fill until the
    // file's writer is dropped (module doc).
    fill_fd: Mutex<Option<File>>,
    // The map cache's bookkeeping (mapped_file_queue/cache.rs): whether the cache holds this
    // file, and the cache epoch of its last use.
    pub(crate) cached: AtomicBool,
    pub(crate) used_at: AtomicU64,
    // Created without the fsyncs of its metadata and directory entry, which the next flush of
    // its queue owes (`MappedFileQueue::flush`).
    create_sync_due: AtomicBool,
}

/// The unique write handle of a `MappedFile`.
#[derive(Debug)]
pub struct FileWriter {
    file: Arc<MappedFile>,
    pos: u64,
    // The descriptor the positioned writes use, reopened on the first one (`MappedFile::reopen`)
    // and closed with the writer.
    fd: Option<File>,
}

impl MappedFile {
    /// Creates (or reuses a partial) file of `size` bytes, preallocates it and maps it writable.
    pub fn create(
        path: &Path,
        from_offset: u64,
        size: u64,
        mode: u32,
        populate: bool,
    ) -> Result<Self> {
        Self::create_reserved(path, from_offset, size, mode, populate, Reserve::Whole)
    }

    /// `create` with the reservation `reserve`: with `Reserve::Grow` the file gets its full
    /// length as a hole first, then its first `initial` bytes reserved.
    pub fn create_reserved(
        path: &Path,
        from_offset: u64,
        size: u64,
        mode: u32,
        populate: bool,
        reserve: Reserve,
    ) -> Result<Self> {
        if fs::is_symlink(path) {
            return Err(fs::symlink_refused(
                "create (a symlink is never followed)",
                path,
            ));
        }
        let file = fs::open_rw(path, mode)?;
        kill_point!("mapped_file.empty");
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        let reserved = match reserve {
            Reserve::Whole => size,
            Reserve::Grow { initial } => {
                // Full length first: a crash before the fallocate leaves a whole-length file
                // of zeros (an unused file, not a short one that recovery must rebuild).
                alloc::extend_sparse(&file, path, size)?;
                kill_point!("mapped_file.sparse");
                initial.min(size)
            }
        };
        alloc::preallocate(&file, path, reserved)?;
        let len = usize::try_from(size).map_err(|_| Error::InvalidConfig {
            field: "file_size",
            reason: "too large".into(),
        })?;
        // Pre-faulting writes every page: only for a file reserved whole.
        let populate = populate && reserved == size;
        let region = MmapRegion::map_file(&file, len, true, populate)
            .map_err(|e| Error::io("mmap", path, e))?;
        // The descriptor closes here: the mapping keeps the file's pages reachable.
        drop(file);
        let mut mapped = Self::new(path.to_path_buf(), from_offset, size, region, true, 0);
        mapped.identity = Some((meta.dev(), meta.ino()));
        mapped.reserve = reserve;
        mapped.reserved = AtomicU64::new(reserved);
        Ok(mapped)
    }

    /// Maps an existing file of exactly `size` bytes. Every position starts at `size`, as in
    /// RocketMQ; recovery then sets the real end through the writer.
    pub fn open_existing(path: &Path, from_offset: u64, size: u64, writable: bool) -> Result<Self> {
        Self::open_reserved(path, from_offset, size, writable, Reserve::Whole)
    }

    /// `open_existing` of a file reserved as `reserve` says. A writable short file is made
    /// whole: fallocated (`Whole`) or extended sparsely (`Grow`, whose writer then reserves
    /// ahead of itself before writing: nothing counts as reserved yet).
    pub fn open_reserved(
        path: &Path,
        from_offset: u64,
        size: u64,
        writable: bool,
        reserve: Reserve,
    ) -> Result<Self> {
        let file = if writable {
            fs::open_rw(path, 0o600)?
        } else {
            fs::open_ro(path)?
        };
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        let actual = meta.len();
        if actual < size {
            if !writable {
                return Err(Error::Corrupted {
                    path: path.to_path_buf(),
                    offset: actual,
                    reason: format!("file is {actual} bytes, expected {size}"),
                    cause: None,
                });
            }
            // A roll interrupted by a crash leaves a short file: finish its creation.
            match reserve {
                Reserve::Whole => alloc::preallocate(&file, path, size)?,
                Reserve::Grow { .. } => alloc::extend_sparse(&file, path, size)?,
            }
        }
        let len = usize::try_from(size).map_err(|_| Error::InvalidConfig {
            field: "file_size",
            reason: "too large".into(),
        })?;
        let region = MmapRegion::map_file(&file, len, writable, false)
            .map_err(|e| Error::io("mmap", path, e))?;
        drop(file);
        let mut mapped = Self::new(
            path.to_path_buf(),
            from_offset,
            size,
            region,
            writable,
            size,
        );
        mapped.identity = Some((meta.dev(), meta.ino()));
        mapped.reserve = reserve;
        if matches!(reserve, Reserve::Grow { .. }) {
            mapped.reserved = AtomicU64::new(0);
        }
        Ok(mapped)
    }

    /// An in-memory file backed by anonymous memory (nothing on disk).
    pub fn anonymous(from_offset: u64, size: u64) -> Result<Self> {
        let len = usize::try_from(size).map_err(|_| Error::InvalidConfig {
            field: "file_size",
            reason: "too large".into(),
        })?;
        let region = MmapRegion::anonymous(len)
            .map_err(|e| Error::io("mmap", PathBuf::from(":memory:"), e))?;
        Ok(Self::new(
            PathBuf::from(":memory:"),
            from_offset,
            size,
            region,
            true,
            0,
        ))
    }

    fn new(
        path: PathBuf,
        from: u64,
        size: u64,
        region: MmapRegion,
        writable: bool,
        pos: u64,
    ) -> Self {
        MappedFile {
            path,
            from_offset: from,
            size,
            region,
            writable,
            identity: None,
            published: AtomicU64::new(pos),
            flushed: AtomicU64::new(pos),
            reserved: AtomicU64::new(size),
            reserve: Reserve::Whole,
            writer_taken: AtomicBool::new(false),
            fill_fd: Mutex::new(None),
            cached: AtomicBool::new(false),
            used_at: AtomicU64::new(0),
            create_sync_due: AtomicBool::new(false),
        }
    }

    /// Takes the unique writer; `None` while another one exists or when the mapping is
    /// read-only.
    pub fn writer(self: &Arc<Self>) -> Option<FileWriter> {
        if !self.writable || self.writer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(FileWriter {
            file: Arc::clone(self),
            pos: self.published.load(Ordering::Acquire),
            fd: None,
        })
    }

    /// True while a `FileWriter` of this mapping exists.
    pub fn writer_taken(&self) -> bool {
        self.writer_taken.load(Ordering::Acquire)
    }

    /// A new mapping of a file that is neither being written nor holding unflushed bytes
    /// (no writer was ever taken of it): its data ends at `pos`, all of it flushed. Lets a
    /// queue map again a file it let go of without losing where its data ends.
    pub(crate) fn resume_at(&self, pos: u64) {
        if self.writer_taken() {
            return;
        }
        let pos = pos.min(self.size);
        self.published.store(pos, Ordering::Release);
        self.flushed.store(pos, Ordering::Release);
    }

    /// True when `meta` (a `stat` of the path this file was opened at) describes the file
    /// mapped here: same device and inode. False for another file created under the name since,
    /// and for anonymous memory.
    pub fn is_file_at(&self, meta: &std::fs::Metadata) -> bool {
        self.identity == Some((meta.dev(), meta.ino()))
    }

    /// A descriptor of the file mapped here, opened again by path (never creating it), for
    /// the calls a mapping cannot make. `Error::Corrupted` when the name now names another
    /// file (or none): the file mapped here was deleted or replaced behind the store's back,
    /// and syncing or writing the other one would be wrong. `Ok(None)` for anonymous memory.
    pub fn reopen(&self) -> Result<Option<File>> {
        let Some(identity) = self.identity else {
            return Ok(None);
        };
        let file = fs::reopen(&self.path, self.writable)?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?;
        if (meta.dev(), meta.ino()) != identity {
            return Err(Error::Corrupted {
                path: self.path.clone(),
                offset: self.from_offset,
                reason: "the file mapped under this name was replaced by another one".into(),
                cause: None,
            });
        }
        Ok(Some(file))
    }

    /// File path (`:memory:` for anonymous files).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies page `advice` to the file's bytes `[from, to)` (positions within the file).
    /// Advice is an optimisation: callers may ignore the error (old kernel, anonymous memory).
    /// Advice that writes pages (`PopulateWrite`) stops at the reserved end (module doc).
    pub fn advise(&self, from: u64, to: u64, advice: Advice) -> Result<()> {
        let limit = match advice {
            Advice::PopulateWrite => self.reserved(),
            _ => self.size,
        };
        let clamp = |v: u64| usize::try_from(v.min(limit)).unwrap_or(usize::MAX);
        self.region
            .advise(clamp(from), clamp(to), advice)
            .map_err(|e| Error::io("madvise", &self.path, e))
    }

    /// Faults in, writable, the file's bytes `[from, to)` in calls of at most
    /// [`POPULATE_STEP`], below the reserved end only. Stops at the first failed advice and
    /// returns its error (an optimisation only, as for `advise`).
    pub fn populate(&self, from: u64, to: u64) -> Result<()> {
        let to = to.min(self.reserved());
        let mut at = from;
        while at < to {
            let end = to.min(at.saturating_add(POPULATE_STEP));
            self.advise(at, end, Advice::PopulateWrite)?;
            at = end;
        }
        Ok(())
    }

    /// Writes zeros over the file's bytes `[from, to)` with `pwrite`, at most
    /// [`POPULATE_STEP`] per call. On a file of zeros this changes no byte, but the kernel
    /// builds the page cache there from large folios (up to the size of the write) rather
    /// than faulting in 4 KiB pages one at a time: filling it costs about a third less. The
    /// caller makes sure no one writes those bytes meanwhile (a zero write landing after a
    /// record would erase it: mapped_file_queue/fence.rs for the commit log, the queue's own
    /// writer for a consume queue). Below the reserved end only: zeros written into a hole
    /// would take the blocks the reservation decides on. Anonymous memory needs nothing.
    pub fn zero_fill(&self, from: u64, to: u64) -> Result<()> {
        static ZEROS: [u8; POPULATE_STEP as usize] = [0; POPULATE_STEP as usize];
        let to = to.min(self.reserved());
        if from >= to {
            return Ok(());
        }
        if self.is_anonymous() {
            return Ok(());
        }
        let write = |file: &File| -> Result<()> {
            use std::os::unix::fs::FileExt;
            let mut at = from;
            while at < to {
                let n = (to - at).min(POPULATE_STEP);
                let zeros = ZEROS.get(..n as usize).unwrap_or(&ZEROS);
                file.write_all_at(zeros, at)
                    .map_err(|e| Error::io("pwrite", &self.path, e))?;
                at += n;
            }
            Ok(())
        };
        if self.reserve != Reserve::Whole {
            return match self.reopen()? {
                Some(file) => write(&file),
                None => Ok(()),
            };
        }
        let mut kept = self.fill_fd.lock().unwrap_or_else(|p| p.into_inner());
        if kept.is_none() {
            *kept = self.reopen()?;
        }
        match kept.as_ref() {
            Some(file) => write(file),
            None => Ok(()),
        }
    }

    /// Global offset of the file's first byte.
    pub fn from_offset(&self) -> u64 {
        self.from_offset
    }
    /// Fixed file size.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// End of the bytes that have disk blocks (`[0, reserved)`; see the module doc).
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Makes sure `[0, end)` is reserved (`end` capped at the size); with `Reserve::Grow`,
    /// grows the reservation to `alloc::next_reserve`'s end, through a descriptor reopened for
    /// the call (`reopen`: never another file created under the name since). Nothing to do
    /// for anonymous memory or `Reserve::Whole` files (reserved whole).
    ///
    /// # Errors
    /// `StoreFull` when the file system has no room, `Corrupted` when the name no longer
    /// names the file mapped here; the reservation is unchanged then.
    pub fn reserve_to(&self, end: u64) -> Result<()> {
        let reserved = self.reserved();
        let end = end.min(self.size);
        if end <= reserved {
            return Ok(());
        }
        let Reserve::Grow { initial } = self.reserve else {
            return Ok(());
        };
        let Some(file) = self.reopen()? else {
            return Ok(());
        };
        let target = alloc::next_reserve(end, reserved, initial, self.size);
        alloc::preallocate(&file, &self.path, target)?;
        self.reserved.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }
    /// Bytes visible to readers.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }
    /// Bytes confirmed durable.
    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }
    /// True for anonymous memory (a `:memory:` store): no file behind the mapping.
    pub fn is_anonymous(&self) -> bool {
        self.identity.is_none()
    }
    /// True when nothing more can be appended.
    pub fn is_full(&self) -> bool {
        self.published() >= self.size
    }

    /// Published bytes `[pos, pos+len)`, or `None` if any of them is not published.
    pub fn slice(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let end = pos.checked_add(len as u64)?;
        if end > self.published() {
            return None;
        }
        self.region.slice(usize::try_from(pos).ok()?, len)
    }

    /// Copies `dst.len()` bytes at `pos` regardless of the published position: for read-only
    /// opens, whose bytes come from another process and are validated by the caller.
    pub fn copy_out(&self, pos: u64, dst: &mut [u8]) -> bool {
        match usize::try_from(pos) {
            Ok(p) => self.region.copy_out(p, dst),
            Err(_) => false,
        }
    }

    /// Acquire-load of the big-endian u32 at aligned `pos` (cross-process publication word).
    pub fn load_u32_acquire(&self, pos: u64) -> Option<u32> {
        self.region.load_u32_be_acquire(usize::try_from(pos).ok()?)
    }

    /// msyncs `[flushed, published)`; on success advances `flushed` and returns it.
    pub fn flush(&self) -> Result<u64> {
        let target = self.published();
        let from = self.flushed();
        if target <= from {
            return Ok(from);
        }
        if !self.is_anonymous() {
            let (s, e) = (
                usize::try_from(from).unwrap_or(0),
                usize::try_from(target).unwrap_or(0),
            );
            // Drop the page-table entries of the whole pages about to be written back (one
            // batched TLB flush; the bytes stay in the page cache and are faulted back on the
            // next read). Writeback then has no writable entry to revoke page by page, which
            // costs an inter-processor interrupt to every CPU running this process per 4 KiB
            // page and stalled the appending thread.
            let page = mmap::page_size();
            let (whole_from, whole_to) = (s - s % page, e - e % page);
            if whole_to > whole_from {
                let _ = self.region.advise(whole_from, whole_to, Advice::DontNeed);
            }
            fs::sync_range(&self.path, from, target, || self.region.flush(s, e))?;
        }
        self.flushed.fetch_max(target, Ordering::AcqRel);
        Ok(target)
    }

    /// Records that the creation's fsyncs were left to the next flush.
    pub fn defer_create_sync(&self) {
        self.create_sync_due.store(true, Ordering::Release);
    }

    /// Whether the creation's fsyncs are still owed.
    pub fn create_sync_due(&self) -> bool {
        self.create_sync_due.load(Ordering::Acquire)
    }

    /// The creation's fsyncs were done.
    pub fn create_synced(&self) {
        self.create_sync_due.store(false, Ordering::Release);
    }

    /// fsync of the file itself (size and allocation metadata), used after creating it,
    /// through a descriptor reopened for the call (`reopen`).
    pub fn sync_metadata(&self) -> Result<()> {
        match self.reopen()? {
            Some(f) => fs::sync_file(&f, &self.path),
            None => Ok(()),
        }
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // The file is full (or the store closes): no fill comes after its writer.
        drop(
            self.file
                .fill_fd
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        self.file.writer_taken.store(false, Ordering::Release);
    }
}

impl FileWriter {
    /// The file being written.
    pub fn file(&self) -> &Arc<MappedFile> {
        &self.file
    }

    /// Next write position (≥ published).
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Bytes left in the file.
    pub fn remaining(&self) -> u64 {
        self.file.size - self.pos
    }

    /// Bytes that can be written at the write position without growing the reservation.
    pub fn room(&self) -> u64 {
        self.file.reserved().saturating_sub(self.pos)
    }

    /// Makes sure the next `len` bytes from the write position are reserved, growing the
    /// reservation ahead of the writer if they are not (`MappedFile::reserve_to`).
    ///
    /// # Errors
    /// `StoreFull` when the file system has no room: nothing may be written then.
    pub fn make_room(&self, len: u64) -> Result<()> {
        let end = self.pos.saturating_add(len);
        if end <= self.file.reserved() {
            return Ok(());
        }
        self.file.reserve_to(end)
    }

    /// Appends `data` at the write position with a positioned `write` to the file instead of
    /// through the mapping (anonymous files: a copy into the mapping). Large appends go this
    /// way: the kernel copies into the page cache without page faults, and writeback later has
    /// no writable page-table entries to revoke. Readers still see the bytes through the
    /// mapping (the page cache is shared) once they are published.
    pub fn append_bytes(&mut self, data: &[u8]) -> Result<()> {
        if self.pos + data.len() as u64 > self.file.size {
            return Err(Error::InvalidArgument {
                field: "append",
                reason: "write past the end of the file".into(),
            });
        }
        if !self.has_descriptor()? {
            self.append_with(data.len(), |b| b.copy_from_slice(data))
                .ok_or(Error::Closed)?;
            return Ok(());
        }
        let Some(f) = self.fd.as_ref() else {
            return Err(Error::Closed);
        };
        use std::os::unix::fs::FileExt;
        f.write_all_at(data, self.pos)
            .map_err(|e| Error::io("pwrite", &self.file.path, e))?;
        self.pos += data.len() as u64;
        Ok(())
    }

    /// Reopens the descriptor for positioned writes on first use; false for anonymous memory,
    /// which is written through the mapping.
    fn has_descriptor(&mut self) -> Result<bool> {
        if self.fd.is_none() {
            self.fd = self.file.reopen()?;
        }
        Ok(self.fd.is_some())
    }

    /// Writes `parts` back to back at the write position with vectored `write`s (the
    /// kernel gathers them: no copy into a buffer first) and advances the position; the
    /// file's cursor is used only here, under the append lock. A `:memory:` file copies the
    /// parts into the mapping.
    pub fn append_vectored(&mut self, parts: &mut [std::io::IoSlice<'_>]) -> Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if self.pos + len > self.file.size {
            return Err(Error::InvalidArgument {
                field: "append",
                reason: "write past the end of the file".into(),
            });
        }
        if !self.has_descriptor()? {
            let copied = self.append_with(len as usize, |mut b| {
                for p in parts.iter() {
                    // `b` is exactly the parts' total length.
                    let n = p.len().min(b.len());
                    let (dst, rest) = std::mem::take(&mut b).split_at_mut(n);
                    dst.copy_from_slice(p.get(..n).unwrap_or_default());
                    b = rest;
                }
            });
            return copied.ok_or(Error::Closed);
        }
        let path = &self.file.path;
        let Some(mut f) = self.fd.as_ref() else {
            return Err(Error::Closed);
        };
        let io = |e| Error::io("writev", path, e);
        f.seek(SeekFrom::Start(self.pos)).map_err(io)?;
        let mut rest = parts;
        while !rest.is_empty() {
            // std passes at most IOV_MAX slices per call; a short write resumes mid-slice.
            let n = f.write_vectored(rest).map_err(io)?;
            if n == 0 {
                return Err(io(std::io::ErrorKind::WriteZero.into()));
            }
            std::io::IoSlice::advance_slices(&mut rest, n);
        }
        self.pos += len;
        Ok(())
    }

    /// Lends `[pos, pos+len)` to `fill` and advances the write position. The bytes become
    /// visible to readers at the next `publish`. `None` if they do not fit, or are not all
    /// reserved (`make_room` first).
    pub fn append_with<R>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        if self.pos.checked_add(len as u64)? > self.file.reserved() {
            return None;
        }
        let p = usize::try_from(self.pos).ok()?;
        let buf = self.file.region.slice_mut(p, len)?;
        let r = fill(buf);
        self.pos += len as u64;
        Some(r)
    }

    /// Like `append_with`, then release-stores `word` (big-endian) at `word_at` (relative to
    /// the start of this append, 4-byte aligned in the file): a reader of another process that
    /// acquire-loads the word non-zero sees every other byte of the append.
    pub fn append_with_release_word(
        &mut self,
        len: usize,
        word_at: usize,
        word: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let start = self.pos;
        if self.append_with(len, fill).is_none() {
            return false;
        }
        let at = start + word_at as u64;
        match usize::try_from(at) {
            Ok(a) => self.file.region.store_u32_be_release(a, word),
            Err(_) => false,
        }
    }

    /// Shared writers (commit_log/shared.rs): continues at `pos`, where the records the store's
    /// processes published end in this file (whole records below it, never written again),
    /// and shows this mapping's readers everything below it. A mapping that counted more than
    /// that as flushed (one mapped from disk counts all of it) counts nothing flushed from
    /// now on, so its next flush covers every byte below `pos`.
    pub(crate) fn reposition(&mut self, pos: u64) {
        let pos = pos.min(self.file.size);
        self.pos = pos;
        if self.file.flushed.load(Ordering::Acquire) > pos {
            self.file.flushed.store(0, Ordering::Release);
        }
        self.file.published.store(pos, Ordering::Release);
    }

    /// Makes everything appended so far visible to readers.
    pub fn publish(&mut self) {
        self.file.published.store(self.pos, Ordering::Release);
    }

    /// Marks the rest of the file as used (after an END_OF_FILE blank) and publishes.
    pub fn fill_to_end(&mut self) {
        self.pos = self.file.size;
        self.publish();
    }

    /// Recovery only (no reader exists yet): sets the end of valid data to `pos`, zeroing
    /// `[pos, zero_until)` so stale bytes can never be mistaken for records later.
    ///
    /// Past the reserved end (all of a `Reserve::Grow` file opened from disk) the bytes are
    /// zeroed only if any is not zero, after reserving them: they are a hole, or zeros,
    /// unless an earlier run wrote there, and zeroing a hole would take its blocks (and on a
    /// full disk kill the process). The writer's later writes reserve as they go
    /// (`make_room`).
    ///
    /// # Errors
    /// `StoreFull` when stale bytes must be zeroed and cannot be reserved; nothing was
    /// changed then.
    pub fn truncate_to(&mut self, pos: u64, zero_until: u64) -> Result<()> {
        let pos = pos.min(self.file.size);
        let zero_until = zero_until.min(self.file.size);
        let stale_past_reserved = {
            let reserved = self.file.reserved().max(pos);
            zero_until > reserved && self.has_non_zero(reserved, zero_until)
        };
        if stale_past_reserved {
            self.file.reserve_to(zero_until)?;
        }
        let zero_until = zero_until.min(self.file.reserved());
        if zero_until > pos {
            if let (Ok(p), Ok(n)) = (usize::try_from(pos), usize::try_from(zero_until - pos)) {
                if let Some(buf) = self.file.region.slice_mut(p, n) {
                    buf.fill(0);
                }
            }
        }
        self.pos = pos;
        self.file.published.store(pos, Ordering::Release);
        self.file.flushed.store(pos, Ordering::Release);
        Ok(())
    }

    /// Whether any byte of `[from, to)` (past the write position) is not zero.
    fn has_non_zero(&self, from: u64, to: u64) -> bool {
        let (Ok(p), Ok(n)) = (usize::try_from(from), usize::try_from(to - from)) else {
            return false;
        };
        self.file
            .region
            .slice(p, n)
            .is_some_and(|b| b.iter().any(|&x| x != 0))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::IoSlice;
    use std::sync::Arc;

    use super::{MappedFile, Reserve};

    /// The zero fill of a file reserved whole keeps one descriptor from its first fill until
    /// the writer is dropped, and that descriptor is the mapped file's: a file created under
    /// the name since is not written. A growing file (a consume queue's) keeps none.
    #[test]
    fn the_fill_of_a_whole_file_keeps_its_descriptor_until_the_writer_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("whole");
        let file = Arc::new(MappedFile::create(&path, 0, 64 << 10, 0o600, false).unwrap());
        let w = file.writer().unwrap();
        let kept = || file.fill_fd.lock().unwrap().is_some();
        assert!(!kept());
        file.zero_fill(4096, 8192).unwrap();
        assert!(kept());
        // Replaced behind the store's back: the kept descriptor still names the mapped file.
        std::fs::rename(&path, dir.path().join("moved")).unwrap();
        std::fs::write(&path, b"another file").unwrap();
        file.zero_fill(8192, 12288).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"another file");
        drop(w);
        assert!(!kept(), "released with the writer");

        let grow = Reserve::Grow { initial: 4096 };
        let cq =
            MappedFile::create_reserved(&dir.path().join("grow"), 0, 64 << 10, 0o600, false, grow)
                .unwrap();
        cq.zero_fill(0, 4096).unwrap();
        assert!(cq.fill_fd.lock().unwrap().is_none());
    }

    /// Gathered writes land back to back at the write position, after what was appended
    /// before, on a file (through `write`) and in anonymous memory (through the mapping);
    /// more slices than one system call takes (IOV_MAX) are all written.
    #[test]
    fn append_vectored_writes_the_parts_back_to_back() {
        let dir = tempfile::tempdir().unwrap();
        let parts: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| vec![(i % 251) as u8; 1 + (i as usize % 7)])
            .collect();
        let expected: Vec<u8> = b"head".iter().copied().chain(parts.concat()).collect();
        let on_disk = MappedFile::create(&dir.path().join("f"), 0, 64 << 10, 0o600, false).unwrap();
        for file in [on_disk, MappedFile::anonymous(0, 64 << 10).unwrap()] {
            let file = Arc::new(file);
            let mut w = file.writer().unwrap();
            w.append_bytes(b"head").unwrap();
            let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            w.append_vectored(&mut slices).unwrap();
            assert_eq!(w.pos(), expected.len() as u64);
            w.publish();
            assert_eq!(file.slice(0, expected.len()).unwrap(), &expected[..]);
            let mut too_much = [IoSlice::new(&[0u8; 1 << 16])];
            assert!(w.append_vectored(&mut too_much).is_err(), "past the end");
        }
    }

    /// A `Reserve::Grow` file: full length, one page of blocks; the writer cannot write past
    /// the reserved end until it makes room; reopened, nothing counts as reserved, and
    /// recovery zeroes stale bytes past the reservation (reserving them first).
    #[test]
    fn a_growing_file_is_written_only_below_its_reservation() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (size, page) = (256u64 << 10, 4096u64);
        let grow = Reserve::Grow { initial: page };
        let f = Arc::new(MappedFile::create_reserved(&path, 0, size, 0o600, false, grow).unwrap());
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), size, "full length");
        assert!(meta.blocks() * 512 <= 2 * page, "one page of blocks");
        assert_eq!(f.reserved(), page);
        let mut w = f.writer().unwrap();
        assert!(w.append_with(page as usize, |b| b.fill(1)).is_some());
        assert!(
            w.append_with(1, |b| b.fill(1)).is_none(),
            "past the reserved end"
        );
        w.make_room(1).unwrap();
        assert!(f.reserved() >= 2 * page);
        assert!(w.append_with(1, |b| b.fill(1)).is_some());
        w.publish();
        // Stale bytes past the end of valid data, far past what the next run will reserve.
        use std::os::unix::fs::FileExt;
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[7u8; 8], size - 8)
            .unwrap();
        drop(w);
        drop(f);

        let f = Arc::new(MappedFile::open_reserved(&path, 0, size, true, grow).unwrap());
        assert_eq!(f.reserved(), 0, "nothing counts as reserved after an open");
        let mut w = f.writer().unwrap();
        w.truncate_to(page, size).unwrap();
        let mut tail = [1u8; 8];
        assert!(f.copy_out(size - 8, &mut tail));
        assert_eq!(tail, [0u8; 8], "stale bytes zeroed");
        assert_eq!(f.reserved(), size, "reserved before zeroing");
    }

    /// Growing a reservation reopens the file by path: when the name now names another file
    /// (the mapped one was deleted and a file created in its place), it is `Corrupted`, the
    /// other file gets no blocks, and the reservation is unchanged.
    #[test]
    fn a_reservation_never_grows_another_file_under_the_name() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (size, page) = (256u64 << 10, 4096u64);
        let grow = Reserve::Grow { initial: page };
        let f = MappedFile::create_reserved(&path, 0, size, 0o600, false, grow).unwrap();
        f.reserve_to(2 * page).unwrap();
        assert!(
            f.reserved() >= 2 * page,
            "grown through a reopened descriptor"
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::File::create(&path).unwrap().set_len(size).unwrap();
        let before = f.reserved();
        let err = f.reserve_to(before + 1).unwrap_err();
        assert!(
            matches!(err, crate::error::Error::Corrupted { .. }),
            "{err:?}"
        );
        assert_eq!(f.reserved(), before);
        assert_eq!(
            std::fs::metadata(&path).unwrap().blocks(),
            0,
            "the other file untouched"
        );
    }
}
