//! Store configuration: one typed struct with validated defaults sized for an embedded library.
//!
//! Footprint of the defaults: commit-log files of 32 MiB (the next one is preallocated in the
//! background once the current one is half full) and consume-queue files of 50,000 units
//! (1,000,000 bytes) per queue, 4 queues per auto-created topic: a new store of a small app with
//! one topic costs about 36 MiB on disk.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::message::codec::FIXED_V1_IPV4;
use crate::message::delay_levels::DelayLevels;
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
    /// Open as one of any number of writer processes of the store (the default;
    /// docs/design-many-writers.md): the store's `lock` is held shared, appends take the
    /// append lock of the shared writer mapping `run/writer.shm` (FORMAT.md §14). `false`: an
    /// exclusive open, this process the store's only writer; it fails with `StoreLocked`
    /// while shared writers have the store open (or waits `lock_wait`), as a shared open does
    /// while an exclusive writer has it. Stores in memory and read-only opens have no other
    /// writer to share with: the field does not apply to them.
    pub shared_writers: bool,
    /// Durability mode.
    pub flush_mode: FlushMode,
    /// Interval of the async flush (and of consume-queue / checkpoint flushes in both modes).
    pub flush_interval: Duration,
    /// Sync mode: how long a put waits for the disk before reporting FLUSH_DISK_TIMEOUT.
    pub sync_flush_timeout: Duration,
    /// Size of each commit-log file in bytes. `None`: the size the store records (its `meta`
    /// file, or what its files show), or [`DEFAULT_COMMIT_LOG_FILE_SIZE`] for a new store. A
    /// value that differs from the store's is refused (`Error::ConfigConflict`).
    pub commit_log_file_size: Option<u64>,
    /// Units (20 bytes each) per consume-queue file; `None` as for `commit_log_file_size`, with
    /// [`DEFAULT_CONSUME_QUEUE_UNITS`] for a new store.
    pub consume_queue_file_units: Option<u64>,
    /// Largest accepted body in bytes. `None`: [`DEFAULT_MAX_MESSAGE_SIZE`], or the largest
    /// body a commit-log file holds when that is smaller (`max_message_size_for`).
    pub max_message_size: Option<usize>,
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
    /// writer, and populating whole files costs more, because writeback write-protects the
    /// populated pages the appender has yet to fill and each then faults again
    /// (docs/engineering-notes.md#zero-fill).
    pub warm_mapped_files: bool,
    /// How long commit-log files are kept before expiry deletes them (from the head only).
    pub file_reserved_time: Duration,
    /// How many idle files (commit-log and consume-queue files no reader or writer holds) the
    /// store keeps mapped, most recently used first; the rest are unmapped and mapped again on
    /// their next use. Files being written, and files with bytes not yet flushed, are mapped
    /// in addition. No mapping holds a file descriptor. 0 keeps only those.
    pub max_mapped_files: usize,
    /// Where the store reads wall-clock time (record store timestamps, retention age,
    /// checkpoint timestamps): the system clock unless a test sets a manual one.
    pub clock: Clock,
    /// The delay of each `DELAY` level (RocketMQ's `messageDelayLevel`, by default "1s 5s 10s
    /// 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"). A message is given its level's
    /// delay when it is put; a level outside the table is refused.
    pub delay_levels: DelayLevels,
    /// The longest a timer message (`TIMER_DELAY_SEC`, `TIMER_DELAY_MS`, `TIMER_DELIVER_MS`,
    /// `__STARTDELIVERTIME`) may wait: a later delivery time is refused (`InvalidMessage`),
    /// nothing written. 30 days by default; at most 100 years.
    pub timer_max_delay: Duration,
    /// How far ahead of the clock the timer engine keeps pending timers in memory (the near
    /// horizon; later ones stay in the timer log only). 60 s by default, in [1 s, 1 day].
    pub timer_window: Duration,
    /// Timers and delayed messages that were already overdue when this process began
    /// delivering (after downtime) are delivered at most this many per second, together; 0
    /// means no limit. Those that fall due while the engine runs are never limited. 10,000 by
    /// default.
    pub timer_catchup_rate: u32,
    /// While the file system holding the commit log is used above this fraction (used bytes
    /// over total, as `df` counts them), retention deletes the oldest commit-log files whatever
    /// their age, down to it, as RocketMQ's forced cleaning does
    /// (`diskSpaceCleanForciblyRatio`, 85 %). 0.85 by default, in (0, 1]; 1 never deletes by
    /// usage.
    pub disk_force_clean_ratio: f64,
    /// Whether writers build the key index (index/; FORMAT.md §21) that `Store::find_by_key`
    /// and lookups by unique id read. On by default. Off, nothing is indexed from then on
    /// and lookups by key fail with `IndexUnavailable`.
    pub index_enabled: bool,
    /// Hash slots of each new index file; a file holds 4 entries a slot (one entry per key
    /// of a message) and is `40 + 84 * slots` bytes. 100,000 by default (8.4 MB files,
    /// sparse until written; RocketMQ's 5,000,000 make 420 MB files, a broker's footprint),
    /// in [64, 5,000,000]. Files already written keep their size.
    pub index_hash_slots: u32,
}

/// Default commit-log file size (32 MiB).
pub const DEFAULT_COMMIT_LOG_FILE_SIZE: u64 = 32 << 20;
/// Default consume-queue units per file.
pub const DEFAULT_CONSUME_QUEUE_UNITS: u64 = 50_000;
/// Default of [`StoreConfig::max_mapped_files`].
pub const DEFAULT_MAPPED_FILES: usize = crate::mapped_file_queue::cache::DEFAULT_MAPPED_FILES;
/// Default of [`StoreConfig::index_hash_slots`]: 100,000 slots and 400,000 entries, 8.4 MB a
/// file (sparse until written). RocketMQ's 5,000,000 slots make 420 MB files, a broker's
/// footprint; an embedded store rolls to another file instead, and a lookup walks one chain
/// per file.
pub const DEFAULT_INDEX_HASH_SLOTS: u32 = 100_000;
/// Default maximum body size (4 MiB, RocketMQ's `maxMessageSize`).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 << 20;
/// Default `disk_force_clean_ratio`: RocketMQ's `diskSpaceCleanForciblyRatio`.
pub const DEFAULT_DISK_FORCE_CLEAN_RATIO: f64 = 0.85;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            read_only: false,
            lock_wait: None,
            shared_writers: true,
            flush_mode: FlushMode::Async,
            flush_interval: Duration::from_millis(500),
            sync_flush_timeout: Duration::from_millis(5000),
            commit_log_file_size: None,
            consume_queue_file_units: None,
            max_message_size: None,
            auto_create_topics: true,
            default_queues: 4,
            check_crc_on_recover: true,
            file_mode: 0o600,
            dir_mode: 0o700,
            warm_mapped_files: false,
            file_reserved_time: Duration::from_secs(72 * 3600),
            max_mapped_files: DEFAULT_MAPPED_FILES,
            clock: Clock::system(),
            delay_levels: DelayLevels::default(),
            timer_max_delay: Duration::from_secs(30 * 86_400),
            timer_window: Duration::from_secs(60),
            timer_catchup_rate: 10_000,
            disk_force_clean_ratio: DEFAULT_DISK_FORCE_CLEAN_RATIO,
            index_enabled: true,
            index_hash_slots: DEFAULT_INDEX_HASH_SLOTS,
        }
    }
}

/// Largest record a body of `max_body` bytes can produce (longest topic, fullest properties).
pub fn max_record_len(max_body: usize) -> usize {
    FIXED_V1_IPV4 + 1 + max_body + MAX_SYSTEM_TOPIC_LEN + MAX_PROPERTIES_LEN
}

/// Checks a commit-log file size: a multiple of 4096 in [64 KiB, 1 GiB].
pub fn check_commit_log_file_size(size: u64) -> std::result::Result<(), String> {
    if (64 << 10..=1 << 30).contains(&size) && size.is_multiple_of(4096) {
        Ok(())
    } else {
        Err(format!(
            "{size} is not a multiple of 4096 in [64 KiB, 1 GiB]"
        ))
    }
}

/// Checks a consume-queue file's unit count: in [64, 10,000,000].
pub fn check_consume_queue_file_units(units: u64) -> std::result::Result<(), String> {
    if (64..=10_000_000).contains(&units) {
        Ok(())
    } else {
        Err(format!("{units} is outside [64, 10000000]"))
    }
}

impl StoreConfig {
    /// Checks every field given; returns the first problem found. Whether `max_message_size`
    /// fits a commit-log file is checked once the store's file size is known
    /// (`max_message_size_for`).
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, reason: String| Err(Error::InvalidConfig { field, reason });
        if let Some(size) = self.commit_log_file_size {
            check_commit_log_file_size(size).or_else(|r| bad("commit_log_file_size", r))?;
        }
        if let Some(units) = self.consume_queue_file_units {
            check_consume_queue_file_units(units)
                .or_else(|r| bad("consume_queue_file_units", r))?;
        }
        if self.max_message_size == Some(0) {
            return bad("max_message_size", "must be positive".into());
        }
        if let (Some(max), Some(size)) = (self.max_message_size, self.commit_log_file_size) {
            check_message_fits(max, size).or_else(|r| bad("max_message_size", r))?;
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
        if self.timer_max_delay > Duration::from_secs(100 * 365 * 86_400) {
            return bad("timer_max_delay", "must be at most 100 years".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&self.timer_window) {
            return bad("timer_window", "must be in [1 s, 1 day]".into());
        }
        let ratio = self.disk_force_clean_ratio;
        if !(ratio > 0.0 && ratio <= 1.0) {
            return bad(
                "disk_force_clean_ratio",
                format!("{ratio} is outside (0, 1]"),
            );
        }
        if !(64..=5_000_000).contains(&self.index_hash_slots) {
            return bad(
                "index_hash_slots",
                format!("{} is outside [64, 5000000]", self.index_hash_slots),
            );
        }
        if self.file_mode & !0o777 != 0 || self.dir_mode & !0o777 != 0 {
            return bad("file_mode", "permission bits only (0o000..=0o777)".into());
        }
        Ok(())
    }

    /// The body-size limit for a store of commit-log files of `commit_log_file_size` bytes:
    /// the value given, which must fit a file (`InvalidConfig`), else the default or, when a
    /// file cannot hold a default-sized record, the largest body one can hold.
    pub fn max_message_size_for(&self, commit_log_file_size: u64) -> Result<usize> {
        match self.max_message_size {
            Some(max) => {
                check_message_fits(max, commit_log_file_size).map_err(|reason| {
                    Error::InvalidConfig {
                        field: "max_message_size",
                        reason,
                    }
                })?;
                Ok(max)
            }
            None => {
                let room = usize::try_from(commit_log_file_size)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(max_record_len(0) + 8);
                Ok(DEFAULT_MAX_MESSAGE_SIZE.min(room).max(1))
            }
        }
    }
}

/// A body of `max` bytes must leave room, at its longest (longest topic, fullest properties),
/// for the 8-byte END_OF_FILE marker in a file of `file_size` bytes.
fn check_message_fits(max: usize, file_size: u64) -> std::result::Result<(), String> {
    let need = max_record_len(max) as u64 + 8;
    if need > file_size {
        return Err(format!(
            "{max} bytes cannot fit a commit-log file of {file_size} bytes (needs {need})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_limits_are_checked() {
        assert!(StoreConfig::default().validate().is_ok());
        let c = StoreConfig {
            commit_log_file_size: Some(1000),
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
            commit_log_file_size: Some(1 << 20),
            max_message_size: Some(DEFAULT_MAX_MESSAGE_SIZE),
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

    #[test]
    fn an_unset_message_limit_fits_the_file_size() {
        let c = StoreConfig::default();
        assert_eq!(
            c.max_message_size_for(DEFAULT_COMMIT_LOG_FILE_SIZE)
                .unwrap(),
            DEFAULT_MAX_MESSAGE_SIZE
        );
        let fitted = c.max_message_size_for(64 << 10).unwrap();
        assert_eq!(max_record_len(fitted) + 8, 64 << 10);
        let c = StoreConfig {
            max_message_size: Some(fitted + 1),
            ..Default::default()
        };
        assert!(matches!(
            c.max_message_size_for(64 << 10),
            Err(Error::InvalidConfig {
                field: "max_message_size",
                ..
            })
        ));
    }
}
