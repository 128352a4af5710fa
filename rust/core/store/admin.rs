//! Topic administration: creating, growing, listing and auto-creating topics. The write path
//! (write.rs) only looks topics up; every change to the topic table goes through here.
//!
//! Invariants: a topic never shrinks (a removed queue's messages would no longer be read); a
//! system topic is never created or changed by a user call; every derived store has prepared
//! for a topic's queues (consume queues: their directories exist) before the call that created
//! or grew it returns.

use super::Store;
use crate::error::{Error, Result};
use crate::message::validate;
use crate::topic_config::{is_system_topic, TopicConfig, MAX_QUEUES, PERM_READ, PERM_WRITE};

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
        if perm & !7 != 0 {
            return Err(Error::InvalidArgument {
                field: "perm",
                reason: format!("{perm} is not a 3-bit permission"),
            });
        }
        if self.inner.topics.get(topic).is_some() {
            if exist_ok {
                // Like `mkdir -p`: an existing topic is left exactly as it is.
                return Ok(());
            }
            return Err(Error::InvalidArgument {
                field: "topic",
                reason: format!("{topic:?} exists already"),
            });
        }
        self.inner
            .topics
            .put(TopicConfig::new(topic, queues, perm, order))?;
        self.inner.derived.prepare_topic(topic, queues)
    }

    /// Grows an existing topic to `queues` read and write queues (RocketMQ's `updateTopic`):
    /// producers and consumers can use the new queues as soon as this returns. The same count
    /// changes nothing.
    ///
    /// # Errors
    /// `TopicNotFound`; `InvalidTopic` for a system topic; `InvalidArgument` for a count outside
    /// `[1, MAX_QUEUES]` or below the topic's read or write queue count: a topic never shrinks,
    /// since the messages of a removed queue would no longer be read.
    pub fn update_topic(&self, topic: &str, queues: u32) -> Result<TopicConfig> {
        self.check_topic_change(topic, queues)?;
        let grow = |config: &mut TopicConfig| {
            let have = config.read_queue_nums.max(config.write_queue_nums);
            if queues < have {
                return Err(Error::InvalidArgument {
                    field: "queues",
                    reason: format!(
                        "topic {topic:?} has {have} queues and cannot shrink to {queues} \
                         (the messages of a removed queue would no longer be read)"
                    ),
                });
            }
            config.read_queue_nums = queues;
            config.write_queue_nums = queues;
            Ok(())
        };
        let config =
            self.inner
                .topics
                .update(topic, grow)?
                .ok_or_else(|| Error::TopicNotFound {
                    topic: topic.to_owned(),
                })?;
        self.inner.derived.prepare_topic(topic, queues)?;
        Ok(config)
    }

    /// Every topic's configuration.
    pub fn topics(&self) -> Result<Vec<TopicConfig>> {
        self.check_usable()?;
        if self.inner.config.read_only {
            self.inner.topics.reload()?;
        }
        Ok(self.inner.topics.all())
    }

    /// One topic's configuration; `InvalidTopic` for a name no topic can have.
    pub fn topic(&self, topic: &str) -> Result<Option<TopicConfig>> {
        self.check_usable()?;
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
        if let Some((queues, true)) = self.inner.topics.write_info(topic) {
            if queue_id < queues {
                return Ok(());
            }
        }
        let queues = queue_id.saturating_add(1);
        check_queue_count(queues)?;
        let grow = |config: &mut TopicConfig| {
            config.read_queue_nums = config.read_queue_nums.max(queues);
            config.write_queue_nums = config.write_queue_nums.max(queues);
            config.perm |= PERM_READ | PERM_WRITE;
            Ok(())
        };
        let config = match self.inner.topics.update(topic, grow)? {
            Some(config) => config,
            None => {
                let config = TopicConfig::new(topic, queues, PERM_READ | PERM_WRITE, false);
                self.inner.topics.put(config.clone())?;
                config
            }
        };
        self.inner
            .derived
            .prepare_topic(topic, config.read_queue_nums.max(config.write_queue_nums))
    }

    /// Creates `topic` on its first send, with the store's default queue count, when the store
    /// allows it (`auto_create_topics`); returns the write queue count.
    ///
    /// # Errors
    /// `TopicNotFound` when auto-creation is off; an I/O error writing the topic table.
    pub(super) fn auto_create_topic(&self, topic: &str) -> Result<u32> {
        if !self.inner.config.auto_create_topics {
            return Err(Error::TopicNotFound {
                topic: topic.to_owned(),
            });
        }
        let q = self.inner.config.default_queues;
        self.inner
            .topics
            .put(TopicConfig::new(topic, q, PERM_READ | PERM_WRITE, false))?;
        Ok(q)
    }
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
