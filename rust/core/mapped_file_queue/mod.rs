//! MappedFileQueue: an ordered run of equal-size `MappedFile`s forming one logical byte space.
//!
//! On disk: `<dir>/<20-digit start offset>`; file `k` covers `[start_k, start_k + size)`.
//!
//! Invariants
//! - The list of files is sorted by start, with one slot per start; a lookup by offset
//!   (`slot_at`) searches it by start and returns only a file that holds the offset, `None`
//!   otherwise. Every change keeps it so: `load` and `refresh` list names in order, `roll`
//!   takes the listed slot of its start or inserts one in its place.
//! - Files are contiguous: `start_{k+1} == start_k + size`; only the last file is written,
//!   except in a shared queue, whose list may also hold files past the one being written
//!   (other processes' rolls and preparers made them; `refresh` and `load` list them), which
//!   a later roll takes.
//! - `min_offset()` is the first file's start, `max_offset()` the last file's start plus its
//!   published position.
//! - Files are removed only from the head (expiry) or past a truncation point (recovery, and
//!   an unused prepared file), by `unlink`, so mappings held by readers stay valid. A name
//!   removed past a truncation point is created again when the writer gets there.
//! - A follower (read-only open in another process) never maps a file under a name that now
//!   names another file for longer than until its next `refresh(verify = true)`: it compares
//!   each mapping's device and inode with the directory's (`refresh`).
//!
//! Mappings: the queue lists its files by start offset (`Slot`) and maps a file only when it
//! is used (`find`, `first_file`, `last_file`); `load` reads the directory and `stat`s the
//! files, opening and mapping none. A slot keeps a weak reference to its mapping; what keeps
//! a mapping alive is a strong one: a reader's or writer's `Arc<MappedFile>`, the store-wide
//! cache of recently used files (cache.rs, a budget of idle mappings), or the slot's pin. A
//! mapping therefore goes when its last holder drops it, never under a reader.
//! - Pinned (kept mapped whatever the cache's budget): every file a writer was taken of
//!   (`roll`, `last_writer`) until a `flush` finds it clean (every published byte flushed,
//!   its creation's fsyncs done) and either no longer last or let go of by its owner
//!   (`park_last`: the writer dropped; the slot then remembers where the data ends). A new
//!   mapping of a file starts with every byte published and flushed (`open_reserved`), up
//!   to the end remembered for it if any, which is true of exactly the files that are not
//!   pinned (owners fill a file before they roll to the next: the commit log's END_OF_FILE
//!   blank, a consume queue's whole number of units); the files prepared ahead of a roll are
//!   held by the `ready` slot. A new mapping of a file that grows its reservation
//!   (`with_reserve`) counts nothing as reserved, like any file opened from disk: its next
//!   writer reserves again ahead of itself before it writes (mapped_file/mod.rs).
//! - Anonymous (`:memory:`) files are the data itself: they stay pinned for as long as they
//!   are listed.
//! - No mapping holds a descriptor (mapped_file/mod.rs): the number of files and queues
//!   costs no descriptor, and mappings only up to the cache's budget plus the pinned files.
//!
//! Shared queues (`share`: other processes of the store create and write these files too):
//! - A file is created under a temporary name (`fs::segment_temp_name`), sized, and
//!   published under its own name with a link, which never replaces a name another process
//!   published first (that file is used instead). So no process ever sees a file of the queue
//!   by its name before it has its full length.
//! - `load` never deletes a file (a zero-length last file is skipped: it can only be what a
//!   crash left, which the store's next first opener removes), and a file prepared ahead of a
//!   roll (`prepare`) is published at once and never deleted at close: another process may
//!   roll to it.
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

pub mod cache;
pub mod fence;
mod follow;
#[cfg(test)]
mod lookup_tests;
pub mod pace;
mod slot;
pub mod warm;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::mapped_file::mmap::Advice;
use crate::mapped_file::{FileWriter, MappedFile, Reserve};
use crate::util::fs;
use slot::{Slot, NO_END};

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

pub use cache::MapCache;
pub use warm::WARM_AHEAD;

/// The ordered files of one commit log, consume queue or timer log.
#[derive(Debug)]
pub struct MappedFileQueue {
    backing: Backing,
    file_size: u64,
    writable: bool,
    files: RwLock<Vec<Arc<Slot>>>,
    // Keeps recently used files mapped (shared by the queues of a store).
    cache: Arc<MapCache>,
    // A file created ahead of need by the preparer thread (prepare.rs).
    ready: Mutex<Option<Arc<MappedFile>>>,
    // New files' fsyncs are left to the next flush (see the module doc).
    defer_create_sync: bool,
    // How new and loaded files reserve their disk blocks (mapped_file/alloc.rs).
    reserve: Reserve,
    // Held by `refresh` (followers) for its whole run.
    refreshing: Mutex<()>,
    // Other processes create and write these files too (`share`, module doc).
    shared: std::sync::atomic::AtomicBool,
}

/// Distinguishes the temporary names of files one process creates (`fs::segment_temp_name`).
static TEMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl MappedFileQueue {
    /// An empty queue (no file loaded yet).
    pub fn new(backing: Backing, file_size: u64, writable: bool) -> Self {
        MappedFileQueue {
            backing,
            file_size,
            writable,
            files: RwLock::new(Vec::new()),
            cache: Arc::new(MapCache::default()),
            ready: Mutex::new(None),
            defer_create_sync: false,
            reserve: Reserve::Whole,
            refreshing: Mutex::new(()),
            shared: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// From now on other processes create and write this queue's files too (module doc).
    pub fn share(&self) {
        self.shared.store(true, Ordering::Release);
    }

    /// Whether other processes create and write this queue's files too.
    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Acquire)
    }

    /// This queue keeps its recently used files mapped in `cache` (the store's, shared by
    /// all its queues) rather than in a cache of its own.
    pub fn with_cache(mut self, cache: Arc<MapCache>) -> Self {
        self.cache = cache;
        self
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

    /// `load` of the files that start below `end`; later files stay on disk. Reads the
    /// directory and `stat`s each file; nothing is opened or mapped until it is used.
    pub fn load_below(&self, end: u64) -> Result<()> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(());
        };
        let shared = self.is_shared();
        let entries = fs::dir_entries(dir)?;
        if self.writable && !shared {
            // A creation a crash interrupted (module doc); no other process has the store
            // open, so no temporary name is in use.
            for (name, path) in &entries {
                if fs::is_segment_temp_name(name) {
                    fs::remove_file(path)?;
                }
            }
        }
        let mut names: Vec<u64> = entries
            .iter()
            .filter_map(|(name, _)| fs::parse_offset_file_name(name))
            .collect();
        names.retain(|&start| start < end);
        names.sort_unstable();
        let mut loaded: Vec<Arc<Slot>> = Vec::with_capacity(names.len());
        let mut short_last = false;
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
                    // Shared: never deleted (module doc), only not listed.
                    if !shared {
                        fs::remove_file(&path)?;
                    }
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
                // Mapped below, which makes it whole (`MappedFile::open_reserved`).
                short_last = true;
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
            if let Some(prev) = loaded.last().map(|s| s.start) {
                if start != prev + self.file_size {
                    return Err(Error::Corrupted {
                        path,
                        offset: start,
                        reason: format!("gap after the file starting at {prev}"),
                        cause: None,
                    });
                }
            }
            loaded.push(Slot::unmapped(start));
        }
        let old = std::mem::replace(&mut *self.write_files(), loaded);
        self.release(&old);
        if short_last {
            self.try_last_file()?;
        }
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

    /// Shared writers, before loading: the start of the run of files at the end of the queue
    /// for which `unused` says yes (prepared ahead of a roll, by any process), never the first
    /// file; `None` when the last file is in use. Nothing is deleted: another process may roll
    /// to those files at any moment.
    pub fn unused_tail_start(&self, unused: impl Fn(&Path) -> Result<bool>) -> Result<Option<u64>> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(None);
        };
        let mut names = list_offsets(dir)?;
        names.sort_unstable();
        let mut from = None;
        while names.len() > 1 {
            let Some(start) = names.pop() else { break };
            let path = dir.join(fs::offset_file_name(start));
            if fs::is_symlink(&path) || !unused(&path)? {
                break;
            }
            from = Some(start);
        }
        Ok(from)
    }

    /// Deletes the file prepared ahead of a roll, if one waits (store close).
    pub fn discard_prepared(&self) {
        let Some(f) = self.lock_ready().take() else {
            return;
        };
        if f.is_anonymous() {
            return;
        }
        let listed = self.read_files().iter().any(|g| g.start == f.from_offset());
        // Published under its name: another process may roll to it (module doc).
        if !listed && !self.is_shared() {
            let _ = fs::remove_file(f.path());
        }
    }

    /// Lets go of the mappings of slots that left the list: their pins and cache entries.
    fn release(&self, gone: &[Arc<Slot>]) {
        for s in gone {
            let pin = s.lock_pin().take();
            if let Some(f) = s.live() {
                self.cache.forget(&f);
            }
            drop(pin);
        }
    }

    /// The mapping of `slot`, mapped now if no holder keeps one (continuing at the end the
    /// slot remembers, if any). Every use counts as recent for the cache.
    fn map(&self, slot: &Slot) -> Result<Arc<MappedFile>> {
        let file = match slot.live() {
            Some(f) => f,
            None => {
                let mut mapped = slot.mapped.write().unwrap_or_else(|p| p.into_inner());
                match mapped.upgrade() {
                    Some(f) => f,
                    None => {
                        let Backing::Dir { dir, .. } = &self.backing else {
                            return Err(Error::Closed);
                        };
                        // Shared: the file this process prepared, listed from the directory
                        // (`writer_at`), is the mapping whose pages the preparer readied.
                        // It starts as any new mapping does (`open_reserved`, module doc).
                        if let Some(f) = self.take_ready(slot.start) {
                            let end = slot.end.load(Ordering::Acquire);
                            f.resume_at(if end == NO_END { self.file_size } else { end });
                            *mapped = Arc::downgrade(&f);
                            self.cache.touch(&f);
                            return Ok(f);
                        }
                        let path = dir.join(fs::offset_file_name(slot.start));
                        let f = Arc::new(MappedFile::open_reserved(
                            &path,
                            slot.start,
                            self.file_size,
                            self.writable,
                            self.reserve,
                        )?);
                        let end = slot.end.load(Ordering::Acquire);
                        if end != NO_END {
                            f.resume_at(end);
                        }
                        *mapped = Arc::downgrade(&f);
                        f
                    }
                }
            }
        };
        self.cache.touch(&file);
        Ok(file)
    }

    /// The file of the `idx`-th slot, mapped if needed.
    fn map_at(&self, idx: usize) -> Result<Option<Arc<MappedFile>>> {
        let slot = match self.read_files().get(idx) {
            Some(s) => Arc::clone(s),
            None => return Ok(None),
        };
        self.map(&slot).map(Some)
    }

    fn read_files(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Slot>>> {
        self.files.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write_files(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Slot>>> {
        self.files.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Size of every file.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The cache keeping this queue's recently used files mapped.
    pub fn cache(&self) -> &Arc<MapCache> {
        &self.cache
    }

    /// The files mapped now (by a holder, the cache or a pin), in order; maps nothing.
    pub fn mapped_files(&self) -> Vec<Arc<MappedFile>> {
        self.read_files().iter().filter_map(|s| s.live()).collect()
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.read_files().len()
    }

    /// True when no file exists.
    pub fn is_empty(&self) -> bool {
        self.read_files().is_empty()
    }

    /// The newest file, mapped. `None` when there is none, or when it cannot be mapped
    /// (`try_last_file` reports why).
    pub fn last_file(&self) -> Option<Arc<MappedFile>> {
        self.try_last_file().ok().flatten()
    }

    /// The newest file, mapped; an error when mapping it failed.
    pub fn try_last_file(&self) -> Result<Option<Arc<MappedFile>>> {
        let n = self.len();
        match n.checked_sub(1) {
            Some(i) => self.map_at(i),
            None => Ok(None),
        }
    }

    /// The oldest file, mapped (`None` as for `last_file`).
    pub fn first_file(&self) -> Option<Arc<MappedFile>> {
        self.map_at(0).ok().flatten()
    }

    /// Offset of the first byte still stored.
    pub fn min_offset(&self) -> u64 {
        self.read_files().first().map_or(0, |s| s.start)
    }

    /// One past the last published byte. Maps the last file unless its end is remembered
    /// (`park_last`) and it is not mapped.
    pub fn max_offset(&self) -> u64 {
        let last = self.read_files().last().cloned();
        let Some(slot) = last else {
            return 0;
        };
        let end = slot.end.load(Ordering::Acquire);
        if end != NO_END && slot.live().is_none() {
            return slot.start + end;
        }
        self.map(&slot)
            .map(|f| f.from_offset() + f.published())
            .unwrap_or(0)
    }

    /// The file holding `offset`, found by its start (`slot_at`) and mapped.
    /// `None` when no file holds it, or when it cannot be mapped (`try_find` reports why).
    pub fn find(&self, offset: u64) -> Option<Arc<MappedFile>> {
        self.try_find(offset).ok().flatten()
    }

    /// `find`, with the error when the file exists but mapping it failed: for callers that
    /// must not take a file they could not map for a file that is not there (recovery).
    pub fn try_find(&self, offset: u64) -> Result<Option<Arc<MappedFile>>> {
        let Some(slot) = self.slot_at(offset) else {
            return Ok(None);
        };
        self.map(&slot).map(Some)
    }

    /// The listed slot of the file holding `offset`: the last slot starting at or below it
    /// (the list is sorted by start, module doc), if that file reaches it. `None` when no
    /// listed file holds it, however the list came to be.
    fn slot_at(&self, offset: u64) -> Option<Arc<Slot>> {
        let files = self.read_files();
        let i = files
            .partition_point(|s| s.start <= offset)
            .checked_sub(1)?;
        files
            .get(i)
            .filter(|s| offset - s.start < self.file_size)
            .cloned()
    }

    /// The listed slot of the file starting at `start`.
    fn slot_starting(&self, start: u64) -> Option<Arc<Slot>> {
        let files = self.read_files();
        let i = files.binary_search_by_key(&start, |s| s.start).ok()?;
        files.get(i).cloned()
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
                if self.is_shared() {
                    return Ok(self
                        .make_shared_file(dir, &path, start, *mode, *populate)?
                        .0);
                }
                let f = MappedFile::create_reserved(
                    &path,
                    start,
                    self.file_size,
                    *mode,
                    *populate,
                    self.reserve,
                )?;
                self.sync_new(dir, f)
            }
            Backing::Memory => MappedFile::anonymous(start, self.file_size),
        }
    }

    /// The file's size and allocation must be durable before any checkpoint or record points
    /// into it: synced now, or at the next flush (`with_deferred_create_sync`).
    fn sync_new(&self, dir: &Path, f: MappedFile) -> Result<MappedFile> {
        if self.defer_create_sync {
            f.defer_create_sync();
        } else {
            f.sync_metadata()?;
            fs::fsync_dir(dir)?;
        }
        Ok(f)
    }

    /// `make_file` of a shared queue (module doc): created and sized under a temporary name,
    /// then linked to `path`. When another process published `path` first, its file is mapped
    /// instead, from its start (nothing of it is published in this process yet). The flag
    /// says whether this call published the file.
    fn make_shared_file(
        &self,
        dir: &Path,
        path: &Path,
        start: u64,
        mode: u32,
        populate: bool,
    ) -> Result<(MappedFile, bool)> {
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(fs::segment_temp_name(start, seq));
        let made =
            MappedFile::create_reserved(&temp, start, self.file_size, mode, populate, self.reserve);
        let linked = match made {
            Ok(f) => match fs::hard_link(&temp, path) {
                Ok(()) => Ok(Some(f)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(Error::io("link", path, e)),
            },
            Err(e) => Err(e),
        };
        // The temporary name goes whatever happened (a failed unlink only leaves a hidden
        // file the next first opener removes).
        let _ = fs::remove_file(&temp);
        match linked? {
            Some(f) => Ok((self.sync_new(dir, f.known_as(path.to_path_buf()))?, true)),
            None => {
                let f = MappedFile::open_reserved(path, start, self.file_size, true, self.reserve)?;
                f.resume_at(0);
                Ok((f, false))
            }
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
        let f = match &self.backing {
            // Another process may publish the file first: then there is nothing to prepare.
            Backing::Dir {
                dir,
                mode,
                populate,
            } if self.is_shared() => {
                let path = dir.join(fs::offset_file_name(start));
                match self.make_shared_file(dir, &path, start, *mode, *populate)? {
                    (f, true) => Arc::new(f),
                    (_, false) => return Ok(false),
                }
            }
            _ => Arc::new(self.make_file(start)?),
        };
        *self.lock_ready() = Some(Arc::clone(&f));
        // The first pages are written right after the roll: reserve them (a file that grows
        // its reservation) and fault them in here, off the appender's path. Optional (old
        // kernels lack MADV_POPULATE_WRITE; a full disk leaves the writer to reserve).
        Ok(fault_in > 0 && f.reserve_to(fault_in).is_ok() && f.populate(0, fault_in).is_ok())
    }

    /// Forgets every file (closing the store): each mapping goes as soon as the last reader
    /// holding the file lets go of it.
    pub fn clear(&self) {
        let old = std::mem::take(&mut *self.write_files());
        self.release(&old);
        *self.lock_ready() = None;
    }

    /// Drops this process's mappings of the pages of every mapped file but the last
    /// `keep_last` (`MADV_DONTNEED`): the data stays in the page cache and on disk, and a
    /// later read faults it back in. Keeps the resident set flat however much of a big store
    /// is written or read. Files not mapped are left alone (nothing to drop), and so are
    /// anonymous (`:memory:`) files (their pages are the data).
    pub fn release_pages(&self, keep_last: usize) {
        if matches!(self.backing, Backing::Memory) {
            return;
        }
        let slots = self.read_files().clone();
        let old = slots.len().saturating_sub(keep_last);
        for f in slots.iter().take(old).filter_map(|s| s.live()) {
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

    /// The prepared file, taken from the ready slot, if it starts at `start`.
    fn take_ready(&self, start: u64) -> Option<Arc<MappedFile>> {
        let mut ready = self.lock_ready();
        if ready.as_ref().is_some_and(|f| f.from_offset() == start) {
            ready.take()
        } else {
            None
        }
    }

    fn lock_ready(&self) -> std::sync::MutexGuard<'_, Option<Arc<MappedFile>>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rolls to the file starting at `start` (using a prepared one if present) and returns its
    /// writer, from the file's start. The file is pinned (see the module doc). A shared queue
    /// may list the file already, and files after it (listed from the directory, created by
    /// other processes' rolls and preparers): that slot is taken, and a new one goes in its
    /// place by start, so the list stays sorted with one slot per start (module doc).
    pub fn roll(&self, start: u64) -> Result<FileWriter> {
        if let Some(slot) = self.slot_starting(start) {
            return self.rolled_to(&slot);
        }
        let prepared = self
            .lock_ready()
            .take()
            .filter(|f| f.from_offset() == start);
        let file = match prepared {
            Some(f) => f,
            None => Arc::new(self.make_file(start)?),
        };
        let writer = file.writer().ok_or(Error::ReadOnly)?;
        let listed = {
            let mut files = self.write_files();
            match files.binary_search_by_key(&start, |s| s.start) {
                Ok(i) => files.get(i).cloned(),
                Err(i) => {
                    files.insert(i, Slot::pinned(&file));
                    None
                }
            }
        };
        // Listed meanwhile (a refresh on another thread): that slot's mapping is the one
        // readers use, so the writer is taken of it (the file is the same one on disk).
        if let Some(slot) = listed {
            drop(writer);
            return self.rolled_to(&slot);
        }
        self.cache.touch(&file);
        Ok(writer)
    }

    /// `roll` to a listed slot: nothing past the roll point was published, so the writer
    /// starts at the file's start.
    fn rolled_to(&self, slot: &Arc<Slot>) -> Result<FileWriter> {
        let mut w = self.writer_of(slot)?.ok_or(Error::ReadOnly)?;
        w.reposition(0);
        Ok(w)
    }

    /// The writer of the last file, which stays pinned (mapped) from now on until `park_last`
    /// lets go of it. `Ok(None)` without a file, or while its writer exists elsewhere.
    pub fn last_writer(&self) -> Result<Option<FileWriter>> {
        let Some(slot) = self.read_files().last().cloned() else {
            return Ok(None);
        };
        self.writer_of(&slot)
    }

    /// Shared writers: the writer of the file holding `offset`, which another process may
    /// have created (the directory is listed again when no listed file holds it), pinned as
    /// `last_writer`'s. `Ok(None)` when no file holds it, or while its writer exists elsewhere
    /// in this process. The writer starts where this mapping's published data ends: the caller
    /// moves it (`FileWriter::reposition`).
    pub fn writer_at(&self, offset: u64) -> Result<Option<FileWriter>> {
        let slot = match self.slot_at(offset) {
            Some(s) => s,
            None => {
                self.refresh(false)?;
                match self.slot_at(offset) {
                    Some(s) => s,
                    None => return Ok(None),
                }
            }
        };
        self.writer_of(&slot)
    }

    fn writer_of(&self, slot: &Arc<Slot>) -> Result<Option<FileWriter>> {
        let file = self.map(slot)?;
        let Some(writer) = file.writer() else {
            return Ok(None);
        };
        slot.end.store(NO_END, Ordering::Release);
        let mut pin = slot.lock_pin();
        if pin.is_none() {
            *pin = Some(file);
        }
        Ok(Some(writer))
    }

    /// The owner of the last file's writer dropped it (an idle queue): once every byte of it is
    /// flushed and its creation synced, the file is unpinned, left to the cache, and the slot
    /// remembers where its data ends so that a new mapping continues there. Returns whether
    /// it was let go of (false while a writer exists or bytes wait for a flush).
    pub fn park_last(&self) -> bool {
        if matches!(self.backing, Backing::Memory) {
            return false;
        }
        let Some(slot) = self.read_files().last().cloned() else {
            return false;
        };
        let mut pin = slot.lock_pin();
        let Some(f) = pin.as_ref() else {
            return false;
        };
        if f.writer_taken() || f.flushed() < f.published() || f.create_sync_due() {
            return false;
        }
        slot.end.store(f.published(), Ordering::Release);
        if let Some(f) = pin.take() {
            drop(pin);
            self.cache.touch(&f);
        }
        true
    }

    /// The last file if it is pinned (being written, or not yet clean): maps nothing.
    pub fn pinned_last(&self) -> Option<Arc<MappedFile>> {
        let slot = self.read_files().last().cloned()?;
        let pin = slot.lock_pin().clone();
        pin
    }

    /// Removes every file that starts at or after `offset` (recovery truncation). The caller
    /// truncates the file containing `offset` through its writer.
    pub fn drop_files_from(&self, offset: u64) -> Result<()> {
        let removed = self.forget_files_from(offset);
        if let Backing::Dir { dir, .. } = &self.backing {
            for start in &removed {
                fs::remove_file(&dir.join(fs::offset_file_name(*start)))?;
            }
            fs::fsync_dir(dir)?;
        }
        Ok(())
    }

    /// Unlists every file that starts at or after `offset`, leaving them on disk (a shared
    /// queue whose later files other processes write); returns their starts. A later roll,
    /// or `writer_at`, lists them again.
    pub fn forget_files_from(&self, offset: u64) -> Vec<u64> {
        let removed: Vec<Arc<Slot>> = {
            let mut files = self.write_files();
            let keep = files
                .iter()
                .position(|s| s.start >= offset)
                .unwrap_or(files.len());
            files.split_off(keep)
        };
        self.release(&removed);
        removed.iter().map(|s| s.start).collect()
    }

    /// Deletes head files for which `expired` says yes, stopping at the first that is not (or
    /// that cannot be mapped to be asked) and never deleting the last file. Returns how many
    /// were deleted.
    pub fn delete_head_while(
        &self,
        max: usize,
        expired: impl Fn(&MappedFile) -> bool,
    ) -> Result<usize> {
        let victims: Vec<Arc<Slot>> = {
            let mut files = self.write_files();
            let mut n = 0;
            while n < max && n + 1 < files.len() {
                let Some(slot) = files.get(n) else { break };
                let asked = match self.map(slot) {
                    Ok(f) => expired(&f),
                    Err(_) => false,
                };
                if !asked {
                    break;
                }
                n += 1;
            }
            files.drain(..n).collect()
        };
        self.release(&victims);
        if let Backing::Dir { dir, .. } = &self.backing {
            for s in &victims {
                match fs::remove_file(&dir.join(fs::offset_file_name(s.start))) {
                    // Already gone: another process of a shared store deleted it (its
                    // leader, before this one took over).
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    r => r?,
                }
            }
        }
        Ok(victims.len())
    }

    /// Flushes every file with unflushed bytes; returns the global flushed offset. Only pinned
    /// files can hold unflushed bytes (see the module doc); a file this flush leaves clean
    /// and that is no longer the last is unpinned, left to the cache.
    pub fn flush(&self) -> Result<u64> {
        let slots = self.read_files().clone();
        let pinned: Vec<(usize, Arc<MappedFile>)> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.lock_pin().clone().map(|f| (i, f)))
            .collect();
        for (_, f) in &pinned {
            if f.flushed() < f.published() {
                f.flush()?;
            }
        }
        self.sync_created(pinned.iter().map(|(_, f)| f))?;
        let last = slots.len().saturating_sub(1);
        // Anonymous memory is the data itself: never let go of.
        let in_memory = matches!(self.backing, Backing::Memory);
        for (i, f) in pinned.iter().filter(|_| !in_memory) {
            let clean = f.flushed() >= f.published() && !f.create_sync_due() && !f.writer_taken();
            if *i < last && clean {
                if let Some(slot) = slots.get(*i) {
                    if let Some(f) = slot.lock_pin().take() {
                        self.cache.touch(&f);
                    }
                }
            }
        }
        Ok(match pinned.last() {
            Some((i, f)) if *i == last => f.from_offset() + f.flushed(),
            // Not pinned: every byte of the last file is flushed.
            _ => self.max_offset(),
        })
    }

    /// Makes `[from, to)` durable in files this process may never have written (shared
    /// writers: other processes wrote them, or created them): when the range spans more than
    /// one file, each file it touches is fsynced (its bytes and size), then the directory
    /// (their names). Within one file it does nothing: the caller's `flush` covers the file
    /// being written. A file no longer listed (deleted by retention) is skipped.
    ///
    /// # Errors
    /// The first failed sync.
    pub fn sync_files(&self, from: u64, to: u64) -> Result<()> {
        let size = self.file_size;
        if to <= from || from / size == (to - 1) / size {
            return Ok(());
        }
        let slots = self.read_files().clone();
        for slot in slots
            .iter()
            .filter(|s| s.start + size > from && s.start < to)
        {
            self.map(slot)?.sync_metadata()?;
        }
        if let Backing::Dir { dir, .. } = &self.backing {
            fs::fsync_dir(dir)?;
        }
        Ok(())
    }

    /// The fsyncs owed by files created with their sync deferred (among `files` or in the
    /// ready slot): each file's, then the directory's; a file's debt is cleared only after
    /// both.
    fn sync_created<'a>(&self, files: impl Iterator<Item = &'a Arc<MappedFile>>) -> Result<()> {
        let due: Vec<Arc<MappedFile>> = files
            .cloned()
            .chain(self.ready_file())
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

/// True when both lists hold the same slots, in the same order.
fn same_slots(a: &[Arc<Slot>], b: &[Arc<Slot>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// Start offsets of the files in `dir` (names of exactly 20 digits; others are ignored).
fn list_offsets(dir: &Path) -> Result<Vec<u64>> {
    Ok(fs::dir_entries(dir)?
        .iter()
        .filter_map(|(name, _)| fs::parse_offset_file_name(name))
        .collect())
}
