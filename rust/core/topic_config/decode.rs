//! Checked decoding of `config/topics.json` (FORMAT.md §7).
//!
//! Invariants: a file decodes only if every field mqlite uses has its JSON type and range; the
//! first bad value makes the whole file unreadable (`Error::ConfigFile` naming the file and the
//! value's JSON path), so a table is never taken in part or with a value quietly replaced.
//! Fields mqlite does not know are ignored: RocketMQ writes the file too (4.x and 5.x add their
//! own fields), and each version's files must keep loading.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::{DataVersion, TopicConfig, TopicsFile, MAX_QUEUES};
use crate::error::{Error, Result};
use crate::message::validate;

/// Decodes the bytes of `path` (the main file or its `.bak`).
pub(super) fn decode(path: &Path, bytes: &[u8]) -> Result<TopicsFile> {
    let bad = |field: String, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field,
        reason,
    };
    // serde_json bounds nesting (128 levels) and rejects numbers beyond f64, invalid UTF-8 and
    // trailing bytes: all of those are a file that does not parse.
    let root: Value = serde_json::from_slice(bytes)
        .map_err(|e| bad(String::new(), format!("not valid JSON: {e}")))?;
    file(&root).map_err(|Bad { field, reason }| bad(field, reason))
}

/// One topic's config from a journal record (journal.rs), checked as a `topicConfigTable`
/// entry named `name` is.
pub(super) fn entry(path: &Path, name: &str, v: &Value) -> Result<TopicConfig> {
    let bad = |field: String, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field,
        reason,
    };
    if let Err(e) = validate::check_topic(name) {
        return Err(bad("put.topicName".to_owned(), format!("{name:?}: {e}")));
    }
    topic("put", name, v).map_err(|Bad { field, reason }| bad(field, reason))
}

/// A bad value: its JSON path and what is wrong with it.
struct Bad {
    field: String,
    reason: String,
}

fn bad<T>(field: &str, reason: impl Into<String>) -> std::result::Result<T, Bad> {
    Err(Bad {
        field: field.to_owned(),
        reason: reason.into(),
    })
}

type Checked<T> = std::result::Result<T, Bad>;

fn file(root: &Value) -> Checked<TopicsFile> {
    let Some(root) = root.as_object() else {
        return bad("", format!("expected a JSON object, found {}", kind(root)));
    };
    let data_version = match root.get("dataVersion") {
        None | Some(Value::Null) => DataVersion::default(),
        Some(v) => data_version(v)?,
    };
    let Some(table) = root.get("topicConfigTable") else {
        return bad("topicConfigTable", "missing");
    };
    let Some(table) = table.as_object() else {
        return bad(
            "topicConfigTable",
            format!("expected an object, found {}", kind(table)),
        );
    };
    let mut topics = BTreeMap::new();
    for (name, entry) in table {
        // The name becomes a directory name (consumequeue/<topic>): it is checked like a new
        // topic's, so no entry can name a path outside the store.
        if let Err(e) = validate::check_topic(name) {
            return bad("topicConfigTable", format!("key {name:?}: {e}"));
        }
        let at = format!("topicConfigTable.{name}");
        topics.insert(name.clone(), topic(&at, name, entry)?);
    }
    Ok(TopicsFile {
        data_version,
        topic_config_table: topics,
        ..TopicsFile::default()
    })
}

fn data_version(v: &Value) -> Checked<DataVersion> {
    let o = object("dataVersion", v)?;
    Ok(DataVersion {
        // Java longs, so at most i64::MAX: a write adds one without overflow.
        counter: optional(o, "dataVersion", "counter", long)?.unwrap_or(0),
        state_version: optional(o, "dataVersion", "stateVersion", long)?.unwrap_or(0),
        timestamp: optional(o, "dataVersion", "timestamp", int)?.unwrap_or(0),
    })
}

fn topic(at: &str, name: &str, v: &Value) -> Checked<TopicConfig> {
    let o = object(at, v)?;
    let topic_name = required(o, at, "topicName", string)?;
    if topic_name != name {
        return bad(
            &format!("{at}.topicName"),
            format!("{topic_name:?} differs from the table key {name:?}"),
        );
    }
    let queues = |f: &str, v: &Value| uint(f, v, u64::from(MAX_QUEUES));
    Ok(TopicConfig {
        attributes: optional(o, at, "attributes", attributes)?.unwrap_or_default(),
        order: optional(o, at, "order", boolean)?.unwrap_or(false),
        perm: narrow(required(o, at, "perm", |f, v| {
            uint(f, v, u64::from(u32::MAX))
        })?),
        read_queue_nums: narrow(required(o, at, "readQueueNums", queues)?),
        topic_filter_type: optional(o, at, "topicFilterType", string)?
            .unwrap_or_else(super::single_tag),
        topic_name,
        topic_sys_flag: narrow(
            optional(o, at, "topicSysFlag", |f, v| {
                uint(f, v, u64::from(u32::MAX))
            })?
            .unwrap_or(0),
        ),
        write_queue_nums: narrow(required(o, at, "writeQueueNums", queues)?),
    })
}

/// A value already checked to be at most `u32::MAX`.
fn narrow(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn object<'v>(field: &str, v: &'v Value) -> Checked<&'v Map<String, Value>> {
    match v.as_object() {
        Some(o) => Ok(o),
        None => bad(field, format!("expected an object, found {}", kind(v))),
    }
}

fn required<T>(
    o: &Map<String, Value>,
    at: &str,
    key: &str,
    check: impl Fn(&str, &Value) -> Checked<T>,
) -> Checked<T> {
    let field = format!("{at}.{key}");
    match o.get(key) {
        Some(v) => check(&field, v),
        None => bad(&field, "missing"),
    }
}

/// An absent field, or one set to `null` (fastjson writes `null` for an unset object), is
/// `None`.
fn optional<T>(
    o: &Map<String, Value>,
    at: &str,
    key: &str,
    check: impl Fn(&str, &Value) -> Checked<T>,
) -> Checked<Option<T>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => check(&format!("{at}.{key}"), v).map(Some),
    }
}

/// An integer in `[0, max]` written as a JSON integer (not `8.0`, `"8"` or `8e0`).
fn uint(field: &str, v: &Value, max: u64) -> Checked<u64> {
    match v.as_u64() {
        Some(n) if n <= max => Ok(n),
        _ if v.is_i64() || v.is_u64() => bad(field, format!("{v} is outside [0, {max}]")),
        _ => bad(
            field,
            format!("expected an integer in [0, {max}], found {}", kind(v)),
        ),
    }
}

/// A non-negative Java long.
fn long(field: &str, v: &Value) -> Checked<u64> {
    uint(field, v, i64::MAX.unsigned_abs())
}

fn int(field: &str, v: &Value) -> Checked<i64> {
    match v.as_i64() {
        Some(n) => Ok(n),
        None if v.is_u64() => bad(field, format!("{v} is outside the range of a Java long")),
        None => bad(field, format!("expected an integer, found {}", kind(v))),
    }
}

fn boolean(field: &str, v: &Value) -> Checked<bool> {
    match v.as_bool() {
        Some(b) => Ok(b),
        None => bad(field, format!("expected true or false, found {}", kind(v))),
    }
}

fn string(field: &str, v: &Value) -> Checked<String> {
    match v.as_str() {
        Some(s) => Ok(s.to_owned()),
        None => bad(field, format!("expected a string, found {}", kind(v))),
    }
}

fn attributes(field: &str, v: &Value) -> Checked<BTreeMap<String, String>> {
    object(field, v)?
        .iter()
        .map(|(k, v)| Ok((k.clone(), string(&format!("{field}.{k}"), v)?)))
        .collect()
}

/// How a value is described in an error: its JSON type, and the value itself when short.
fn kind(v: &Value) -> String {
    let name = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a floating-point number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    match v {
        Value::Array(_) | Value::Object(_) => name.to_owned(),
        _ => {
            let text = v.to_string();
            if text.len() <= 40 {
                format!("{name} ({text})")
            } else {
                name.to_owned()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, queues: u32) -> Value {
        serde_json::json!({
            "order": false, "perm": 6, "readQueueNums": queues, "topicFilterType": "SINGLE_TAG",
            "topicName": name, "topicSysFlag": 0, "writeQueueNums": queues,
        })
    }

    fn decode_value(v: &Value) -> Result<TopicsFile> {
        decode(Path::new("topics.json"), v.to_string().as_bytes())
    }

    /// The field a bad file is reported for.
    fn bad_field(v: &Value) -> String {
        match decode_value(v) {
            Err(Error::ConfigFile { field, .. }) => field,
            other => panic!("expected a ConfigFile error, got {other:?}"),
        }
    }

    #[test]
    fn rocketmq_4_and_5_files_decode() {
        // 4.x: no attributes, no stateVersion; fastjson's tab indentation.
        let v4 = "{\n\t\"dataVersion\":{\n\t\t\"counter\":1,\n\t\t\"timestamp\":1795647630005\n\t},\
                  \n\t\"topicConfigTable\":{\n\t\t\"RmqOrders\":{\n\t\t\t\"order\":false,\
                  \"perm\":6,\"readQueueNums\":4,\"topicFilterType\":\"SINGLE_TAG\",\
                  \"topicName\":\"RmqOrders\",\"topicSysFlag\":0,\"writeQueueNums\":4\n\t\t}\n\t}\n}";
        let f = decode(Path::new("t"), v4.as_bytes()).unwrap();
        let c = &f.topic_config_table["RmqOrders"];
        assert_eq!((c.read_queue_nums, c.write_queue_nums, c.perm), (4, 4, 6));
        assert_eq!(f.data_version.counter, 1);
        // 5.x: attributes, stateVersion, and a field of a later version mqlite does not know.
        let mut e = entry("BenchmarkTest", MAX_QUEUES);
        e["attributes"] = serde_json::json!({"queue.type": "SimpleCQ"});
        e["perm"] = 7.into();
        e["someLaterField"] = serde_json::json!([1, {"x": null}]);
        let v5 = serde_json::json!({
            "dataVersion": {"counter": 9, "stateVersion": 2, "timestamp": 1},
            "topicConfigTable": {"BenchmarkTest": e, "%RETRY%g": entry("%RETRY%g", 1)},
        });
        let f = decode_value(&v5).unwrap();
        let c = &f.topic_config_table["BenchmarkTest"];
        assert_eq!((c.read_queue_nums, c.perm), (MAX_QUEUES, 7));
        assert_eq!(c.attributes["queue.type"], "SimpleCQ");
        assert_eq!(f.data_version.state_version, 2);
        // Optional fields absent or null take their defaults.
        let bare = serde_json::json!({"topicConfigTable": {"T": {
            "perm": 6, "readQueueNums": 1, "topicName": "T", "writeQueueNums": 1,
            "attributes": null, "order": null}}});
        let c = &decode_value(&bare).unwrap().topic_config_table["T"];
        assert_eq!(c.topic_filter_type, "SINGLE_TAG");
        assert!(c.attributes.is_empty() && !c.order);
    }

    #[test]
    fn a_wrong_type_or_range_anywhere_is_reported_with_its_path() {
        let good = serde_json::json!({"topicConfigTable": {"T": entry("T", 8)}});
        assert!(decode_value(&good).is_ok());
        let cases: &[(&str, Value, &str)] = &[
            ("perm", "6".into(), "topicConfigTable.T.perm"),
            ("perm", (-1).into(), "topicConfigTable.T.perm"),
            ("perm", (1u64 << 32).into(), "topicConfigTable.T.perm"),
            (
                "readQueueNums",
                8.0.into(),
                "topicConfigTable.T.readQueueNums",
            ),
            (
                "readQueueNums",
                (MAX_QUEUES + 1).into(),
                "topicConfigTable.T.readQueueNums",
            ),
            (
                "writeQueueNums",
                u32::MAX.into(),
                "topicConfigTable.T.writeQueueNums",
            ),
            (
                "writeQueueNums",
                Value::Null,
                "topicConfigTable.T.writeQueueNums",
            ),
            ("order", 1.into(), "topicConfigTable.T.order"),
            (
                "topicSysFlag",
                true.into(),
                "topicConfigTable.T.topicSysFlag",
            ),
            (
                "topicFilterType",
                1.into(),
                "topicConfigTable.T.topicFilterType",
            ),
            (
                "attributes",
                serde_json::json!({"k": 1}),
                "topicConfigTable.T.attributes.k",
            ),
            (
                "attributes",
                serde_json::json!([]),
                "topicConfigTable.T.attributes",
            ),
            ("topicName", "U".into(), "topicConfigTable.T.topicName"),
        ];
        for (key, value, field) in cases {
            let mut v = good.clone();
            v["topicConfigTable"]["T"][*key] = value.clone();
            assert_eq!(bad_field(&v), *field, "{key} = {value}");
        }
        let mut missing = good.clone();
        if let Some(o) = missing["topicConfigTable"]["T"].as_object_mut() {
            o.remove("perm");
        }
        assert_eq!(bad_field(&missing), "topicConfigTable.T.perm");
        for (v, field) in [
            (serde_json::json!([]), ""),
            (serde_json::json!({}), "topicConfigTable"),
            (
                serde_json::json!({"topicConfigTable": []}),
                "topicConfigTable",
            ),
            (
                serde_json::json!({"topicConfigTable": {"T": []}}),
                "topicConfigTable.T",
            ),
            (
                serde_json::json!({"topicConfigTable": {"../x": entry("../x", 1)}}),
                "topicConfigTable",
            ),
            (
                serde_json::json!({"topicConfigTable": {}, "dataVersion": {"counter": -1}}),
                "dataVersion.counter",
            ),
            (
                serde_json::json!({"topicConfigTable": {}, "dataVersion": 3}),
                "dataVersion",
            ),
            (
                serde_json::json!({"topicConfigTable": {}, "dataVersion": {"counter": u64::MAX}}),
                "dataVersion.counter",
            ),
        ] {
            assert_eq!(bad_field(&v), field, "{v}");
        }
    }

    #[test]
    fn text_that_does_not_parse_is_reported_for_the_whole_file() {
        let deep = format!(
            "{{\"topicConfigTable\": {}{}}}",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        let huge = r#"{"topicConfigTable": {"T": {"perm": 1e400}}}"#;
        for text in [
            deep.as_str(),
            huge,
            "{\"topicConfigTable\": {",
            "{} x",
            "\u{feff}{}",
        ] {
            match decode(Path::new("/s/config/topics.json"), text.as_bytes()) {
                Err(Error::ConfigFile {
                    path,
                    field,
                    reason,
                }) => {
                    assert_eq!(path, Path::new("/s/config/topics.json"));
                    assert_eq!(field, "");
                    assert!(reason.starts_with("not valid JSON"), "{reason}");
                }
                other => panic!("{text:.40}: {other:?}"),
            }
        }
        assert!(decode(Path::new("t"), &[0xff, 0xfe]).is_err());
    }
}
