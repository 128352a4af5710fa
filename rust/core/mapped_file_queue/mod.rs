//! MappedFileQueue: an ordered run of equal-size `MappedFile`s forming one logical byte space.
//!
//! On disk: `<dir>/<20-digit start offset>`; file `k` covers `[start_k, start_k + size)`.
//!
//! Invariants
//! - Files are contiguous: `start_{k+1} == start_k + size`; only the last file is written.
//! - `min_offset()` is the first file's start, `max_offset()` the last file's start plus its
//!   published position.
//! - Files are removed only from the head (expiry) or past a truncation point (recovery, and
//!   an unused prepared file), by `unlink`, so mappings held by readers stay valid. A name
//!   removed past a truncation point is created again when the writer gets there.
//! - A follower (read-only open in another process) never maps a file under a name that now
//!   names another file for longer than until its next `refresh(verify = true)`: it compares
//!   each mapping's device and inode with the directory's (`refresh`).
//!
//! Crash behaviour: `load` repairs a zero-length or short last file (a roll interrupted by a
//! kill): deleted if empty, re-preallocated if short (extended sparsely for a queue whose files
//! grow their reservation, `with_reserve`); a gap between files is reported as
//! corruption. An owner whose files are derived data (consume queues) finds short files first
//! (`first_short_file`) and rebuilds them instead (`load_below`, `remove_files_from`).
//! A new file's size, allocation and directory entry are made durable by fsyncs right after
//! it is created, or, for queues built `with_deferred_create_sync` (consume queues, whose data is
//! derived and only trusted up to the checkpoint), by the queue's next `flush`: the flush that
//! precedes any checkpoint covering the file's contents. An OS crash before it may lose the
//! file, which recovery then rebuilds from the commit log.

pub mod fence;
pub mod pace;
pub mod warm;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::mapped_file::mmap::Advice;
use crate::mapped_file::{FileWriter, MappedFile, Reserve};
use crate::util::fs;

/// Where a queue's files live.
#[derive(Debug, Clone)]
pub enum Backing {
    /// Files under `dir`, created with `mode`; `populate` pre-faults new files' pages.
    #[allow(missing_docs)]
    Dir {
        dir: PathBuf,
        mode: u32,
        populate: bool,
    },
    /// Anonymous memory (`:memory:` stores).
    Memory,
}

pub use warm::WARM_AHEAD;

/// The ordered files of one commit log, consume queue or timer log.
#[derive(Debug)]
pub struct MappedFileQueue {
    backing: Backing,
    file_size: u64,
    writable: bool,
    files: RwLock<Vec<Arc<MappedFile>>>,
    // A file created ahead of need by the preparer thread (prepare.rs).
    ready: Mutex<Option<Arc<MappedFile>>>,
    // New files' fsyncs are left to the next flush (see the module doc).
    defer_create_sync: bool,
    // How new and loaded files reserve their disk blocks (mapped_file/alloc.rs).
    reserve: Reserve,
    // Held by `refresh` (followers) for its whole run.
    refreshing: Mutex<()>,
}

impl MappedFileQueue {
    /// An empty queue (no file loaded yet).
    pub fn new(backing: Backing, file_size: u64, writable: bool) -> Self {
        MappedFileQueue {
            backing,
            file_size,
            writable,
            files: RwLock::new(Vec::new()),
            ready: Mutex::new(None),
            defer_create_sync: false,
            reserve: Reserve::Whole,
            refreshing: Mutex::new(()),
        }
    }

    /// This queue's new files are made durable by its next flush rather than at creation: no
    /// fsync on the thread that rolls to a new file (see the module doc).
    pub fn with_deferred_create_sync(mut self) -> Self {
        self.defer_create_sync = true;
        self
    }

    /// This queue's files reserve their disk blocks as `reserve` says (mapped_file/alloc.rs);
    /// `Reserve::Whole` by default.
    pub fn with_reserve(mut self, reserve: Reserve) -> Self {
        self.reserve = reserve;
        self
    }

    /// Loads existing files of the directory (sorted by name). Writers repair an empty or short
    /// last file; a wrong-size file elsewhere or a gap is corruption.
    pub fn load(&self) -> Result<()> {
        self.load_below(u64::MAX)
    }

    /// `load` of the files that start below `end`; later files stay on disk, unmapped.
    pub fn load_below(&self, end: u64) -> Result<()> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(());
        };
        let mut names = list_offsets(dir)?;
        names.retain(|&start| start < end);
        names.sort_unstable();
        let mut loaded = Vec::with_capacity(names.len());
        let n = names.len();
        for (i, start) in names.into_iter().enumerate() {
            let path = dir.join(fs::offset_file_name(start));
            let len = std::fs::symlink_metadata(&path).map_err(|e| Error::io("stat", &path, e))?;
            if len.file_type().is_symlink() {
                return Err(Error::Corrupted {
                    path,
                    offset: start,
                    reason: "store file is a symlink".into(),
                    cause: None,
                });
            }
            let is_last = i + 1 == n;
            if len.len() != self.file_size {
                if is_last && self.writable && len.len() == 0 {
                    fs::remove_file(&path)?;
                    continue;
                }
                if !(is_last && (len.len() < self.file_size)) {
                    return Err(Error::Corrupted {
                        path,
                        offset: start,
                        reason: format!("file is {} bytes, expected {}", len.len(), self.file_size),
                        cause: None,
                    });
                }
                if !self.writable {
                    // A reader cannot repair a short tail file; the writer will. Skip it.
                    continue;
                }
            }
            if start % self.file_size != 0 {
                return Err(Error::Corrupted {
                    path,
                    offset: start,
                    reason: format!(
                        "start offset is not a multiple of the file size {}",
                        self.file_size
                    ),
                    cause: None,
                });
            }
            if let Some(prev) = loaded.last().map(|f: &Arc<MappedFile>| f.from_offset()) {
                if start != prev + self.file_size {
                    return Err(Error::Corrupted {
                        path,
                        offset: start,
                        reason: format!("gap after the file starting at {prev}"),
                        cause: None,
                    });
                }
            }
            loaded.push(Arc::new(MappedFile::open_reserved(
                &path,
                start,
                self.file_size,
                self.writable,
                self.reserve,
            )?));
        }
        *self.write_files() = loaded;
        Ok(())
    }

    /// Start of the first file, in offset order, that is shorter than the file size (cut short,
    /// or created by a roll a crash interrupted), if any. Only when every name is a multiple of
    /// the file size and they step by it: names that do not (a file size that is not the one
    /// the files were made with, or a missing file) are left to `load`, which reports them, as
    /// it does symlinks.
    pub fn first_short_file(&self) -> Result<Option<u64>> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(None);
        };
        let mut names = list_offsets(dir)?;
        names.sort_unstable();
        let size = self.file_size;
        let contiguous = names.windows(2).all(|w| match w {
            [a, b] => a.checked_add(size) == Some(*b),
            _ => true,
        });
        if !contiguous || names.first().is_some_and(|s| s % size != 0) {
            return Ok(None);
        }
        for start in names {
            let path = dir.join(fs::offset_file_name(start));
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io("stat", &path, e))?;
            if meta.is_file() && meta.len() < self.file_size {
                return Ok(Some(start));
            }
        }
        Ok(None)
    }

    /// Writers, before `load`: deletes every file that starts at or after `start` and makes the
    /// deletions durable. Returns how many went. A symlink among them is corruption (as in
    /// `load`): nothing is deleted then.
    pub fn remove_files_from(&self, start: u64) -> Result<usize> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(0);
        };
        let mut doomed = list_offsets(dir)?;
        doomed.retain(|&s| s >= start);
        let paths: Vec<PathBuf> = doomed
            .iter()
            .map(|&s| dir.join(fs::offset_file_name(s)))
            .collect();
        if let Some((path, &offset)) = paths.iter().zip(&doomed).find(|(p, _)| fs::is_symlink(p)) {
            return Err(Error::Corrupted {
                path: path.clone(),
                offset,
                reason: "store file is a symlink".into(),
                cause: None,
            });
        }
        for path in &paths {
            fs::remove_file(path)?;
        }
        if !paths.is_empty() {
            fs::fsync_dir(dir)?;
        }
        Ok(paths.len())
    }

    /// Writers, before `load`: deletes the files at the end of the queue for which `unused`
    /// says yes (files prepared ahead of a roll that never came), never the first one.
    /// Returns how many went.
    pub fn discard_unused_tail(&self, unused: impl Fn(&Path) -> Result<bool>) -> Result<usize> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(0);
        };
        let mut names = list_offsets(dir)?;
        names.sort_unstable();
        let mut removed = 0;
        while names.len() > 1 {
            let Some(start) = names.pop() else { break };
            let path = dir.join(fs::offset_file_name(start));
            if fs::is_symlink(&path) || !unused(&path)? {
                break;
            }
            fs::remove_file(&path)?;
            removed += 1;
        }
        if removed > 0 {
            fs::fsync_dir(dir)?;
        }
        Ok(removed)
    }

    /// Deletes the file prepared ahead of a roll, if one waits (store close).
    pub fn discard_prepared(&self) {
        let Some(f) = self.lock_ready().take() else {
            return;
        };
        if f.is_anonymous() {
            return;
        }
        let listed = self
            .read_files()
            .iter()
            .any(|g| g.from_offset() == f.from_offset());
        if !listed {
            let _ = fs::remove_file(f.path());
        }
    }

    /// Followers (read-only opens): brings the list in line with the directory.
    ///
    /// - Head files the writer deleted (expiry) are forgotten.
    /// - The first other listed file whose name is gone, or, with `verify`, whose name now
    ///   names another file than the one mapped (compared by device and inode), is forgotten
    ///   with every file after it: the writer deleted and re-created it (the all-zero file
    ///   prepared ahead of a roll is deleted by the next writer's recovery and by `close`, and
    ///   recovery cuts files past a torn tail), so what is mapped is stale. Those names are
    ///   mapped again below.
    /// - Files past the last one kept are mapped, in order, up to the first that is not full
    ///   size yet (being created), and the list is cut to its contiguous run at the end.
    ///
    /// A forgotten file is unmapped and its descriptor closed once no reader still holds it,
    /// so its disk space is freed. `verify` costs a `stat` per file; without it only the
    /// directory is read.
    pub fn refresh(&self, verify: bool) -> Result<()> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(());
        };
        // One refresh at a time: each builds the new list from a snapshot and installs it.
        let _one = self.refreshing.lock().unwrap_or_else(|p| p.into_inner());
        let mut names = list_offsets(dir)?;
        names.sort_unstable();
        let listed = |f: &Arc<MappedFile>| names.binary_search(&f.from_offset()).is_ok();
        let before = self.files();
        let mut files = before.clone();
        let expired = files.iter().take_while(|f| !listed(f)).count();
        files.drain(..expired);
        let replaced = files.iter().position(|f| {
            !listed(f)
                || (verify && !std::fs::symlink_metadata(f.path()).is_ok_and(|m| f.is_file_at(&m)))
        });
        if let Some(k) = replaced {
            files.truncate(k);
        }
        let last = files.last().map(|f| f.from_offset());
        for start in names {
            if last.is_some_and(|l| start <= l) {
                continue;
            }
            let path = dir.join(fs::offset_file_name(start));
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_file() && m.len() == self.file_size => {}
                _ => break, // being created by the writer; try again later
            }
            files.push(Arc::new(MappedFile::open_existing(
                &path,
                start,
                self.file_size,
                false,
            )?));
        }
        // `find` indexes the list arithmetically: keep only the contiguous run at its end.
        let size = self.file_size;
        let keep_from = (1..files.len())
            .rev()
            .find(|&i| match (files.get(i - 1), files.get(i)) {
                (Some(a), Some(b)) => a.from_offset() + size != b.from_offset(),
                _ => false,
            })
            .unwrap_or(0);
        files.drain(..keep_from);
        if same_files(&files, &before) {
            return Ok(());
        }
        let mut current = self.write_files();
        // Only `refresh` (serialised above) and `clear` change a follower's list: a list that
        // changed meanwhile was cleared by `close`, and stays so.
        if same_files(&current, &before) {
            *current = files;
        }
        Ok(())
    }

    fn read_files(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<MappedFile>>> {
        self.files.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write_files(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<MappedFile>>> {
        self.files.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Size of every file.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Snapshot of the files.
    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.read_files().clone()
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.read_files().len()
    }

    /// True when no file exists.
    pub fn is_empty(&self) -> bool {
        self.read_files().is_empty()
    }

    /// The newest file.
    pub fn last_file(&self) -> Option<Arc<MappedFile>> {
        self.read_files().last().cloned()
    }

    /// The oldest file.
    pub fn first_file(&self) -> Option<Arc<MappedFile>> {
        self.read_files().first().cloned()
    }

    /// Offset of the first byte still stored.
    pub fn min_offset(&self) -> u64 {
        self.first_file().map(|f| f.from_offset()).unwrap_or(0)
    }

    /// One past the last published byte.
    pub fn max_offset(&self) -> u64 {
        self.last_file()
            .map(|f| f.from_offset() + f.published())
            .unwrap_or(0)
    }

    /// The file holding `offset`, found by arithmetic (files are contiguous).
    pub fn find(&self, offset: u64) -> Option<Arc<MappedFile>> {
        let files = self.read_files();
        let first = files.first()?.from_offset();
        if offset < first {
            return None;
        }
        let idx = usize::try_from((offset - first) / self.file_size).ok()?;
        files.get(idx).cloned()
    }

    /// Path of the file that starts at `start`.
    fn path_for(&self, start: u64) -> Option<PathBuf> {
        match &self.backing {
            Backing::Dir { dir, .. } => Some(dir.join(fs::offset_file_name(start))),
            Backing::Memory => None,
        }
    }

    fn make_file(&self, start: u64) -> Result<MappedFile> {
        match &self.backing {
            Backing::Dir {
                dir,
                mode,
                populate,
            } => {
                let path = dir.join(fs::offset_file_name(start));
                let f = MappedFile::create_reserved(
                    &path,
                    start,
                    self.file_size,
                    *mode,
                    *populate,
                    self.reserve,
                )?;
                // The file's size and allocation must be durable before any checkpoint or
                // record points into it.
                if self.defer_create_sync {
                    f.defer_create_sync();
                } else {
                    f.sync_metadata()?;
                    fs::fsync_dir(dir)?;
                }
                Ok(f)
            }
            Backing::Memory => MappedFile::anonymous(start, self.file_size),
        }
    }

    /// Creates the file starting at `start` ahead of need (background preallocation), then
    /// faults in its first `fault_in` bytes. The file is handed over before the pages are
    /// faulted in: that takes several milliseconds (a page fault per 4 KiB), and a roll
    /// arriving meanwhile must find the file ready rather than create (and fsync) it again on
    /// the appender's thread. Faulting in pages the appender is already writing is harmless.
    ///
    /// In a queue that defers creation syncs the prepared file's are deferred too: done here
    /// they would hold up the jobs queued behind this one (the commit log's warm-ahead). The
    /// deferred whole-file fsync writes back the pages faulted in here and write-protects
    /// them, so the queue's owner faults them in again after it (`ConsumeQueue::flush`).
    ///
    /// Returns whether the first `fault_in` bytes were faulted in here (false when the file
    /// already existed, or when `fault_in` is 0 or the advice failed).
    pub fn prepare(&self, start: u64, fault_in: u64) -> Result<bool> {
        if let Some(f) = self.lock_ready().as_ref() {
            if f.from_offset() == start {
                return Ok(false);
            }
        }
        if self.path_for(start).is_some_and(|p| p.exists()) {
            return Ok(false);
        }
        let f = Arc::new(self.make_file(start)?);
        *self.lock_ready() = Some(Arc::clone(&f));
        // The first pages are written right after the roll: reserve them (a file that grows
        // its reservation) and fault them in here, off the appender's path. Optional (old
        // kernels lack MADV_POPULATE_WRITE; a full disk leaves the writer to reserve).
        Ok(fault_in > 0 && f.reserve_to(fault_in).is_ok() && f.populate(0, fault_in).is_ok())
    }

    /// Forgets every file (closing the store): each mapping and descriptor goes as soon as
    /// the last reader holding the file lets go of it.
    pub fn clear(&self) {
        self.write_files().clear();
        *self.lock_ready() = None;
    }

    /// Drops this process's mappings of the pages of every file but the last `keep_last`
    /// (`MADV_DONTNEED`): the data stays in the page cache and on disk, and a later read
    /// faults it back in. Keeps the resident set flat however much of a big store is written
    /// or read. Anonymous (`:memory:`) files are left alone (their pages are the data).
    pub fn release_pages(&self, keep_last: usize) {
        if matches!(self.backing, Backing::Memory) {
            return;
        }
        let files = self.files();
        let old = files.len().saturating_sub(keep_last);
        for f in files.iter().take(old) {
            let _ = f.advise(0, f.size(), Advice::DontNeed);
        }
    }

    /// Faults in, writable, the bytes `[from, to)` (commit-log offsets) of existing files, so
    /// the appender's first writes to those pages do not stop for page allocation and zeroing.
    /// The prepared next file counts: warming it before the roll spares the writer a run of
    /// cold pages right after it. Returns how far it got: it stops at a failed advice (old
    /// kernels lack it; advice is an optimisation) or at a file that does not exist yet.
    pub fn warm(&self, from: u64, to: u64) -> u64 {
        self.each_file(from, to, MappedFile::populate)
    }

    /// The file prepared ahead of the next roll, if any.
    pub fn ready_file(&self) -> Option<Arc<MappedFile>> {
        self.lock_ready().clone()
    }

    /// Writes zeros over the bytes `[from, to)` (offsets) of existing files, as `warm` goes,
    /// so that the kernel fills the page cache there with large folios (MappedFile::zero_fill).
    /// The caller makes sure no writer writes there meanwhile (fence.rs). Returns
    /// how far it got: it stops at a failed write or a file that does not exist yet.
    pub fn zero_fill(&self, from: u64, to: u64) -> u64 {
        self.each_file(from, to, MappedFile::zero_fill)
    }

    /// Runs `op` over the part of `[from, to)` (offsets) in each existing file (the prepared
    /// next one included), with positions within that file; returns how far it got: it stops
    /// at the first failed `op` or at a file that does not exist yet.
    fn each_file(
        &self,
        from: u64,
        to: u64,
        op: impl Fn(&MappedFile, u64, u64) -> Result<()>,
    ) -> u64 {
        let mut at = from;
        while at < to {
            let Some(f) = self.find(at).or_else(|| self.ready_holding(at)) else {
                break;
            };
            let base = f.from_offset();
            let end = (base + f.size()).min(to);
            if op(&f, at - base, end - base).is_err() {
                break;
            }
            at = end;
        }
        at
    }

    /// The prepared next file, if it holds `offset`.
    fn ready_holding(&self, offset: u64) -> Option<Arc<MappedFile>> {
        self.lock_ready()
            .as_ref()
            .filter(|f| (f.from_offset()..f.from_offset() + f.size()).contains(&offset))
            .cloned()
    }

    fn lock_ready(&self) -> std::sync::MutexGuard<'_, Option<Arc<MappedFile>>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a new last file starting at `start` (using a prepared one if present) and
    /// returns its writer.
    pub fn roll(&self, start: u64) -> Result<FileWriter> {
        let prepared = self
            .lock_ready()
            .take()
            .filter(|f| f.from_offset() == start);
        let file = match prepared {
            Some(f) => f,
            None => Arc::new(self.make_file(start)?),
        };
        let writer = file.writer().ok_or(Error::ReadOnly)?;
        self.write_files().push(file);
        Ok(writer)
    }

    /// The writer of the last file, if one exists and its writer was not taken yet.
    pub fn take_last_writer(&self) -> Option<FileWriter> {
        self.last_file().and_then(|f| f.writer())
    }

    /// Removes every file that starts at or after `offset` (recovery truncation). The caller
    /// truncates the file containing `offset` through its writer.
    pub fn drop_files_from(&self, offset: u64) -> Result<()> {
        let removed: Vec<Arc<MappedFile>> = {
            let mut files = self.write_files();
            let keep = files
                .iter()
                .position(|f| f.from_offset() >= offset)
                .unwrap_or(files.len());
            files.split_off(keep)
        };
        for f in removed {
            if let Backing::Dir { .. } = self.backing {
                fs::remove_file(f.path())?;
            }
        }
        if let Backing::Dir { dir, .. } = &self.backing {
            fs::fsync_dir(dir)?;
        }
        Ok(())
    }

    /// Deletes head files for which `expired` says yes, stopping at the first that is not and
    /// never deleting the last file. Returns how many were deleted.
    pub fn delete_head_while(
        &self,
        max: usize,
        expired: impl Fn(&MappedFile) -> bool,
    ) -> Result<usize> {
        let victims: Vec<Arc<MappedFile>> = {
            let mut files = self.write_files();
            let mut n = 0;
            while n < max && n + 1 < files.len() && files.get(n).is_some_and(|f| expired(f)) {
                n += 1;
            }
            files.drain(..n).collect()
        };
        for f in &victims {
            if let Backing::Dir { .. } = self.backing {
                fs::remove_file(f.path())?;
            }
        }
        Ok(victims.len())
    }

    /// Flushes every file with unflushed bytes; returns the global flushed offset.
    pub fn flush(&self) -> Result<u64> {
        let files = self.files();
        let mut flushed = self.min_offset();
        for f in &files {
            if f.flushed() < f.published() {
                f.flush()?;
            }
            flushed = f.from_offset() + f.flushed();
        }
        self.sync_created(&files)?;
        Ok(flushed)
    }

    /// The fsyncs owed by files created with their sync deferred (in the list or the ready
    /// slot): each file's, then the directory's; a file's debt is cleared only after both.
    fn sync_created(&self, files: &[Arc<MappedFile>]) -> Result<()> {
        let ready = self.ready_file();
        let due: Vec<&Arc<MappedFile>> = files
            .iter()
            .chain(ready.as_ref())
            .filter(|f| f.create_sync_due())
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        for f in &due {
            f.sync_metadata()?;
        }
        if let Backing::Dir { dir, .. } = &self.backing {
            fs::fsync_dir(dir)?;
        }
        for f in due {
            f.create_synced();
        }
        Ok(())
    }

    /// Deletes every file (a queue whose data is gone).
    pub fn destroy(&self) -> Result<()> {
        self.drop_files_from(0)
    }
}

/// True when both lists hold the same mapped files, in the same order.
fn same_files(a: &[Arc<MappedFile>], b: &[Arc<MappedFile>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// Start offsets of the files in `dir` (names of exactly 20 digits; others are ignored).
fn list_offsets(dir: &Path) -> Result<Vec<u64>> {
    Ok(fs::dir_entries(dir)?
        .iter()
        .filter_map(|(name, _)| fs::parse_offset_file_name(name))
        .collect())
}
