//! Lookups through the key index (index/): by key within a time window, by unique id, and
//! the index's status. Every hit the index gives is re-checked on its record (offset inside
//! the log's live range, the record starting there, topic, key and store time), so hash
//! collisions and torn or stale entries never reach the caller and never count toward the
//! limit. Works on writers, shared writers and read-only stores alike: the files are read,
//! never mapped for writing, by whichever process asks.

use super::Store;
use crate::error::{Error, Result};
use crate::index::{self, query};
use crate::message::properties;
use crate::message::validate::is_retry_or_dlq;
use crate::topic_config::is_system_topic;

/// Longest text `find_by_unique_id` looks up.
const MAX_UNIQUE_ID: usize = 128;

/// Largest `limit` of `find_by_key`.
pub const MAX_KEY_QUERY: usize = 10_000;

/// The key index's state, as `Store::index_status` and every lookup report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexStatus {
    /// The index is built (`StoreConfig::index_enabled`; a read-only store reads whatever
    /// index the writer built).
    pub enabled: bool,
    /// Index files.
    pub files: usize,
    /// Every record below this commit-log offset is indexed.
    pub progress: u64,
    /// The commit log's end.
    pub log_end: u64,
    /// Bytes of log not indexed yet (`log_end - progress`): a lookup may miss their records.
    pub lag: u64,
    /// The failure the index's dispatch is retrying, if any.
    pub last_error: Option<String>,
}

/// What `find_by_key` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyQuery {
    /// Commit-log offsets of the matching records, newest first.
    pub offsets: Vec<u64>,
    /// More records match than the limit let through.
    pub truncated: bool,
    /// The index's state when the lookup ran.
    pub status: IndexStatus,
}

fn check_key(key: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::InvalidArgument {
            field: "key",
            reason: reason.to_owned(),
        })
    };
    if key.is_empty() {
        return bad("empty");
    }
    if key.len() > properties::MAX_PROPERTIES_LEN {
        return bad("longer than any stored key");
    }
    if key.contains(' ') {
        return bad("contains a space (KEYS are split on spaces: look each piece up)");
    }
    if key.chars().any(char::is_control) {
        return bad("contains a control character");
    }
    Ok(())
}

impl Store {
    /// The index, brought up to the log's end first when this process builds it, so that a
    /// lookup after a send finds what the send stored. Elsewhere (a read-only store, a shared
    /// writer that does not lead) the builder's progress is what the files hold, and lookups
    /// report the lag.
    fn key_index(&self) -> Result<&index::IndexService> {
        let idx = self
            .inner
            .key_index
            .as_deref()
            .ok_or_else(|| Error::IndexUnavailable {
                reason: "the store was opened with index_enabled off".into(),
            })?;
        if let (Some(r), true) = (&self.inner.reput, idx.writing_here()) {
            // A failure is on the lane, and the status reports it.
            let _ = r.follow_store(index::service::NAME);
        }
        Ok(idx)
    }

    /// The key index's state: files, progress, lag behind the log, last failure.
    ///
    /// # Errors
    /// `Closed`; I/O failures reading the index files.
    pub fn index_status(&self) -> Result<IndexStatus> {
        self.check_usable()?;
        self.catch_up();
        let log_end = self.log_end();
        let Some(idx) = self.inner.key_index.as_deref() else {
            return Ok(IndexStatus {
                log_end,
                lag: log_end,
                ..IndexStatus::default()
            });
        };
        let (files, newest) = idx.describe()?;
        // This process's own lane when it builds the index.
        let lane = self.inner.reput.as_ref().and_then(|r| {
            r.progress()
                .into_iter()
                .find(|s| s.store.name() == index::service::NAME)
        });
        let mut progress = lane.as_ref().map_or(0, |s| s.dispatched.offset);
        let mut last_error = lane.and_then(|s| s.error);
        if last_error.is_some() || lane_missing(&self.inner.reput) {
            // Another process builds it (or none here): what the files and checkpoint show.
            let durable = self.inner.checkpoint.as_ref().map_or(0, |c| {
                c.progress()
                    .iter()
                    .find(|p| p.name == index::service::NAME)
                    .map_or(0, |p| p.offset)
            });
            let indexed = newest
                .filter(|h| h.index_count > 1)
                .and_then(|h| u64::try_from(h.end_phy_offset).ok())
                .and_then(|o| {
                    self.get_by_offset(o, |v| o + u64::from(v.total_size()))
                        .ok()
                })
                .unwrap_or(0);
            progress = progress.max(durable).max(indexed);
            if last_error
                .as_deref()
                .is_some_and(|e| e.contains("another writer process"))
            {
                last_error = None;
            }
        }
        let progress = progress.min(log_end);
        Ok(IndexStatus {
            enabled: true,
            files,
            progress,
            log_end,
            lag: log_end - progress,
            last_error,
        })
    }

    /// Up to `limit` messages of `topic` whose `KEYS` holds `key` (or whose unique id is
    /// `key`), stored in `[begin_ms, end_ms]` (epoch ms, inclusive), newest first, as
    /// commit-log offsets. `truncated` says more matched; `status.lag` that records not yet
    /// indexed may match too.
    ///
    /// # Errors
    /// `TopicNotFound`; `InvalidArgument` for an empty key, one holding a space or control
    /// character, `begin_ms > end_ms` or a limit outside [1, 10,000]; `IndexUnavailable` with
    /// the index off; I/O failures reading the index.
    pub fn find_by_key(
        &self,
        topic: &str,
        key: &str,
        begin_ms: i64,
        end_ms: i64,
        limit: usize,
    ) -> Result<KeyQuery> {
        self.check_usable()?;
        check_key(key)?;
        if begin_ms > end_ms {
            return Err(Error::InvalidArgument {
                field: "begin",
                reason: format!("begin {begin_ms} is after end {end_ms}"),
            });
        }
        if !(1..=MAX_KEY_QUERY).contains(&limit) {
            return Err(Error::InvalidArgument {
                field: "limit",
                reason: format!("{limit} is outside [1, {MAX_KEY_QUERY}]"),
            });
        }
        let Some(config) = self.topic(topic)? else {
            return Err(Error::TopicNotFound {
                topic: topic.to_owned(),
            });
        };
        // Records below it belong to a deleted topic of the same name (admin.rs).
        let since = config.since_offset();
        let idx = self.key_index()?;
        let status = self.index_status()?;
        let files = idx.files_for_query()?;
        let end = status.log_end;
        let found = query::lookup(&files, topic, key, begin_ms, end_ms, limit, |off| {
            if off < since {
                return Ok(false);
            }
            Ok(self.record_matches(off, end, |v| {
                v.topic() == topic
                    && (v.property(properties::UNIQ_KEY) == Some(key) || v.keys().any(|k| k == key))
                    && (begin_ms..=end_ms).contains(&v.store_timestamp())
            }))
        })?;
        Ok(KeyQuery {
            offsets: found.offsets,
            truncated: found.truncated,
            status,
        })
    }

    /// The commit-log offset of the message whose unique id (`UNIQ_KEY`, the id a send
    /// returns) is `id`, looked up through the index in `topic`, or in every topic when
    /// `None` (the user's topics first, then retry and dead-letter topics, then the other
    /// system topics; the newest record of the first topic holding one); `None` when no
    /// indexed message has it, or when `id` is not hex digits (every client's unique ids are).
    ///
    /// # Errors
    /// `InvalidArgument` for an id that cannot be a key; `IndexUnavailable` with the index
    /// off; I/O failures reading the index.
    pub fn find_by_unique_id(&self, id: &str, topic: Option<&str>) -> Result<Option<u64>> {
        self.check_usable()?;
        check_key(id)?;
        // Client unique ids are hex digits (32, or 34 for RocketMQ 5's gRPC clients): any
        // other text names no message, and is answered without touching the index.
        if id.len() > MAX_UNIQUE_ID || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let idx = self.key_index()?;
        self.catch_up();
        let files = idx.files_for_query()?;
        let end = self.log_end();
        let mut topics: Vec<String> = match topic {
            Some(t) => vec![t.to_owned()],
            None => self.topics()?.into_iter().map(|t| t.topic_name).collect(),
        };
        // Copies share their origin's unique id (a retry, a dead letter, a delayed message's
        // waiting record): the user's topics are searched first, then retry and dead-letter
        // topics, then the other system topics.
        topics.sort_by_key(|t| {
            if !is_system_topic(t) {
                0
            } else if is_retry_or_dlq(t) {
                1
            } else {
                2
            }
        });
        for t in &topics {
            let found = query::lookup(&files, t, id, i64::MIN, i64::MAX, 1, |off| {
                Ok(self.record_matches(off, end, |v| {
                    v.topic() == t && v.property(properties::UNIQ_KEY) == Some(id)
                }))
            })?;
            if let Some(&off) = found.offsets.first() {
                return Ok(Some(off));
            }
        }
        Ok(None)
    }

    /// The end of the log's whole records (a follower's: what the writer has written).
    fn log_end(&self) -> u64 {
        if self.inner.config.read_only {
            self.follower_log_end()
        } else {
            self.inner.commit_log.max_offset()
        }
    }

    /// Whether a record starts at `off`, inside the log's live range (below `end`), and
    /// passes `check`. Anything unreadable there (an entry pointing at garbage) is no match.
    fn record_matches(
        &self,
        off: u64,
        end: u64,
        check: impl FnOnce(&crate::message::RecordView<'_>) -> bool,
    ) -> bool {
        if off < self.inner.commit_log.min_offset() || off >= end {
            return false;
        }
        self.get_by_offset(off, |v| v.physical_offset() == off && check(v))
            .unwrap_or(false)
    }
}

fn lane_missing(reput: &Option<std::sync::Arc<crate::dispatch::reput::Reput>>) -> bool {
    reput.as_ref().is_none_or(|r| {
        !r.progress()
            .iter()
            .any(|s| s.store.name() == index::service::NAME)
    })
}
