//! Scheduled delivery by delay level (store/schedule/, delivered by the timer engine,
//! store/timer/): a message with a `DELAY` level is stored in `SCHEDULE_TOPIC_XXXX` and
//! delivered to its real topic once the store's clock reads its delivery time, exactly once. Every test runs on a manual clock and delivers with `deliver_due`, so
//! nothing waits on time. The store's own timer-engine thread sees the same clock and may
//! deliver first, so the tests assert what the topics hold, never how many one call delivered.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use mqlite::message::delay_levels::DelayLevels;
use mqlite::message::{properties, tags};
use mqlite::store::schedule::offsets;
use mqlite::util::clock::ManualClock;
use mqlite::{Error, MessageRef, PutRequest, RecordView, Routing, Store, StoreConfig, TagFilter};

use common::scheduled::{bodies, clocked_config, commit_log_files, fill_files, T0};

const SCHEDULE: &str = tags::SCHEDULE_TOPIC;

/// The exclusive writer: its delivery thread sleeps until the next due time by the system's
/// pace, so the passes the tests run (`deliver_due`) after moving the manual clock are the ones
/// that deliver.
fn config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        shared_writers: false,
        ..clocked_config(clock)
    }
}

fn delayed<'a>(topic: &'a str, queue: u32, body: &'a [u8], props: &'a [u8]) -> MessageRef<'a> {
    let mut m = MessageRef::new(topic, queue, body).with_properties(props);
    m.born_timestamp = T0 - 5;
    m
}

fn level(n: u32) -> Vec<u8> {
    properties::encode([("DELAY", n.to_string().as_str())])
}

#[test]
fn a_delayed_message_is_invisible_until_due_then_delivered_once_as_it_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 2, 6, false, false).unwrap();
    let props = properties::encode([
        ("TAGS", "A"),
        ("KEYS", "k1 k2"),
        ("UNIQ_KEY", "ID1"),
        ("p", "v"),
        ("DELAY", "3"),
    ]);
    let mut msg = delayed("T", 1, b"later", &props);
    msg.flag = 7;
    let put = store.put(&msg).unwrap();
    assert_eq!((put.queue_id, put.scheduled), (1, true));
    assert_eq!(
        bodies(&store, SCHEDULE, 2),
        [b"later"],
        "level 3 is queue 2"
    );
    assert!(bodies(&store, "T", 1).is_empty());

    // Level 3 is 10 s: not at 9.999 s, at 10 s.
    store.deliver_due().unwrap();
    clock.advance(Duration::from_millis(9_999));
    store.deliver_due().unwrap();
    assert!(bodies(&store, "T", 1).is_empty(), "never early");
    clock.advance(Duration::from_millis(1));
    store.deliver_due().unwrap();
    store.deliver_due().unwrap();

    let got = store
        .get_messages("T", 1, 0, 10, &TagFilter::parse("A"))
        .unwrap();
    let copies: Vec<RecordView<'_>> = got.iter().collect();
    assert_eq!(copies.len(), 1, "delivered once, found by its tag");
    let v = &copies[0];
    assert_eq!(v.body(), b"later");
    assert_eq!(v.flag(), 7);
    assert_eq!(v.born_timestamp(), T0 - 5);
    assert_eq!(v.store_timestamp(), T0 + 10_000);
    let p = properties::decode(v.properties());
    let names: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "TAGS",
            "KEYS",
            "UNIQ_KEY",
            "p",
            "REAL_TOPIC",
            "REAL_QID",
            "MQLITE_TIMER_ID"
        ],
        "the caller's properties, RocketMQ's REAL_* kept, the delay ones cleared, the id added"
    );
    // Level 3, offset 0 of its queue (FORMAT.md §16).
    assert_eq!(
        properties::get(v.properties(), "MQLITE_TIMER_ID"),
        Some("L3:0")
    );
    assert_eq!(properties::get(v.properties(), "KEYS"), Some("k1 k2"));
    assert_eq!(properties::get(v.properties(), "UNIQ_KEY"), Some("ID1"));
    assert_eq!(properties::get(v.properties(), "REAL_QID"), Some("1"));
    assert_eq!(store.delay_offsets(), [(3, 1)].into());
    let file = dir.path().join("config").join(offsets::FILE);
    let text = std::fs::read(&file).unwrap();
    assert_eq!(
        offsets::decode(&file, &text).unwrap().table,
        [(3, 1)].into()
    );
}

#[test]
fn a_delayed_put_names_the_queue_it_was_sent_to_and_says_it_is_scheduled() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 4, 6, false, false).unwrap();
    // As RocketMQ's broker answers: the caller's queue, and the offset in the queue the
    // message waits in (level 2: queue 1 of the schedule topic).
    let mut got = Vec::new();
    for queue in [3, 0, 3] {
        let put = store.put(&delayed("T", queue, b"d", &level(2))).unwrap();
        got.push((put.queue_id, put.scheduled, put.appended.queue_offset));
    }
    assert_eq!(got, [(3, true, 0), (0, true, 1), (3, true, 2)]);
    let two = level(2);
    let batch = [delayed("T", 2, b"b", &two), delayed("T", 2, b"b", &two)];
    let mut out = Vec::new();
    let put = store
        .put_messages(&batch, &PutRequest::new(Routing::Queue(2)), &mut out)
        .unwrap();
    assert_eq!((put.queue_id, put.scheduled), (2, true));
    assert_eq!(
        out.iter().map(|a| a.queue_offset).collect::<Vec<_>>(),
        [3, 4]
    );
    // A plain put is not scheduled, and its offset is its queue's.
    let put = store.put(&MessageRef::new("T", 3, b"now")).unwrap();
    assert_eq!(
        (put.queue_id, put.scheduled, put.appended.queue_offset),
        (3, false, 0)
    );
    // Delivered where the results said.
    clock.advance(Duration::from_secs(5));
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 3), [&b"now"[..], b"d", b"d"]);
    assert_eq!(bodies(&store, "T", 0), [b"d"]);
    assert_eq!(bodies(&store, "T", 2), [b"b", b"b"]);
}

#[test]
fn delivery_is_stopped_and_started_on_its_own_and_goes_on_from_its_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    assert!(
        store.delivers(),
        "one writer process delivers from its open"
    );
    store.put(&delayed("T", 0, &[0], &level(1))).unwrap();
    clock.advance(Duration::from_millis(100));
    store.put(&delayed("T", 0, &[1], &level(1))).unwrap();
    clock.advance(Duration::from_millis(1_000));
    store.put(&delayed("T", 0, &[2], &level(1))).unwrap();
    // Due: the first two.
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1]]);
    store.stop_delivery().unwrap();
    store.stop_delivery().unwrap();
    assert!(!store.delivers());
    // Stopping recorded the offsets for the next host.
    let file = dir.path().join("config").join(offsets::FILE);
    let text = std::fs::read(&file).unwrap();
    assert_eq!(
        offsets::decode(&file, &text).unwrap().table,
        [(1, 2)].into()
    );
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        store.deliver_due().unwrap(),
        0,
        "not hosting: nothing delivered"
    );
    assert_eq!(bodies(&store, "T", 0), [[0], [1]]);
    // Accepted meanwhile, and delivered once delivery runs again.
    store.put(&delayed("T", 0, &[3], &level(1))).unwrap();
    store.start_delivery().unwrap();
    store.start_delivery().unwrap();
    assert!(store.delivers());
    clock.advance(Duration::from_secs(1));
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1], [2], [3]]);
    assert_eq!(store.delay_offsets(), [(1, 4)].into());
}

#[test]
fn the_leader_of_several_writer_processes_delivers_what_any_of_them_delayed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    // Pending from a single-writer open.
    let exclusive = StoreConfig {
        shared_writers: false,
        ..config(&clock)
    };
    let store = Store::open(dir.path(), exclusive).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    store.put(&delayed("T", 0, b"pending", &level(1))).unwrap();
    store.close().unwrap();
    drop(store);

    let shared = || StoreConfig {
        shared_writers: true,
        lock_wait: Some(Duration::from_secs(30)),
        ..config(&clock)
    };
    let a = Store::open(dir.path(), shared()).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    // One of them leads, and only the leader hosts delivery.
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    assert!(leader.is_leader() && !other.is_leader());
    assert!(leader.delivers() && !other.delivers());
    // The other one stores a delayed message; an unknown level is refused there too.
    other
        .put(&delayed("T", 0, b"from other", &level(1)))
        .unwrap();
    let end = other.commit_log_range().1;
    let err = other.put(&delayed("T", 0, b"x", &level(99))).unwrap_err();
    assert!(matches!(err, Error::InvalidMessage { .. }), "{err:?}");
    assert_eq!(other.commit_log_range().1, end, "nothing written");
    clock.advance(Duration::from_secs(1));
    assert_eq!(other.deliver_due().unwrap(), 0, "only the leader delivers");
    leader.deliver_due().unwrap();
    for s in [leader, other] {
        assert_eq!(bodies(s, "T", 0), [&b"pending"[..], b"from other"]);
    }
}

#[test]
fn each_level_delivers_in_the_order_stored_and_only_what_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    // Level 1 (1 s) a message every 100 ms, and level 2 (5 s) messages in between.
    for i in 0..6u8 {
        let l = if i % 3 == 2 { level(2) } else { level(1) };
        store.put(&delayed("T", 0, &[i], &l)).unwrap();
        clock.advance(Duration::from_millis(100));
    }
    // Now T0 + 600: the level-1 messages put at T0, T0+100, T0+300 are due at +1000 .. +1300.
    clock.set_ms(T0 + 1_150);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1]]);
    clock.set_ms(T0 + 5_200);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1], [3], [4], [2]]);
    clock.set_ms(T0 + 6_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1], [3], [4], [2], [5]]);
    assert_eq!(store.delay_offsets(), [(1, 4), (2, 2)].into());
}

#[test]
fn pending_messages_survive_a_reopen_and_a_clean_close_delivers_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let open = || Store::open(dir.path(), config(&clock)).unwrap();
    let store = open();
    store.create_topic("T", 1, 6, false, false).unwrap();
    for i in 0..5u8 {
        let l = if i < 3 { level(1) } else { level(2) };
        store.put(&delayed("T", 0, &[i], &l)).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    store.deliver_due().unwrap();
    store.close().unwrap();
    drop(store);

    let store = open();
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1], [2]]);
    // Closed with level 2 pending: it is delivered after the next open.
    store.close().unwrap();
    drop(store);
    clock.advance(Duration::from_secs(4));
    let store = open();
    store.deliver_due().unwrap();
    store.close().unwrap();
    drop(store);
    let store = open();
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [[0], [1], [2], [3], [4]]);
}

#[test]
fn an_unknown_level_is_a_typed_error_that_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    for bad in ["19", "-1", "x", "1.5", "99999999999"] {
        let props = properties::encode([("DELAY", bad)]);
        let err = store
            .put(&MessageRef::new("T", 0, b"x").with_properties(&props))
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidMessage { .. }),
            "{bad}: {err:?}"
        );
        let batch = [MessageRef::new("T", 0, b"x").with_properties(&props)];
        assert!(store.put_batch(&batch, &mut Vec::new()).is_err());
    }
    assert_eq!(store.commit_log_range().1, 0);
    assert!(store.topic("T").unwrap().is_none(), "not even auto-created");
    assert!(store.topic(SCHEDULE).unwrap().is_none());
    // Level 0 is no delay.
    store
        .put(&MessageRef::new("T", 0, b"now").with_properties(&level(0)))
        .unwrap();
    assert_eq!(bodies(&store, "T", 0), [b"now"]);
}

#[test]
fn a_custom_level_table_gives_its_delays_and_refuses_levels_beyond_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let custom = StoreConfig {
        delay_levels: DelayLevels::parse("2s 1d").unwrap(),
        ..config(&clock)
    };
    let store = Store::open(dir.path(), custom.clone()).unwrap();
    store.put(&delayed("T", 0, b"a", &level(1))).unwrap();
    store.put(&delayed("T", 0, b"b", &level(2))).unwrap();
    let err = store.put(&delayed("T", 0, b"c", &level(3))).unwrap_err();
    assert!(matches!(err, Error::InvalidMessage { .. }), "{err:?}");
    clock.advance(Duration::from_millis(1_999));
    store.deliver_due().unwrap();
    assert!(bodies(&store, "T", 0).is_empty());
    clock.advance(Duration::from_millis(1));
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [b"a"]);
    store.close().unwrap();
    drop(store);
    // The delay a message was given holds whatever table a later open uses (level 2 is 5 s
    // in the default table).
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    clock.set_ms(T0 + 86_399_999);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [b"a"]);
    clock.advance(Duration::from_millis(1));
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [b"a", b"b"]);
}

#[test]
fn retention_keeps_the_files_of_pending_delayed_messages() {
    let dir = tempfile::tempdir().unwrap();
    // Retention compares the store clock with file modification times: start at the real time.
    let clock = ManualClock::new(mqlite::util::clock::now_ms());
    let cfg = StoreConfig {
        file_reserved_time: Duration::from_secs(60),
        ..config(&clock)
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    // Level 18 (2 h) first, then enough to fill several files.
    store
        .put(&delayed("T", 0, b"in two hours", &level(18)))
        .unwrap();
    fill_files(&store);
    let before = commit_log_files(dir.path());
    assert!(before >= 4, "{before} files");

    clock.advance(Duration::from_secs(3_600));
    assert_eq!(
        store.delete_expired_files().unwrap(),
        0,
        "the first file holds a pending message"
    );
    assert_eq!(commit_log_files(dir.path()), before);

    clock.advance(Duration::from_secs(3_600));
    store.deliver_due().unwrap();
    assert!(store.delete_expired_files().unwrap() >= 2);
    assert_eq!(bodies(&store, "T", 0), [b"in two hours"]);
}

/// Levels and timers are one engine's sources: due together, they are delivered earliest
/// first, whichever source holds them.
#[test]
fn levels_and_timers_due_together_go_earliest_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let timer = |ms: &str| properties::encode([("TIMER_DELAY_MS", ms)]);
    store.put(&delayed("T", 0, b"t500", &timer("500"))).unwrap();
    store.put(&delayed("T", 0, b"level1", &level(1))).unwrap();
    store
        .put(&delayed("T", 0, b"t1500", &timer("1500")))
        .unwrap();
    clock.advance(Duration::from_secs(2));
    store.deliver_due().unwrap();
    assert_eq!(
        bodies(&store, "T", 0),
        [&b"t500"[..], b"level1", b"t1500"],
        "the level's 1 s between the timers' 0.5 s and 1.5 s"
    );
}

/// A crash after delayed messages were re-put and before `delayOffset.json` recorded them
/// (simulated: the progress files put back as they were before the delivery): the next start
/// finds the delivered copies' ids (`L<level>:<offset>`) in the log and delivers none again.
#[test]
fn a_start_skips_delayed_messages_the_log_shows_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config_dir = dir.path().join("config");
    let files = [
        "delayOffset.json",
        "delayOffset.json.bak",
        "timerProgress.json",
        "timerProgress.json.bak",
    ];
    {
        let store = Store::open(dir.path(), config(&clock)).unwrap();
        store.create_topic("T", 1, 6, false, false).unwrap();
        for body in [b"a", b"b"] {
            store.put(&delayed("T", 0, body, &level(1))).unwrap();
        }
        store.put(&delayed("T", 0, b"c", &level(2))).unwrap();
        store.close().unwrap();
    }
    let before: Vec<Option<Vec<u8>>> = files
        .iter()
        .map(|f| std::fs::read(config_dir.join(f)).ok())
        .collect();
    {
        clock.advance(Duration::from_secs(1));
        let store = Store::open(dir.path(), config(&clock)).unwrap();
        store.deliver_due().unwrap();
        assert_eq!(bodies(&store, "T", 0), [b"a", b"b"]);
        assert_eq!(store.delay_offsets().get(&1), Some(&2));
        store.close().unwrap();
    }
    for (f, content) in files.iter().zip(&before) {
        let path = config_dir.join(f);
        match content {
            Some(c) => std::fs::write(&path, c).unwrap(),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    clock.advance(Duration::from_secs(10));
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.deliver_due().unwrap();
    assert_eq!(
        bodies(&store, "T", 0),
        [&b"a"[..], b"b", b"c"],
        "each delivered once"
    );
    assert_eq!(store.delay_offsets(), [(1, 2), (2, 1)].into());
}
