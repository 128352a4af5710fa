//! The append path: the fits-or-pad-and-roll decision, queue-offset assignment, encoding.
//!
//! Everything here runs under the commit log's single append lock, so queue offsets are
//! assigned in commit-log order and the store timestamp never decreases along the log (unless
//! the wall clock steps back).

use std::sync::Arc;

use super::queue_table::QueueTable;
use crate::error::{Error, Result};
use crate::mapped_file::FileWriter;
use crate::mapped_file_queue::fence::FillFence;
use crate::mapped_file_queue::MappedFileQueue;
use crate::message::codec::{self, RecordMeta, END_FILE_MIN_BLANK_LENGTH, HEAD_LEN};
use crate::message::{sysflag, MessageRef};
use crate::shared::protocol::QueueSlot;
use crate::util::clock::Clock;
use crate::util::kill_point::kill_point;

/// Where one appended record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Commit-log offset of the record.
    pub physical_offset: u64,
    /// Record size in bytes.
    pub size: u32,
    /// Queue offset assigned (0 for prepared / rolled-back transaction records).
    pub queue_offset: u64,
    /// Store timestamp written into the record.
    pub store_timestamp: i64,
}

impl Appended {
    /// The record's offset message id (store host and commit-log offset), as a reader gets it
    /// from `RecordView::offset_msg_id`.
    pub fn offset_msg_id(&self) -> String {
        crate::message::msg_id::offset_msg_id(&codec::STORE_HOST, self.physical_offset)
    }
}

/// State guarded by the append lock.
#[derive(Debug, Default)]
pub struct Appender {
    pub(crate) writer: Option<FileWriter>,
    /// Next queue offset per topic and queue id (RocketMQ's topicQueueTable). A shared
    /// writer's queue offsets are the writer mapping's: from its first shared append this
    /// table is left as recovery made it.
    pub(crate) queue_offsets: QueueTable<u64>,
    /// Shared writers: the writer mapping's slot of each queue appended to (shared.rs).
    pub(crate) shared_slots: QueueTable<Option<QueueSlot>>,
    /// Set after a failed flush: every later append fails with `Poisoned` and this cause.
    pub(crate) poisoned: Option<Arc<Error>>,
    // Reused encoding buffer of batch appends.
    scratch: Vec<u8>,
    // The latest store timestamp written: store timestamps never decrease along the log, even
    // when a caller's clock reading (`append_one`'s `now`) was taken before the lock.
    last_store_ts: i64,
    // Where store timestamps are read when the caller did not read the clock itself.
    pub(crate) clock: Clock,
}

/// A record ready to be written: the message plus its precomputed size and body CRC (computed
/// outside the lock).
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    pub(crate) msg: MessageRef<'a>,
    pub(crate) len: usize,
    pub(crate) crc: u32,
}

impl<'a> Prepared<'a> {
    /// Sizes and checksums `msg`; fails if a field length cannot be encoded. Always inlined:
    /// called once per message of a batch, whose loop otherwise reads each result back from
    /// the stack with wide loads straddling the callee's narrower stores, which the CPU cannot
    /// forward (a stall of several nanoseconds per message). A plain `#[inline]` was honoured
    /// in the crate's own build but not in the Python module's, where `put_batch_to` is
    /// inlined into the binding (perf annotate: 46% of its samples on that one load).
    #[inline(always)]
    pub fn new(msg: MessageRef<'a>) -> Result<Self> {
        // Every record ends with the whole-record CRC property (FORMAT.md §1.5).
        let props = msg.properties.len() + codec::RECORD_CRC_LEN;
        let len = codec::encoded_len(msg.body.len(), msg.topic.len(), props).ok_or_else(|| {
            Error::InvalidMessage {
                reason: "record fields too long".into(),
            }
        })?;
        Ok(Prepared {
            msg,
            len,
            crc: codec::body_crc(msg.body),
        })
    }
}

impl Appender {
    /// Next queue offset of (topic, queue id).
    pub fn next_queue_offset(&self, topic: &str, queue_id: u32) -> u64 {
        self.queue_offsets.get(topic, queue_id)
    }

    /// Records that (topic, queue id) continues at `next` (recovery rebuilds the table).
    pub fn set_queue_offset(&mut self, topic: &str, queue_id: u32, next: u64) {
        if let Some(slot) = self.queue_offsets.slot(topic, queue_id) {
            *slot = (*slot).max(next);
        }
    }

    /// Shared writers: continues after the latest store timestamp any process wrote.
    #[inline]
    pub(crate) fn adopt_store_ts(&mut self, last_store_ts: i64) {
        self.last_store_ts = self.last_store_ts.max(last_store_ts);
    }

    /// The latest store timestamp written.
    pub(crate) fn last_store_ts(&self) -> i64 {
        self.last_store_ts
    }

    /// Every queue with its next offset: (topic, queue id, next offset).
    pub(crate) fn queue_entries(&self) -> Vec<(String, u32, u64)> {
        let t = &self.queue_offsets;
        t.names
            .iter()
            .zip(&t.values)
            .flat_map(|(name, next)| {
                next.iter()
                    .enumerate()
                    .filter(|&(_, &n)| n > 0)
                    .map(move |(q, &n)| (name.clone(), q as u32, n))
            })
            .collect()
    }

    /// The commit-log offset a record of `len` bytes would end at if appended to the current
    /// file now; `None` when it would roll (or no file is open).
    pub fn fits(&self, len: u64) -> Option<u64> {
        let w = self.writer.as_ref()?;
        (len + END_FILE_MIN_BLANK_LENGTH <= w.remaining())
            .then(|| w.file().from_offset() + w.pos() + len)
    }

    /// Makes sure the current file can take `len` more bytes plus the 8-byte blank reserve,
    /// writing the END_OF_FILE marker (announced to `fence` first) and rolling when it cannot.
    fn ensure_room(
        &mut self,
        files: &MappedFileQueue,
        fence: &FillFence,
        len: u64,
    ) -> Result<&mut FileWriter> {
        if self.fits(len).is_none() {
            let next_start = match self.writer.as_mut() {
                Some(w) => {
                    let remaining = w.remaining();
                    if remaining >= END_FILE_MIN_BLANK_LENGTH {
                        fence.announce(w.file().from_offset() + w.file().size());
                        let r = u32::try_from(remaining).unwrap_or(u32::MAX);
                        w.append_with(END_FILE_MIN_BLANK_LENGTH as usize, |b| {
                            codec::encode_blank(b, r)
                        });
                    }
                    w.fill_to_end();
                    w.file().from_offset() + w.file().size()
                }
                None => files.max_offset(),
            };
            // Drop the full file's writer before rolling so a failed roll leaves no half state.
            self.writer = None;
            self.writer = Some(files.roll(next_start)?);
            kill_point!("commit_log.rolled");
        }
        self.writer.as_mut().ok_or(Error::Closed)
    }

    /// Appends one record and publishes it, announcing its bytes to `fence` first.
    /// `now`: a clock reading (ms) the caller took just before the append, or `None` to read
    /// the clock here; the store timestamp is the later of it and the previous record's.
    /// `assigned`: the queue offset a shared writer took from the writer mapping's table
    /// (which it advances itself), or `None`: this appender's table assigns it and advances.
    /// Always inlined: it has two callers (the single writer's append and the shared
    /// writers'), for which the compiler would call it instead, and the single writer's send
    /// must not pay for the call.
    #[inline(always)]
    pub fn append_one(
        &mut self,
        files: &MappedFileQueue,
        fence: &FillFence,
        p: &Prepared<'_>,
        now: Option<i64>,
        assigned: Option<u64>,
    ) -> Result<Appended> {
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                cause: Arc::clone(cause),
            });
        }
        let m = &p.msg;
        self.ensure_room(files, fence, p.len as u64)?;
        // One map lookup: the slot is read now and bumped only after the write succeeded.
        let slot = match assigned {
            None if sysflag::is_dispatched(m.sysflag) => {
                self.queue_offsets.slot(m.topic, m.queue_id)
            }
            _ => None,
        };
        let queue_offset = assigned.unwrap_or_else(|| slot.as_deref().copied().unwrap_or(0));
        let Some(w) = self.writer.as_mut() else {
            return Err(Error::Closed);
        };
        let physical_offset = w.file().from_offset() + w.pos();
        fence.announce(physical_offset + p.len as u64);
        let store_timestamp = now
            .unwrap_or_else(|| self.clock.now_ms())
            .max(self.last_store_ts);
        let meta = RecordMeta {
            queue_id: m.queue_id,
            flag: m.flag,
            queue_offset,
            physical_offset,
            sysflag: m.sysflag,
            born_timestamp: m.born_timestamp,
            store_timestamp,
            reconsume_times: m.reconsume_times,
            prepared_transaction_offset: m.prepared_transaction_offset,
        };
        let written = w.append_with(p.len, |buf| {
            codec::encode_unsealed(buf, &meta, p.crc, m.body, m.topic.as_bytes(), m.properties);
            kill_point!("append.unsealed");
            codec::seal_record_crc(buf);
        });
        if written.is_none() {
            return Err(Error::Closed);
        }
        kill_point!("append.unpublished");
        w.publish();
        if let Some(s) = slot {
            *s += 1;
        }
        self.last_store_ts = store_timestamp;
        Ok(Appended {
            physical_offset,
            size: p.len as u32,
            queue_offset,
            store_timestamp,
        })
    }

    /// Appends a batch for one (topic, queue) into one file with consecutive queue offsets and
    /// publishes it at once; returns its size in bytes. The batch never spans files. Its bytes
    /// are announced to `fence` before they are written.
    /// `warm(start, end)`: whether the log's pages of `[start, end)` are faulted in.
    /// `assigned`: the first queue offset, as for `append_one`.
    pub fn append_batch(
        &mut self,
        files: &MappedFileQueue,
        fence: &FillFence,
        batch: &[Prepared<'_>],
        warm: impl Fn(u64, u64) -> bool,
        assigned: Option<u64>,
        out: &mut Vec<Appended>,
    ) -> Result<u64> {
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                cause: Arc::clone(cause),
            });
        }
        let Some(first) = batch.first() else {
            return Ok(0);
        };
        let total: u64 = batch.iter().map(|p| p.len as u64).sum();
        if total + END_FILE_MIN_BLANK_LENGTH > files.file_size() {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "batch of {total} bytes does not fit one commit-log file of {} bytes",
                    files.file_size()
                ),
            });
        }
        let (topic, queue_id) = (first.msg.topic, first.msg.queue_id);
        let dispatched = sysflag::is_dispatched(first.msg.sysflag);
        let base_qo = match assigned {
            Some(q) => q,
            None if dispatched => self.next_queue_offset(topic, queue_id),
            None => 0,
        };
        let last_store_ts = self.last_store_ts;
        let now = self.clock.now_ms();
        let w = self.ensure_room(files, fence, total)?;
        let store_timestamp = now.max(last_store_ts);
        let mut physical_offset = w.file().from_offset() + w.pos();
        fence.announce(physical_offset + total);
        out.reserve(batch.len());
        // Through the mapping when its pages are already faulted in (the warm-ahead thread
        // did it, or the file is anonymous memory): one copy, no system call. Otherwise one
        // `pwrite` from the reused buffer: the kernel fills the page cache without the page
        // faults that first writes through the mapping would take on this thread. For large
        // records, gathered writes of the encoded heads and tails with the caller's bodies.
        // Either way nothing is published before the whole batch is written: a crash midway
        // leaves a torn tail that recovery's CRC scan cuts off.
        let direct = w.file().is_anonymous() || warm(physical_offset, physical_offset + total);
        let len = total as usize;
        let start_len = out.len();
        let place = Placement {
            queue_id,
            base_qo,
            dispatched,
            store_timestamp,
        };
        let mut encode_all = |mut buf: &mut [u8]| {
            // Each record's CRC is sealed one record later (see `codec::encode_unsealed`).
            let mut unsealed: Option<&mut [u8]> = None;
            for (i, p) in batch.iter().enumerate() {
                let m = &p.msg;
                let (meta, appended) = place.record(i, p, physical_offset);
                let n = p.len.min(buf.len());
                let (record, rest) = std::mem::take(&mut buf).split_at_mut(n);
                buf = rest;
                codec::encode_unsealed(
                    record,
                    &meta,
                    p.crc,
                    m.body,
                    topic.as_bytes(),
                    m.properties,
                );
                kill_point!("append.unsealed");
                if let Some(prev) = unsealed.replace(record) {
                    codec::seal_record_crc(prev);
                }
                out.push(appended);
                physical_offset += p.len as u64;
            }
            if let Some(last) = unsealed {
                codec::seal_record_crc(last);
            }
        };
        let written = if direct {
            w.append_with(len, encode_all).ok_or(Error::Closed)
        } else if written_by_gathering(total, batch.len()) {
            // Large bodies: only heads and tails are encoded; the kernel gathers them with the
            // caller's bodies, so a body is read by the CRCs and the page-cache copy only.
            self.append_batch_vectored(batch, &place, physical_offset, out)
        } else {
            let mut scratch = std::mem::take(&mut self.scratch);
            if scratch.len() < len {
                scratch.resize(len, 0);
            }
            let buf = scratch.get_mut(..len).unwrap_or_default();
            encode_all(buf);
            let r = match self.writer.as_mut() {
                Some(w) => w.append_bytes(buf),
                None => Err(Error::Closed),
            };
            self.scratch = scratch;
            r
        };
        if let Err(e) = written {
            out.truncate(start_len);
            return Err(e);
        }
        let w = self.writer.as_mut().ok_or(Error::Closed)?;
        kill_point!("append.unpublished");
        w.publish();
        if dispatched && assigned.is_none() {
            if let Some(slot) = self.queue_offsets.slot(topic, queue_id) {
                *slot += batch.len() as u64;
            }
        }
        self.last_store_ts = store_timestamp;
        Ok(total)
    }
}

/// What every record of one batch shares: its queue, first queue offset and store time.
struct Placement {
    queue_id: u32,
    base_qo: u64,
    dispatched: bool,
    store_timestamp: i64,
}

impl Placement {
    /// The header fields and the result of the batch's `i`-th record, at `physical_offset`.
    fn record(&self, i: usize, p: &Prepared<'_>, physical_offset: u64) -> (RecordMeta, Appended) {
        let m = &p.msg;
        let queue_offset = if self.dispatched {
            self.base_qo + i as u64
        } else {
            0
        };
        let meta = RecordMeta {
            queue_id: self.queue_id,
            flag: m.flag,
            queue_offset,
            physical_offset,
            sysflag: m.sysflag,
            born_timestamp: m.born_timestamp,
            store_timestamp: self.store_timestamp,
            reconsume_times: m.reconsume_times,
            prepared_transaction_offset: m.prepared_transaction_offset,
        };
        let appended = Appended {
            physical_offset,
            size: p.len as u32,
            queue_offset,
            store_timestamp: self.store_timestamp,
        };
        (meta, appended)
    }
}

/// Average record size from which a batch that cannot go through the mapping is written with
/// gathered `write`s (header, body, tail per record) instead of being encoded into one buffer:
/// the copy it saves outweighs the kernel's per-slice cost only for large bodies.
const VECTORED_MIN_AVG_RECORD: u64 = 2048;

/// Whether a batch of `n` records and `total` bytes that lies beyond the faulted-in pages is
/// written with gathered `write()`s of heads, caller's bodies and tails (large records).
pub(crate) fn written_by_gathering(total: u64, n: usize) -> bool {
    n > 0 && total >= VECTORED_MIN_AVG_RECORD * n as u64
}

impl Appender {
    /// The vectored form of `append_batch`'s write: heads and tails are encoded into the reused
    /// scratch buffer, the bodies are written from the caller's memory. Fills `out` like the
    /// other paths.
    fn append_batch_vectored(
        &mut self,
        batch: &[Prepared<'_>],
        place: &Placement,
        mut physical_offset: u64,
        out: &mut Vec<Appended>,
    ) -> Result<()> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let topic = first.msg.topic;
        let tails: usize = batch
            .iter()
            .map(|p| p.len - HEAD_LEN - p.msg.body.len())
            .sum();
        let mut scratch = std::mem::take(&mut self.scratch);
        let need = HEAD_LEN * batch.len() + tails;
        if scratch.len() < need {
            scratch.resize(need, 0);
        }
        let mut buf = scratch.get_mut(..need).unwrap_or_default();
        let mut pieces: Vec<(&[u8], &[u8], &[u8])> = Vec::with_capacity(batch.len());
        for (i, p) in batch.iter().enumerate() {
            let m = &p.msg;
            let (meta, appended) = place.record(i, p, physical_offset);
            let tail_len = p.len - HEAD_LEN - m.body.len();
            // `need` covers every head and tail, so the splits take exactly these lengths.
            let n = (HEAD_LEN + tail_len).min(buf.len());
            let (record, rest) = std::mem::take(&mut buf).split_at_mut(n);
            buf = rest;
            let (head, tail) = record.split_at_mut(HEAD_LEN.min(n));
            let mut h = [0u8; HEAD_LEN];
            codec::encode_split_with_record_crc(
                &mut h,
                tail,
                &meta,
                p.crc,
                m.body,
                topic.as_bytes(),
                m.properties,
            );
            if let Some(dst) = head.get_mut(..HEAD_LEN) {
                dst.copy_from_slice(&h);
            }
            pieces.push((head, m.body, tail));
            out.push(appended);
            physical_offset += p.len as u64;
        }
        let mut slices: Vec<std::io::IoSlice<'_>> = pieces
            .iter()
            .flat_map(|(h, b, t)| [*h, *b, *t])
            .map(std::io::IoSlice::new)
            .collect();
        let r = match self.writer.as_mut() {
            Some(w) => w.append_vectored(&mut slices),
            None => Err(Error::Closed),
        };
        drop(slices);
        drop(pieces);
        self.scratch = scratch;
        r
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::mapped_file_queue::Backing;
    use crate::message::codec::{RecordView, STORE_TIMESTAMP_POS};

    const FILE: u64 = 32 << 10;

    /// Appends the same batches (the last ones rolling to a second file) through the mapping
    /// (`warm` true) and through `pwrite` (`warm` false); returns the file bytes.
    fn write_batches(warm: bool, body_len: impl Fn(usize) -> usize) -> Vec<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let backing = Backing::Dir {
            dir: dir.path().to_path_buf(),
            mode: 0o644,
            populate: false,
        };
        let files = MappedFileQueue::new(backing, FILE, true);
        let mut a = Appender::default();
        let bodies: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; body_len(i as usize)]).collect();
        let props = b"KEYS\x01k1 k2\x02";
        let mut out = Vec::new();
        for chunk in bodies.chunks(7) {
            let batch: Vec<Prepared<'_>> = chunk
                .iter()
                .map(|b| {
                    let mut m = MessageRef::new("Direct", 3, b).with_properties(props);
                    m.born_timestamp = 1_700_000_000_000;
                    Prepared::new(m)
                })
                .collect::<Result<_>>()
                .unwrap();
            a.append_batch(
                &files,
                &FillFence::default(),
                &batch,
                |_, _| warm,
                None,
                &mut out,
            )
            .unwrap();
        }
        assert_eq!(out.len(), bodies.len());
        assert_eq!(out.last().unwrap().queue_offset, 39);
        assert!(
            out.last().unwrap().physical_offset >= FILE,
            "the batches roll"
        );
        drop(a);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        names.iter().map(|p| std::fs::read(p).unwrap()).collect()
    }

    /// Every record of `file` with its store timestamp and timestamp-dependent record CRC
    /// zeroed (the two runs append at different milliseconds).
    fn normalized(file: &[u8]) -> Vec<Vec<u8>> {
        let mut pos = 0;
        let mut out = Vec::new();
        while let Ok(v) = RecordView::parse(&file[pos..], true) {
            let len = v.total_size() as usize;
            let mut r = file[pos..pos + len].to_vec();
            r[STORE_TIMESTAMP_POS..STORE_TIMESTAMP_POS + 8].fill(0);
            r[len - codec::RECORD_CRC_LEN..].fill(0);
            out.push(r);
            pos += len;
        }
        out
    }

    #[test]
    fn batches_through_the_mapping_equal_batches_through_pwrite() {
        // Small bodies: pwrite of one encoded buffer. Large ones (average record over
        // VECTORED_MIN_AVG_RECORD): gathered writes of heads, bodies and tails. Both must
        // write what the mapping path writes, byte for byte, across file rolls.
        let small = |i: usize| 100 + 37 * i;
        let large = |i: usize| 2100 + 61 * i;
        for (body_len, files) in [(&small as &dyn Fn(usize) -> usize, 2), (&large, 6)] {
            let mapped = write_batches(true, body_len);
            let written = write_batches(false, body_len);
            assert_eq!(mapped.len(), files);
            assert_eq!(written.len(), files);
            let mut records = 0;
            for (m, w) in mapped.iter().zip(&written) {
                let (nm, nw) = (normalized(m), normalized(w));
                assert!(!nm.is_empty());
                assert!(nm == nw, "records differ");
                records += nm.len();
                // Same END_OF_FILE marker / zero tail after the records.
                let used: usize = nm.iter().map(Vec::len).sum();
                assert!(m[used..] == w[used..], "tails differ");
            }
            assert_eq!(records, 40);
        }
    }
}
