//! Body CRC as RocketMQ computes it: zlib/IEEE CRC32 masked with `0x7FFF_FFFF` (FORMAT.md §1.3).

/// RocketMQ's body CRC: IEEE CRC32 of `data`, ANDed with `0x7FFF_FFFF` so it is never negative.
#[inline]
pub fn body_crc(data: &[u8]) -> u32 {
    crc32fast::hash(data) & 0x7FFF_FFFF
}

/// Plain IEEE CRC32, used for mqlite's own checksums (checkpoint).
#[inline]
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
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
    }
}
