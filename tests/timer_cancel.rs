//! Cancel, reschedule and listing of pending timers (store/timer/control.rs): each answer is
//! true (never "cancelled" and then delivered, never "already delivered" when it was not),
//! cancels and reschedules survive a restart, and a cancel racing a delivery (another thread,
//! another store handle, another process) ends with exactly one of them. The tests run on a
//! manual clock and deliver with `deliver_due`; races start on an event (a barrier, a line on
//! a pipe), never a sleep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use mqlite::message::properties;
use mqlite::store::timer::{TimerFilter, TimerId, TimerOutcome, TimerTarget};
use mqlite::util::clock::ManualClock;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

use common::small_config;

const T0: i64 = 1_700_000_000_000;
/// Store directory of the cancelling child (its presence makes `cancel_child` run).
const CHILD_DIR: &str = "MQLITE_TIMER_CANCEL_CHILD_DIR";

fn config(clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        clock: clock.clone().into(),
        lock_wait: Some(Duration::from_secs(30)),
        ..small_config()
    }
}

/// A timer to `topic` due `delay_ms` after the clock, with `keys`; returns its id and the
/// put's offset id.
fn timer(store: &Store, topic: &str, body: &[u8], delay_ms: i64, keys: &str) -> (TimerId, String) {
    timer_with(store, topic, body, delay_ms, &[("KEYS", keys)])
}

fn timer_with(
    store: &Store,
    topic: &str,
    body: &[u8],
    delay_ms: i64,
    extra: &[(&str, &str)],
) -> (TimerId, String) {
    let (offset, id) = scheduled(store, topic, body, ("TIMER_DELAY_MS", delay_ms), extra);
    (TimerId::log(offset), id)
}

/// A delayed message of `level` to `topic` (queue 0) with `keys`; returns its id (`L<level>:
/// <offset>`) and the put's offset id.
fn delayed(store: &Store, topic: &str, body: &[u8], level: u32, keys: &str) -> (TimerId, String) {
    delayed_with(store, topic, body, level, &[("KEYS", keys)])
}

fn delayed_with(
    store: &Store,
    topic: &str,
    body: &[u8],
    level: u32,
    extra: &[(&str, &str)],
) -> (TimerId, String) {
    let (offset, id) = scheduled(store, topic, body, ("DELAY", i64::from(level)), extra);
    (TimerId::level(level, offset), id)
}

/// Puts a message to `topic` (queue 0) that the property `when` schedules, with `extra`
/// properties (empty values left out); returns its offset in its schedule queue and the put's
/// offset id.
fn scheduled(
    store: &Store,
    topic: &str,
    body: &[u8],
    when: (&str, i64),
    extra: &[(&str, &str)],
) -> (u64, String) {
    let value = when.1.to_string();
    let mut pairs = vec![(when.0, value.as_str())];
    pairs.extend(extra.iter().filter(|(_, v)| !v.is_empty()));
    let props = properties::encode(pairs);
    let r = store
        .put(&MessageRef::new(topic, 0, body).with_properties(&props))
        .unwrap();
    assert!(r.scheduled);
    (r.appended.queue_offset, r.appended.offset_msg_id())
}

fn bodies(store: &Store, topic: &str) -> Vec<Vec<u8>> {
    let got = store
        .get_messages(topic, 0, 0, 10_000, &TagFilter::all())
        .unwrap();
    got.iter().map(|v| v.body().to_vec()).collect()
}

fn outcomes(answers: &[mqlite::store::timer::TimerAnswer]) -> Vec<TimerOutcome> {
    answers.iter().map(|a| a.outcome).collect()
}

fn cancel(store: &Store, id: TimerId) -> TimerOutcome {
    let a = store.cancel_timer(TimerTarget::Id(id)).unwrap();
    assert_eq!(a.len(), 1);
    a[0].outcome
}

#[test]
fn a_cancelled_timer_is_never_delivered_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let (a, _) = timer(&store, "T", b"a", 1_000, "");
    let (b, _) = timer(&store, "T", b"b", 1_000, "");
    assert_eq!(store.pending_timers(), 2);
    assert_eq!(cancel(&store, a), TimerOutcome::Cancelled);
    assert_eq!(cancel(&store, a), TimerOutcome::AlreadyCancelled);
    assert_eq!(store.pending_timers(), 1);
    clock.set_ms(T0 + 1_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [b"b"]);
    assert_eq!(cancel(&store, b), TimerOutcome::AlreadyDelivered);
    assert_eq!(cancel(&store, a), TimerOutcome::AlreadyCancelled);
    let found = store.cancel_timer(TimerTarget::Id(b)).unwrap();
    let t = found[0].timer.as_ref().unwrap();
    assert_eq!((t.id, t.topic.as_str(), t.due_ms), (b, "T", T0 + 1_000));
    store.close().unwrap();
    drop(store);

    // A cancel made just before a close: the next open's host finds it (in the progress file
    // or by its scan of the log; a kill before either is tests/kill_points.rs).
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    let (c, _) = timer(&store, "T", b"c", 1_000, "");
    store.close().unwrap();
    drop(store);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    assert_eq!(cancel(&store, c), TimerOutcome::Cancelled);
    store.close().unwrap();
    drop(store);
    clock.set_ms(T0 + 86_400_000);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    while store.deliver_due().unwrap() > 0 {}
    assert_eq!(bodies(&store, "T"), [b"b"]);
    assert_eq!(store.pending_timers(), 0);
    for (id, expect) in [
        (a, TimerOutcome::AlreadyCancelled),
        (b, TimerOutcome::AlreadyDelivered),
        (c, TimerOutcome::AlreadyCancelled),
        (TimerId::log(99), TimerOutcome::NotFound),
    ] {
        assert_eq!(cancel(&store, id), expect, "{id}");
    }
}

#[test]
fn message_ids_keys_and_topics_name_timers_and_bad_input_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    for t in ["A", "B"] {
        store.create_topic(t, 1, 6, false, false).unwrap();
    }
    let (_, offset_id) = timer(&store, "A", b"by offset id", 1_000, "");
    let (_, _) = timer(&store, "A", b"order-1 in A", 1_000, "order-1 x");
    let (_, _) = timer(&store, "B", b"order-1 in B", 1_000, "order-1");
    let uniq = "0A0B0C0D0E0F00112233445566778899";
    let (other, _) = timer_with(&store, "B", b"other", 1_000, &[("UNIQ_KEY", uniq)]);

    let end = store.commit_log_range().1;
    for bad in ["", "xyz", "0123", &"G".repeat(32)] {
        let err = store.cancel_timer(TimerTarget::MsgId(bad)).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{bad:?}: {err:?}"
        );
    }
    let err = store
        .reschedule_timer(TimerTarget::Id(other), T0 + 365 * 86_400_000)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    // Unknown ids are answers, not errors, and write nothing either.
    let a = store
        .cancel_timer(TimerTarget::MsgId(&"0".repeat(32)))
        .unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::NotFound]);
    assert_eq!(a[0].id, None);
    let a = store
        .cancel_timer(TimerTarget::Key {
            key: "nobody",
            topic: None,
        })
        .unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::NotFound]);
    assert_eq!(store.commit_log_range().1, end, "nothing written");

    let a = store.cancel_timer(TimerTarget::MsgId(&offset_id)).unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::Cancelled]);
    assert_eq!(a[0].timer.as_ref().unwrap().topic, "A");
    let lower = offset_id.to_ascii_lowercase();
    let a = store.cancel_timer(TimerTarget::MsgId(&lower)).unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::AlreadyCancelled]);

    // By key, within one topic: the other topic's timer with the same key stays.
    let a = store
        .cancel_timer(TimerTarget::Key {
            key: "order-1",
            topic: Some("A"),
        })
        .unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::Cancelled]);
    let t = a[0].timer.as_ref().unwrap();
    assert_eq!(
        (t.topic.as_str(), t.keys.clone()),
        ("A", vec!["order-1".to_owned(), "x".to_owned()])
    );
    // By unique id: the id the producer gave the message.
    let a = store.cancel_timer(TimerTarget::MsgId(uniq)).unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::Cancelled]);
    assert_eq!(a[0].id, Some(other));
    assert_eq!(
        a[0].timer.as_ref().unwrap().unique_id.as_deref(),
        Some(uniq)
    );
    clock.set_ms(T0 + 1_000);
    store.deliver_due().unwrap();
    assert!(bodies(&store, "A").is_empty());
    assert_eq!(bodies(&store, "B")[0], b"order-1 in B");
}

#[test]
fn a_rescheduled_timer_keeps_its_id_and_goes_at_the_new_time_never_early() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let (later, _) = timer(&store, "T", b"later", 1_000, "");
    let (earlier, _) = timer(&store, "T", b"earlier", 5_000, "");
    let a = store
        .reschedule_timer(TimerTarget::Id(later), T0 + 3_000)
        .unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::Rescheduled]);
    assert_eq!(a[0].timer.as_ref().unwrap().due_ms, T0 + 3_000);
    let a = store
        .reschedule_timer(TimerTarget::Id(earlier), T0 + 2_000)
        .unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::Rescheduled]);
    let due: Vec<(TimerId, i64)> = store
        .list_timers(&TimerFilter {
            limit: 10,
            ..Default::default()
        })
        .unwrap()
        .iter()
        .map(|t| (t.id, t.due_ms))
        .collect();
    assert_eq!(due, [(earlier, T0 + 2_000), (later, T0 + 3_000)]);
    // The reschedules survive a restart.
    store.close().unwrap();
    drop(store);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    for (at, expect) in [
        (1_000, vec![]),
        (1_999, vec![]),
        (2_000, vec![&b"earlier"[..]]),
        (2_999, vec![b"earlier"]),
        (3_000, vec![b"earlier", b"later"]),
        (5_000, vec![b"earlier", b"later"]),
    ] {
        clock.set_ms(T0 + at);
        store.deliver_due().unwrap();
        assert_eq!(bodies(&store, "T"), expect, "at +{at} ms");
    }
    let got = store
        .get_messages("T", 0, 0, 10, &TagFilter::all())
        .unwrap();
    for v in got.iter() {
        let out: i64 = v.property("TIMER_OUT_MS").unwrap().parse().unwrap();
        assert!(v.store_timestamp() >= out, "never early");
        assert_eq!(
            out,
            if v.body() == b"later" {
                T0 + 3_000
            } else {
                T0 + 2_000
            }
        );
    }
    let a = store
        .reschedule_timer(TimerTarget::Id(later), T0 + 9_000)
        .unwrap();
    assert_eq!(outcomes(&a), [TimerOutcome::AlreadyDelivered]);
}

#[test]
fn listing_filters_by_topic_key_and_due_range_earliest_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    for t in ["A", "B"] {
        store.create_topic(t, 1, 6, false, false).unwrap();
    }
    let (a3, _) = timer(&store, "A", b"a3", 3_000, "k1");
    let (a1, _) = timer(&store, "A", b"a1", 1_000, "k2");
    let (b2, _) = timer(&store, "B", b"b2", 2_000, "k1");
    let (gone, _) = timer(&store, "B", b"gone", 500, "k1");
    assert_eq!(cancel(&store, gone), TimerOutcome::Cancelled);
    let list = |f: TimerFilter<'_>| -> Vec<TimerId> {
        store
            .list_timers(&TimerFilter { limit: 100, ..f })
            .unwrap()
            .iter()
            .map(|t| t.id)
            .collect()
    };
    assert_eq!(list(TimerFilter::default()), [a1, b2, a3]);
    let all = store
        .list_timers(&TimerFilter {
            limit: 1,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].topic.as_str(), all[0].due_ms), ("A", T0 + 1_000));
    assert_eq!(
        list(TimerFilter {
            topic: Some("A"),
            ..Default::default()
        }),
        [a1, a3]
    );
    assert_eq!(
        list(TimerFilter {
            key: Some("k1"),
            ..Default::default()
        }),
        [b2, a3]
    );
    assert_eq!(
        list(TimerFilter {
            due_from: Some(T0 + 2_000),
            due_to: Some(T0 + 3_000),
            ..Default::default()
        }),
        [b2]
    );
    clock.set_ms(T0 + 1_000);
    store.deliver_due().unwrap();
    assert_eq!(list(TimerFilter::default()), [b2, a3]);
}

/// Delivery and cancel of `n` due timers, each pair started together: the outcome the cancel
/// reports is what happened.
fn race(deliverer: &Store, canceller: &Store, clock: &ManualClock, round: &str, n: usize) {
    race_with(deliverer, canceller, clock, round, n, |s, b| {
        timer(s, "T", b, 1_000, "").0
    });
}

/// `race` for the timers `make` stores, each due within a second.
fn race_with(
    deliverer: &Store,
    canceller: &Store,
    clock: &ManualClock,
    round: &str,
    n: usize,
    make: impl Fn(&Store, &[u8]) -> TimerId,
) {
    let mut raced = Vec::new();
    for i in 0..n {
        let body = format!("{round}{i}");
        let id = make(canceller, body.as_bytes());
        clock.advance(Duration::from_secs(1));
        let start = Arc::new(Barrier::new(2));
        let outcome = std::thread::scope(|s| {
            let go = Arc::clone(&start);
            let d = s.spawn(move || {
                go.wait();
                deliverer.deliver_due().unwrap();
            });
            start.wait();
            let o = cancel(canceller, id);
            d.join().unwrap();
            o
        });
        raced.push((body.into_bytes(), outcome));
    }
    deliverer.deliver_due().unwrap();
    check_raced(deliverer, &raced);
}

/// Each timer is in the topic once when its cancel said it was delivered, and never when the
/// cancel said it cancelled it.
fn check_raced(store: &Store, raced: &[(Vec<u8>, TimerOutcome)]) {
    let cancelled = raced
        .iter()
        .filter(|(_, o)| *o == TimerOutcome::Cancelled)
        .count();
    println!("cancel won {cancelled} of {} races", raced.len());
    let got = bodies(store, "T");
    for (body, outcome) in raced {
        let copies = got.iter().filter(|b| *b == body).count();
        match outcome {
            TimerOutcome::Cancelled => assert_eq!(copies, 0, "{body:?} cancelled yet delivered"),
            TimerOutcome::AlreadyDelivered => assert_eq!(copies, 1, "{body:?}"),
            o => panic!("{body:?}: {o:?}"),
        }
    }
    assert_eq!(store.pending_timers(), 0);
}

#[test]
fn a_cancel_racing_the_delivery_in_another_thread_or_store_handle_ends_one_way() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = Store::open(dir.path(), config(&clock)).unwrap();
    a.create_topic("T", 1, 6, false, false).unwrap();
    race(&a, &a, &clock, "thread", 20);
    // A second handle: the gate's byte lock, not its mutex, keeps the two apart.
    let b = Store::open(dir.path(), config(&clock)).unwrap();
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    race(leader, other, &clock, "handle", 20);
}

/// A level message's cancel racing its delivery (another thread, then another store handle):
/// the gate serialises the level's head as it does the timer log.
#[test]
fn a_level_cancel_racing_its_delivery_ends_one_way() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = Store::open(dir.path(), config(&clock)).unwrap();
    a.create_topic("T", 1, 6, false, false).unwrap();
    // Level 1 is 1 s (RocketMQ's default table).
    let level1 = |s: &Store, b: &[u8]| delayed(s, "T", b, 1, "").0;
    race_with(&a, &a, &clock, "thread", 20, level1);
    let b = Store::open(dir.path(), config(&clock)).unwrap();
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    race_with(leader, other, &clock, "handle", 20, level1);
}

/// A delay-level message is a timer like any other: listed with its level id, cancelled and
/// rescheduled by id, offset id, unique id or key, counted by `pending_timers`; a rescheduled
/// one keeps its id, leaves its level's order and goes at its new time, never early, across a
/// restart; `delayOffset.json` keeps RocketMQ's shape.
#[test]
fn a_delay_level_message_is_listed_cancelled_and_rescheduled_like_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    // Level 2 is 5 s.
    let (a, _) = delayed(&store, "T", b"a", 2, "ka");
    let (b, _) = delayed(&store, "T", b"b", 2, "kb");
    let (c, c_offset_id) = delayed(&store, "T", b"c", 2, "");
    let uniq = "0A0B0C0D0E0F10111213141516171819";
    let (d, _) = delayed_with(&store, "T", b"d", 2, &[("UNIQ_KEY", uniq)]);
    let (t, _) = timer(&store, "T", b"t", 3_000, "");
    assert_eq!(
        [a, b, c, d].map(|i| i.to_string()),
        ["L2:0", "L2:1", "L2:2", "L2:3"]
    );
    assert_eq!(store.pending_timers(), 5);
    let listed = store
        .list_timers(&TimerFilter {
            limit: 10,
            ..TimerFilter::default()
        })
        .unwrap();
    let seen: Vec<(TimerId, i64)> = listed.iter().map(|i| (i.id, i.due_ms)).collect();
    assert_eq!(
        seen,
        [
            (t, T0 + 3_000),
            (a, T0 + 5_000),
            (b, T0 + 5_000),
            (c, T0 + 5_000),
            (d, T0 + 5_000)
        ]
    );
    assert_eq!(
        (listed[1].topic.as_str(), listed[1].keys.clone()),
        ("T", vec!["ka".to_owned()])
    );

    assert_eq!(cancel(&store, a), TimerOutcome::Cancelled);
    assert_eq!(cancel(&store, a), TimerOutcome::AlreadyCancelled);
    let by_key = store
        .cancel_timer(TimerTarget::Key {
            key: "kb",
            topic: Some("T"),
        })
        .unwrap();
    assert_eq!(
        (by_key.len(), by_key[0].id, by_key[0].outcome),
        (1, Some(b), TimerOutcome::Cancelled)
    );
    let moved = store
        .reschedule_timer(TimerTarget::MsgId(&c_offset_id), T0 + 20_000)
        .unwrap();
    assert_eq!(
        (moved[0].id, moved[0].outcome),
        (Some(c), TimerOutcome::Rescheduled)
    );
    assert_eq!(moved[0].timer.as_ref().unwrap().due_ms, T0 + 20_000);
    // Earlier than its level's delay, and than the timer-log timer.
    assert_eq!(listed[4].unique_id.as_deref(), Some(uniq));
    let earlier = store
        .reschedule_timer(TimerTarget::MsgId(uniq), T0 + 1_000)
        .unwrap();
    assert_eq!(
        (earlier[0].id, earlier[0].outcome),
        (Some(d), TimerOutcome::Rescheduled)
    );
    assert_eq!(store.pending_timers(), 3);

    // The store's own thread may deliver too: what is in the topic is checked, not counts.
    clock.set_ms(T0 + 999);
    store.deliver_due().unwrap();
    assert!(bodies(&store, "T").is_empty());
    clock.set_ms(T0 + 1_000);
    store.deliver_due().unwrap();
    let got = store
        .get_messages("T", 0, 0, 10, &TagFilter::all())
        .unwrap();
    let first = got.iter().next().unwrap();
    assert_eq!(
        (first.body(), first.property("MQLITE_TIMER_ID")),
        (&b"d"[..], Some("L2:3"))
    );
    clock.set_ms(T0 + 5_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [b"d", b"t"]);
    assert_eq!(cancel(&store, d), TimerOutcome::AlreadyDelivered);
    assert_eq!(cancel(&store, b), TimerOutcome::AlreadyCancelled);
    // The level's head passed every message: the cancelled and the moved ones are recorded
    // out of order, in timerProgress.json.
    assert_eq!(store.delay_offsets().get(&2), Some(&4));
    store.close().unwrap();
    drop(store);

    let store = Store::open(dir.path(), config(&clock)).unwrap();
    assert_eq!(store.pending_timers(), 1);
    let listed = store
        .list_timers(&TimerFilter {
            limit: 10,
            ..TimerFilter::default()
        })
        .unwrap();
    assert_eq!(
        listed.iter().map(|i| (i.id, i.due_ms)).collect::<Vec<_>>(),
        [(c, T0 + 20_000)]
    );
    clock.set_ms(T0 + 19_999);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [b"d", b"t"]);
    clock.set_ms(T0 + 20_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [b"d", b"t", b"c"]);
    assert_eq!(store.pending_timers(), 0);
    for (id, expect) in [
        (a, TimerOutcome::AlreadyCancelled),
        (c, TimerOutcome::AlreadyDelivered),
        (TimerId::level(2, 4), TimerOutcome::NotFound),
        (TimerId::level(7, 0), TimerOutcome::NotFound),
    ] {
        assert_eq!(cancel(&store, id), expect, "{id}");
    }
    store.close().unwrap();
}

/// Child of the cross-process race: opens the store, says READY, then for each line `<id>` on
/// its stdin cancels that timer at once and prints the outcome.
#[test]
fn cancel_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let clock = ManualClock::new(T0);
    let store = Store::open(dir, config(&clock)).unwrap();
    println!("\nREADY");
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let id = TimerId::parse(line.unwrap().trim()).unwrap();
        println!("\nOUTCOME {:?}", cancel(&store, id));
        std::io::stdout().flush().unwrap();
    }
    store.close().unwrap();
}

#[test]
fn a_cancel_in_another_process_racing_the_delivery_ends_one_way() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["cancel_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_line = |prefix: &str| -> String {
        loop {
            let line = from_child.next().expect("the child ended").unwrap();
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    };
    next_line("READY");
    let mut raced = Vec::new();
    for i in 0..20 {
        let body = format!("p{i}");
        let (id, _) = timer(&store, "T", body.as_bytes(), 1_000, "");
        clock.advance(Duration::from_secs(1));
        // The go: the child cancels as this process delivers.
        writeln!(to_child, "{id}").unwrap();
        to_child.flush().unwrap();
        store.deliver_due().unwrap();
        let outcome = match next_line("OUTCOME").as_str() {
            "Cancelled" => TimerOutcome::Cancelled,
            "AlreadyDelivered" => TimerOutcome::AlreadyDelivered,
            o => panic!("child answered {o}"),
        };
        raced.push((body.into_bytes(), outcome));
    }
    drop(to_child);
    assert!(child.wait().unwrap().success());
    store.deliver_due().unwrap();
    check_raced(&store, &raced);
}

#[test]
fn a_callers_message_cannot_pose_as_a_cancel_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let (victim, _) = timer(&store, "T", b"victim", 1_000, "");
    let forged = victim.to_string();
    timer_with(
        &store,
        "T",
        b"forger",
        1_000,
        &[("MQLITE_TIMER_CANCEL", forged.as_str())],
    );
    store.close().unwrap();
    drop(store);
    clock.set_ms(T0 + 1_000);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [&b"victim"[..], b"forger"]);
    assert_eq!(cancel(&store, victim), TimerOutcome::AlreadyDelivered);
}

/// `timerProgress.json` records the levels' offsets too and is written before its mirror
/// `delayOffset.json`; a reader takes the larger offset of the two. A crash between the two
/// writes (the mirror behind) repeats no delayed message and loses no moved one.
#[test]
fn a_crash_between_the_progress_and_delay_offset_writes_repeats_no_delayed_message() {
    let dir = tempfile::tempdir().unwrap();
    let offsets = dir.path().join("config").join("delayOffset.json");
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    // Level 1 is 1 s: w delivered, then m0, m1, m2 stored and the files written.
    delayed(&store, "T", b"w", 1, "");
    clock.set_ms(T0 + 1_000);
    store.deliver_due().unwrap();
    delayed(&store, "T", b"m0", 1, "");
    let (m1, _) = delayed(&store, "T", b"m1", 1, "");
    delayed(&store, "T", b"m2", 1, "");
    store.close().unwrap();
    drop(store);
    let behind = std::fs::read(&offsets).unwrap();

    let store = Store::open(dir.path(), config(&clock)).unwrap();
    let moved = store
        .reschedule_timer(TimerTarget::Id(m1), T0 + 60_000)
        .unwrap();
    assert_eq!(moved[0].outcome, TimerOutcome::Rescheduled);
    clock.set_ms(T0 + 2_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [&b"w"[..], b"m0", b"m2"]);
    assert_eq!(store.delay_offsets().get(&1), Some(&4));
    // A second pass: the progress's commitLogOffset then lies after those deliveries.
    clock.set_ms(T0 + 2_500);
    store.deliver_due().unwrap();
    store.close().unwrap();
    drop(store);

    // The crash: the progress written, its mirror not.
    std::fs::write(&offsets, &behind).unwrap();
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [&b"w"[..], b"m0", b"m2"]);
    assert_eq!(store.delay_offsets().get(&1), Some(&4));
    assert_eq!(store.pending_timers(), 1);
    clock.set_ms(T0 + 59_999);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [&b"w"[..], b"m0", b"m2"]);
    clock.set_ms(T0 + 60_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T"), [&b"w"[..], b"m0", b"m2", b"m1"]);
    assert_eq!(store.pending_timers(), 0);
    store.close().unwrap();
    drop(store);
    // The mirror caught up at the close.
    let mirror = String::from_utf8(std::fs::read(&offsets).unwrap()).unwrap();
    assert!(mirror.contains("\"1\": 4"), "{mirror}");
}
