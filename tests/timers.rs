//! Timer messages (store/timer/): a message with `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`,
//! `TIMER_DELIVER_MS` or `__STARTDELIVERTIME` is stored in `rmq_sys_wheel_timer` and delivered
//! to its real topic once the store's clock reads its exact delivery time, once. The tests on a
//! manual clock deliver with `deliver_due` (the store's own thread sees the same clock and may
//! deliver first, so they assert what the topics hold, never what one call delivered).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use mqlite::message::properties;
use mqlite::message::timer::TIMER_TOPIC;
use mqlite::util::clock::ManualClock;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

use common::scheduled::{bodies, clocked_config as config, commit_log_files, fill_files, T0};
use common::small_config;

fn put(store: &Store, topic: &str, body: &[u8], pairs: &[(&str, &str)]) {
    let props = properties::encode(pairs.iter().copied());
    let r = store
        .put(&MessageRef::new(topic, 0, body).with_properties(&props))
        .unwrap();
    assert!(r.scheduled, "{pairs:?}");
}

#[test]
fn each_timer_property_is_honoured_never_early_exactly_at_its_ms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    put(&store, "T", b"sec", &[("TIMER_DELAY_SEC", "2")]);
    put(&store, "T", b"ms", &[("TIMER_DELAY_MS", "1500")]);
    put(
        &store,
        "T",
        b"at",
        &[("TIMER_DELIVER_MS", &(T0 + 1_000).to_string())],
    );
    let start = (T0 + 2_500).to_string();
    put(
        &store,
        "T",
        b"start",
        &[("__STARTDELIVERTIME", &start), ("KEYS", "k")],
    );
    assert!(bodies(&store, "T", 0).is_empty());
    assert_eq!(store.pending_timers(), 4);

    let mut seen = Vec::new();
    for (at, expect) in [
        (999, vec![]),
        (1_000, vec![&b"at"[..]]),
        (1_499, vec![b"at"]),
        (1_500, vec![b"at", b"ms"]),
        (1_999, vec![b"at", b"ms"]),
        (2_000, vec![b"at", b"ms", b"sec"]),
        (2_499, vec![b"at", b"ms", b"sec"]),
        (2_500, vec![b"at", b"ms", b"sec", b"start"]),
    ] {
        clock.set_ms(T0 + at);
        store.deliver_due().unwrap();
        seen = bodies(&store, "T", 0);
        assert_eq!(seen, expect, "at +{at} ms");
    }
    assert_eq!(seen.len(), 4);
    let got = store
        .get_messages("T", 0, 0, 10, &TagFilter::all())
        .unwrap();
    for v in got.iter() {
        assert!(v.store_timestamp() >= timer_out(&v), "never early");
        assert!(v.property("REAL_TOPIC").is_none() && v.property("MQLITE_TIMER_ID").is_some());
        if v.body() == b"start" {
            assert_eq!(v.property("KEYS"), Some("k"));
        }
    }
    assert_eq!(store.pending_timers(), 0);
}

fn timer_out(v: &mqlite::RecordView<'_>) -> i64 {
    v.property("TIMER_OUT_MS").unwrap().parse().unwrap()
}

#[test]
fn many_timers_due_in_one_ms_and_past_times_are_all_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let at = (T0 + 50).to_string();
    for i in 0..500u32 {
        put(&store, "T", &i.to_be_bytes(), &[("TIMER_DELIVER_MS", &at)]);
    }
    // A time at or before now is due at once: stored in its topic directly.
    let past = (T0 - 10).to_string();
    let props = properties::encode([("TIMER_DELIVER_MS", past.as_str())]);
    let r = store
        .put(&MessageRef::new("T", 0, b"past").with_properties(&props))
        .unwrap();
    assert!(!r.scheduled);
    assert_eq!(bodies(&store, "T", 0), [b"past"]);
    clock.set_ms(T0 + 50);
    store.deliver_due().unwrap();
    store.deliver_due().unwrap();
    let got = bodies(&store, "T", 0);
    assert_eq!(got.len(), 501);
    let mut ids: Vec<u32> = got[1..]
        .iter()
        .map(|b| u32::from_be_bytes(b[..4].try_into().unwrap()))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..500).collect::<Vec<_>>(), "each once");
}

#[test]
fn far_future_timers_wait_beyond_the_window_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let cfg = || StoreConfig {
        timer_window: Duration::from_secs(1),
        ..config(&clock)
    };
    let day = 86_400_000i64;
    {
        let store = Store::open(dir.path(), cfg()).unwrap();
        store.create_topic("T", 1, 6, false, false).unwrap();
        for (body, d) in [
            (&b"d3"[..], 3 * day),
            (b"d1", day),
            (b"h1", 3_600_000),
            (b"s1", 1_000),
        ] {
            put(&store, "T", body, &[("TIMER_DELAY_MS", &d.to_string())]);
        }
        clock.set_ms(T0 + 1_000);
        store.deliver_due().unwrap();
        assert_eq!(bodies(&store, "T", 0), [b"s1"]);
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(store.pending_timers(), 3);
    clock.set_ms(T0 + 3_599_999);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [b"s1"], "not early after a reopen");
    clock.set_ms(T0 + 3_600_000);
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [&b"s1"[..], b"h1"]);
    // A long downtime: everything overdue is due, none skipped.
    store.close().unwrap();
    clock.set_ms(T0 + 10 * day);
    let store = Store::open(dir.path(), cfg()).unwrap();
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [&b"s1"[..], b"h1", b"d1", b"d3"]);
    assert_eq!(store.pending_timers(), 0);
}

/// Delayed messages (delay levels, the same engine's other source) share the timers' budget.
#[test]
fn overdue_timers_and_delayed_messages_after_downtime_go_at_the_catch_up_rate() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let cfg = || StoreConfig {
        timer_catchup_rate: 2,
        ..config(&clock)
    };
    {
        let store = Store::open(dir.path(), cfg()).unwrap();
        store.create_topic("T", 1, 6, false, false).unwrap();
        for i in 0..2u8 {
            put(&store, "T", &[i], &[("TIMER_DELAY_MS", "100")]);
        }
        for i in 2..5u8 {
            put(&store, "T", &[i], &[("DELAY", "1")]);
        }
        store.close().unwrap();
    }
    clock.set_ms(T0 + 60_000);
    let store = Store::open(dir.path(), cfg()).unwrap();
    // A burst of one second's worth, then one every 1/rate s.
    for (after, expect) in [(0, 2), (499, 2), (500, 3), (999, 3), (1_000, 4), (1_500, 5)] {
        clock.set_ms(T0 + 60_000 + after);
        store.deliver_due().unwrap();
        assert_eq!(bodies(&store, "T", 0).len(), expect, "+{after} ms");
    }
}

#[test]
fn bad_timer_values_are_typed_errors_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    let end = store.dispatched_offset();
    let beyond = (T0 + 31 * 86_400_000).to_string();
    for pairs in [
        [("TIMER_DELAY_SEC", "-1")],
        [("TIMER_DELAY_MS", "soon")],
        [("TIMER_DELIVER_MS", "1.5")],
        [("__STARTDELIVERTIME", "x")],
        [("TIMER_DELIVER_MS", beyond.as_str())],
    ] {
        let props = properties::encode(pairs);
        let got = store.put(&MessageRef::new("New", 0, b"x").with_properties(&props));
        assert!(
            matches!(got, Err(Error::InvalidMessage { .. })),
            "{pairs:?}: {got:?}"
        );
    }
    assert_eq!(store.dispatched_offset(), end, "nothing written");
    assert!(store.topic("New").unwrap().is_none(), "no topic created");
    assert!(store.topic(TIMER_TOPIC).unwrap().is_none());
}

#[test]
fn a_delay_level_wins_over_timer_properties() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(dir.path(), config(&clock)).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    put(
        &store,
        "T",
        b"x",
        &[("DELAY", "1"), ("TIMER_DELAY_SEC", "100")],
    );
    assert_eq!(bodies(&store, "SCHEDULE_TOPIC_XXXX", 0), [b"x"]);
    // Pending as a level-1 message, not as a timer of the timer log.
    assert!(store.topic(TIMER_TOPIC).unwrap().is_none());
    assert_eq!(store.pending_timers(), 1);
}

/// On the system clock: a timer due soon, put while the service sleeps towards a timer an hour
/// away, wakes it (the hook's announcement), and is delivered, not early.
#[test]
fn an_earlier_arrival_wakes_the_sleeping_service() {
    let dir = tempfile::tempdir().unwrap();
    // One writer process: its hook's announcements reach the thread's condvar.
    let cfg = StoreConfig {
        shared_writers: false,
        ..small_config()
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    put(&store, "T", b"late", &[("TIMER_DELAY_SEC", "3600")]);
    // Once the thread sleeps towards the late timer (or its 10 s cap), put the earlier one.
    asleep_towards_a_far_time(&store);
    put(&store, "T", b"soon", &[("TIMER_DELAY_MS", "20")]);
    // The service's longest sleep is 10 s: delivery within it shows it was woken.
    delivered_soon(&store, Duration::from_secs(8));
}

/// Waits until `store`'s timer thread sleeps until at least 5 s from now (a far timer, or its
/// 10 s cap), and returns the store-clock time it sleeps until.
fn asleep_towards_a_far_time(store: &Store) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = mqlite::util::clock::now_ms();
        if let Some(t) = store.timer_sleeping_until().filter(|&t| t >= now + 5_000) {
            return t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the timer thread never slept towards a far time"
        );
        std::thread::yield_now();
    }
}

/// Waits (`timeout` at most) for the timer `soon` in `T`/0, the first message there; checks it
/// came not early and returns its store time.
fn delivered_soon(store: &Store, timeout: Duration) -> i64 {
    assert!(store
        .wait_for_messages(&[("T", 0, 0)], Some(timeout))
        .unwrap());
    let got = store
        .get_messages("T", 0, 0, 10, &TagFilter::all())
        .unwrap();
    let v = got.iter().next().unwrap();
    assert_eq!(v.body(), b"soon");
    assert!(v.store_timestamp() >= timer_out(&v), "never early");
    v.store_timestamp()
}

/// The store directory of the child process of the test below (its presence makes the child
/// entry point act).
const CHILD_DIR: &str = "MQLITE_TIMER_CHILD_DIR";

fn shared_config() -> StoreConfig {
    StoreConfig {
        shared_writers: true,
        lock_wait: Some(Duration::from_secs(30)),
        ..small_config()
    }
}

/// Child of the test below: a second writer process that stores a timer due in 20 ms.
#[test]
fn timer_child_stores_a_timer_due_soon() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let store = Store::open(std::path::Path::new(&dir), shared_config()).unwrap();
    assert!(!store.is_leader());
    put(&store, "T", b"soon", &[("TIMER_DELAY_MS", "20")]);
    store.close().unwrap();
}

/// On the system clock, two writer processes: a timer the other process (this test binary run
/// as a child) stores, due soon, wakes the leader's delivery thread asleep towards a timer an
/// hour away (the writer mapping's timer wake word), and the leader delivers it before that
/// sleep would have ended: it was woken by the arrival, not by a nap.
#[test]
fn a_timer_another_process_stores_wakes_the_leaders_sleeping_thread() {
    if std::env::var_os(CHILD_DIR).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let leader = Store::open(dir.path(), shared_config()).unwrap();
    assert!(leader.is_leader() && leader.delivers());
    leader.create_topic("T", 1, 6, false, false).unwrap();
    put(&leader, "T", b"late", &[("TIMER_DELAY_SEC", "3600")]);
    // The leader's thread asleep towards the late timer (or its 10 s cap): not a short poll.
    let asleep_until = asleep_towards_a_far_time(&leader);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "timer_child_stores_a_timer_due_soon",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "child: {}",
        String::from_utf8_lossy(&child.stdout)
    );
    let delivered = delivered_soon(&leader, Duration::from_secs(60));
    assert!(
        delivered < asleep_until,
        "delivered at {delivered} by a thread asleep until {asleep_until}: woken by the arrival"
    );
}

#[test]
fn retention_keeps_the_files_of_pending_timers() {
    let dir = tempfile::tempdir().unwrap();
    // Retention compares the store clock with file modification times: start at the real time.
    let clock = ManualClock::new(mqlite::util::clock::now_ms());
    let cfg = StoreConfig {
        file_reserved_time: Duration::from_secs(60),
        ..config(&clock)
    };
    let store = Store::open(dir.path(), cfg).unwrap();
    store.create_topic("T", 1, 6, false, false).unwrap();
    put(&store, "T", b"in two hours", &[("TIMER_DELAY_SEC", "7200")]);
    fill_files(&store);
    let before = commit_log_files(dir.path());
    assert!(before >= 4, "{before} files");

    clock.advance(Duration::from_secs(3_600));
    assert_eq!(
        store.delete_expired_files().unwrap(),
        0,
        "the first file holds a pending timer"
    );
    assert_eq!(commit_log_files(dir.path()), before);

    clock.advance(Duration::from_secs(3_600));
    store.deliver_due().unwrap();
    assert_eq!(bodies(&store, "T", 0), [b"in two hours"]);
    assert!(store.delete_expired_files().unwrap() >= 2);
}
