//! One IndexFile in RocketMQ's layout (FORMAT.md §21): a 40-byte header, `slots` 4-byte hash
//! slots, then `entries` 20-byte entries, all big-endian. Slot `h % slots` holds the number of
//! the newest entry whose key hashes to it (0: none); each entry holds the key hash, the
//! record's commit-log offset, its store time in seconds after the header's begin timestamp,
//! and the number of the previous entry of the same slot (0: end of chain). Entry numbers
//! start at 1.
//!
//! Invariants: one writer per file (the index service's dispatch, under its lock); an entry is
//! written before the slot points at it, and the header after both, so a reader that sees a
//! slot or count also sees the entry in the page cache. Entry `n`'s `prev` is below `n`: the
//! chain walk only goes down, so damage can shorten a walk but never loop it.
//!
//! Crash behaviour: entries below the checkpointed progress are durable (the flush syncs the
//! file before the checkpoint records it); past it, pages may be lost or torn after a power
//! cut, so recovery resets the tail (`reset_tail`): it keeps the leading entries that point
//! below the progress and rebuilds the slots from them. A reader never trusts the file: every
//! number it reads is bounds-checked, and every hit is re-checked on the record.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::util::fs;

/// Header size in bytes.
pub const HEADER_SIZE: u64 = 40;
/// Slot size in bytes.
pub const SLOT_SIZE: u64 = 4;
/// Entry size in bytes.
pub const ENTRY_SIZE: u64 = 20;
/// RocketMQ's default `maxHashSlotNum`, for reading a file RocketMQ wrote.
pub const ROCKETMQ_SLOTS: u32 = 5_000_000;
/// RocketMQ's default `maxIndexNum`.
pub const ROCKETMQ_ENTRIES: u32 = 20_000_000;
/// Entries per slot in files mqlite writes (RocketMQ's default ratio): with it a file's size
/// names its slot count, so a reader needs no configuration to read it.
pub const ENTRIES_PER_SLOT: u32 = 4;

/// The header (RocketMQ's `IndexHeader`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Header {
    /// Store time (ms) of the first entry (0: none yet).
    pub begin_timestamp: i64,
    /// Store time (ms) of the latest entry.
    pub end_timestamp: i64,
    /// Commit-log offset of the first entry's record.
    pub begin_phy_offset: i64,
    /// Commit-log offset of the latest entry's record.
    pub end_phy_offset: i64,
    /// Slots in use (informational: RocketMQ has miscounted it).
    pub hash_slot_count: i32,
    /// The next entry number (starts at 1).
    pub index_count: i32,
}

impl Header {
    /// Decodes 40 bytes.
    pub fn decode(b: &[u8; 40]) -> Header {
        let i64_at = |o: usize| i64::from_be_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let i32_at = |o: usize| i32::from_be_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Header {
            begin_timestamp: i64_at(0),
            end_timestamp: i64_at(8),
            begin_phy_offset: i64_at(16),
            end_phy_offset: i64_at(24),
            hash_slot_count: i32_at(32),
            index_count: i32_at(36),
        }
    }

    /// Encodes to 40 bytes.
    pub fn encode(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        b[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        b[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        b[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        b
    }
}

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// `hash::key_hash` of the index key.
    pub key_hash: i32,
    /// Commit-log offset of the record.
    pub phy_offset: i64,
    /// Seconds between the header's begin timestamp and the record's store time.
    pub time_diff: i32,
    /// The previous entry of the same slot (0: none).
    pub prev: i32,
}

impl Entry {
    fn decode(b: &[u8; 20]) -> Entry {
        let i32_at = |o: usize| i32::from_be_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        Entry {
            key_hash: i32_at(0),
            phy_offset: i64::from_be_bytes(b[4..12].try_into().unwrap_or([0; 8])),
            time_diff: i32_at(12),
            prev: i32_at(16),
        }
    }

    fn encode(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[0..4].copy_from_slice(&self.key_hash.to_be_bytes());
        b[4..12].copy_from_slice(&self.phy_offset.to_be_bytes());
        b[12..16].copy_from_slice(&self.time_diff.to_be_bytes());
        b[16..20].copy_from_slice(&self.prev.to_be_bytes());
        b
    }
}

/// The entry numbered `h.index_count` for `key` (hash, record offset, store time), whose slot
/// holds `old`; moves the header on as adding it does (begin on the first entry, counts, end).
/// `put` and `put_all` both add entries through it.
fn next_entry(h: &mut Header, old: i32, (hash, phy_offset, store_ts): (i32, u64, i64)) -> Entry {
    let n = h.index_count;
    let phy = i64::try_from(phy_offset).unwrap_or(i64::MAX);
    // RocketMQ reuses the slot's value only when it names an existing entry.
    let prev = if old > 0 && old < n { old } else { 0 };
    if h.begin_timestamp <= 0 {
        h.begin_timestamp = store_ts;
        h.begin_phy_offset = phy;
    }
    let secs = store_ts.saturating_sub(h.begin_timestamp) / 1000;
    let time_diff = i32::try_from(secs.clamp(0, i64::from(i32::MAX))).unwrap_or(i32::MAX);
    if prev == 0 {
        h.hash_slot_count = h.hash_slot_count.saturating_add(1);
    }
    h.index_count = n + 1;
    h.end_phy_offset = phy;
    h.end_timestamp = store_ts;
    Entry {
        key_hash: hash,
        phy_offset: phy,
        time_diff,
        prev,
    }
}

/// A file's slot and entry counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Hash slots.
    pub slots: u32,
    /// Entries (entry numbers run from 1 to `entries - 1`, as in RocketMQ).
    pub entries: u32,
}

impl Geometry {
    /// mqlite's geometry for `slots` slots.
    pub fn with_slots(slots: u32) -> Geometry {
        Geometry {
            slots,
            entries: slots.saturating_mul(ENTRIES_PER_SLOT),
        }
    }

    /// File size in bytes.
    pub fn file_size(&self) -> u64 {
        HEADER_SIZE + u64::from(self.slots) * SLOT_SIZE + u64::from(self.entries) * ENTRY_SIZE
    }

    /// The geometry a file of `size` bytes has: mqlite's ratio, or RocketMQ's defaults.
    pub fn of_size(size: u64) -> Option<Geometry> {
        let rocketmq = Geometry {
            slots: ROCKETMQ_SLOTS,
            entries: ROCKETMQ_ENTRIES,
        };
        if size == rocketmq.file_size() {
            return Some(rocketmq);
        }
        let per_slot = SLOT_SIZE + u64::from(ENTRIES_PER_SLOT) * ENTRY_SIZE;
        let body = size.checked_sub(HEADER_SIZE)?;
        if body == 0 || body % per_slot != 0 {
            return None;
        }
        u32::try_from(body / per_slot)
            .ok()
            .map(Geometry::with_slots)
    }

    fn slot_pos(&self, hash: i32) -> u64 {
        let slot = hash.unsigned_abs() % self.slots.max(1);
        HEADER_SIZE + u64::from(slot) * SLOT_SIZE
    }

    fn entry_pos(&self, n: i32) -> u64 {
        HEADER_SIZE + u64::from(self.slots) * SLOT_SIZE + u64::from(n.unsigned_abs()) * ENTRY_SIZE
    }
}

/// Where a file's bytes are.
#[derive(Debug)]
enum Bytes {
    File(File),
    /// An in-memory store's index.
    Memory(RwLock<Vec<u8>>),
    /// A file on disk held without a descriptor (a full file, or one a reader found): each
    /// read opens it; `for_reading` opens it once for a whole walk. The store's descriptors
    /// then stay few whatever the number of index files.
    Closed,
}

/// One open index file.
#[derive(Debug)]
pub struct IndexFile {
    name: String,
    path: PathBuf,
    bytes: Bytes,
    geometry: Geometry,
    /// Written since the last `sync`.
    dirty: AtomicBool,
}

impl IndexFile {
    /// Creates file `name` in `dir` (or in memory when `dir` is `None`), sparse and zeroed.
    ///
    /// # Errors
    /// I/O failures.
    pub fn create(dir: Option<&Path>, name: &str, geometry: Geometry, mode: u32) -> Result<Self> {
        let size = geometry.file_size();
        let (path, bytes) = match dir {
            Some(d) => {
                let path = d.join(name);
                let f = fs::create_new_rw(&path, mode)?;
                f.set_len(size)
                    .map_err(|e| Error::io("size index file", &path, e))?;
                (path, Bytes::File(f))
            }
            None => {
                let len = usize::try_from(size).map_err(|_| Error::InvalidConfig {
                    field: "index_hash_slots",
                    reason: format!("an index file of {size} bytes does not fit in memory"),
                })?;
                (
                    PathBuf::from(name),
                    Bytes::Memory(RwLock::new(vec![0; len])),
                )
            }
        };
        let f = IndexFile {
            name: name.to_owned(),
            path,
            bytes,
            geometry,
            dirty: AtomicBool::new(true),
        };
        f.write_header(&Header {
            index_count: 1,
            ..Header::default()
        })?;
        Ok(f)
    }

    /// A handle on an existing file that holds no descriptor (`Closed`); `None` for a file of
    /// no known geometry.
    ///
    /// # Errors
    /// I/O failures.
    pub fn closed(path: &Path) -> Result<Option<Self>> {
        let size = std::fs::symlink_metadata(path)
            .map_err(|e| Error::io("stat index file", path, e))?
            .len();
        let Some(geometry) = Geometry::of_size(size) else {
            return Ok(None);
        };
        Ok(Some(IndexFile {
            name: file_name_of(path),
            path: path.to_path_buf(),
            bytes: Bytes::Closed,
            geometry,
            dirty: AtomicBool::new(false),
        }))
    }

    /// The same file without a descriptor (after a final `sync`; in-memory files stay as
    /// they are).
    pub fn to_closed(&self) -> Option<Self> {
        match self.bytes {
            Bytes::File(_) => Some(IndexFile {
                name: self.name.clone(),
                path: self.path.clone(),
                bytes: Bytes::Closed,
                geometry: self.geometry,
                dirty: AtomicBool::new(false),
            }),
            _ => None,
        }
    }

    /// This file, opened read-only if it is held `Closed` (`None`: deleted meanwhile), for a
    /// walk that reads it many times.
    ///
    /// # Errors
    /// I/O failures other than the file being gone.
    pub fn for_reading(self: &Arc<Self>) -> Result<Option<Arc<Self>>> {
        if !matches!(self.bytes, Bytes::Closed) {
            return Ok(Some(Arc::clone(self)));
        }
        match Self::open(&self.path, false) {
            Ok(f) => Ok(f.map(Arc::new)),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens an existing file, its geometry named by its size; `None` for a file of no known
    /// geometry (not an index file).
    ///
    /// # Errors
    /// I/O failures.
    pub fn open(path: &Path, writable: bool) -> Result<Option<Self>> {
        let f = if writable {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
        } else {
            File::open(path)
        }
        .map_err(|e| Error::io("open index file", path, e))?;
        let size = f
            .metadata()
            .map_err(|e| Error::io("stat index file", path, e))?
            .len();
        let Some(geometry) = Geometry::of_size(size) else {
            return Ok(None);
        };
        Ok(Some(IndexFile {
            name: file_name_of(path),
            path: path.to_path_buf(),
            bytes: Bytes::File(f),
            geometry,
            dirty: AtomicBool::new(false),
        }))
    }

    /// Whether the file is held without a descriptor.
    pub fn is_closed(&self) -> bool {
        matches!(self.bytes, Bytes::Closed)
    }

    /// The file name (its creation time, `yyyyMMddHHmmssSSS`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path on disk.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Slot and entry counts.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        match &self.bytes {
            Bytes::Closed => File::open(&self.path)
                .and_then(|f| f.read_exact_at(buf, pos))
                .map_err(|e| Error::io("read index file", &self.path, e)),
            Bytes::File(f) => f
                .read_exact_at(buf, pos)
                .map_err(|e| Error::io("read index file", &self.path, e)),
            Bytes::Memory(m) => {
                let m = m.read().unwrap_or_else(|p| p.into_inner());
                let from = usize::try_from(pos).unwrap_or(usize::MAX);
                match m.get(from..from.saturating_add(buf.len())) {
                    Some(src) => {
                        buf.copy_from_slice(src);
                        Ok(())
                    }
                    None => Err(Error::io(
                        "read index file",
                        &self.path,
                        std::io::ErrorKind::UnexpectedEof.into(),
                    )),
                }
            }
        }
    }

    fn write_at(&self, buf: &[u8], pos: u64) -> Result<()> {
        self.dirty.store(true, Ordering::Relaxed);
        match &self.bytes {
            Bytes::Closed => Err(Error::io(
                "write index file",
                &self.path,
                std::io::Error::other("written through a handle without a descriptor"),
            )),
            Bytes::File(f) => f
                .write_all_at(buf, pos)
                .map_err(|e| Error::io("write index file", &self.path, e)),
            Bytes::Memory(m) => {
                let mut m = m.write().unwrap_or_else(|p| p.into_inner());
                let from = usize::try_from(pos).unwrap_or(usize::MAX);
                match m.get_mut(from..from.saturating_add(buf.len())) {
                    Some(dst) => {
                        dst.copy_from_slice(buf);
                        Ok(())
                    }
                    None => Err(Error::io(
                        "write index file",
                        &self.path,
                        std::io::ErrorKind::UnexpectedEof.into(),
                    )),
                }
            }
        }
    }

    /// Reads the header.
    ///
    /// # Errors
    /// I/O failures.
    pub fn header(&self) -> Result<Header> {
        let mut b = [0u8; 40];
        self.read_at(&mut b, 0)?;
        Ok(Header::decode(&b))
    }

    fn write_header(&self, h: &Header) -> Result<()> {
        self.write_at(&h.encode(), 0)
    }

    /// The entry number slot `hash` holds (0: empty, or a value out of range).
    ///
    /// # Errors
    /// I/O failures.
    pub fn slot(&self, hash: i32) -> Result<i32> {
        let mut b = [0u8; 4];
        self.read_at(&mut b, self.geometry.slot_pos(hash))?;
        let n = i32::from_be_bytes(b);
        Ok(if self.valid_number(n) { n } else { 0 })
    }

    fn valid_number(&self, n: i32) -> bool {
        n > 0 && n.unsigned_abs() < self.geometry.entries
    }

    /// Entry `n` (`None` when `n` is out of range).
    ///
    /// # Errors
    /// I/O failures.
    pub fn entry(&self, n: i32) -> Result<Option<Entry>> {
        if !self.valid_number(n) {
            return Ok(None);
        }
        let mut b = [0u8; 20];
        self.read_at(&mut b, self.geometry.entry_pos(n))?;
        Ok(Some(Entry::decode(&b)))
    }

    /// Whether `h` has no room for another entry.
    pub fn is_full(&self, h: &Header) -> bool {
        h.index_count < 1 || h.index_count.unsigned_abs() >= self.geometry.entries
    }

    /// Adds an entry for `hash` pointing at the record at `phy_offset` stored at `store_ts`,
    /// updating `h` (the writer's copy of the header). Returns false, writing nothing, when
    /// the file is full.
    ///
    /// # Errors
    /// I/O failures (the file may then hold the entry without the slot pointing at it).
    pub fn put(&self, h: &mut Header, hash: i32, phy_offset: u64, store_ts: i64) -> Result<bool> {
        if self.is_full(h) {
            return Ok(false);
        }
        let n = h.index_count;
        let slot_pos = self.geometry.slot_pos(hash);
        let mut b = [0u8; 4];
        self.read_at(&mut b, slot_pos)?;
        let entry = next_entry(h, i32::from_be_bytes(b), (hash, phy_offset, store_ts));
        self.write_at(&entry.encode(), self.geometry.entry_pos(n))?;
        self.write_at(&n.to_be_bytes(), slot_pos)?;
        self.write_header(h)?;
        Ok(true)
    }

    /// The slot table as the file holds it (one read), for a writer's copy (`put_all`).
    ///
    /// # Errors
    /// I/O failures.
    pub fn read_slots(&self) -> Result<Vec<i32>> {
        let len = usize::try_from(u64::from(self.geometry.slots) * SLOT_SIZE).unwrap_or(0);
        let mut b = vec![0u8; len];
        self.read_at(&mut b, HEADER_SIZE)?;
        Ok(b.chunks_exact(4)
            .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Adds entries for `keys` (key hash, record offset, store time), in order, as `put`
    /// would one at a time, but in few writes: the new entries (consecutive numbers) in one,
    /// then each slot that changed once, then the header. `slots` is the writer's copy of the
    /// slot table (`read_slots`, or zeros for a new file), kept equal to the file's. Returns
    /// how many keys fit; the rest need a new file.
    ///
    /// # Errors
    /// I/O failures (the file may then hold entries no slot points at, and `slots` is ahead
    /// of the file: the caller reloads it).
    pub fn put_all(
        &self,
        h: &mut Header,
        slots: &mut [i32],
        keys: &[(i32, u64, i64)],
    ) -> Result<usize> {
        if self.is_full(h) || slots.len() != self.geometry.slots as usize {
            return Ok(0);
        }
        let room = (self.geometry.entries - h.index_count.unsigned_abs()) as usize;
        let take = keys.len().min(room);
        if take == 0 {
            return Ok(0);
        }
        let first = h.index_count;
        let mut entries = Vec::with_capacity(take * ENTRY_SIZE as usize);
        let mut changed: Vec<(usize, i32)> = Vec::with_capacity(take);
        for &key in &keys[..take] {
            let n = h.index_count;
            let slot = (key.0.unsigned_abs() % self.geometry.slots.max(1)) as usize;
            entries.extend_from_slice(&next_entry(h, slots[slot], key).encode());
            slots[slot] = n;
            changed.push((slot, n));
        }
        // Entries before the slots that point at them, the header after both (module doc).
        self.write_at(&entries, self.geometry.entry_pos(first))?;
        changed.sort_unstable_by_key(|&(slot, _)| slot);
        changed.dedup_by_key(|&mut (slot, _)| slot);
        if let (Some(&(lo, _)), Some(&(hi, _))) = (changed.first(), changed.last()) {
            // One write of the span from the copy (its other slots unchanged) costs less than
            // a write per slot once the slots are dense enough: a write call costs about as
            // much as copying a page.
            if changed.len() * 1024 > hi - lo {
                let span: Vec<u8> = slots[lo..=hi]
                    .iter()
                    .flat_map(|n| n.to_be_bytes())
                    .collect();
                self.write_at(&span, HEADER_SIZE + lo as u64 * SLOT_SIZE)?;
            } else {
                for (slot, _) in changed {
                    let pos = HEADER_SIZE + slot as u64 * SLOT_SIZE;
                    self.write_at(&slots[slot].to_be_bytes(), pos)?;
                }
            }
        }
        self.write_header(h)?;
        Ok(take)
    }

    /// Keeps the leading entries whose records lie below `keep_below` (a commit-log offset
    /// every entry below which is durable), drops the rest and rebuilds the slots and header
    /// from the kept ones. Returns the new header.
    ///
    /// # Errors
    /// I/O failures.
    pub fn reset_tail(&self, keep_below: u64) -> Result<Header> {
        let old = self.header()?;
        let limit = i64::try_from(keep_below).unwrap_or(i64::MAX);
        let top = old.index_count.clamp(1, self.geometry.entries as i32);
        let mut h = Header {
            index_count: 1,
            ..Header::default()
        };
        let slots_len = usize::try_from(u64::from(self.geometry.slots) * SLOT_SIZE).unwrap_or(0);
        let mut slots = vec![0u8; slots_len];
        let mut last_phy = i64::MIN;
        for n in 1..top {
            let Some(e) = self.entry(n)? else { break };
            // Entries are appended in commit-log order: the first out of order, zeroed or past
            // the limit ends what is durable.
            if e.phy_offset < 0
                || e.phy_offset >= limit
                || e.phy_offset < last_phy
                || e.key_hash < 0
                || (e.phy_offset == 0 && e.key_hash == 0 && n > 1)
            {
                break;
            }
            let pos =
                usize::try_from(self.geometry.slot_pos(e.key_hash) - HEADER_SIZE).unwrap_or(0);
            let prev = i32::from_be_bytes(slots[pos..pos + 4].try_into().unwrap_or([0; 4]));
            if prev == 0 {
                h.hash_slot_count += 1;
            }
            if e.prev != prev {
                // Rebuilt chains follow the kept entries only.
                let fixed = Entry { prev, ..e };
                self.write_at(&fixed.encode(), self.geometry.entry_pos(n))?;
            }
            slots[pos..pos + 4].copy_from_slice(&n.to_be_bytes());
            if n == 1 {
                h.begin_timestamp = old.begin_timestamp;
                h.begin_phy_offset = e.phy_offset;
            }
            h.end_phy_offset = e.phy_offset;
            h.end_timestamp = old
                .begin_timestamp
                .saturating_add(i64::from(e.time_diff) * 1000);
            h.index_count = n + 1;
            last_phy = e.phy_offset;
        }
        self.write_at(&slots, HEADER_SIZE)?;
        if h.index_count == 1 {
            h.begin_timestamp = 0;
        }
        // The dropped entries' bytes stay: nothing points at them and puts overwrite them.
        self.write_header(&h)?;
        Ok(h)
    }

    /// Makes everything written durable.
    ///
    /// # Errors
    /// I/O failures.
    pub fn sync(&self) -> Result<()> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        if let Bytes::File(f) = &self.bytes {
            if let Err(e) = f.sync_data() {
                self.dirty.store(true, Ordering::Release);
                return Err(Error::io("sync index file", &self.path, e));
            }
        }
        Ok(())
    }
}

fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Walks the chain of `hash` in `file` newest first, calling `f` with each entry's record
/// offset and time (ms, whole seconds after the begin timestamp) until `f` returns false.
/// Entries whose hash differs are skipped; the walk stops at a `prev` that does not go down
/// (damage), so it ends after at most `index_count` steps.
///
/// # Errors
/// I/O failures.
pub fn walk(file: &IndexFile, hash: i32, mut f: impl FnMut(u64, i64) -> bool) -> Result<()> {
    let begin = file.header()?.begin_timestamp;
    let mut n = file.slot(hash)?;
    while n > 0 {
        let Some(e) = file.entry(n)? else { break };
        if e.key_hash == hash && e.phy_offset >= 0 {
            let ts = begin.saturating_add(i64::from(e.time_diff.max(0)) * 1000);
            if !f(e.phy_offset.unsigned_abs(), ts) {
                break;
            }
        }
        if e.prev >= n {
            break;
        }
        n = e.prev;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Geometry {
        Geometry::with_slots(4)
    }

    fn chain(f: &IndexFile, hash: i32) -> Vec<(u64, i64)> {
        let mut out = Vec::new();
        walk(f, hash, |o, t| {
            out.push((o, t));
            true
        })
        .expect("walk");
        out
    }

    /// `put_all` writes what `put` one key at a time writes, byte for byte, in chunks of any
    /// size and up to a full file, and says how many keys fit.
    #[test]
    fn put_all_writes_the_bytes_put_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Colliding hashes (4 slots), a negative one, and times a few seconds apart.
        let keys: Vec<(i32, u64, i64)> = (0..20i32)
            .map(|i| {
                (
                    (i * 7) % 5 - 2,
                    100 * i as u64,
                    1_700_000_000_000 + 1_500 * i64::from(i),
                )
            })
            .collect();
        for chunk in [1usize, 3, 7, 20] {
            let one = IndexFile::create(Some(dir.path()), &format!("a{chunk}"), small(), 0o600)
                .expect("create");
            let all = IndexFile::create(Some(dir.path()), &format!("b{chunk}"), small(), 0o600)
                .expect("create");
            let (mut h1, mut h2) = (one.header().expect("h"), all.header().expect("h"));
            let mut fit_one = 0;
            for &(hash, off, ts) in &keys {
                if one.put(&mut h1, hash, off, ts).expect("put") {
                    fit_one += 1;
                }
            }
            let mut slots = all.read_slots().expect("slots");
            let mut fit_all = 0;
            for part in keys.chunks(chunk) {
                fit_all += all.put_all(&mut h2, &mut slots, part).expect("put_all");
            }
            assert_eq!((fit_all, h2), (fit_one, h1), "chunks of {chunk}");
            assert_eq!(
                fit_all, 15,
                "a file of 16 entries holds 15 (numbers from 1)"
            );
            assert_eq!(slots, one.read_slots().expect("slots"));
            assert_eq!(
                std::fs::read(one.path()).expect("read"),
                std::fs::read(all.path()).expect("read"),
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn layout_matches_rocketmq() {
        assert_eq!(
            Geometry {
                slots: ROCKETMQ_SLOTS,
                entries: ROCKETMQ_ENTRIES
            }
            .file_size(),
            420_000_040
        );
        let g = small();
        assert_eq!(g.file_size(), 40 + 4 * 4 + 16 * 20);
        assert_eq!(Geometry::of_size(g.file_size()), Some(g));
        assert_eq!(
            Geometry::of_size(420_000_040).map(|g| g.slots),
            Some(ROCKETMQ_SLOTS)
        );
        assert_eq!(Geometry::of_size(41), None);
        let dir = tempfile::tempdir().expect("dir");
        let f = IndexFile::create(Some(dir.path()), "20260101000000000", g, 0o600).expect("create");
        let mut h = f.header().expect("header");
        assert_eq!(h.index_count, 1);
        assert!(f.put(&mut h, 6, 1000, 5_000).expect("put"));
        assert!(f.put(&mut h, 3, 2000, 7_999).expect("put"));
        assert!(f.put(&mut h, 10, 3000, 9_000).expect("put"));
        let raw = std::fs::read(f.path()).expect("read");
        assert_eq!(raw.len() as u64, g.file_size());
        // Header: begin/end timestamp, begin/end phy offset, slot count, index count.
        assert_eq!(&raw[0..8], &5_000i64.to_be_bytes());
        assert_eq!(&raw[8..16], &9_000i64.to_be_bytes());
        assert_eq!(&raw[16..24], &1000i64.to_be_bytes());
        assert_eq!(&raw[24..32], &3000i64.to_be_bytes());
        assert_eq!(&raw[32..36], &2i32.to_be_bytes());
        assert_eq!(&raw[36..40], &4i32.to_be_bytes());
        // Slot 6 % 4 = 2 and 10 % 4 = 2 share a chain: the slot holds entry 3.
        assert_eq!(&raw[40 + 8..40 + 12], &3i32.to_be_bytes());
        // Entry 3: hash, phy, seconds after begin, prev = 1.
        let e3 = 40 + 16 + 3 * 20;
        assert_eq!(&raw[e3..e3 + 4], &10i32.to_be_bytes());
        assert_eq!(&raw[e3 + 4..e3 + 12], &3000i64.to_be_bytes());
        assert_eq!(&raw[e3 + 12..e3 + 16], &4i32.to_be_bytes());
        assert_eq!(&raw[e3 + 16..e3 + 20], &1i32.to_be_bytes());
        // The chain of hash 6 skips entry 3 (hash 10) and times are whole seconds.
        assert_eq!(chain(&f, 6), [(1000, 5_000)]);
        assert_eq!(chain(&f, 10), [(3000, 9_000)]);
        assert_eq!(chain(&f, 3), [(2000, 7_000)]);
    }

    #[test]
    fn chains_are_newest_first_and_file_fills() {
        let g = small();
        let f = IndexFile::create(None, "x", g, 0o600).expect("create");
        let mut h = f.header().expect("header");
        let mut puts = 0;
        while f.put(&mut h, 1, 100 + puts, 1_000).expect("put") {
            puts += 1;
        }
        // Entry numbers 1..entries-1.
        assert_eq!(puts, u64::from(g.entries) - 1);
        assert!(f.is_full(&h));
        let got: Vec<u64> = chain(&f, 1).into_iter().map(|(o, _)| o).collect();
        let want: Vec<u64> = (100..100 + puts).rev().collect();
        assert_eq!(got, want);
    }

    #[test]
    fn damaged_chain_never_loops() {
        let f = IndexFile::create(None, "x", small(), 0o600).expect("create");
        let mut h = f.header().expect("header");
        f.put(&mut h, 1, 10, 1).expect("put");
        f.put(&mut h, 1, 20, 1).expect("put");
        // Entry 1's prev made to point at itself and entry 2's at a later number.
        let bad = Entry {
            key_hash: 1,
            phy_offset: 20,
            time_diff: 0,
            prev: 9,
        };
        f.write_at(&bad.encode(), small().entry_pos(2))
            .expect("write");
        assert_eq!(chain(&f, 1).len(), 1);
        f.write_at(&(1000i32).to_be_bytes(), small().slot_pos(1))
            .expect("write");
        assert!(chain(&f, 1).is_empty());
    }

    #[test]
    fn reset_tail_keeps_entries_below_the_limit() {
        let f = IndexFile::create(None, "x", small(), 0o600).expect("create");
        let mut h = f.header().expect("header");
        for (i, hash) in [1, 5, 2, 1, 5].into_iter().enumerate() {
            f.put(&mut h, hash, 100 * (i as u64 + 1), 1_000)
                .expect("put");
        }
        let h = f.reset_tail(300).expect("reset");
        assert_eq!(h.index_count, 3);
        assert_eq!(h.end_phy_offset, 200);
        assert_eq!(chain(&f, 1), [(100, 1_000)]);
        assert_eq!(chain(&f, 5), [(200, 1_000)]);
        assert!(chain(&f, 2).is_empty());
        let h = f.reset_tail(0).expect("reset");
        assert_eq!(h.index_count, 1);
        assert!(chain(&f, 1).is_empty());
    }
}
