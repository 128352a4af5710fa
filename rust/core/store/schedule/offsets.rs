//! `config/delayOffset.json` (FORMAT.md §15): for each delay level, the next offset of its
//! schedule queue the service delivers, in RocketMQ's `ScheduleMessageService` shape
//! (`{"offsetTable":{<level>:<offset>}}`, with 5.x's `dataVersion`).
//!
//! Invariants: the file is replaced atomically (temp, fsync, `.bak` copy, rename, directory
//! fsync); a reader falls back to the `.bak` when the file is missing, empty or does not
//! decode, and a file that does not decode with no usable `.bak` is an error
//! (`Error::ConfigFile`), never an empty table (which would deliver every level again).
//! Levels are kept whatever the current table holds: a level dropped from the table keeps its
//! offset for a later open that has it again.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::util::fs;

/// File name, under `config/`.
pub const FILE: &str = "delayOffset.json";

/// The decoded file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DelayOffsets {
    /// Level -> next schedule-queue offset to deliver.
    pub table: BTreeMap<u32, u64>,
    /// `dataVersion.counter` of the file read (0 for none); each write adds one.
    pub counter: u64,
    /// True when the table came from the `.bak` because the file did not decode (the next
    /// write then keeps that `.bak`).
    pub main_unreadable: bool,
}

impl DelayOffsets {
    /// Reads `path` (or its `.bak`); an empty table when neither exists.
    ///
    /// # Errors
    /// `ConfigFile` when neither file decodes; I/O failures.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(match fs::read_with_backup(path, decode)? {
            Some(l) => DelayOffsets {
                main_unreadable: l.main_unreadable,
                ..l.value
            },
            None => DelayOffsets::default(),
        })
    }

    /// Writes the table to `path` with the next counter and `now_ms` as its timestamp.
    ///
    /// # Errors
    /// I/O failures (the previous file is then unchanged).
    pub fn store(&mut self, path: &Path, now_ms: i64, mode: u32) -> Result<()> {
        self.counter += 1;
        let text = encode(&self.table, self.counter, now_ms);
        fs::stage(path, text.as_bytes(), mode)?.replace(!self.main_unreadable)?;
        self.main_unreadable = false;
        Ok(())
    }
}

/// The file's text: strict JSON, two-space indent, levels in numeric order, quoted keys, no
/// newline at the end.
pub fn encode(table: &BTreeMap<u32, u64>, counter: u64, now_ms: i64) -> String {
    let mut s = format!(
        "{{\n  \"dataVersion\": {{\n    \"counter\": {counter},\n    \"stateVersion\": 0,\n    \
         \"timestamp\": {now_ms}\n  }},\n  \"offsetTable\": {{"
    );
    for (i, (level, offset)) in table.iter().enumerate() {
        s.push_str(if i == 0 { "\n" } else { ",\n" });
        s.push_str(&format!("    \"{level}\": {offset}"));
    }
    s.push_str(if table.is_empty() { "}\n}" } else { "\n  }\n}" });
    s
}

/// Decodes the file's bytes: RocketMQ's unquoted integer keys are accepted too.
///
/// # Errors
/// `ConfigFile` naming `path` and the field at fault.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<DelayOffsets> {
    let bad = |field: &str, reason: String| Error::ConfigFile {
        path: path.to_path_buf(),
        field: field.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| bad("", format!("not UTF-8: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&quote_bare_keys(text))
        .map_err(|e| bad("", format!("not JSON: {e}")))?;
    let Some(table) = value.get("offsetTable").and_then(|t| t.as_object()) else {
        return Err(bad("offsetTable", "missing or not an object".into()));
    };
    let mut out = BTreeMap::new();
    for (k, v) in table {
        let field = format!("offsetTable.{k}");
        let level: u32 = k
            .parse()
            .ok()
            .filter(|l| (1..=i32::MAX as u32).contains(l))
            .ok_or_else(|| bad(&field, "a level is an integer from 1".into()))?;
        let offset = v
            .as_u64()
            .filter(|&o| o <= i64::MAX as u64)
            .ok_or_else(|| bad(&field, format!("{v} is not an offset")))?;
        out.insert(level, offset);
    }
    let counter = value
        .get("dataVersion")
        .and_then(|d| d.get("counter"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    Ok(DelayOffsets {
        table: out,
        counter,
        main_unreadable: false,
    })
}

/// `text` with every object key written as a bare integer (fastjson's `{1:5}`) quoted.
fn quote_bare_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    // The last character outside strings that was not white space.
    let mut last = ' ';
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c.is_ascii_digit() && matches!(last, '{' | ',') {
            let mut end = i + 1;
            while let Some(&(j, d)) = chars.peek() {
                if !d.is_ascii_digit() {
                    break;
                }
                end = j + 1;
                chars.next();
            }
            let token = text.get(i..end).unwrap_or("");
            let rest = text.get(end..).unwrap_or("").trim_start();
            if rest.starts_with(':') {
                out.push('"');
                out.push_str(token);
                out.push('"');
            } else {
                out.push_str(token);
            }
            last = '0';
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if !c.is_whitespace() {
            last = c;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rocketmqs_unquoted_keys_and_4x_files_decode() {
        let p = Path::new("delayOffset.json");
        let got = decode(p, br#"{"offsetTable":{1:250,18:3}}"#).unwrap();
        assert_eq!(got.table, BTreeMap::from([(1, 250), (18, 3)]));
        assert_eq!(got.counter, 0);
        let got = decode(
            p,
            br#"{"dataVersion":{"counter":7,"timestamp":1},"offsetTable":{ "2" : 9 }}"#,
        )
        .unwrap();
        assert_eq!((got.table, got.counter), (BTreeMap::from([(2, 9)]), 7));
        let text = encode(&BTreeMap::from([(1, 4), (10, 2), (2, 0)]), 3, 5);
        assert_eq!(
            decode(p, text.as_bytes()).unwrap().table,
            BTreeMap::from([(1, 4), (2, 0), (10, 2)])
        );
        for bad in [
            &br#"{"offsetTable":{0:1}}"#[..],
            br#"{"offsetTable":{1:-1}}"#,
            br#"{"offsetTable":{"x":1}}"#,
            br#"{"offsetTable":[]}"#,
            br#"{}"#,
            b"{",
        ] {
            assert!(
                matches!(decode(p, bad), Err(Error::ConfigFile { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_bare_number_that_is_not_a_key_stays_as_it_is() {
        assert_eq!(
            quote_bare_keys(r#"{1:[2,3],"a,1":4}"#),
            r#"{"1":[2,3],"a,1":4}"#
        );
        assert_eq!(quote_bare_keys(r#"{"k\"{1":2}"#), r#"{"k\"{1":2}"#);
    }
}
