//! The 20-byte consume-queue unit (FORMAT.md §4): i64 commit-log offset, i32 size, i64 tags code.

/// Bytes per unit.
pub const UNIT_SIZE: u64 = 20;
/// Position of the size word inside a unit (written last, with release ordering).
pub const SIZE_POS: usize = 8;
/// Size field of a placeholder unit (a slot before the queue's first real unit).
pub const PLACEHOLDER_SIZE: u32 = i32::MAX as u32;

/// One unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqUnit {
    /// Commit-log offset of the record.
    pub offset: u64,
    /// Record size.
    pub size: u32,
    /// Tags code (Java hash of TAGS).
    pub tags_code: i64,
}

impl CqUnit {
    /// Encodes to the on-disk bytes.
    pub fn encode(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..].copy_from_slice(&self.tags_code.to_be_bytes());
        b
    }

    /// Decodes; `None` for an empty (all-zero size) slot or a malformed one. A size of
    /// `PLACEHOLDER_SIZE` is a placeholder only in its exact shape `(0, PLACEHOLDER_SIZE, 0)`:
    /// readers skip placeholders, so a damaged unit whose size bytes happen to read
    /// `0x7FFFFFFF` must not pass for one (it would hide its message).
    pub fn decode(b: &[u8; 20]) -> Option<Self> {
        let offset = u64::from_be_bytes(b[..8].try_into().ok()?);
        let size = u32::from_be_bytes(b[8..12].try_into().ok()?);
        let tags_code = i64::from_be_bytes(b[12..].try_into().ok()?);
        if size == 0 || offset > i64::MAX as u64 || size > i32::MAX as u32 {
            return None;
        }
        if size == PLACEHOLDER_SIZE && (offset != 0 || tags_code != 0) {
            return None;
        }
        Some(CqUnit {
            offset,
            size,
            tags_code,
        })
    }

    /// A placeholder for a slot that has no message.
    pub fn placeholder() -> Self {
        CqUnit {
            offset: 0,
            size: PLACEHOLDER_SIZE,
            tags_code: 0,
        }
    }

    /// True for placeholder units.
    pub fn is_placeholder(&self) -> bool {
        self.size == PLACEHOLDER_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_a_placeholder_only_in_its_exact_shape() {
        assert_eq!(
            CqUnit::decode(&CqUnit::placeholder().encode()),
            Some(CqUnit::placeholder())
        );
        for (offset, tags_code) in [(i64::MAX as u64, 0), (0, -1), (4096, 7)] {
            let damaged = CqUnit {
                offset,
                size: PLACEHOLDER_SIZE,
                tags_code,
            };
            assert_eq!(CqUnit::decode(&damaged.encode()), None, "{damaged:?}");
        }
    }

    #[test]
    fn golden_and_round_trip() {
        let u = CqUnit {
            offset: 4096,
            size: 112,
            tags_code: 65,
        };
        let b = u.encode();
        assert_eq!(
            b,
            [0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 112, 0, 0, 0, 0, 0, 0, 0, 65]
        );
        assert_eq!(CqUnit::decode(&b), Some(u));
        assert_eq!(CqUnit::decode(&[0u8; 20]), None);
        assert!(CqUnit::decode(&CqUnit::placeholder().encode()).is_some_and(|u| u.is_placeholder()));
    }
}
