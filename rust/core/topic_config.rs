//! Topic configuration: `config/topics.json` in RocketMQ's shape (FORMAT.md §7).
//!
//! Invariants: the file is replaced atomically (temp, fsync, rename, fsync dir) with a `.bak`
//! of the previous version; the reader falls back to the `.bak` when the file is missing, empty
//! or does not decode (`decode`: every known field type- and range-checked). A file that does
//! not decode and has no usable `.bak` is an error (`Error::ConfigFile`), never an empty table,
//! and the table is never rewritten over it: a writable store does not open. After a load from
//! the `.bak`, the next write leaves that `.bak` in place rather than rotating the unreadable
//! file into it. Every topic in the table has a valid name (`validate::check_topic`): a file
//! naming another does not decode, so no name from disk becomes a path outside the store. Queue
//! counts are at most `MAX_QUEUES`. System topics are created by the store, never by users.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::RwLock;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::message::validate;
use crate::util::kill_point::kill_point;
use crate::util::{clock::now_ms, fs};

mod decode;

/// Most read or write queues a topic may have: RocketMQ's largest built-in topic
/// (`BenchmarkTest`) has 1,024. Every queue is a directory and a lock file per consumer group,
/// and a consumer lists them all, so a count from a damaged file must be bounded.
pub const MAX_QUEUES: u32 = 1024;

/// Read permission bit.
pub const PERM_READ: u32 = 4;
/// Write permission bit.
pub const PERM_WRITE: u32 = 2;
/// Inherit bit (template topics).
pub const PERM_INHERIT: u32 = 1;

/// Topics reserved for the store (RocketMQ's system topics).
pub const SYSTEM_TOPICS: &[&str] = &[
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "rmq_sys_wheel_timer",
    "RMQ_SYS_TRACE_TOPIC",
];

/// True for topics users may not create or send to directly.
pub fn is_system_topic(topic: &str) -> bool {
    SYSTEM_TOPICS.contains(&topic)
        || topic.starts_with("rmq_sys_")
        || validate::is_retry_or_dlq(topic)
}

/// One topic's settings (field names as in RocketMQ's JSON; read by `decode`, which also
/// gives the defaults of the fields that may be absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    /// Free-form attributes.
    pub attributes: BTreeMap<String, String>,
    /// Ordered topic flag.
    pub order: bool,
    /// Permission bits (6 = read + write).
    pub perm: u32,
    /// Readable queues.
    pub read_queue_nums: u32,
    /// Filter type name.
    pub topic_filter_type: String,
    /// Topic name.
    pub topic_name: String,
    /// System flag.
    pub topic_sys_flag: u32,
    /// Writable queues.
    pub write_queue_nums: u32,
}

fn single_tag() -> String {
    "SINGLE_TAG".to_owned()
}

impl TopicConfig {
    /// A read/write topic with `queues` queues.
    pub fn new(name: &str, queues: u32, perm: u32, order: bool) -> Self {
        TopicConfig {
            attributes: BTreeMap::new(),
            order,
            perm,
            read_queue_nums: queues,
            topic_filter_type: single_tag(),
            topic_name: name.to_owned(),
            topic_sys_flag: 0,
            write_queue_nums: queues,
        }
    }

    /// True if sends are allowed.
    pub fn writable(&self) -> bool {
        self.perm & PERM_WRITE != 0
    }

    /// True if reads are allowed.
    pub fn readable(&self) -> bool {
        self.perm & PERM_READ != 0
    }

    /// Write queue count and writability.
    fn write_info(&self) -> (u32, bool) {
        (self.write_queue_nums, self.writable())
    }
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct DataVersion {
    counter: u64,
    #[serde(default)]
    state_version: u64,
    timestamp: i64,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicsFile {
    data_version: DataVersion,
    topic_config_table: BTreeMap<String, TopicConfig>,
    /// The table was loaded from the `.bak` because the main file does not decode: the next
    /// write must not rotate that file into the `.bak`.
    #[serde(skip)]
    main_unreadable: bool,
}

/// The topic table.
#[derive(Debug)]
pub struct TopicTable {
    path: Option<PathBuf>,
    mode: u32,
    inner: RwLock<TopicsFile>,
}

impl TopicTable {
    /// Loads `path` (or its `.bak`); `None` path: in memory. Neither file present (or both
    /// empty): an empty table.
    ///
    /// # Errors
    /// `ConfigFile` when the file does not decode and its `.bak` gives no table either.
    pub fn load(path: Option<PathBuf>, mode: u32) -> Result<Self> {
        let file = match &path {
            Some(p) => read(p)?.unwrap_or_default(),
            None => TopicsFile::default(),
        };
        Ok(TopicTable {
            path,
            mode,
            inner: RwLock::new(file),
        })
    }

    /// Re-reads the file (read-only stores follow topics the writer creates). Both files gone:
    /// the table in memory is kept.
    ///
    /// # Errors
    /// As `load`; the table in memory is kept then.
    pub fn reload(&self) -> Result<()> {
        let Some(p) = &self.path else { return Ok(()) };
        if let Some(file) = read(p)? {
            *self.inner.write().unwrap_or_else(|p| p.into_inner()) = file;
        }
        Ok(())
    }

    /// Config of `topic`.
    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .topic_config_table
            .get(topic)
            .cloned()
    }

    /// Write queue count and writability of `topic`, without cloning the config.
    pub fn write_info(&self, topic: &str) -> Option<(u32, bool)> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.topic_config_table.get(topic).map(TopicConfig::write_info)
    }

    /// `write_info` for a caller that must not wait: `None` while a topic change holds the
    /// table (it writes `topics.json` under the lock), else `Some(write_info)`.
    pub fn try_write_info(&self, topic: &str) -> Option<Option<(u32, bool)>> {
        let g = crate::util::sync::try_read(&self.inner)?;
        Some(g.topic_config_table.get(topic).map(TopicConfig::write_info))
    }

    /// False only for a known topic whose permission forbids reads (an unknown topic has
    /// nothing to read either way), without cloning the config.
    pub fn readable(&self, topic: &str) -> bool {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.topic_config_table
            .get(topic)
            .is_none_or(TopicConfig::readable)
    }

    /// Every topic, sorted by name.
    pub fn all(&self) -> Vec<TopicConfig> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .topic_config_table
            .values()
            .cloned()
            .collect()
    }

    /// Adds or replaces a topic and persists the table. Returns false if an identical
    /// config existed already.
    pub fn put(&self, config: TopicConfig) -> Result<bool> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if g.topic_config_table.get(&config.topic_name) == Some(&config) {
            return Ok(false);
        }
        let previous = g
            .topic_config_table
            .insert(config.topic_name.clone(), config.clone());
        g.data_version.counter += 1;
        g.data_version.timestamp = now_ms();
        if let Err(e) = self.persist(&mut g) {
            // Keep memory and disk in agreement: undo the change.
            match previous {
                Some(p) => g.topic_config_table.insert(config.topic_name.clone(), p),
                None => g.topic_config_table.remove(&config.topic_name),
            };
            return Err(e);
        }
        Ok(true)
    }

    /// Changes the existing `topic` with `change` and persists the table, as one step: no
    /// other change of the table comes between the check `change` makes and the write. `Ok(None)`
    /// when the topic does not exist; an error of `change` changes nothing.
    pub fn update(
        &self,
        topic: &str,
        change: impl FnOnce(&mut TopicConfig) -> Result<()>,
    ) -> Result<Option<TopicConfig>> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let Some(old) = g.topic_config_table.get(topic).cloned() else {
            return Ok(None);
        };
        let mut new = old.clone();
        change(&mut new)?;
        if new == old {
            return Ok(Some(new));
        }
        g.topic_config_table.insert(topic.to_owned(), new.clone());
        g.data_version.counter += 1;
        g.data_version.timestamp = now_ms();
        if let Err(e) = self.persist(&mut g) {
            // Keep memory and disk in agreement: undo the change.
            g.topic_config_table.insert(topic.to_owned(), old);
            return Err(e);
        }
        Ok(Some(new))
    }

    /// Adds the topics found on disk without a table (`config/topics.json` and its `.bak`
    /// missing, as in a store whose config was lost or not copied), each readable and writable
    /// with as many queues as its highest queue directory says. A topic already in the table
    /// is left as it is. `persist`: write the table once (a writer); else memory only.
    pub fn adopt_discovered(&self, found: &[(String, u32)], persist: bool) -> Result<()> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let mut added = false;
        for (topic, queues) in found {
            if !g.topic_config_table.contains_key(topic) {
                let config = TopicConfig::new(topic, *queues, 6, false);
                g.topic_config_table.insert(topic.clone(), config);
                added = true;
            }
        }
        if added && persist {
            g.data_version.counter += 1;
            g.data_version.timestamp = now_ms();
            self.persist(&mut g)?;
        }
        Ok(())
    }

    /// Removes a topic; returns whether it existed.
    pub fn remove(&self, topic: &str) -> Result<bool> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if g.topic_config_table.remove(topic).is_none() {
            return Ok(false);
        }
        g.data_version.counter += 1;
        g.data_version.timestamp = now_ms();
        self.persist(&mut g)?;
        Ok(true)
    }

    fn persist(&self, file: &mut TopicsFile) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let json = serde_json::to_vec_pretty(file).map_err(|e| Error::InvalidConfig {
            field: "topics.json",
            reason: e.to_string(),
        })?;
        let staged = fs::stage(path, &json, self.mode)?;
        kill_point!("topics.before_rename");
        staged.replace(!file.main_unreadable)?;
        file.main_unreadable = false;
        Ok(())
    }
}

/// The table in `path` or its `.bak`; `None` when neither holds anything.
fn read(path: &std::path::Path) -> Result<Option<TopicsFile>> {
    Ok(
        fs::read_with_backup(path, decode::decode)?.map(|l| TopicsFile {
            main_unreadable: l.main_unreadable,
            ..l.value
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_write_info_declines_while_the_table_is_being_changed() {
        let t = TopicTable::load(None, 0o600).unwrap();
        t.put(TopicConfig::new("T", 4, PERM_READ, false)).unwrap();
        assert_eq!(t.try_write_info("T"), Some(Some((4, false))));
        assert_eq!(t.try_write_info("U"), Some(None));
        let changing = t.inner.write().unwrap();
        assert_eq!(t.try_write_info("T"), None);
        drop(changing);
        assert_eq!(t.try_write_info("T"), Some(Some((4, false))));
    }

    #[test]
    fn update_changes_an_existing_topic_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let t = TopicTable::load(Some(p.clone()), 0o600).unwrap();
        t.put(TopicConfig::new("T", 2, 6, false)).unwrap();
        let grow = |c: &mut TopicConfig| {
            c.write_queue_nums = 4;
            Ok(())
        };
        assert_eq!(t.update("U", grow).unwrap(), None);
        assert_eq!(t.update("T", grow).unwrap().unwrap().write_queue_nums, 4);
        let refuse = |_: &mut TopicConfig| Err(Error::ReadOnly);
        assert!(t.update("T", refuse).is_err());
        let reloaded = TopicTable::load(Some(p), 0o600).unwrap();
        assert_eq!(reloaded.get("T"), t.get("T"));
        assert_eq!(reloaded.get("T").unwrap().write_queue_nums, 4);
    }

    #[test]
    fn json_shape_matches_rocketmq_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let t = TopicTable::load(Some(p.clone()), 0o600).unwrap();
        assert!(t.put(TopicConfig::new("TopicTest", 4, 6, false)).unwrap());
        assert!(!t.put(TopicConfig::new("TopicTest", 4, 6, false)).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let c = &v["topicConfigTable"]["TopicTest"];
        assert_eq!(c["readQueueNums"], 4);
        assert_eq!(c["writeQueueNums"], 4);
        assert_eq!(c["perm"], 6);
        assert_eq!(c["topicFilterType"], "SINGLE_TAG");
        assert_eq!(v["dataVersion"]["counter"], 1);
        let t2 = TopicTable::load(Some(p.clone()), 0o600).unwrap();
        assert_eq!(t2.get("TopicTest").unwrap().write_queue_nums, 4);
        // a damaged main file falls back to the .bak
        t2.put(TopicConfig::new("Other", 2, 6, false)).unwrap();
        std::fs::write(&p, b"{garbage").unwrap();
        let t3 = TopicTable::load(Some(p), 0o600).unwrap();
        assert!(t3.get("TopicTest").is_some());
    }

    #[test]
    fn unreadable_file_is_an_error_and_is_never_rotated_into_the_bak() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let bak = dir.path().join("topics.json.bak");
        let t = TopicTable::load(Some(p.clone()), 0o600).unwrap();
        t.put(TopicConfig::new("Eight", 8, 6, false)).unwrap();
        let bad = std::fs::read_to_string(&p)
            .unwrap()
            .replace("\"perm\": 6", "\"perm\": \"6\"");
        std::fs::write(&p, &bad).unwrap();
        // No .bak: the load fails, naming the file and the field.
        match TopicTable::load(Some(p.clone()), 0o600) {
            Err(Error::ConfigFile { path, field, .. }) => {
                assert_eq!(path, p);
                assert_eq!(field, "topicConfigTable.Eight.perm");
            }
            other => panic!("{other:?}"),
        }
        // A valid .bak stands in; the next write keeps it rather than rotating the bad file
        // into it.
        let good = serde_json::json!({"topicConfigTable": {"Eight": TopicConfig::new("Eight", 8, 6, false)}});
        std::fs::write(&bak, good.to_string()).unwrap();
        let t = TopicTable::load(Some(p.clone()), 0o600).unwrap();
        assert_eq!(t.get("Eight").unwrap().read_queue_nums, 8);
        t.put(TopicConfig::new("Two", 2, 6, false)).unwrap();
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), good.to_string());
        // From then on the file is readable and rotation is back to normal.
        t.put(TopicConfig::new("Three", 3, 6, false)).unwrap();
        let rotated = TopicTable::load(Some(bak.clone()), 0o600).unwrap();
        assert!(rotated.get("Two").is_some() && rotated.get("Three").is_none());
        // A read-only reload of a file gone bad reports it and keeps the table.
        std::fs::write(&p, "{").unwrap();
        std::fs::write(&bak, "[]").unwrap();
        assert!(matches!(t.reload(), Err(Error::ConfigFile { .. })));
        assert!(t.get("Three").is_some());
    }

    #[test]
    fn system_topics() {
        assert!(is_system_topic("SCHEDULE_TOPIC_XXXX"));
        assert!(is_system_topic("rmq_sys_anything"));
        assert!(is_system_topic("%RETRY%g"));
        assert!(!is_system_topic("TopicTest"));
    }
}
