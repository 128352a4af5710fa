//! The shared writer mapping `<store>/run/writer.shm` (FORMAT.md §14): the state every
//! process writing one store shares, mapped by each of them: the append lock (a robust,
//! process-shared mutex), the log end, the append in progress, the dispatch and flush
//! progress, the topics generation, and the queue-offset table. docs/design-many-writers.md
//! says how the store uses it; this module is the mapping and its protocols (the append,
//! protocol.rs; the group commit across processes, group_commit.rs; the timer engine's
//! wake-up across processes, timer_wake.rs).
//!
//! Invariants
//! - The file is a runtime file, never a source of truth: it is built from what recovery
//!   found (`create`) by the first process to open the store, into a temporary file renamed
//!   over `writer.shm` once whole, so no process maps it half-built. A later process maps it
//!   (`attach`) only if its header names this layout version, this process's ABI and this
//!   store (the device and inode of its directory); anything else is rebuilt, never trusted.
//! - Every word is big-endian and accessed atomically; the tables and the append state are
//!   written only by the holder of the append lock (protocol.rs, table.rs), `log_end` is
//!   loaded with acquire by anyone. The topics generation is written only by the holder of the
//!   topic journal's lock (topic_config/shared.rs), after the records it counts are written.
//! - The file is sparse, and nothing of it is touched before its disk blocks are reserved: on
//!   a full disk a fault into a hole of a shared mapping is a SIGBUS (on tmpfs even a read's).
//!   The header page is reserved by `create` before anything is written (a full disk there is
//!   `StoreFull` from the open), the tables a chunk at a time by the insert that first needs
//!   one, which records it in the header's bitmap (table.rs); `attach` reads the header with
//!   `pread`, which never allocates, before it maps anything.
//! - A holder that dies leaves the lock reporting it ([`AppendLock::OwnerDied`]); the next
//!   holder repairs (`protocol::repair`) before anything else, then marks the lock consistent.
//!
//! Crash behaviour: the file needs no durability (never fsynced) and no recovery of its own:
//! after a crash of every process, or a reboot, the next first opener builds it again from the
//! log. A process killed inside the critical section is repaired by the next holder.

mod group_commit;
pub mod layout;
pub mod protocol;
mod table;
mod timer_wake;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::Mutex;

use self::layout::{at, Capacity, Header, StoreIdentity};
use self::protocol::{QueueSlot, Repair, Repaired, Reserved, State, Word};
use self::table::Tables;
use crate::error::{Error, Result};
use crate::mapped_file::mmap::MmapRegion;
use crate::mapped_file::robust::{self, DeadOwner, Locked, MutexGuard};
use crate::util::fs;
use crate::util::loom_sync::atomic::Ordering;

/// The file's name under `<store>/run/`.
pub const FILE_NAME: &str = "writer.shm";

/// What recovery found: the state a new mapping starts from.
#[derive(Debug, Clone, Default)]
pub struct Initial {
    /// End of the last complete record.
    pub log_end: u64,
    /// Everything below it has its consume-queue units.
    pub dispatched: u64,
    /// Everything below it is durable.
    pub flushed: u64,
    /// The latest store timestamp in the log.
    pub last_store_timestamp: i64,
    /// Every queue with its next offset: (topic, queue id, next offset).
    pub queues: Vec<(String, u32, u64)>,
}

/// One process's mapping of `run/writer.shm`.
#[derive(Debug)]
pub struct WriterShm {
    path: PathBuf,
    /// The mapped file, kept open to reserve the tables' chunks (table.rs) until `release`.
    file: Mutex<Option<File>>,
    region: MmapRegion,
    capacity: Capacity,
}

/// The outcome of [`WriterShm::attach`].
#[derive(Debug)]
pub enum Attached {
    /// The mapping is this store's, of this layout and ABI.
    Valid(WriterShm),
    /// It must be rebuilt: the reason (missing, another store, version or ABI, damaged).
    Rebuild(String),
}

/// The identity of the store at `root` (its directory's device and inode).
pub fn store_identity(root: &Path) -> Result<StoreIdentity> {
    let meta = std::fs::metadata(root).map_err(|e| Error::io("stat", root, e))?;
    Ok(StoreIdentity {
        device: meta.dev(),
        inode: meta.ino(),
    })
}

/// `<root>/run/writer.shm`.
pub fn path_of(root: &Path) -> PathBuf {
    root.join("run").join(FILE_NAME)
}

impl WriterShm {
    /// Store close: the file is let go of (`MmapRegion::detach_file`), so that a closed store
    /// whose handles are still referenced keeps no mapping of it. Every later access reads
    /// zeros in private memory; a closed store makes none that matters.
    pub fn release(&self) {
        let _ = self.region.detach_file();
        // The descriptor goes too: a closed store holds nothing of the store's files open.
        drop(self.file.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl WriterShm {
    /// Builds the mapping from `initial` with the capacity `capacity`, replacing any file
    /// there. Only a process that knows no other process has the store open may call it (the
    /// first opener, after recovery): a process still mapping the old file would keep using it.
    pub fn create(
        root: &Path,
        capacity: Capacity,
        initial: &Initial,
        dir_mode: u32,
        file_mode: u32,
    ) -> Result<WriterShm> {
        let identity = store_identity(root)?;
        let dir = root.join("run");
        fs::create_dir_all(&dir, dir_mode)?;
        let path = dir.join(FILE_NAME);
        let tmp = dir.join(format!(".{FILE_NAME}.tmp"));
        if fs::entry_exists(&tmp) {
            fs::remove_file(&tmp)?;
        }
        let file = fs::create_new_rw(&tmp, file_mode)?;
        let built = Self::build(file, &tmp, identity, capacity, initial).and_then(|shm| {
            // A runtime file: renamed into place whole, never synced (module doc).
            fs::rename(&tmp, &path)?;
            Ok(WriterShm { path, ..shm })
        });
        if built.is_err() {
            // A full disk: the space the half-built file took is given back.
            let _ = fs::remove_file(&tmp);
        }
        built
    }

    fn build(
        file: File,
        tmp: &Path,
        identity: StoreIdentity,
        capacity: Capacity,
        initial: &Initial,
    ) -> Result<WriterShm> {
        let len = capacity.file_len();
        // Sparse: the tables' chunks take disk or memory only once reserved (table.rs); the
        // header page, written at once, is reserved first.
        file.set_len(len as u64)
            .map_err(|e| Error::io("ftruncate", tmp, e))?;
        let head = layout::HEADER_LEN
            .max(crate::mapped_file::mmap::page_size())
            .min(len);
        crate::mapped_file::alloc::preallocate(&file, tmp, head as u64)?;
        let region =
            MmapRegion::map_file(&file, len, true, false).map_err(|e| Error::io("mmap", tmp, e))?;
        let shm = WriterShm {
            path: tmp.to_path_buf(),
            file: Mutex::new(Some(file)),
            region,
            capacity,
        };
        shm.fill(Header::native(identity, capacity), initial)?;
        Ok(shm)
    }

    fn fill(&self, header: Header, initial: &Initial) -> Result<()> {
        robust::init(&self.region, at::MUTEX)
            .map_err(|e| Error::io("init mutex", &self.path, e))?;
        let t = self.tables();
        t.word(at::LOG_END)?
            .store(initial.log_end.to_be(), StdOrdering::Relaxed);
        t.word(at::DISPATCHED)?
            .store(initial.dispatched.to_be(), StdOrdering::Relaxed);
        t.word(at::FLUSHED)?
            .store(initial.flushed.to_be(), StdOrdering::Relaxed);
        t.word(at::LAST_STORE_TS)?.store(
            (initial.last_store_timestamp as u64).to_be(),
            StdOrdering::Relaxed,
        );
        for (topic, queue_id, next) in &initial.queues {
            let id = t.topic_id(topic)?;
            let slot = t.queue_slot(id, *queue_id, *next)?;
            t.set_next_offset(slot, *next)?;
        }
        // The header last: a file without it is never attached.
        if !self.region.copy_in(0, &header.encode()) {
            return Err(Error::io(
                "write header",
                &self.path,
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        }
        Ok(())
    }

    /// Maps the store's existing file if it is valid for this store and process (module doc).
    pub fn attach(root: &Path) -> Result<Attached> {
        let identity = store_identity(root)?;
        let path = path_of(root);
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Attached::Rebuild("no writer mapping".into()))
            }
            Err(e) => return Err(Error::io("open", &path, e)),
        };
        let file_len = file
            .metadata()
            .map_err(|e| Error::io("stat", &path, e))?
            .len();
        if file_len < layout::HEADER_LEN as u64 {
            return Ok(Attached::Rebuild(format!("file is {file_len} bytes")));
        }
        // Read, not mapped: a hole reads as zeros without taking a page (module doc).
        let mut head = [0u8; 64];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io("read", &path, e))?;
        let expect = Header::native(identity, Capacity::for_counts(0, 0));
        let header = match Header::check(&head, &expect, file_len) {
            Ok(h) => h,
            Err(reason) => return Ok(Attached::Rebuild(reason)),
        };
        let len = header.capacity.file_len();
        let region = MmapRegion::map_file(&file, len, true, false)
            .map_err(|e| Error::io("mmap", &path, e))?;
        Ok(Attached::Valid(WriterShm {
            path,
            file: Mutex::new(Some(file)),
            region,
            capacity: header.capacity,
        }))
    }

    // This and the accessors of the words an append reads and writes are always inlined: a
    // send goes through about a dozen of them, and called each costs more than its one load or
    // store (callgrind, docs/design-many-writers.md "Single-process cost").
    #[inline(always)]
    fn tables(&self) -> Tables<'_> {
        Tables {
            region: &self.region,
            file: &self.file,
            capacity: self.capacity,
            path: &self.path,
        }
    }

    /// The table sizes.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// End of the last published record (acquire: every byte below it is written).
    #[inline(always)]
    pub fn log_end(&self) -> u64 {
        self.view().load(Word::LogEnd, Ordering::Acquire)
    }

    /// Everything below it has its consume-queue units.
    pub fn dispatched(&self) -> u64 {
        self.view().load(Word::Dispatched, Ordering::Acquire)
    }

    /// The end of the append in progress, 0 when none.
    pub fn intent_end(&self) -> u64 {
        self.view().load(Word::IntentEnd, Ordering::Acquire)
    }

    /// The topics generation: how many topic changes every process has made since the mapping
    /// was built. Inlined: every lookup of a shared writer's topic table loads it.
    #[inline(always)]
    pub fn topics_generation(&self) -> u64 {
        self.tables()
            .atomic(at::TOPICS_GENERATION)
            .map_or(0, |a| u64::from_be(a.load(StdOrdering::Acquire)))
    }

    /// Counts one more topic change (its journal record about to be appended) and returns the
    /// new generation. Callers serialise it with the topic journal's lock
    /// (`config/topics.lock`, FORMAT.md §14), not the append lock: a load and a store, never
    /// two at once.
    pub fn bump_topics_generation(&self) -> u64 {
        let next = self.topics_generation().wrapping_add(1);
        if let Ok(a) = self.tables().word(at::TOPICS_GENERATION) {
            a.store(next.to_be(), StdOrdering::Release);
        }
        next
    }

    /// Takes the append lock, waiting for it.
    pub fn lock(&self) -> Result<AppendLock<'_>> {
        let locked = robust::lock(&self.region, at::MUTEX)
            .map_err(|e| Error::io("lock the append lock", &self.path, e))?;
        Ok(match locked {
            Locked::Clean(guard) => AppendLock::Held(Writer { shm: self, guard }),
            Locked::OwnerDied(dead) => AppendLock::OwnerDied(Dead { shm: self, dead }),
        })
    }

    /// `lock` without waiting: `Ok(None)` while another thread or process holds it.
    #[inline]
    pub fn try_lock(&self) -> Result<Option<AppendLock<'_>>> {
        let locked = robust::try_lock(&self.region, at::MUTEX)
            .map_err(|e| Error::io("lock the append lock", &self.path, e))?;
        Ok(locked.map(|l| match l {
            Locked::Clean(guard) => AppendLock::Held(Writer { shm: self, guard }),
            Locked::OwnerDied(dead) => AppendLock::OwnerDied(Dead { shm: self, dead }),
        }))
    }

    #[inline(always)]
    fn view(&self) -> View<'_> {
        View(self.tables())
    }
}

/// The append lock, taken.
#[derive(Debug)]
pub enum AppendLock<'a> {
    /// Held; the previous holder unlocked it.
    Held(Writer<'a>),
    /// Held; the previous holder died holding it: [`Dead::repair`] before anything else.
    OwnerDied(Dead<'a>),
}

/// The append lock after its holder died, not yet repaired. Dropped unrepaired, the lock
/// becomes unusable for every process (every `lock` fails) until the mapping is rebuilt.
#[derive(Debug)]
pub struct Dead<'a> {
    shm: &'a WriterShm,
    dead: DeadOwner<'a>,
}

impl<'a> Dead<'a> {
    /// Repairs what the dead holder left (`protocol::repair`), then marks the lock consistent.
    pub fn repair(self, log: &mut impl Repair) -> Result<(Writer<'a>, Repaired)> {
        let done = protocol::repair(&self.shm.view(), log)?;
        let guard = self
            .dead
            .consistent()
            .map_err(|e| Error::io("mark the append lock consistent", &self.shm.path, e))?;
        Ok((
            Writer {
                shm: self.shm,
                guard,
            },
            done,
        ))
    }
}

/// The holder of the append lock: what only it may do. Unlocks when dropped.
#[derive(Debug)]
pub struct Writer<'a> {
    shm: &'a WriterShm,
    guard: MutexGuard<'a>,
}

impl Writer<'_> {
    /// The slot of (topic, queue id), added at offset 0 when new. A slot is stable for the
    /// mapping's life: callers may keep it.
    pub fn queue_slot(&self, topic: &str, queue_id: u32) -> Result<QueueSlot> {
        let t = self.shm.tables();
        t.queue_slot(t.topic_id(topic)?, queue_id, 0)
    }

    /// The slot of (topic, queue id) if the table has it.
    pub fn find_queue(&self, topic: &str, queue_id: u32) -> Result<Option<QueueSlot>> {
        let t = self.shm.tables();
        match t.topic(topic, false)? {
            None => Ok(None),
            Some(id) => t.queue(id, queue_id, None),
        }
    }

    /// The next offset of `slot`'s queue.
    #[inline(always)]
    pub fn next_offset(&self, slot: QueueSlot) -> Result<u64> {
        self.shm.tables().next_offset(slot)
    }

    /// End of the last published record.
    #[inline(always)]
    pub fn log_end(&self) -> u64 {
        self.shm.log_end()
    }

    /// Step 1 of an append (protocol.rs): `len` bytes at the log end, `count` offsets of
    /// `slot`'s queue.
    #[inline(always)]
    pub fn reserve(&self, slot: Option<QueueSlot>, len: u64, count: u64) -> Reserved {
        protocol::reserve(&self.shm.view(), slot, len, count)
    }

    /// Step 3 of an append: once every byte of `r` is written.
    #[inline(always)]
    pub fn publish(&self, r: &Reserved) {
        protocol::publish(&self.shm.view(), r)
    }

    /// Step 3a alone (`publish` makes all three): the queue's new next offset.
    pub fn commit_offset(&self, r: &Reserved) {
        protocol::commit_offset(&self.shm.view(), r)
    }

    /// Step 3b alone: publishes `r`'s bytes.
    pub fn commit_end(&self, r: &Reserved) {
        protocol::commit_end(&self.shm.view(), r)
    }

    /// Gives up the append reserved last, which did not publish (its write failed): its
    /// queue gets its offset back and its bytes are zeroed (`protocol::abandon`).
    pub fn abandon(&self, log: &mut impl Repair) -> Result<()> {
        protocol::abandon(&self.shm.view(), log)
    }

    /// The latest store timestamp any process wrote into the log (ms).
    #[inline(always)]
    pub fn last_store_timestamp(&self) -> i64 {
        self.shm
            .tables()
            .atomic(at::LAST_STORE_TS)
            .map_or(0, |a| u64::from_be(a.load(StdOrdering::Relaxed)) as i64)
    }

    /// Records the store timestamp of the record just appended.
    #[inline(always)]
    pub fn set_last_store_timestamp(&self, ts: i64) {
        if let Some(a) = self.shm.tables().atomic(at::LAST_STORE_TS) {
            a.store((ts as u64).to_be(), StdOrdering::Relaxed);
        }
    }

    /// Unlocks (as dropping does).
    pub fn unlock(self) {
        drop(self.guard);
    }
}

/// The mapping seen through the protocol's [`State`].
struct View<'a>(Tables<'a>);

#[inline(always)]
fn word_at(w: Word) -> usize {
    match w {
        Word::LogEnd => at::LOG_END,
        Word::IntentEnd => at::INTENT_END,
        Word::IntentSlot => at::INTENT_SLOT,
        Word::IntentPrev => at::INTENT_PREV,
        Word::Dispatched => at::DISPATCHED,
    }
}

// The words are in the header page and the slots come from this mapping's own table, so every
// access is in bounds of a mapping that `create` built or `attach` validated: the fallbacks
// below (0, no store) are never taken.
impl State for View<'_> {
    #[inline(always)]
    fn load(&self, word: Word, order: Ordering) -> u64 {
        self.0
            .atomic(word_at(word))
            .map_or(0, |a| u64::from_be(a.load(order)))
    }

    #[inline(always)]
    fn store(&self, word: Word, value: u64, order: Ordering) {
        if let Some(a) = self.0.atomic(word_at(word)) {
            a.store(value.to_be(), order);
        }
    }

    #[inline(always)]
    fn next_offset(&self, slot: QueueSlot) -> u64 {
        self.0
            .next_offset_word(slot)
            .map_or(0, |a| u64::from_be(a.load(StdOrdering::Acquire)))
    }

    #[inline(always)]
    fn set_next_offset(&self, slot: QueueSlot, next: u64) {
        if let Some(a) = self.0.next_offset_word(slot) {
            a.store(next.to_be(), StdOrdering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn held(lock: AppendLock<'_>) -> Writer<'_> {
        match lock {
            AppendLock::Held(w) => w,
            AppendLock::OwnerDied(_) => panic!("no holder died"),
        }
    }

    fn build(root: &Path, queues: Vec<(String, u32, u64)>) -> WriterShm {
        let initial = Initial {
            log_end: 500,
            queues,
            ..Initial::default()
        };
        WriterShm::create(root, Capacity::for_counts(0, 0), &initial, 0o700, 0o600).unwrap()
    }

    #[test]
    fn a_mapping_is_attached_only_by_its_own_store() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert!(matches!(
            WriterShm::attach(a.path()).unwrap(),
            Attached::Rebuild(why) if why.contains("no writer mapping")
        ));
        drop(build(a.path(), vec![("T".into(), 1, 7)]));
        let shm = match WriterShm::attach(a.path()).unwrap() {
            Attached::Valid(s) => s,
            Attached::Rebuild(why) => panic!("{why}"),
        };
        assert_eq!(shm.log_end(), 500);
        let w = held(shm.lock().unwrap());
        let slot = w.find_queue("T", 1).unwrap().unwrap();
        assert_eq!(w.next_offset(slot).unwrap(), 7);
        assert_eq!(w.find_queue("T", 2).unwrap(), None);
        assert_eq!(w.find_queue("U", 1).unwrap(), None);
        drop(w);

        // A copy in another store's directory is that store's no more.
        std::fs::create_dir_all(b.path().join("run")).unwrap();
        std::fs::copy(path_of(a.path()), path_of(b.path())).unwrap();
        assert!(matches!(
            WriterShm::attach(b.path()).unwrap(),
            Attached::Rebuild(why) if why.contains("another store")
        ));
        // Another layout version, or a damaged header, is rebuilt too.
        let mut bytes = std::fs::read(path_of(a.path())).unwrap();
        bytes[7] = 9;
        std::fs::write(path_of(b.path()), &bytes).unwrap();
        assert!(matches!(
            WriterShm::attach(b.path()).unwrap(),
            Attached::Rebuild(why) if why.contains("version 9")
        ));
        std::fs::write(path_of(b.path()), b"short").unwrap();
        assert!(matches!(
            WriterShm::attach(b.path()).unwrap(),
            Attached::Rebuild(_)
        ));
        // Rebuilt: a fresh mapping from what recovery found.
        let rebuilt = build(b.path(), Vec::new());
        assert_eq!(rebuilt.log_end(), 500);
        assert!(!fs::entry_exists(&b.path().join("run/.writer.shm.tmp")));
    }

    /// Bytes of disk (or tmpfs memory) the file holds.
    fn disk_bytes(root: &Path) -> u64 {
        std::fs::metadata(path_of(root)).unwrap().blocks() * 512
    }

    #[test]
    fn a_table_chunk_is_reserved_whole_before_its_first_entry() {
        let dir = tempfile::tempdir().unwrap();
        let shm = build(dir.path(), Vec::new());
        let page = layout::HEADER_LEN.max(crate::mapped_file::mmap::page_size()) as u64;
        let empty = disk_bytes(dir.path());
        assert!(
            empty >= layout::HEADER_LEN as u64,
            "the header page is reserved: {empty}"
        );
        assert!(empty <= page, "no table chunk yet: {empty}");
        let w = held(shm.lock().unwrap());
        let slot = w.queue_slot("T", 0).unwrap();
        // One chunk of the topic table and one of the queue table, whole, though the entry
        // touched one page of each.
        let chunks = 2 * layout::CHUNK as u64;
        let one = disk_bytes(dir.path());
        assert!(one >= chunks + layout::HEADER_LEN as u64, "{one}");
        assert!(one <= chunks + 3 * page, "{one}");
        let t = shm.tables();
        let topic = t.topic("T", false).unwrap().unwrap();
        assert!(t.is_reserved(shm.capacity().topics_at() + topic as usize * layout::TOPIC_SLOT));
        assert!(t.is_reserved(shm.capacity().queues_at() + slot.0 as usize * layout::QUEUE_SLOT));
        // Another queue whose slot lies in the same chunk reserves nothing more.
        let home = |q: u32| {
            let slots = u64::from(shm.capacity().queue_slots);
            let index = layout::queue_hash(layout::queue_key(topic, q)) & (slots - 1);
            t.queue_pos(QueueSlot(index as u32))
        };
        let chunk = layout::chunk_of(t.queue_pos(slot));
        let near = (1..u32::MAX)
            .find(|&q| layout::chunk_of(home(q)) == chunk)
            .unwrap();
        w.queue_slot("T", near).unwrap();
        assert!(disk_bytes(dir.path()) <= one + 2 * page);
        // Another process's mapping sees the entries through the bitmap.
        drop(w);
        let Attached::Valid(other) = WriterShm::attach(dir.path()).unwrap() else {
            panic!("not attached");
        };
        assert_eq!(
            held(other.lock().unwrap()).find_queue("T", 0).unwrap(),
            Some(slot)
        );
    }

    #[test]
    fn a_probe_into_an_unreserved_chunk_sees_an_empty_slot_without_loading_it() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let shm = build(dir.path(), Vec::new());
        let w = held(shm.lock().unwrap());
        w.queue_slot("T", 0).unwrap();
        let t = shm.tables();
        let topic = t.topic("T", false).unwrap().unwrap();
        // A queue whose home slot lies in a chunk no insert reserved.
        let home = |q: u32| {
            let slots = u64::from(shm.capacity().queue_slots);
            let index = layout::queue_hash(layout::queue_key(topic, q)) & (slots - 1);
            t.queue_pos(QueueSlot(index as u32))
        };
        let q = (1..u32::MAX).find(|&q| !t.is_reserved(home(q))).unwrap();
        // Its key written there behind the bitmap's back (as a hole would read on a file
        // system that faults one in): a probe that loaded the slot would find it.
        let key = layout::queue_key(topic, q).to_be_bytes();
        shm.file
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .write_all_at(&key, home(q) as u64)
            .unwrap();
        assert_eq!(w.find_queue("T", q).unwrap(), None);
        assert!(!t.is_reserved(home(q)), "a lookup reserves nothing");
        // The same for the topic table: a name planted in an unreserved chunk is not read.
        let name = (0..)
            .map(|i| format!("U{i}"))
            .find(|n| {
                let slots = u64::from(shm.capacity().topic_slots);
                let id = layout::topic_hash(n.as_bytes()) & (slots - 1);
                !t.is_reserved(shm.capacity().topics_at() + id as usize * layout::TOPIC_SLOT)
            })
            .unwrap();
        let slots = u64::from(shm.capacity().topic_slots);
        let id = layout::topic_hash(name.as_bytes()) & (slots - 1);
        let mut planted = vec![name.len() as u8];
        planted.extend_from_slice(name.as_bytes());
        let at = shm.capacity().topics_at() + id as usize * layout::TOPIC_SLOT;
        shm.file
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .write_all_at(&planted, at as u64)
            .unwrap();
        assert_eq!(t.topic(&name, false).unwrap(), None);
    }

    #[test]
    fn a_full_table_is_a_typed_error_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let shm = build(dir.path(), Vec::new());
        let w = held(shm.lock().unwrap());
        let limit = Capacity::limit(shm.capacity().topic_slots);
        for i in 0..limit {
            w.queue_slot(&format!("T{i}"), 0).unwrap();
        }
        let err = w.queue_slot("OneTooMany", 0).unwrap_err();
        assert!(
            matches!(err, Error::SharedTableFull { table: "topic", limit: l } if l == limit),
            "{err}"
        );
        assert_eq!(err.kind(), "SHARED_TABLE_FULL");
        assert_eq!(w.find_queue("OneTooMany", 0).unwrap(), None);
        // Known topics still resolve, to the same slots.
        let again = w.queue_slot("T0", 0).unwrap();
        assert_eq!(w.find_queue("T0", 0).unwrap(), Some(again));
        // A topic name the table cannot hold is refused before anything is written.
        assert!(matches!(
            w.queue_slot(&"x".repeat(256), 0),
            Err(Error::InvalidTopic { .. })
        ));
    }

    #[test]
    fn appends_advance_the_queue_and_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let shm = build(dir.path(), vec![("T".into(), 0, 3)]);
        let w = held(shm.lock().unwrap());
        let slot = w.queue_slot("T", 0).unwrap();
        let r = w.reserve(Some(slot), 100, 4);
        assert_eq!((r.start, r.end, r.queue_offset), (500, 600, 3));
        assert_eq!(shm.intent_end(), 600);
        assert_eq!(shm.log_end(), 500, "nothing published before `publish`");
        w.publish(&r);
        assert_eq!((shm.log_end(), shm.intent_end()), (600, 0));
        assert_eq!(w.next_offset(slot).unwrap(), 7);
        // A record outside any queue (a prepared transaction) takes no offset.
        let r = w.reserve(None, 10, 1);
        w.publish(&r);
        assert_eq!((shm.log_end(), w.next_offset(slot).unwrap()), (610, 7));
    }
}
