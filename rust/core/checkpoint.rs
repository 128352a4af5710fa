//! StoreCheckpoint: how far the commit log and the consume queues are known to be durable.
//!
//! On disk: `checkpoint`, 4096 bytes holding two identical slots at bytes 0 and 2048
//! (FORMAT.md §5): a 64-byte head (RocketMQ's five i64 fields, then mqlite's dispatched offset,
//! magic, version, a CRC32 of the head and a CRC32 of the progress table), then the progress
//! table of the derived stores (each store's durable commit-log offset and store timestamp, by
//! name; empty without derived stores beyond the critical ones' common offset).
//!
//! Invariants: slot B is written and synced before slot A, so after any crash at least one slot
//! is whole and holds either the previous or the new values. A slot is whole when its head and
//! its table verify. Values only grow (per store name, in the table).
//!
//! Crash behaviour: a checkpoint with no valid slot (missing, torn, zeroed) is treated as absent:
//! recovery then scans from the oldest commit-log file, which is slower but loses nothing.
//!
//! A store written by Apache RocketMQ has RocketMQ's checkpoint in the same file: big-endian
//! i64 fields at 0 (physicMsgTimestamp), 8 (logicsMsgTimestamp), 16 (indexMsgTimestamp) and, in
//! 5.x, 32 (confirmPhyOffset), with no magic or CRC. When no mqlite slot is valid, those fields
//! are read as [`RocketMqCheckpoint`]; they are hints for recovery, never grounds to cut data.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::util::bytes::{be_i64, be_u32};
use crate::util::kill_point::kill_point;
use crate::util::two_copies::{self, FILE_LEN};
use crate::util::{crc, fs};

const SLOT_LEN: usize = 64;
/// Where slot B starts, as a file position.
const SLOT_B_AT: u64 = two_copies::SLOT_B_AT as u64;
/// Bytes of a store name in the progress table (ASCII, zero padded).
pub const PROGRESS_NAME_LEN: usize = 16;
const ENTRY_LEN: usize = PROGRESS_NAME_LEN + 16;
/// Most entries the progress table holds (it must end before slot B).
pub const MAX_PROGRESS_ENTRIES: usize = 32;
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

/// One derived store's durable progress, as the checkpoint's progress table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreProgress {
    /// The store's name (`Dispatcher::name`; at most 16 ASCII bytes).
    pub name: String,
    /// Commit-log offset below which every record is durably in the store.
    pub offset: u64,
    /// Store timestamp of the last of those records (0 when unknown).
    pub store_timestamp: i64,
}

/// Encodes the progress table (empty: no bytes); `None` if a name is too long or not ASCII,
/// or there are too many entries.
fn encode_table(entries: &[StoreProgress]) -> Option<Vec<u8>> {
    if entries.is_empty() {
        return Some(Vec::new());
    }
    if entries.len() > MAX_PROGRESS_ENTRIES {
        return None;
    }
    let mut b = Vec::with_capacity(4 + entries.len() * ENTRY_LEN);
    b.extend_from_slice(&u32::try_from(entries.len()).ok()?.to_be_bytes());
    for e in entries {
        let name = e.name.as_bytes();
        if name.len() > PROGRESS_NAME_LEN || !e.name.is_ascii() || name.contains(&0) {
            return None;
        }
        let mut field = [0u8; PROGRESS_NAME_LEN];
        field.get_mut(..name.len())?.copy_from_slice(name);
        b.extend_from_slice(&field);
        b.extend_from_slice(&i64::try_from(e.offset).ok()?.to_be_bytes());
        b.extend_from_slice(&e.store_timestamp.to_be_bytes());
    }
    Some(b)
}

/// Decodes the progress table at the start of `b` whose CRC is `crc` (0: no table).
fn decode_table(b: &[u8], crc: u32) -> Option<Vec<StoreProgress>> {
    if crc == 0 {
        return Some(Vec::new());
    }
    let n = usize::try_from(u32::from_be_bytes(b.get(..4)?.try_into().ok()?)).ok()?;
    if n == 0 || n > MAX_PROGRESS_ENTRIES {
        return None;
    }
    let table = b.get(..4 + n * ENTRY_LEN)?;
    if crc::crc32(table) != crc {
        return None;
    }
    table
        .get(4..)?
        .chunks_exact(ENTRY_LEN)
        .map(|e| {
            let name = e.get(..PROGRESS_NAME_LEN)?;
            let len = name
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(PROGRESS_NAME_LEN);
            let name = std::str::from_utf8(name.get(..len)?).ok()?;
            Some(StoreProgress {
                name: name.to_owned(),
                offset: u64::try_from(be_i64(e, PROGRESS_NAME_LEN)?).ok()?,
                store_timestamp: be_i64(e, PROGRESS_NAME_LEN + 8)?,
            })
        })
        .collect()
}

/// Encodes one slot: the head, then the progress table.
fn encode_slot(d: &CheckpointData, entries: &[StoreProgress]) -> Result<Vec<u8>> {
    let table = encode_table(entries).ok_or_else(|| Error::InvalidArgument {
        field: "checkpoint progress",
        reason: format!(
            "checkpoint progress table: at most {MAX_PROGRESS_ENTRIES} stores named by at most \
             {PROGRESS_NAME_LEN} ASCII bytes"
        ),
    })?;
    let mut slot = d.encode().to_vec();
    if !table.is_empty() {
        slot[60..64].copy_from_slice(&crc::crc32(&table).to_be_bytes());
    }
    slot.extend_from_slice(&table);
    Ok(slot)
}

/// Decodes the slot at the start of `b`: its head and its progress table, both verified.
fn decode_slot(b: &[u8]) -> Option<(CheckpointData, Vec<StoreProgress>)> {
    let head = CheckpointData::decode(b)?;
    let crc = u32::from_be_bytes(b.get(60..64)?.try_into().ok()?);
    Some((head, decode_table(b.get(SLOT_LEN..)?, crc)?))
}

impl CheckpointData {
    /// Encodes one slot's head (bytes 60..64, the table's CRC, are 0: no table).
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

    /// Decodes one slot's head; `None` if its magic, version or CRC is wrong.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; SLOT_LEN] = b.get(..SLOT_LEN)?.try_into().ok()?;
        if be_u32(b, 48)? != MAGIC
            || be_u32(b, 52)? != VERSION
            || be_u32(b, 56)? != crc::crc32(b.get(..56)?)
        {
            return None;
        }
        Some(CheckpointData {
            physic_msg_timestamp: be_i64(b, 0)?,
            logics_msg_timestamp: be_i64(b, 8)?,
            index_msg_timestamp: be_i64(b, 16)?,
            confirm_phy_offset: u64::try_from(be_i64(b, 32)?).ok()?,
            logics_dispatched_offset: u64::try_from(be_i64(b, 40)?).ok()?,
        })
    }
}

/// The fields of a checkpoint written by Apache RocketMQ (4.x: the first three; 5.x adds the
/// confirm offset), read when the file holds no valid mqlite slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RocketMqCheckpoint {
    /// Store time of the last record RocketMQ flushed: every record stored earlier is durable.
    pub physic_msg_timestamp: i64,
    /// Store time of the last consume-queue unit flushed.
    pub logics_msg_timestamp: i64,
    /// Store time of the last index entry flushed.
    pub index_msg_timestamp: i64,
    /// 5.x's confirmPhyOffset when it is set (positive).
    pub confirm_phy_offset: Option<u64>,
}

impl RocketMqCheckpoint {
    /// Reads RocketMQ's layout from the start of the file; `None` unless the three timestamps
    /// are non-negative, the flush timestamp is set, and the confirm offset is non-negative.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let (physic, logics, index) = (be_i64(b, 0)?, be_i64(b, 8)?, be_i64(b, 16)?);
        if physic <= 0 || logics < 0 || index < 0 {
            return None;
        }
        let confirm = be_i64(b, 32).unwrap_or(0);
        if confirm < 0 {
            return None;
        }
        Some(RocketMqCheckpoint {
            physic_msg_timestamp: physic,
            logics_msg_timestamp: logics,
            index_msg_timestamp: index,
            confirm_phy_offset: u64::try_from(confirm).ok().filter(|&c| c > 0),
        })
    }
}

/// The checkpoint file.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    // RocketMQ's fields, when the file held no valid mqlite slot at open.
    rocketmq: Option<RocketMqCheckpoint>,
    // `None` once the store closed (taken after `current` wherever both are held).
    file: Mutex<Option<File>>,
    current: Mutex<(CheckpointData, Vec<StoreProgress>)>,
}

impl Checkpoint {
    /// Opens (creating when `writable`) the checkpoint at `path` and reads its valid slot.
    pub fn open(path: &Path, writable: bool, mode: u32) -> Result<(Self, Option<CheckpointData>)> {
        let file = if writable {
            fs::open_rw(path, mode)?
        } else {
            fs::open_ro(path)?
        };
        let mut buf = vec![0u8; FILE_LEN];
        let n = file
            .read_at(&mut buf, 0)
            .map_err(|e| Error::io("read", path, e))?;
        let slots = two_copies::read(buf.get(..n).unwrap_or(&[]), decode_slot);
        let data = slots.as_ref().map(|(d, _)| *d);
        let progress = slots.map(|(_, p)| p).unwrap_or_default();
        let rocketmq = match data {
            None => RocketMqCheckpoint::decode(&buf[..n]),
            Some(_) => None,
        };
        if writable && n < FILE_LEN {
            crate::mapped_file::alloc::preallocate(&file, path, FILE_LEN as u64)?;
        }
        let cp = Checkpoint {
            path: path.to_path_buf(),
            rocketmq,
            file: Mutex::new(Some(file)),
            // RocketMQ's timestamps carry over (values only grow from there); its offsets are
            // recovery's business, not values to keep.
            current: Mutex::new((
                data.unwrap_or_else(|| {
                    rocketmq.map_or_else(CheckpointData::default, |r| CheckpointData {
                        physic_msg_timestamp: r.physic_msg_timestamp,
                        logics_msg_timestamp: r.logics_msg_timestamp,
                        index_msg_timestamp: r.index_msg_timestamp,
                        ..CheckpointData::default()
                    })
                }),
                progress,
            )),
        };
        Ok((cp, data))
    }

    /// RocketMQ's checkpoint fields, when the file held no valid mqlite slot at open.
    pub fn rocketmq(&self) -> Option<RocketMqCheckpoint> {
        self.rocketmq
    }

    /// The values last written or read.
    pub fn get(&self) -> CheckpointData {
        self.lock().0
    }

    /// The derived stores' progress last written or read (empty in a checkpoint written
    /// before the table existed).
    pub fn progress(&self) -> Vec<StoreProgress> {
        self.lock().1.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (CheckpointData, Vec<StoreProgress>)> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Merges `update` (values only grow) and writes both slots durably; the progress table
    /// is kept.
    ///
    /// # Errors
    /// I/O failures; `Closed` after `close`.
    pub fn store(&self, update: CheckpointData) -> Result<()> {
        self.store_with_progress(update, &[])
    }

    /// `store`, also merging `progress` into the table (per store name, values only grow;
    /// names not given keep their entries).
    ///
    /// # Errors
    /// As `store`, and `InvalidArgument` for a table that does not fit (FORMAT.md §5).
    pub fn store_with_progress(
        &self,
        update: CheckpointData,
        progress: &[StoreProgress],
    ) -> Result<()> {
        let mut cur = self.lock();
        let merged = CheckpointData {
            physic_msg_timestamp: cur.0.physic_msg_timestamp.max(update.physic_msg_timestamp),
            logics_msg_timestamp: cur.0.logics_msg_timestamp.max(update.logics_msg_timestamp),
            index_msg_timestamp: cur.0.index_msg_timestamp.max(update.index_msg_timestamp),
            confirm_phy_offset: cur.0.confirm_phy_offset.max(update.confirm_phy_offset),
            logics_dispatched_offset: cur
                .0
                .logics_dispatched_offset
                .max(update.logics_dispatched_offset),
        };
        let mut table = cur.1.clone();
        for p in progress {
            match table.iter_mut().find(|e| e.name == p.name) {
                Some(e) => {
                    e.offset = e.offset.max(p.offset);
                    e.store_timestamp = e.store_timestamp.max(p.store_timestamp);
                }
                None => table.push(p.clone()),
            }
        }
        if merged == cur.0 && table == cur.1 {
            return Ok(());
        }
        self.write_slots(&merged, &table)?;
        *cur = (merged, table);
        Ok(())
    }

    /// Overwrites both slots with `data` and the table with `progress` (recovery sets values
    /// that may be lower).
    ///
    /// # Errors
    /// As `store_with_progress`.
    pub fn reset(&self, data: CheckpointData, progress: Vec<StoreProgress>) -> Result<()> {
        let mut cur = self.lock();
        self.write_slots(&data, &progress)?;
        *cur = (data, progress);
        Ok(())
    }

    /// Closes the file (store close); later writes fail with `Closed`.
    pub fn close(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn write_slots(&self, d: &CheckpointData, progress: &[StoreProgress]) -> Result<()> {
        let slot = encode_slot(d, progress)?;
        let guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let file = guard.as_ref().ok_or(Error::Closed)?;
        for at in [SLOT_B_AT, 0] {
            if at == 0 {
                kill_point!("checkpoint.between_slots");
            }
            file.write_all_at(&slot, at)
                .map_err(|e| Error::io("write", &self.path, e))?;
            fs::sync_data(file, &self.path)?;
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
    fn rocketmq_layouts_are_read_when_no_slot_is_valid() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        // 4.x: three timestamps, the rest of the 4 KiB zero.
        let mut b = vec![0u8; 4096];
        b[0..8].copy_from_slice(&1_700_000_000_100i64.to_be_bytes());
        b[8..16].copy_from_slice(&1_700_000_000_050i64.to_be_bytes());
        std::fs::write(&p, &b).unwrap();
        let (cp, data) = Checkpoint::open(&p, false, 0o600).unwrap();
        assert_eq!(data, None);
        let r = cp.rocketmq().unwrap();
        assert_eq!(r.physic_msg_timestamp, 1_700_000_000_100);
        assert_eq!(r.logics_msg_timestamp, 1_700_000_000_050);
        assert_eq!(r.confirm_phy_offset, None);
        // 5.x: the confirm offset at 32.
        b[32..40].copy_from_slice(&4096i64.to_be_bytes());
        std::fs::write(&p, &b).unwrap();
        let (cp, _) = Checkpoint::open(&p, false, 0o600).unwrap();
        assert_eq!(cp.rocketmq().unwrap().confirm_phy_offset, Some(4096));
        // A negative field is not a checkpoint.
        b[32..40].copy_from_slice(&(-1i64).to_be_bytes());
        std::fs::write(&p, &b).unwrap();
        assert_eq!(
            Checkpoint::open(&p, false, 0o600).unwrap().0.rocketmq(),
            None
        );
        // An mqlite slot wins.
        let (cp, _) = Checkpoint::open(&p, true, 0o600).unwrap();
        cp.store(CheckpointData {
            physic_msg_timestamp: 9,
            ..Default::default()
        })
        .unwrap();
        drop(cp);
        let (cp, data) = Checkpoint::open(&p, false, 0o600).unwrap();
        assert!(data.is_some());
        assert_eq!(cp.rocketmq(), None);
    }

    fn progress(name: &str, offset: u64, ts: i64) -> StoreProgress {
        StoreProgress {
            name: name.to_owned(),
            offset,
            store_timestamp: ts,
        }
    }

    #[test]
    fn the_progress_table_round_trips_merges_per_name_and_a_torn_table_falls_back_to_b() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&p, true, 0o600).unwrap();
        let d = CheckpointData {
            confirm_phy_offset: 100,
            logics_dispatched_offset: 90,
            ..Default::default()
        };
        cp.store_with_progress(
            d,
            &[progress("consume_queue", 90, 7), progress("index", 40, 5)],
        )
        .unwrap();
        // Values only grow per name; a name not given keeps its entry.
        cp.store_with_progress(d, &[progress("index", 30, 9)])
            .unwrap();
        let want = vec![progress("consume_queue", 90, 7), progress("index", 40, 9)];
        assert_eq!(cp.progress(), want);
        drop(cp);
        let (cp, data) = Checkpoint::open(&p, true, 0o600).unwrap();
        assert_eq!((data, cp.progress()), (Some(d), want.clone()));
        // Slot A's table torn (its head intact): slot B is used, table and all.
        let older = CheckpointData {
            confirm_phy_offset: 50,
            ..d
        };
        let slot_b = encode_slot(&older, &[progress("index", 10, 1)]).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&slot_b, SLOT_B_AT).unwrap();
        f.write_all_at(&[0xFF; 4], SLOT_LEN as u64 + 20).unwrap();
        let (cp, data) = Checkpoint::open(&p, false, 0o600).unwrap();
        assert_eq!(
            (data, cp.progress()),
            (Some(older), vec![progress("index", 10, 1)])
        );
        // A name that does not fit is refused and nothing is written.
        let (cp, _) = Checkpoint::open(&p, true, 0o600).unwrap();
        let long = progress("a_name_longer_than_16", 1, 1);
        assert!(matches!(
            cp.store_with_progress(d, &[long]),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn golden_progress_table_layout() {
        let d = CheckpointData::default();
        let slot = encode_slot(&d, &[progress("consume_queue", 4096, 1_700_000_000_000)]).unwrap();
        assert_eq!(slot.len(), 64 + 4 + 32);
        assert_eq!(&slot[64..68], &[0, 0, 0, 1]);
        assert_eq!(&slot[68..84], b"consume_queue\0\0\0");
        assert_eq!(&slot[84..92], &4096i64.to_be_bytes());
        assert_eq!(&slot[92..100], &1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&slot[60..64], &crc::crc32(&slot[64..]).to_be_bytes());
        // The head is the version-1 slot: its CRC covers bytes 0..56 only.
        assert_eq!(CheckpointData::decode(&slot), Some(d));
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
