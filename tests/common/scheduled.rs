//! Helpers of the scheduled-delivery tests (delay levels, timers, retries): a store on a
//! manual clock, what a queue holds, and commit-log files to test retention against.

use mqlite::util::clock::ManualClock;
use mqlite::{MessageRef, Store, StoreConfig, TagFilter};

use super::small_config;

/// The manual clock's start: a fixed time, so delivery times in the tests are exact.
pub const T0: i64 = 1_700_000_000_000;

/// `small_config` reading time from `clock`.
pub fn clocked_config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        clock: clock.clone().into(),
        ..small_config()
    }
}

/// Bodies of `topic`/`queue` in queue order (up to 10,000).
pub fn bodies(store: &Store, topic: &str, queue: u32) -> Vec<Vec<u8>> {
    let got = store
        .get_messages(topic, queue, 0, 10_000, &TagFilter::all())
        .unwrap();
    got.iter().map(|v| v.body().to_vec()).collect()
}

/// Fills several commit-log files of `small_config` (40 records of 16 KiB to topic `F`) and
/// flushes, so retention has whole files to consider.
pub fn fill_files(store: &Store) {
    let filler = vec![7u8; 16 << 10];
    for _ in 0..40 {
        store.put(&MessageRef::new("F", 0, &filler)).unwrap();
    }
    store.flush().unwrap();
}

/// Number of commit-log files of the store at `root`.
pub fn commit_log_files(root: &std::path::Path) -> usize {
    std::fs::read_dir(root.join("commitlog")).unwrap().count()
}
