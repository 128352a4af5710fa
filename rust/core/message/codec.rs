//! The commit-log record codec (RocketMQ layout; FORMAT.md §1 is the reference).
//!
//! All integers big-endian. v1 (`0xDAA320A7`) has a 1-byte topic length, v2 (`0xDAA320AB`) a
//! 2-byte one and is used only for topics longer than 127 bytes. Hosts are IPv4 (8 bytes) unless
//! the sysflag's IPv6 bits say 20. Decoding is total: any inconsistency is an error value.

pub use crate::error::DecodeError;
use crate::util::bytes::{be_u16, be_u32, be_u64};
use crate::util::crc;

/// v1 record magic.
pub const MAGIC_V1: u32 = 0xDAA3_20A7;
/// v2 record magic (2-byte topic length).
pub const MAGIC_V2: u32 = 0xDAA3_20AB;
/// END_OF_FILE blank marker magic.
pub const BLANK_MAGIC: u32 = 0xCBD4_3194;
/// Size of the END_OF_FILE marker (remaining length + magic).
pub const END_FILE_MIN_BLANK_LENGTH: u64 = 8;
/// Fixed bytes of a v1 record with IPv4 hosts, excluding body, topic and properties.
pub const FIXED_V1_IPV4: usize = 91;
/// Name of RocketMQ 5's whole-record CRC property (`enabledAppendPropCRC`).
pub const RECORD_CRC_NAME: &[u8] = b"__CRC32#";
/// Bytes the whole-record CRC property takes: name, `\x01`, 10 digits, `\x02`.
pub const RECORD_CRC_LEN: usize = 20;
/// Byte offset of the store timestamp with an IPv4 born host.
pub const STORE_TIMESTAMP_POS: usize = 56;
/// Byte offset of SYSFLAG.
pub const SYSFLAG_POS: usize = 36;

/// The store timestamp of the record starting `record`, wherever its born host's size puts it
/// (8 bytes for IPv4, 20 for IPv6: SYSFLAG's `BORNHOST_V6`), without decoding the rest.
/// `None` when the bytes are too short.
pub fn store_timestamp_of(record: &[u8]) -> Option<i64> {
    let sysflag = be_u32(record, SYSFLAG_POS)? as i32;
    let at = if sysflag & super::sysflag::BORNHOST_V6 != 0 {
        STORE_TIMESTAMP_POS + 12
    } else {
        STORE_TIMESTAMP_POS
    };
    crate::util::bytes::be_i64(record, at)
}
/// Byte offset of QUEUEOFFSET.
pub const QUEUE_OFFSET_POS: usize = 20;
/// Byte offset of PHYSICALOFFSET.
pub const PHYSICAL_OFFSET_POS: usize = 28;

/// An IPv4 host as stored in a record: 4 address bytes then the port as i32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostV4 {
    /// Address bytes.
    pub ip: [u8; 4],
    /// Port.
    pub port: i32,
}

/// The store host mqlite writes: loopback and RocketMQ's default broker port.
pub const STORE_HOST: HostV4 = HostV4 {
    ip: [127, 0, 0, 1],
    port: 10911,
};
/// The born host mqlite writes for in-process producers.
pub const BORN_HOST: HostV4 = HostV4 {
    ip: [127, 0, 0, 1],
    port: 0,
};

/// Header fields filled in by the appender.
#[derive(Debug, Clone, Copy)]
pub struct RecordMeta {
    /// Queue id.
    pub queue_id: u32,
    /// User flag.
    pub flag: i32,
    /// Logical offset in the consume queue.
    pub queue_offset: u64,
    /// Global commit-log offset of the record's first byte.
    pub physical_offset: u64,
    /// SYSFLAG (IPv6 bits are cleared: mqlite writes IPv4 hosts).
    pub sysflag: i32,
    /// Producer wall clock (ms).
    pub born_timestamp: i64,
    /// Store wall clock (ms), taken under the append lock.
    pub store_timestamp: i64,
    /// Retry count.
    pub reconsume_times: i32,
    /// Half message offset of a committed transaction message.
    pub prepared_transaction_offset: i64,
}

/// Encoded size of a record with IPv4 hosts; `None` when a length does not fit its field.
pub fn encoded_len(body: usize, topic: usize, props: usize) -> Option<usize> {
    if props > i16::MAX as usize || topic > u16::MAX as usize || body > i32::MAX as usize {
        return None;
    }
    let v2 = usize::from(topic > 127);
    FIXED_V1_IPV4
        .checked_add(v2)?
        .checked_add(body)?
        .checked_add(topic)?
        .checked_add(props)
}

/// Writes one record into `out`, which must be exactly `encoded_len(..)` bytes.
/// `body_crc` is passed in so batch callers can compute it outside the append lock.
pub fn encode(
    out: &mut [u8],
    meta: &RecordMeta,
    body_crc: u32,
    body: &[u8],
    topic: &[u8],
    props: &[u8],
) {
    let total = out.len();
    emit_into(out, total, meta, body_crc, body, topic, props, false);
}

/// Like [`encode`], and ends the properties with the whole-record CRC property
/// (`__CRC32#`, FORMAT.md §1.5): `out` must be `encoded_len(body, topic, props + 20)` bytes
/// and `props` empty or ending with `\x02`. [`encode_unsealed`] then [`seal_record_crc`].
pub fn encode_with_record_crc(
    out: &mut [u8],
    meta: &RecordMeta,
    body_crc: u32,
    body: &[u8],
    topic: &[u8],
    props: &[u8],
) {
    encode_unsealed(out, meta, body_crc, body, topic, props);
    seal_record_crc(out);
}

/// [`encode_with_record_crc`] but for its last [`RECORD_CRC_LEN`] bytes, the CRC property,
/// which [`seal_record_crc`] writes. A batch seals each record only after encoding the next:
/// the CRC then reads bytes whose stores have completed, rather than loads straddling the
/// header's and the body's still-pending stores, which the CPU cannot serve from its store
/// buffer and stalls on (about 15 ns per 224-byte record, half the CRC's cost).
pub fn encode_unsealed(
    out: &mut [u8],
    meta: &RecordMeta,
    body_crc: u32,
    body: &[u8],
    topic: &[u8],
    props: &[u8],
) {
    let total = out.len();
    let Some(covered) = total
        .checked_sub(RECORD_CRC_LEN)
        .and_then(|n| out.get_mut(..n))
    else {
        return;
    };
    emit_into(covered, total, meta, body_crc, body, topic, props, true);
}

/// `emit` of a record of `total` bytes into `buf` (all of it, or all but the CRC property).
#[allow(clippy::too_many_arguments)]
fn emit_into(
    buf: &mut [u8],
    total: usize,
    meta: &RecordMeta,
    body_crc: u32,
    body: &[u8],
    topic: &[u8],
    props: &[u8],
    record_crc: bool,
) {
    let mut w = Writer { buf, pos: 0 };
    emit(total, meta, body_crc, body, topic, props, record_crc, |b| {
        w.bytes(b)
    });
}

/// Writes the whole-record CRC property over the last [`RECORD_CRC_LEN`] bytes of `record`,
/// encoded by [`encode_unsealed`], from the bytes before it.
pub fn seal_record_crc(record: &mut [u8]) {
    let Some(covered_len) = record.len().checked_sub(RECORD_CRC_LEN) else {
        return;
    };
    let (covered, tail) = record.split_at_mut(covered_len);
    tail.copy_from_slice(&record_crc_property(crc::body_crc(covered)));
}

/// Bytes of a record before its body: the fixed header, BODYLEN included.
pub const HEAD_LEN: usize = 88;

/// The record of [`encode_with_record_crc`] in two pieces around the caller's body, for a
/// vectored write that never copies the body: `head` gets the 88 bytes before the body, `tail`
/// (exactly `record_len - 88 - body.len()` bytes) the topic, the properties and the
/// whole-record CRC property. Byte for byte the same record.
pub fn encode_split_with_record_crc(
    head: &mut [u8; HEAD_LEN],
    tail: &mut [u8],
    meta: &RecordMeta,
    body_crc: u32,
    body: &[u8],
    topic: &[u8],
    props: &[u8],
) {
    let total = HEAD_LEN + body.len() + tail.len();
    let Some(covered_len) = tail.len().checked_sub(RECORD_CRC_LEN) else {
        return;
    };
    let v2 = topic.len() > 127;
    *head = header(total, meta, body_crc, body.len(), v2);
    let (covered, crc_prop) = tail.split_at_mut(covered_len);
    let mut w = Writer {
        buf: covered,
        pos: 0,
    };
    if v2 {
        w.bytes(&u16::try_from(topic.len()).unwrap_or(u16::MAX).to_be_bytes());
    } else {
        w.bytes(&[u8::try_from(topic.len()).unwrap_or(0)]);
    }
    w.bytes(topic);
    w.bytes(
        &u16::try_from(props.len() + RECORD_CRC_LEN)
            .unwrap_or(0)
            .to_be_bytes(),
    );
    w.bytes(props);
    let crc = crc::crc32_parts(&[head.as_slice(), body, covered]) & 0x7FFF_FFFF;
    crc_prop.copy_from_slice(&record_crc_property(crc));
}

/// The record as a sequence of byte runs: the fixed 88-byte header (built on the stack), then
/// the body, topic and properties with their lengths.
#[allow(clippy::too_many_arguments)]
fn emit(
    total: usize,
    meta: &RecordMeta,
    body_crc: u32,
    body: &[u8],
    topic: &[u8],
    props: &[u8],
    record_crc: bool,
    sink: impl FnMut(&[u8]),
) {
    let v2 = topic.len() > 127;
    let h = header(total, meta, body_crc, body.len(), v2);
    let mut put = sink;
    put(&h);
    put(body);
    if v2 {
        put(&u16::try_from(topic.len()).unwrap_or(u16::MAX).to_be_bytes());
    } else {
        put(&[u8::try_from(topic.len()).unwrap_or(0)]);
    }
    put(topic);
    // With `record_crc` the caller appends the 20-byte CRC property, which PROPLEN counts.
    let props_len = props.len() + if record_crc { RECORD_CRC_LEN } else { 0 };
    put(&u16::try_from(props_len).unwrap_or(0).to_be_bytes());
    put(props);
}

/// The fixed 88-byte header with IPv4 hosts (FORMAT.md §1.1), written at constant offsets
/// (no per-field bounds checks: it is built for every record appended).
fn header(total: usize, meta: &RecordMeta, body_crc: u32, body_len: usize, v2: bool) -> [u8; 88] {
    let mut h = [0u8; 88];
    h[0..4].copy_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
    h[4..8].copy_from_slice(&(if v2 { MAGIC_V2 } else { MAGIC_V1 }).to_be_bytes());
    h[8..12].copy_from_slice(&body_crc.to_be_bytes());
    h[12..16].copy_from_slice(&meta.queue_id.to_be_bytes());
    h[16..20].copy_from_slice(&meta.flag.to_be_bytes());
    h[QUEUE_OFFSET_POS..QUEUE_OFFSET_POS + 8].copy_from_slice(&meta.queue_offset.to_be_bytes());
    h[PHYSICAL_OFFSET_POS..PHYSICAL_OFFSET_POS + 8]
        .copy_from_slice(&meta.physical_offset.to_be_bytes());
    let sysflag = meta.sysflag & !(super::sysflag::BORNHOST_V6 | super::sysflag::STOREHOST_V6);
    h[36..40].copy_from_slice(&sysflag.to_be_bytes());
    h[40..48].copy_from_slice(&meta.born_timestamp.to_be_bytes());
    h[48..52].copy_from_slice(&BORN_HOST.ip);
    h[52..56].copy_from_slice(&BORN_HOST.port.to_be_bytes());
    h[STORE_TIMESTAMP_POS..STORE_TIMESTAMP_POS + 8]
        .copy_from_slice(&meta.store_timestamp.to_be_bytes());
    h[64..68].copy_from_slice(&STORE_HOST.ip);
    h[68..72].copy_from_slice(&STORE_HOST.port.to_be_bytes());
    h[72..76].copy_from_slice(&meta.reconsume_times.to_be_bytes());
    h[76..84].copy_from_slice(&meta.prepared_transaction_offset.to_be_bytes());
    h[84..88].copy_from_slice(&u32::try_from(body_len).unwrap_or(u32::MAX).to_be_bytes());
    h
}

/// `REVERSED_PAIRS[r]`: the two decimal digits of `r` (< 100), least significant first.
const REVERSED_PAIRS: [[u8; 2]; 100] = {
    let mut t = [[0u8; 2]; 100];
    let mut r = 0;
    while r < 100 {
        t[r] = [b'0' + (r % 10) as u8, b'0' + (r / 10) as u8];
        r += 1;
    }
    t
};

/// `__CRC32#\x01` + the CRC's 10 decimal digits, least significant first + `\x02`.
fn record_crc_property(crc: u32) -> [u8; RECORD_CRC_LEN] {
    let mut p = [0u8; RECORD_CRC_LEN];
    p[..8].copy_from_slice(RECORD_CRC_NAME);
    p[8] = super::properties::NAME_VALUE_SEPARATOR;
    // Two digits at a time, least significant first, from a table of the 100 reversed pairs
    // (this runs for every record appended). The four-digit groups are split off the CRC
    // independently, so the divisions by constants (multiplications) overlap instead of
    // forming one chain of five.
    let low = crc % 10_000;
    let mid = crc / 10_000 % 10_000;
    let pairs = [
        low % 100,
        low / 100,
        mid % 100,
        mid / 100,
        crc / 100_000_000,
    ];
    for (pair, r) in p[9..19].chunks_exact_mut(2).zip(pairs) {
        pair.copy_from_slice(&REVERSED_PAIRS[r as usize]);
    }
    p[19] = super::properties::PROPERTY_SEPARATOR;
    p
}

/// What stands in for the whole-record CRC on a record without it (RocketMQ's default): the
/// body CRC covers the body only, so the topic and properties must show no sign of a torn
/// write. Files are zero where nothing was written, so a torn topic or property string holds
/// zero bytes (names and values never do: mqlite refuses NUL in them). RocketMQ 4.x ends the
/// property string without a final separator, 5.x with one, so the end proves nothing.
fn untorn_without_record_crc(view: &RecordView<'_>) -> bool {
    let topic = view.topic_bytes();
    !topic.is_empty() && !topic.contains(&0) && !view.properties_raw().contains(&0)
}

/// The value of a trailing whole-record CRC property, if `props` ends with a well-formed one.
///
/// Read on every message a consumer gets, so the first eight of the ten digits (least
/// significant first) are checked and summed in one word: each byte must be `0x30..=0x39`,
/// then neighbouring digits are combined into pairs, quads and the eight-digit value.
fn trailing_record_crc(props: &[u8]) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let tail: &[u8; RECORD_CRC_LEN] = props
        .get(props.len().checked_sub(RECORD_CRC_LEN)?..)?
        .try_into()
        .ok()?;
    let (name, value) = tail.split_at(8);
    if name != RECORD_CRC_NAME
        || value.first() != Some(&super::properties::NAME_VALUE_SEPARATOR)
        || value.get(11) != Some(&super::properties::PROPERTY_SEPARATOR)
    {
        return None;
    }
    let low: [u8; 8] = value.get(1..9)?.try_into().ok()?;
    let w = u64::from_be_bytes(low);
    // Every byte in 0x30..=0x39: high nibble 3, and adding 6 does not carry out of the nibble.
    if w & (0xF0 * ONES) != 0x30 * ONES || (w + 0x06 * ONES) & (0xF0 * ONES) != 0x30 * ONES {
        return None;
    }
    let d = w - 0x30 * ONES;
    // Big-endian load of a least-significant-first string: in every lane the upper half holds
    // the lower-weight digits. Digits pair up, then pairs into quads, then the eight digits.
    let pairs = ((d >> 8) & 0x00FF_00FF_00FF_00FF) + (d & 0x00FF_00FF_00FF_00FF) * 10;
    let quads = ((pairs >> 16) & 0x0000_FFFF_0000_FFFF) + (pairs & 0x0000_FFFF_0000_FFFF) * 100;
    let eight = (quads >> 32) + (quads & 0xFFFF_FFFF) * 10_000;
    let (d8, d9) = (*value.get(9)?, *value.get(10)?);
    if !d8.is_ascii_digit() || !d9.is_ascii_digit() {
        return None;
    }
    let high = u64::from(d8 - b'0') + u64::from(d9 - b'0') * 10;
    u32::try_from(eight + high * 100_000_000).ok()
}

/// Body CRC (masked IEEE CRC32).
#[inline]
pub fn body_crc(body: &[u8]) -> u32 {
    crc::body_crc(body)
}

/// Writes the 8-byte END_OF_FILE marker for `remaining` bytes into `out` (at least 8 bytes).
pub fn encode_blank(out: &mut [u8], remaining: u32) {
    let mut w = Writer { buf: out, pos: 0 };
    w.u32(remaining);
    w.u32(BLANK_MAGIC);
}

struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.pos..self.pos + b.len()) {
            dst.copy_from_slice(b);
        }
        self.pos += b.len();
    }
    #[inline]
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_be_bytes());
    }
}

/// A decoded view over one record's bytes; field accessors read lazily.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    buf: &'a [u8],
    born_host_len: usize,
    store_host_len: usize,
    body_at: usize,
    body_len: usize,
    topic_at: usize,
    topic_len: usize,
    props_at: usize,
    props_len: usize,
}

/// What a parse verifies beyond the record's structure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verify<'t> {
    /// Structure only, and a UTF-8 topic.
    Structure,
    /// Also the body CRC, and the whole-record CRC when the property is there.
    Crcs,
    /// The whole-record CRC (it covers the body) and this exact topic; a record without the
    /// property (written by RocketMQ) has its body CRC checked instead.
    Read(&'t [u8]),
}

impl<'a> RecordView<'a> {
    /// Parses the record at the start of `buf` (which may be longer); `check_crc` recomputes
    /// the body CRC.
    pub fn parse(buf: &'a [u8], check_crc: bool) -> Result<Self, DecodeError> {
        let verify = if check_crc {
            Verify::Crcs
        } else {
            Verify::Structure
        };
        Self::parse_checked(buf, verify)
    }

    /// Parses a record of an mqlite store for a reader that knows which topic it must hold
    /// (a consumer led to it by a consume-queue unit). The whole-record CRC property, when
    /// present, is checked; it covers the body and the BODYCRC field, so the body is not hashed
    /// a second time, and any damage to either still fails the check. A record without the
    /// property (RocketMQ's default) has its body CRC checked instead. The topic must equal
    /// `topic` byte for byte (`OtherTopic` otherwise), which also makes it UTF-8.
    pub fn parse_read(buf: &'a [u8], topic: &str) -> Result<Self, DecodeError> {
        Self::parse_checked(buf, Verify::Read(topic.as_bytes()))
    }

    /// Parses and runs the checks `verify` names (the property is located once for both CRCs).
    fn parse_checked(buf: &'a [u8], verify: Verify<'_>) -> Result<Self, DecodeError> {
        let total = be_u32(buf, 0).ok_or(DecodeError::Truncated)? as usize;
        let magic = be_u32(buf, 4).ok_or(DecodeError::Truncated)?;
        let v2 = match magic {
            MAGIC_V1 => false,
            MAGIC_V2 => true,
            m => return Err(DecodeError::BadMagic(m)),
        };
        if total < FIXED_V1_IPV4 {
            return Err(DecodeError::BadLength);
        }
        let buf = buf.get(..total).ok_or(DecodeError::Truncated)?;
        let sysflag = be_u32(buf, 36).ok_or(DecodeError::Truncated)? as i32;
        let born_host_len = if sysflag & super::sysflag::BORNHOST_V6 != 0 {
            20
        } else {
            8
        };
        let store_host_len = if sysflag & super::sysflag::STOREHOST_V6 != 0 {
            20
        } else {
            8
        };
        let store_ts_at = 48 + born_host_len;
        let body_len_at = store_ts_at + 8 + store_host_len + 4 + 8;
        let body_len = be_u32(buf, body_len_at).ok_or(DecodeError::Truncated)? as usize;
        let body_at = body_len_at + 4;
        let topic_len_at = body_at
            .checked_add(body_len)
            .ok_or(DecodeError::BadLength)?;
        let (topic_len, topic_at) = if v2 {
            (
                usize::from(be_u16(buf, topic_len_at).ok_or(DecodeError::BadLength)?),
                topic_len_at + 2,
            )
        } else {
            (
                usize::from(*buf.get(topic_len_at).ok_or(DecodeError::BadLength)?),
                topic_len_at + 1,
            )
        };
        let props_len_at = topic_at
            .checked_add(topic_len)
            .ok_or(DecodeError::BadLength)?;
        let props_len = be_u16(buf, props_len_at).ok_or(DecodeError::BadLength)?;
        if props_len > i16::MAX as u16 {
            return Err(DecodeError::BadLength);
        }
        let props_at = props_len_at + 2;
        if props_at + usize::from(props_len) != total {
            return Err(DecodeError::BadLength);
        }
        let view = RecordView {
            buf,
            born_host_len,
            store_host_len,
            body_at,
            body_len,
            topic_at,
            topic_len,
            props_at,
            props_len: usize::from(props_len),
        };
        match verify {
            Verify::Read(topic) if view.topic_bytes() != topic => {
                return Err(DecodeError::OtherTopic);
            }
            Verify::Read(_) => {}
            _ if std::str::from_utf8(view.topic_bytes()).is_err() => {
                return Err(DecodeError::BadTopic);
            }
            _ => {}
        }
        if verify == Verify::Structure {
            return Ok(view);
        }
        // Records written by mqlite also carry a CRC of everything before it (header, topic
        // and properties included). Records written by RocketMQ usually lack it; they are
        // whole when their structure holds and their body CRC matches.
        let record_crc = trailing_record_crc(view.properties_raw());
        let check_body = match verify {
            Verify::Read(_) => record_crc.is_none(),
            _ => true,
        };
        if record_crc.is_none() && !untorn_without_record_crc(&view) {
            return Err(DecodeError::TornFields);
        }
        if check_body {
            let stored = view.body_crc();
            let computed = crc::body_crc(view.body());
            if stored != computed {
                return Err(DecodeError::CrcMismatch { stored, computed });
            }
        }
        if let Some(stored) = record_crc {
            let covered = buf.get(..total - RECORD_CRC_LEN).unwrap_or(&[]);
            let computed = crc::body_crc(covered);
            if stored != computed {
                return Err(DecodeError::RecordCrcMismatch { stored, computed });
            }
        }
        Ok(view)
    }

    /// Parses a stored record with every check recovery makes: structure, the body CRC, and
    /// the whole-record CRC when the property is there (mqlite writes it on every record;
    /// RocketMQ's records usually lack it and are whole by body CRC and structure).
    pub fn parse_verified(buf: &'a [u8]) -> Result<Self, DecodeError> {
        Self::parse_checked(buf, Verify::Crcs)
    }

    /// Where the body of a record that was already parsed (and verified) lies in `record`,
    /// and its SYSFLAG: only the sysflag's host widths and BODYLEN are read (view.rs
    /// `RecordView::stored_body`). `None` if those fields do not fit.
    pub(super) fn body_range(record: &[u8]) -> Option<(std::ops::Range<usize>, i32)> {
        let sysflag = be_u32(record, 36)? as i32;
        let born_host_len = if sysflag & super::sysflag::BORNHOST_V6 != 0 {
            20
        } else {
            8
        };
        let store_host_len = if sysflag & super::sysflag::STOREHOST_V6 != 0 {
            20
        } else {
            8
        };
        let body_len_at = 48 + born_host_len + 8 + store_host_len + 4 + 8;
        let body_len = be_u32(record, body_len_at)? as usize;
        let body_at = body_len_at + 4;
        let end = body_at.checked_add(body_len)?;
        (end <= record.len()).then_some((body_at..end, sysflag))
    }

    /// The record's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
    /// TOTALSIZE.
    pub fn total_size(&self) -> u32 {
        self.buf.len() as u32
    }
    /// Magic code.
    pub fn magic(&self) -> u32 {
        be_u32(self.buf, 4).unwrap_or(0)
    }
    /// Stored body CRC.
    pub fn body_crc(&self) -> u32 {
        be_u32(self.buf, 8).unwrap_or(0)
    }
    /// Queue id.
    pub fn queue_id(&self) -> u32 {
        be_u32(self.buf, 12).unwrap_or(0)
    }
    /// User flag.
    pub fn flag(&self) -> i32 {
        be_u32(self.buf, 16).unwrap_or(0) as i32
    }
    /// Queue offset.
    pub fn queue_offset(&self) -> u64 {
        be_u64(self.buf, QUEUE_OFFSET_POS).unwrap_or(0)
    }
    /// Physical (commit-log) offset.
    pub fn physical_offset(&self) -> u64 {
        be_u64(self.buf, PHYSICAL_OFFSET_POS).unwrap_or(0)
    }
    /// SYSFLAG.
    pub fn sysflag(&self) -> i32 {
        be_u32(self.buf, 36).unwrap_or(0) as i32
    }
    /// Born timestamp (ms).
    pub fn born_timestamp(&self) -> i64 {
        be_u64(self.buf, 40).unwrap_or(0) as i64
    }
    /// Born host bytes (address then port).
    pub fn born_host(&self) -> &'a [u8] {
        self.buf.get(48..48 + self.born_host_len).unwrap_or(&[])
    }
    /// Store timestamp (ms).
    pub fn store_timestamp(&self) -> i64 {
        be_u64(self.buf, 48 + self.born_host_len).unwrap_or(0) as i64
    }
    /// Store host bytes (address then port).
    pub fn store_host(&self) -> &'a [u8] {
        let at = 56 + self.born_host_len;
        self.buf.get(at..at + self.store_host_len).unwrap_or(&[])
    }
    /// Reconsume times.
    pub fn reconsume_times(&self) -> i32 {
        be_u32(self.buf, 56 + self.born_host_len + self.store_host_len).unwrap_or(0) as i32
    }
    /// Prepared transaction offset.
    pub fn prepared_transaction_offset(&self) -> i64 {
        be_u64(self.buf, 60 + self.born_host_len + self.store_host_len).unwrap_or(0) as i64
    }
    /// Body bytes.
    pub fn body(&self) -> &'a [u8] {
        self.buf
            .get(self.body_at..self.body_at + self.body_len)
            .unwrap_or(&[])
    }
    /// Topic bytes (UTF-8, checked by `parse`).
    pub fn topic_bytes(&self) -> &'a [u8] {
        self.buf
            .get(self.topic_at..self.topic_at + self.topic_len)
            .unwrap_or(&[])
    }
    /// Topic.
    pub fn topic(&self) -> &'a str {
        std::str::from_utf8(self.topic_bytes()).unwrap_or("")
    }
    /// Encoded properties as stored, including a trailing whole-record CRC property.
    pub fn properties_raw(&self) -> &'a [u8] {
        self.buf
            .get(self.props_at..self.props_at + self.props_len)
            .unwrap_or(&[])
    }

    /// Encoded properties without the store's whole-record CRC property.
    pub fn properties(&self) -> &'a [u8] {
        let raw = self.properties_raw();
        let Some(at) = raw.len().checked_sub(RECORD_CRC_LEN) else {
            return raw;
        };
        // Shape check only (name and separators); `parse` verified the digits when asked.
        let tail = raw.get(at..).unwrap_or(&[]);
        if tail.starts_with(RECORD_CRC_NAME)
            && tail.get(8) == Some(&super::properties::NAME_VALUE_SEPARATOR)
            && tail.last() == Some(&super::properties::PROPERTY_SEPARATOR)
        {
            raw.get(..at).unwrap_or(raw)
        } else {
            raw
        }
    }
}

/// What lies at a position of the commit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordCheck {
    /// A valid record of this many bytes.
    Record(u32),
    /// The END_OF_FILE marker: the rest of the file is blank.
    Blank,
    /// No record starts here (zeros: the end of written data).
    End,
    /// Bytes that are not a valid record.
    Invalid(DecodeError),
}

/// What the first 8 bytes at a position announce, without validating a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// Zeros (or too few bytes): no record starts here.
    End,
    /// The END_OF_FILE marker.
    Blank,
    /// Something else: parse it as a record.
    Record,
}

/// Classifies the start of `buf` cheaply (the dispatcher's per-record check).
pub fn peek(buf: &[u8]) -> Peek {
    match (be_u32(buf, 0), be_u32(buf, 4)) {
        (Some(0), Some(0)) | (None, _) | (_, None) => Peek::End,
        (_, Some(BLANK_MAGIC)) => Peek::Blank,
        _ => Peek::Record,
    }
}

/// Like [`check`] for a store's commit log: with `verify`, also both CRCs
/// ([`RecordView::parse_verified`]).
pub fn check_stored(buf: &[u8], verify: bool, expected_physical: Option<u64>) -> RecordCheck {
    match check(buf, false, expected_physical) {
        RecordCheck::Record(n) if verify => match RecordView::parse_verified(buf) {
            Ok(_) => RecordCheck::Record(n),
            Err(e) => RecordCheck::Invalid(e),
        },
        other => other,
    }
}

/// Classifies the bytes at the start of `buf` (the rest of the file from a position).
pub fn check(buf: &[u8], check_crc: bool, expected_physical: Option<u64>) -> RecordCheck {
    let Some(total) = be_u32(buf, 0) else {
        return RecordCheck::End;
    };
    let magic = be_u32(buf, 4).unwrap_or(0);
    if total == 0 && magic == 0 {
        return RecordCheck::End;
    }
    if magic == BLANK_MAGIC {
        return if total as usize == buf.len() {
            RecordCheck::Blank
        } else {
            RecordCheck::Invalid(DecodeError::BadLength)
        };
    }
    match RecordView::parse(buf, check_crc) {
        Ok(v) => {
            if expected_physical.is_some_and(|p| p != v.physical_offset()) {
                return RecordCheck::Invalid(DecodeError::BadLength);
            }
            RecordCheck::Record(v.total_size())
        }
        Err(e) => RecordCheck::Invalid(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store timestamp follows the born host, whose size SYSFLAG gives: a RocketMQ record
    /// with an IPv6 born host keeps it 12 bytes later than an IPv4 one.
    #[test]
    fn store_timestamp_of_follows_the_born_hosts_size() {
        let ts: i64 = 1_700_000_123_456;
        let mut v4 = vec![0u8; 120];
        v4[STORE_TIMESTAMP_POS..STORE_TIMESTAMP_POS + 8].copy_from_slice(&ts.to_be_bytes());
        assert_eq!(store_timestamp_of(&v4), Some(ts));
        let mut v6 = vec![0u8; 120];
        v6[SYSFLAG_POS..SYSFLAG_POS + 4]
            .copy_from_slice(&super::super::sysflag::BORNHOST_V6.to_be_bytes());
        v6[STORE_TIMESTAMP_POS + 12..STORE_TIMESTAMP_POS + 20].copy_from_slice(&ts.to_be_bytes());
        assert_eq!(store_timestamp_of(&v6), Some(ts));
        assert_eq!(store_timestamp_of(&v6[..60]), None);
    }

    fn meta() -> RecordMeta {
        RecordMeta {
            queue_id: 3,
            flag: 7,
            queue_offset: 42,
            physical_offset: 4096,
            sysflag: 0,
            born_timestamp: 1_700_000_000_000,
            store_timestamp: 1_700_000_000_001,
            reconsume_times: 2,
            prepared_transaction_offset: 0,
        }
    }

    #[test]
    fn round_trip_v1() {
        let (body, topic, props) = (
            b"hello".as_slice(),
            b"TopicTest".as_slice(),
            b"TAGS\x01A\x02".as_slice(),
        );
        let n = encoded_len(body.len(), topic.len(), props.len()).unwrap();
        assert_eq!(n, 91 + 5 + 9 + 7);
        let mut buf = vec![0u8; n];
        encode(&mut buf, &meta(), body_crc(body), body, topic, props);
        let v = RecordView::parse(&buf, true).unwrap();
        assert_eq!(v.magic(), MAGIC_V1);
        assert_eq!(
            (
                v.queue_id(),
                v.flag(),
                v.queue_offset(),
                v.physical_offset()
            ),
            (3, 7, 42, 4096)
        );
        assert_eq!(v.born_timestamp(), 1_700_000_000_000);
        assert_eq!(v.store_timestamp(), 1_700_000_000_001);
        assert_eq!(v.reconsume_times(), 2);
        assert_eq!(
            (v.body(), v.topic(), v.properties()),
            (body, "TopicTest", props)
        );
        assert_eq!(check(&buf, true, Some(4096)), RecordCheck::Record(n as u32));
        assert!(matches!(
            check(&buf, true, Some(1)),
            RecordCheck::Invalid(_)
        ));
    }

    #[test]
    fn v2_for_long_topics_and_crc_detects_flip() {
        let topic = vec![b'a'; 200];
        let n = encoded_len(1, 200, 0).unwrap();
        assert_eq!(n, 92 + 1 + 200);
        let mut buf = vec![0u8; n];
        encode(&mut buf, &meta(), body_crc(b"x"), b"x", &topic, b"");
        let v = RecordView::parse(&buf, true).unwrap();
        assert_eq!(v.magic(), MAGIC_V2);
        assert_eq!(v.topic().len(), 200);
        buf[88] ^= 1; // flip a body bit
        assert!(matches!(
            RecordView::parse(&buf, true),
            Err(DecodeError::CrcMismatch { .. })
        ));
        assert!(RecordView::parse(&buf, false).is_ok());
    }

    #[test]
    fn record_crc_digits_are_the_decimal_digits_reversed() {
        for v in [
            0u32,
            1,
            9,
            10,
            99,
            100,
            9_999,
            10_000,
            12_345,
            99_990_000,
            99_999_999,
            100_000_000,
            4_200_010_099,
            0x7FFF_FFFF,
            1_000_000_007,
            u32::MAX,
        ] {
            let p = record_crc_property(v);
            let want: String = format!("{v:010}").chars().rev().collect();
            assert_eq!(&p[9..19], want.as_bytes(), "{v}");
            assert_eq!(trailing_record_crc(&p), Some(v), "{v}");
        }
    }

    /// The read parse checks only the whole-record CRC, yet rejects every single-bit flip of a
    /// stored record outside the property itself (body and BODYCRC included: the record CRC
    /// covers them), and a record of another topic. A flip that makes the property unreadable
    /// leaves a record whose every other byte is intact, checked by its body CRC as RocketMQ's
    /// records are.
    #[test]
    fn read_parse_rejects_every_bit_flip() {
        let body = b"hello, consumer";
        let props = b"TAGS\x01A\x02";
        let n = encoded_len(body.len(), 9, props.len() + RECORD_CRC_LEN).unwrap();
        let mut rec = vec![0u8; n];
        encode_with_record_crc(&mut rec, &meta(), body_crc(body), body, b"TopicTest", props);
        let v = RecordView::parse_read(&rec, "TopicTest").unwrap();
        assert_eq!((v.body(), v.topic()), (&body[..], "TopicTest"));
        assert_eq!(
            RecordView::parse_read(&rec, "TopicTesT").err(),
            Some(DecodeError::OtherTopic)
        );
        for bit in 0..(rec.len() - RECORD_CRC_LEN) * 8 {
            let mut bad = rec.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                RecordView::parse_read(&bad, "TopicTest").is_err(),
                "flip of bit {bit} (byte {}) was accepted",
                bit / 8
            );
        }
        // A body flip is caught by the record CRC alone (the body CRC is not recomputed).
        let mut bad = rec.clone();
        let body_at = RecordView::body_range(&rec).unwrap().0.start;
        bad[body_at] ^= 0x20;
        assert!(matches!(
            RecordView::parse_read(&bad, "TopicTest"),
            Err(DecodeError::RecordCrcMismatch { .. })
        ));
        // A record without the property (RocketMQ's default) is read with its body CRC.
        let mut plain = vec![0u8; encoded_len(body.len(), 9, 0).unwrap()];
        encode(&mut plain, &meta(), body_crc(body), body, b"TopicTest", b"");
        assert!(RecordView::parse_read(&plain, "TopicTest").is_ok());
        let body_at = RecordView::body_range(&plain).unwrap().0.start;
        plain[body_at] ^= 0x20;
        assert!(matches!(
            RecordView::parse_read(&plain, "TopicTest"),
            Err(DecodeError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn split_encoding_is_the_same_record() {
        let long_topic = "T".repeat(200);
        for (topic, body_len, props) in [
            ("TopicTest", 5usize, &b"TAGS\x01A\x02"[..]),
            ("TopicTest", 3000, &b""[..]),
            (long_topic.as_str(), 70, &b"KEYS\x01k\x02"[..]),
        ] {
            let body: Vec<u8> = (0..body_len).map(|i| (i * 7 % 251) as u8).collect();
            let n = encoded_len(body.len(), topic.len(), props.len() + RECORD_CRC_LEN).unwrap();
            let mut whole = vec![0u8; n];
            let crc = body_crc(&body);
            encode_with_record_crc(&mut whole, &meta(), crc, &body, topic.as_bytes(), props);
            let mut head = [0u8; HEAD_LEN];
            let mut tail = vec![0u8; n - HEAD_LEN - body.len()];
            encode_split_with_record_crc(
                &mut head,
                &mut tail,
                &meta(),
                crc,
                &body,
                topic.as_bytes(),
                props,
            );
            assert_eq!(
                [&head[..], &body, &tail].concat(),
                whole,
                "topic of {}",
                topic.len()
            );
            let v = RecordView::parse_verified(&whole).unwrap();
            assert_eq!(v.topic(), topic);
            assert_eq!(&whole[RecordView::body_range(&whole).unwrap().0], &body[..]);
        }
        // A record without the whole-record CRC property (written by RocketMQ) is whole when
        // its structure and body CRC are.
        let mut plain = vec![0u8; encoded_len(5, 9, 0).unwrap()];
        encode(
            &mut plain,
            &meta(),
            body_crc(b"hello"),
            b"hello",
            b"TopicTest",
            b"",
        );
        assert!(RecordView::parse(&plain, true).is_ok());
        assert!(RecordView::parse_verified(&plain).is_ok());
        plain[HEAD_LEN] ^= 1;
        assert!(matches!(
            RecordView::parse_verified(&plain),
            Err(DecodeError::CrcMismatch { .. })
        ));
    }

    /// Without the record CRC, a record torn inside its topic or properties (zeros where the
    /// write did not land) is not whole, though its body CRC holds.
    #[test]
    fn record_without_record_crc_torn_in_its_fields_is_invalid() {
        let props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02";
        let n = encoded_len(5, 9, props.len()).unwrap();
        let mut rec = vec![0u8; n];
        encode(
            &mut rec,
            &meta(),
            body_crc(b"hello"),
            b"hello",
            b"TopicTest",
            props,
        );
        assert!(RecordView::parse_verified(&rec).is_ok());
        for cut in 1..=props.len() + 10 {
            let mut torn = rec.clone();
            torn[n - cut..].fill(0);
            assert!(
                RecordView::parse_verified(&torn).is_err(),
                "last {cut} bytes zeroed"
            );
            assert!(RecordView::parse_read(&torn, "TopicTest").is_err());
        }
        let mut hole = rec.clone();
        hole[n - 8] = 0;
        // RocketMQ 4.x leaves out the final separator: not a sign of a tear.
        let short = b"TAGS\x01TagA\x02KEYS\x01k1 k2";
        let mut v4 = vec![0u8; encoded_len(5, 9, short.len()).unwrap()];
        encode(
            &mut v4,
            &meta(),
            body_crc(b"hello"),
            b"hello",
            b"TopicTest",
            short,
        );
        assert!(RecordView::parse_verified(&v4).is_ok());
        assert_eq!(
            RecordView::parse_verified(&hole).err(),
            Some(DecodeError::TornFields)
        );
        // Structure-only parsing (dispatch) does not look at the fields.
        assert!(RecordView::parse(&hole, false).is_ok());
    }

    #[test]
    fn record_crc_property_covers_the_header() {
        let props = b"TAGS\x01A\x02";
        let n = encoded_len(5, 9, props.len() + RECORD_CRC_LEN).unwrap();
        let mut buf = vec![0u8; n];
        encode_with_record_crc(
            &mut buf,
            &meta(),
            body_crc(b"hello"),
            b"hello",
            b"TopicTest",
            props,
        );
        let v = RecordView::parse(&buf, true).unwrap();
        assert_eq!(v.properties(), props);
        let raw = v.properties_raw();
        assert!(raw.ends_with(b"\x02") && raw.len() == props.len() + RECORD_CRC_LEN);
        // digits are the masked CRC of everything before the property, least significant first
        let crc = crc::body_crc(&buf[..n - RECORD_CRC_LEN]);
        let digits: String = crc.to_string().chars().rev().collect();
        let tail = std::str::from_utf8(&raw[raw.len() - 11..raw.len() - 1]).unwrap();
        assert_eq!(tail.trim_end_matches('0'), digits.trim_end_matches('0'));
        // a flipped header bit (QUEUEOFFSET) is caught; without the check it parses
        let mut bad = buf.clone();
        bad[QUEUE_OFFSET_POS + 7] ^= 1;
        assert!(matches!(
            RecordView::parse(&bad, true),
            Err(DecodeError::RecordCrcMismatch { .. })
        ));
        assert!(RecordView::parse(&bad, false).is_ok());
    }

    /// FORMAT.md §1.5 read digit by digit: ten ASCII digits, least significant first.
    fn reference_record_crc(tail: &[u8]) -> Option<u32> {
        tail[9..19]
            .iter()
            .rev()
            .try_fold(0u64, |v, &c| {
                c.is_ascii_digit().then(|| v * 10 + u64::from(c - b'0'))
            })
            .and_then(|v| u32::try_from(v).ok())
    }

    /// Every byte value at every digit position, around values at the edges of u32: the
    /// word-at-a-time reader accepts exactly what the reference accepts, with the same value.
    #[test]
    fn record_crc_digits_reject_exactly_the_non_digits() {
        for start in [0u32, 7, 4_294_967_295, 1_999_999_999] {
            for at in 0..10 {
                for byte in 0..=255u8 {
                    let mut tail = record_crc_property(start);
                    tail[9 + at] = byte;
                    assert_eq!(
                        trailing_record_crc(&tail),
                        reference_record_crc(&tail),
                        "{start} with byte {byte:#04x} at digit {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn blank_and_end() {
        let mut buf = vec![0u8; 64];
        assert_eq!(check(&buf, true, None), RecordCheck::End);
        encode_blank(&mut buf, 64);
        assert_eq!(check(&buf, true, None), RecordCheck::Blank);
        assert_eq!(&buf[..8], &[0, 0, 0, 64, 0xCB, 0xD4, 0x31, 0x94]);
    }

    proptest::proptest! {
        #[test]
        fn any_record_round_trips(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..2048),
            topic in "[A-Za-z0-9_%|-]{1,300}",
            props in proptest::collection::vec(("[a-zA-Z0-9]{1,8}", "[ -~]{1,16}"), 0..6),
            queue_id in 0u32..1024,
            queue_offset in 0u64..(1 << 40),
            physical_offset in 0u64..(1 << 50),
            flag in proptest::prelude::any::<i32>(),
            born in 0i64..(1 << 42),
        ) {
            let encoded_props = crate::message::properties::encode(
                props.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            );
            let n = encoded_len(body.len(), topic.len(), encoded_props.len()).unwrap();
            let mut buf = vec![0u8; n];
            let meta = RecordMeta {
                queue_id, flag, queue_offset, physical_offset, sysflag: 0,
                born_timestamp: born, store_timestamp: born + 1, reconsume_times: 0,
                prepared_transaction_offset: 0,
            };
            encode(&mut buf, &meta, body_crc(&body), &body, topic.as_bytes(), &encoded_props);
            let v = RecordView::parse(&buf, true).unwrap();
            proptest::prop_assert_eq!(v.total_size() as usize, n);
            proptest::prop_assert_eq!(v.magic(), if topic.len() > 127 { MAGIC_V2 } else { MAGIC_V1 });
            proptest::prop_assert_eq!(v.body(), body.as_slice());
            proptest::prop_assert_eq!(v.topic(), topic.as_str());
            proptest::prop_assert_eq!(v.properties(), encoded_props.as_slice());
            proptest::prop_assert_eq!((v.queue_id(), v.queue_offset(), v.physical_offset()), (queue_id, queue_offset, physical_offset));
            proptest::prop_assert_eq!((v.flag(), v.born_timestamp(), v.store_timestamp()), (flag, born, born + 1));
            proptest::prop_assert_eq!(check(&buf, true, Some(physical_offset)), RecordCheck::Record(n as u32));
            // Any truncation is detected, never a panic.
            let cut = n / 2;
            proptest::prop_assert!(RecordView::parse(&buf[..cut], true).is_err());
        }

        /// The word-at-a-time digit reader agrees with the reference on any ten digits.
        #[test]
        fn record_crc_digits_read_like_the_reference(
            digits in proptest::collection::vec(b'0'..=b'9', 10),
        ) {
            let mut tail = record_crc_property(0);
            tail[9..19].copy_from_slice(&digits);
            let props = [&b"KEYS\x01k\x02"[..], &tail].concat();
            proptest::prop_assert_eq!(trailing_record_crc(&props), reference_record_crc(&tail));
            proptest::prop_assert_eq!(trailing_record_crc(&tail), reference_record_crc(&tail));
        }
    }
}
