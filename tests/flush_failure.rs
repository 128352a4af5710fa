//! A failed flush poisons the store: the send whose flush failed is not acknowledged, every
//! later send fails, reads keep working, and a reopen (the disk healthy again) recovers.
//! Needs `--features fault-injection` (`mqlite::testing` makes msync fail with EIO).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use mqlite::{Error, FlushMode, MessageRef, Store, StoreConfig, TagFilter};

fn config(mode: FlushMode) -> StoreConfig {
    StoreConfig {
        flush_mode: mode,
        ..common::small_config()
    }
}

fn body(i: u8) -> Vec<u8> {
    vec![i; 64]
}

// One test function: the fault switch is process-wide, so the scenarios must not overlap.
#[test]
fn failed_flush_poisons_the_writer_and_nothing_is_acknowledged_after_it() {
    // Sync mode: the send waiting for the failed flush gets an error, not SEND_OK.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(FlushMode::Sync)).unwrap();
    let ok = store.put(&MessageRef::new("F", 0, &body(1))).unwrap();
    assert_eq!(ok.status, mqlite::PutStatus::PutOk);
    mqlite::testing::fail_flushes_after(Some(0));
    let failed = store.put(&MessageRef::new("F", 0, &body(2)));
    assert!(matches!(failed, Err(Error::Poisoned { .. })), "{failed:?}");
    let later = store.put(&MessageRef::new("F", 0, &body(3)));
    assert!(matches!(later, Err(Error::Poisoned { .. })), "{later:?}");
    let batch = store.put_batch(&[MessageRef::new("F", 0, &body(4))], &mut Vec::new());
    assert!(matches!(batch, Err(Error::Poisoned { .. })), "{batch:?}");
    // Reads keep working.
    let got = store.get_messages("F", 0, 0, 8, &TagFilter::all()).unwrap();
    assert_eq!(got.iter().next().unwrap().body(), body(1).as_slice());
    let _ = store.close(); // the final flush fails too; the abort marker stays
    mqlite::testing::fail_flushes_after(None);
    let store = Store::open(dir.path(), config(FlushMode::Sync)).unwrap();
    assert!(store.recovery_report().abnormal);
    let got = store.get_messages("F", 0, 0, 8, &TagFilter::all()).unwrap();
    let bodies: Vec<Vec<u8>> = got.iter().map(|v| v.body().to_vec()).collect();
    assert_eq!(
        bodies.first(),
        Some(&body(1)),
        "the acknowledged message survives"
    );
    // Only the unacknowledged message may also be there (it reached the page cache); the
    // sends refused after the poison never wrote anything.
    assert!(
        bodies.len() <= 2 && bodies.get(1).is_none_or(|b| *b == body(2)),
        "{bodies:?}"
    );
    let again = store.put(&MessageRef::new("F", 0, &body(5))).unwrap();
    assert_eq!(again.status, mqlite::PutStatus::PutOk);
    store.close().unwrap();

    // Async mode: the flush thread's failure poisons the store for every later send.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config(FlushMode::Async)).unwrap();
    store.put(&MessageRef::new("F", 0, &body(1))).unwrap();
    mqlite::testing::fail_flushes_after(Some(0));
    let flushed = store.flush();
    assert!(
        matches!(flushed, Err(Error::Io { op: "msync", .. })),
        "{flushed:?}"
    );
    let later = store.put(&MessageRef::new("F", 0, &body(2)));
    assert!(matches!(later, Err(Error::Poisoned { .. })), "{later:?}");
    // The poison keeps the failed flush's own error, EIO included.
    let cause = later.as_ref().err().and_then(std::error::Error::source);
    assert!(
        matches!(cause.and_then(|c| c.downcast_ref::<Error>()),
            Some(Error::Io { op: "msync", source, .. }) if source.raw_os_error() == Some(libc::EIO)),
        "{cause:?}"
    );
    mqlite::testing::fail_flushes_after(None);
    let still = store.put(&MessageRef::new("F", 0, &body(3)));
    assert!(
        matches!(still, Err(Error::Poisoned { .. })),
        "poison lasts until reopen: {still:?}"
    );
    let _ = store.close();
    let store = Store::open(dir.path(), config(FlushMode::Async)).unwrap();
    store.put(&MessageRef::new("F", 0, &body(4))).unwrap();
    store.close().unwrap();
}
