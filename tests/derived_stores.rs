//! Derived stores registered next to the consume queues (dispatch/derived.rs): a non-critical
//! store that fails or blocks never holds back consumers, the checkpoint records each store's
//! progress and recovery resumes each from its own; retention follows the store's clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mqlite::checkpoint::Checkpoint;
use mqlite::commit_log::CommitLog;
use mqlite::dispatch::derived::{DerivedStore, Progress};
use mqlite::dispatch::{DispatchRequest, Dispatcher};
use mqlite::util::clock::{now_ms, ManualClock};
use mqlite::{Error, FlushMode, GetStatus, MessageRef, Result, Store, StoreConfig, TagFilter};

use common::{read_queue, settle, small_config};

/// Generous bound for an event another thread sets; never a timing assertion.
const EVENT: Duration = Duration::from_secs(20);

/// A non-critical store that records what it is given, and can be told to fail or to block.
#[derive(Debug, Default)]
struct Probe {
    /// Its name; "probe" when empty.
    name: &'static str,
    /// Registered as critical (never declaring `quick`).
    critical: bool,
    /// `dispatch_quick` calls.
    quick_calls: std::sync::atomic::AtomicUsize,
    fail: AtomicBool,
    /// `dispatch` calls that failed (`fail` set).
    failures: std::sync::atomic::AtomicUsize,
    state: Mutex<ProbeState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct ProbeState {
    /// Commit-log offsets of the records dispatched to it, in order.
    seen: Vec<u64>,
    /// `dispatch` blocks while this is set.
    gate_closed: bool,
    /// A dispatch is waiting at the closed gate.
    blocked: bool,
    /// `(log_end, resume_from)` of the last `recover`.
    recovered: Option<(u64, u64)>,
    closed: bool,
}

impl Probe {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProbeState> {
        self.state.lock().unwrap()
    }

    /// Waits (at most `EVENT`) until `cond` holds.
    fn wait_for(&self, cond: impl Fn(&ProbeState) -> bool) {
        let (s, timeout) = self
            .changed
            .wait_timeout_while(self.lock(), EVENT, |s| !cond(s))
            .unwrap();
        assert!(!timeout.timed_out(), "event not seen: {s:?}");
    }
}

impl Dispatcher for Probe {
    fn name(&self) -> &'static str {
        if self.name.is_empty() {
            "probe"
        } else {
            self.name
        }
    }

    fn dispatch(&self, req: &DispatchRequest<'_>) -> Result<()> {
        if self.fail.load(Ordering::Acquire) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            let _guard = self.lock();
            self.changed.notify_all();
            return Err(Error::io(
                "write",
                "probe",
                std::io::Error::other("injected failure"),
            ));
        }
        let mut s = self.lock();
        while s.gate_closed {
            s.blocked = true;
            self.changed.notify_all();
            s = self.changed.wait(s).unwrap();
        }
        s.blocked = false;
        s.seen.push(req.commit_log_offset);
        self.changed.notify_all();
        Ok(())
    }

    fn dispatch_quick(&self, reqs: &[DispatchRequest<'_>]) -> Result<bool> {
        self.quick_calls.fetch_add(1, Ordering::Relaxed);
        self.dispatch_batch(reqs).map(|()| true)
    }
}

impl DerivedStore for Probe {
    fn critical(&self) -> bool {
        self.critical
    }

    fn load(&self, _abnormal: bool) -> Result<()> {
        Ok(())
    }

    fn recover(&self, _log: &CommitLog, log_end: u64, resume_from: u64) -> Result<u64> {
        self.lock().recovered = Some((log_end, resume_from));
        Ok(resume_from)
    }

    fn flush(&self, dispatched: Progress) -> Result<Progress> {
        Ok(dispatched)
    }

    fn delete_expired(&self, _log_min: u64) -> Result<usize> {
        Ok(0)
    }

    fn close(&self) {
        self.lock().closed = true;
    }
}

fn open(dir: &std::path::Path, config: StoreConfig, probe: &Arc<Probe>) -> Store {
    let extra: Vec<Arc<dyn DerivedStore>> = vec![probe.clone()];
    Store::open_with_derived(dir, config, extra).unwrap()
}

fn put(store: &Store, n: u64) {
    for i in 0..n {
        let body = common::body(i);
        store.put(&MessageRef::new("Derived", 0, &body)).unwrap();
    }
}

/// The progress table of the checkpoint of a closed store, as (name, offset).
fn recorded(dir: &std::path::Path) -> Vec<(String, u64)> {
    let (cp, _) = Checkpoint::open(&dir.join("checkpoint"), false, 0o600).unwrap();
    cp.progress()
        .into_iter()
        .map(|p| (p.name, p.offset))
        .collect()
}

#[test]
fn a_failing_non_critical_store_never_holds_back_consumers_and_resumes_from_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe::default());
    probe.fail.store(true, Ordering::Release);
    let store = open(dir.path(), small_config(), &probe);
    put(&store, 20);
    settle(&store);
    assert_eq!(read_queue(&store, "Derived", 0).len(), 20);
    // Its failure poisons nothing: the store still flushes and takes writes.
    store.flush().unwrap();
    put(&store, 5);
    let end = store.commit_log_range().1;
    store.close().unwrap();
    assert!(probe.lock().closed);
    let states = store.derived_progress();
    let cq = states.iter().find(|s| s.store.name() == "consume_queue");
    let failing = states.iter().find(|s| s.store.name() == "probe").unwrap();
    assert_eq!(cq.unwrap().dispatched.offset, end);
    assert_eq!(failing.dispatched.offset, 0);
    let error = failing.error.as_deref().unwrap();
    assert!(error.contains("injected failure"), "{error}");
    assert_eq!(store.checkpoint().unwrap().logics_dispatched_offset, end);
    assert_eq!(
        recorded(dir.path()),
        [
            ("consume_queue".to_owned(), end),
            ("probe".to_owned(), 0),
            ("index".to_owned(), end)
        ]
    );

    // Reopened with the store healthy: it resumes from its own recorded progress and gets
    // every record, while the consume queues resume at the end.
    let probe = Arc::new(Probe::default());
    let store = open(dir.path(), small_config(), &probe);
    assert_eq!(probe.lock().recovered, Some((end, 0)));
    assert_eq!(store.recovery_report().reput_from, end);
    assert_eq!(read_queue(&store, "Derived", 0).len(), 25);
    probe.wait_for(|s| s.seen.len() == 25);
    store.close().unwrap();
    assert_eq!(
        recorded(dir.path()),
        [
            ("consume_queue".to_owned(), end),
            ("probe".to_owned(), end),
            ("index".to_owned(), end)
        ]
    );
}

#[test]
fn a_blocked_non_critical_store_never_holds_back_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe::default());
    probe.lock().gate_closed = true;
    // Sync mode: records reach consumers through the flush and reput threads only.
    let config = StoreConfig {
        flush_mode: FlushMode::Sync,
        ..small_config()
    };
    let store = open(dir.path(), config, &probe);
    put(&store, 1);
    // The follower thread is now stuck inside the probe.
    probe.wait_for(|s| s.blocked);
    put(&store, 60);
    settle(&store);
    assert_eq!(read_queue(&store, "Derived", 0).len(), 61);
    assert!(probe.lock().blocked && probe.lock().seen.is_empty());
    {
        let mut s = probe.lock();
        s.gate_closed = false;
        probe.changed.notify_all();
    }
    // Close gives the freed store what it missed.
    store.close().unwrap();
    let seen = probe.lock().seen.clone();
    assert_eq!(seen.len(), 61);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in commit-log order");
}

#[test]
fn retention_by_age_follows_the_store_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(now_ms());
    let config = StoreConfig {
        file_reserved_time: Duration::from_secs(3600),
        clock: clock.clone().into(),
        ..small_config()
    };
    let file_size = config
        .commit_log_file_size
        .expect("small_config sets the file size");
    let store = Store::open(dir.path(), config).unwrap();
    let body = vec![7u8; 4000];
    for _ in 0..100 {
        store.put(&MessageRef::new("Aged", 0, &body)).unwrap();
    }
    store.flush().unwrap();
    settle(&store);
    let end = store.commit_log_range().1;
    let last_file = end - end % file_size;
    assert!(last_file >= 2 * file_size, "the test needs several files");

    // Young by the store's clock: nothing goes, however long the test really takes.
    assert_eq!(store.delete_expired_files().unwrap(), 0);
    clock.advance(Duration::from_secs(59 * 60));
    assert_eq!(store.delete_expired_files().unwrap(), 0);
    assert_eq!(store.commit_log_range().0, 0);

    // Past the retention: every file but the one being written goes (here or by the
    // retention thread), and the queue starts at the first record kept.
    clock.advance(Duration::from_secs(2 * 60));
    store.delete_expired_files().unwrap();
    assert_eq!(store.commit_log_range().0, last_file);
    let got = store
        .get_messages("Aged", 0, 0, 10, &TagFilter::all())
        .unwrap();
    assert_eq!(got.status, GetStatus::OffsetTooSmall);
    assert!(got.min_offset > 0);

    // Records are stamped by the same clock.
    store.put(&MessageRef::new("Aged", 0, b"late")).unwrap();
    settle(&store);
    let got = store
        .get_messages("Aged", 0, 100, 10, &TagFilter::all())
        .unwrap();
    let last = got.iter().next().unwrap();
    assert_eq!(last.body(), b"late");
    assert_eq!(last.store_timestamp(), clock.now_ms());
}

#[test]
fn a_store_the_checkpoint_cannot_record_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    for name in ["consume_queue", "a_name_of_17_byte", "two words"] {
        let probe: Arc<dyn DerivedStore> = Arc::new(Probe {
            name,
            ..Probe::default()
        });
        let Err(err) = Store::open_with_derived(&root, small_config(), vec![probe]) else {
            panic!("{name:?} was accepted");
        };
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    field: "derived stores",
                    ..
                }
            ),
            "{name:?}: {err}"
        );
        assert!(!root.exists(), "{name:?} created the store");
    }
}

#[test]
fn a_critical_store_without_the_quick_capability_is_never_asked_on_the_producer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe {
        critical: true,
        ..Probe::default()
    });
    let store = open(dir.path(), small_config(), &probe);
    for i in 0..20u64 {
        let body = common::body(i);
        let msg = MessageRef::new("Derived", 0, &body);
        if common::put_nowait(&store, &msg, None, |wake| wake())
            .unwrap()
            .is_none()
        {
            store.put(&msg).unwrap();
        }
    }
    settle(&store);
    assert_eq!(read_queue(&store, "Derived", 0).len(), 20);
    assert_eq!(probe.lock().seen.len(), 20);
    assert_eq!(probe.quick_calls.load(Ordering::Relaxed), 0);
    store.close().unwrap();
}

/// A critical store stuck on an error is retried with new data or every `REPUT_IDLE`, not in a
/// loop: the failure's own kick of the reput thread (meant for a producer's failed inline
/// dispatch) made the thread retry at once, keeping a CPU busy for as long as the error lasted.
#[test]
fn a_critical_store_stuck_on_an_error_is_not_retried_in_a_busy_loop() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe {
        critical: true,
        ..Probe::default()
    });
    probe.fail.store(true, Ordering::Release);
    let store = open(dir.path(), small_config(), &probe);
    let body = common::body(0);
    let msg = MessageRef::new("Derived", 0, &body);
    if common::put_nowait(&store, &msg, None, |wake| wake())
        .unwrap()
        .is_none()
    {
        store.put(&msg).unwrap();
    }
    probe.wait_for(|_| probe.failures.load(Ordering::Relaxed) > 0);
    // An observation window, not synchronisation: nothing else happens in it, and a thread
    // retrying in a loop fails thousands of times where one on its idle period fails a few.
    let window = Duration::from_millis(500);
    let before = probe.failures.load(Ordering::Relaxed);
    std::thread::sleep(window);
    let during = probe.failures.load(Ordering::Relaxed) - before;
    let idle_periods =
        (window.as_millis() / mqlite::dispatch::reput::REPUT_IDLE.as_millis()) as usize;
    assert!(during <= idle_periods + 2, "{during} retries in {window:?}");
    probe.fail.store(false, Ordering::Release);
    probe.wait_for(|s| s.seen.len() == 1);
    assert_eq!(read_queue(&store, "Derived", 0).len(), 1);
    store.close().unwrap();
}
