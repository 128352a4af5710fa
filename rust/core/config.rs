//! Store configuration: one typed struct with validated defaults sized for an embedded library.
//!
//! Footprint of the defaults: commit-log files of 32 MiB (the next one is preallocated in the
//! background once the current one is half full) and consume-queue files of 50,000 units
//! (1,000,000 bytes) per queue, 4 queues per auto-created topic: a new store of a small app with
//! one topic costs about 36 MiB on disk.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::message::codec::FIXED_V1_IPV4;
use crate::message::properties::MAX_PROPERTIES_LEN;
use crate::message::validate::MAX_SYSTEM_TOPIC_LEN;
use crate::topic_config::MAX_QUEUES;
use crate::util::clock::Clock;

/// When appended data is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushMode {
    /// A flush thread msyncs every `flush_interval`. A process crash loses nothing (the kernel
    /// owns the mapped pages); an OS crash or power loss loses at most the last interval.
    Async,
    /// Group commit: a put returns after the data is msynced; concurrent puts share one msync.
    /// A put whose flush is not confirmed within `sync_flush_timeout` reports FLUSH_DISK_TIMEOUT.
    Sync,
}

/// Every tunable of a store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Open without writing anything (no lock, no recovery writes); follow the writer's tail.
    pub read_only: bool,
    /// How long to wait for another writer to release the lock (`None`: fail at once).
    pub lock_wait: Option<Duration>,
    /// Durability mode.
    pub flush_mode: FlushMode,
    /// Interval of the async flush (and of consume-queue / checkpoint flushes in both modes).
    pub flush_interval: Duration,
    /// Sync mode: how long a put waits for the disk before reporting FLUSH_DISK_TIMEOUT.
    pub sync_flush_timeout: Duration,
    /// Size of each commit-log file in bytes.
    pub commit_log_file_size: u64,
    /// Units (20 bytes each) per consume-queue file.
    pub consume_queue_file_units: u64,
    /// Largest accepted body in bytes.
    pub max_message_size: usize,
    /// Create unknown topics on first send.
    pub auto_create_topics: bool,
    /// Read/write queue count of auto-created topics and the default of `create_topic`.
    pub default_queues: u32,
    /// Verify body CRCs while recovering.
    pub check_crc_on_recover: bool,
    /// Mode of created files.
    pub file_mode: u32,
    /// Mode of created directories.
    pub dir_mode: u32,
    /// Pre-fault the pages of new commit-log files (MAP_POPULATE) in the background. Off by
    /// default: the background warm-ahead faults in only the pages just in front of the
    /// writer, and on the machines measured (README figures) populating whole files cost more
    /// (writeback then write-protects pages the appender has yet to fill).
    pub warm_mapped_files: bool,
    /// How long commit-log files are kept before expiry deletes them (from the head only).
    pub file_reserved_time: Duration,
    /// Where the store reads wall-clock time (record store timestamps, retention age,
    /// checkpoint timestamps): the system clock unless a test sets a manual one.
    pub clock: Clock,
}

/// Default commit-log file size (32 MiB).
pub const DEFAULT_COMMIT_LOG_FILE_SIZE: u64 = 32 << 20;
/// Default consume-queue units per file.
pub const DEFAULT_CONSUME_QUEUE_UNITS: u64 = 50_000;
/// Default maximum body size (4 MiB, RocketMQ's `maxMessageSize`).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 << 20;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            read_only: false,
            lock_wait: None,
            flush_mode: FlushMode::Async,
            flush_interval: Duration::from_millis(500),
            sync_flush_timeout: Duration::from_millis(5000),
            commit_log_file_size: DEFAULT_COMMIT_LOG_FILE_SIZE,
            consume_queue_file_units: DEFAULT_CONSUME_QUEUE_UNITS,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            auto_create_topics: true,
            default_queues: 4,
            check_crc_on_recover: true,
            file_mode: 0o600,
            dir_mode: 0o700,
            warm_mapped_files: false,
            file_reserved_time: Duration::from_secs(72 * 3600),
            clock: Clock::system(),
        }
    }
}

/// Largest record a body of `max_body` bytes can produce (longest topic, fullest properties).
pub fn max_record_len(max_body: usize) -> usize {
    FIXED_V1_IPV4 + 1 + max_body + MAX_SYSTEM_TOPIC_LEN + MAX_PROPERTIES_LEN
}

impl StoreConfig {
    /// Checks every field; returns the first problem found.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, reason: String| Err(Error::InvalidConfig { field, reason });
        if !(64 << 10..=1 << 30).contains(&self.commit_log_file_size)
            || !self.commit_log_file_size.is_multiple_of(4096)
        {
            return bad(
                "commit_log_file_size",
                format!(
                    "{} is not a multiple of 4096 in [64 KiB, 1 GiB]",
                    self.commit_log_file_size
                ),
            );
        }
        if !(64..=10_000_000).contains(&self.consume_queue_file_units) {
            return bad(
                "consume_queue_file_units",
                format!(
                    "{} is outside [64, 10000000]",
                    self.consume_queue_file_units
                ),
            );
        }
        if self.max_message_size == 0 {
            return bad("max_message_size", "must be positive".into());
        }
        let need = max_record_len(self.max_message_size) as u64 + 8;
        if need > self.commit_log_file_size {
            return bad(
                "max_message_size",
                format!(
                    "{} bytes cannot fit a commit-log file of {} bytes (needs {need})",
                    self.max_message_size, self.commit_log_file_size
                ),
            );
        }
        if !(1..=MAX_QUEUES).contains(&self.default_queues) {
            return bad(
                "default_queues",
                format!("{} is outside [1, {MAX_QUEUES}]", self.default_queues),
            );
        }
        if self.flush_interval.is_zero() || self.flush_interval > Duration::from_secs(60) {
            return bad("flush_interval", "must be in (0, 60 s]".into());
        }
        if self.sync_flush_timeout.is_zero() {
            return bad("sync_flush_timeout", "must be positive".into());
        }
        if self.file_mode & !0o777 != 0 || self.dir_mode & !0o777 != 0 {
            return bad("file_mode", "permission bits only (0o000..=0o777)".into());
        }
        Ok(())
    }

    /// Consume-queue file size in bytes.
    pub fn consume_queue_file_size(&self) -> u64 {
        self.consume_queue_file_units * crate::consume_queue::unit::UNIT_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_limits_are_checked() {
        assert!(StoreConfig::default().validate().is_ok());
        let c = StoreConfig {
            commit_log_file_size: 1000,
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(Error::InvalidConfig {
                field: "commit_log_file_size",
                ..
            })
        ));
        let c = StoreConfig {
            commit_log_file_size: 1 << 20,
            ..Default::default()
        };
        assert!(matches!(
            c.validate(),
            Err(Error::InvalidConfig {
                field: "max_message_size",
                ..
            })
        ));
        let c = StoreConfig {
            default_queues: 0,
            ..Default::default()
        };
        assert!(c.validate().is_err());
    }
}
