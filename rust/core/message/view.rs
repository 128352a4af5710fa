//! What a reader asks of a stored message beyond its header fields (codec.rs's `RecordView`):
//! its ids, tags, keys, properties and the body as the producer sent it. Front ends (the
//! Python binding, the CLI, a Rust user) read messages through these, never through the
//! codec's layout.

use std::borrow::Cow;

use super::codec::{RecordView, STORE_HOST};
use super::{compression, msg_id, properties, sysflag};
use crate::error::Result;

impl<'a> RecordView<'a> {
    /// The message id its producer was given: the `UNIQ_KEY` property, or for a record
    /// without one (written by a RocketMQ client that sets none) its offset message id.
    pub fn msg_id(&self) -> Cow<'a, str> {
        match self.property(properties::UNIQ_KEY) {
            Some(id) => Cow::Borrowed(id),
            None => Cow::Owned(self.offset_msg_id()),
        }
    }

    /// The offset message id (store host and commit-log offset, 32 hex digits), the one
    /// `Store::decode_msg_id` resolves.
    pub fn offset_msg_id(&self) -> String {
        msg_id::offset_msg_id(&STORE_HOST, self.physical_offset())
    }

    /// The `TAGS` property.
    pub fn tags(&self) -> Option<&'a str> {
        self.property(properties::TAGS)
    }

    /// The business keys: the `KEYS` property split on spaces, empty parts dropped.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.property(properties::KEYS)
            .unwrap_or("")
            .split(' ')
            .filter(|k| !k.is_empty())
    }

    /// The value of property `name` (the store's whole-record CRC property is never one).
    pub fn property(&self, name: &str) -> Option<&'a str> {
        properties::get(self.properties(), name)
    }

    /// Every property, in stored order; a name stored twice keeps its last value.
    pub fn property_pairs(&self) -> Vec<(String, String)> {
        properties::decode(self.properties())
    }

    /// The body as the producer sent it: decompressed when SYSFLAG marks it compressed
    /// (FORMAT.md §1.6), borrowed otherwise.
    ///
    /// # Errors
    /// `Compression` when the stored bytes do not decompress.
    pub fn decoded_body(&self) -> Result<Cow<'a, [u8]>> {
        StoredBody::new(self.body(), self.sysflag()).decode()
    }

    /// The body of `record`, one record the store has already verified (a read's result),
    /// found from the few header fields that place it, without parsing the rest: for a reader
    /// that keeps the record's bytes and hands the body out later. `None` if those fields do
    /// not fit in `record`.
    pub fn stored_body(record: &'a [u8]) -> Option<StoredBody<'a>> {
        let (range, sysflag) = Self::body_range(record)?;
        Some(StoredBody::new(record.get(range)?, sysflag))
    }
}

/// A stored body and the SYSFLAG that says how it is encoded.
#[derive(Debug, Clone, Copy)]
pub struct StoredBody<'a> {
    bytes: &'a [u8],
    sysflag: i32,
}

impl<'a> StoredBody<'a> {
    fn new(bytes: &'a [u8], sysflag: i32) -> Self {
        StoredBody { bytes, sysflag }
    }

    /// The bytes as stored (compressed when `is_compressed`).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Whether the producer compressed the body.
    pub fn is_compressed(&self) -> bool {
        self.sysflag & sysflag::COMPRESSED != 0
    }

    /// The body as the producer sent it.
    ///
    /// # Errors
    /// `Compression` when the stored bytes do not decompress.
    pub fn decode(&self) -> Result<Cow<'a, [u8]>> {
        compression::decoded_body(self.sysflag, self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::builder::Compression;
    use super::super::codec::{body_crc, encode_with_record_crc, encoded_len, RecordMeta};
    use super::super::compression::Codec;
    use super::*;

    /// A record as the store writes it, with `props` and `body` stored with `sysflag`.
    fn record(props: &[u8], body: &[u8], sysflag: i32) -> Vec<u8> {
        let meta = RecordMeta {
            queue_id: 1,
            flag: 0,
            queue_offset: 5,
            physical_offset: 0x1234,
            sysflag,
            born_timestamp: 1,
            store_timestamp: 2,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        let mut props = props.to_vec();
        if !props.is_empty() && props.last() != Some(&properties::PROPERTY_SEPARATOR) {
            props.push(properties::PROPERTY_SEPARATOR);
        }
        let len = encoded_len(
            body.len(),
            1,
            props.len() + super::super::codec::RECORD_CRC_LEN,
        );
        let mut out = vec![0u8; len.unwrap_or(0)];
        encode_with_record_crc(&mut out, &meta, body_crc(body), body, b"T", &props);
        out
    }

    #[test]
    fn ids_tags_keys_and_properties() {
        let props = properties::encode([
            ("TAGS", "TagA"),
            ("KEYS", "k1  k2"),
            ("UNIQ_KEY", "ID1"),
            ("a", "1"),
        ]);
        let rec = record(&props, b"hello", 0);
        let v = RecordView::parse(&rec, true).unwrap();
        assert_eq!(v.msg_id(), "ID1");
        assert_eq!(v.offset_msg_id(), "7F00000100002A9F0000000000001234");
        assert_eq!(v.tags(), Some("TagA"));
        assert_eq!(v.keys().collect::<Vec<_>>(), ["k1", "k2"]);
        assert_eq!(v.property("a"), Some("1"));
        // The store's whole-record CRC property is not the message's.
        assert_eq!(v.property_pairs().len(), 4);
        assert_eq!(v.property("__CRC32#"), None);
        // Without UNIQ_KEY the id is the offset message id.
        let rec = record(b"", b"hello", 0);
        let v = RecordView::parse(&rec, true).unwrap();
        assert_eq!(v.msg_id(), v.offset_msg_id());
        assert_eq!((v.tags(), v.keys().count()), (None, 0));
    }

    #[test]
    fn the_body_as_sent_and_as_stored() {
        let body = b"abcabcabcabcabcabcabcabcabcabcabcabcabcabc".repeat(20);
        let (packed, sysflag) = Compression::new(Codec::Zstd, 0, 3)
            .unwrap()
            .apply(&body)
            .unwrap()
            .unwrap();
        let rec = record(b"", &packed, sysflag);
        let v = RecordView::parse(&rec, true).unwrap();
        assert_eq!(v.decoded_body().unwrap().as_ref(), &body[..]);
        let stored = RecordView::stored_body(&rec).unwrap();
        assert!(stored.is_compressed());
        assert_eq!(stored.bytes(), &packed[..]);
        assert_eq!(stored.decode().unwrap().as_ref(), &body[..]);

        let rec = record(b"", b"plain", 0);
        let stored = RecordView::stored_body(&rec).unwrap();
        assert!(!stored.is_compressed());
        assert!(matches!(stored.decode().unwrap(), Cow::Borrowed(b"plain")));
        // A buffer too short for the body's place has none.
        assert!(RecordView::stored_body(rec.get(..60).unwrap()).is_none());
    }
}
