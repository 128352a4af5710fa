//! Several processes writing one store (`StoreConfig::shared_writers`,
//! docs/design-many-writers.md). The test binary runs itself as children that open the store
//! shared and send (single puts and batches) to a few queues of one topic, printing an `ACK`
//! line for each acknowledged send; the parent, a shared writer too, checks what every process
//! sees: each acknowledged message exactly once, queue offsets contiguous, each child's own
//! order kept within a queue, then again after reopening the store exclusively.
//!
//! - An exclusive open and shared opens refuse each other (`StoreLocked`), both ways.
//! - Three children send concurrently through rolls of small commit-log files.
//! - (`fault-injection`) A child aborts at a kill point inside its append (record written, or
//!   the log just rolled), holding the append lock; two others, held on their stdin until it is dead (a cause, not a timer), go on
//!   sending without reopening, and the next one to lock repairs what it left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::small_config;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

/// The store directory of a child (its presence makes the child entry point act).
const CHILD_DIR: &str = "MQLITE_SHARED_CHILD_DIR";
/// The child's number, in its messages' bodies.
const CHILD_ID: &str = "MQLITE_SHARED_CHILD_ID";
/// Set: the child sends half its messages, then waits for a line on its stdin.
const CHILD_PAUSE: &str = "MQLITE_SHARED_CHILD_PAUSE";

const TOPIC: &str = "Shared";
const QUEUES: u32 = 3;
/// Messages per child, in groups of `GROUP` to one queue; every fourth group is one batch.
const PER_CHILD: u64 = 1200;
const GROUP: u64 = 5;

/// Opens that must succeed wait for the store's locks: a child another test of this binary
/// forks holds a copy of every descriptor until it execs, and with it their locks.
const LOCK_WAIT: Duration = Duration::from_secs(30);

fn shared() -> StoreConfig {
    StoreConfig {
        shared_writers: true,
        lock_wait: Some(LOCK_WAIT),
        ..small_config()
    }
}

/// `shared()` failing at once: for opens that must be refused.
fn shared_now() -> StoreConfig {
    StoreConfig {
        lock_wait: None,
        ..shared()
    }
}

/// Message `i` of child `id`: `"<id>:<i>:"` padded to a length that varies with `i`.
fn body_of(id: u64, i: u64) -> Vec<u8> {
    let mut b = format!("{id}:{i}:").into_bytes();
    b.resize(40 + (i * 13 % 90) as usize, b'x');
    b
}

fn parse(body: &[u8]) -> (u64, u64) {
    let text = std::str::from_utf8(body).unwrap();
    let mut parts = text.split(':');
    let id = parts.next().unwrap().parse().unwrap();
    let i = parts.next().unwrap().parse().unwrap();
    (id, i)
}

fn queue_of(i: u64) -> u32 {
    ((i / GROUP) % u64::from(QUEUES)) as u32
}

/// Child: sends its `PER_CHILD` messages, printing `ACK <i>` for each acknowledged one.
#[test]
fn shared_child_sends() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let id: u64 = std::env::var(CHILD_ID).unwrap().parse().unwrap();
    let store = Store::open(Path::new(&dir), shared()).unwrap();
    let mut out = std::io::stdout().lock();
    for g in 0..PER_CHILD / GROUP {
        if g == PER_CHILD / GROUP / 2 && std::env::var_os(CHILD_PAUSE).is_some() {
            writeln!(out, "PAUSED").unwrap();
            out.flush().unwrap();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
        }
        let first = g * GROUP;
        let q = queue_of(first);
        let bodies: Vec<Vec<u8>> = (first..first + GROUP).map(|i| body_of(id, i)).collect();
        if g % 4 == 3 {
            let msgs: Vec<MessageRef<'_>> = bodies
                .iter()
                .map(|b| MessageRef::new(TOPIC, q, b))
                .collect();
            let mut appended = Vec::new();
            store.put_batch(&msgs, &mut appended).unwrap();
            for i in first..first + GROUP {
                writeln!(out, "ACK {i}").unwrap();
            }
        } else {
            for (i, b) in (first..).zip(&bodies) {
                store.put(&MessageRef::new(TOPIC, q, b)).unwrap();
                writeln!(out, "ACK {i}").unwrap();
            }
        }
        out.flush().unwrap();
    }
    store.close().unwrap();
}

fn spawn(root: &Path, id: u64, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "shared_child_sends",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_DIR, root)
    .env(CHILD_ID, id.to_string())
    .env_remove(CHILD_PAUSE)
    .env_remove("MQLITE_KILL_AT")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// The indices a child's output acknowledged.
fn acks(stdout: &[u8]) -> BTreeSet<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.split_once("ACK ").map(|(_, i)| i.trim().parse().unwrap()))
        .collect()
}

/// Every message of every queue, checked: offsets contiguous from 0, each (child, index)
/// once, each child's indices increasing within a queue. Returns what each child has.
fn contents(store: &Store) -> BTreeMap<u64, BTreeSet<u64>> {
    let mut seen: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for q in 0..QUEUES {
        let mut at = 0;
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        loop {
            let r = store
                .get_messages(TOPIC, q, at, 256, &TagFilter::all())
                .unwrap();
            if r.records.is_empty() {
                break;
            }
            for v in r.iter() {
                assert_eq!(v.queue_offset(), at, "queue {q}: offsets are contiguous");
                at += 1;
                let (id, i) = parse(v.body());
                if id == u64::MAX {
                    continue;
                }
                assert_eq!(queue_of(i), q, "child {id} message {i} in queue {q}");
                if let Some(&prev) = last.get(&id) {
                    assert!(prev < i, "child {id}: {i} after {prev} in queue {q}");
                }
                last.insert(id, i);
                assert!(seen.entry(id).or_default().insert(i), "{id}:{i} twice");
            }
        }
    }
    seen
}

fn all() -> BTreeSet<u64> {
    (0..PER_CHILD).collect()
}

fn exclusive() -> StoreConfig {
    StoreConfig {
        lock_wait: Some(LOCK_WAIT),
        ..small_config()
    }
}

/// `exclusive()` failing at once: for opens that must be refused.
fn exclusive_now() -> StoreConfig {
    small_config()
}

#[test]
fn an_exclusive_writer_refuses_shared_writers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), exclusive()).unwrap();
    let err = Store::open(dir.path(), shared_now()).unwrap_err();
    assert!(matches!(err, Error::StoreLocked { .. }), "{err}");
    drop(store);
    // Released with the exclusive writer: a shared writer opens (first), then another.
    let a = Store::open(dir.path(), shared()).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    drop((a, b));
}

#[test]
fn shared_writers_refuse_an_exclusive_writer() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), shared()).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    let err = Store::open(dir.path(), exclusive_now()).unwrap_err();
    assert!(matches!(err, Error::StoreLocked { .. }), "{err}");
    a.close().unwrap();
    // One shared writer is enough to refuse it.
    let err = Store::open(dir.path(), exclusive_now()).unwrap_err();
    assert!(matches!(err, Error::StoreLocked { .. }), "{err}");
    b.close().unwrap();
    Store::open(dir.path(), exclusive()).unwrap();
}

#[test]
fn a_shared_store_in_memory_or_read_only_is_refused() {
    let err = Store::open_in_memory(shared()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "shared_writers",
                ..
            }
        ),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        read_only: true,
        ..shared()
    };
    let err = Store::open(dir.path(), cfg).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "shared_writers",
                ..
            }
        ),
        "{err}"
    );
}

/// Two shared writers in one process (each open has its own locks): appends interleave in
/// one log, and each sees the other's records.
#[test]
fn two_shared_writers_interleave_and_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), shared()).unwrap();
    a.create_topic(TOPIC, QUEUES, 6, false, false).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    for i in 0..PER_CHILD {
        let (store, id) = if i % 3 == 0 { (&a, 0) } else { (&b, 1) };
        let q = queue_of(i);
        store
            .put(&MessageRef::new(TOPIC, q, &body_of(id, i)))
            .unwrap();
    }
    let want: BTreeMap<u64, BTreeSet<u64>> = [
        (0, all().into_iter().filter(|i| i % 3 == 0).collect()),
        (1, all().into_iter().filter(|i| i % 3 != 0).collect()),
    ]
    .into();
    assert_eq!(contents(&a), want);
    assert_eq!(contents(&b), want);
    a.close().unwrap();
    b.close().unwrap();
    let reopened = Store::open(dir.path(), exclusive()).unwrap();
    assert_eq!(contents(&reopened), want);
}

#[test]
fn processes_sending_to_one_store_each_have_every_message_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    store.create_topic(TOPIC, QUEUES, 6, false, false).unwrap();
    let children: Vec<Child> = (0..3).map(|id| spawn(root, id, &[])).collect();
    let mut want = BTreeMap::new();
    for (id, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "child {id}: {:?}", out.status);
        assert_eq!(acks(&out.stdout), all(), "child {id}");
        want.insert(id as u64, all());
    }
    // The parent, which sent nothing, reads every child's messages.
    assert_eq!(contents(&store), want);
    // And appends after them, at the end of each queue.
    let before = store.queue_offsets(TOPIC, 0).unwrap().1;
    let r = store
        .put(&MessageRef::new(
            TOPIC,
            0,
            format!("{}:0:", u64::MAX).as_bytes(),
        ))
        .unwrap();
    assert_eq!(r.appended.queue_offset, before);
    store.close().unwrap();
    let reopened = Store::open(root, exclusive()).unwrap();
    assert_eq!(contents(&reopened), want);
}

/// A child aborted inside its append (record written, nothing published) while it holds the
/// append lock: the others go on without reopening, and nothing acknowledged is lost.
#[cfg(feature = "fault-injection")]
#[test]
fn a_writer_killed_holding_the_append_lock_leaves_the_others_sending() {
    killed_holding_the_lock("append.unpublished:40");
}

/// The same, the child aborted right after it rolled the log (the full file ended with its
/// blank, the next one created, nothing published): the next holder undoes the roll, and a
/// later roll takes the file the dead one created.
#[cfg(feature = "fault-injection")]
#[test]
fn a_writer_killed_after_rolling_leaves_the_others_sending() {
    killed_holding_the_lock("commit_log.rolled:1");
}

#[cfg(feature = "fault-injection")]
fn killed_holding_the_lock(kill_at: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    store.create_topic(TOPIC, QUEUES, 6, false, false).unwrap();
    let pause = [(CHILD_PAUSE, "1")];
    let mut survivors: Vec<Child> = (0..2).map(|id| spawn(root, id, &pause)).collect();
    // Each survivor has sent half its messages and waits.
    for c in &mut survivors {
        let mut line = String::new();
        let mut r = std::io::BufReader::new(c.stdout.as_mut().unwrap());
        while !line.contains("PAUSED") {
            line.clear();
            assert_ne!(r.read_line(&mut line).unwrap(), 0, "a survivor ended early");
        }
    }
    // The victim dies at the kill point, holding the lock.
    let victim = spawn(root, 2, &[("MQLITE_KILL_AT", kill_at)]);
    let out = victim.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "the victim should have been aborted at {kill_at}"
    );
    let victim_acked = acks(&out.stdout);
    assert!(!victim_acked.is_empty() && victim_acked.len() < PER_CHILD as usize);
    // The survivors go on; the first of them to lock repairs what the victim left.
    let mut want = BTreeMap::new();
    for (id, mut c) in survivors.into_iter().enumerate() {
        c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "survivor {id}: {:?}", out.status);
        want.insert(id as u64, all());
    }
    want.insert(2, victim_acked);
    // The victim's unacknowledged append was undone: nothing but what was acknowledged.
    assert_eq!(contents(&store), want);
    store.close().unwrap();
    let reopened = Store::open(root, exclusive()).unwrap();
    assert_eq!(contents(&reopened), want);
}
