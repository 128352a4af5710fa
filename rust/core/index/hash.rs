//! The index's keys and their hash, as RocketMQ builds them (so that Java tooling finds what
//! mqlite indexed, and mqlite finds what RocketMQ indexed): a message is indexed under
//! `topic#UNIQ_KEY` and under `topic#k` for every non-empty space-separated piece `k` of its
//! `KEYS` property; a key's hash is Java's `String.hashCode` of that text (UTF-16 code units),
//! made non-negative the way RocketMQ does (`Math.abs`, with `abs(i32::MIN)` mapped to 0).

use crate::message::properties;

/// Separator between topic and key in an index key.
pub const KEY_SEPARATOR: char = '#';

/// Java's `String.hashCode` of `s`: `h = 31*h + c` over its UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The hash RocketMQ stores in an entry for index key `key` (`IndexFile.indexKeyHashMethod`):
/// the absolute value of the Java hash, 0 for `i32::MIN`.
pub fn key_hash(key: &str) -> i32 {
    java_string_hash(key).checked_abs().unwrap_or(0)
}

/// Hash of `topic#key` without building the string.
pub fn topic_key_hash(topic: &str, key: &str) -> i32 {
    let h = topic
        .encode_utf16()
        .chain(std::iter::once(KEY_SEPARATOR as u16))
        .chain(key.encode_utf16())
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    h.checked_abs().unwrap_or(0)
}

/// The keys a record is indexed under (without the topic): its `UNIQ_KEY`, then each piece of
/// `KEYS`, in RocketMQ's order. Duplicates are kept (an entry each, as RocketMQ writes them).
pub fn record_keys(props: &[u8]) -> impl Iterator<Item = &str> {
    let uniq = properties::get(props, properties::UNIQ_KEY).filter(|k| !k.is_empty());
    let keys = properties::get(props, properties::KEYS)
        .unwrap_or("")
        .split(' ')
        .filter(|k| !k.is_empty());
    uniq.into_iter().chain(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        // Values of "...".hashCode() in Java.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("Aa"), java_string_hash("BB"));
        // UTF-16 code units: a character outside the BMP counts as two.
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
        assert_eq!(java_string_hash("é"), 0xE9);
    }

    #[test]
    fn abs_maps_min_to_zero_and_negatives_to_positive() {
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(key_hash("polygenelubricants"), 0);
        let neg = "TopicTest#keyxyz123";
        let h = java_string_hash(neg);
        assert_eq!(key_hash(neg), h.abs());
    }

    #[test]
    fn topic_key_hash_is_hash_of_joined_text() {
        for (t, k) in [("T", "k"), ("orders", "id 7"), ("é", "\u{1F600}"), ("", "")] {
            assert_eq!(topic_key_hash(t, k), key_hash(&format!("{t}#{k}")));
        }
    }

    #[test]
    fn keys_are_uniq_then_pieces_of_keys() {
        let props = properties::encode([("KEYS", " a  b c "), ("UNIQ_KEY", "U1"), ("TAGS", "t")]);
        assert_eq!(
            record_keys(&props).collect::<Vec<_>>(),
            ["U1", "a", "b", "c"]
        );
        assert_eq!(record_keys(&[]).count(), 0);
    }
}
