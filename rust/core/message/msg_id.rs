//! Message ids (FORMAT.md §3): the offset id (store host + physical offset, 32 upper-case hex
//! characters) and the client unique id (UNIQ_KEY) a producer attaches to every message.

use std::sync::atomic::{AtomicI64, AtomicU16, Ordering};

use super::codec::HostV4;

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
}

/// Writes `bytes` as upper-case hex into `dst` (two characters per byte, as far as `dst` goes).
fn hex_into(dst: &mut [u8], bytes: &[u8]) {
    for (pair, b) in dst.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0xF)];
    }
}

/// The offset message id of the record at `physical_offset` stored by `host`.
pub fn offset_msg_id(host: &HostV4, physical_offset: u64) -> String {
    let mut s = String::with_capacity(32);
    push_hex(&mut s, &host.ip);
    push_hex(&mut s, &host.port.to_be_bytes());
    push_hex(&mut s, &physical_offset.to_be_bytes());
    s
}

/// Decodes an offset message id into (host, physical offset); `None` if malformed.
pub fn decode_offset_msg_id(id: &str) -> Option<(HostV4, u64)> {
    if id.len() != 32 || !id.is_ascii() {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::from_str_radix(id.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    let ip = [bytes[0], bytes[1], bytes[2], bytes[3]];
    let port = i32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?);
    let off = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    Some((HostV4 { ip, port }, off))
}

/// One client unique id (the UNIQ_KEY value): 32 upper-case hex characters, held inline (no
/// allocation per message). Only `UniqueIdGenerator` and `parse` make one, so the bytes are
/// always ASCII hex.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId([u8; 32]);

impl UniqueId {
    /// The 32 hex characters.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("")
    }

    /// `s` if it is 32 hex characters (upper case, as generated).
    pub fn parse(s: &str) -> Option<Self> {
        let b: [u8; 32] = s.as_bytes().try_into().ok()?;
        b.iter()
            .all(|c| matches!(c, b'0'..=b'9' | b'A'..=b'F'))
            .then_some(UniqueId(b))
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Generates client unique ids: IP(4) PID(2) seed(4) ms-since-month-start(4) counter(2), hex.
#[derive(Debug)]
pub struct UniqueIdGenerator {
    /// Hex of IP, PID and seed: the first 20 characters of every id.
    prefix: [u8; 20],
    // Start of the current UTC month and of the next one, in ms; recomputed when `now` leaves
    // the range (a benign race: every thread computes the same bounds).
    month_start: AtomicI64,
    month_end: AtomicI64,
    counter: AtomicU16,
}

impl UniqueIdGenerator {
    /// A generator for this process; `seed` stands in for Java's class-loader hash.
    pub fn new(seed: u32) -> Self {
        let [p0, p1] = (std::process::id() as u16).to_be_bytes();
        let [s0, s1, s2, s3] = seed.to_be_bytes();
        let mut prefix = [0u8; 20];
        hex_into(&mut prefix, &[127, 0, 0, 1, p0, p1, s0, s1, s2, s3]);
        UniqueIdGenerator {
            prefix,
            month_start: AtomicI64::new(0),
            month_end: AtomicI64::new(0),
            counter: AtomicU16::new(0),
        }
    }

    /// Milliseconds since the start of the UTC month of `now_ms`.
    fn since_month_start(&self, now_ms: i64) -> u32 {
        let mut start = self.month_start.load(Ordering::Relaxed);
        if now_ms >= self.month_end.load(Ordering::Relaxed) || now_ms < start {
            let (s, e) = month_bounds_utc(now_ms);
            self.month_start.store(s, Ordering::Relaxed);
            self.month_end.store(e, Ordering::Relaxed);
            start = s;
        }
        u32::try_from((now_ms - start).max(0)).unwrap_or(u32::MAX)
    }

    /// Appends `count` consecutive ids at wall-clock `now_ms` to `out`, 32 characters each:
    /// what `count` calls of `next_id` give, with the shared part encoded once.
    pub fn next_batch_into(&self, now_ms: i64, count: usize, out: &mut String) {
        if count == 0 {
            return;
        }
        let since = self.since_month_start(now_ms);
        // The counter wraps at 2^16 as RocketMQ's does; the batch takes a contiguous range.
        let first = self
            .counter
            .fetch_add((count % 65_536) as u16, Ordering::Relaxed);
        let id = self.id_at(since, first);
        // Only the counter's four digits differ along the batch: the 28-digit head is taken
        // as a str once, the digits are pushed as chars (no UTF-8 check per id).
        let head = std::str::from_utf8(id.0.get(..28).unwrap_or_default()).unwrap_or_default();
        out.reserve(count * 32);
        for i in 0..count {
            out.push_str(head);
            let mut digits = [0u8; 4];
            hex_into(&mut digits, &first.wrapping_add(i as u16).to_be_bytes());
            out.extend(digits.iter().map(|&d| char::from(d)));
        }
    }

    /// The next id at wall-clock `now_ms`, without allocating.
    pub fn next_id(&self, now_ms: i64) -> UniqueId {
        let since = self.since_month_start(now_ms);
        self.id_at(since, self.counter.fetch_add(1, Ordering::Relaxed))
    }

    /// The id with this generator's prefix, `since` (ms since the month's start) and `counter`.
    fn id_at(&self, since: u32, counter: u16) -> UniqueId {
        let mut id = [0u8; 32];
        let (prefix, rest) = id.split_at_mut(20);
        prefix.copy_from_slice(&self.prefix);
        let [a, b, c, d] = since.to_be_bytes();
        let [e, f] = counter.to_be_bytes();
        hex_into(rest, &[a, b, c, d, e, f]);
        UniqueId(id)
    }
}

/// Start of the UTC month containing `ms` and start of the next, in ms.
fn month_bounds_utc(ms: i64) -> (i64, i64) {
    let days = ms.div_euclid(86_400_000);
    let (y, m, _) = civil_from_days(days);
    let start = days_from_civil(y, m, 1) * 86_400_000;
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (start, days_from_civil(ny, nm, 1) * 86_400_000)
}

// Howard Hinnant's civil-calendar conversions (public-domain algorithms).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_id_round_trip() {
        let host = HostV4 {
            ip: [127, 0, 0, 1],
            port: 10911,
        };
        let id = offset_msg_id(&host, 0x1234);
        assert_eq!(id, "7F00000100002A9F0000000000001234");
        assert_eq!(decode_offset_msg_id(&id), Some((host, 0x1234)));
        assert_eq!(decode_offset_msg_id("zz"), None);
        assert_eq!(
            decode_offset_msg_id("7F00000100002A9F000000000000123G"),
            None
        );
    }

    #[test]
    fn a_batch_of_ids_is_what_single_calls_give() {
        let now = 1_700_000_000_000;
        let (one, many) = (UniqueIdGenerator::new(9), UniqueIdGenerator::new(9));
        // start near the 16-bit wrap so the batch crosses it
        for _ in 0..65_530 {
            one.next_id(now);
        }
        many.counter.store(65_530, Ordering::Relaxed);
        let mut singles = String::new();
        for _ in 0..10 {
            singles.push_str(one.next_id(now).as_str());
        }
        let mut batch = String::new();
        many.next_batch_into(now, 10, &mut batch);
        assert_eq!(batch, singles);
        assert_eq!(batch.len(), 320);
        assert!(
            batch[288..].ends_with("0003"),
            "the counter wrapped: {}",
            &batch[288..]
        );
        let mut none = String::new();
        many.next_batch_into(now, 0, &mut none);
        assert!(none.is_empty());
        assert_eq!(many.next_id(now), one.next_id(now)); // both counters moved alike
    }

    #[test]
    fn unique_ids_are_distinct_hex() {
        let g = UniqueIdGenerator::new(7);
        let a = g.next_id(1_700_000_000_000).as_str().to_owned();
        let b = g.next_id(1_700_000_000_000).as_str().to_owned();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
        // 2023-11-14T22:13:20Z: month starts 2023-11-01T00:00:00Z = 1698796800000
        assert_eq!(
            month_bounds_utc(1_700_000_000_000),
            (1_698_796_800_000, 1_701_388_800_000)
        );
    }

    #[test]
    fn unique_id_parse_accepts_only_generated_shape() {
        let g = UniqueIdGenerator::new(3);
        let id = g.next_id(1_700_000_000_000);
        assert_eq!(UniqueId::parse(id.as_str()), Some(id));
        assert_eq!(format!("{id}"), id.as_str());
        let lower = id.as_str().to_ascii_lowercase();
        let has_letter = lower.bytes().any(|c| c.is_ascii_alphabetic());
        assert_eq!(UniqueId::parse(&lower).is_some(), !has_letter);
        assert_eq!(UniqueId::parse(&id.as_str()[..31]), None);
        assert_eq!(UniqueId::parse(&format!("{}G", &id.as_str()[..31])), None);
        assert_eq!(UniqueId::parse(""), None);
    }
}
