//! The writer mapping's two open-addressing tables (FORMAT.md §14): topic names to topic ids,
//! and (topic id, queue id) to the queue's next offset. Written only by the holder of the
//! append lock; a slot, once filled, keeps its key for the mapping's life, so a topic id and a
//! queue slot can be cached by every process.
//!
//! A slot is filled in an order that a holder killed at any instruction leaves harmless: the
//! table's count first (a death leaves it one too high, which only brings the full error one
//! entry closer), then the slot's payload (name bytes, or next offset), then its key with a
//! release store (a slot without its key is empty, whatever its payload).
//!
//! The file is sparse: the tables' pages take disk (or, on tmpfs, memory) only once reserved,
//! a chunk ([`CHUNK`](super::layout::CHUNK)) at a time, with `posix_fallocate` by the holder
//! inserting the first entry into it, before the count changes (so a full disk is `StoreFull`
//! and changes nothing). Invariant: no process touches a byte of a chunk whose bit in the header's
//! reserved-chunk bitmap is clear. A probe reaching such a chunk sees an empty slot without
//! loading it (nothing was ever inserted there: an insert sets the bit first). The bit is set
//! with a release store after the blocks are reserved, and read with acquire, so a page of a
//! chunk with its bit set never faults into a hole, which on a full disk is a SIGBUS (on tmpfs
//! even for a read).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use super::layout::{
    at, chunk_of, chunk_range, queue_hash, queue_key, reserved_bit, topic_hash, Capacity,
    HEADER_LEN, QUEUE_SLOT, TOPIC_SLOT,
};
use super::protocol::QueueSlot;
use crate::error::{Error, Result};
use crate::mapped_file::alloc;
use crate::mapped_file::mmap::{page_size, MmapRegion};

/// The tables of one mapping.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tables<'a> {
    pub(super) region: &'a MmapRegion,
    /// The mapped file: chunks are reserved through it (`None` once the store closed).
    pub(super) file: &'a Mutex<Option<File>>,
    pub(super) capacity: Capacity,
    pub(super) path: &'a Path,
}

impl<'a> Tables<'a> {
    fn outside(&self, pos: usize) -> Error {
        Error::Corrupted {
            path: self.path.to_path_buf(),
            offset: pos as u64,
            reason: "outside the writer mapping".into(),
            cause: None,
        }
    }

    /// The big-endian word at `pos`.
    #[inline(always)]
    pub(super) fn word(&self, pos: usize) -> Result<&'a AtomicU64> {
        self.atomic(pos).ok_or_else(|| self.outside(pos))
    }

    /// `word` without the error: for accessors with a fallback, which then build none (an
    /// append's dozen accesses stay a bounds check, a load or store and a byte swap each). A
    /// header word goes through the whole header's bounds check, the same for every one.
    #[inline(always)]
    pub(super) fn atomic(&self, pos: usize) -> Option<&'a AtomicU64> {
        if pos < HEADER_LEN {
            self.region
                .atomic_u64s::<{ HEADER_LEN / 8 }>(0)
                .and_then(|h| h.get(pos / 8))
                .filter(|_| pos.is_multiple_of(8))
        } else {
            self.region.atomic_u64(pos)
        }
    }

    /// The word of `slot`'s next offset.
    #[inline(always)]
    pub(super) fn next_offset_word(&self, slot: QueueSlot) -> Option<&'a AtomicU64> {
        self.atomic(self.queue_pos(slot) + 8)
    }

    fn flag(&self, pos: usize) -> Result<&'a AtomicU8> {
        self.region.atomic_u8(pos).ok_or_else(|| self.outside(pos))
    }

    #[inline(always)]
    fn load(&self, pos: usize) -> Result<u64> {
        Ok(u64::from_be(self.word(pos)?.load(Ordering::Acquire)))
    }

    #[inline(always)]
    fn store(&self, pos: usize, v: u64) -> Result<()> {
        self.word(pos)?.store(v.to_be(), Ordering::Release);
        Ok(())
    }

    /// Whether the chunk holding byte `pos` has its disk blocks (module doc).
    pub(super) fn is_reserved(&self, pos: usize) -> bool {
        let (word, bit) = reserved_bit(chunk_of(pos));
        self.atomic(word)
            .is_some_and(|w| u64::from_be(w.load(Ordering::Acquire)) & bit != 0)
    }

    /// Reserves the disk blocks of the chunk holding byte `pos`, then records it in the
    /// bitmap; nothing when it is already reserved. Only the append lock's holder (or the
    /// creator, before any process maps the file) calls it, so the bit's load and store do not
    /// race. A full disk is `StoreFull`, the bit left clear.
    pub(super) fn reserve(&self, pos: usize) -> Result<()> {
        if self.is_reserved(pos) {
            return Ok(());
        }
        let chunk = chunk_of(pos);
        let file_len = self.capacity.file_len();
        let (start, end) = chunk_range(chunk, file_len);
        if start >= end {
            return Err(self.outside(pos));
        }
        // Whole pages: a fault brings in the page around a byte, which on a system with pages
        // larger than 4 KiB holds bytes of the neighbouring chunk too.
        let page = page_size();
        let start = start / page * page;
        let end = end.div_ceil(page).saturating_mul(page).min(file_len);
        {
            let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let file = file.as_ref().ok_or(Error::Closed)?;
            alloc::preallocate_range(file, self.path, start as u64, (end - start) as u64)?;
        }
        let (word, bit) = reserved_bit(chunk);
        let w = self.word(word)?;
        let now = u64::from_be(w.load(Ordering::Acquire)) | bit;
        w.store(now.to_be(), Ordering::Release);
        Ok(())
    }

    /// Reports a table of `slots` slots full if it holds its limit already.
    fn check_room(&self, used_at: usize, slots: u32, table: &'static str) -> Result<u64> {
        let used = self.load(used_at)?;
        let limit = Capacity::limit(slots);
        if used >= u64::from(limit) {
            return Err(Error::SharedTableFull { table, limit });
        }
        Ok(used)
    }

    /// Counts one more entry of a table of `slots` slots, or reports it full.
    fn take_one(&self, used_at: usize, slots: u32, table: &'static str) -> Result<()> {
        let used = self.check_room(used_at, slots, table)?;
        self.store(used_at, used + 1)
    }

    /// The id of topic `name` (its slot), added when new.
    pub(super) fn topic_id(&self, name: &str) -> Result<u32> {
        self.topic(name, true)?.ok_or_else(|| self.outside(0))
    }

    /// The id of topic `name` (its slot), inserting it when `insert`; `None` when absent.
    pub(super) fn topic(&self, name: &str, insert: bool) -> Result<Option<u32>> {
        let bytes = name.as_bytes();
        let len = u8::try_from(bytes.len())
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| Error::InvalidTopic {
                topic: name.to_owned(),
                reason: "must be 1 to 255 bytes",
            })?;
        let slots = self.capacity.topic_slots;
        let mask = u64::from(slots - 1);
        let h = topic_hash(bytes);
        let mut found = [0u8; TOPIC_SLOT - 1];
        for i in 0..u64::from(slots) {
            let id = ((h + i) & mask) as u32;
            let pos = self.capacity.topics_at() + id as usize * TOPIC_SLOT;
            // A slot of an unreserved chunk is empty and is not loaded (module doc).
            let reserved = self.is_reserved(pos);
            let l = if reserved {
                self.flag(pos)?.load(Ordering::Acquire)
            } else {
                0
            };
            if l == 0 {
                if !insert {
                    return Ok(None);
                }
                // The count is checked before the chunk is reserved, so a full table takes
                // no disk; the chunk is reserved before the count changes, so a full disk
                // changes nothing.
                self.check_room(at::TOPICS_USED, slots, "topic")?;
                if !reserved {
                    self.reserve(pos)?;
                }
                let flag = self.flag(pos)?;
                self.take_one(at::TOPICS_USED, slots, "topic")?;
                if !self.region.copy_in(pos + 1, bytes) {
                    return Err(self.outside(pos));
                }
                flag.store(len, Ordering::Release);
                return Ok(Some(id));
            }
            if l == len {
                let dst = found.get_mut(..bytes.len()).unwrap_or_default();
                if !self.region.copy_out(pos + 1, dst) {
                    return Err(self.outside(pos));
                }
                if dst == bytes {
                    return Ok(Some(id));
                }
            }
        }
        // Unreachable while the count keeps a quarter of the slots empty.
        Err(Error::SharedTableFull {
            table: "topic",
            limit: Capacity::limit(slots),
        })
    }

    /// The slot of (topic id, queue id), inserted with next offset `initial` when absent.
    pub(super) fn queue_slot(
        &self,
        topic_id: u32,
        queue_id: u32,
        initial: u64,
    ) -> Result<QueueSlot> {
        self.queue(topic_id, queue_id, Some(initial))?
            .ok_or_else(|| self.outside(0))
    }

    /// The slot of (topic id, queue id); when absent, inserted with next offset `insert` if
    /// given, else `None`.
    pub(super) fn queue(
        &self,
        topic_id: u32,
        queue_id: u32,
        insert: Option<u64>,
    ) -> Result<Option<QueueSlot>> {
        let slots = self.capacity.queue_slots;
        let mask = u64::from(slots - 1);
        let key = queue_key(topic_id, queue_id);
        let h = queue_hash(key);
        for i in 0..u64::from(slots) {
            let index = ((h + i) & mask) as u32;
            let pos = self.queue_pos(QueueSlot(index));
            // A slot of an unreserved chunk is empty and is not loaded (module doc).
            let reserved = self.is_reserved(pos);
            let k = if reserved { self.load(pos)? } else { 0 };
            if k == key {
                return Ok(Some(QueueSlot(index)));
            }
            if k == 0 {
                let Some(initial) = insert else {
                    return Ok(None);
                };
                self.check_room(at::QUEUES_USED, slots, "queue")?;
                if !reserved {
                    self.reserve(pos)?;
                }
                self.take_one(at::QUEUES_USED, slots, "queue")?;
                self.store(pos + 8, initial)?;
                self.store(pos, key)?;
                return Ok(Some(QueueSlot(index)));
            }
        }
        Err(Error::SharedTableFull {
            table: "queue",
            limit: Capacity::limit(slots),
        })
    }

    #[inline(always)]
    pub(super) fn queue_pos(&self, slot: QueueSlot) -> usize {
        self.capacity.queues_at() + slot.0 as usize * QUEUE_SLOT
    }

    /// The next offset of `slot`'s queue.
    #[inline(always)]
    pub(super) fn next_offset(&self, slot: QueueSlot) -> Result<u64> {
        self.load(self.queue_pos(slot) + 8)
    }

    /// Sets the next offset of `slot`'s queue.
    #[inline(always)]
    pub(super) fn set_next_offset(&self, slot: QueueSlot, next: u64) -> Result<()> {
        self.store(self.queue_pos(slot) + 8, next)
    }
}
