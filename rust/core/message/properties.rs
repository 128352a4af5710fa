//! Property strings: `name\x01value\x02` repeated, UTF-8 (FORMAT.md §2).
//!
//! Parsing follows RocketMQ: split on `\x02`, ignore segments shorter than 3 bytes, split each at
//! its first `\x01`, which must be neither first nor last; a later duplicate wins.

use super::marks::Marks;

/// Separator between a name and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 1;
/// Terminator of each pair.
pub const PROPERTY_SEPARATOR: u8 = 2;
/// Largest encoded property string RocketMQ accepts (signed 16-bit length).
pub const MAX_PROPERTIES_LEN: usize = 32_767;

/// Tag of the message.
pub const TAGS: &str = "TAGS";
/// Space-separated business keys.
pub const KEYS: &str = "KEYS";
/// Client unique message id.
pub const UNIQ_KEY: &str = "UNIQ_KEY";
/// Wait-for-flush flag.
pub const WAIT: &str = "WAIT";
/// Delay level.
pub const DELAY: &str = "DELAY";
/// The delay in ms the store gave a delayed message from its level table (mqlite's own: the
/// record then states its delivery time whatever table a later open uses).
pub const DELAY_MS: &str = "MQLITE_DELAY_MS";
/// Original topic of a delayed / timer / half message.
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// Original queue id of a delayed / timer / half message.
pub const REAL_QID: &str = "REAL_QID";
/// The topic a retried message was first sent to (RocketMQ's).
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// The message id of a retried message's first attempt (RocketMQ's).
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// The retry or DLQ topic a send-back goes to (mqlite's own; `store::retry`).
pub const SEND_BACK: &str = "MQLITE_SEND_BACK";
/// The type of the error a consumer failed a sent-back message with (mqlite's own).
pub const ERROR_TYPE: &str = "MQLITE_ERROR_TYPE";
/// The text of that error, bounded (mqlite's own).
pub const ERROR: &str = "MQLITE_ERROR";
/// Half message marker.
pub const TRAN_MSG: &str = "TRAN_MSG";
/// Producer group.
pub const PGROUP: &str = "PGROUP";

/// Names the store or RocketMQ reserve; user properties may not use them.
pub const RESERVED: &[&str] = &[
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "MQLITE_DELAY_MS",
    "MQLITE_SEND_BACK",
    "MQLITE_ERROR_TYPE",
    "MQLITE_ERROR",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "MSG_REGION",
    "TRACE_ON",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "__transactionId__",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "TIMER_OUT_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DELAY_LEVEL",
    "MQLITE_TIMER_ID",
    "MQLITE_TIMER_CANCEL",
    "MQLITE_TIMER_RESCHEDULE_MS",
    "__CRC32#",
    "DUP_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "__SHARDINGKEY",
    "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET",
    "__BORNHOST",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "INNER_NUM",
    "INNER_BASE",
];

/// True when `name` is reserved for the store.
pub fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name) || name.starts_with("__RMQ.TRANSIENT.")
}

/// Appends one `name\x01value\x02` pair to `out`.
#[inline]
pub fn push(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    out.extend_from_slice(value.as_bytes());
    out.push(PROPERTY_SEPARATOR);
}

/// Encodes pairs in order.
pub fn encode<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        push(&mut out, k, v);
    }
    out
}

/// Iterates `(name, value)` pairs with RocketMQ's parsing rules (non-UTF-8 pairs are skipped).
pub fn iter(props: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    props.split(|&b| b == PROPERTY_SEPARATOR).filter_map(|seg| {
        if seg.len() < 3 {
            return None;
        }
        let at = seg.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
        if at == 0 || at + 1 == seg.len() {
            return None;
        }
        let name = std::str::from_utf8(seg.get(..at)?).ok()?;
        let value = std::str::from_utf8(seg.get(at + 1..)?).ok()?;
        Some((name, value))
    })
}

/// Value of `name` (the last occurrence wins, as with RocketMQ's map).
pub fn get<'a>(props: &'a [u8], name: &str) -> Option<&'a str> {
    // Segment by segment with a word-at-a-time search; only the matching value is UTF-8
    // checked (this runs once per dispatched record to find TAGS).
    let name = name.as_bytes();
    if name.is_empty() {
        return None;
    }
    let mut found = None;
    let mut rest = props;
    loop {
        let end = crate::util::bytes::find_byte(rest, PROPERTY_SEPARATOR).unwrap_or(rest.len());
        let seg = rest.get(..end).unwrap_or(&[]);
        if seg.len() > name.len() + 1
            && seg.starts_with(name)
            && seg.get(name.len()) == Some(&NAME_VALUE_SEPARATOR)
        {
            found = seg.get(name.len() + 1..);
        }
        if end >= rest.len() {
            break;
        }
        rest = rest.get(end + 1..).unwrap_or(&[]);
    }
    found.and_then(|v| std::str::from_utf8(v).ok())
}

/// Decodes into an ordered list of pairs, later duplicates replacing earlier ones.
pub fn decode(props: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in iter(props) {
        if let Some(slot) = out.iter_mut().find(|(ek, _)| ek == k) {
            slot.1 = v.to_owned();
        } else {
            out.push((k.to_owned(), v.to_owned()));
        }
    }
    out
}

/// What the validation of a property string found (`check_encoded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked<'a> {
    /// The first TAGS value.
    pub tags: Option<&'a str>,
    /// The names the store acts on at put (`marks`).
    pub marks: Marks,
}

/// Checks that `props` is a well-formed property string: UTF-8 `name\x01value\x02` pairs with
/// non-empty names and values and no NUL or stray separator bytes. One pass over the bytes,
/// which also finds the TAGS value (the first one) for dispatch and the marks of the names
/// (`Marks::of_properties` of the same string) for the put hooks.
pub fn check_encoded(props: &[u8]) -> crate::error::Result<Checked<'_>> {
    let bad = |reason: &str| {
        Err(crate::error::Error::InvalidMessage {
            reason: reason.to_owned(),
        })
    };
    // The properties of most sends, a bare body's: the unique key alone. Accepted here with
    // one word-at-a-time scan of its value; anything else (or anything this would reject)
    // goes through the general parse below, which gives the same verdict for it.
    if let Some(value) = props
        .strip_prefix(UNIQ_KEY.as_bytes())
        .and_then(|r| r.strip_prefix(&[NAME_VALUE_SEPARATOR]))
        .and_then(|r| r.strip_suffix(&[PROPERTY_SEPARATOR]))
    {
        if !value.is_empty() && crate::util::bytes::all_ascii_from(value, 3) {
            return Ok(Checked {
                tags: None,
                marks: Marks::NONE,
            });
        }
    }
    if !props.is_ascii() && std::str::from_utf8(props).is_err() {
        return bad("properties are not UTF-8");
    }
    let mut tags: Option<&[u8]> = None;
    let mut marks = Marks::NONE;
    let mut at = 0usize;
    while at < props.len() {
        let rest = props.get(at..).unwrap_or(&[]);
        // name, then \x01 (the next byte below 3 must be exactly that)
        let name_len = match crate::util::bytes::find_below(rest, 3) {
            Some(i) if i > 0 && rest.get(i) == Some(&NAME_VALUE_SEPARATOR) => i,
            _ => return bad("malformed property (empty name, or a NUL or \\x02 before \\x01)"),
        };
        let value_at = at + name_len + 1;
        let rest = props.get(value_at..).unwrap_or(&[]);
        let value_len =
            match crate::util::bytes::find_below(rest, 3) {
                Some(i) if i > 0 && rest.get(i) == Some(&PROPERTY_SEPARATOR) => i,
                _ => return bad(
                    "malformed property (empty value, or a NUL or stray \\x01, or no final \\x02)",
                ),
            };
        let name = props.get(at..at + name_len).unwrap_or(&[]);
        if tags.is_none() && name == TAGS.as_bytes() {
            tags = props.get(value_at..value_at + value_len);
        }
        marks = marks.with(Marks::of_name(name));
        at = value_at + value_len + 1;
    }
    Ok(Checked {
        // The whole string is UTF-8 and the value lies between ASCII separators.
        tags: tags.and_then(|t| std::str::from_utf8(t).ok()),
        marks,
    })
}

#[cfg(test)]
mod check_encoded_tests {
    /// The TAGS value `check_encoded` finds (the tests of its verdict and TAGS).
    fn check_encoded_properties(props: &[u8]) -> crate::error::Result<Option<&str>> {
        super::check_encoded(props).map(|c| c.tags)
    }

    #[test]
    fn encoded_property_validation() {
        assert_eq!(check_encoded_properties(b"").unwrap(), None);
        assert_eq!(
            check_encoded_properties(b"a\x01b\x02cc\x01dd\x02").unwrap(),
            None
        );
        assert_eq!(
            check_encoded_properties(b"a\x01b\x02TAGS\x01red\x02TAGS\x01blue\x02").unwrap(),
            Some("red")
        );
        for bad in [
            &b"a\x01b"[..],
            b"\x01b\x02",
            b"a\x01\x02",
            b"a\x02",
            b"a\x01b\x01c\x02",
            b"a\x00\x01b\x02",
            b"\x02",
        ] {
            assert!(check_encoded_properties(bad).is_err(), "{bad:?}");
        }
    }

    /// The reference reading of FORMAT.md §2 for strings the store accepts: split on \x02
    /// (the last piece empty), each piece one non-empty name, \x01, one non-empty value.
    fn reference(props: &[u8]) -> Option<Option<Vec<u8>>> {
        if props.is_empty() {
            return Some(None);
        }
        let body = props.strip_suffix(b"\x02")?;
        let mut tags = None;
        for pair in body.split(|&b| b == 2) {
            let k = pair.iter().position(|&b| b == 1)?;
            let (name, value) = (&pair[..k], &pair[k + 1..]);
            let bad = |s: &[u8]| s.is_empty() || s.iter().any(|&b| b < 3);
            if bad(name) || bad(value) {
                return None;
            }
            if tags.is_none() && name == b"TAGS" {
                tags = Some(value.to_vec());
            }
        }
        Some(tags)
    }

    proptest::proptest! {
        #[test]
        fn validation_agrees_with_the_reference(
            picks in proptest::collection::vec(0usize..10, 0..48)
        ) {
            const ALPHABET: [&[u8]; 10] =
                [b"a", b"b", b"\x00", b"\x01", b"\x02", b"TAGS", b"\x01", b"\x02", b"x\x01y\x02", b"\xc3\xa9"];
            let props: Vec<u8> = picks.iter().flat_map(|&i| ALPHABET[i].iter().copied()).collect();
            let got = check_encoded_properties(&props).ok().map(|t| t.map(|s| s.as_bytes().to_vec()));
            proptest::prop_assert_eq!(got, reference(&props), "{:?}", props);
        }

        /// The unique-key-alone shortcut, fed values of every byte, of every length around
        /// the word size, and with the key followed by more properties.
        #[test]
        fn unique_key_shortcut_agrees_with_the_reference(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            tail in proptest::collection::vec(0usize..10, 0..4),
        ) {
            const ALPHABET: [&[u8]; 10] =
                [b"a", b"\x00", b"\x01", b"\x02", b"TAGS", b"\x01", b"\x02", b"x\x01y\x02", b"\xc3\xa9", b"\x80"];
            let mut props = b"UNIQ_KEY\x01".to_vec();
            props.extend_from_slice(&value);
            props.push(2);
            props.extend(tail.iter().flat_map(|&i| ALPHABET[i].iter().copied()));
            let got = check_encoded_properties(&props).ok().map(|t| t.map(|s| s.as_bytes().to_vec()));
            // The reference has no UTF-8 rule: only compare what is UTF-8.
            if std::str::from_utf8(&props).is_ok() {
                proptest::prop_assert_eq!(got, reference(&props), "{:?}", props);
            } else {
                proptest::prop_assert!(got.is_none(), "{:?}", props);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rocketmq_parse_rules() {
        let enc = encode([("TAGS", "A"), ("KEYS", "k1 k2"), ("x", "1")]);
        assert_eq!(enc, b"TAGS\x01A\x02KEYS\x01k1 k2\x02x\x011\x02");
        assert_eq!(get(&enc, "KEYS"), Some("k1 k2"));
        assert_eq!(decode(&enc).len(), 3);
        // short segments, leading / trailing separators and duplicates
        let raw = b"a\x02\x01bc\x02ab\x01\x02k\x01v\x02k\x01w\x02";
        assert_eq!(decode(raw), vec![("k".to_string(), "w".to_string())]);
    }

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(super::super::tags::java_string_hash(""), 0);
        assert_eq!(super::super::tags::java_string_hash("TagA"), 2_598_919);
        assert_eq!(super::super::tags::java_string_hash("hello"), 99_162_322);
        // wraps like Java int arithmetic
        assert_eq!(
            super::super::tags::java_string_hash("polygenelubricants"),
            i32::MIN
        );
        assert_eq!(
            super::super::tags::of_tag("polygenelubricants"),
            i64::from(i32::MIN)
        );
    }
}
