//! Topic names never become paths outside the store: a name that breaks the topic rule is
//! `InvalidTopic` at every read entry point (a read-only follower included, which looks for
//! queues on disk), and a `topics.json` naming one is not loaded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

const OUTSIDE: &str = "../../planted";

/// A store with one message in `t` queue 0, and a copy of that queue's directory planted where
/// `consumequeue/../../planted/0` leads (next to the store directory).
fn store_with_planted_queue(base: &Path) -> std::path::PathBuf {
    let root = base.join("store");
    {
        let store = Store::open(&root, common::small_config()).unwrap();
        store.put(&MessageRef::new("t", 0, b"secret")).unwrap();
        common::settle(&store);
        store.close().unwrap();
    }
    let planted = base.join("planted").join("0");
    std::fs::create_dir_all(&planted).unwrap();
    for f in std::fs::read_dir(common::cq_dir(&root, "t", 0)).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), planted.join(f.file_name())).unwrap();
    }
    root
}

fn assert_invalid_topic<T: std::fmt::Debug>(r: mqlite::Result<T>, what: &str) {
    assert!(
        matches!(r, Err(Error::InvalidTopic { .. })),
        "{what}: {r:?}"
    );
}

#[test]
fn a_follower_refuses_a_topic_that_leads_outside_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = store_with_planted_queue(dir.path());
    let config = StoreConfig {
        read_only: true,
        ..common::small_config()
    };
    let reader = Store::open(&root, config).unwrap();
    assert_eq!(common::read_queue(&reader, "t", 0).len(), 1);
    let all = TagFilter::all();
    assert_invalid_topic(reader.get_messages(OUTSIDE, 0, 0, 32, &all), "get_messages");
    assert_invalid_topic(reader.queue_offsets(OUTSIDE, 0), "queue_offsets");
    assert_invalid_topic(
        reader.offset_for_timestamp(OUTSIDE, 0, 0),
        "offset_for_timestamp",
    );
    assert_invalid_topic(
        reader.wait_for_messages(&[(OUTSIDE, 0, 0)], Some(Duration::ZERO)),
        "wait_for_messages",
    );
    assert_invalid_topic(reader.topic(OUTSIDE), "topic");
}

#[test]
fn a_writer_refuses_bad_names_at_every_read_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store"), common::small_config()).unwrap();
    for bad in ["", "..", "../x", "/abs", "a/b", "a.b", &"a".repeat(128)] {
        let all = TagFilter::all();
        assert_invalid_topic(store.get_messages(bad, 0, 0, 1, &all), bad);
        assert_invalid_topic(store.queue_offsets(bad, 0), bad);
        assert_invalid_topic(store.offset_for_timestamp(bad, 0, 0), bad);
        assert_invalid_topic(store.topic(bad), bad);
    }
    // An unknown but valid name is simply empty.
    assert_eq!(store.queue_offsets("unknown", 0).unwrap(), (0, 0));
    assert!(store.topic("unknown").unwrap().is_none());
}

/// A closed store at `root` with topic "t", and its `topics.json` with an entry named
/// "../../evil" added (not written).
fn topics_json_naming_a_path_outside(root: &std::path::Path) -> Vec<u8> {
    let store = Store::open(root, common::small_config()).unwrap();
    store.create_topic("t", 1, 6, false, true).unwrap();
    store.close().unwrap();
    let path = root.join("config").join("topics.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut evil = json["topicConfigTable"]["t"].clone();
    evil["topicName"] = "../../evil".into();
    json["topicConfigTable"]["../../evil"] = evil;
    serde_json::to_vec(&json).unwrap()
}

#[test]
fn a_topics_json_naming_a_path_outside_the_store_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let config = common::small_config();
    // The current file gains an entry "../../evil"; the `.bak` (the previous version) is clean.
    let bad = topics_json_naming_a_path_outside(&root);
    std::fs::write(root.join("config").join("topics.json"), bad).unwrap();
    std::fs::write(
        root.join("config").join("topics.json.bak"),
        serde_json::to_vec(&serde_json::json!({"topicConfigTable": {}})).unwrap(),
    )
    .unwrap();

    let store = Store::open(&root, config).unwrap();
    assert!(
        store.topics().unwrap().is_empty(),
        "the file naming ../../evil was loaded"
    );
    let sent = store.put(&MessageRef::new("../../evil", 0, b"x"));
    assert!(matches!(sent, Err(Error::InvalidTopic { .. })), "{sent:?}");
    store.close().unwrap();
    assert!(!dir.path().join("evil").exists());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["store"]);
}

#[test]
fn a_topics_json_naming_a_path_outside_the_store_without_a_usable_bak_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let config = common::small_config();
    let path = root.join("config").join("topics.json");
    let bak = root.join("config").join("topics.json.bak");
    let bad = topics_json_naming_a_path_outside(&root);
    std::fs::write(&path, &bad).unwrap();

    // No `.bak`, then a `.bak` with the same entry: the table is unreadable, never empty.
    for bak_content in [None, Some(&bad)] {
        match bak_content {
            None => std::fs::remove_file(&bak).unwrap_or(()),
            Some(b) => std::fs::write(&bak, b).unwrap(),
        }
        match Store::open(&root, config.clone()) {
            Err(Error::ConfigFile { path: p, field, .. }) => {
                assert_eq!((p, field.as_str()), (path.clone(), "topicConfigTable"));
            }
            Err(e) => panic!("expected ConfigFile, got {e:?}"),
            Ok(_) => panic!("the store opened: the file naming ../../evil was taken as a table"),
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bad,
            "topics.json was rewritten"
        );
    }
    assert!(!dir.path().join("evil").exists());
}
