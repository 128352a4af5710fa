//! The writer mapping's two open-addressing tables (FORMAT.md §14): topic names to topic ids,
//! and (topic id, queue id) to the queue's next offset. Written only by the holder of the
//! append lock; a slot, once filled, keeps its key for the mapping's life, so a topic id and a
//! queue slot can be cached by every process.
//!
//! A slot is filled in an order that a holder killed at any instruction leaves harmless: the
//! table's count first (a death leaves it one too high, which only brings the full error one
//! entry closer), then the slot's payload (name bytes, or next offset), then its key with a
//! release store (a slot without its key is empty, whatever its payload).

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use super::layout::{
    at, queue_hash, queue_key, topic_hash, Capacity, HEADER_LEN, QUEUE_SLOT, TOPIC_SLOT,
};
use super::protocol::QueueSlot;
use crate::error::{Error, Result};
use crate::mapped_file::mmap::MmapRegion;

/// The tables of one mapping.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tables<'a> {
    pub(super) region: &'a MmapRegion,
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

    /// Counts one more entry of a table of `slots` slots, or reports it full.
    fn take_one(&self, used_at: usize, slots: u32, table: &'static str) -> Result<()> {
        let used = self.load(used_at)?;
        let limit = Capacity::limit(slots);
        if used >= u64::from(limit) {
            return Err(Error::SharedTableFull { table, limit });
        }
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
            let flag = self.flag(pos)?;
            let l = flag.load(Ordering::Acquire);
            if l == 0 {
                if !insert {
                    return Ok(None);
                }
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
            let k = self.load(pos)?;
            if k == key {
                return Ok(Some(QueueSlot(index)));
            }
            if k == 0 {
                let Some(initial) = insert else {
                    return Ok(None);
                };
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
    fn queue_pos(&self, slot: QueueSlot) -> usize {
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
