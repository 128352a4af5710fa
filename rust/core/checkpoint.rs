//! StoreCheckpoint: how far the commit log and the consume queues are known to be durable.
//!
//! On disk: `checkpoint`, 4096 bytes holding two identical 64-byte slots at bytes 0 and 2048
//! (FORMAT.md §5): RocketMQ's five i64 fields, then mqlite's dispatched offset, magic, version
//! and a CRC32 of the slot.
//!
//! Invariants: slot B is written and synced before slot A, so after any crash at least one slot
//! is whole and holds either the previous or the new values. Values only grow.
//!
//! Crash behaviour: a checkpoint with no valid slot (missing, torn, zeroed) is treated as absent:
//! recovery then scans from the oldest commit-log file, which is slower but loses nothing.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::util::{crc, fs};

const SLOT_LEN: usize = 64;
const SLOT_B_AT: u64 = 2048;
const FILE_LEN: u64 = 4096;
/// Slot magic ("MQLC").
pub const MAGIC: u32 = 0x4D51_4C43;
/// Format version of the slot.
pub const VERSION: u32 = 1;

/// The values of one checkpoint slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointData {
    /// Store time of the last flushed commit-log record.
    pub physic_msg_timestamp: i64,
    /// Store time of the last consume-queue unit flushed.
    pub logics_msg_timestamp: i64,
    /// Store time of the last flushed index entry.
    pub index_msg_timestamp: i64,
    /// Commit-log offset below which every byte is durable (RocketMQ's confirmPhyOffset).
    pub confirm_phy_offset: u64,
    /// Commit-log offset below which every consume-queue unit is durable.
    pub logics_dispatched_offset: u64,
}

impl CheckpointData {
    /// Encodes one slot.
    pub fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[0..8].copy_from_slice(&self.physic_msg_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.logics_msg_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.index_msg_timestamp.to_be_bytes());
        // 24..32 masterFlushedOffset stays 0 (no HA).
        b[32..40].copy_from_slice(&self.confirm_phy_offset.to_be_bytes());
        b[40..48].copy_from_slice(&self.logics_dispatched_offset.to_be_bytes());
        b[48..52].copy_from_slice(&MAGIC.to_be_bytes());
        b[52..56].copy_from_slice(&VERSION.to_be_bytes());
        let c = crc::crc32(&b[..56]);
        b[56..60].copy_from_slice(&c.to_be_bytes());
        b
    }

    /// Decodes one slot; `None` if its magic, version or CRC is wrong.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; SLOT_LEN] = b.get(..SLOT_LEN)?.try_into().ok()?;
        let u32_at = |i: usize| {
            b.get(i..i + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_be_bytes)
        };
        let i64_at = |i: usize| {
            b.get(i..i + 8)
                .and_then(|s| s.try_into().ok())
                .map(i64::from_be_bytes)
        };
        if u32_at(48)? != MAGIC || u32_at(52)? != VERSION || u32_at(56)? != crc::crc32(b.get(..56)?)
        {
            return None;
        }
        Some(CheckpointData {
            physic_msg_timestamp: i64_at(0)?,
            logics_msg_timestamp: i64_at(8)?,
            index_msg_timestamp: i64_at(16)?,
            confirm_phy_offset: u64::try_from(i64_at(32)?).ok()?,
            logics_dispatched_offset: u64::try_from(i64_at(40)?).ok()?,
        })
    }
}

/// The checkpoint file.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    // `None` once the store closed (taken after `current` wherever both are held).
    file: Mutex<Option<File>>,
    current: Mutex<CheckpointData>,
}

impl Checkpoint {
    /// Opens (creating when `writable`) the checkpoint at `path` and reads its valid slot.
    pub fn open(path: &Path, writable: bool, mode: u32) -> Result<(Self, Option<CheckpointData>)> {
        let file = if writable {
            fs::open_rw(path, mode)?
        } else {
            fs::open_ro(path)?
        };
        let mut buf = vec![0u8; FILE_LEN as usize];
        let n = file
            .read_at(&mut buf, 0)
            .map_err(|e| Error::io("read", path, e))?;
        let data = if n >= SLOT_LEN {
            CheckpointData::decode(&buf[..SLOT_LEN]).or_else(|| {
                buf.get(SLOT_B_AT as usize..SLOT_B_AT as usize + SLOT_LEN)
                    .and_then(CheckpointData::decode)
            })
        } else {
            None
        };
        if writable && n < FILE_LEN as usize {
            fs::preallocate(&file, path, FILE_LEN)?;
        }
        let cp = Checkpoint {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
            current: Mutex::new(data.unwrap_or_default()),
        };
        Ok((cp, data))
    }

    /// The values last written or read.
    pub fn get(&self) -> CheckpointData {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Merges `update` (values only grow) and writes both slots durably.
    pub fn store(&self, update: CheckpointData) -> Result<()> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let merged = CheckpointData {
            physic_msg_timestamp: cur.physic_msg_timestamp.max(update.physic_msg_timestamp),
            logics_msg_timestamp: cur.logics_msg_timestamp.max(update.logics_msg_timestamp),
            index_msg_timestamp: cur.index_msg_timestamp.max(update.index_msg_timestamp),
            confirm_phy_offset: cur.confirm_phy_offset.max(update.confirm_phy_offset),
            logics_dispatched_offset: cur
                .logics_dispatched_offset
                .max(update.logics_dispatched_offset),
        };
        if merged == *cur {
            return Ok(());
        }
        self.write_slots(&merged)?;
        *cur = merged;
        Ok(())
    }

    /// Overwrites both slots with `data` (recovery sets values that may be lower).
    pub fn reset(&self, data: CheckpointData) -> Result<()> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        self.write_slots(&data)?;
        *cur = data;
        Ok(())
    }

    /// Closes the file (store close); later writes fail with `Closed`.
    pub fn close(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn write_slots(&self, d: &CheckpointData) -> Result<()> {
        let slot = d.encode();
        let guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let file = guard.as_ref().ok_or(Error::Closed)?;
        for at in [SLOT_B_AT, 0] {
            file.write_all_at(&slot, at)
                .map_err(|e| Error::io("write", &self.path, e))?;
            file.sync_data()
                .map_err(|e| Error::io("fdatasync", &self.path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_torn_slot_a_falls_back_to_b() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        let (cp, data) = Checkpoint::open(&p, true, 0o600).unwrap();
        assert_eq!(data, None);
        let d = CheckpointData {
            physic_msg_timestamp: 5,
            confirm_phy_offset: 100,
            logics_dispatched_offset: 90,
            ..Default::default()
        };
        cp.store(d).unwrap();
        drop(cp);
        assert_eq!(Checkpoint::open(&p, true, 0o600).unwrap().1, Some(d));
        // tear slot A
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[0xFF; 10], 20).unwrap();
        assert_eq!(Checkpoint::open(&p, true, 0o600).unwrap().1, Some(d));
        // tear both: treated as absent
        f.write_all_at(&[0xFF; 10], 2048 + 20).unwrap();
        assert_eq!(Checkpoint::open(&p, true, 0o600).unwrap().1, None);
    }

    #[test]
    fn golden_slot_layout() {
        let d = CheckpointData {
            physic_msg_timestamp: 1,
            logics_msg_timestamp: 2,
            index_msg_timestamp: 3,
            confirm_phy_offset: 4,
            logics_dispatched_offset: 5,
        };
        let b = d.encode();
        assert_eq!(&b[0..8], &1i64.to_be_bytes());
        assert_eq!(&b[32..40], &4i64.to_be_bytes());
        assert_eq!(&b[40..48], &5i64.to_be_bytes());
        assert_eq!(&b[48..52], b"MQLC");
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(&b[60..64], &[0, 0, 0, 0]);
    }
}
