//! Put hooks (store/hooks.rs) registered at open: a hook rewrites a message between validation
//! and append, and is the only way into a system topic. The test hook stores a message with a
//! DELAY level as RocketMQ does: in `SCHEDULE_TOPIC_XXXX`, queue level - 1, with REAL_TOPIC
//! and REAL_QID, and its consume-queue tags code is the delivery time. It runs before the
//! store's own delay-level hook (store/schedule/), which leaves a message already in the
//! schedule topic alone; tests/delay_levels.rs tests that one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mqlite::dispatch::DispatchRequest;
use mqlite::message::marks::Marks;
use mqlite::message::{properties, tags};
use mqlite::store::hooks::{PutHook, Rewrite};
use mqlite::store::Extensions;
use mqlite::{
    Error, MessageRef, PutRequest, Result, RoundRobin, Routing, Store, StoreConfig, TagFilter, Wait,
};

use common::{cq_file, small_config};

const SCHEDULE: &str = tags::SCHEDULE_TOPIC;

/// RocketMQ's delay-level transform, as a test-only hook.
#[derive(Debug, Default)]
struct DelayLevels {
    calls: AtomicUsize,
}

impl PutHook for DelayLevels {
    fn name(&self) -> &'static str {
        "delay-levels"
    }

    fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let Some(level) = properties::get(msg.properties, properties::DELAY) else {
            return Ok(None);
        };
        let level: u32 = level.parse().map_err(|_| Error::InvalidMessage {
            reason: format!("DELAY {level:?} is not a level"),
        })?;
        if level == 0 {
            return Ok(None);
        }
        let level = level.min(tags::DELAY_LEVELS_MS.len() as u32);
        let mut props = msg.properties.to_vec();
        properties::push(&mut props, properties::REAL_TOPIC, msg.topic);
        properties::push(&mut props, properties::REAL_QID, &msg.queue_id.to_string());
        Ok(Some(Rewrite {
            topic: SCHEDULE.to_owned(),
            queue_id: level - 1,
            properties: props,
            sysflag: msg.sysflag,
        }))
    }
}

/// Adds a property to whatever the hooks before it made, so that order is visible.
#[derive(Debug)]
struct Stamp(&'static str);

impl PutHook for Stamp {
    fn name(&self) -> &'static str {
        "stamp"
    }

    fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
        let mut props = msg.properties.to_vec();
        properties::push(&mut props, "stamp", self.0);
        Ok(Some(Rewrite {
            topic: msg.topic.to_owned(),
            queue_id: msg.queue_id,
            properties: props,
            sysflag: msg.sysflag,
        }))
    }
}

fn open(root: &std::path::Path, hooks: Vec<Arc<dyn PutHook>>) -> Store {
    Store::open_extended(
        root,
        config(),
        Extensions {
            put_hooks: hooks,
            ..Extensions::default()
        },
    )
    .unwrap()
}

/// A clock that never moves: the store's timer engine never finds the messages these
/// tests delay due, so they stay in the schedule topic.
fn config() -> StoreConfig {
    StoreConfig {
        clock: mqlite::util::clock::ManualClock::new(mqlite::util::clock::now_ms()).into(),
        ..small_config()
    }
}

/// The tags code of unit `index` of a consume-queue file (FORMAT.md §3: 20-byte units, the
/// code in bytes 12..20, big-endian).
fn unit_tags_code(root: &std::path::Path, topic: &str, queue: u32, index: usize) -> i64 {
    let cq = std::fs::read(cq_file(root, topic, queue, 0)).unwrap();
    let unit = &cq[index * 20..index * 20 + 20];
    i64::from_be_bytes(unit[12..20].try_into().unwrap())
}

#[test]
fn a_delayed_message_is_stored_in_the_schedule_topic_with_its_delivery_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), vec![Arc::new(DelayLevels::default())]);
    store.create_topic("T", 4, 6, false, false).unwrap();
    let props = properties::encode([("TAGS", "A"), ("DELAY", "3")]);
    let msg = MessageRef::new("T", 2, b"later").with_properties(&props);
    let put = store.put(&msg).unwrap();
    assert_eq!(put.queue_id, 2, "the queue it was sent to");
    assert!(put.scheduled);

    let got = store
        .get_messages(SCHEDULE, 2, 0, 10, &TagFilter::all())
        .unwrap();
    let stored: Vec<_> = got.iter().collect();
    assert_eq!(stored.len(), 1);
    let v = &stored[0];
    assert_eq!(v.topic(), SCHEDULE);
    assert_eq!(v.body(), b"later");
    let p = v.properties();
    assert_eq!(properties::get(p, properties::REAL_TOPIC), Some("T"));
    assert_eq!(properties::get(p, properties::REAL_QID), Some("2"));
    assert_eq!(properties::get(p, properties::DELAY), Some("3"));
    assert_eq!(properties::get(p, properties::TAGS), Some("A"));
    // Nothing reached the caller's topic.
    assert_eq!(store.queue_offsets("T", 2).unwrap(), (0, 0));

    // The tags code is the delivery time (store time + 10 s), written by the inline dispatch
    // and the same as dispatch from the record computes (what recovery rebuilds).
    let want = v.store_timestamp() + 10_000;
    assert_eq!(unit_tags_code(dir.path(), SCHEDULE, 2, 0), want);
    assert_eq!(DispatchRequest::from_record(v).tags_code, want);
    let topic = store.topic(SCHEDULE).unwrap().unwrap();
    assert!(topic.write_queue_nums >= 3);
}

#[test]
fn a_message_without_a_level_is_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(DelayLevels::default());
    let store = open(dir.path(), vec![hook.clone()]);
    let props = properties::encode([("TAGS", "A")]);
    store
        .put(&MessageRef::new("T", 0, b"now").with_properties(&props))
        .unwrap();
    assert_eq!(hook.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        common::read_queue(&store, "T", 0),
        vec![(0, b"now".to_vec())]
    );
    assert_eq!(unit_tags_code(dir.path(), "T", 0, 0), tags::of_tag("A"));
    assert!(store.topic(SCHEDULE).unwrap().is_none());
}

#[test]
fn a_caller_cannot_send_to_a_system_topic_with_or_without_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), vec![Arc::new(DelayLevels::default())]);
    // The hook makes the topic exist; a direct send to it is still refused.
    let props = properties::encode([("DELAY", "1")]);
    store
        .put(&MessageRef::new("T", 0, b"x").with_properties(&props))
        .unwrap();
    for topic in [
        SCHEDULE,
        "%RETRY%g",
        "%DLQ%g",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "rmq_sys_wheel_timer",
    ] {
        let m = MessageRef::new(topic, 0, b"x");
        for wait in [Wait::Durable, Wait::Pipelined, Wait::NoWait] {
            let req = PutRequest::new(Routing::Queue(0)).wait(wait);
            let err = store.put_message(&m, &req).unwrap_err();
            assert!(
                matches!(err, Error::InvalidTopic { .. }),
                "{topic} {wait:?}: {err:?}"
            );
        }
        let err = store.put_batch(&[m], &mut Vec::new()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidTopic { .. }),
            "{topic}: {err:?}"
        );
    }
    assert_eq!(store.queue_offsets(SCHEDULE, 0).unwrap(), (0, 1));
}

#[test]
fn hooks_run_in_order_each_seeing_the_rewrite_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(
        dir.path(),
        vec![
            Arc::new(Stamp("first")),
            Arc::new(DelayLevels::default()),
            Arc::new(Stamp("second")),
        ],
    );
    let props = properties::encode([("DELAY", "2")]);
    store
        .put(&MessageRef::new("T", 0, b"x").with_properties(&props))
        .unwrap();
    let got = store
        .get_messages(SCHEDULE, 1, 0, 10, &TagFilter::all())
        .unwrap();
    let v = got.iter().next().unwrap();
    let names: Vec<&str> = properties::iter(v.properties())
        .map(|(k, _)| k)
        .filter(|k| *k != "__CRC32#")
        .collect();
    assert_eq!(
        names,
        ["DELAY", "stamp", "REAL_TOPIC", "REAL_QID", "stamp"],
        "the delay hook saw the first stamp, the second stamp saw the delay hook's rewrite"
    );
}

#[test]
fn every_wait_and_the_batch_path_run_the_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), vec![Arc::new(DelayLevels::default())]);
    store.create_topic("T", 2, 6, false, false).unwrap();
    let props = properties::encode([("DELAY", "1")]);
    let m = MessageRef::new("T", 0, b"x").with_properties(&props);
    let rr = RoundRobin::new(0);
    // The first NoWait put may decline (the schedule topic does not exist yet); a waiting put
    // creates it, and then NoWait puts append.
    for (wait, sent_to) in [(Wait::Durable, 0), (Wait::Pipelined, 1), (Wait::NoWait, 0)] {
        let req = PutRequest::new(Routing::RoundRobin(&rr)).wait(wait);
        let put = match store.put_message(&m, &req).unwrap() {
            Some(put) => put,
            None => store
                .put_message(&m, &PutRequest::new(Routing::RoundRobin(&rr)))
                .unwrap()
                .unwrap(),
        };
        assert_eq!(
            (put.queue_id, put.scheduled),
            (sent_to, true),
            "{wait:?}: the queue of T it was sent to"
        );
    }
    let batch = [m, m];
    let mut out = Vec::new();
    let put = store
        .put_messages(&batch, &PutRequest::new(Routing::Hash(7)), &mut out)
        .unwrap();
    assert_eq!(
        (put.queue_id, put.scheduled),
        (1, true),
        "the queue of T the batch was sent to (7 % 2)"
    );
    assert_eq!(out.len(), 2);
    assert_eq!(store.queue_offsets(SCHEDULE, 0).unwrap(), (0, 5));
    assert_eq!(store.queue_offsets("T", 0).unwrap(), (0, 0));
    assert_eq!(store.queue_offsets("T", 1).unwrap(), (0, 0));
    let got = store
        .get_messages(SCHEDULE, 0, 0, 10, &TagFilter::all())
        .unwrap();
    let real_qids: Vec<String> = got
        .iter()
        .map(|v| {
            properties::get(v.properties(), properties::REAL_QID)
                .unwrap()
                .to_owned()
        })
        .collect();
    // Round robin over T's two queues, then the batch's hash (7 % 2).
    assert_eq!(real_qids, ["0", "1", "0", "1", "1"]);
}

#[test]
fn a_hook_that_splits_a_batch_or_breaks_properties_is_refused_writing_nothing() {
    #[derive(Debug)]
    struct Broken;
    impl PutHook for Broken {
        fn name(&self) -> &'static str {
            "broken"
        }
        fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
            Ok(Some(Rewrite {
                topic: msg.topic.to_owned(),
                queue_id: msg.queue_id,
                properties: b"no separators".to_vec(),
                sysflag: msg.sysflag,
            }))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), vec![Arc::new(DelayLevels::default())]);
    let delayed = properties::encode([("DELAY", "1")]);
    let batch = [
        MessageRef::new("T", 0, b"now"),
        MessageRef::new("T", 0, b"later").with_properties(&delayed),
    ];
    let err = store.put_batch(&batch, &mut Vec::new()).unwrap_err();
    assert!(matches!(err, Error::InvalidBatch { .. }), "{err:?}");
    assert_eq!(store.commit_log_range().1, 0);

    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), vec![Arc::new(Broken)]);
    let err = store.put(&MessageRef::new("T", 0, b"x")).unwrap_err();
    assert!(matches!(err, Error::InvalidMessage { .. }), "{err:?}");
    assert_eq!(store.commit_log_range().1, 0);
}

#[test]
fn routing_by_hash_keeps_one_key_in_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_topic("T", 3, 6, false, false).unwrap();
    for h in [0u32, 1, 2, 3, 4, 5, 1_000_001] {
        let m = MessageRef::new("T", 0, b"x");
        let put = store
            .put_message(&m, &PutRequest::new(Routing::Hash(h)))
            .unwrap()
            .unwrap();
        assert_eq!(put.queue_id, h % 3);
    }
    let err = store
        .put_message(
            &MessageRef::new("T", 0, b"x"),
            &PutRequest::new(Routing::Queue(3)),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidQueue { .. }), "{err:?}");
}

#[test]
fn a_sharding_key_keeps_its_queue() {
    // Key -> queue as Python producers have always mapped keys (zlib CRC32 of the key's
    // bytes, modulo the write queue count), for topics of 4, 7 and 16 queues.
    let pinned: [(&[u8], u32, [u32; 3]); 4] = [
        (b"order-1", 0xe0b3_7fef, [3, 6, 15]),
        (b"order-2", 0x79ba_2e55, [1, 6, 5]),
        (b"", 0, [0, 0, 0]),
        ("ключ".as_bytes(), 0x0caf_961a, [2, 1, 10]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    store.create_topic("T", 4, 6, false, false).unwrap();
    for (step, queues) in [4u32, 7, 16].into_iter().enumerate() {
        // A topic that grew: the key follows the count the put itself reads.
        store.update_topic("T", queues).unwrap();
        for (key, crc, want) in pinned {
            let routing = Routing::sharding_key(key);
            assert!(matches!(routing, Routing::Hash(h) if h == crc), "{key:?}");
            let put = store
                .put_message(&MessageRef::new("T", 0, b"x"), &PutRequest::new(routing))
                .unwrap()
                .unwrap();
            assert_eq!(put.queue_id, want[step], "{key:?} over {queues} queues");
        }
    }
}

#[test]
fn a_refused_rewrite_gives_the_round_robin_turn_back() {
    /// Refuses the body "bad".
    #[derive(Debug)]
    struct RefuseBad;
    impl PutHook for RefuseBad {
        fn name(&self) -> &'static str {
            "refuse-bad"
        }
        fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>> {
            if msg.body == b"bad" {
                return Err(Error::InvalidMessage {
                    reason: "bad body".into(),
                });
            }
            Ok(None)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), vec![Arc::new(RefuseBad)]);
    store.create_topic("T", 2, 6, false, false).unwrap();
    let rr = RoundRobin::new(0);
    let put = |body: &[u8], wait: Wait| {
        let req = PutRequest::new(Routing::RoundRobin(&rr)).wait(wait);
        let m = MessageRef::new("T", 0, body);
        // A declined NoWait put gives its turn back too; the waiting retry takes it.
        store.put_message(&m, &req).map(|put| {
            put.or_else(|| {
                store
                    .put_message(&m, &PutRequest::new(Routing::RoundRobin(&rr)))
                    .unwrap()
            })
        })
    };
    let mut queues = Vec::new();
    for wait in [Wait::Durable, Wait::Pipelined, Wait::NoWait] {
        assert!(put(b"bad", wait).is_err());
        queues.push(put(b"good", wait).unwrap().unwrap().queue_id);
    }
    let bad = [MessageRef::new("T", 0, b"bad")];
    let req = PutRequest::new(Routing::RoundRobin(&rr));
    assert!(store.put_messages(&bad, &req, &mut Vec::new()).is_err());
    let good = [MessageRef::new("T", 0, b"good")];
    queues.push(
        store
            .put_messages(&good, &req, &mut Vec::new())
            .unwrap()
            .queue_id,
    );
    assert_eq!(
        queues,
        [0, 1, 0, 1],
        "each refused put left its turn to the next"
    );
}

#[test]
fn a_hook_sees_only_the_messages_that_carry_a_mark_it_wants() {
    /// Counts its calls; wants messages with a `DELAY` property only.
    #[derive(Debug, Default)]
    struct DelayOnly {
        checks: AtomicUsize,
        rewrites: AtomicUsize,
    }
    impl PutHook for DelayOnly {
        fn name(&self) -> &'static str {
            "delay-only"
        }
        fn wants(&self) -> Marks {
            Marks::DELAY
        }
        fn check(&self, _: &MessageRef<'_>) -> Result<()> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn rewrite(&self, _: &MessageRef<'_>) -> Result<Option<Rewrite>> {
            self.rewrites.fetch_add(1, Ordering::SeqCst);
            Ok(None)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let hook = Arc::new(DelayOnly::default());
    let store = open(dir.path(), vec![hook.clone()]);
    store.create_topic("T", 2, 6, false, false).unwrap();
    let plain = properties::encode([("TAGS", "A"), ("KEYS", "k"), ("UNIQ_KEY", "ID")]);
    let timer = properties::encode([("__STARTDELIVERTIME", "1")]);
    let rr = RoundRobin::new(0);
    for props in [&b""[..], &plain, &timer] {
        let m = MessageRef::new("T", 0, b"x").with_properties(props);
        for wait in [Wait::Durable, Wait::Pipelined, Wait::NoWait] {
            let req = PutRequest::new(Routing::RoundRobin(&rr)).wait(wait);
            if store.put_message(&m, &req).unwrap().is_none() {
                // A NoWait put that would have waited: the waiting one.
                store.put(&m).unwrap();
            }
        }
        store.put_batch(&[m, m], &mut Vec::new()).unwrap();
    }
    assert_eq!(
        (
            hook.checks.load(Ordering::SeqCst),
            hook.rewrites.load(Ordering::SeqCst)
        ),
        (0, 0),
        "no message carried DELAY"
    );
    // A DELAY property anywhere among the others, in a single put and in a batch.
    let delayed = properties::encode([("TAGS", "A"), ("DELAY", "1"), ("p", "v")]);
    let m = MessageRef::new("T", 0, b"x").with_properties(&delayed);
    store.put(&m).unwrap();
    store.put_batch(&[m, m], &mut Vec::new()).unwrap();
    assert_eq!(
        hook.rewrites.load(Ordering::SeqCst),
        3,
        "the single put and the batch's two"
    );
    // Each of them and the store's delay-level hook's rewrite of it (still marked DELAY).
    assert_eq!(hook.checks.load(Ordering::SeqCst), 6);
}
