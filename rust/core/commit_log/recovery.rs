//! Commit-log recovery: find the end of valid data and cut the torn tail.
//!
//! The scan starts at a record boundary known to be durable (the checkpoint's watermark, or a
//! file start) and validates record by record: magic, length consistency, PHYSICALOFFSET equal
//! to the record's position, and (by default) the body CRC. A blank marker moves to the next
//! file; the first invalid record ends the log. An invalid record *below* the durable watermark
//! cannot be a torn write, so it is reported as corruption (naming file and offset) instead of
//! being truncated away.

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
    /// each valid record. `durable` is the offset below which every byte was flushed.
    pub fn scan(
        &self,
        from: u64,
        check_crc: bool,
        durable: u64,
        mut on_record: impl FnMut(&RecordView<'_>) -> Result<()>,
    ) -> Result<ScanEnd> {
        let mut pos = from.max(self.files().min_offset());
        let mut records = 0u64;
        loop {
            let Some(file) = self.files().find(pos) else {
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
                        return Err(Error::Corrupted {
                            path: file.path().to_path_buf(),
                            offset: pos,
                            reason: format!("{e} below the durable offset {durable}"),
                        });
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

    /// Cuts everything at and after `end`: later files are deleted, the file holding `end`
    /// continues there (its tail zeroed when `zero_tail`), and the appender resumes at `end`.
    pub fn truncate_to(&self, end: u64, zero_tail: bool) -> Result<()> {
        self.files().drop_files_from(end + 1)?;
        let mut a = self.lock_appender();
        a.writer = None;
        if let Some(last) = self.files().last_file() {
            if let Some(mut w) = last.writer() {
                let local = end.saturating_sub(last.from_offset()).min(last.size());
                let zero_until = if zero_tail { last.size() } else { local };
                w.truncate_to(local, zero_until);
                a.writer = Some(w);
            }
        }
        self.set_max_offset(end);
        drop(a);
        self.set_flushed_offset(end);
        Ok(())
    }
}
