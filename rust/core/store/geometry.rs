//! The open step that decides a store's file geometry and message limit.
//!
//! Precedence: the store's `meta` file; for a store without one (written before the file
//! existed, or by Apache RocketMQ), what its files show; for what neither says (a new store, or
//! an empty directory), the option given, else the default. An option given explicitly that
//! differs from what the store records is `ConfigConflict`, before anything is written.
//!
//! A writer records a missing `meta` (`record`) once recovery has succeeded, just before the open
//! completes: an open that fails leaves the store without it, as it found it. The only files
//! sized by the geometry that exist before it are those the store already had and the
//! consume-queue files recovery re-dispatches into, from which the next open derives the same
//! sizes. A read-only open derives the geometry again each time and writes nothing.

use std::path::Path;

use crate::config::{StoreConfig, DEFAULT_COMMIT_LOG_FILE_SIZE, DEFAULT_CONSUME_QUEUE_UNITS};
use crate::error::{Error, Result};
use crate::store_meta::{self, Geometry, StoreMeta};

/// Appended to the created-by string of a `meta` recorded for an existing store.
const MEASURED: &str = " (sizes from files)";

/// What the open uses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decided {
    pub geometry: Geometry,
    pub max_message_size: usize,
    /// The store has no `meta` and the open is a writer's: `record` writes it.
    missing: bool,
    /// Some size came from the files of a store written without `meta`.
    measured: bool,
}

/// Decides the geometry of the store at `root` (`None`: in memory) for `config`. The caller
/// holds the writer lock when `writable`.
pub(super) fn decide(root: Option<&Path>, config: &StoreConfig, writable: bool) -> Result<Decided> {
    let mut missing = false;
    let mut measured = false;
    let (stored_size, stored_units) = match root {
        None => (None, None),
        Some(root) => match store_meta::read(root)? {
            Some(meta) => (
                Some(meta.geometry.commit_log_file_size),
                Some(meta.geometry.consume_queue_file_units),
            ),
            None => {
                missing = writable;
                let d = store_meta::derive(root)?;
                measured = d.commit_log_file_size.is_some() || d.consume_queue_file_units.is_some();
                (d.commit_log_file_size, d.consume_queue_file_units)
            }
        },
    };
    let geometry = Geometry {
        commit_log_file_size: pick(
            "commit_log_file_size",
            stored_size,
            config.commit_log_file_size,
            DEFAULT_COMMIT_LOG_FILE_SIZE,
        )?,
        consume_queue_file_units: pick(
            "consume_queue_file_units",
            stored_units,
            config.consume_queue_file_units,
            DEFAULT_CONSUME_QUEUE_UNITS,
        )?,
    };
    let max_message_size = config.max_message_size_for(geometry.commit_log_file_size)?;
    Ok(Decided {
        geometry,
        max_message_size,
        missing,
        measured,
    })
}

/// Checks, before a writer creates the directory of a new store, what `decide` will check once
/// it exists: a new store gets the sizes given or the defaults, so a message limit that does
/// not fit them is refused with nothing created.
pub(super) fn check_new(root: &Path, config: &StoreConfig) -> Result<()> {
    if crate::util::fs::entry_exists(root) {
        return Ok(());
    }
    config
        .max_message_size_for(
            config
                .commit_log_file_size
                .unwrap_or(DEFAULT_COMMIT_LOG_FILE_SIZE),
        )
        .map(drop)
}

/// Writes the `meta` file of a writer's store that has none; called once the open has succeeded.
pub(super) fn record(root: &Path, decided: &Decided, mode: u32) -> Result<()> {
    if decided.missing {
        let mut meta = StoreMeta::new(decided.geometry);
        if decided.measured {
            // Whatever created the store is unknown: say who measured its sizes.
            meta.created_by.push_str(MEASURED);
        }
        store_meta::write(root, &meta, mode)?;
    }
    Ok(())
}

/// The store's value, which a given one must equal; else the given one; else the default.
fn pick(field: &'static str, stored: Option<u64>, given: Option<u64>, default: u64) -> Result<u64> {
    match (stored, given) {
        (Some(stored), Some(given)) if stored != given => Err(Error::ConfigConflict {
            field,
            stored,
            given,
        }),
        (Some(v), _) | (None, Some(v)) => Ok(v),
        (None, None) => Ok(default),
    }
}
