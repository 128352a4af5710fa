//! Body CRC as RocketMQ computes it: zlib/IEEE CRC32 masked with `0x7FFF_FFFF` (FORMAT.md §1.3).

use std::sync::OnceLock;

/// A hasher set up once: `crc32fast::Hasher::new` detects the CPU's features on every call,
/// which costs as much as hashing a short body; cloning the prepared one does not.
fn prepared() -> crc32fast::Hasher {
    static BASE: OnceLock<crc32fast::Hasher> = OnceLock::new();
    BASE.get_or_init(crc32fast::Hasher::new).clone()
}

/// RocketMQ's body CRC: IEEE CRC32 of `data`, ANDed with `0x7FFF_FFFF` so it is never negative.
#[inline]
pub fn body_crc(data: &[u8]) -> u32 {
    crc32(data) & 0x7FFF_FFFF
}

/// Plain IEEE CRC32, used for mqlite's own checksums (checkpoint).
#[inline]
pub fn crc32(data: &[u8]) -> u32 {
    crc32_parts(&[data])
}

/// IEEE CRC32 of the concatenation of `parts`, without concatenating them.
#[inline]
pub fn crc32_parts(parts: &[&[u8]]) -> u32 {
    let mut h = prepared();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_java_crc32_masked() {
        // java.util.zip.CRC32 of "123456789" is 0xCBF43926; masked drops the top bit.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(body_crc(b"123456789"), 0x4BF4_3926);
        assert_eq!(body_crc(b""), 0);
        // every length through the short, folded and wide paths, against a fresh hasher
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 131 % 251) as u8).collect();
        for len in (0..300).chain([1023, 1024, 2047, 2048, 4096, 5000]) {
            assert_eq!(crc32(&data[..len]), crc32fast::hash(&data[..len]), "{len}");
        }
    }
}
