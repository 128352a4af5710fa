//! The clean-shutdown record of the consume queues (`queues.clean`, FORMAT.md §4.1): each
//! queue's next queue offset and the end of the last record it indexes, written at a clean
//! close so that the next open need not read every queue's files.
//!
//! Invariants
//! - The record describes the queues exactly as the close left them: it is written after the
//!   final flush and dispatch, with every queue's state final, and before the abort marker is
//!   removed (store/mod.rs `shutdown`).
//! - It is trusted only when the open finds no abort marker (the close that wrote it was the
//!   last thing to change the store), the record verifies (magic, version, CRC), and the
//!   commit log's recovered end and the consume queues' durable progress both equal the end it
//!   names. A writer open deletes it once recovery has used or rejected it, so a record can
//!   never outlive the close that wrote it.
//!
//! Crash behaviour: the record is replaced atomically (temp file, fsync, rename, directory
//! fsync). A crash before the rename leaves no record or the previous one, and the abort marker
//! still present, so the next open recovers as after a crash; a crash after it and before the
//! abort marker is removed likewise. A missing, torn or rejected record only means the open
//! reads every queue's files, as without it.

use std::path::Path;

use crate::error::Result;
use crate::util::bytes::{be_u16, be_u32, be_u64};
use crate::util::crc::crc32;
use crate::util::fs;
use crate::util::kill_point::kill_point;

/// `"MQCR"`.
pub const MAGIC: u32 = 0x4D51_4352;
/// The record's version.
pub const VERSION: u32 = 1;
/// Header bytes: magic, version, log end, entry count.
const HEAD: usize = 20;

/// One queue as a clean close left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    /// Topic.
    pub topic: String,
    /// Queue id.
    pub queue_id: u32,
    /// The next queue offset (`ConsumeQueue::max_offset`).
    pub max_offset: u64,
    /// One past the last commit-log byte a unit of the queue indexes (0: none).
    pub max_physical: u64,
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanRecord {
    /// The commit log's end at the close: every record below it was dispatched and flushed.
    pub log_end: u64,
    /// Every queue of the store.
    pub queues: Vec<QueueState>,
}

impl CleanRecord {
    /// The record's bytes (FORMAT.md §4.1).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + 4 + self.queues.len() * 32);
        out.extend_from_slice(&MAGIC.to_be_bytes());
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.log_end.to_be_bytes());
        out.extend_from_slice(&(self.queues.len() as u32).to_be_bytes());
        for q in &self.queues {
            // Topic names are at most 127 bytes (message/validate.rs), so the length fits.
            out.extend_from_slice(&(q.topic.len() as u16).to_be_bytes());
            out.extend_from_slice(q.topic.as_bytes());
            out.extend_from_slice(&q.queue_id.to_be_bytes());
            out.extend_from_slice(&q.max_offset.to_be_bytes());
            out.extend_from_slice(&q.max_physical.to_be_bytes());
        }
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Parses a record; `None` when anything about it does not verify (it is then not used).
    pub fn decode(b: &[u8]) -> Option<CleanRecord> {
        let body_len = b.len().checked_sub(4)?;
        let body = b.get(..body_len)?;
        if be_u32(b, body_len)? != crc32(body)
            || be_u32(body, 0)? != MAGIC
            || be_u32(body, 4)? != VERSION
        {
            return None;
        }
        let log_end = be_u64(body, 8)?;
        let n = be_u32(body, 16)? as usize;
        let mut at = HEAD;
        // Each entry takes at least 22 bytes: a count the body cannot hold is not believed.
        let mut queues = Vec::with_capacity(n.min(body_len / 22));
        for _ in 0..n {
            let len = usize::from(be_u16(body, at)?);
            let topic = std::str::from_utf8(body.get(at + 2..at + 2 + len)?).ok()?;
            crate::message::validate::check_topic(topic).ok()?;
            at += 2 + len;
            queues.push(QueueState {
                topic: topic.to_owned(),
                queue_id: be_u32(body, at)?,
                max_offset: be_u64(body, at + 4)?,
                max_physical: be_u64(body, at + 12)?,
            });
            at += 20;
        }
        (at == body_len).then_some(CleanRecord { log_end, queues })
    }
}

/// The record at `path`, if it exists and verifies.
///
/// # Errors
/// I/O failures other than a missing file.
pub fn read(path: &Path) -> Result<Option<CleanRecord>> {
    Ok(fs::read_if_exists(path)?.and_then(|b| CleanRecord::decode(&b)))
}

/// Replaces the record at `path` atomically and durably.
///
/// # Errors
/// I/O failures (the close is then not clean: the abort marker stays).
pub fn write(path: &Path, record: &CleanRecord, mode: u32) -> Result<()> {
    let staged = fs::stage(path, &record.encode(), mode)?;
    kill_point!("queues_clean.before_rename");
    staged.replace(false)
}

/// Deletes the record at `path` if it exists (a writer open, once recovery is done with it).
/// Not made durable here: until the abort marker this open creates is durable, the store is
/// unchanged and the record still true; after it, the marker makes any record untrusted.
///
/// # Errors
/// I/O failures other than a missing file.
pub fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(crate::error::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> CleanRecord {
        CleanRecord {
            log_end: 4096,
            queues: vec![
                QueueState {
                    topic: "a".into(),
                    queue_id: 0,
                    max_offset: 3,
                    max_physical: 4096,
                },
                QueueState {
                    topic: "b_2".into(),
                    queue_id: 7,
                    max_offset: 0,
                    max_physical: 0,
                },
            ],
        }
    }

    #[test]
    fn round_trips() {
        let r = sample();
        assert_eq!(CleanRecord::decode(&r.encode()), Some(r));
    }

    #[test]
    fn any_damage_rejects_the_record() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert_eq!(CleanRecord::decode(&b), None, "byte {i}");
        }
        for n in 0..bytes.len() {
            assert_eq!(CleanRecord::decode(&bytes[..n]), None, "first {n} bytes");
        }
    }
}
