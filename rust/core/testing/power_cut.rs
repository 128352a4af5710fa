//! Power-cut simulator (cargo feature `fault-injection`): what a power cut could leave on disk.
//!
//! Every I/O call that changes what survives a power cut goes through `util/fs.rs`, which
//! wraps it in [`around`]. While a [`Recording`] covers a store directory, the recorder keeps,
//! for that directory:
//! - the *live namespace*: which file object each path names now (creations, renames, unlinks
//!   and directory creations, as they return);
//! - the *durable namespace*: the entries of each directory as of its last successful fsync
//!   (an entry created, renamed or unlinked later is not durable yet);
//! - per file object, its *durable content*: what each successful sync wrote back, laid over
//!   what earlier ones did. fsync/fdatasync write the whole file and its size; msync writes
//!   the whole pages overlapping its range (Linux writes back pages, not bytes). The bytes are
//!   read before and after the call, and only those equal in both count: a byte that changed
//!   while the call ran may or may not have reached the disk, so it keeps its old value.
//!
//! A [`Snapshot`] (taken before the k-th recorded call, chosen by a seeded RNG, or when a test
//! asks) holds that state plus the live bytes of every file. [`Snapshot::build`] turns it into a
//! power-cut image: the durable namespace (or, sometimes, the live one: every metadata change
//! reached the journal), each file's durable bytes, plus a seeded subset of the 4 KiB pages
//! whose live bytes differ from the durable ones, and either the durable or the live size.
//! Bytes of a file that were never synced read as zeros (files are preallocated).
//!
//! Model limits: pages are whole (powersafe overwrite, as SQLite assumes); unsynced namespace
//! changes are all undone or all kept, never a subset; a file that is no longer linked keeps
//! only its durable bytes. The recorder must see every creation, rename and unlink under the
//! directory: a snapshot lists any file it did not see created (`Snapshot::problems`).

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A recorded I/O call (`util/fs.rs` makes them).
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// An open that may create the file (an existing file may be truncated), or a copy's
    /// target.
    Create(&'a Path),
    /// A directory and its missing parents are created.
    CreateDir(&'a Path),
    /// fsync/fdatasync of the whole file (`None`) or msync of the byte range `[from, to)`.
    Sync(&'a Path, Option<(u64, u64)>),
    /// fsync of a directory: its entries become durable.
    SyncDir(&'a Path),
    /// rename(from, to).
    Rename(&'a Path, &'a Path),
    /// link(from, to): `to` names `from`'s file too (failing when `to` exists).
    Link(&'a Path, &'a Path),
    /// unlink.
    Remove(&'a Path),
}

/// Pages of the image model.
pub const PAGE: usize = 4096;

static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static RECORDERS: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());

/// Runs `op` (the I/O call `event` describes) and, when a recording covers its path, records
/// what it made durable or changed in the namespace. The recorder's lock is held across `op`,
/// so a snapshot never sees a namespace change half done.
pub fn around<T, E>(event: Event<'_>, op: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return op();
    }
    let Some(shared) = recorder_for(event_path(&event)) else {
        return op();
    };
    let mut rec = lock(&shared.rec);
    rec.events += 1;
    if rec.cut_here() {
        let label = format!(
            "before call {} ({})",
            rec.events,
            describe(&event, &rec.root)
        );
        let snap = rec.capture(&shared, label);
        rec.snapshots.push(snap);
    }
    let before = rec.before(&event);
    let out = op();
    if out.is_ok() {
        rec.after(&event, before);
    }
    out
}

fn event_path<'a>(e: &Event<'a>) -> &'a Path {
    match *e {
        Event::Create(p)
        | Event::CreateDir(p)
        | Event::Sync(p, _)
        | Event::SyncDir(p)
        | Event::Remove(p)
        | Event::Rename(_, p)
        | Event::Link(_, p) => p,
    }
}

fn describe(e: &Event<'_>, root: &Path) -> String {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    match *e {
        Event::Create(p) => format!("create {}", rel(p)),
        Event::CreateDir(p) => format!("mkdir {}", rel(p)),
        Event::Sync(p, None) => format!("fsync {}", rel(p)),
        Event::Sync(p, Some((a, b))) => format!("msync {} [{a}, {b})", rel(p)),
        Event::SyncDir(p) => format!("fsync dir {}", rel(p)),
        Event::Rename(a, b) => format!("rename {} -> {}", rel(a), rel(b)),
        Event::Link(a, b) => format!("link {} -> {}", rel(a), rel(b)),
        Event::Remove(p) => format!("unlink {}", rel(p)),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn recorder_for(path: &Path) -> Option<Arc<Shared>> {
    lock(&RECORDERS)
        .iter()
        .find(|s| s.roots.iter().any(|r| path.starts_with(r)))
        .cloned()
}

struct Shared {
    roots: Vec<PathBuf>,
    rec: Mutex<Recorder>,
    /// Workload steps completed (set by the test after each step returns).
    done: AtomicU64,
    /// Workload steps started (set by the test before each step begins).
    started: AtomicU64,
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir,
    File(usize),
}

#[derive(Debug)]
struct Object {
    ino: u64,
    /// Durable bytes; the length is the durable size.
    durable: Arc<Vec<u8>>,
}

struct Recorder {
    root: PathBuf,
    roots: Vec<PathBuf>,
    objects: Vec<Object>,
    live: BTreeMap<PathBuf, Node>,
    durable: BTreeMap<PathBuf, Node>,
    events: u64,
    rng: u64,
    cut_per_million: u64,
    snapshots: Vec<Snapshot>,
}

/// What `before` learned for `after`.
enum Before {
    None,
    /// A sync's bytes (whole file: from 0) and the file's size, read before the call.
    Bytes {
        at: u64,
        bytes: Vec<u8>,
        size: u64,
    },
}

impl Recorder {
    fn rel(&self, path: &Path) -> Option<PathBuf> {
        self.roots
            .iter()
            .find_map(|r| path.strip_prefix(r).ok())
            .map(Path::to_path_buf)
    }

    fn next_rand(&mut self) -> u64 {
        self.rng = splitmix(self.rng);
        self.rng
    }

    fn cut_here(&mut self) -> bool {
        self.cut_per_million > 0 && self.next_rand() % 1_000_000 < self.cut_per_million
    }

    fn new_object(&mut self, ino: u64, durable: Vec<u8>) -> usize {
        self.objects.push(Object {
            ino,
            durable: Arc::new(durable),
        });
        self.objects.len() - 1
    }

    fn before(&self, event: &Event<'_>) -> Before {
        let Event::Sync(path, range) = *event else {
            return Before::None;
        };
        match read_synced(path, range) {
            Some((at, bytes, size)) => Before::Bytes { at, bytes, size },
            None => Before::None,
        }
    }

    fn after(&mut self, event: &Event<'_>, before: Before) {
        match *event {
            Event::Create(path) => {
                let (Some(rel), Ok(meta)) = (self.rel(path), std::fs::metadata(path)) else {
                    return;
                };
                let known = match self.live.get(&rel) {
                    Some(Node::File(id)) => {
                        self.objects.get(*id).is_some_and(|o| o.ino == meta.ino())
                    }
                    _ => false,
                };
                if !known {
                    let id = self.new_object(meta.ino(), Vec::new());
                    self.live.insert(rel, Node::File(id));
                }
            }
            Event::CreateDir(path) => {
                let Some(rel) = self.rel(path) else { return };
                let mut at = PathBuf::new();
                for c in rel.components() {
                    at.push(c);
                    self.live.entry(at.clone()).or_insert(Node::Dir);
                }
            }
            Event::Sync(path, range) => {
                let Before::Bytes { at, bytes, size } = before else {
                    return;
                };
                // What the call wrote is what the pages held while it ran: a byte that changed
                // meanwhile (a writer past the synced range) may or may not be on disk, so
                // only bytes equal before and after count, the others keep their old value.
                let after = read_synced(path, range).filter(|(a, _, s)| *a == at && *s == size);
                let Some((_, now, _)) = after else { return };
                let Some(rel) = self.rel(path) else { return };
                let Some(Node::File(id)) = self.live.get(&rel).copied() else {
                    return;
                };
                let Some(obj) = self.objects.get_mut(id) else {
                    return;
                };
                let durable = Arc::make_mut(&mut obj.durable);
                durable.resize(usize::try_from(size).unwrap_or(0), 0);
                let start = usize::try_from(at).unwrap_or(usize::MAX);
                if let Some(dst) = durable.get_mut(start..) {
                    for ((d, b), n) in dst.iter_mut().zip(&bytes).zip(&now) {
                        if b == n {
                            *d = *b;
                        }
                    }
                }
            }
            Event::SyncDir(dir) => {
                let Some(rel) = self.rel(dir) else { return };
                let in_dir = |p: &Path| p.parent() == Some(rel.as_path());
                self.durable.retain(|p, _| !in_dir(p));
                for (p, n) in &self.live {
                    if in_dir(p) {
                        self.durable.insert(p.clone(), *n);
                    }
                }
            }
            Event::Rename(from, to) => {
                let (Some(from), Some(to)) = (self.rel(from), self.rel(to)) else {
                    return;
                };
                if let Some(node) = self.live.remove(&from) {
                    self.live.insert(to, node);
                }
            }
            Event::Link(from, to) => {
                let (Some(from), Some(to)) = (self.rel(from), self.rel(to)) else {
                    return;
                };
                if let Some(node) = self.live.get(&from).copied() {
                    self.live.entry(to).or_insert(node);
                }
            }
            Event::Remove(path) => {
                if let Some(rel) = self.rel(path) {
                    self.live.remove(&rel);
                }
            }
        }
    }

    fn capture(&self, shared: &Shared, label: String) -> Snapshot {
        let done = shared.done.load(Ordering::SeqCst);
        let mut problems = Vec::new();
        let mut live_bytes: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
        for (rel, node) in &self.live {
            let Node::File(id) = *node else { continue };
            let path = self.root.join(rel);
            match std::fs::read(&path) {
                Ok(b) => {
                    let ino = std::fs::metadata(&path).map(|m| m.ino()).unwrap_or(0);
                    if self.objects.get(id).is_none_or(|o| o.ino != ino) {
                        problems.push(format!(
                            "{} was replaced without a recorded call",
                            rel.display()
                        ));
                    }
                    live_bytes.insert(id, b);
                }
                Err(e) => {
                    problems.push(format!("{} is recorded but unreadable: {e}", rel.display()))
                }
            }
        }
        let mut actual = Vec::new();
        walk(&self.root, &self.root, &mut actual);
        for (rel, is_dir) in actual {
            let recorded = match self.live.get(&rel) {
                Some(Node::Dir) => is_dir,
                Some(Node::File(_)) => !is_dir,
                None => false,
            };
            if !recorded {
                problems.push(format!(
                    "{} was created without a recorded call",
                    rel.display()
                ));
            }
        }
        let objects = self
            .objects
            .iter()
            .enumerate()
            .map(|(id, o)| (Arc::clone(&o.durable), live_bytes.remove(&id)))
            .collect();
        Snapshot {
            label,
            done,
            started: shared.started.load(Ordering::SeqCst),
            durable: self.durable.clone(),
            live: self.live.clone(),
            objects,
            problems,
        }
    }
}

/// The bytes a sync of `path` writes back, read now: the whole file (`range` `None`) or the
/// whole pages overlapping `range` (msync writes pages), as (start, bytes, file size).
fn read_synced(path: &Path, range: Option<(u64, u64)>) -> Option<(u64, Vec<u8>, u64)> {
    let f = std::fs::File::open(path).ok()?;
    let size = f.metadata().ok()?.len();
    let page = PAGE as u64;
    let (at, to) = match range {
        None => (0, size),
        Some((s, e)) => (s - s % page, e.div_ceil(page) * page),
    };
    let to = to.min(size);
    let mut bytes = vec![0u8; usize::try_from(to.saturating_sub(at)).ok()?];
    f.read_exact_at(&mut bytes, at).ok()?;
    Some((at, bytes, size))
}

/// Every entry under `dir`, relative to `root`, with whether it is a directory.
fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, bool)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if let Ok(rel) = path.strip_prefix(root) {
            out.push((rel.to_path_buf(), is_dir));
        }
        if is_dir {
            walk(root, &path, out);
        }
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Records what I/O calls under one directory made durable, from `start` until dropped.
pub struct Recording {
    shared: Arc<Shared>,
}

impl fmt::Debug for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recording")
            .field("roots", &self.shared.roots)
            .finish_non_exhaustive()
    }
}

impl Recording {
    /// Starts recording under `root` (an existing directory). What is there now counts as
    /// durable. Before each recorded call, a snapshot is taken with probability
    /// `cut_per_million` / 1,000,000, drawn from `seed`.
    ///
    /// # Errors
    /// `root` cannot be read.
    pub fn start(root: &Path, seed: u64, cut_per_million: u64) -> std::io::Result<Self> {
        let canonical = root.canonicalize()?;
        let mut roots = vec![root.to_path_buf()];
        if canonical != root {
            roots.push(canonical);
        }
        let mut rec = Recorder {
            root: root.to_path_buf(),
            roots: roots.clone(),
            objects: Vec::new(),
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
            events: 0,
            rng: seed,
            cut_per_million,
            snapshots: Vec::new(),
        };
        let mut existing = Vec::new();
        walk(root, root, &mut existing);
        for (rel, is_dir) in existing {
            let node = if is_dir {
                Node::Dir
            } else {
                let path = root.join(&rel);
                let bytes = std::fs::read(&path)?;
                let ino = std::fs::metadata(&path)?.ino();
                Node::File(rec.new_object(ino, bytes))
            };
            rec.live.insert(rel.clone(), node);
            rec.durable.insert(rel, node);
        }
        let shared = Arc::new(Shared {
            roots,
            rec: Mutex::new(rec),
            done: AtomicU64::new(0),
            started: AtomicU64::new(0),
        });
        lock(&RECORDERS).push(Arc::clone(&shared));
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        Ok(Recording { shared })
    }

    /// The workload is about to start step `step` (steps count from 0).
    pub fn step_started(&self, step: u64) {
        self.shared.started.fetch_max(step + 1, Ordering::SeqCst);
    }

    /// Step `step` returned.
    pub fn step_done(&self, step: u64) {
        self.shared.done.fetch_max(step + 1, Ordering::SeqCst);
    }

    /// Takes a snapshot now (the power fails between two calls).
    pub fn capture(&self, label: &str) {
        let mut rec = lock(&self.shared.rec);
        let snap = rec.capture(&self.shared, label.to_owned());
        rec.snapshots.push(snap);
    }

    /// The snapshots taken since the last call.
    pub fn take(&self) -> Vec<Snapshot> {
        std::mem::take(&mut lock(&self.shared.rec).snapshots)
    }

    /// Recorded calls so far.
    pub fn events(&self) -> u64 {
        lock(&self.shared.rec).events
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        lock(&RECORDERS).retain(|s| !Arc::ptr_eq(s, &self.shared));
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One file object's bytes in a snapshot: durable, and live when it is still linked.
type ObjectBytes = (Arc<Vec<u8>>, Option<Vec<u8>>);

/// The state a power cut could start from: durable and live namespaces and bytes.
pub struct Snapshot {
    /// Where the cut fell.
    pub label: String,
    /// Workload steps that had returned when the snapshot began: their effects are what the
    /// store acknowledged.
    pub done: u64,
    /// Workload steps that had started when the snapshot ended: nothing of a later step can
    /// be in it.
    pub started: u64,
    durable: BTreeMap<PathBuf, Node>,
    live: BTreeMap<PathBuf, Node>,
    objects: Vec<ObjectBytes>,
    /// Files found on disk that the recorder did not see created (an I/O call that bypassed
    /// `util/fs.rs`), or recorded files that vanished.
    pub problems: Vec<String>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("label", &self.label)
            .field("done", &self.done)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

/// What [`Snapshot::build`] put into an image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageStats {
    /// Files written.
    pub files: usize,
    /// Pages whose live bytes were not durable.
    pub unsynced_pages: usize,
    /// Of those, pages the image took the live bytes of.
    pub pages_kept: usize,
    /// True when the image kept every unsynced namespace change.
    pub live_namespace: bool,
}

impl Snapshot {
    /// Writes the power-cut image chosen by `seed` into `dest` (an empty directory).
    ///
    /// # Errors
    /// Writing the image failed.
    pub fn build(&self, dest: &Path, seed: u64) -> std::io::Result<ImageStats> {
        let mut rng = splitmix(seed ^ 0x5EED);
        let mut next = move || {
            rng = splitmix(rng);
            rng
        };
        let live_namespace = next() % 4 == 0;
        // Share of unsynced pages that reached the disk: none, all, or a random share.
        let keep_per_mille = match next() % 4 {
            0 => 0,
            1 => 1000,
            _ => next() % 1001,
        };
        let names = if live_namespace {
            &self.live
        } else {
            &self.durable
        };
        let mut stats = ImageStats {
            live_namespace,
            ..ImageStats::default()
        };
        for (rel, node) in names {
            // An entry survives only under directories that survive.
            let parents_ok = rel
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .all(|a| names.get(a) == Some(&Node::Dir));
            if !parents_ok {
                continue;
            }
            let path = dest.join(rel);
            let Node::File(id) = *node else {
                std::fs::create_dir_all(&path)?;
                continue;
            };
            let Some((durable, live)) = self.objects.get(id) else {
                continue;
            };
            let mut bytes: Vec<u8> = durable.as_ref().clone();
            if let Some(live) = live {
                if live.len() != bytes.len() && next() % 2 == 0 {
                    bytes.resize(live.len(), 0);
                }
                for (p, page) in bytes.chunks_mut(PAGE).enumerate() {
                    let at = p * PAGE;
                    let mut want = vec![0u8; page.len()];
                    if let Some(src) = live.get(at..) {
                        let n = src.len().min(page.len());
                        want[..n].copy_from_slice(&src[..n]);
                    }
                    if want != page {
                        stats.unsynced_pages += 1;
                        if next() % 1000 < keep_per_mille {
                            page.copy_from_slice(&want);
                            stats.pages_kept += 1;
                        }
                    }
                }
            }
            std::fs::write(&path, &bytes)?;
            stats.files += 1;
        }
        Ok(stats)
    }
}
