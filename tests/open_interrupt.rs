//! `Store::open_interruptible`: the wait for another writer's lock asks the caller's hook
//! between attempts and ends with `Interrupted` once the hook says so, however long `lock_wait`
//! is; the store it waited for is untouched, and the lock is free again afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::small_config;
use mqlite::{Error, Store, StoreConfig};

#[test]
fn a_hook_ends_the_wait_for_the_writer_lock() {
    let dir = tempfile::tempdir().unwrap();
    // An exclusive holder: shared writers (the default) admit each other.
    let exclusive = StoreConfig {
        shared_writers: false,
        ..small_config()
    };
    let holder = Store::open(dir.path(), exclusive.clone()).unwrap();
    let waiting = StoreConfig {
        lock_wait: Some(Duration::from_secs(3600)),
        ..small_config()
    };
    let mut asked = 0;
    let result = Store::open_interruptible(dir.path(), waiting, &mut || {
        asked += 1;
        asked == 3
    });
    assert!(matches!(result, Err(Error::Interrupted)), "{result:?}");
    assert_eq!(
        asked, 3,
        "the hook is asked once per attempt until it says stop"
    );
    assert_eq!(Error::Interrupted.kind(), "INTERRUPTED");
    // The holder is unaffected, and once it closes the lock can be taken.
    assert!(!holder.is_closed());
    holder.close().unwrap();
    let again = Store::open_interruptible(dir.path(), small_config(), &mut || true).unwrap();
    again.close().unwrap();
}
