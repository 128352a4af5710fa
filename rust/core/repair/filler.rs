//! What a skip repair writes over a damaged commit-log span (FORMAT.md §1.7): bytes every
//! reader already skips, so that no offset after the span moves.
//!
//! - A span that ends inside its file becomes one **repair filler record**: a whole record of
//!   exactly the span's length at the span's offset, topic [`FILLER_TOPIC`], transaction type
//!   rollback (never dispatched to a consume queue, an index or a timer), QUEUEOFFSET 0, a
//!   zero body, and both CRCs (the whole-record CRC property when the span has room for it).
//!   Recovery and verification see a whole record; dispatch skips it as it skips any
//!   rolled-back half message; a lookup by its offset finds a record of the filler topic.
//! - A span that runs to the end of its file becomes an END_OF_FILE marker followed by zeros,
//!   so every reader continues at the next file.

use crate::error::{Error, Result};
use crate::message::codec::{self, RecordMeta, RECORD_CRC_LEN};
use crate::message::sysflag;

/// The topic of a repair filler record.
pub const FILLER_TOPIC: &str = "%MQLITE_REPAIRED%";

/// The filler record for a span of `len` bytes at commit-log `offset`, stored at
/// `store_timestamp` (the previous record's, so store times never go back).
///
/// # Errors
/// `InvalidArgument` when `len` is shorter than the smallest record with the filler topic.
pub fn record(offset: u64, len: usize, store_timestamp: i64) -> Result<Vec<u8>> {
    let topic = FILLER_TOPIC.as_bytes();
    let Some(plain) = codec::encoded_len(0, topic.len(), 0) else {
        return Err(too_short(len));
    };
    if len < plain {
        return Err(too_short(len));
    }
    let with_crc = len >= plain + RECORD_CRC_LEN;
    let body = vec![0u8; len - plain - if with_crc { RECORD_CRC_LEN } else { 0 }];
    let meta = RecordMeta {
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: offset,
        sysflag: sysflag::TRANSACTION_ROLLBACK,
        born_timestamp: store_timestamp,
        store_timestamp,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    };
    let mut out = vec![0u8; len];
    if with_crc {
        codec::encode_with_record_crc(&mut out, &meta, codec::body_crc(&body), &body, topic, &[]);
    } else {
        codec::encode(&mut out, &meta, codec::body_crc(&body), &body, topic, &[]);
    }
    Ok(out)
}

/// The END_OF_FILE marker for the last `len` bytes of a file, then zeros.
pub fn end_of_file(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if len >= 8 {
        codec::encode_blank(&mut out, len as u32);
    }
    out
}

fn too_short(len: usize) -> Error {
    Error::InvalidArgument {
        field: "mode",
        reason: format!(
            "a damaged span of {len} bytes is too short for a filler record; repair with mode=\"cut\""
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::message::codec::{RecordCheck, RecordView};

    /// A filler of any length from the minimum up is a whole record at its offset that no
    /// consume queue takes.
    #[test]
    fn a_filler_is_a_whole_undispatched_record_of_exactly_the_span() {
        let min = codec::encoded_len(0, FILLER_TOPIC.len(), 0).unwrap();
        for len in [min, min + 1, min + RECORD_CRC_LEN, 4096] {
            let r = record(1000, len, 7).unwrap();
            assert_eq!(r.len(), len);
            assert_eq!(
                codec::check_stored(&r, true, Some(1000)),
                RecordCheck::Record(len as u32)
            );
            let v = RecordView::parse(&r, true).unwrap();
            assert!(!sysflag::is_dispatched(v.sysflag()));
            assert_eq!(v.topic(), FILLER_TOPIC);
        }
        assert!(record(0, min - 1, 0).is_err());
    }

    #[test]
    fn an_end_of_file_marker_covers_the_rest() {
        let b = end_of_file(64);
        assert_eq!(codec::check(&b, true, None), RecordCheck::Blank);
    }
}
