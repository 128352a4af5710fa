//! Kill-point crash loop (needs `--features fault-injection`): each cycle re-executes this test
//! binary as a child that runs a fixed workload on a new store with `MQLITE_KILL_AT=<point>:<n>`,
//! so the child aborts (like `kill -9` for the files) exactly at the `n`-th hit of a named
//! point inside an append, a roll, a segment creation, a checkpoint write or a meta / topic
//! config replace. The parent then reopens the store and checks it:
//!
//! - the store opens, and recovery is idempotent (a second open finds the same queues);
//! - every acknowledged message (its put returned, in sync or async mode) is present at its
//!   acknowledged queue offset and commit-log offset, with its exact body;
//! - every record in the commit log decodes (CRC checked) with a body the workload wrote, and
//!   the consume queues hold exactly the log's records: same (topic, queue, queue offset) at the
//!   same commit-log offset, each queue contiguous from 0;
//! - transactions (`check_txns`): after the first listing (which makes the copies a crash left
//!   undone) no transactional message is visible twice, none of a transaction not committed is
//!   visible in its real topic, every acknowledged commit is visible whole, a commit begun but
//!   not acknowledged is whole or absent, and the progress value is the last acknowledged one or
//!   a later begun one;
//! - every topic whose creation returned exists, `topics.json` decodes as JSON (old or new
//!   content, never torn), and the checkpoint's durable offset lies within the log.
//!
//! Points and hit counts come from a seeded RNG (`MQLITE_KILL_SEED`, printed); each point gets
//! `MQLITE_KILL_CYCLES` cycles (default 3) with `n` drawn below the hit count a calibration run
//! of the same workload measured in the parent. The run fails unless the child aborted at every
//! declared point at least once. `MQLITE_KILL_REPLAY=<point>:<n>` (optionally with
//! `MQLITE_KILL_MODE=sync|async`) replays one cycle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mqlite::message::timer::TIMER_TOPIC;
use mqlite::message::timer_id::CANCEL_QUEUE;
use mqlite::message::{properties, tags};
use mqlite::store::timer::{Source, TimerId, TimerOutcome, TimerTarget};
use mqlite::store::txn::record::OP_TOPIC;
use mqlite::store::txn::CheckPolicy;
use mqlite::util::clock::ManualClock;
use mqlite::util::kill_point::{self, POINTS};
use mqlite::{Appended, FlushMode, MessageRef, Routing, Store, StoreConfig, TagFilter};

/// Store directory of a child (its presence makes `kill_point_child` run the workload).
const CHILD_DIR: &str = "MQLITE_KILL_CHILD_DIR";
/// Flush mode of the cycle: `sync` or `async`.
const MODE: &str = "MQLITE_KILL_MODE";
const SEED: &str = "MQLITE_KILL_SEED";
const CYCLES: &str = "MQLITE_KILL_CYCLES";
const REPLAY: &str = "MQLITE_KILL_REPLAY";
const DEFAULT_SEED: u64 = 20_250_611;

const FILE_SIZE: u64 = 64 << 10;
/// Puts of the workload (a fifth of them batches of 3).
const STEPS: u64 = 160;
const TOPICS: [&str; 3] = ["KillA", "KillB", "KillC"];
/// The stores' manual clock starts here; the workload moves it to deliver delayed messages,
/// and a check reopens at this time, when none of them is due.
const START_MS: i64 = 1_700_000_000_000;

fn config(mode: FlushMode, clock: &ManualClock) -> StoreConfig {
    StoreConfig {
        clock: clock.clone().into(),
        flush_mode: mode,
        // No periodic flush during the short workload: checkpoints are the explicit flushes,
        // so the hit counts of the calibration run hold in the children.
        flush_interval: Duration::from_secs(60),
        commit_log_file_size: Some(FILE_SIZE),
        consume_queue_file_units: Some(64),
        max_message_size: Some(16 << 10),
        warm_mapped_files: false,
        // One idle mapping: files are unmapped and mapped again all the time, and idle
        // consume queues let go of their last file (mapped_file_queue/cache.rs).
        max_mapped_files: 1,
        ..Default::default()
    }
}

/// Body of message `seq`: its number, then a pattern; 100 to 1,499 bytes.
fn body(seq: u64) -> Vec<u8> {
    let len = 100 + (seq * 7919 % 1400) as usize;
    let mut b = seq.to_be_bytes().to_vec();
    b.extend((8..len).map(|k| (seq as usize * 131 + k * 17) as u8));
    b
}

/// The message number of a body, if it is one `body` makes.
fn seq_of(b: &[u8]) -> Option<u64> {
    let seq = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
    (body(seq) == b).then_some(seq)
}

/// What the workload reports as it goes (the child prints it; the parent parses it).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// `create_topic` returned.
    Topic(String),
    /// A put returned: topic, queue, queue offset, commit-log offset, message number.
    Ack(String, u32, u64, u64, u64),
    /// The timer of message `seq` is about to be cancelled.
    Cancelling(u64),
    /// Its cancel returned `Cancelled`.
    Cancelled(u64),
    /// The timer of message `seq` is about to be moved to the given time (epoch ms).
    Rescheduling(u64, i64),
    /// Its reschedule returned `Rescheduled`.
    Rescheduled(u64),
    /// A half of transaction `id` was prepared (its put returned): message number.
    Half(String, u64),
    /// Transactions are about to be committed (`true`) or rolled back, with a progress value.
    Deciding(Vec<String>, bool, Option<String>),
    /// That decision returned.
    Decided(Vec<String>, bool, Option<String>),
}

impl Event {
    fn line(&self) -> String {
        match self {
            Event::Topic(t) => format!("T {t}"),
            Event::Ack(t, q, qo, clo, seq) => format!("A {t} {q} {qo} {clo} {seq}"),
            Event::Cancelling(seq) => format!("X {seq}"),
            Event::Cancelled(seq) => format!("C {seq}"),
            Event::Rescheduling(seq, at) => format!("Y {seq} {at}"),
            Event::Rescheduled(seq) => format!("R {seq}"),
            Event::Half(id, seq) => format!("H {id} {seq}"),
            Event::Deciding(ids, commit, p) | Event::Decided(ids, commit, p) => format!(
                "{} {} {} {}",
                if matches!(self, Event::Deciding(..)) {
                    "D"
                } else {
                    "E"
                },
                ids.join(","),
                u8::from(*commit),
                p.as_deref().unwrap_or("-")
            ),
        }
    }

    fn parse(line: &str) -> Option<Event> {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["T", t] => Some(Event::Topic((*t).to_owned())),
            ["A", t, q, qo, clo, seq] => Some(Event::Ack(
                (*t).to_owned(),
                q.parse().ok()?,
                qo.parse().ok()?,
                clo.parse().ok()?,
                seq.parse().ok()?,
            )),
            ["X", seq] => Some(Event::Cancelling(seq.parse().ok()?)),
            ["C", seq] => Some(Event::Cancelled(seq.parse().ok()?)),
            ["Y", seq, at] => Some(Event::Rescheduling(seq.parse().ok()?, at.parse().ok()?)),
            ["R", seq] => Some(Event::Rescheduled(seq.parse().ok()?)),
            ["H", id, seq] => Some(Event::Half((*id).to_owned(), seq.parse().ok()?)),
            [k @ ("D" | "E"), ids, commit, p] => {
                let ids = ids.split(',').map(str::to_owned).collect();
                let commit = *commit == "1";
                let p = (*p != "-").then(|| (*p).to_owned());
                Some(match *k {
                    "D" => Event::Deciding(ids, commit, p),
                    _ => Event::Decided(ids, commit, p),
                })
            }
            _ => None,
        }
    }
}

/// The workload: two topics, puts and batches over three queues (one of them past a
/// consume-queue file), commit-log rolls, a flush (checkpoint) every 25 puts, a delayed
/// message (level 1) every 10 puts (every fourth cancelled at once, and every fourth moved an
/// hour on) and, 5 puts later, the clock a second on and the due ones delivered, a timer every
/// 10 puts (every fourth cancelled at once, and every fourth moved an hour on), a clean close
/// and reopen halfway, a third topic, and a final close. The cancels and the reschedules
/// alternate: a timer's first, then a level message's. Every 10 puts a transaction of two
/// messages (see `transaction`).
fn workload(root: &Path, mode: FlushMode, sink: &mut dyn FnMut(Event)) {
    let clock = ManualClock::new(START_MS);
    let mut store = Store::open(root, config(mode, &clock)).unwrap();
    let delay = properties::encode([("DELAY", "1")]);
    let timer = properties::encode([("TIMER_DELAY_MS", "500")]);
    for t in &TOPICS[..2] {
        store.create_topic(t, 2, 6, false, true).unwrap();
        sink(Event::Topic((*t).to_owned()));
    }
    let mut seq = 0;
    for step in 0..STEPS {
        let (topic, queue) = match step % 4 {
            0 | 1 => ("KillA", 0),
            2 => ("KillA", 1),
            _ if step > STEPS / 2 => ("KillC", 0),
            _ => ("KillB", 0),
        };
        if step % 5 == 4 {
            let bodies: Vec<Vec<u8>> = (seq..seq + 3).map(body).collect();
            let msgs: Vec<MessageRef<'_>> = bodies
                .iter()
                .map(|b| MessageRef::new(topic, queue, b))
                .collect();
            let mut out: Vec<Appended> = Vec::new();
            store.put_batch(&msgs, &mut out).unwrap();
            for a in out {
                sink(Event::Ack(
                    topic.into(),
                    queue,
                    a.queue_offset,
                    a.physical_offset,
                    seq,
                ));
                seq += 1;
            }
        } else if step % 10 == 3 {
            // Acknowledged where it is stored: the schedule topic.
            let b = body(seq);
            let put = store
                .put(&MessageRef::new(topic, queue, &b).with_properties(&delay))
                .unwrap();
            sink(Event::Ack(
                tags::SCHEDULE_TOPIC.into(),
                put.queue_id,
                put.appended.queue_offset,
                put.appended.physical_offset,
                seq,
            ));
            let id = TimerTarget::Id(TimerId::level(put.queue_id + 1, put.appended.queue_offset));
            if step % 40 == 13 {
                sink(Event::Cancelling(seq));
                let a = store.cancel_timer(id).unwrap();
                assert_eq!(a[0].outcome, TimerOutcome::Cancelled);
                sink(Event::Cancelled(seq));
            } else if step % 40 == 33 {
                let at = clock.now_ms() + 3_600_000;
                sink(Event::Rescheduling(seq, at));
                let a = store.reschedule_timer(id, at).unwrap();
                assert_eq!(a[0].outcome, TimerOutcome::Rescheduled);
                sink(Event::Rescheduled(seq));
            }
            seq += 1;
        } else if step % 10 == 7 {
            // Acknowledged where it is stored: the timer topic's one queue.
            let b = body(seq);
            let put = store
                .put(&MessageRef::new(topic, queue, &b).with_properties(&timer))
                .unwrap();
            sink(Event::Ack(
                TIMER_TOPIC.into(),
                0,
                put.appended.queue_offset,
                put.appended.physical_offset,
                seq,
            ));
            let id = TimerTarget::Id(TimerId::log(put.appended.queue_offset));
            if step % 40 == 7 {
                sink(Event::Cancelling(seq));
                let a = store.cancel_timer(id).unwrap();
                assert_eq!(a[0].outcome, TimerOutcome::Cancelled);
                sink(Event::Cancelled(seq));
            } else if step % 40 == 27 {
                let at = clock.now_ms() + 3_600_000;
                sink(Event::Rescheduling(seq, at));
                let a = store.reschedule_timer(id, at).unwrap();
                assert_eq!(a[0].outcome, TimerOutcome::Rescheduled);
                sink(Event::Rescheduled(seq));
            }
            seq += 1;
        } else if step % 10 == 1 {
            transaction(&store, step, sink);
        } else {
            let b = body(seq);
            let a = store
                .put(&MessageRef::new(topic, queue, &b))
                .unwrap()
                .appended;
            sink(Event::Ack(
                topic.into(),
                queue,
                a.queue_offset,
                a.physical_offset,
                seq,
            ));
            seq += 1;
        }
        if step % 10 == 8 {
            clock.advance(Duration::from_secs(1));
            store.deliver_due().unwrap();
        }
        if step % 25 == 24 {
            store.flush().unwrap();
        }
        if step == STEPS / 2 {
            store.close().unwrap();
            store = Store::open(root, config(mode, &clock)).unwrap();
            store.create_topic(TOPICS[2], 1, 6, false, true).unwrap();
            sink(Event::Topic(TOPICS[2].to_owned()));
        }
    }
    store.close().unwrap();
}

/// Message numbers of transactions start here (apart from the other messages').
const TXN_BASE: u64 = 1 << 32;
/// The producer group of the workload's transactions.
const TXN_GROUP: &str = "KillG";
/// The progress key the workload's commits set.
const TXN_KEY: &str = "kill";

/// Transaction `tx<step>`: two halves (KillA queue 1, KillB queue 0), then by `step / 10 % 4`:
/// committed with progress `step`; rolled back; left open, and every open one claimed for a
/// check; committed together with the one left open before it, with progress `step`.
fn transaction(store: &Store, step: u64, sink: &mut dyn FnMut(Event)) {
    let id = format!("tx{step}");
    let n = step / 10;
    for (k, (topic, queue)) in [("KillA", 1), ("KillB", 0)].into_iter().enumerate() {
        let seq = TXN_BASE + 2 * n + k as u64;
        let b = body(seq);
        let put = store
            .txn_prepare(
                &MessageRef::new(topic, queue, &b),
                Routing::Queue(queue),
                TXN_GROUP,
                &id,
            )
            .unwrap();
        sink(Event::Ack(
            mqlite::store::txn::record::HALF_TOPIC.into(),
            0,
            put.appended.queue_offset,
            put.appended.physical_offset,
            seq,
        ));
        sink(Event::Half(id.clone(), seq));
    }
    let progress = step.to_string();
    let (ids, commit, progress) = match n % 4 {
        0 => (vec![id], true, Some(progress)),
        1 => (vec![id], false, None),
        2 => {
            let policy = CheckPolicy {
                timeout_ms: 0,
                interval_ms: 0,
                max_checks: 15,
                limit: 16,
            };
            store.txn_claim_checks(TXN_GROUP, policy).unwrap();
            return;
        }
        _ => (vec![format!("tx{}", step - 10), id], true, Some(progress)),
    };
    sink(Event::Deciding(ids.clone(), commit, progress.clone()));
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    store
        .txn_end(&refs, commit, progress.as_deref().map(|p| (TXN_KEY, p)))
        .unwrap();
    sink(Event::Decided(ids, commit, progress));
}

/// The transaction checks after a crash (the caller then reads the store): a first listing
/// makes the copies a crash left undone; then no transactional message is visible twice, none
/// of a transaction not committed is visible, every acknowledged commit is visible whole, a
/// commit begun and not acknowledged is whole or absent, and the progress is the last
/// acknowledged one's or a later begun one's.
fn check_txns(store: &Store, events: &[Event]) -> Result<(), String> {
    let states: BTreeMap<String, &str> = store
        .txn_list(None, true)
        .map_err(|e| format!("txn_list: {e}"))?
        .into_iter()
        .map(|t| (t.id, t.state))
        .collect();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for t in TOPICS {
        for q in 0..2 {
            if let Ok(got) = store.get_messages(t, q, 0, 1000, &TagFilter::all()) {
                for v in got.iter() {
                    match seq_of(v.body()) {
                        Some(seq) if seq >= TXN_BASE => *seen.entry(seq).or_default() += 1,
                        _ => {}
                    }
                }
            }
        }
    }
    let mut halves: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut seq_txn: BTreeMap<u64, &str> = BTreeMap::new();
    let mut decided: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for e in events {
        match e {
            Event::Half(id, seq) => {
                halves.entry(id).or_default().push(*seq);
                seq_txn.insert(*seq, id);
            }
            Event::Deciding(ids, commit, _) => {
                for id in ids {
                    decided.insert(id, (*commit, false));
                }
            }
            Event::Decided(ids, commit, _) => {
                for id in ids {
                    decided.insert(id, (*commit, true));
                }
            }
            _ => {}
        }
    }
    for (seq, n) in &seen {
        let id = seq_txn.get(seq).copied().unwrap_or("?");
        if *n != 1 {
            return Err(format!("message {seq} of {id} visible {n} times"));
        }
        let state = states.get(id).copied().unwrap_or("unknown");
        if decided.get(id).is_none_or(|(commit, _)| !commit) || state != "committed" {
            return Err(format!(
                "message {seq} of {id} ({state}) visible uncommitted"
            ));
        }
    }
    for (id, (commit, acked)) in &decided {
        let state = states.get(*id).copied().unwrap_or("unknown");
        let want: &[&str] = match (commit, acked) {
            (true, true) => &["committed"],
            (true, false) => &["committed", "open"],
            (false, true) => &["rolled back"],
            (false, false) => &["rolled back", "open"],
        };
        if !want.contains(&state) {
            return Err(format!("{id}: {state}, wanted one of {want:?}"));
        }
        if state == "committed" {
            for seq in halves.get(id).map(Vec::as_slice).unwrap_or(&[]) {
                if !seen.contains_key(seq) {
                    return Err(format!("committed {id} lost its message {seq}"));
                }
            }
        }
    }
    let last_acked = events
        .iter()
        .rposition(|e| matches!(e, Event::Decided(_, _, Some(_))));
    if let Some(at) = last_acked {
        let allowed: Vec<&str> = events[at..]
            .iter()
            .filter_map(|e| match e {
                Event::Deciding(_, _, Some(p)) | Event::Decided(_, _, Some(p)) => Some(p.as_str()),
                _ => None,
            })
            .collect();
        let got = store
            .txn_progress(TXN_KEY)
            .map_err(|e| format!("txn_progress: {e}"))?;
        if !got.as_deref().is_some_and(|p| allowed.contains(&p)) {
            return Err(format!("progress {got:?}, wanted one of {allowed:?}"));
        }
    }
    Ok(())
}

fn mode_name(mode: FlushMode) -> &'static str {
    match mode {
        FlushMode::Sync => "sync",
        _ => "async",
    }
}

/// Child entry: runs the workload on `$MQLITE_KILL_CHILD_DIR` (in the parent, without it, does
/// nothing), printing each event once it happened.
#[test]
fn kill_point_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let mode = match std::env::var(MODE).as_deref() {
        Ok("sync") => FlushMode::Sync,
        _ => FlushMode::Async,
    };
    let mut out = std::io::stdout().lock();
    workload(Path::new(&dir), mode, &mut |e| {
        writeln!(out, "{}", e.line()).unwrap();
        out.flush().unwrap();
    });
    writeln!(out, "DONE").unwrap();
}

/// How a child ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Aborted at the armed point.
    Killed,
    /// Finished the workload: the point was not hit `n` times in this run.
    Finished,
}

/// One child run on `root`, armed at `point:n`; returns its outcome and the events it
/// printed before it ended. Any other end (a panic, an error exit) fails with its stderr.
fn run_child(root: &Path, point: &str, n: u64, mode: FlushMode) -> (Outcome, Vec<Event>) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "kill_point_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, root)
        .env(MODE, mode_name(mode))
        .env(kill_point::ENV, format!("{point}:{n}"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // libtest prints "running 1 test" and "test kill_point_child ... " around the child's
    // lines; only whole lines that parse are events (a line cut by the abort is not).
    let events = stdout.lines().filter_map(Event::parse).collect();
    let outcome = if out.status.signal() == Some(libc::SIGABRT) {
        Outcome::Killed
    } else if out.status.success() && stdout.lines().any(|l| l.ends_with("DONE")) {
        Outcome::Finished
    } else {
        panic!(
            "child armed at {point}:{n} ended with {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    (outcome, events)
}

/// What a reopened store holds, for the idempotence check and the figures.
#[derive(Debug, PartialEq, Eq)]
struct Contents {
    /// (topic, queue, queue offset) -> (commit-log offset, message number), from the queues.
    queued: BTreeMap<(String, u32, u64), (u64, u64)>,
    /// Records found walking the commit log.
    records: usize,
}

/// Reopens the crashed store at `root` and checks it against the events the child printed.
fn check_store(root: &Path, events: &[Event]) -> Result<Contents, String> {
    let clock = ManualClock::new(START_MS);
    let store =
        Store::open(root, config(FlushMode::Async, &clock)).map_err(|e| format!("open: {e}"))?;
    check_txns(&store, events)?;
    let contents = read_contents(&store)?;
    let topics: BTreeSet<String> = store
        .topics()
        .map_err(|e| format!("topics: {e}"))?
        .into_iter()
        .map(|t| t.topic_name)
        .collect();
    for e in events {
        match e {
            Event::Topic(t) if !topics.contains(t) => {
                return Err(format!("topic {t} was created but is gone"))
            }
            Event::Ack(t, q, qo, clo, seq) => match contents.queued.get(&(t.clone(), *q, *qo)) {
                Some(&(c, s)) if c == *clo && s == *seq => {}
                found => {
                    return Err(format!(
                    "acknowledged {t}/{q}@{qo} (log {clo}, message {seq}) recovered as {found:?}"
                ))
                }
            },
            _ => {}
        }
    }
    if let Some(cp) = store.checkpoint() {
        let (_, end) = store.commit_log_range();
        if cp.confirm_phy_offset > end {
            return Err(format!(
                "checkpoint durable offset {} beyond the log end {end}",
                cp.confirm_phy_offset
            ));
        }
    }
    store.close().map_err(|e| format!("close: {e}"))?;
    for name in ["topics.json", "topics.json.bak"] {
        let path = root.join("config").join(name);
        if let Ok(bytes) = std::fs::read(&path) {
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .map_err(|e| format!("{name} is torn: {e}"))?;
        }
    }
    let again =
        Store::open(root, config(FlushMode::Async, &clock)).map_err(|e| format!("reopen: {e}"))?;
    let second = read_contents(&again)?;
    again.close().map_err(|e| format!("close: {e}"))?;
    if second != contents {
        return Err("a second recovery changed the store".into());
    }
    Ok(contents)
}

/// Every queue of every topic read from 0, checked against a walk of the commit log.
fn read_contents(store: &Store) -> Result<Contents, String> {
    let mut queued = BTreeMap::new();
    for t in store.topics().map_err(|e| format!("topics: {e}"))? {
        for q in 0..t.write_queue_nums {
            let (low, high) = store
                .queue_offsets(&t.topic_name, q)
                .map_err(|e| format!("offsets of {}/{q}: {e}", t.topic_name))?;
            if low != 0 {
                return Err(format!("{}/{q} starts at {low}", t.topic_name));
            }
            let got = store
                .get_messages(&t.topic_name, q, 0, 1000, &TagFilter::all())
                .map_err(|e| format!("read of {}/{q}: {e}", t.topic_name))?;
            let mut expect = 0;
            for v in got.iter() {
                let seq = record_seq(&t.topic_name, q, v.body()).ok_or_else(|| {
                    format!(
                        "{}/{q}@{}: a body the workload never wrote",
                        t.topic_name,
                        v.queue_offset()
                    )
                })?;
                if v.queue_offset() != expect {
                    return Err(format!(
                        "{}/{q}: offset {} where {expect} was due",
                        t.topic_name,
                        v.queue_offset()
                    ));
                }
                queued.insert(
                    (t.topic_name.clone(), q, expect),
                    (v.physical_offset(), seq),
                );
                expect += 1;
            }
            if expect != high {
                return Err(format!(
                    "{}/{q}: read {expect} messages, max offset {high}",
                    t.topic_name
                ));
            }
        }
    }
    // The log's records, file by file: a record that does not decode ends a file (its
    // END_OF_FILE blank) or the log.
    let (mut at, end) = store.commit_log_range();
    let mut logged = BTreeMap::new();
    while at < end {
        let rec = store.get_by_offset(at, |v| {
            (
                v.topic().to_owned(),
                v.queue_id(),
                v.queue_offset(),
                v.bytes().len(),
                record_seq(v.topic(), v.queue_id(), v.body()),
            )
        });
        match rec {
            Ok((topic, q, qo, len, seq)) => {
                let seq = seq.ok_or_else(|| {
                    format!("log record at {at}: a body the workload never wrote")
                })?;
                logged.insert((topic, q, qo), (at, seq));
                at += len as u64;
            }
            Err(_) if at % FILE_SIZE != 0 => at = (at / FILE_SIZE + 1) * FILE_SIZE,
            Err(e) => return Err(format!("log record at {at}: {e}")),
        }
    }
    if logged != queued {
        let only_log: Vec<_> = logged
            .keys()
            .filter(|k| !queued.contains_key(*k))
            .take(5)
            .collect();
        let only_cq: Vec<_> = queued
            .keys()
            .filter(|k| !logged.contains_key(*k))
            .take(5)
            .collect();
        return Err(format!(
            "consume queues disagree with the log: only in the log {only_log:?}, only in the queues {only_cq:?}"
        ));
    }
    Ok(Contents {
        records: logged.len(),
        queued,
    })
}

/// The message number of a record's body; `CHANGE` for a timer's cancel or reschedule record
/// (its body is the timer's id).
fn record_seq(topic: &str, queue: u32, body: &[u8]) -> Option<u64> {
    if topic == TIMER_TOPIC && queue == CANCEL_QUEUE {
        let id = std::str::from_utf8(body).ok()?;
        return TimerId::parse(id).map(|_| CHANGE);
    }
    if topic == OP_TOPIC {
        return Some(CHANGE);
    }
    seq_of(body)
}

/// `record_seq` of a cancel or reschedule record, or a transaction's op record.
const CHANGE: u64 = u64::MAX;

/// xorshift64*, seeded.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Runs one cycle; panics with the seed, the point and the replay command on a failure.
fn cycle(point: &str, n: u64, mode: FlushMode, seed: u64) -> (Outcome, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (outcome, events) = run_child(dir.path(), point, n, mode);
    match check_store(dir.path(), &events) {
        Ok(c) => (outcome, events.len(), c.records),
        Err(problem) => panic!(
            "after a kill at {point}:{n} ({} mode, seed {seed}, {outcome:?}): {problem}\n\
             replay: MQLITE_KILL_REPLAY={point}:{n} MQLITE_KILL_MODE={} \
             cargo test --features fault-injection --test kill_points",
            mode_name(mode),
            mode_name(mode)
        ),
    }
}

#[test]
fn kill_points_crash_loop() {
    assert!(
        std::env::var_os(kill_point::ENV).is_none(),
        "{} would abort this parent; use {REPLAY}=<point>:<n> to replay a cycle",
        kill_point::ENV
    );
    let started = Instant::now();
    if let Ok(replay) = std::env::var(REPLAY) {
        let (point, n) = replay
            .rsplit_once(':')
            .expect("MQLITE_KILL_REPLAY=<point>:<n>");
        let mode = match std::env::var(MODE).as_deref() {
            Ok("async") => FlushMode::Async,
            _ => FlushMode::Sync,
        };
        let r = cycle(point, n.parse().expect("a hit number"), mode, 0);
        println!("replayed {replay} ({}): {r:?}", mode_name(mode));
        return;
    }
    let seed = std::env::var(SEED)
        .map(|s| s.parse().expect("MQLITE_KILL_SEED is a u64"))
        .unwrap_or(DEFAULT_SEED);
    let per_point: u64 = std::env::var(CYCLES)
        .map(|s| s.parse().expect("MQLITE_KILL_CYCLES is a count"))
        .unwrap_or(3);
    println!("kill points: seed {seed} ({SEED} to change, {REPLAY}=<point>:<n> to replay one)");

    // Calibration: the same workload in this process, unarmed, counts each point's hits.
    let dir = tempfile::tempdir().unwrap();
    workload(dir.path(), FlushMode::Sync, &mut |_| {});
    let calibrated: BTreeMap<&str, u64> =
        POINTS.iter().map(|p| (*p, kill_point::hits(p))).collect();
    println!("hits per run of the workload: {calibrated:?}");
    for (p, hits) in &calibrated {
        assert!(*hits > 0, "the workload never reaches kill point {p}");
    }

    let mut rng = Rng(seed | 1);
    let mut killed: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut cycles, mut acked, mut records, mut finished) = (0, 0, 0, 0);
    for round in 0..=per_point {
        for &point in POINTS {
            // The extra round only retries points no child aborted at, at their first hit.
            let n = if round < per_point {
                1 + rng.below(calibrated[point])
            } else if killed.contains_key(point) {
                continue;
            } else {
                1
            };
            let mode = if rng.below(2) == 0 {
                FlushMode::Sync
            } else {
                FlushMode::Async
            };
            println!(
                "cycle {cycles}: {point}:{n} {} (seed {seed})",
                mode_name(mode)
            );
            let (outcome, events, recs) = cycle(point, n, mode, seed);
            cycles += 1;
            acked += events;
            records += recs;
            match outcome {
                Outcome::Killed => *killed.entry(point).or_default() += 1,
                Outcome::Finished => finished += 1,
            }
        }
    }
    let summary = serde_json::json!({
        "seed": seed,
        "cycles": cycles,
        "kill_points_declared": POINTS.len(),
        "kill_points_covered": killed.len(),
        "kills_per_point": killed,
        "cycles_that_finished_before_the_hit": finished,
        "events_checked": acked,
        "records_checked": records,
        "seconds": started.elapsed().as_secs_f64(),
    });
    println!("kill_points: {summary:#}");
    if let Some(out) = std::env::var_os("MQLITE_RELIABILITY_DIR") {
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(
            Path::new(&out).join("kill_points.json"),
            format!("{summary:#}"),
        )
        .unwrap();
    }
    let covered: Vec<&str> = killed.keys().copied().collect();
    let mut declared: Vec<&str> = POINTS.to_vec();
    declared.sort_unstable();
    assert_eq!(
        covered, declared,
        "kill points a child aborted at vs declared (seed {seed})"
    );
}

/// A kill after a delayed message's re-put and before its level's offset is recorded: the next
/// open finds the delivered copy's id (`L<level>:<offset>`) in the log and delivers that
/// message no second time; none is lost, and none that was cancelled is delivered.
#[test]
fn a_kill_between_a_delivery_and_its_offset_delivers_every_delayed_message_once() {
    let point = "schedule.delivered_unrecorded";
    for (n, mode) in [(1, FlushMode::Sync), (3, FlushMode::Async)] {
        let dir = tempfile::tempdir().unwrap();
        let (outcome, events) = run_child(dir.path(), point, n, mode);
        assert_eq!(outcome, Outcome::Killed, "{point}:{n}");
        check_store(dir.path(), &events).unwrap();
        let delayed: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Ack(t, _, _, _, seq) if t == tags::SCHEDULE_TOPIC => Some(*seq),
                _ => None,
            })
            .collect();
        let cancelled = |seq: &u64| events.contains(&Event::Cancelling(*seq));
        assert!(delayed.len() >= n as usize, "{delayed:?}");

        // A day later every pending message is due.
        let clock = ManualClock::new(START_MS + 86_400_000);
        let store = Store::open(dir.path(), config(mode, &clock)).unwrap();
        while store.deliver_due().unwrap() > 0 {}
        let mut copies: BTreeMap<u64, usize> = BTreeMap::new();
        for t in TOPICS {
            for q in 0..2 {
                if let Ok(got) = store.get_messages(t, q, 0, 1000, &TagFilter::all()) {
                    for v in got.iter() {
                        let seq = seq_of(v.body()).unwrap();
                        if delayed.contains(&seq) {
                            *copies.entry(seq).or_default() += 1;
                        }
                    }
                }
            }
        }
        for seq in &delayed {
            assert_eq!(
                copies.get(seq).copied().unwrap_or(0),
                usize::from(!cancelled(seq)),
                "delayed message {seq} delivered once unless cancelled ({point}:{n}): {copies:?}"
            );
        }
        store.close().unwrap();
    }
}

/// The acknowledged timers of a run, of both sources, by message number: (timer id, whether a
/// cancel of it began, the time a reschedule of it asked for).
fn timers_of(events: &[Event]) -> BTreeMap<u64, (TimerId, bool, Option<i64>)> {
    let mut timers = BTreeMap::new();
    for e in events {
        match e {
            Event::Ack(t, _, qo, _, seq) if t == TIMER_TOPIC => {
                timers.insert(*seq, (TimerId::log(*qo), false, None));
            }
            Event::Ack(t, q, qo, _, seq) if t == tags::SCHEDULE_TOPIC => {
                timers.insert(*seq, (TimerId::level(q + 1, *qo), false, None));
            }
            Event::Cancelling(seq) => timers.get_mut(seq).unwrap().1 = true,
            Event::Rescheduling(seq, at) => timers.get_mut(seq).unwrap().2 = Some(*at),
            _ => {}
        }
    }
    timers
}

/// Opens the crashed store at `root` with the clock at `at_ms`, delivers everything due and
/// counts the copies of each message of `timers` in the topics.
fn timer_copies(
    root: &Path,
    mode: FlushMode,
    at_ms: i64,
    timers: &BTreeMap<u64, (TimerId, bool, Option<i64>)>,
) -> (Store, BTreeMap<u64, usize>) {
    let clock = ManualClock::new(at_ms);
    let store = Store::open(root, config(mode, &clock)).unwrap();
    while store.deliver_due().unwrap() > 0 {}
    let mut copies: BTreeMap<u64, usize> = BTreeMap::new();
    for t in TOPICS {
        for q in 0..2 {
            if let Ok(got) = store.get_messages(t, q, 0, 1000, &TagFilter::all()) {
                for v in got.iter() {
                    let seq = seq_of(v.body()).unwrap();
                    if timers.contains_key(&seq) {
                        *copies.entry(seq).or_default() += 1;
                    }
                }
            }
        }
    }
    (store, copies)
}

/// A kill after a timer's re-put and before its progress is recorded: the next open finds the
/// delivered copy's timer id in the log and delivers that timer no second time; none is lost,
/// and none that was cancelled is delivered.
#[test]
fn a_kill_between_a_timer_delivery_and_its_progress_delivers_every_timer_once() {
    let point = "timer.delivered_unrecorded";
    for (n, mode) in [(1, FlushMode::Sync), (3, FlushMode::Async)] {
        let dir = tempfile::tempdir().unwrap();
        let (outcome, events) = run_child(dir.path(), point, n, mode);
        assert_eq!(outcome, Outcome::Killed, "{point}:{n}");
        check_store(dir.path(), &events).unwrap();
        let timers = timers_of(&events);
        assert!(timers.len() >= n as usize, "{timers:?}");

        // A day later every pending timer is due.
        let (store, copies) = timer_copies(dir.path(), mode, START_MS + 86_400_000, &timers);
        for (seq, (_, cancelled, _)) in &timers {
            let expect = usize::from(!cancelled);
            assert_eq!(
                copies.get(seq).copied().unwrap_or(0),
                expect,
                "timer {seq} ({point}:{n}): {copies:?}"
            );
        }
        assert_eq!(store.pending_timers(), 0);
        store.close().unwrap();
    }
}

/// A kill after a cancel record was appended, before the cancel returned: the timer is never
/// delivered (the restart's scan finds the record), a second cancel says it was cancelled,
/// and every other timer is delivered once. The first cancel of the workload is a timer-log
/// timer's, the second a delay-level message's: both kinds are killed after their record.
#[test]
fn a_kill_after_a_cancel_record_never_delivers_that_timer() {
    let point = "timer.cancel_appended";
    for (n, mode, level) in [(1, FlushMode::Sync, false), (2, FlushMode::Async, true)] {
        let dir = tempfile::tempdir().unwrap();
        let (outcome, events) = run_child(dir.path(), point, n, mode);
        assert_eq!(outcome, Outcome::Killed, "{point}:{n}");
        check_store(dir.path(), &events).unwrap();
        let timers = timers_of(&events);
        let unanswered: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Cancelling(seq) if !events.contains(&Event::Cancelled(*seq)) => Some(*seq),
                _ => None,
            })
            .collect();
        assert_eq!(unanswered.len(), 1, "{events:?}");
        let (store, copies) = timer_copies(dir.path(), mode, START_MS + 86_400_000, &timers);
        for (seq, (_, cancelled, _)) in &timers {
            let expect = usize::from(!cancelled);
            assert_eq!(
                copies.get(seq).copied().unwrap_or(0),
                expect,
                "timer {seq} ({point}:{n}): {copies:?}"
            );
        }
        let (id, _, _) = timers[&unanswered[0]];
        assert_eq!(
            matches!(id.source, Source::Level(_)),
            level,
            "{id} ({point}:{n})"
        );
        let a = store.cancel_timer(TimerTarget::Id(id)).unwrap();
        assert_eq!(a[0].outcome, TimerOutcome::AlreadyCancelled, "{id}");
        store.close().unwrap();
    }
}

/// A kill after a reschedule record was appended, before the reschedule returned: the timer
/// is not delivered at its old time, and is delivered once at its new one. The first
/// reschedule of the workload is a timer-log timer's, the second a delay-level message's.
#[test]
fn a_kill_after_a_reschedule_record_delivers_at_the_new_time_once() {
    let point = "timer.reschedule_appended";
    for (n, mode, level) in [(1, FlushMode::Sync, false), (2, FlushMode::Async, true)] {
        let dir = tempfile::tempdir().unwrap();
        let (outcome, events) = run_child(dir.path(), point, n, mode);
        assert_eq!(outcome, Outcome::Killed, "{point}:{n}");
        check_store(dir.path(), &events).unwrap();
        let timers = timers_of(&events);
        let (seq, at) = events
            .iter()
            .find_map(|e| match e {
                Event::Rescheduling(seq, at) if !events.contains(&Event::Rescheduled(*seq)) => {
                    Some((*seq, *at))
                }
                _ => None,
            })
            .unwrap();
        let (id, _, _) = timers[&seq];
        assert_eq!(
            matches!(id.source, Source::Level(_)),
            level,
            "{id} ({point}:{n})"
        );
        // Just before the new time every timer with its old time is due: not this one.
        let (store, copies) = timer_copies(dir.path(), mode, at - 1, &timers);
        assert_eq!(copies.get(&seq), None, "{point}:{n}");
        store.close().unwrap();
        drop(store);
        let (store, copies) = timer_copies(dir.path(), mode, at, &timers);
        assert_eq!(copies.get(&seq), Some(&1), "{point}:{n}");
        for (s, (_, cancelled, _)) in &timers {
            assert_eq!(
                copies.get(s).copied().unwrap_or(0),
                usize::from(!cancelled),
                "{s}"
            );
        }
        store.close().unwrap();
    }
}

/// A kill after `timerProgress.json` was written and before its mirror `delayOffset.json`:
/// the next open takes the larger offset of the two, so no delayed message is delivered twice,
/// and none the workload moved an hour on (its move recorded by the progress only) is lost.
/// The kills fall at the writes that follow the first level message's move (the pass that
/// steps over it) and around them.
#[test]
fn a_kill_between_the_progress_and_its_mirror_repeats_and_loses_no_delayed_message() {
    let point = "timer.progress_written";
    for n in [3, 4, 5] {
        let mode = FlushMode::Sync;
        let dir = tempfile::tempdir().unwrap();
        let (outcome, events) = run_child(dir.path(), point, n, mode);
        assert_eq!(outcome, Outcome::Killed, "{point}:{n}");
        check_store(dir.path(), &events).unwrap();
        let timers = timers_of(&events);
        let (store, copies) = timer_copies(dir.path(), mode, START_MS + 86_400_000, &timers);
        for (seq, (id, cancelled, _)) in &timers {
            assert_eq!(
                copies.get(seq).copied().unwrap_or(0),
                usize::from(!cancelled),
                "{id} ({point}:{n}): {copies:?}"
            );
        }
        assert_eq!(store.pending_timers(), 0, "{point}:{n}");
        store.close().unwrap();
    }
}

/// A kill after a commit's op record and before its copies, between two appends of copies, after a
/// check claim before the checker asks its listener, and inside the snapshot's replace: the
/// reopened store passes the transaction checks (`check_txns`: nothing lost, nothing twice,
/// nothing uncommitted visible), and a commit killed after its record is committed whole.
#[test]
fn a_kill_inside_a_commit_a_check_or_a_snapshot_loses_and_repeats_no_transactional_message() {
    for (point, n, mode) in [
        ("txn.decided", 1, FlushMode::Sync),
        ("txn.decided", 3, FlushMode::Async),
        ("txn.copy_made", 1, FlushMode::Async),
        ("txn.copy_made", 5, FlushMode::Sync),
        ("txn.check_claimed", 1, FlushMode::Sync),
        ("txn.snapshot_before_rename", 1, FlushMode::Async),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (outcome, events) = run_child(dir.path(), point, n, mode);
        assert_eq!(outcome, Outcome::Killed, "{point}:{n}");
        check_store(dir.path(), &events).unwrap_or_else(|e| panic!("{point}:{n}: {e}"));
        let unanswered: Vec<&Vec<String>> = events
            .iter()
            .filter_map(|e| match e {
                Event::Deciding(ids, true, p)
                    if !events.contains(&Event::Decided(ids.clone(), true, p.clone())) =>
                {
                    Some(ids)
                }
                _ => None,
            })
            .collect();
        if point != "txn.decided" && point != "txn.copy_made" {
            continue;
        }
        // The decision is in the log: committed, whatever the copies' state at the kill.
        let clock = ManualClock::new(START_MS);
        let store = Store::open(dir.path(), config(mode, &clock)).unwrap();
        let states: BTreeMap<String, &str> = store
            .txn_list(None, true)
            .unwrap()
            .into_iter()
            .map(|t| (t.id, t.state))
            .collect();
        assert_eq!(unanswered.len(), 1, "{point}:{n}: {events:?}");
        for id in unanswered[0] {
            assert_eq!(states[id], "committed", "{id} ({point}:{n})");
        }
        store.close().unwrap();
    }
}
