//! Retry and dead letters (store/retry/): a sent-back message waits its delay level in
//! `SCHEDULE_TOPIC_XXXX`, then lands in `%RETRY%<group>` with RocketMQ's properties and the
//! consumer's error; past the maximum it goes straight to `%DLQ%<group>`. On a manual clock,
//! delivered with `deliver_due`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use mqlite::message::properties;
use mqlite::store::retry::{NextDelay, SendBack};
use mqlite::util::clock::ManualClock;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

use common::small_config;

const T0: i64 = 1_700_000_000_000;

fn open(dir: &std::path::Path, clock: &ManualClock) -> Store {
    Store::open(
        dir,
        StoreConfig {
            clock: clock.clone().into(),
            ..small_config()
        },
    )
    .unwrap()
}

/// Commit-log offset, body, reconsume count and properties of a stored message.
type Record = (u64, Vec<u8>, i32, Vec<(String, String)>);

/// Each message of `topic`/0.
fn records(store: &Store, topic: &str) -> Vec<Record> {
    let got = store
        .get_messages(topic, 0, 0, 1000, &TagFilter::all())
        .unwrap();
    got.iter()
        .map(|v| {
            (
                v.physical_offset(),
                v.body().to_vec(),
                v.reconsume_times(),
                v.property_pairs(),
            )
        })
        .collect()
}

fn prop<'a>(props: &'a [(String, String)], name: &str) -> Option<&'a str> {
    props
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn back(group: &str, offset: u64, delay: NextDelay, max: u32) -> SendBack<'_> {
    SendBack {
        group,
        commit_log_offset: offset,
        delay,
        max_reconsume_times: max,
        error: Some(("ValueError", "bad \u{1}input")),
    }
}

#[test]
fn a_failed_message_returns_on_the_retry_topic_after_its_level_then_goes_to_the_dlq() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    store.create_topic("T", 1, 6, false, false).unwrap();
    let props = properties::encode([("TAGS", "A"), ("KEYS", "k1"), ("UNIQ_KEY", "ID1")]);
    let put = store
        .put(&MessageRef::new("T", 0, b"body").with_properties(&props))
        .unwrap();

    let sent = store
        .send_back(&back("G", put.appended.physical_offset, NextDelay::Auto, 2))
        .unwrap();
    assert_eq!(
        (
            sent.topic.as_str(),
            sent.dead,
            sent.reconsume_times,
            sent.delay_level
        ),
        ("%RETRY%G", false, 1, 3)
    );
    assert!(sent.put.scheduled, "a retry waits in the schedule topic");
    // Level 3 is 10 s: nothing in the retry topic before.
    store.deliver_due().unwrap();
    assert!(store.topic("%RETRY%G").unwrap().is_none());
    clock.advance(Duration::from_secs(10));
    store.deliver_due().unwrap();
    let retry = records(&store, "%RETRY%G");
    assert_eq!(retry.len(), 1);
    let (offset, body, times, props) = &retry[0];
    assert_eq!((body.as_slice(), *times), (&b"body"[..], 1));
    assert_eq!(prop(props, "RETRY_TOPIC"), Some("T"));
    assert_eq!(prop(props, "ORIGIN_MESSAGE_ID"), Some("ID1"));
    assert_eq!(prop(props, "KEYS"), Some("k1"));
    assert_eq!(prop(props, "UNIQ_KEY"), Some("ID1"));
    assert_eq!(prop(props, properties::ERROR_TYPE), Some("ValueError"));
    assert_eq!(prop(props, properties::ERROR), Some("bad  input"));
    assert_eq!(prop(props, properties::SEND_BACK), None);
    assert_eq!(prop(props, "DELAY"), None);
    assert!(
        records(&store, "T").len() == 1,
        "the origin topic holds only the original"
    );

    // Second failure: reconsume count 1 -> level 4 (30 s).
    let sent = store
        .send_back(&back("G", *offset, NextDelay::Auto, 2))
        .unwrap();
    assert_eq!((sent.reconsume_times, sent.delay_level), (2, 4));
    clock.advance(Duration::from_secs(30));
    store.deliver_due().unwrap();
    let retry = records(&store, "%RETRY%G");
    assert_eq!(retry.len(), 2);
    let (offset, _, times, props) = &retry[1];
    assert_eq!(*times, 2);
    assert_eq!(
        prop(props, "RETRY_TOPIC"),
        Some("T"),
        "kept from the first retry"
    );
    assert_eq!(prop(props, "ORIGIN_MESSAGE_ID"), Some("ID1"));

    // Third failure: reconsume count 2 reached the maximum: straight to the DLQ, no delay.
    let sent = store
        .send_back(&back("G", *offset, NextDelay::Auto, 2))
        .unwrap();
    assert_eq!(
        (sent.topic.as_str(), sent.dead, sent.delay_level),
        ("%DLQ%G", true, 0)
    );
    assert!(!sent.put.scheduled);
    let dlq = records(&store, "%DLQ%G");
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].2, 3);
    assert_eq!(prop(&dlq[0].3, "RETRY_TOPIC"), Some("T"));
    assert_eq!(records(&store, "%RETRY%G").len(), 2);
}

#[test]
fn an_empty_or_odd_error_is_stored_as_far_as_a_property_can_hold_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    let put = store.put(&MessageRef::new("T", 0, b"x")).unwrap();
    let mut req = back("G", put.appended.physical_offset, NextDelay::DeadLetter, 16);
    req.error = Some(("", "nul\u{0}here"));
    store.send_back(&req).unwrap();
    let dlq = records(&store, "%DLQ%G");
    assert_eq!(prop(&dlq[0].3, properties::ERROR_TYPE), None);
    assert_eq!(prop(&dlq[0].3, properties::ERROR), Some("nul here"));
}

#[test]
fn a_consumer_chooses_the_level_or_the_dlq_and_bad_requests_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = open(dir.path(), &clock);
    let put = store.put(&MessageRef::new("T", 0, b"x")).unwrap();
    let at = put.appended.physical_offset;
    let end = store.commit_log_range().1;

    for bad in [
        back("G", at, NextDelay::Level(19), 16),
        back("bad/group", at, NextDelay::Auto, 16),
        back("G", at + 1, NextDelay::Auto, 16),
    ] {
        assert!(store.send_back(&bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        store.commit_log_range().1,
        end,
        "refused send-backs write nothing"
    );

    let sent = store
        .send_back(&back("G", at, NextDelay::Level(1), 16))
        .unwrap();
    assert_eq!(sent.delay_level, 1);
    let sent = store
        .send_back(&back("G", at, NextDelay::DeadLetter, 16))
        .unwrap();
    assert!(sent.dead);
    assert_eq!(records(&store, "%DLQ%G").len(), 1);
    // Another group's retry cannot be sent back by this group.
    let dlq_at = records(&store, "%DLQ%G")[0].0;
    assert!(matches!(
        store.send_back(&back("H", dlq_at, NextDelay::Auto, 16)),
        Err(Error::InvalidArgument { .. })
    ));
}
