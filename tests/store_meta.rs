//! The `meta` file (FORMAT.md §11): a store opens from its path alone, read-only included, and
//! a file size given that differs from the store's is refused before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use mqlite::{Error, MessageRef, Store, StoreConfig};

/// A store of `common::small_config()` sizes (not the defaults) with 50 messages in `t`/0,
/// closed.
fn small_store(root: &Path) {
    let store = Store::open(root, common::small_config()).unwrap();
    store.create_topic("t", 1, 6, false, false).unwrap();
    for i in 0..50 {
        store
            .put(&MessageRef::new("t", 0, &common::body(i)))
            .unwrap();
    }
    store.close().unwrap();
}

/// The error opening `root` fails with, with the default options changed by `set`.
fn open_err(root: &Path, set: impl FnOnce(&mut StoreConfig)) -> Error {
    let mut config = StoreConfig::default();
    set(&mut config);
    Store::open(root, config).expect_err("the store opened")
}

fn listing(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let name = p.strip_prefix(root).unwrap().display().to_string();
                out.push((name, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_read_only_open_with_default_options_reads_a_store_of_other_sizes() {
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    let reader = Store::open(
        dir.path(),
        StoreConfig {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let got = common::read_queue(&reader, "t", 0);
    assert_eq!(got.len(), 50);
    assert_eq!(got[49], (49, common::body(49)));
}

#[test]
fn a_size_given_that_differs_from_the_stores_is_a_conflict_that_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    let stored = common::small_config().commit_log_file_size.unwrap();
    let before = listing(dir.path());
    for read_only in [false, true] {
        let err = open_err(dir.path(), |c| {
            c.read_only = read_only;
            c.commit_log_file_size = Some(1 << 20);
        });
        match err {
            Error::ConfigConflict {
                field,
                stored: s,
                given,
            } => assert_eq!((field, s, given), ("commit_log_file_size", stored, 1 << 20)),
            other => panic!("{other:?}"),
        }
        assert_eq!(listing(dir.path()), before, "read_only={read_only}");
    }
    let err = open_err(dir.path(), |c| c.consume_queue_file_units = Some(100));
    assert!(
        matches!(
            err,
            Error::ConfigConflict {
                field: "consume_queue_file_units",
                stored: 64,
                given: 100
            }
        ),
        "{err:?}"
    );
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn a_writer_records_what_the_files_of_a_store_without_meta_show() {
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    let meta = dir.path().join("meta");
    let recorded = std::fs::read(&meta).unwrap();
    std::fs::remove_file(&meta).unwrap();
    let ro = StoreConfig {
        read_only: true,
        ..Default::default()
    };
    let reader = Store::open(dir.path(), ro.clone()).unwrap();
    assert_eq!(
        reader.geometry().commit_log_file_size,
        common::small_config().commit_log_file_size.unwrap()
    );
    assert_eq!(common::read_queue(&reader, "t", 0).len(), 50);
    drop(reader);
    assert!(!meta.exists(), "a read-only open wrote meta");
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    assert_eq!(store.geometry().consume_queue_file_units, 64);
    store.close().unwrap();
    // The sizes the store's creation recorded; created-by says they were measured.
    let got = std::fs::read(&meta).unwrap();
    assert_eq!(got[..24], recorded[..24]);
    let meta = mqlite::store_meta::read(dir.path()).unwrap().unwrap();
    assert!(meta.created_by.ends_with(" (sizes from files)"), "{meta:?}");
}

#[test]
fn an_unset_message_limit_fits_a_small_file_and_a_given_one_must_fit() {
    let dir = tempfile::tempdir().unwrap();
    // A limit too large for the default file size: refused before the directory is made.
    let new = dir.path().join("new");
    let err = open_err(&new, |c| c.max_message_size = Some(32 << 20));
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    assert!(!new.exists());
    let store = Store::open(
        dir.path(),
        StoreConfig {
            commit_log_file_size: Some(64 << 10),
            ..Default::default()
        },
    )
    .unwrap();
    let limit = store.max_message_size();
    assert_eq!(mqlite::config::max_record_len(limit) + 8, 64 << 10);
    store.close().unwrap();
    // Reopened without sizes, a limit that only the default file size holds is refused.
    let err = open_err(dir.path(), |c| c.max_message_size = Some(1 << 20));
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "max_message_size",
                ..
            }
        ),
        "{err:?}"
    );
}
