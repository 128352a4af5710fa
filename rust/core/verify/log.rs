//! The commit-log step of verification: every record from the oldest file on, read with
//! `pread` (never a mapping, never a lock), each checked whole (length, magic, structure,
//! PHYSICALOFFSET at its own position, body CRC, and the whole-record CRC where the property
//! is). END_OF_FILE markers must say exactly the rest of their file.
//!
//! Invariants
//! - Below the durable end (mqlite's checkpoint confirm offset; for a store without one that
//!   was closed cleanly, every byte written) any bytes that are not a whole record are damage.
//!   Past it, a writer may be filling the range: the first invalid bytes there end the scan
//!   as "in flight", never as damage.
//! - After damage the scan resynchronises at the next position that holds a whole record
//!   whose PHYSICALOFFSET names that position (or an END_OF_FILE marker for the rest of its
//!   file), in the same file or at the start of a later file, so one damaged record never
//!   hides the state of the ones after it. The damaged span is `[damage, resync point)`.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::DecodeError;
use crate::error::{Error, Result};
use crate::message::codec::{self, Peek, RecordCheck, RecordView, PHYSICAL_OFFSET_POS};
use crate::message::{sysflag, tags};
use crate::util::bytes::be_u32;
use crate::util::fs;

use super::report::{Damage, DamageKind};

/// One commit-log file.
#[derive(Debug, Clone)]
pub struct LogFile {
    /// Its start offset (its name).
    pub start: u64,
    /// Its path.
    pub path: PathBuf,
    /// Its length.
    pub len: u64,
}

/// What the scan kept of one whole record: what a consume-queue unit or an index entry
/// pointing at it must agree with.
#[derive(Debug, Clone, Copy)]
pub struct RecordInfo {
    /// Commit-log offset.
    pub offset: u64,
    /// TOTALSIZE.
    pub size: u32,
    /// Index into [`LogScan::topics`].
    pub topic: u32,
    /// Queue id.
    pub queue_id: u32,
    /// QUEUEOFFSET.
    pub queue_offset: u64,
    /// The tags code its unit must hold.
    pub tags_code: i64,
    /// True when dispatch puts it in a consume queue.
    pub dispatched: bool,
}

/// What the commit-log step found.
#[derive(Debug, Default)]
pub struct LogScan {
    /// The files, in offset order.
    pub files: Vec<LogFile>,
    /// Every whole record, in offset order.
    pub records: Vec<RecordInfo>,
    /// Topic names by index.
    pub topics: Vec<String>,
    /// Lowest offset held.
    pub min: u64,
    /// End of the valid data reached.
    pub end: u64,
    /// Start of a range past the durable end a writer may be filling.
    pub in_flight_from: Option<u64>,
    /// Damaged spans, in offset order (messages filled in later).
    pub damage: Vec<Damage>,
    /// Bytes read.
    pub bytes: u64,
}

impl LogScan {
    /// The whole record starting exactly at `offset`.
    pub fn record_at(&self, offset: u64) -> Option<&RecordInfo> {
        let i = self
            .records
            .binary_search_by_key(&offset, |r| r.offset)
            .ok()?;
        self.records.get(i)
    }

    /// The whole records at or after `offset`.
    pub fn records_from(&self, offset: u64) -> &[RecordInfo] {
        let i = self.records.partition_point(|r| r.offset < offset);
        self.records.get(i..).unwrap_or(&[])
    }

    /// The file holding `offset`.
    pub fn file_of(&self, offset: u64) -> Option<&LogFile> {
        self.files
            .iter()
            .rev()
            .find(|f| f.start <= offset && offset < f.start + f.len)
    }

    /// The record bytes at `offset` (`len` bytes, fewer at a file's end), read again.
    pub fn read_at(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let f = self.file_of(offset)?;
        let in_file = offset - f.start;
        let len = len.min((f.len - in_file) as usize);
        let file = fs::open_ro(&f.path).ok()?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, in_file).ok()?;
        Some(buf)
    }
}

/// What lies at a position: a verified record, or what `codec::check` says of other bytes.
enum Verified<'a> {
    Record(RecordView<'a>),
    Other(RecordCheck),
}

/// The commit-log files of the store at `root`, in offset order (temporary names ignored).
pub fn list_files(root: &Path) -> Result<Vec<LogFile>> {
    let dir = root.join("commitlog");
    let mut files = Vec::new();
    for (name, path) in fs::dir_entries(&dir)? {
        let Some(start) = fs::parse_offset_file_name(&name) else {
            continue;
        };
        let md = match std::fs::symlink_metadata(&path) {
            Ok(md) => md,
            // Retention removed it since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("stat", &path, e)),
        };
        if !md.is_file() {
            continue;
        }
        files.push(LogFile {
            start,
            path,
            len: md.len(),
        });
    }
    files.sort_by_key(|f| f.start);
    Ok(files)
}

/// Scans every record of `files`. `durable` is the offset below which every byte was flushed
/// (`None`: all written data, a store without mqlite's checkpoint closed cleanly).
/// `progress` is told the bytes of each file as it is done.
pub fn scan(
    files: Vec<LogFile>,
    durable: Option<u64>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<LogScan> {
    let mut s = LogScan {
        min: files.first().map_or(0, |f| f.start),
        ..LogScan::default()
    };
    let mut topic_ids: HashMap<String, u32> = HashMap::new();
    let mut pos = s.min;
    let below_durable = |at: u64| durable.is_none_or(|d| at < d);
    let mut i = 0;
    'files: while i < files.len() {
        let f = &files[i];
        i += 1;
        if f.start + f.len <= pos {
            progress(f.len)?;
            continue;
        }
        let data = match read_file(&f.path) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => return Err(e),
        };
        s.bytes += data.len() as u64;
        if pos < f.start && s.end == pos && below_durable(pos) && durable.is_some() {
            // A file missing between two others: its records are gone.
            s.damage.push(Damage {
                file: f
                    .path
                    .with_file_name(fs::offset_file_name(pos))
                    .to_string_lossy()
                    .into_owned(),
                offset: pos,
                file_offset: 0,
                length: f.start - pos,
                kind: DamageKind::LogShort,
                detail: format!("no commit-log file holds {pos}..{}", f.start),
                messages: Vec::new(),
            });
        }
        pos = pos.max(f.start);
        let mut local = (pos - f.start) as usize;
        while local < data.len() {
            let at = f.start + local as u64;
            let buf = &data[local..];
            // One parse with both CRCs for a record (what `check_stored` does in three).
            let check = match codec::peek(buf) {
                Peek::Record => match RecordView::parse_verified(buf) {
                    Ok(v) if v.physical_offset() == at => Verified::Record(v),
                    Ok(_) => Verified::Other(RecordCheck::Invalid(DecodeError::BadLength)),
                    Err(e) => Verified::Other(RecordCheck::Invalid(e)),
                },
                _ => Verified::Other(codec::check(buf, false, Some(at))),
            };
            let (kind, detail) = match check {
                Verified::Record(v) => {
                    let n = v.total_size();
                    let topic = match topic_ids.get(v.topic()) {
                        Some(&id) => id,
                        None => {
                            let id = s.topics.len() as u32;
                            topic_ids.insert(v.topic().to_owned(), id);
                            s.topics.push(v.topic().to_owned());
                            id
                        }
                    };
                    s.records.push(RecordInfo {
                        offset: at,
                        size: n,
                        topic,
                        queue_id: v.queue_id(),
                        queue_offset: v.queue_offset(),
                        tags_code: tags::of_stored(v.topic(), v.properties(), v.store_timestamp()),
                        dispatched: sysflag::is_dispatched(v.sysflag()),
                    });
                    local += n as usize;
                    s.end = f.start + local as u64;
                    continue;
                }
                Verified::Other(RecordCheck::Record(_)) => {
                    // `peek` saw zeros or a marker, `check` a record: not possible, but never
                    // taken for one without its CRCs.
                    (DamageKind::LogRecord, "undecidable record".into())
                }
                Verified::Other(RecordCheck::Blank) => {
                    s.end = f.start + data.len() as u64;
                    pos = s.end;
                    progress(f.len)?;
                    continue 'files;
                }
                Verified::Other(RecordCheck::End) => {
                    (DamageKind::LogZeroed, "zeros where a record belongs".into())
                }
                Verified::Other(RecordCheck::Invalid(e)) => (DamageKind::LogRecord, e.to_string()),
            };
            if !below_durable(at) {
                // Zeros past the durable end are the end of the data; other bytes there may
                // be a record a writer is still filling.
                if kind == DamageKind::LogRecord {
                    s.in_flight_from = Some(at);
                }
                progress(f.len)?;
                break 'files;
            }
            let next = resync(&data, local, f.start).or_else(|| {
                files
                    .get(i..)
                    .unwrap_or(&[])
                    .iter()
                    .find(|g| starts_whole(g))
                    .map(|g| g.start)
            });
            match next {
                Some(n) => {
                    s.damage.push(log_damage(f, at, n - at, kind, detail));
                    if n < f.start + data.len() as u64 {
                        local = (n - f.start) as usize;
                        continue;
                    }
                    pos = n;
                    progress(f.len)?;
                    continue 'files;
                }
                None => {
                    let (kind, detail, length) = match (kind, durable) {
                        (DamageKind::LogZeroed, Some(d)) => (
                            DamageKind::LogShort,
                            format!("the log ends at {at}, but {d} bytes were confirmed durable"),
                            d - at,
                        ),
                        (DamageKind::LogZeroed, None) => {
                            // The end of the data of a store closed cleanly.
                            progress(f.len)?;
                            break 'files;
                        }
                        (k, _) => (k, detail, f.start + data.len() as u64 - at),
                    };
                    s.damage.push(log_damage(f, at, length, kind, detail));
                    progress(f.len)?;
                    break 'files;
                }
            }
        }
        pos = f.start + data.len() as u64;
        progress(f.len)?;
    }
    s.files = files;
    Ok(s)
}

fn log_damage(f: &LogFile, at: u64, length: u64, kind: DamageKind, detail: String) -> Damage {
    Damage {
        file: f.path.to_string_lossy().into_owned(),
        offset: at,
        file_offset: at - f.start,
        length,
        kind,
        detail,
        messages: Vec::new(),
    }
}

/// The whole file, or `None` when it is gone (retention removed it during the scan).
fn read_file(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

/// The first position after `local` in `data` (a file starting at `start`) that holds a whole
/// record at its own offset, or an END_OF_FILE marker for exactly the rest of the file.
pub fn resync(data: &[u8], local: usize, start: u64) -> Option<u64> {
    // Every record and marker has its magic at +4: only a position whose byte there is a
    // magic's first byte is a candidate, which skips zeros and bodies a byte compare at a time.
    const FIRST: [u8; 3] = [
        (codec::MAGIC_V1 >> 24) as u8,
        (codec::MAGIC_V2 >> 24) as u8,
        (codec::BLANK_MAGIC >> 24) as u8,
    ];
    // The damaged record's own length first, when a whole record lies there: a body that
    // happens to hold bytes of a record never shortens the span.
    let total = data
        .get(local..local + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes) as usize;
    if total > 0 {
        if let Some(rest) = data.get(local + total..).filter(|r| r.len() >= 8) {
            let at = start + (local + total) as u64;
            if matches!(
                codec::check_stored(rest, true, Some(at)),
                RecordCheck::Record(_) | RecordCheck::Blank
            ) {
                return Some(at);
            }
        }
    }
    let mut p = local + 1;
    while p + 8 <= data.len() {
        p += data.get(p + 4..)?.iter().position(|b| FIRST.contains(b))?;
        let rest = data.get(p..)?;
        let at = start + p as u64;
        let named = rest
            .get(PHYSICAL_OFFSET_POS..PHYSICAL_OFFSET_POS + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        let marker = be_u32(rest, 4) == Some(codec::BLANK_MAGIC)
            && be_u32(rest, 0).is_some_and(|n| n as usize == rest.len());
        if marker
            || (named == Some(at)
                && matches!(
                    codec::check_stored(rest, true, Some(at)),
                    RecordCheck::Record(_)
                ))
        {
            return Some(at);
        }
        p += 1;
    }
    None
}

/// True when `f` starts with a whole record or an END_OF_FILE marker.
fn starts_whole(f: &LogFile) -> bool {
    let Ok(file) = fs::open_ro(&f.path) else {
        return false;
    };
    let mut buf = vec![0u8; f.len as usize];
    if file.read_exact_at(&mut buf, 0).is_err() {
        return false;
    }
    matches!(
        codec::check_stored(&buf, true, Some(f.start)),
        RecordCheck::Record(_) | RecordCheck::Blank
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::message::codec::{RecordMeta, RECORD_CRC_LEN};

    /// One record (whole-record CRC included) at commit-log offset `at`.
    fn record(at: u64, body: &[u8]) -> Vec<u8> {
        let n = codec::encoded_len(body.len(), 1, RECORD_CRC_LEN).unwrap();
        let mut out = vec![0u8; n];
        let meta = RecordMeta {
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: at,
            sysflag: 0,
            born_timestamp: 1,
            store_timestamp: 1,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        codec::encode_with_record_crc(&mut out, &meta, codec::body_crc(body), body, b"T", &[]);
        out
    }

    /// Three records from offset 0; the middle one's body is `body` (built knowing where the
    /// body starts). Returns the bytes and the three offsets.
    fn three(body: impl Fn(u64) -> Vec<u8>) -> (Vec<u8>, [u64; 3]) {
        let mut data = record(0, b"first");
        let second = data.len() as u64;
        data.extend(record(second, &body(second + 88)));
        let third = data.len() as u64;
        data.extend(record(third, b"third"));
        data.extend(vec![0u8; 64]);
        (data, [0, second, third])
    }

    #[test]
    fn resync_finds_the_record_after_a_damaged_body_or_length() {
        let (mut data, [_, second, third]) = three(|_| b"second body".to_vec());
        data[second as usize + 90] ^= 1;
        assert_eq!(resync(&data, second as usize, 0), Some(third));
        data[second as usize] ^= 0x40; // TOTALSIZE: the scan finds the next record anyway
        assert_eq!(resync(&data, second as usize, 0), Some(third));
    }

    /// A body that holds a whole record at its own position never shortens the damaged span
    /// while the damaged record's length still leads to a whole record.
    #[test]
    fn a_record_inside_a_damaged_body_is_not_taken_for_the_next() {
        let (mut data, [_, second, third]) = three(|body_at| {
            let mut b = b"pad".to_vec();
            b.extend(record(body_at + 3, b"fake"));
            b
        });
        data[second as usize + 88] ^= 1; // the pad, outside the embedded record
        assert_eq!(resync(&data, second as usize, 0), Some(third));
    }

    #[test]
    fn resync_finds_nothing_in_zeros() {
        let data = vec![0u8; 4096];
        assert_eq!(resync(&data, 0, 0), None);
    }
}
