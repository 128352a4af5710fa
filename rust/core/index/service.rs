//! IndexService: the index as a non-critical derived store (dispatch/derived.rs). Its own
//! follower lane feeds it every record; it appends an entry per index key (hash.rs) to the
//! newest file, rolls to a new file when that one is full, syncs its files when the store
//! flushes (so the checkpoint's `index` progress is durable in them), and deletes files whose
//! records retention deleted.
//!
//! Invariants
//! - One process writes the files: an exclusive writer, or the leader of shared writers (the
//!   `may_write` check; another writer's lane waits, and reloads the files from disk when its
//!   process becomes the leader). Readers of any process read the files from disk.
//! - A record below the newest file's `end_phy_offset` is never indexed again, so dispatch is
//!   idempotent (a record at that offset may get a second entry; queries drop duplicates).
//! - A whole file is never deleted for a crash: recovery resets the tail of the files that
//!   hold entries at or past the checkpointed progress (file.rs `reset_tail`), and dispatch
//!   re-adds those records from the progress on.
//! - Retention deletes a file only when every record it indexes lies below the log's start,
//!   and never the newest file.
//! - Only the file being written holds a descriptor; a full file is synced when the next one
//!   starts and is then opened only for the length of a lookup's walk (file.rs `Closed`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::file::{Geometry, Header, IndexFile};
use super::{hash, name};
use crate::commit_log::CommitLog;
use crate::dispatch::derived::{DerivedStore, Progress};
use crate::dispatch::{DispatchRequest, Dispatcher};
use crate::error::{Error, Result};
use crate::message::sysflag;
use crate::util::clock::Clock;
use crate::util::fs;

/// The store's name in the checkpoint's progress table.
pub const NAME: &str = "index";

/// Whether this process may write the index now (shared writers: it is the leader).
pub type MayWrite = Box<dyn Fn() -> bool + Send + Sync>;

/// The writer's state, under its lock.
#[derive(Debug, Default)]
struct Writer {
    /// The files were loaded for writing by this process (false while another process
    /// writes them).
    loaded: bool,
    /// The file being written (the newest) and its header as last written.
    current: Option<Arc<IndexFile>>,
    header: Option<Header>,
    /// The current file's slot table as written (empty: read it at the next put), so a put
    /// reads nothing.
    slots: Vec<i32>,
    /// A later shared opener: recovery belongs to the first one.
    attached: bool,
}

/// The index of a store.
pub struct IndexService {
    dir: Option<PathBuf>,
    geometry: Geometry,
    file_mode: u32,
    dir_mode: u32,
    clock: Clock,
    writable: bool,
    writer: Mutex<Writer>,
    /// Open files, oldest first: the writer's, or a reader's cache (refreshed per query).
    files: RwLock<Vec<Arc<IndexFile>>>,
    may_write: OnceLock<MayWrite>,
}

impl std::fmt::Debug for IndexService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexService")
            .field("dir", &self.dir)
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

impl IndexService {
    /// An index in `dir` (`None`: in memory) whose new files have `geometry`.
    pub fn new(
        dir: Option<PathBuf>,
        geometry: Geometry,
        writable: bool,
        file_mode: u32,
        dir_mode: u32,
        clock: Clock,
    ) -> Self {
        IndexService {
            dir,
            geometry,
            file_mode,
            dir_mode,
            clock,
            writable,
            writer: Mutex::new(Writer::default()),
            files: RwLock::new(Vec::new()),
            may_write: OnceLock::new(),
        }
    }

    /// Limits writing to when `f` says so (shared writers: while this process leads).
    pub fn set_may_write(&self, f: MayWrite) {
        let _ = self.may_write.set(f);
    }

    /// The directory, if on disk.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Whether this process builds the index now (a writer, and the leader of shared writers).
    pub fn writing_here(&self) -> bool {
        self.writable && self.may_write.get().is_none_or(|f| f())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists the files on disk, oldest first (files of no known geometry are left out),
    /// reusing the handles already held; a writer opens the newest for writing, every other
    /// file is held without a descriptor.
    fn scan(&self, writable: bool) -> Result<Vec<Arc<IndexFile>>> {
        let Some(dir) = &self.dir else {
            return Ok(self.snapshot());
        };
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut names: Vec<(String, PathBuf)> = fs::dir_entries(dir)?
            .into_iter()
            .filter(|(n, _)| name::is_file_name(n))
            .collect();
        names.sort();
        let open = self.snapshot();
        let mut out = Vec::with_capacity(names.len());
        let newest = names.len().saturating_sub(1);
        for (i, (n, path)) in names.into_iter().enumerate() {
            if let Some(f) = open.iter().find(|f| f.name() == n) {
                out.push(Arc::clone(f));
                continue;
            }
            // Only the file being written keeps a descriptor.
            let found = if writable && i == newest {
                IndexFile::open(&path, true)
            } else {
                IndexFile::closed(&path)
            };
            match found {
                Ok(Some(f)) => out.push(Arc::new(f)),
                Ok(None) => {}
                // Deleted by retention since the listing.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn snapshot(&self) -> Vec<Arc<IndexFile>> {
        self.files.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_files(&self, files: Vec<Arc<IndexFile>>) {
        *self.files.write().unwrap_or_else(|p| p.into_inner()) = files;
    }

    /// The files a query reads, oldest first: this process's own while it writes them,
    /// otherwise those on disk now.
    ///
    /// # Errors
    /// I/O failures listing or opening the files.
    pub fn files_for_query(&self) -> Result<Vec<Arc<IndexFile>>> {
        if self.dir.is_none() || self.lock().loaded {
            return Ok(self.snapshot());
        }
        let files = self.scan(false)?;
        // A reader's cache of open files; a writer that does not write now keeps its own
        // list out of it (it reloads when it takes over).
        if !self.writable {
            self.set_files(files.clone());
        }
        Ok(files)
    }

    /// Loads the files for writing (with `w` held).
    fn load_locked(&self, w: &mut Writer) -> Result<()> {
        if let Some(dir) = &self.dir {
            fs::create_dir_all(dir, self.dir_mode)?;
        }
        // Fresh handles: another process may have written, rolled or deleted files since.
        self.set_files(Vec::new());
        let files = self.scan(true)?;
        w.header = match files.last() {
            Some(f) => Some(f.header()?),
            None => None,
        };
        w.current = files.last().cloned();
        w.slots.clear();
        self.set_files(files);
        w.loaded = true;
        Ok(())
    }

    /// Creates the next file (named by the clock, after the newest file's name).
    fn roll(&self, w: &mut Writer) -> Result<Arc<IndexFile>> {
        let mut files = self.snapshot();
        let mut ms = self.clock.now_ms();
        let mut n = name::file_name(ms);
        while files.last().is_some_and(|f| f.name() >= n.as_str()) {
            ms += 1;
            n = name::file_name(ms);
        }
        let f = Arc::new(IndexFile::create(
            self.dir.as_deref(),
            &n,
            self.geometry,
            self.file_mode,
        )?);
        if let Some(dir) = &self.dir {
            fs::fsync_dir(dir)?;
        }
        w.header = Some(f.header()?);
        w.current = Some(Arc::clone(&f));
        w.slots = vec![0; self.geometry.slots as usize];
        // The full file is complete: made durable now, then held without a descriptor.
        if let Some(last) = files.pop() {
            last.sync()?;
            files.push(last.to_closed().map_or(last, Arc::new));
        }
        files.push(Arc::clone(&f));
        self.set_files(files);
        Ok(f)
    }

    /// The keys of `reqs` to index, in log order: none of a rolled-back record, nor of a
    /// record the index already holds (dispatch may repeat records after a crash).
    fn keys_of(w: &Writer, reqs: &[DispatchRequest<'_>]) -> Vec<(i32, u64, i64)> {
        let mut end = w.header.map_or(i64::MIN, |h| h.end_phy_offset);
        let mut keys = Vec::with_capacity(reqs.len() * 2);
        for req in reqs {
            if req.sysflag & sysflag::TRANSACTION_MASK == sysflag::TRANSACTION_ROLLBACK {
                continue;
            }
            let offset = i64::try_from(req.commit_log_offset).unwrap_or(i64::MAX);
            if offset < end {
                continue;
            }
            end = offset;
            for key in hash::record_keys(req.properties) {
                let h = hash::topic_key_hash(req.topic, key);
                keys.push((h, req.commit_log_offset, req.store_timestamp));
            }
        }
        keys
    }

    /// Indexes `keys` into the current file, rolling to new ones as they fill.
    fn put_keys(&self, w: &mut Writer, mut keys: &[(i32, u64, i64)]) -> Result<()> {
        let mut fresh = false;
        while !keys.is_empty() {
            let file = match (&w.current, w.header) {
                (Some(f), Some(_)) => Arc::clone(f),
                _ => {
                    fresh = true;
                    self.roll(w)?
                }
            };
            if w.slots.len() != file.geometry().slots as usize {
                w.slots = file.read_slots()?;
            }
            let mut header = w.header.unwrap_or_default();
            let mut slots = std::mem::take(&mut w.slots);
            let put = file.put_all(&mut header, &mut slots, keys);
            match put {
                Ok(n) => {
                    w.slots = slots;
                    w.header = Some(header);
                    if n == 0 {
                        if fresh {
                            return Err(Error::InvalidConfig {
                                field: "index_hash_slots",
                                reason: "a new index file has no room for an entry".into(),
                            });
                        }
                        self.roll(w)?;
                        fresh = true;
                    }
                    if n > 0 {
                        fresh = false;
                    }
                    keys = &keys[n..];
                }
                Err(e) => {
                    // The copy may be ahead of the file: read it again, and the header too.
                    w.header = Some(file.header()?);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The number of files this process knows, and the newest one's header.
    ///
    /// # Errors
    /// I/O failures reading the files.
    pub fn describe(&self) -> Result<(usize, Option<Header>)> {
        let files = self.files_for_query()?;
        let last = match files.last() {
            Some(f) => Some(f.header()?),
            None => None,
        };
        Ok((files.len(), last))
    }
}

impl Dispatcher for IndexService {
    fn name(&self) -> &'static str {
        NAME
    }

    fn dispatch(&self, req: &DispatchRequest<'_>) -> Result<()> {
        self.dispatch_batch(std::slice::from_ref(req))
    }

    fn dispatch_batch(&self, reqs: &[DispatchRequest<'_>]) -> Result<()> {
        let mut w = self.lock();
        if !self.writing_here() {
            w.loaded = false;
            return Err(Error::IndexUnavailable {
                reason: "another writer process (the leader) builds the index".into(),
            });
        }
        if !w.loaded {
            self.load_locked(&mut w)?;
        }
        let keys = Self::keys_of(&w, reqs);
        self.put_keys(&mut w, &keys)
    }
}

impl DerivedStore for IndexService {
    fn critical(&self) -> bool {
        false
    }

    fn load(&self, _abnormal: bool) -> Result<()> {
        let mut w = self.lock();
        self.load_locked(&mut w)
    }

    fn attach(
        &self,
        _log_end: u64,
        _next: &crate::dispatch::derived::NextOffset<'_>,
    ) -> Result<()> {
        // The running writers' leader owns the files: nothing is loaded or recovered here.
        let mut w = self.lock();
        w.attached = true;
        w.loaded = false;
        Ok(())
    }

    fn recover(&self, _log: &CommitLog, _log_end: u64, resume_from: u64) -> Result<u64> {
        let mut w = self.lock();
        if w.attached {
            return Ok(resume_from);
        }
        let limit = i64::try_from(resume_from).unwrap_or(i64::MAX);
        // Newest first: every file holding an entry at or past the progress keeps only what
        // lies below it (entries past it may be torn after a power cut).
        for f in self.snapshot().iter().rev() {
            let h = f.header()?;
            if h.index_count > 1 && h.end_phy_offset < limit {
                break;
            }
            // A file held without a descriptor is opened for the reset.
            let rw = match f.is_closed() {
                true => IndexFile::open(f.path(), true)?.map_or_else(|| Arc::clone(f), Arc::new),
                false => Arc::clone(f),
            };
            rw.reset_tail(resume_from)?;
            rw.sync()?;
        }
        w.current = self.snapshot().last().cloned();
        w.slots.clear();
        w.header = match &w.current {
            Some(f) => Some(f.header()?),
            None => None,
        };
        Ok(resume_from)
    }

    fn flush(&self, dispatched: Progress) -> Result<Progress> {
        for f in self.snapshot() {
            f.sync()?;
        }
        Ok(dispatched)
    }

    fn delete_expired(&self, log_min: u64) -> Result<usize> {
        let w = self.lock();
        if !w.loaded {
            return Ok(0);
        }
        let files = self.snapshot();
        let min = i64::try_from(log_min).unwrap_or(i64::MAX);
        let mut keep = Vec::with_capacity(files.len());
        let mut deleted = 0;
        let newest = files.len().saturating_sub(1);
        for (i, f) in files.into_iter().enumerate() {
            let expired = i < newest && f.header()?.end_phy_offset < min;
            if expired && self.dir.is_some() {
                fs::remove_file(f.path())?;
                deleted += 1;
            } else if expired {
                deleted += 1;
            } else {
                keep.push(f);
            }
        }
        if deleted > 0 {
            self.set_files(keep);
        }
        drop(w);
        Ok(deleted)
    }

    fn close(&self) {
        let mut w = self.lock();
        w.loaded = false;
        w.header = None;
        w.current = None;
        w.slots = Vec::new();
        self.set_files(Vec::new());
    }
}
