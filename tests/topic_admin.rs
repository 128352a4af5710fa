//! Topic administration in one process: changing a topic's settings one at a time, deleting a
//! topic, and a topic created again under a deleted one's name (its `since` offset).
//!
//! - `update_topic_settings` changes only what it is given; read queues never shrink and
//!   write queues never outnumber them, and a refused change writes nothing.
//! - A deleted topic is gone from the table (durably: a reopen agrees) and refuses sends.
//! - A topic created again never shows the deleted one's messages, whatever offset is asked,
//!   also when those spanned several consume-queue files, and also after a reopen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::small_config;
use mqlite::topic_config::SINCE_ATTRIBUTE;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter, TopicUpdate};

fn bodies(store: &Store, topic: &str, queue: u32, from: u64) -> Vec<String> {
    let got = store
        .get_messages(topic, queue, from, 1024, &TagFilter::all())
        .unwrap();
    got.iter()
        .map(|v| String::from_utf8_lossy(v.body()).into_owned())
        .collect()
}

#[test]
fn update_changes_only_the_settings_given_and_refuses_what_would_lose_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    store.create_topic("T", 4, 6, false, true).unwrap();
    let c = store
        .update_topic_settings(
            "T",
            TopicUpdate {
                write_queues: Some(2),
                ..TopicUpdate::default()
            },
        )
        .unwrap();
    assert_eq!((c.read_queue_nums, c.write_queue_nums, c.perm), (4, 2, 6));
    let c = store
        .update_topic_settings(
            "T",
            TopicUpdate {
                perm: Some(4),
                order: Some(true),
                ..TopicUpdate::default()
            },
        )
        .unwrap();
    assert_eq!(
        (c.read_queue_nums, c.write_queue_nums, c.perm, c.order),
        (4, 2, 4, true)
    );
    assert!(matches!(
        store.put(&MessageRef::new("T", 0, b"x")),
        Err(Error::TopicNotWritable { .. })
    ));
    let refused = [
        TopicUpdate {
            read_queues: Some(3),
            ..TopicUpdate::default()
        },
        TopicUpdate {
            write_queues: Some(5),
            ..TopicUpdate::default()
        },
        TopicUpdate {
            read_queues: Some(0),
            ..TopicUpdate::default()
        },
        TopicUpdate {
            perm: Some(8),
            ..TopicUpdate::default()
        },
    ];
    for update in refused {
        let e = store.update_topic_settings("T", update).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { .. }),
            "{update:?}: {e}"
        );
    }
    assert!(matches!(
        store.update_topic_settings("Nope", TopicUpdate::default()),
        Err(Error::TopicNotFound { .. })
    ));
    // A table holding more write than read queues (written by another tool) keeps them when
    // only the permission changes.
    store.create_topic("Odd", 2, 6, false, true).unwrap();
    store.close().unwrap();
    let json = dir.path().join("config").join("topics.json");
    let text = std::fs::read_to_string(&json).unwrap();
    let odd = text.replacen("\"writeQueueNums\": 2", "\"writeQueueNums\": 3", 1);
    assert_ne!(odd, text);
    std::fs::write(&json, odd).unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let c = store
        .update_topic_settings(
            "Odd",
            TopicUpdate {
                perm: Some(6),
                ..TopicUpdate::default()
            },
        )
        .unwrap();
    assert_eq!((c.read_queue_nums, c.write_queue_nums), (2, 3));
    // Nothing refused was written, here or on disk.
    store.close().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let c = store.topic("T").unwrap().unwrap();
    assert_eq!(
        (c.read_queue_nums, c.write_queue_nums, c.perm, c.order),
        (4, 2, 4, true)
    );
}

/// No topic is created by a send: a send to a deleted topic is refused.
fn explicit_topics() -> StoreConfig {
    StoreConfig {
        auto_create_topics: false,
        ..small_config()
    }
}

#[test]
fn a_topic_created_again_after_a_delete_never_shows_the_old_messages() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, explicit_topics()).unwrap();
    store.create_topic("Other", 1, 6, false, true).unwrap();
    store.create_topic("T", 2, 6, false, true).unwrap();
    // More old messages in queue 0 than one consume-queue file holds (64 units).
    for i in 0..150 {
        store
            .put(&MessageRef::new("T", 0, format!("old{i}").as_bytes()))
            .unwrap();
    }
    store.put(&MessageRef::new("T", 1, b"old-q1")).unwrap();
    store.put(&MessageRef::new("Other", 0, b"kept")).unwrap();

    store.delete_topic("T").unwrap();
    assert!(store.topic("T").unwrap().is_none());
    assert!(matches!(
        store.put(&MessageRef::new("T", 0, b"x")),
        Err(Error::TopicNotFound { .. })
    ));
    assert!(matches!(
        store.delete_topic("T"),
        Err(Error::TopicNotFound { .. })
    ));
    assert!(matches!(
        store.delete_topic("SCHEDULE_TOPIC_XXXX"),
        Err(Error::InvalidTopic { .. })
    ));

    let end = store.commit_log_range().1;
    store.create_topic("T", 2, 6, false, true).unwrap();
    let c = store.topic("T").unwrap().unwrap();
    assert_eq!(c.since_offset(), end);
    assert_eq!(c.attributes[SINCE_ATTRIBUTE], end.to_string());
    assert_eq!(store.topic_since_offset("T").unwrap(), end);
    assert_eq!(store.topic_since_offset("Other").unwrap(), 0);
    store.put(&MessageRef::new("T", 0, b"new")).unwrap();

    for (queue, old) in [(0u32, 150u64), (1, 1)] {
        assert_eq!(store.queue_offsets("T", queue).unwrap().0, old);
        // From offset 0 the read is turned to the new incarnation's start.
        let r = store
            .get_messages("T", queue, 0, 1024, &TagFilter::all())
            .unwrap();
        assert_eq!(r.status, mqlite::GetStatus::OffsetTooSmall);
        assert_eq!(r.next_offset, old);
    }
    assert_eq!(bodies(&store, "T", 0, 150), ["new"]);
    assert_eq!(bodies(&store, "Other", 0, 0), ["kept"]);

    // A reopen keeps both the deletion and the new start.
    store.close().unwrap();
    let store = Store::open(root, explicit_topics()).unwrap();
    assert_eq!(store.queue_offsets("T", 0).unwrap(), (150, 151));
    assert_eq!(bodies(&store, "T", 0, 150), ["new"]);
    assert_eq!(store.queue_offsets("T", 1).unwrap(), (1, 1));
    store.close().unwrap();
    // A read-only open reads it from the table.
    let ro = StoreConfig {
        read_only: true,
        ..small_config()
    };
    let follower = Store::open(root, ro).unwrap();
    assert_eq!(follower.topic_since_offset("T").unwrap(), end);
    assert_eq!(follower.queue_offsets("T", 0).unwrap(), (150, 151));
}

#[test]
fn a_topic_created_in_an_empty_store_records_no_since_offset() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    store.create_topic("T", 1, 6, false, true).unwrap();
    let c = store.topic("T").unwrap().unwrap();
    assert_eq!(c.since_offset(), 0);
    assert!(c.attributes.is_empty());
}
