//! The topic journal, `config/topics.journal` (FORMAT.md §7.1): topic changes appended since
//! `topics.json` was last written whole.
//!
//! Invariants:
//! - A change is durable when `append` returns: its record is written with one `write` and
//!   made durable with `fdatasync`. Appends are serialised by the caller (the topic table's
//!   write lock, and between shared writer processes the journal lock, topic_config/shared.rs),
//!   so at most the last record of the file can be unsynced, and a crash can tear only the tail.
//! - While shared writers have the store open, the file is only appended to (never replaced):
//!   each of them reads the records the others appended from where it last read (`read_new`),
//!   and cuts a dead appender's torn tail before its own append (`prepare_append`).
//! - Records are idempotent: a put carries the topic's whole config, a remove its name. The
//!   table is `topics.json` (or its `.bak`) with every record replayed in order, so replaying
//!   a record `topics.json` already holds changes nothing.
//! - The journal is only ever emptied after `topics.json` holding every record was written
//!   (`TopicTable::compact`), by replacing it with a fresh file (temp, fsync, rename, fsync
//!   dir): a crash before the rename replays the old records over the new table, harmlessly.
//! - Reading never changes the file. A torn tail (an incomplete last record, a last record whose
//!   CRC does not match, or zeros after the last whole record) is ignored; a bad record with
//!   bytes after it, or a record whose CRC matches but which does not decode, is damage: an
//!   `Error::ConfigFile` naming the file and the byte offset, never a table taken in part.
//!
//! Crash behaviour: a crash between a record's `write` and its `fdatasync` leaves it whole, torn
//! or absent; the call that made it had not returned. The writer compacts at open (a shared
//! writer cuts the tail under the journal lock), so a torn tail is never followed by new
//! records.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{decode, TopicConfig};
use crate::error::{Error, Result};
use crate::util::bytes::be_u32;
use crate::util::crc::crc32;
use crate::util::fs;
use crate::util::kill_point::kill_point;

/// `"MQTJ"`: the first four bytes of a topic journal.
const MAGIC: u32 = 0x4D51_544A;
/// Version of the journal layout.
const VERSION: u32 = 1;
/// Bytes of the file header (magic, version).
pub(super) const HEADER: u64 = 8;
/// Bytes of a record's head (payload length, payload CRC).
const RECORD_HEAD: usize = 8;
/// Largest payload: a topic config with its attributes is a few hundred bytes, so a larger
/// length is damage, not a record.
const MAX_PAYLOAD: u32 = 1 << 20;

/// One change of the topic table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// The topic's whole config (created or changed).
    Put(TopicConfig),
    /// The topic is gone.
    Remove(String),
}

impl Change {
    fn payload(&self) -> Result<Vec<u8>> {
        let value = match self {
            Change::Put(c) => serde_json::json!({ "put": c }),
            Change::Remove(t) => serde_json::json!({ "remove": t }),
        };
        serde_json::to_vec(&value).map_err(|e| Error::InvalidConfig {
            field: "topics.journal",
            reason: e.to_string(),
        })
    }
}

/// The records of a journal file, as read.
#[derive(Debug, Default)]
pub(super) struct Replay {
    /// The changes of the whole records, in file order.
    pub changes: Vec<Change>,
    /// True when bytes after the last whole record were ignored (a torn tail).
    pub torn: bool,
    /// Where the last whole record ends in the file (the header's end when there is none; 0
    /// when the file has no header).
    pub end: u64,
}

/// Reads the journal at `path`; `None` when there is none. Changes nothing on disk.
///
/// # Errors
/// `ConfigFile` for a file that is not a topic journal or holds a damaged record before its
/// tail; an I/O error reading it.
pub(super) fn read(path: &Path) -> Result<Option<Replay>> {
    match fs::read_if_exists(path)? {
        Some(bytes) => parse(path, &bytes).map(Some),
        None => Ok(None),
    }
}

/// The records of a journal's bytes (see the module's invariants for what is a torn tail).
pub(super) fn parse(path: &Path, bytes: &[u8]) -> Result<Replay> {
    let damaged = |at: usize, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field: format!("byte {at}"),
        reason,
    };
    // The header is written with the file's creation (temp, fsync, rename), so it is whole
    // unless the file is a creation the power cut undid in part: nothing but zeros.
    match (be_u32(bytes, 0), be_u32(bytes, 4)) {
        (Some(MAGIC), Some(VERSION)) => {}
        (Some(MAGIC), Some(v)) => {
            return Err(damaged(4, format!("journal version {v} is not {VERSION}")))
        }
        _ if bytes.iter().all(|&b| b == 0) => {
            return Ok(Replay {
                torn: !bytes.is_empty(),
                ..Replay::default()
            });
        }
        _ => return Err(damaged(0, "not a topic journal (bad magic)".to_owned())),
    }
    records(
        path,
        bytes.get(HEADER as usize..).unwrap_or_default(),
        HEADER,
    )
}

/// The records of `bytes`, the journal's bytes from offset `base` (where a record starts, or
/// the header ends) to the end of the file; errors name offsets in the file.
pub(super) fn records(path: &Path, bytes: &[u8], base: u64) -> Result<Replay> {
    let damaged = |at: usize, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field: format!("byte {}", base + at as u64),
        reason,
    };
    let all_zero = |from: usize| bytes.get(from..).is_none_or(|r| r.iter().all(|&b| b == 0));
    let mut replay = Replay::default();
    let mut at = 0;
    while at < bytes.len() {
        let rest = bytes.len() - at;
        let (Some(len), Some(crc)) = (be_u32(bytes, at), be_u32(bytes, at + 4)) else {
            // Less than a record head left: the tail of an append.
            replay.torn = true;
            break;
        };
        let end = at + RECORD_HEAD + len as usize;
        if len == 0 || len > MAX_PAYLOAD {
            if all_zero(at) || end > bytes.len() {
                replay.torn = true;
                break;
            }
            return Err(damaged(
                at,
                format!("record length {len} is not in [1, {MAX_PAYLOAD}]"),
            ));
        }
        let Some(payload) = bytes.get(at + RECORD_HEAD..end) else {
            // The record runs past the end of the file: its append was cut short.
            replay.torn = true;
            break;
        };
        if crc32(payload) != crc {
            if end == bytes.len() || all_zero(end) {
                replay.torn = true;
                break;
            }
            return Err(damaged(
                at,
                format!(
                    "record CRC mismatch with {} bytes after it",
                    rest - (end - at)
                ),
            ));
        }
        replay
            .changes
            .push(decode_change(path, base + at as u64, payload)?);
        at = end;
    }
    // Every `break` above leaves `at` at the start of the torn tail.
    replay.end = base + at as u64;
    Ok(replay)
}

/// A whole record's payload: `{"put": <topic config>}` or `{"remove": "<topic>"}`.
fn decode_change(path: &Path, at: u64, payload: &[u8]) -> Result<Change> {
    let damaged = |reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field: format!("byte {at}"),
        reason,
    };
    let value: Value =
        serde_json::from_slice(payload).map_err(|e| damaged(format!("not valid JSON: {e}")))?;
    let Some(o) = value.as_object().filter(|o| o.len() == 1) else {
        return Err(damaged(
            "expected {\"put\": ...} or {\"remove\": ...}".to_owned(),
        ));
    };
    if let Some(config) = o.get("put") {
        let name = config
            .get("topicName")
            .and_then(Value::as_str)
            .ok_or_else(|| damaged("put: topicName missing or not a string".to_owned()))?;
        return decode::entry(path, name, config).map(Change::Put);
    }
    match o.get("remove").and_then(Value::as_str) {
        Some(topic) => match crate::message::validate::check_topic(topic) {
            Ok(()) => Ok(Change::Remove(topic.to_owned())),
            Err(e) => Err(damaged(format!("remove: {e}"))),
        },
        None => Err(damaged(
            "expected {\"put\": ...} or {\"remove\": ...}".to_owned(),
        )),
    }
}

/// The encoded records of `changes`, one after another.
pub(super) fn encode(changes: &[Change]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for change in changes {
        let payload = change.payload()?;
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_PAYLOAD)
            .ok_or_else(|| Error::InvalidArgument {
                field: "topic",
                reason: format!("config of {} bytes is too large", payload.len()),
            })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&crc32(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
    }
    Ok(out)
}

/// The writer's handle on the journal: appends records and starts it afresh.
#[derive(Debug)]
pub(super) struct Journal {
    path: PathBuf,
    mode: u32,
    /// Open for appending once the file exists with a header this writer made or checked.
    file: Option<File>,
    /// Bytes of the file (header included); 0 when there is none.
    len: u64,
    /// An append failed part way: the file may hold bytes of a change that was undone, so no
    /// record may follow them; the next change starts a fresh journal (through a compaction).
    broken: bool,
}

impl Journal {
    /// The journal of `path`, not yet opened.
    pub(super) fn new(path: PathBuf, mode: u32) -> Self {
        Journal {
            path,
            mode,
            file: None,
            len: 0,
            broken: false,
        }
    }

    /// Bytes of records in the file (header excluded).
    pub(super) fn record_bytes(&self) -> u64 {
        self.len.saturating_sub(HEADER)
    }

    /// True when the next change must start a fresh journal rather than append.
    pub(super) fn broken(&self) -> bool {
        self.broken
    }

    /// Appends `changes` as one write and makes them durable. On an error the file is cut back
    /// to where it was if possible, and the journal is marked broken either way.
    pub(super) fn append(&mut self, changes: &[Change]) -> Result<()> {
        let bytes = encode(changes)?;
        if self.file.is_none() {
            self.reset()?;
        }
        let Some(file) = self.file.as_mut() else {
            return Err(Error::io(
                "open",
                &self.path,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        };
        let written = file
            .write_all(&bytes)
            .map_err(|e| Error::io("write", &self.path, e))
            .and_then(|()| {
                kill_point!("topics.journal_unsynced");
                fs::sync_data(file, &self.path)
            });
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                // The records are not acknowledged: take their bytes back so that a replay
                // cannot apply them, and start afresh at the next change in any case.
                let _ = file.set_len(self.len);
                self.broken = true;
                self.file = None;
                Err(e)
            }
        }
    }

    /// Shared writers: where the records this writer knows end (what a joining writer's load
    /// read), so that `read_new` reads only the records after them.
    pub(super) fn known(&mut self, end: u64) {
        self.len = end;
    }

    /// Shared writers, holding the journal lock: the whole records other processes appended
    /// since this writer last read or wrote. A torn tail (an appender that died mid-record) is
    /// left to `prepare_append`.
    ///
    /// # Errors
    /// `ConfigFile` for a damaged record, or a file shorter than the records already read (it
    /// was replaced while writers had it open); an I/O error reading.
    pub(super) fn read_new(&mut self) -> Result<Replay> {
        if self.file.is_none() {
            match open_append(&self.path) {
                Ok(f) => self.file = Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(Replay {
                        end: self.len,
                        ..Replay::default()
                    })
                }
                Err(e) => return Err(Error::io("open", &self.path, e)),
            }
        }
        let Some(file) = self.file.as_ref() else {
            return Ok(Replay::default());
        };
        let size = file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?
            .len();
        if size < self.len {
            return Err(Error::ConfigFile {
                path: self.path.clone(),
                field: format!("byte {size}"),
                reason: format!(
                    "ends before the {} bytes of records already read: replaced while writers \
                     had it open",
                    self.len
                ),
            });
        }
        let from = if self.len < HEADER { 0 } else { self.len };
        let mut bytes = vec![0; (size - from) as usize];
        file.read_exact_at(&mut bytes, from)
            .map_err(|e| Error::io("read", &self.path, e))?;
        let replay = match from {
            0 => parse(&self.path, &bytes)?,
            _ => records(&self.path, &bytes, from)?,
        };
        self.len = replay.end;
        Ok(replay)
    }

    /// Shared writers, holding the journal lock, after `read_new`: cuts a torn tail so that
    /// the next record follows whole ones, or creates the journal when there is none (or one
    /// without a header, which holds no record).
    pub(super) fn prepare_append(&mut self) -> Result<()> {
        self.broken = false;
        match &self.file {
            Some(f) if self.len >= HEADER => {
                let size = f
                    .metadata()
                    .map_err(|e| Error::io("stat", &self.path, e))?
                    .len();
                if size > self.len {
                    // Made durable by the next append's `fdatasync`.
                    f.set_len(self.len)
                        .map_err(|e| Error::io("truncate", &self.path, e))?;
                }
                Ok(())
            }
            _ => self.reset(),
        }
    }

    /// Closes the file without compacting (a shared writer that is not the last to close).
    pub(super) fn close_file(&mut self) {
        self.file = None;
    }

    /// Closes the file (a store's close). Only when every record is in `topics.json`: the next
    /// append starts a fresh journal.
    pub(super) fn release(&mut self) {
        if self.record_bytes() == 0 && !self.broken {
            self.file = None;
        }
    }

    /// Replaces the journal with an empty one (a header only) atomically and opens it for
    /// appending. Only after `topics.json` holds every record of the old one.
    pub(super) fn reset(&mut self) -> Result<()> {
        self.file = None;
        let mut header = Vec::with_capacity(HEADER as usize);
        header.extend_from_slice(&MAGIC.to_be_bytes());
        header.extend_from_slice(&VERSION.to_be_bytes());
        fs::stage(&self.path, &header, self.mode)?.replace(false)?;
        let file = open_append(&self.path).map_err(|e| Error::io("open", &self.path, e))?;
        self.file = Some(file);
        self.len = HEADER;
        self.broken = false;
        Ok(())
    }
}

/// The journal at `path`, open for reading and appending.
fn open_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, queues: u32) -> TopicConfig {
        TopicConfig::new(name, queues, 6, false)
    }

    fn file(changes: &[Change]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&MAGIC.to_be_bytes());
        bytes.extend_from_slice(&VERSION.to_be_bytes());
        bytes.extend(encode(changes).unwrap());
        bytes
    }

    #[test]
    fn records_round_trip() {
        let changes = vec![
            Change::Put(config("A", 4)),
            Change::Remove("A".to_owned()),
            Change::Put(config("B", 1024)),
        ];
        let r = parse(Path::new("j"), &file(&changes)).unwrap();
        assert_eq!(r.changes, changes);
        assert!(!r.torn);
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail_never_a_record() {
        let whole = vec![Change::Put(config("A", 4))];
        let both = file(&[Change::Put(config("A", 4)), Change::Put(config("B", 8))]);
        let first_end = file(&whole).len();
        for cut in first_end + 1..both.len() {
            let r = parse(Path::new("j"), &both[..cut]).unwrap();
            assert_eq!(r.changes, whole, "cut at {cut}");
            assert!(r.torn, "cut at {cut}");
            assert_eq!(r.end, first_end as u64, "cut at {cut}");
            // Read from the first record's end, as a shared writer reads new records.
            let r = records(Path::new("j"), &both[first_end..cut], first_end as u64).unwrap();
            assert!(r.changes.is_empty() && r.torn && r.end == first_end as u64);
        }
        let r = records(Path::new("j"), &both[first_end..], first_end as u64).unwrap();
        assert_eq!(r.changes, vec![Change::Put(config("B", 8))]);
        assert_eq!((r.torn, r.end), (false, both.len() as u64));
        // A last record with a flipped byte, or zeros where it should be: torn, cut off.
        for damage in [
            |b: &mut Vec<u8>| *b.last_mut().unwrap() ^= 1,
            |b: &mut Vec<u8>| {
                let n = b.len();
                b[n - 5..].fill(0)
            },
        ] {
            let mut bad = both.clone();
            damage(&mut bad);
            let r = parse(Path::new("j"), &bad).unwrap();
            assert_eq!((r.changes, r.torn), (whole.clone(), true));
        }
        let mut zeros = both.clone();
        zeros.extend([0u8; 100]);
        let r = parse(Path::new("j"), &zeros).unwrap();
        assert_eq!((r.changes.len(), r.torn), (2, true));
    }

    #[test]
    fn damage_before_the_tail_is_an_error_naming_the_offset() {
        let mut bad = file(&[Change::Put(config("A", 4)), Change::Put(config("B", 8))]);
        bad[HEADER as usize + RECORD_HEAD + 2] ^= 0x20;
        match parse(Path::new("/s/config/topics.journal"), &bad) {
            Err(Error::ConfigFile { path, field, .. }) => {
                assert_eq!(path, Path::new("/s/config/topics.journal"));
                assert_eq!(field, "byte 8");
            }
            other => panic!("{other:?}"),
        }
        // Read from a record past the header, the offset named is still the file's.
        match records(Path::new("j"), &bad[HEADER as usize..], HEADER) {
            Err(Error::ConfigFile { field, .. }) => assert_eq!(field, "byte 8"),
            other => panic!("{other:?}"),
        }
        // A CRC-valid record that does not decode is damage too (here: a path-like name).
        let mut payload =
            br#"{"put":{"topicName":"../x","perm":6,"readQueueNums":1,"writeQueueNums":1}}"#
                .to_vec();
        let mut bytes = file(&[]);
        bytes.extend((payload.len() as u32).to_be_bytes());
        bytes.extend(crc32(&payload).to_be_bytes());
        bytes.append(&mut payload);
        assert!(matches!(
            parse(Path::new("j"), &bytes),
            Err(Error::ConfigFile { .. })
        ));
        assert!(matches!(
            parse(Path::new("j"), b"{\"not\": \"a journal\"}"),
            Err(Error::ConfigFile { .. })
        ));
        let r = parse(Path::new("j"), &[0u8; 5]).unwrap();
        assert!(r.changes.is_empty() && r.torn);
    }
}
