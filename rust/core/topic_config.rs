//! Topic configuration: `config/topics.json` in RocketMQ's shape (FORMAT.md §7) and the
//! journal of the changes made since it was last written whole (`config/topics.journal`,
//! FORMAT.md §7.1, journal.rs).
//!
//! Invariants: the table is `topics.json` (or its `.bak`) with the journal's records replayed in
//! order. A change is durable when the call making it returns: the writer appends one record
//! (one `fdatasync`) instead of rewriting the whole file, so creating N topics costs O(N) bytes,
//! not O(N^2). The writer compacts (writes `topics.json` holding the whole table, then starts
//! an empty journal) at open when the journal holds records, at close, and when the journal
//! outgrows `topics.json` (at least `COMPACT_MIN` bytes), so each change is written whole a
//! bounded number of times and a store closed cleanly has its whole table in `topics.json`,
//! the file RocketMQ reads. Shared writer processes (shared.rs) all append to one journal,
//! each change decided on every process's earlier ones, and compact only when no other
//! process has the store open: the first opener at its open, the last closer at its close,
//! after reading every record. A read-only table reads both files and checks that `topics.json`
//! was not replaced meanwhile, so it never replays an old journal over a newer table.
//!
//! `topics.json` is replaced atomically (temp, fsync, rename, fsync dir) with a `.bak` of the
//! previous version; the reader falls back to the `.bak` when the file is missing, empty or
//! does not decode (`decode`: every known field type- and range-checked). A file that does
//! not decode and has no usable `.bak` is an error (`Error::ConfigFile`), never an empty table,
//! and the table is never rewritten over it: a writable store does not open. After a load from
//! the `.bak`, the next write leaves that `.bak` in place rather than rotating the unreadable
//! file into it. Every topic in the table has a valid name (`validate::check_topic`): a file
//! or record naming another does not decode, so no name from disk becomes a path outside the
//! store. Queue counts are at most `MAX_QUEUES`. System topics are created by the store, never
//! by users.
//!
//! Crash behaviour: a crash during an append leaves the record whole, torn (ignored) or absent;
//! a crash during a compaction leaves the old `topics.json` with the whole journal, or the new
//! one with the journal whose records it already holds (replaying them changes nothing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::message::validate;
use crate::util::kill_point::kill_point;
use crate::util::{clock::now_ms, fs};

mod decode;
mod journal;
mod shared;

use journal::{Change, Journal};
use shared::SharedTopics;

use crate::shared::WriterShm;

/// The journal is compacted into `topics.json` once it holds more record bytes than this and
/// than `topics.json` itself: the cost of writing the table whole is then spread over at
/// least as many bytes of changes.
const COMPACT_MIN: u64 = if cfg!(test) { 16 << 10 } else { 1 << 20 };

/// How many times a read-only table re-reads `topics.json` and the journal when the writer
/// compacted while it read them, before it reports the table as unreadable.
const READ_TRIES: usize = 16;

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

/// The attribute holding the commit-log offset where the topic's current incarnation begins
/// (FORMAT.md §7): records below it belong to an earlier, deleted topic of the same name and are
/// never shown to its readers. Absent (or not a decimal integer): 0, every record counts.
pub const SINCE_ATTRIBUTE: &str = "mqlite.sinceOffset";

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

fn since_of(attributes: &BTreeMap<String, String>) -> u64 {
    attributes
        .get(SINCE_ATTRIBUTE)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
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

    /// The commit-log offset below which records are not this topic's (`SINCE_ATTRIBUTE`).
    pub fn since_offset(&self) -> u64 {
        since_of(&self.attributes)
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
    /// A writer's journal (`None` in memory and read-only).
    #[serde(skip)]
    journal: Option<Journal>,
    /// Bytes of `topics.json` as last read or written (sets when the journal is compacted).
    #[serde(skip)]
    json_len: u64,
}

impl TopicsFile {
    /// Applies replayed or new changes to the table in memory.
    fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Put(c) => {
                    self.topic_config_table
                        .insert(c.topic_name.clone(), c.clone());
                }
                Change::Remove(t) => {
                    self.topic_config_table.remove(t);
                }
            }
            self.data_version.counter = self.data_version.counter.saturating_add(1);
        }
        if !changes.is_empty() {
            self.data_version.timestamp = now_ms();
        }
    }

    /// `apply`, returning what `undo` needs to take the changes back.
    fn apply_undoable(&mut self, changes: &[Change]) -> Undo {
        let topics = changes
            .iter()
            .map(|change| {
                let name = match change {
                    Change::Put(c) => c.topic_name.clone(),
                    Change::Remove(t) => t.clone(),
                };
                let before = self.topic_config_table.get(&name).cloned();
                (name, before)
            })
            .collect();
        let undo = Undo {
            version: self.data_version.clone(),
            topics,
        };
        self.apply(changes);
        undo
    }

    /// Takes back the changes `undo` was made for (they could not be made durable).
    fn undo(&mut self, undo: Undo) {
        // In reverse: a topic changed twice gets the config it had before the first change.
        for (name, before) in undo.topics.into_iter().rev() {
            match before {
                Some(c) => self.topic_config_table.insert(name, c),
                None => self.topic_config_table.remove(&name),
            };
        }
        self.data_version = undo.version;
    }
}

/// What `TopicsFile::undo` restores.
struct Undo {
    version: DataVersion,
    /// Each changed topic with its config before the change (`None`: it did not exist).
    topics: Vec<(String, Option<TopicConfig>)>,
}

/// How a writer or reader opens the topic table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A read-only store: reads the files, never writes them.
    Read,
    /// The only process with the store open (an exclusive writer, or the first of shared
    /// writers): compacts a journal holding records.
    Own,
    /// A shared writer opening beside running ones: their journal is left as it is (they
    /// append to it) and read from where this load stopped once the table is shared.
    Join,
}

/// The topic table.
#[derive(Debug)]
pub struct TopicTable {
    path: Option<PathBuf>,
    mode: u32,
    inner: RwLock<TopicsFile>,
    /// Shared writers: the journal lock and the topics generation (shared.rs); set once, at
    /// open.
    shared: OnceLock<SharedTopics>,
}

/// `config/topics.journal` beside `config/topics.json`.
fn journal_path(json: &Path) -> PathBuf {
    json.with_file_name("topics.journal")
}

impl TopicTable {
    /// Loads `path` (or its `.bak`) and replays the journal beside it; `None` path: in memory.
    /// No file present (or all empty): an empty table. A writer that owns the store
    /// (`Access::Own`) compacts a journal that holds records, so that its appends never follow
    /// a torn tail.
    ///
    /// # Errors
    /// `ConfigFile` when the file does not decode and its `.bak` gives no table either, or the
    /// journal is damaged before its tail; an I/O error compacting.
    pub fn load(path: Option<PathBuf>, mode: u32, access: Access) -> Result<Self> {
        let Some(p) = &path else {
            return Ok(TopicTable {
                path,
                mode,
                inner: RwLock::new(TopicsFile::default()),
                shared: OnceLock::new(),
            });
        };
        let Read {
            mut file, replay, ..
        } = read_table(p)?;
        let table = TopicTable {
            path: path.clone(),
            mode,
            inner: RwLock::new(TopicsFile::default()),
            shared: OnceLock::new(),
        };
        if access != Access::Read {
            let mut journal = Journal::new(journal_path(p), mode);
            if access == Access::Join {
                journal.known(replay.as_ref().map_or(0, |r| r.end));
            }
            file.journal = Some(journal);
            if access == Access::Own && replay.is_some_and(|r| r.torn || !r.changes.is_empty()) {
                table.compact(&mut file)?;
            }
        }
        *table.inner.write().unwrap_or_else(|p| p.into_inner()) = file;
        Ok(table)
    }

    /// Makes this writer's table one of several writer processes' (`StoreConfig::shared_writers`,
    /// shared.rs): from now on every change is made under the journal lock on the table every
    /// process's changes give, and [`TopicTable::sync`] reads the others' changes. Reads the
    /// records appended since the load. Set once, at open; a table without a journal (in
    /// memory, read-only) is left alone.
    ///
    /// # Errors
    /// An I/O error opening the lock or reading the journal; `ConfigFile` for a damaged record.
    pub fn share(&self, shm: Arc<WriterShm>) -> Result<()> {
        let Some(p) = &self.path else { return Ok(()) };
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if g.journal.is_none() {
            return Ok(());
        }
        let shared = SharedTopics::new(shm, p, self.mode)?;
        catch_up(&mut g, &shared.lock()?)?;
        let _ = self.shared.set(shared);
        Ok(())
    }

    /// Shared writers: reads the topic changes other processes made since this one last
    /// looked, when there are any (one atomic load when there are none). Every lookup that must
    /// see the others' changes calls it first. A no-op for any other table.
    ///
    /// # Errors
    /// As `share`; the table in memory is kept then.
    #[inline]
    pub fn sync(&self) -> Result<()> {
        match self.shared.get() {
            Some(s) if s.stale() => self.sync_now(s),
            _ => Ok(()),
        }
    }

    #[cold]
    fn sync_now(&self, shared: &SharedTopics) -> Result<()> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        catch_up(&mut g, &shared.lock()?)
    }

    /// True while another process's topic change is unread (`sync` would read it). Always
    /// inlined, with `SharedTopics::stale`: every send's topic lookup asks.
    #[inline(always)]
    fn stale(&self) -> bool {
        self.shared.get().is_some_and(SharedTopics::stale)
    }

    /// Re-reads the files (read-only stores follow topics the writer creates). No file present:
    /// the table in memory is kept.
    ///
    /// # Errors
    /// As `load`; the table in memory is kept then.
    pub fn reload(&self) -> Result<()> {
        let Some(p) = &self.path else { return Ok(()) };
        let Read { file, found, .. } = read_table(p)?;
        if found {
            let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
            let journal = g.journal.take();
            *g = TopicsFile { journal, ..file };
        }
        Ok(())
    }

    /// Writes the whole table into `topics.json` if the journal holds records (a writer's
    /// clean close), so that the file RocketMQ reads is complete. `last`: no other process has
    /// the store open; a shared writer that is not the last only closes its files (the others
    /// go on appending), and the last first reads every other process's changes.
    ///
    /// # Errors
    /// An I/O error writing the table (the journal keeps every change then).
    pub fn close(&self, last: bool) -> Result<()> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if let Some(shared) = self.shared.get() {
            let read = match last {
                true => shared.lock().and_then(|held| catch_up(&mut g, &held)),
                false => Ok(()),
            };
            shared.close();
            if !last || read.is_err() {
                if let Some(j) = g.journal.as_mut() {
                    j.close_file();
                }
                return read;
            }
        }
        match &g.journal {
            Some(j) if j.record_bytes() > 0 || j.broken() => self.compact(&mut g)?,
            _ => {}
        }
        // A closed store holds no descriptor of its topic table.
        if let Some(j) = g.journal.as_mut() {
            j.release();
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

    /// `TopicConfig::since_offset` of `topic` (0 for an unknown one), without cloning the
    /// config.
    pub fn since(&self, topic: &str) -> u64 {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.topic_config_table
            .get(topic)
            .map_or(0, |c| since_of(&c.attributes))
    }

    /// Write queue count and writability of `topic`, without cloning the config.
    pub fn write_info(&self, topic: &str) -> Option<(u32, bool)> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.topic_config_table.get(topic).map(TopicConfig::write_info)
    }

    /// `write_info` for a caller that must not wait: `None` while a topic change holds the
    /// table (it writes `topics.json` under the lock) or another process's change is unread
    /// (`sync` reads it), else `Some(write_info)`.
    #[inline]
    pub fn try_write_info(&self, topic: &str) -> Option<Option<(u32, bool)>> {
        if self.stale() {
            return None;
        }
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
        self.change(|file| {
            if file.topic_config_table.get(&config.topic_name) == Some(&config) {
                return Ok((Vec::new(), false));
            }
            Ok((vec![Change::Put(config)], true))
        })
    }

    /// Changes `topic` with `change` and persists the table, as one step: no other change of
    /// the table, in this process or another, comes between the check `change` makes and the
    /// write. `change` gets the topic's config (`None`: it does not exist) and returns the
    /// config the topic must have (`None`: leave it as it is). Returns the topic's config
    /// afterwards; an error of `change` changes nothing.
    pub fn upsert(
        &self,
        topic: &str,
        change: impl FnOnce(Option<&TopicConfig>) -> Result<Option<TopicConfig>>,
    ) -> Result<Option<TopicConfig>> {
        self.change(|file| {
            let old = file.topic_config_table.get(topic);
            match change(old)? {
                Some(new) if old != Some(&new) => Ok((vec![Change::Put(new.clone())], Some(new))),
                _ => Ok((Vec::new(), old.cloned())),
            }
        })
    }

    /// Changes the existing `topic` with `change` (as `upsert`). `Ok(None)` when the topic does
    /// not exist; an error of `change` changes nothing.
    pub fn update(
        &self,
        topic: &str,
        change: impl FnOnce(&mut TopicConfig) -> Result<()>,
    ) -> Result<Option<TopicConfig>> {
        self.upsert(topic, |old| {
            let Some(old) = old else { return Ok(None) };
            let mut new = old.clone();
            change(&mut new)?;
            Ok(Some(new))
        })
    }

    /// The config of `topic`, created as `config` says when it does not exist (as one step
    /// with every other change: a topic another process created meanwhile is left as it is).
    pub fn get_or_put(&self, config: TopicConfig) -> Result<TopicConfig> {
        let topic = config.topic_name.clone();
        let made = self.upsert(&topic, |old| Ok(old.is_none().then_some(config)))?;
        made.ok_or(Error::TopicNotFound { topic })
    }

    /// Adds the topics found on disk without a table (`config/topics.json` and its `.bak`
    /// missing, as in a store whose config was lost or not copied), each readable and writable
    /// with as many queues as its highest queue directory says. A topic already in the table
    /// is left as it is. `persist`: write the table once (a writer that owns the store); else
    /// memory only.
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
            self.compact(&mut g)?;
        }
        Ok(())
    }

    /// Removes a topic; returns whether it existed.
    pub fn remove(&self, topic: &str) -> Result<bool> {
        self.change(|file| match file.topic_config_table.contains_key(topic) {
            true => Ok((vec![Change::Remove(topic.to_owned())], true)),
            false => Ok((Vec::new(), false)),
        })
    }

    /// Adds the topics of `configs` that do not exist yet, as one durable step (one journal
    /// append, one sync); an existing topic is left as it is. Returns the names added.
    ///
    /// # Errors
    /// An I/O error writing: nothing was added then.
    pub fn put_new(&self, configs: Vec<TopicConfig>) -> Result<Vec<String>> {
        self.create(configs, true)
    }

    /// `put_new`, or with `exist_ok = false` an `InvalidArgument` error (adding none) when one
    /// of the topics exists, checked in the same step as the write (a topic another process
    /// created meanwhile exists).
    ///
    /// # Errors
    /// As `put_new`, and `InvalidArgument`.
    pub fn create(&self, configs: Vec<TopicConfig>, exist_ok: bool) -> Result<Vec<String>> {
        self.change(|file| {
            let table = &file.topic_config_table;
            if let Some(c) = configs.iter().find(|c| table.contains_key(&c.topic_name)) {
                if !exist_ok {
                    return Err(Error::InvalidArgument {
                        field: "topic",
                        reason: format!("{:?} exists already", c.topic_name),
                    });
                }
            }
            let mut changes = Vec::new();
            let mut seen = std::collections::BTreeSet::new();
            for c in configs {
                if !table.contains_key(&c.topic_name) && seen.insert(c.topic_name.clone()) {
                    changes.push(Change::Put(c));
                }
            }
            Ok((changes, seen.into_iter().collect()))
        })
    }

    /// Every change of the table: `decide` gets the table as every process's changes left it
    /// and returns the changes to make (none: nothing is written) and the caller's result.
    /// The changes are applied and made durable as one step; when they cannot be written,
    /// memory is left as it was. Shared writers hold the journal lock throughout (shared.rs).
    fn change<R>(&self, decide: impl FnOnce(&TopicsFile) -> Result<(Vec<Change>, R)>) -> Result<R> {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let held = match self.shared.get() {
            Some(s) => {
                let held = s.lock()?;
                catch_up(&mut g, &held)?;
                Some(held)
            }
            None => None,
        };
        let (changes, out) = decide(&g)?;
        if changes.is_empty() {
            return Ok(out);
        }
        if let (Some(_), Some(j)) = (&held, g.journal.as_mut()) {
            j.prepare_append()?;
        }
        let undo = g.apply_undoable(&changes);
        if let Some(h) = &held {
            h.bump();
        }
        if let Err(e) = self.record(&mut g, &changes) {
            // Keep memory and disk in agreement: undo the changes.
            g.undo(undo);
            return Err(e);
        }
        Ok(out)
    }

    /// Makes `changes`, already applied to `file` in memory, durable: a writer appends them to
    /// the journal (compacting it when it has grown past `topics.json`, unless other processes
    /// share it); a table without a journal writes `topics.json` whole.
    fn record(&self, file: &mut TopicsFile, changes: &[Change]) -> Result<()> {
        let shared = self.shared.get().is_some();
        let Some(journal) = file.journal.as_mut() else {
            return self.persist(file);
        };
        if journal.broken() && !shared {
            // An earlier append failed part way: start afresh from the table in memory.
            return self.compact(file);
        }
        journal.append(changes)?;
        if !shared && journal.record_bytes() > COMPACT_MIN.max(file.json_len) {
            // The changes are durable in the journal: a failed compaction is retried at the
            // next change past the bound or at close, and loses nothing.
            let _ = self.compact(file);
        }
        Ok(())
    }

    /// Writes the whole table into `topics.json`, then starts an empty journal. The order is
    /// what makes it crash-safe: the journal is emptied only once the file holds its records.
    fn compact(&self, file: &mut TopicsFile) -> Result<()> {
        self.persist(file)?;
        kill_point!("topics.journal_before_reset");
        match file.journal.as_mut() {
            Some(j) => j.reset(),
            None => Ok(()),
        }
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
        file.json_len = json.len() as u64;
        Ok(())
    }
}

/// Shared writers, holding the journal lock: applies the records the other processes appended
/// since this one last read, and notes the generation the table then reflects.
fn catch_up(file: &mut TopicsFile, held: &shared::Held<'_>) -> Result<()> {
    let generation = held.generation();
    if let Some(j) = file.journal.as_mut() {
        let replay = j.read_new()?;
        file.apply(&replay.changes);
    }
    held.saw(generation);
    Ok(())
}

/// What `read_table` found.
struct Read {
    /// `topics.json` (or its `.bak`) with the journal replayed.
    file: TopicsFile,
    /// False when none of the files exists or holds anything.
    found: bool,
    /// The journal as read (`None`: there is none).
    replay: Option<journal::Replay>,
}

/// Reads `topics.json` (or its `.bak`) and then the journal, and checks that `topics.json` is
/// the same file afterwards: a writer compacting meanwhile could otherwise pair an old journal
/// with a newer table (replaying older configs over newer ones) or a newer, emptied journal with
/// an older table (losing topics).
fn read_table(p: &Path) -> Result<Read> {
    let jp = journal_path(p);
    for _ in 0..READ_TRIES {
        let before = identity(p);
        let json = read(p)?;
        let replay = journal::read(&jp)?;
        if identity(p) != before {
            continue;
        }
        let found = json.is_some() || replay.is_some();
        let mut file = json.unwrap_or_default();
        file.json_len = before.map_or(0, |(_, len, _)| len);
        if let Some(r) = &replay {
            file.apply(&r.changes);
        }
        return Ok(Read {
            file,
            found,
            replay,
        });
    }
    Err(Error::ConfigFile {
        path: p.to_path_buf(),
        field: String::new(),
        reason: format!("replaced {READ_TRIES} times while it was read with its journal"),
    })
}

/// What tells one `topics.json` from the next: each write renames a new file over it.
fn identity(p: &Path) -> Option<(u64, u64, i128)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).ok()?;
    let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    Some((m.ino(), m.len(), mtime))
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
        let t = TopicTable::load(None, 0o600, Access::Own).unwrap();
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
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        t.put(TopicConfig::new("T", 2, 6, false)).unwrap();
        let grow = |c: &mut TopicConfig| {
            c.write_queue_nums = 4;
            Ok(())
        };
        assert_eq!(t.update("U", grow).unwrap(), None);
        assert_eq!(t.update("T", grow).unwrap().unwrap().write_queue_nums, 4);
        let refuse = |_: &mut TopicConfig| Err(Error::ReadOnly);
        assert!(t.update("T", refuse).is_err());
        let reloaded = TopicTable::load(Some(p), 0o600, Access::Own).unwrap();
        assert_eq!(reloaded.get("T"), t.get("T"));
        assert_eq!(reloaded.get("T").unwrap().write_queue_nums, 4);
    }

    #[test]
    fn json_shape_matches_rocketmq_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        assert!(t.put(TopicConfig::new("TopicTest", 4, 6, false)).unwrap());
        assert!(!t.put(TopicConfig::new("TopicTest", 4, 6, false)).unwrap());
        t.close(true).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let c = &v["topicConfigTable"]["TopicTest"];
        assert_eq!(c["readQueueNums"], 4);
        assert_eq!(c["writeQueueNums"], 4);
        assert_eq!(c["perm"], 6);
        assert_eq!(c["topicFilterType"], "SINGLE_TAG");
        assert_eq!(v["dataVersion"]["counter"], 1);
        let t2 = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        assert_eq!(t2.get("TopicTest").unwrap().write_queue_nums, 4);
        // a damaged main file falls back to the .bak
        t2.put(TopicConfig::new("Other", 2, 6, false)).unwrap();
        t2.close(true).unwrap();
        std::fs::write(&p, b"{garbage").unwrap();
        let t3 = TopicTable::load(Some(p), 0o600, Access::Own).unwrap();
        assert!(t3.get("TopicTest").is_some());
    }

    #[test]
    fn unreadable_file_is_an_error_and_is_never_rotated_into_the_bak() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let bak = dir.path().join("topics.json.bak");
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        t.put(TopicConfig::new("Eight", 8, 6, false)).unwrap();
        t.close(true).unwrap();
        let bad = std::fs::read_to_string(&p)
            .unwrap()
            .replace("\"perm\": 6", "\"perm\": \"6\"");
        std::fs::write(&p, &bad).unwrap();
        // No .bak: the load fails, naming the file and the field.
        match TopicTable::load(Some(p.clone()), 0o600, Access::Own) {
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
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        assert_eq!(t.get("Eight").unwrap().read_queue_nums, 8);
        t.put(TopicConfig::new("Two", 2, 6, false)).unwrap();
        t.close(true).unwrap();
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), good.to_string());
        // From then on the file is readable and rotation is back to normal.
        t.put(TopicConfig::new("Three", 3, 6, false)).unwrap();
        t.close(true).unwrap();
        let rotated = TopicTable::load(Some(bak.clone()), 0o600, Access::Read).unwrap();
        assert!(rotated.get("Two").is_some() && rotated.get("Three").is_none());
        // A read-only reload of a file gone bad reports it and keeps the table.
        std::fs::write(&p, "{").unwrap();
        std::fs::write(&bak, "[]").unwrap();
        assert!(matches!(t.reload(), Err(Error::ConfigFile { .. })));
        assert!(t.get("Three").is_some());
    }

    fn names(t: &TopicTable) -> Vec<String> {
        t.all().into_iter().map(|c| c.topic_name).collect()
    }

    #[test]
    fn changes_are_journaled_and_compacted_into_topics_json_at_close() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let j = dir.path().join("topics.journal");
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        for i in 0..100 {
            t.put(TopicConfig::new(&format!("T{i}"), 4, 6, false))
                .unwrap();
        }
        assert!(t.remove("T0").unwrap());
        // Nothing rewrote topics.json: each change is one record in the journal.
        assert!(!p.exists());
        assert!(std::fs::metadata(&j).unwrap().len() > 100 * 100);
        // Without a close (a crash): a reader replays the journal, a writer compacts it.
        let reader = TopicTable::load(Some(p.clone()), 0o600, Access::Read).unwrap();
        assert_eq!(names(&reader), names(&t));
        assert!(!p.exists());
        let writer = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        assert_eq!(names(&writer), names(&t));
        assert_eq!(std::fs::metadata(&j).unwrap().len(), journal::HEADER);
        let text: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(text["topicConfigTable"].as_object().unwrap().len(), 99);
        // A batch is one append; existing topics are left alone, duplicates counted once.
        let before = std::fs::metadata(&j).unwrap().len();
        let added = writer
            .put_new(vec![
                TopicConfig::new("T1", 1, 6, false),
                TopicConfig::new("New", 2, 6, false),
                TopicConfig::new("New", 2, 6, false),
            ])
            .unwrap();
        assert_eq!(added, vec!["New".to_owned()]);
        assert_eq!(writer.get("T1").unwrap().write_queue_nums, 4);
        assert!(std::fs::metadata(&j).unwrap().len() > before);
        writer.close(true).unwrap();
        assert_eq!(std::fs::metadata(&j).unwrap().len(), journal::HEADER);
        let again = TopicTable::load(Some(p), 0o600, Access::Read).unwrap();
        assert_eq!(again.get("New").unwrap().write_queue_nums, 2);
        assert_eq!(again.all().len(), 100);
    }

    #[test]
    fn a_torn_journal_tail_is_cut_and_never_read_as_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let j = dir.path().join("topics.journal");
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        t.put(TopicConfig::new("Kept", 1, 6, false)).unwrap();
        let whole = std::fs::read(&j).unwrap();
        t.put(TopicConfig::new("Torn", 1, 6, false)).unwrap();
        let both = std::fs::read(&j).unwrap();
        drop(t);
        for cut in whole.len() + 1..both.len() {
            std::fs::write(&j, &both[..cut]).unwrap();
            let reader = TopicTable::load(Some(p.clone()), 0o600, Access::Read).unwrap();
            assert_eq!(names(&reader), vec!["Kept".to_owned()], "cut at {cut}");
        }
        // The writer compacts: the tail is gone and new records follow whole ones.
        let w = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        assert_eq!(names(&w), vec!["Kept".to_owned()]);
        w.put(TopicConfig::new("After", 1, 6, false)).unwrap();
        drop(w);
        let r = TopicTable::load(Some(p), 0o600, Access::Read).unwrap();
        assert_eq!(names(&r), vec!["After".to_owned(), "Kept".to_owned()]);
    }

    #[test]
    fn the_journal_is_compacted_once_it_outgrows_topics_json() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topics.json");
        let t = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        let mut i = 0;
        while !p.exists() {
            t.put(TopicConfig::new(&format!("T{i}"), 1, 6, false))
                .unwrap();
            i += 1;
            assert!(i < 20_000, "never compacted");
        }
        let journal = std::fs::metadata(dir.path().join("topics.journal")).unwrap();
        assert_eq!(journal.len(), journal::HEADER);
        let r = TopicTable::load(Some(p), 0o600, Access::Read).unwrap();
        assert_eq!(r.all().len(), i);
    }

    /// Two shared writers' tables of one store (as two processes have), the first owning it.
    fn shared_pair(root: &Path) -> (TopicTable, TopicTable, Arc<WriterShm>) {
        use crate::shared::{layout::Capacity, Initial};
        let shm = WriterShm::create(
            root,
            Capacity::for_counts(0, 0),
            &Initial::default(),
            0o700,
            0o600,
        )
        .unwrap();
        let shm = Arc::new(shm);
        let p = root.join("topics.json");
        let a = TopicTable::load(Some(p.clone()), 0o600, Access::Own).unwrap();
        a.share(Arc::clone(&shm)).unwrap();
        let b = TopicTable::load(Some(p), 0o600, Access::Join).unwrap();
        b.share(Arc::clone(&shm)).unwrap();
        (a, b, shm)
    }

    #[test]
    fn shared_writers_see_each_others_changes_and_cut_a_dead_appenders_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, shm) = shared_pair(dir.path());
        a.put(TopicConfig::new("A", 2, 6, false)).unwrap();
        assert_eq!(b.get("A"), None, "read only when asked to sync");
        assert_eq!(b.try_write_info("A"), None, "a quick lookup defers to sync");
        b.sync().unwrap();
        assert_eq!(b.write_info("A"), Some((2, true)));
        // A create decided on the other's change: the existing topic is kept, or refused.
        let grown = b.update("A", |c| {
            c.write_queue_nums = 5;
            Ok(())
        });
        assert_eq!(grown.unwrap().unwrap().write_queue_nums, 5);
        assert_eq!(
            a.create(vec![TopicConfig::new("A", 9, 6, false)], true)
                .unwrap(),
            Vec::<String>::new()
        );
        assert!(matches!(
            a.create(vec![TopicConfig::new("A", 9, 6, false)], false),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(a.get("A").unwrap().write_queue_nums, 5);
        // An appender that died mid-record (its generation bumped): the others read no change
        // from its bytes, and the next change cuts them before its own record.
        let j = dir.path().join("topics.journal");
        let whole = std::fs::metadata(&j).unwrap().len();
        let mut torn =
            journal::encode(&[Change::Put(TopicConfig::new("Torn", 1, 6, false))]).unwrap();
        torn.truncate(torn.len() - 3);
        let mut f = std::fs::OpenOptions::new().append(true).open(&j).unwrap();
        std::io::Write::write_all(&mut f, &torn).unwrap();
        shm.bump_topics_generation();
        b.sync().unwrap();
        a.sync().unwrap();
        assert_eq!(names(&b), ["A"]);
        b.put(TopicConfig::new("B", 1, 6, false)).unwrap();
        a.sync().unwrap();
        assert_eq!(names(&a), ["A", "B"]);
        let reader =
            TopicTable::load(Some(dir.path().join("topics.json")), 0o600, Access::Read).unwrap();
        assert_eq!(names(&reader), ["A", "B"]);
        assert!(std::fs::metadata(&j).unwrap().len() > whole);
        // Only the last to close compacts, with every process's changes.
        b.close(false).unwrap();
        assert!(!dir.path().join("topics.json").exists());
        a.close(true).unwrap();
        assert_eq!(std::fs::metadata(&j).unwrap().len(), journal::HEADER);
        let reopened =
            TopicTable::load(Some(dir.path().join("topics.json")), 0o600, Access::Own).unwrap();
        assert_eq!(reopened.get("A").unwrap().write_queue_nums, 5);
        assert_eq!(names(&reopened), ["A", "B"]);
    }

    #[test]
    fn system_topics() {
        assert!(is_system_topic("SCHEDULE_TOPIC_XXXX"));
        assert!(is_system_topic("rmq_sys_anything"));
        assert!(is_system_topic("%RETRY%g"));
        assert!(!is_system_topic("TopicTest"));
    }
}
