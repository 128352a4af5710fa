//! Topic administration: creating, growing, listing and auto-creating topics. The write path
//! (write.rs) only looks topics up; every change to the topic table goes through here.
//!
//! Invariants: a topic's read queues never shrink (a removed queue's messages would no longer
//! be read) and its write queues never outnumber them (a message sent to a queue no reader
//! reads would be lost to consumers); a
//! system topic is never created or changed by a user call; every derived store has prepared
//! for a topic's queues (consume queues: their directories exist) before the call that created
//! or grew it returns. A deleted topic leaves a tombstone (`config/deletedTopics/<topic>`,
//! written durably before the config leaves the table); a topic created under a tombstoned name
//! records the log's end as its `since` offset (`SINCE_ATTRIBUTE`), so it never shows the
//! deleted one's messages, whose consume-queue entries and records stay until retention deletes
//! them. A topic created under any other name (a new one, or one whose config was lost with
//! `topics.json`) gets no `since` offset: every message stored under its name stays visible.

use super::Store;
use crate::error::{Error, Result};
use crate::message::validate;
use crate::topic_config::{
    is_system_topic, TopicConfig, MAX_QUEUES, PERM_READ, PERM_WRITE, SINCE_ATTRIBUTE,
};
use crate::util::fs;

/// The directory under `config/` of deleted topics' tombstones (FORMAT.md §7).
const TOMBSTONES: &str = "deletedTopics";

impl Store {
    /// What creating or growing `topic` to `queues` queues requires: a writer, a valid name that
    /// is not a system topic, a queue count within `[1, MAX_QUEUES]`.
    fn check_topic_change(&self, topic: &str, queues: u32) -> Result<()> {
        self.check_writable()?;
        validate::check_topic(topic)?;
        if is_system_topic(topic) {
            return Err(super::write::system_topic(topic));
        }
        check_queue_count(queues)
    }

    /// Creates a topic. An existing one is left exactly as it is (`update_topic` grows it), or
    /// with `exist_ok = false` is an `InvalidArgument` error.
    pub fn create_topic(
        &self,
        topic: &str,
        queues: u32,
        perm: u32,
        order: bool,
        exist_ok: bool,
    ) -> Result<()> {
        self.check_topic_change(topic, queues)?;
        check_perm(perm)?;
        // Like `mkdir -p`: an existing topic (one another process created meanwhile included)
        // is left exactly as it is.
        let config = self.new_topic(topic, queues, perm, order);
        if self.inner.topics.create(vec![config], exist_ok)?.is_empty() {
            return Ok(());
        }
        self.inner.derived.prepare_topic(topic, queues)
    }

    /// Creates every topic of `topics` that does not exist yet, with the same settings, as one
    /// durable step: the table is written once (one journal append and one sync), not once per
    /// topic. Every name and setting is checked before anything is written, so a bad one
    /// creates none. An existing topic is left exactly as it is, or with `exist_ok = false` is
    /// an `InvalidArgument` error (creating none). Returns the names created, sorted.
    pub fn create_topics(
        &self,
        topics: &[&str],
        queues: u32,
        perm: u32,
        order: bool,
        exist_ok: bool,
    ) -> Result<Vec<String>> {
        for topic in topics {
            self.check_topic_change(topic, queues)?;
        }
        check_perm(perm)?;
        let configs = topics
            .iter()
            .map(|t| self.new_topic(t, queues, perm, order))
            .collect();
        let created = self.inner.topics.create(configs, exist_ok)?;
        for topic in &created {
            self.inner.derived.prepare_topic(topic, queues)?;
        }
        for topic in &created {
            // The new config carries the since offset now; a tombstone left behind (a
            // failure here) only makes a later re-creation set one again.
            if let Some(path) = self.tombstone(topic) {
                if fs::entry_exists(&path) {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        Ok(created)
    }

    /// Where the tombstone of a deleted `topic` is (`None` for an in-memory store).
    fn tombstone(&self, topic: &str) -> Option<std::path::PathBuf> {
        self.root()
            .map(|r| r.join("config").join(TOMBSTONES).join(topic))
    }

    /// A user topic's config as created now. Under the name of a deleted topic (its tombstone
    /// exists), its `since` offset is the commit log's end when the log holds records (every
    /// record already written, by any process, is below it).
    fn new_topic(&self, topic: &str, queues: u32, perm: u32, order: bool) -> TopicConfig {
        let mut config = TopicConfig::new(topic, queues, perm, order);
        let in_memory_or_deleted = match self.tombstone(topic) {
            Some(path) => fs::entry_exists(&path),
            None => true,
        };
        if !in_memory_or_deleted {
            return config;
        }
        // Shared writers: count what the other processes published. A failure leaves the view,
        // and so the offset, as far as this process saw: a deleted topic's records published
        // past that point by another process would show in the new topic.
        let _ = self.inner.commit_log.follow_shared();
        let end = self.inner.commit_log.max_offset();
        if end > 0 {
            config
                .attributes
                .insert(SINCE_ATTRIBUTE.to_owned(), end.to_string());
        }
        config
    }

    /// Grows an existing topic to `queues` read and write queues (RocketMQ's `updateTopic`):
    /// producers and consumers can use the new queues as soon as this returns. The same count
    /// changes nothing.
    ///
    /// # Errors
    /// As `update_topic_settings`.
    pub fn update_topic(&self, topic: &str, queues: u32) -> Result<TopicConfig> {
        check_queue_count(queues)?;
        self.update_topic_settings(
            topic,
            TopicUpdate {
                read_queues: Some(queues),
                write_queues: Some(queues),
                ..TopicUpdate::default()
            },
        )
    }

    /// Changes the settings `update` gives of an existing topic (RocketMQ's `updateTopic`), as
    /// one step with every other change of the table (in any process); the others are kept.
    /// Producers use the new write queues from their next send; consumers pick new read queues
    /// up at their next rebalance. The same settings change nothing.
    ///
    /// # Errors
    /// `TopicNotFound`; `InvalidTopic` for a system topic; `InvalidArgument` (nothing written)
    /// for a queue count outside `[1, MAX_QUEUES]`, read queues fewer than the topic has (the
    /// messages of a removed queue would no longer be read), write queues more than read queues
    /// (their messages would never be read), or a `perm` that is not a 3-bit value.
    pub fn update_topic_settings(&self, topic: &str, update: TopicUpdate) -> Result<TopicConfig> {
        self.check_writable()?;
        validate::check_topic(topic)?;
        if is_system_topic(topic) {
            return Err(super::write::system_topic(topic));
        }
        for q in [update.read_queues, update.write_queues]
            .into_iter()
            .flatten()
        {
            check_queue_count(q)?;
        }
        if let Some(p) = update.perm {
            check_perm(p)?;
        }
        let change = |config: &mut TopicConfig| {
            let have = config.read_queue_nums;
            let read = update.read_queues.unwrap_or(have);
            if read < have {
                return Err(Error::InvalidArgument {
                    field: "read_queues",
                    reason: format!(
                        "topic {topic:?} has {have} read queues and cannot shrink to {read} \
                         (the messages of a removed queue would no longer be read)"
                    ),
                });
            }
            let write = update.write_queues.unwrap_or(config.write_queue_nums);
            // Checked when a count changes: a table from elsewhere may hold more write than
            // read queues, and a change of `perm` or `order` alone leaves them as they are.
            let counts = update.read_queues.is_some() || update.write_queues.is_some();
            if counts && write > read {
                return Err(Error::InvalidArgument {
                    field: "write_queues",
                    reason: format!(
                        "{write} write queues is more than the topic's {read} read queues \
                         (messages sent to the others would never be read)"
                    ),
                });
            }
            config.read_queue_nums = read;
            config.write_queue_nums = write;
            if let Some(p) = update.perm {
                config.perm = p;
            }
            if let Some(o) = update.order {
                config.order = o;
            }
            Ok(())
        };
        let config =
            self.inner
                .topics
                .update(topic, change)?
                .ok_or_else(|| Error::TopicNotFound {
                    topic: topic.to_owned(),
                })?;
        self.inner
            .derived
            .prepare_topic(topic, config.read_queue_nums)?;
        Ok(config)
    }

    /// Deletes a topic (RocketMQ's `deleteTopic`): its config leaves the table, durably and as
    /// one step with every other change (other writer processes see it at their next topic
    /// look-up). Its records and consume-queue files stay until retention deletes them; a
    /// topic created again under the name starts past them (`SINCE_ATTRIBUTE`). Sends to it
    /// then fail with `TopicNotFound`, or create it anew where topics are auto-created; reads
    /// of its queues go on returning what they hold until it is created again.
    ///
    /// # Errors
    /// `TopicNotFound`; `InvalidTopic` for a bad name or a system topic; `ReadOnly`.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        self.check_writable()?;
        validate::check_topic(topic)?;
        if is_system_topic(topic) {
            return Err(super::write::system_topic(topic));
        }
        if self.topic(topic)?.is_none() {
            return Err(Error::TopicNotFound {
                topic: topic.to_owned(),
            });
        }
        // The tombstone first, durably: a crash after it and before the removal leaves the
        // topic in place and only makes its next creation start past what the log holds then.
        if let Some(path) = self.tombstone(topic) {
            let dir = path.parent().unwrap_or(std::path::Path::new("."));
            fs::create_dir_all(dir, self.config().dir_mode)?;
            let end = self.inner.commit_log.max_offset();
            fs::stage(&path, end.to_string().as_bytes(), self.config().file_mode)?
                .replace(false)?;
        }
        if !self.inner.topics.remove(topic)? {
            return Err(Error::TopicNotFound {
                topic: topic.to_owned(),
            });
        }
        Ok(())
    }

    /// Where `topic`'s current incarnation begins in the commit log
    /// (`TopicConfig::since_offset`): a record of that topic below it belongs to a deleted topic
    /// of the same name, which queries of this one (the key index's) skip. 0 for a topic with
    /// none, or unknown. A read-only store re-reads the topic table first.
    ///
    /// # Errors
    /// The store is closed; reading another process's topic changes failed.
    pub fn topic_since_offset(&self, topic: &str) -> Result<u64> {
        self.check_usable()?;
        if self.inner.config.read_only {
            self.inner.topics.reload()?;
        }
        self.inner.topics.sync()?;
        Ok(self.inner.topics.since(topic))
    }

    /// Every topic's configuration.
    pub fn topics(&self) -> Result<Vec<TopicConfig>> {
        self.check_usable()?;
        if self.inner.config.read_only {
            self.inner.topics.reload()?;
        }
        self.inner.topics.sync()?;
        Ok(self.inner.topics.all())
    }

    /// One topic's configuration; `InvalidTopic` for a name no topic can have.
    pub fn topic(&self, topic: &str) -> Result<Option<TopicConfig>> {
        self.check_usable()?;
        self.inner.topics.sync()?;
        if let Some(config) = self.inner.topics.get(topic) {
            return Ok(Some(config));
        }
        validate::check_topic(topic)?;
        if self.inner.config.read_only {
            self.inner.topics.reload()?;
        }
        Ok(self.inner.topics.get(topic))
    }

    /// Makes sure system topic `topic` has write queue `queue_id`, creating the topic or
    /// growing it as needed: a put hook's rewrite goes there (store/hooks.rs), and no user call
    /// can create one.
    ///
    /// # Errors
    /// `InvalidArgument` for a queue beyond `MAX_QUEUES`; an I/O error writing the table.
    pub(super) fn ensure_system_queue(&self, topic: &str, queue_id: u32) -> Result<()> {
        self.inner.topics.sync()?;
        if let Some((queues, true)) = self.inner.topics.write_info(topic) {
            if queue_id < queues {
                return Ok(());
            }
        }
        let queues = queue_id.saturating_add(1);
        check_queue_count(queues)?;
        // Grown or created in one step: a process creating it meanwhile is grown, not replaced.
        let ensure = |old: Option<&TopicConfig>| {
            let mut config = match old {
                Some(c) => c.clone(),
                None => TopicConfig::new(topic, queues, PERM_READ | PERM_WRITE, false),
            };
            config.read_queue_nums = config.read_queue_nums.max(queues);
            config.write_queue_nums = config.write_queue_nums.max(queues);
            config.perm |= PERM_READ | PERM_WRITE;
            Ok(Some(config))
        };
        let config =
            self.inner
                .topics
                .upsert(topic, ensure)?
                .ok_or_else(|| Error::TopicNotFound {
                    topic: topic.to_owned(),
                })?;
        self.inner
            .derived
            .prepare_topic(topic, config.read_queue_nums.max(config.write_queue_nums))
    }

    /// Creates `topic` on its first send, with the store's default queue count, when the store
    /// allows it (`auto_create_topics`); returns its write queue count and writability. A topic
    /// another thread or process created meanwhile is left as it is, and its settings returned.
    ///
    /// # Errors
    /// `TopicNotFound` when auto-creation is off; an I/O error writing the topic table.
    pub(super) fn auto_create_topic(&self, topic: &str) -> Result<(u32, bool)> {
        if !self.inner.config.auto_create_topics {
            return Err(Error::TopicNotFound {
                topic: topic.to_owned(),
            });
        }
        let q = self.inner.config.default_queues;
        let config = self.inner.topics.get_or_put(self.new_topic(
            topic,
            q,
            PERM_READ | PERM_WRITE,
            false,
        ))?;
        Ok((config.write_queue_nums, config.writable()))
    }
}

/// The settings `Store::update_topic_settings` changes (`None`: keep the topic's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicUpdate {
    /// Readable queue count.
    pub read_queues: Option<u32>,
    /// Writable queue count.
    pub write_queues: Option<u32>,
    /// Permission bits (`PERM_READ | PERM_WRITE`).
    pub perm: Option<u32>,
    /// Ordered-topic flag.
    pub order: Option<bool>,
}

/// A topic's permission is a 3-bit value (read 4, write 2, inherit 1).
fn check_perm(perm: u32) -> Result<()> {
    if perm & !7 != 0 {
        return Err(Error::InvalidArgument {
            field: "perm",
            reason: format!("{perm} is not a 3-bit permission"),
        });
    }
    Ok(())
}

/// A topic's queue count is 1 to `MAX_QUEUES`.
fn check_queue_count(queues: u32) -> Result<()> {
    if !(1..=MAX_QUEUES).contains(&queues) {
        return Err(Error::InvalidArgument {
            field: "queues",
            reason: format!("{queues} is outside [1, {MAX_QUEUES}]"),
        });
    }
    Ok(())
}
