//! Input validation: every limit a message, topic or property must meet, checked before any
//! byte is written (bad input writes nothing).

use super::properties::{self, MAX_PROPERTIES_LEN};
use crate::error::{Error, Result};

/// Longest topic name in bytes (RocketMQ's `TopicValidator`).
pub const MAX_TOPIC_LEN: usize = 127;
/// Longest retry / DLQ topic name.
pub const MAX_SYSTEM_TOPIC_LEN: usize = 255;
/// Longest consumer / producer group name.
pub const MAX_GROUP_LEN: usize = 120;

/// Checks a topic name: 1..=127 bytes of `[A-Za-z0-9_%|-]` (RocketMQ's character set; no `.`
/// or `/`, so a topic can never name a path outside its directory).
pub fn check_topic(topic: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidTopic {
            topic: topic.to_owned(),
            reason,
        })
    };
    if topic.is_empty() {
        return bad("empty");
    }
    let limit = if is_retry_or_dlq(topic) {
        MAX_SYSTEM_TOPIC_LEN
    } else {
        MAX_TOPIC_LEN
    };
    if topic.len() > limit {
        return bad("longer than 127 bytes (255 for %RETRY%/%DLQ% topics)");
    }
    if !topic.bytes().all(is_topic_char) {
        return bad("illegal character; allowed: [A-Za-z0-9_%|-]");
    }
    Ok(())
}

/// True for `%RETRY%` and `%DLQ%` topics.
pub fn is_retry_or_dlq(topic: &str) -> bool {
    topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%")
}

fn is_topic_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'%' | b'|')
}

/// Checks a consumer or producer group name: 1..=120 bytes of the topic characters. Group
/// names become directory and file names of consumer metadata, so the rule also keeps them
/// inside the store root.
pub fn check_group(group: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidGroup {
            group: group.to_owned(),
            reason,
        })
    };
    if group.is_empty() {
        return bad("empty");
    }
    if group.len() > MAX_GROUP_LEN {
        return bad("longer than 120 bytes");
    }
    if !group.bytes().all(is_topic_char) {
        return bad("illegal character; allowed: [A-Za-z0-9_%|-]");
    }
    Ok(())
}

/// Checks one user property: non-empty name and value, no separator or NUL bytes.
pub fn check_property(name: &str, value: &str, allow_reserved: bool) -> Result<()> {
    let bad = |reason: String| Err(Error::InvalidMessage { reason });
    if name.is_empty() {
        return bad("property name is empty".into());
    }
    if value.is_empty() {
        return bad(format!("property {name:?} has an empty value"));
    }
    let illegal = |s: &str| s.bytes().any(|b| b == 0 || b == 1 || b == 2);
    if illegal(name) || illegal(value) {
        return bad(format!(
            "property {name:?} contains a \\x00, \\x01 or \\x02 byte"
        ));
    }
    if !allow_reserved && properties::is_reserved(name) {
        return bad(format!("property name {name:?} is reserved"));
    }
    Ok(())
}

/// Checks body and encoded-properties sizes.
pub fn check_sizes(body_len: usize, props_len: usize, max_body: usize) -> Result<()> {
    if body_len == 0 {
        return Err(Error::InvalidMessage {
            reason: "empty body".into(),
        });
    }
    if body_len > max_body {
        return Err(Error::MessageTooLarge {
            size: body_len,
            limit: max_body,
        });
    }
    // The store appends its 20-byte whole-record CRC property to every record.
    let limit = MAX_PROPERTIES_LEN - crate::message::codec::RECORD_CRC_LEN;
    if props_len > limit {
        return Err(Error::PropertiesTooLarge {
            size: props_len,
            limit,
        });
    }
    Ok(())
}

/// Checks a tag: non-empty, no `||` (the expression separator) and no separator bytes.
pub fn check_tag(tag: &str) -> Result<()> {
    if tag.is_empty() || tag.contains("||") || tag.bytes().any(|b| b < 3) {
        return Err(Error::InvalidMessage {
            reason: format!("tag {tag:?} is empty or contains '||' or a control byte"),
        });
    }
    Ok(())
}

/// Checks a key of the KEYS property: non-empty, no space (the key separator) or control bytes.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.bytes().any(|b| b == b' ' || b < 3) {
        return Err(Error::InvalidMessage {
            reason: format!("key {key:?} is empty or contains a space or control byte"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rules() {
        assert!(check_topic("TopicTest").is_ok());
        assert!(check_topic("a-b_c|d%e").is_ok());
        assert!(check_topic(&"a".repeat(127)).is_ok());
        assert!(check_topic(&format!("%RETRY%{}", "g".repeat(200))).is_ok());
        for bad in [
            "",
            " ",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "a\0b",
            "é",
            "a.b",
            &"a".repeat(128),
        ] {
            assert!(
                matches!(check_topic(bad), Err(Error::InvalidTopic { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn group_rules() {
        assert!(check_group("CID_orders-1|%").is_ok());
        assert!(check_group(&"g".repeat(120)).is_ok());
        for bad in ["", ".", "..", "../g", "a/b", "a b", "é", &"g".repeat(121)] {
            assert!(
                matches!(check_group(bad), Err(Error::InvalidGroup { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn property_and_size_rules() {
        assert!(check_property("a", "b", false).is_ok());
        assert!(check_property("", "b", false).is_err());
        assert!(check_property("a", "", false).is_err());
        assert!(check_property("a\x01", "b", false).is_err());
        assert!(check_property("a", "b\x02", false).is_err());
        assert!(check_property("KEYS", "b", false).is_err());
        assert!(check_property("KEYS", "b", true).is_ok());
        assert!(matches!(
            check_sizes(0, 0, 10),
            Err(Error::InvalidMessage { .. })
        ));
        assert!(matches!(
            check_sizes(11, 0, 10),
            Err(Error::MessageTooLarge {
                size: 11,
                limit: 10
            })
        ));
        assert!(matches!(
            check_sizes(1, 32_768, 10),
            Err(Error::PropertiesTooLarge { .. })
        ));
        assert!(check_sizes(10, 32_747, 10).is_ok());
        assert!(check_sizes(10, 32_748, 10).is_err());
        assert!(check_tag("a||b").is_err());
        assert!(check_key("a b").is_err());
    }
}
