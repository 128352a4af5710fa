//! Commit-log recovery: find the end of valid data and cut the torn tail.
//!
//! The scan starts at a record boundary known to be durable (the checkpoint's watermark, or a
//! file start) and validates record by record: magic, length consistency, PHYSICALOFFSET equal
//! to the record's position, and (by default) the body CRC. A blank marker moves to the next
//! file; the first invalid record ends the log. An invalid record *below* the durable watermark
//! cannot be a torn write, so it is reported as corruption (naming file and offset) instead of
//! being truncated away. Nor can one that whole records follow, when the caller asks for that
//! check (a store without mqlite's exact durable offset): a torn write is the end of the data.
//!
//! Below the scan's start the log is durable but unread. Recovery relies on records there when
//! it re-dispatches from below the scan start or judges a consume-queue unit that points there;
//! it verifies them first (`verify_durable`, `DurableCheck`, always with both CRCs, since a
//! header byte that still decodes names a wrong queue or offset), so damage there is reported
//! as corruption instead of being taken for a stale unit or dispatched to the wrong queue.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::message::codec::{self, RecordCheck, RecordView};

use super::CommitLog;

/// How a recovery scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEnd {
    /// One past the last valid record.
    pub end: u64,
    /// Records validated.
    pub records: u64,
    /// True if the scan stopped at bytes that are not a record (a torn tail), not at zeros.
    pub torn: bool,
}

impl CommitLog {
    /// Scans from `from` (a record boundary) to the end of valid data, calling `on_record` for
    /// each valid record. `durable` is the offset below which every byte was flushed; with
    /// `tail_only`, an invalid record that whole records follow is corruption too.
    pub fn scan(
        &self,
        from: u64,
        check_crc: bool,
        durable: u64,
        tail_only: bool,
        mut on_record: impl FnMut(&RecordView<'_>) -> Result<()>,
    ) -> Result<ScanEnd> {
        let mut pos = from.max(self.files().min_offset());
        let mut records = 0u64;
        loop {
            // A file that exists but cannot be mapped is an error, never the end of the log.
            let Some(file) = self.files().try_find(pos)? else {
                return Ok(ScanEnd {
                    end: pos,
                    records,
                    torn: false,
                });
            };
            let in_file = pos - file.from_offset();
            let rest = (file.size() - in_file) as usize;
            let Some(buf) = file.slice(in_file, rest) else {
                return Ok(ScanEnd {
                    end: pos,
                    records,
                    torn: false,
                });
            };
            match codec::check_stored(buf, check_crc, Some(pos)) {
                RecordCheck::Record(n) => {
                    if let Ok(v) = RecordView::parse(buf, false) {
                        on_record(&v)?;
                    }
                    records += 1;
                    pos += u64::from(n);
                }
                RecordCheck::Blank => pos = self.roll_next_file(pos),
                RecordCheck::End => {
                    return Ok(ScanEnd {
                        end: pos,
                        records,
                        torn: false,
                    })
                }
                RecordCheck::Invalid(e) => {
                    if pos < durable {
                        return Err(Error::undecodable(
                            file.path(),
                            pos,
                            e,
                            format!("below the durable offset {durable}"),
                        ));
                    }
                    if tail_only {
                        if let Some(next) = self.whole_record_after(pos, buf) {
                            return Err(Error::undecodable(
                                file.path(),
                                pos,
                                e,
                                format!("a whole record follows at {next}, so not a torn tail"),
                            ));
                        }
                    }
                    return Ok(ScanEnd {
                        end: pos,
                        records,
                        torn: true,
                    });
                }
            }
        }
    }

    /// Verifies the records of `[from, to)`, every byte of which is durable (`from` a record
    /// boundary): each must be whole at its own position, both CRCs included, and the data must
    /// reach `to`. Returns where the verification stopped (`>= to`, a record boundary or a file
    /// start).
    ///
    /// # Errors
    /// `Corrupted` naming the file and offset of the first record that is not whole, or of the
    /// place where the data stops before `to`.
    pub fn verify_durable(&self, from: u64, to: u64) -> Result<u64> {
        let mut pos = from.max(self.files().min_offset());
        while pos < to {
            let Some(file) = self.files().find(pos) else {
                return Err(Error::Corrupted {
                    path: "commitlog".into(),
                    offset: pos,
                    reason: format!("no commit-log file holds {pos}, in the durable log"),
                    cause: None,
                });
            };
            let in_file = pos - file.from_offset();
            // Recovery has published each file up to the log's recovered end.
            let buf = file
                .slice(in_file, file.published().saturating_sub(in_file) as usize)
                .unwrap_or(&[]);
            match codec::check_stored(buf, true, Some(pos)) {
                RecordCheck::Record(n) => pos += u64::from(n),
                RecordCheck::Blank => pos = self.roll_next_file(pos),
                RecordCheck::End => {
                    return Err(Error::Corrupted {
                        path: file.path().to_path_buf(),
                        offset: pos,
                        reason: format!(
                            "the commit log's data stops at {pos}, in its durable part"
                        ),
                        cause: None,
                    })
                }
                RecordCheck::Invalid(e) => {
                    return Err(Error::undecodable(
                        file.path(),
                        pos,
                        e,
                        "a durable record recovery relies on",
                    ))
                }
            }
        }
        Ok(pos)
    }

    /// Where a whole record lies after the invalid one at `pos` (`buf`: the rest of its file):
    /// right after it, if its length field still fits the file, or at the start of any later
    /// file.
    fn whole_record_after(&self, pos: u64, buf: &[u8]) -> Option<u64> {
        let whole_at = |bytes: &[u8], at: u64| {
            RecordView::parse_verified(bytes).is_ok_and(|v| v.physical_offset() == at)
        };
        let total = buf
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes)
            .map_or(0, |t| t as usize);
        if total > 0 {
            if let Some(rest) = buf.get(total..) {
                if whole_at(rest, pos + total as u64) {
                    return Some(pos + total as u64);
                }
            }
        }
        let files = self.files();
        let mut start = pos - pos % files.file_size() + files.file_size();
        while let Some(file) = files.find(start) {
            let bytes = file.slice(0, file.size() as usize).unwrap_or(&[]);
            if whole_at(bytes, start) {
                return Some(start);
            }
            start += files.file_size();
        }
        None
    }

    /// The end of the last whole record stored before `flushed_ts` (0 when there is none):
    /// RocketMQ's checkpoint says every record stored before that time was flushed, and
    /// flushes are in log order, so everything below that end is durable. Only the newest file
    /// whose first record qualifies is walked.
    pub fn flushed_floor(&self, flushed_ts: i64) -> u64 {
        let files = self.files();
        let mut at = files.last_file().map(|f| f.from_offset());
        while let Some(start) = at {
            let Some(file) = files.find(start) else {
                break;
            };
            let mut pos = 0u64;
            while let Some(buf) = file.slice(pos, (file.size() - pos) as usize) {
                let whole = RecordView::parse_verified(buf)
                    .ok()
                    .filter(|v| v.physical_offset() == start + pos);
                match whole {
                    Some(v) if v.store_timestamp() < flushed_ts => {
                        pos += u64::from(v.total_size());
                    }
                    _ => break,
                }
            }
            if pos > 0 {
                return start + pos;
            }
            at = start
                .checked_sub(files.file_size())
                .filter(|&s| s >= files.min_offset());
        }
        0
    }

    /// Cuts everything at and after `end`: later files are deleted, the file holding `end`
    /// continues there (its tail zeroed when `zero_tail`), and the appender resumes at `end`.
    pub fn truncate_to(&self, end: u64, zero_tail: bool) -> Result<()> {
        self.files().drop_files_from(end + 1)?;
        let mut a = self.lock_appender();
        a.writer = None;
        if let Some(mut w) = self.files().last_writer()? {
            let (from, size) = (w.file().from_offset(), w.file().size());
            let local = end.saturating_sub(from).min(size);
            let zero_until = if zero_tail { size } else { local };
            w.truncate_to(local, zero_until)?;
            a.writer = Some(w);
        }
        self.set_max_offset(end);
        drop(a);
        self.set_flushed_offset(end);
        Ok(())
    }
}

/// Verifies, on demand and at most once per byte, the durable records from the start of a
/// commit-log file through a given offset (`CommitLog::verify_durable`): what a consume-queue
/// check needs before it may call a unit that does not match the bytes it points at stale.
/// Offsets asked for must lie below the recovered end of the log.
#[derive(Debug)]
pub struct DurableCheck<'a> {
    log: &'a CommitLog,
    /// Per file start: where verification of that file has reached.
    reached: RefCell<BTreeMap<u64, u64>>,
}

impl<'a> DurableCheck<'a> {
    /// A check of `log`, nothing verified yet.
    pub fn new(log: &'a CommitLog) -> Self {
        DurableCheck {
            log,
            reached: RefCell::new(BTreeMap::new()),
        }
    }

    /// Verifies every record from the start of the file holding `at` through the one covering
    /// `at`. Afterwards `at` is either the start of a whole record or not a record boundary.
    ///
    /// # Errors
    /// `Corrupted` for the first record there that is not whole.
    pub fn through(&self, at: u64) -> Result<()> {
        let size = self.log.files().file_size();
        let start = (at - at % size).max(self.log.files().min_offset());
        let done = self.reached.borrow().get(&start).copied().unwrap_or(start);
        if at < done {
            return Ok(());
        }
        let reached = self.log.verify_durable(done, at + 1)?;
        self.reached.borrow_mut().insert(start, reached);
        Ok(())
    }
}
