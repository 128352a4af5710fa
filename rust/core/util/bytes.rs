//! Byte searches used on the per-message paths (property strings are scanned on every append
//! and every dispatch), done eight bytes at a time; and the big-endian field reads of the
//! small fixed layouts (checkpoint and meta slots).

/// The `N` bytes at `at`, if `b` holds them.
#[inline]
fn bytes_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The big-endian `u16` at `at`, if `b` holds it.
#[inline]
pub fn be_u16(b: &[u8], at: usize) -> Option<u16> {
    bytes_at(b, at).map(u16::from_be_bytes)
}

/// The big-endian `u32` at `at`, if `b` holds it.
#[inline]
pub fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    bytes_at(b, at).map(u32::from_be_bytes)
}

/// The big-endian `u64` at `at`, if `b` holds it.
#[inline]
pub fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    bytes_at(b, at).map(u64::from_be_bytes)
}

/// The big-endian `i64` at `at`, if `b` holds it.
#[inline]
pub fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    bytes_at(b, at).map(i64::from_be_bytes)
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

#[inline]
#[expect(
    clippy::little_endian_bytes,
    reason = "in-memory search, not a format: the first byte must be the least significant so that \
              trailing_zeros finds the first match (borrows only corrupt higher bytes)"
)]
fn word(chunk: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(chunk);
    u64::from_le_bytes(w)
}

/// Bit mask with the high bit set in every byte of `w` that is below `n` (n <= 128). Exact for
/// bytes below 0x80; bytes of 0x80 and above never match.
#[inline]
fn below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(LO.wrapping_mul(u64::from(n))) & !w & HI
}

/// True when every byte of `hay` is ASCII and at least `n` (n <= 128).
#[inline]
pub fn all_ascii_from(hay: &[u8], n: u8) -> bool {
    let mut chunks = hay.chunks_exact(8);
    let mut bad = 0;
    for c in &mut chunks {
        let w = word(c);
        // A byte of 0x80 or more, or (exact among ASCII bytes) one below n.
        bad |= (w & HI) | below(w, n);
    }
    bad == 0 && chunks.remainder().iter().all(|&b| b >= n && b.is_ascii())
}

/// Index of the first byte of `hay` that is below `n` (n <= 128).
#[inline]
pub fn find_below(hay: &[u8], n: u8) -> Option<usize> {
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let m = below(word(c), n);
        if m != 0 {
            return Some(base + (m.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b < n)
        .map(|i| base + i)
}

/// Index of the first `needle` in `hay`.
#[inline]
pub fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    let pattern = LO.wrapping_mul(u64::from(needle));
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let x = word(c) ^ pattern;
        // A zero byte of x is a match; `below(x, 1)` is exact for zero bytes.
        let m = x.wrapping_sub(LO) & !x & HI;
        if m != 0 {
            return Some(base + (m.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == needle)
        .map(|i| base + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_agree_with_naive_scans() {
        let mut data: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8 | 0x03).collect();
        for at in [0usize, 1, 7, 8, 9, 63, 64, 150, 199] {
            for v in [0u8, 1, 2] {
                let saved = data[at];
                data[at] = v;
                assert_eq!(find_below(&data, 3), data.iter().position(|&b| b < 3));
                assert_eq!(find_byte(&data, v), data.iter().position(|&b| b == v));
                data[at] = saved;
            }
        }
        assert_eq!(find_below(&data, 3), None);
        assert_eq!(find_byte(b"", 2), None);
        // high bytes never count as "below"
        assert_eq!(find_below(&[0x80, 0xFF, 0x81, 0x02], 3), Some(3));
        assert_eq!(find_byte(&[0x80, 0xFF, 0x81, 0x02, 0xFF], 0xFF), Some(1));
    }

    #[test]
    fn all_ascii_from_agrees_with_a_naive_scan() {
        let naive = |h: &[u8]| h.iter().all(|&b| (3..0x80).contains(&b));
        // Every byte value at every position of every length up to three words.
        for len in 0..24usize {
            let mut data = vec![b'a'; len];
            assert!(all_ascii_from(&data, 3));
            for at in 0..len {
                for v in 0..=255u8 {
                    data[at] = v;
                    assert_eq!(all_ascii_from(&data, 3), naive(&data), "{data:?}");
                }
                data[at] = b'a';
            }
        }
    }
}
