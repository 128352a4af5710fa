//! Checks of the `properties_decode` fuzz target: the property-string readers of FORMAT.md §2
//! (`properties::iter`, `get`, `decode`, `check_encoded`) on arbitrary bytes.
//!
//! Invariants:
//! - none panics, and `check_encoded` fails only with `InvalidMessage`;
//! - `decode` is `iter` with later duplicates replacing earlier ones, in first-seen order, and
//!   re-encoding it decodes to the same pairs;
//! - on UTF-8 input, `get(name)` is `decode`'s value for every decoded name (both read the
//!   last pair of that name) and agrees with `decode` for the system names;
//! - `check_encoded` accepts exactly the strings that are whole pairs: `Ok` means the input is
//!   UTF-8, re-encoding `iter`'s pairs gives the input back byte for byte, the TAGS it
//!   returns is the first TAGS pair's value, and its marks are `Marks::of_properties`'s.

use mqlite::message::marks::Marks;
use mqlite::message::properties;
use mqlite::Error;

/// Checks every property reader on `data` (see the module docs).
pub fn check_properties(data: &[u8]) {
    let pairs: Vec<(&str, &str)> = properties::iter(data).collect();
    let decoded = properties::decode(data);

    // decode = iter, last duplicate wins, first-seen order.
    let mut want: Vec<(String, String)> = Vec::new();
    for &(k, v) in &pairs {
        assert!(
            !k.is_empty() && !v.is_empty(),
            "empty name or value from iter: {k:?}={v:?}"
        );
        assert!(!k.as_bytes().contains(&properties::NAME_VALUE_SEPARATOR));
        assert!(!k.as_bytes().contains(&properties::PROPERTY_SEPARATOR));
        assert!(!v.as_bytes().contains(&properties::PROPERTY_SEPARATOR));
        match want.iter_mut().find(|(wk, _)| wk == k) {
            Some(slot) => slot.1 = v.to_owned(),
            None => want.push((k.to_owned(), v.to_owned())),
        }
    }
    assert_eq!(decoded, want, "decode disagrees with iter");

    // Re-encoding the decoded map is stable.
    let again = properties::encode(decoded.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert_eq!(
        properties::decode(&again),
        decoded,
        "decode(encode(decode(x))) != decode(x)"
    );

    if std::str::from_utf8(data).is_ok() {
        for (k, v) in &decoded {
            assert_eq!(properties::get(data, k), Some(v.as_str()), "get({k:?})");
        }
        for name in [properties::TAGS, properties::KEYS, properties::UNIQ_KEY, ""] {
            let from_decode = decoded
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str());
            assert_eq!(properties::get(data, name), from_decode, "get({name:?})");
        }
    } else {
        // Never panics, whatever it finds.
        let _ = properties::get(data, properties::TAGS);
    }

    match properties::check_encoded(data) {
        Ok(properties::Checked { tags, marks }) => {
            assert_eq!(
                marks,
                Marks::of_properties(data),
                "the validation's marks differ"
            );
            assert!(
                std::str::from_utf8(data).is_ok(),
                "accepted non-UTF-8 properties"
            );
            let round = properties::encode(pairs.iter().copied());
            assert_eq!(round, data, "accepted a string that is not whole pairs");
            let first_tags = pairs
                .iter()
                .find(|(k, _)| *k == properties::TAGS)
                .map(|p| p.1);
            assert_eq!(
                tags, first_tags,
                "the TAGS found is not the first TAGS pair's"
            );
        }
        Err(Error::InvalidMessage { .. }) => {
            // A string of whole pairs with no control bytes is never rejected.
            let round = properties::encode(pairs.iter().copied());
            let clean = pairs
                .iter()
                .all(|(k, v)| k.bytes().chain(v.bytes()).all(|b| b >= 3));
            assert!(
                !(round == data && clean),
                "rejected a well-formed property string"
            );
        }
        Err(e) => panic!("check_encoded failed with {e:?}, not InvalidMessage"),
    }
}
