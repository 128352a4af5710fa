//! The byte layout of `run/writer.shm` (FORMAT.md §14): the header page's fields and where
//! the topic and queue tables start, the header's encoding and its validation. Pure: no I/O.

use crate::util::bytes::{be_u32, be_u64};
use crate::util::crc::crc32;

/// `"MQLW"`.
pub const MAGIC: u32 = 0x4D51_4C57;
/// Layout version; a mapping of another version is rebuilt, never read. Version 2 added the
/// reserved-chunk bitmap ([`at::RESERVED`]).
pub const VERSION: u32 = 2;
/// The header page.
pub const HEADER_LEN: usize = 4096;
/// Bytes of the header's constant part covered by its CRC (the CRC follows them).
pub const CONST_LEN: usize = 40;

/// Offsets of the header's fields (FORMAT.md §14).
pub mod at {
    /// The robust mutex (the C library's `pthread_mutex_t`, native, at most 64 bytes).
    pub const MUTEX: usize = 64;
    /// Room reserved for the mutex.
    pub const MUTEX_ROOM: usize = 64;
    /// End of the last complete, published record.
    pub const LOG_END: usize = 128;
    /// While a holder writes: the end it writes to; 0 otherwise.
    pub const INTENT_END: usize = 136;
    /// The queue slot (index + 1) the write in progress advances; 0: none.
    pub const INTENT_SLOT: usize = 144;
    /// That slot's next offset before the write in progress.
    pub const INTENT_PREV: usize = 152;
    /// The latest store timestamp written into the log (ms).
    pub const LAST_STORE_TS: usize = 160;
    /// Topic slots taken (counted before a slot is filled).
    pub const TOPICS_USED: usize = 168;
    /// Queue slots taken (counted before a slot is filled).
    pub const QUEUES_USED: usize = 176;
    /// Everything below it has its consume-queue units written (its own cache line).
    pub const DISPATCHED: usize = 192;
    /// Everything below it is durable (its own cache line, with the group commit's words).
    pub const FLUSHED: usize = 256;
    /// `u32` wake word (wakeup/protocol.rs) of the sync senders waiting on `FLUSHED`.
    pub const FLUSHED_WAKE: usize = 264;
    /// The highest end a sync sender asked the leader to make durable.
    pub const FLUSH_REQUESTED: usize = 272;
    /// `u32` wake word of the leader's flush thread waiting on `FLUSH_REQUESTED`.
    pub const REQUEST_WAKE: usize = 280;
    /// Bumped by every topic change.
    pub const TOPICS_GENERATION: usize = 320;
    /// Timers and delayed messages announced by the put hooks of every process (a count).
    pub const TIMER_ARRIVALS: usize = 384;
    /// `u32` wake word of the thread delivering timers, waiting on `TIMER_ARRIVALS`.
    pub const TIMER_WAKE: usize = 392;
    /// The reserved-chunk bitmap: [`super::RESERVED_WORDS`] big-endian words, bit `c % 64`
    /// (least significant first) of word `c / 64` set once chunk `c` of the tables
    /// ([`super::CHUNK`] bytes from [`super::HEADER_LEN`]) has its disk blocks.
    pub const RESERVED: usize = 512;
}

/// The tables are reserved on disk in chunks of this many bytes, each before its first write
/// (the file is otherwise sparse). A multiple of both slot sizes and of the page size.
pub const CHUNK: usize = 64 << 10;
/// Words of the reserved-chunk bitmap: room for the largest tables.
pub const RESERVED_WORDS: usize = 32;

/// Bytes of one topic slot: a length byte (0: empty), then up to 255 name bytes.
pub const TOPIC_SLOT: usize = 256;
/// Bytes of one queue slot: the key word, then the next queue offset.
pub const QUEUE_SLOT: usize = 16;

/// Fewest and most slots of each table (powers of two).
pub const MIN_TOPIC_SLOTS: u32 = 1 << 12;
/// See [`MIN_TOPIC_SLOTS`].
pub const MAX_TOPIC_SLOTS: u32 = 1 << 18;
/// See [`MIN_TOPIC_SLOTS`].
pub const MIN_QUEUE_SLOTS: u32 = 1 << 16;
/// See [`MIN_TOPIC_SLOTS`].
pub const MAX_QUEUE_SLOTS: u32 = 1 << 22;

/// Fewest slots of each table a first opener builds: the mapping is sparse, so chunks
/// ([`CHUNK`]) no entry uses cost neither disk nor memory, and a store used as the default (shared) open
/// must take the topics and queues one process could create alone (tens of thousands)
/// without `SharedTableFull`.
pub const FLOOR_TOPIC_SLOTS: u32 = 1 << 16;
/// See [`FLOOR_TOPIC_SLOTS`].
pub const FLOOR_QUEUE_SLOTS: u32 = 1 << 20;

// Every chunk of the largest tables has its bit, and the bitmap stays inside the header page.
const _: () = assert!(
    (MAX_TOPIC_SLOTS as usize * TOPIC_SLOT + MAX_QUEUE_SLOTS as usize * QUEUE_SLOT)
        <= RESERVED_WORDS * 64 * CHUNK
);
const _: () = assert!(at::RESERVED + RESERVED_WORDS * 8 <= HEADER_LEN);
// A topic table is whole chunks, so no chunk holds slots of both tables.
const _: () = assert!((MIN_TOPIC_SLOTS as usize * TOPIC_SLOT).is_multiple_of(CHUNK));

/// The chunk of the tables holding byte `pos` of the file (`pos` past the header).
pub fn chunk_of(pos: usize) -> usize {
    pos.saturating_sub(HEADER_LEN) / CHUNK
}

/// The byte of the header holding chunk `chunk`'s bitmap word, and the bit (a mask).
pub fn reserved_bit(chunk: usize) -> (usize, u64) {
    (at::RESERVED + chunk / 64 * 8, 1u64 << (chunk % 64))
}

/// The bytes `[start, end)` of chunk `chunk` in a file of `file_len` bytes.
pub fn chunk_range(chunk: usize, file_len: usize) -> (usize, usize) {
    let start = HEADER_LEN + chunk * CHUNK;
    (start.min(file_len), (start + CHUNK).min(file_len))
}

/// FNV-1a, 64 bits: the topic table's hash of a name.
pub fn topic_hash(name: &[u8]) -> u64 {
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The queue table's key of (topic id, queue id); never 0, which marks an empty slot.
pub fn queue_key(topic_id: u32, queue_id: u32) -> u64 {
    (u64::from(topic_id) + 1) << 32 | u64::from(queue_id)
}

/// The SplitMix64 finaliser: the queue table's hash of a key.
pub fn queue_hash(key: u64) -> u64 {
    let mut z = key;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The sizes of the two tables, fixed when the mapping is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Topic slots.
    pub topic_slots: u32,
    /// Queue slots.
    pub queue_slots: u32,
}

impl Capacity {
    /// Room for `topics` topics and `queues` queues (what recovery found) with as many again
    /// to spare before the load limit: each table gets at least four slots per entry, and no
    /// fewer than the minimum. Counts beyond the maximum get the maximum (a later insert then
    /// reports the table full).
    pub fn for_counts(topics: usize, queues: usize) -> Capacity {
        let slots = |n: usize, min: u32, max: u32| {
            let want = n.saturating_mul(4).clamp(min as usize, max as usize);
            u32::try_from(want.next_power_of_two()).map_or(max, |s| s.clamp(min, max))
        };
        Capacity {
            topic_slots: slots(topics, FLOOR_TOPIC_SLOTS, MAX_TOPIC_SLOTS),
            queue_slots: slots(queues, FLOOR_QUEUE_SLOTS, MAX_QUEUE_SLOTS),
        }
    }

    /// Most entries a table of `slots` slots takes: three quarters, so probes stay short and
    /// always reach an empty slot.
    pub fn limit(slots: u32) -> u32 {
        slots - slots / 4
    }

    /// Where the topic table starts.
    pub fn topics_at(&self) -> usize {
        HEADER_LEN
    }

    /// Where the queue table starts.
    pub fn queues_at(&self) -> usize {
        HEADER_LEN + self.topic_slots as usize * TOPIC_SLOT
    }

    /// The file's length.
    pub fn file_len(&self) -> usize {
        self.queues_at() + self.queue_slots as usize * QUEUE_SLOT
    }

    fn valid(&self) -> bool {
        let ok = |s: u32, min: u32, max: u32| s.is_power_of_two() && (min..=max).contains(&s);
        ok(self.topic_slots, MIN_TOPIC_SLOTS, MAX_TOPIC_SLOTS)
            && ok(self.queue_slots, MIN_QUEUE_SLOTS, MAX_QUEUE_SLOTS)
    }
}

/// Which store a mapping belongs to: the device and inode of the store's directory. A copy of
/// the directory, or a store created again at the same path, has another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreIdentity {
    /// `st_dev` of the store directory.
    pub device: u64,
    /// `st_ino` of the store directory.
    pub inode: u64,
}

/// The header's constant part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of a `pthread_mutex_t` in the creator's C library.
    pub mutex_bytes: u32,
    /// The creator's pointer width in bytes.
    pub pointer_bytes: u32,
    /// The store the mapping belongs to.
    pub identity: StoreIdentity,
    /// Table sizes.
    pub capacity: Capacity,
}

impl Header {
    /// This process's header for `identity` and `capacity`.
    pub fn native(identity: StoreIdentity, capacity: Capacity) -> Header {
        Header {
            mutex_bytes: crate::mapped_file::robust::MUTEX_BYTES as u32,
            pointer_bytes: std::mem::size_of::<usize>() as u32,
            identity,
            capacity,
        }
    }

    /// Bytes 0..64 of the file: magic, version, the fields, their CRC, zeros.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        let fields: [(usize, &[u8]); 8] = [
            (0, &MAGIC.to_be_bytes()),
            (4, &VERSION.to_be_bytes()),
            (8, &self.mutex_bytes.to_be_bytes()),
            (12, &self.pointer_bytes.to_be_bytes()),
            (16, &self.identity.device.to_be_bytes()),
            (24, &self.identity.inode.to_be_bytes()),
            (32, &self.capacity.topic_slots.to_be_bytes()),
            (36, &self.capacity.queue_slots.to_be_bytes()),
        ];
        for (at, v) in fields {
            if let Some(dst) = b.get_mut(at..at + v.len()) {
                dst.copy_from_slice(v);
            }
        }
        let crc = crc32(b.get(..CONST_LEN).unwrap_or_default());
        if let Some(dst) = b.get_mut(CONST_LEN..CONST_LEN + 4) {
            dst.copy_from_slice(&crc.to_be_bytes());
        }
        b
    }

    /// Decodes bytes 0..64 and checks them against what this process expects (`expect`'s
    /// ABI and identity; the capacity is read from the bytes). `Err`: why the mapping must be
    /// rebuilt instead.
    pub fn check(bytes: &[u8; 64], expect: &Header, file_len: u64) -> Result<Header, String> {
        let u64_at = |at: usize| be_u64(bytes, at).unwrap_or(0);
        let u32_at = |at: usize| be_u32(bytes, at).unwrap_or(0);
        if u32_at(0) != MAGIC {
            return Err("not a writer mapping (magic)".into());
        }
        if u32_at(4) != VERSION {
            return Err(format!(
                "layout version {} (this mqlite: {VERSION})",
                u32_at(4)
            ));
        }
        if crc32(bytes.get(..CONST_LEN).unwrap_or_default()) != u32_at(CONST_LEN) {
            return Err("header CRC mismatch".into());
        }
        let got = Header {
            mutex_bytes: u32_at(8),
            pointer_bytes: u32_at(12),
            identity: StoreIdentity {
                device: u64_at(16),
                inode: u64_at(24),
            },
            capacity: Capacity {
                topic_slots: u32_at(32),
                queue_slots: u32_at(36),
            },
        };
        if (got.mutex_bytes, got.pointer_bytes) != (expect.mutex_bytes, expect.pointer_bytes) {
            return Err(format!(
                "built by a process of another ABI (mutex {} bytes, pointers {} bytes)",
                got.mutex_bytes, got.pointer_bytes
            ));
        }
        if got.identity != expect.identity {
            return Err("built for another store".into());
        }
        if !got.capacity.valid() {
            return Err(format!("table sizes out of range: {:?}", got.capacity));
        }
        if file_len != got.capacity.file_len() as u64 {
            return Err(format!(
                "file is {file_len} bytes, its header says {}",
                got.capacity.file_len()
            ));
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_the_documented_ones() {
        // FNV-1a's published test vectors.
        assert_eq!(topic_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(topic_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(queue_key(0, 3), 0x0000_0001_0000_0003);
        assert_ne!(queue_hash(queue_key(0, 0)), queue_hash(queue_key(0, 1)));
    }

    #[test]
    fn capacities_are_powers_of_two_within_bounds() {
        let small = Capacity::for_counts(1, 4);
        assert_eq!((small.topic_slots, small.queue_slots), (1 << 16, 1 << 20));
        let scale = Capacity::for_counts(100_000, 400_000);
        assert_eq!((scale.topic_slots, scale.queue_slots), (1 << 18, 1 << 21));
        let huge = Capacity::for_counts(usize::MAX, usize::MAX);
        assert_eq!(
            (huge.topic_slots, huge.queue_slots),
            (MAX_TOPIC_SLOTS, MAX_QUEUE_SLOTS)
        );
        assert!(small.valid() && scale.valid() && huge.valid());
        assert_eq!(Capacity::limit(4096), 3072);
    }

    #[test]
    fn a_header_of_another_store_version_or_abi_is_refused() {
        let id = StoreIdentity {
            device: 7,
            inode: 9,
        };
        let cap = Capacity::for_counts(0, 0);
        let h = Header::native(id, cap);
        let len = cap.file_len() as u64;
        assert_eq!(Header::check(&h.encode(), &h, len), Ok(h));
        let other = Header::native(StoreIdentity { inode: 10, ..id }, cap);
        assert!(Header::check(&other.encode(), &h, len).is_err());
        let abi = Header {
            mutex_bytes: 24,
            ..h
        };
        assert!(Header::check(&abi.encode(), &h, len).is_err());
        assert!(Header::check(&h.encode(), &h, len - 1).is_err());
        let mut bad = h.encode();
        bad[7] = VERSION as u8 + 1;
        assert!(Header::check(&bad, &h, len)
            .unwrap_err()
            .contains("version"));
        let mut flipped = h.encode();
        flipped[20] ^= 1;
        assert!(Header::check(&flipped, &h, len)
            .unwrap_err()
            .contains("CRC"));
        assert!(Header::check(&[0; 64], &h, len).is_err());
    }
}
