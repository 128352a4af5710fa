//! MappedFile: one fixed-size, preallocated, memory-mapped file of a `MappedFileQueue`.
//!
//! On disk: `<dir>/<20-digit start offset>`, exactly `size` bytes (fallocated, never sparse).
//!
//! Invariants
//! - `published <= size`; bytes below `published` are immutable while the store runs.
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
//! preallocated and mapped, and the descriptor closed. Bytes are made durable with `msync` on
//! the mapping. The few calls that need a descriptor (the creation's `fsync`, the warm-ahead's
//! zero fill, a writer's `pwrite`s) reopen the file by path (`reopen`) and check that it is
//! still the file mapped here (same device and inode), so a file deleted and created again
//! under the same name is never synced or written by mistake; a writer keeps the descriptor it
//! reopened until it is dropped. A store therefore holds one descriptor per live writer that
//! appends with `pwrite` (the commit log's), whatever the number of files it maps.
//!
//! Identity: every file on disk remembers the device and inode it mapped, so a follower can
//! tell the file it maps from another one created later under the same name (`is_file_at`),
//! and a reopen finds out whether the name still names it.

pub mod alloc;
pub mod mmap;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::util::fs;
use crate::util::kill_point::kill_point;
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
    writer_taken: AtomicBool,
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
        if fs::is_symlink(path) {
            return Err(fs::symlink_refused(
                "create (a symlink is never followed)",
                path,
            ));
        }
        let file = fs::open_rw(path, mode)?;
        kill_point!("mapped_file.empty");
        alloc::preallocate(&file, path, size)?;
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        let len = usize::try_from(size).map_err(|_| Error::InvalidConfig {
            field: "file_size",
            reason: "too large".into(),
        })?;
        let region = MmapRegion::map_file(&file, len, true, populate)
            .map_err(|e| Error::io("mmap", path, e))?;
        // The descriptor closes here: the mapping keeps the file's pages reachable.
        drop(file);
        let mut mapped = Self::new(path.to_path_buf(), from_offset, size, region, true, 0);
        mapped.identity = Some((meta.dev(), meta.ino()));
        Ok(mapped)
    }

    /// Maps an existing file of exactly `size` bytes. Every position starts at `size`, as in
    /// RocketMQ; recovery then sets the real end through the writer.
    pub fn open_existing(path: &Path, from_offset: u64, size: u64, writable: bool) -> Result<Self> {
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
            // A roll interrupted by a crash leaves a short file: finish its preallocation.
            alloc::preallocate(&file, path, size)?;
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
            writer_taken: AtomicBool::new(false),
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
    pub fn advise(&self, from: u64, to: u64, advice: Advice) -> Result<()> {
        let clamp = |v: u64| usize::try_from(v.min(self.size)).unwrap_or(usize::MAX);
        self.region
            .advise(clamp(from), clamp(to), advice)
            .map_err(|e| Error::io("madvise", &self.path, e))
    }

    /// Faults in, writable, the file's bytes `[from, to)` in calls of at most
    /// [`POPULATE_STEP`]. Stops at the first failed advice and returns its error (an
    /// optimisation only, as for `advise`).
    pub fn populate(&self, from: u64, to: u64) -> Result<()> {
        let to = to.min(self.size);
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
    /// writer for a consume queue). Anonymous memory needs nothing.
    pub fn zero_fill(&self, from: u64, to: u64) -> Result<()> {
        static ZEROS: [u8; POPULATE_STEP as usize] = [0; POPULATE_STEP as usize];
        if from >= to.min(self.size) {
            return Ok(());
        }
        let Some(file) = self.reopen()? else {
            return Ok(());
        };
        use std::os::unix::fs::FileExt;
        let to = to.min(self.size);
        let mut at = from;
        while at < to {
            let n = (to - at).min(POPULATE_STEP);
            let zeros = ZEROS.get(..n as usize).unwrap_or(&ZEROS);
            file.write_all_at(zeros, at)
                .map_err(|e| Error::io("pwrite", &self.path, e))?;
            at += n;
        }
        Ok(())
    }

    /// Global offset of the file's first byte.
    pub fn from_offset(&self) -> u64 {
        self.from_offset
    }
    /// Fixed file size.
    pub fn size(&self) -> u64 {
        self.size
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
    /// visible to readers at the next `publish`. `None` if they do not fit.
    pub fn append_with<R>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
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
    pub fn truncate_to(&mut self, pos: u64, zero_until: u64) {
        let pos = pos.min(self.file.size);
        let zero_until = zero_until.min(self.file.size);
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
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::IoSlice;
    use std::sync::Arc;

    use super::MappedFile;

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
}
