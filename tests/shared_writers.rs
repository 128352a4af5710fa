//! Several processes writing one store (`StoreConfig::shared_writers`,
//! docs/design-many-writers.md). The test binary runs itself as children that open the store
//! shared and send (single puts and batches) to a few queues of one topic, printing an `ACK`
//! line for each acknowledged send; the parent, a shared writer too, checks what every process
//! sees: each acknowledged message exactly once, queue offsets contiguous, each child's own
//! order kept within a queue, then again after reopening the store exclusively.
//!
//! - An exclusive open and shared opens refuse each other (`StoreLocked`), both ways.
//! - Three children send concurrently through rolls of small commit-log files.
//! - A writer without the wake-up word (a full disk at its open) still sees another writer's
//!   message while it waits.
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

/// `store`'s queue `queue` of `TOPIC` holds exactly writer 0's messages `0..n`, in order.
fn assert_holds_writer_0(store: &Store, queue: u32, n: u64) {
    let got = common::read_queue(store, TOPIC, queue);
    assert_eq!(got.len() as u64, n, "queue {queue}");
    for (i, (off, body)) in got.into_iter().enumerate() {
        assert_eq!((off, body), (i as u64, body_of(0, i as u64)));
    }
}

/// `shared()` with whole files faulted in at creation (prepared files included).
fn warm() -> StoreConfig {
    StoreConfig {
        warm_mapped_files: true,
        ..shared()
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
        shared_writers: false,
        lock_wait: Some(LOCK_WAIT),
        ..small_config()
    }
}

/// `exclusive()` failing at once: for opens that must be refused.
fn exclusive_now() -> StoreConfig {
    StoreConfig {
        lock_wait: None,
        ..exclusive()
    }
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

/// The default open is shared; a store in memory, or a read-only open, has no other writer
/// to share with and opens as it always did.
#[test]
fn the_default_open_is_shared_and_memory_or_read_only_opens_are_unaffected() {
    assert!(StoreConfig::default().shared_writers);
    let mem = Store::open_in_memory(shared()).unwrap();
    mem.put(&MessageRef::new(TOPIC, 0, b"m")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // `shared_writers` left at its default.
    let default = StoreConfig {
        lock_wait: Some(LOCK_WAIT),
        ..small_config()
    };
    let a = Store::open(dir.path(), default).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    a.put(&MessageRef::new(TOPIC, 0, b"a")).unwrap();
    b.put(&MessageRef::new(TOPIC, 0, b"b")).unwrap();
    let ro = Store::open(
        dir.path(),
        StoreConfig {
            read_only: true,
            ..shared()
        },
    )
    .unwrap();
    drop(ro);
    // Neither a shared writer: the exclusive open is still refused.
    let err = Store::open(dir.path(), exclusive_now()).unwrap_err();
    assert!(matches!(err, Error::StoreLocked { .. }), "{err}");
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

/// A shared writer without the wake-up word (a full disk left its page unreserved; here the
/// `wakeup` name is a directory, so no process can map it) still sees another writer's
/// message while it waits: its dispatch thread looks for other processes' records on its own
/// (every `REPUT_IDLE`) and wakes the waiter, so the message ends the wait, not the timeout.
#[test]
fn a_shared_writer_without_the_wake_word_polls_for_another_writers_messages() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("wakeup")).unwrap();
    let a = Store::open(dir.path(), shared()).unwrap();
    a.create_topic(TOPIC, 1, 6, false, false).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    assert!(!b
        .wait_for_messages(&[(TOPIC, 0, 0)], Some(Duration::ZERO))
        .unwrap());
    std::thread::scope(|s| {
        let waiter =
            s.spawn(|| b.wait_for_messages(&[(TOPIC, 0, 0)], Some(Duration::from_secs(30))));
        a.put(&MessageRef::new(TOPIC, 0, b"from a")).unwrap();
        assert!(waiter.join().unwrap().unwrap(), "the wait timed out");
    });
    assert_eq!(common::read_queue(&b, TOPIC, 0).len(), 1);
}

/// Each writer keeps the mapping's queue slots it used (commit_log/shared.rs): writers that
/// alternate between topics whose names share a prefix, and between queues, and that first
/// use a queue after the other writer made its slot, still take each queue's next offset, so
/// every queue's offsets run 0, 1, 2, ... whichever writer appended, singles and batches.
#[test]
fn cached_queue_slots_keep_each_queues_offsets_contiguous_across_writers() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), shared()).unwrap();
    for topic in ["C", "CC", "D"] {
        a.create_topic(topic, QUEUES, 6, false, false).unwrap();
    }
    let b = Store::open(dir.path(), shared()).unwrap();
    let mut next: BTreeMap<(&str, u32), u64> = BTreeMap::new();
    let mut out = Vec::new();
    for i in 0..600u64 {
        let store = if (i / 7) % 2 == 0 { &a } else { &b };
        let topic = ["C", "CC", "D", "CC"][(i % 4) as usize];
        let q = ((i / 3) % u64::from(QUEUES)) as u32;
        let body = body_of(0, i);
        let expect = next.entry((topic, q)).or_insert(0);
        if i % 5 == 0 {
            let msgs = vec![MessageRef::new(topic, q, &body); 3];
            out.clear();
            store.put_batch(&msgs, &mut out).unwrap();
            let got: Vec<u64> = out.iter().map(|x| x.queue_offset).collect();
            assert_eq!(
                got,
                [*expect, *expect + 1, *expect + 2],
                "{topic}/{q} at {i}"
            );
            *expect += 3;
        } else {
            let r = store.put(&MessageRef::new(topic, q, &body)).unwrap();
            assert_eq!(r.appended.queue_offset, *expect, "{topic}/{q} at {i}");
            *expect += 1;
        }
    }
    a.close().unwrap();
    b.close().unwrap();
    let reopened = Store::open(dir.path(), exclusive()).unwrap();
    for (&(topic, q), &n) in &next {
        assert_eq!(
            reopened.queue_offsets(topic, q).unwrap(),
            (0, n),
            "{topic}/{q}"
        );
    }
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

/// A later opener checks every queue's tail beside running writers: units it finds not
/// indexing their records are ones another process is writing at that moment (here: units
/// 63 to 99 of a queue, across its two files, shifted by one as a writer in the middle of
/// them would leave them). It must change nothing on disk: a cut used to zero them and delete
/// the queue's later file, which the running writer kept writing (unlinked), so that it read
/// its own queue wrong from then on.
#[test]
fn a_later_opener_cuts_no_unit_another_writer_is_writing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(root, shared()).unwrap();
    a.create_topic(TOPIC, 1, 6, false, false).unwrap();
    let n = 100u64;
    for i in 0..n {
        a.put(&MessageRef::new(TOPIC, 0, &body_of(0, i))).unwrap();
    }
    common::settle(&a);
    let second = common::cq_file(root, TOPIC, 0, 64 * 20);
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let second_inode = inode(&second);
    // Units 63..100, each holding its predecessor's bytes: `a` "writing" them right now.
    let unit_path = |k: u64| common::cq_file(root, TOPIC, 0, k / 64 * 64 * 20);
    let read_unit = |k: u64| {
        let f = std::fs::File::open(unit_path(k)).unwrap();
        let mut b = [0u8; 20];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, k % 64 * 20).unwrap();
        b
    };
    let originals: Vec<[u8; 20]> = (62..n).map(read_unit).collect();
    for k in 63..n {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(unit_path(k))
            .unwrap();
        let prev = originals[(k - 63) as usize];
        std::os::unix::fs::FileExt::write_all_at(&f, &prev, k % 64 * 20).unwrap();
    }
    let b = Store::open(root, shared()).unwrap();
    assert_eq!(inode(&second), second_inode, "the later file was replaced");
    // `b`'s own dispatch wrote the units again, in the files `a` writes.
    for k in 62..n {
        assert_eq!(read_unit(k), originals[(k - 62) as usize], "unit {k}");
    }
    for store in [&a, &b] {
        assert_holds_writer_0(store, 0, n);
    }
}

/// A commit-log or consume-queue file appears under its name only whole: a later opener
/// loading the store never sees (and so never deletes) a zero-length file another process is
/// creating. Even a zero-length last file (what such a creation looked like) is left alone by
/// a later opener, and the roll to it uses it.
#[test]
fn a_later_opener_deletes_no_zero_length_file_beside_running_writers() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(root, shared()).unwrap();
    a.create_topic(TOPIC, 1, 6, false, false).unwrap();
    a.put(&MessageRef::new(TOPIC, 0, &body_of(0, 0))).unwrap();
    common::settle(&a);
    let size = 128 << 10;
    let next = common::commit_log_file(root, size);
    // The next commit-log file as `a`'s preparer (or a roll) may have it.
    std::fs::remove_file(&next).ok();
    std::fs::File::create(&next).unwrap();
    let b = Store::open(root, shared()).unwrap();
    assert!(
        next.exists(),
        "a later opener deleted a file another writer creates"
    );
    // Both send through the roll into that file; every message is there once.
    let mut sent = 1u64;
    while b.commit_log_range().1 < size + 4096 {
        let s = if sent.is_multiple_of(2) { &a } else { &b };
        s.put(&MessageRef::new(TOPIC, 0, &body_of(0, sent)))
            .unwrap();
        sent += 1;
    }
    for store in [&a, &b] {
        assert_holds_writer_0(store, 0, sent);
    }
    assert!(
        !std::fs::read_dir(root.join("commitlog")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp"))
    );
}

/// A consume-queue file prepared ahead of a roll (all zeros, by any process) is not where the
/// queue ends: a later opener loads the queue up to its last unit, in the file before, reads
/// every message, and its sends roll into the prepared file. (It took the prepared file for
/// the end, and its reads failed with a zero unit below the queue's end.)
#[test]
fn a_later_opener_takes_no_prepared_queue_file_for_the_queue_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let a = Store::open(root, shared()).unwrap();
    a.create_topic(TOPIC, 1, 6, false, false).unwrap();
    let n = 100u64;
    for i in 0..n {
        a.put(&MessageRef::new(TOPIC, 0, &body_of(0, i))).unwrap();
    }
    common::settle(&a);
    // Units 64..127 are in the second file; the third one, as a preparer makes it.
    let third = common::cq_file(root, TOPIC, 0, 2 * 64 * 20);
    if !third.exists() {
        std::fs::write(&third, vec![0u8; 64 * 20]).unwrap();
    }
    let b = Store::open(root, shared()).unwrap();
    let mut sent = n;
    for store in [&a, &b] {
        let got = common::read_queue(store, TOPIC, 0);
        assert_eq!(got.len() as u64, sent);
    }
    while sent < 150 {
        let s = if sent.is_multiple_of(2) { &a } else { &b };
        s.put(&MessageRef::new(TOPIC, 0, &body_of(0, sent)))
            .unwrap();
        sent += 1;
    }
    for store in [&a, &b] {
        common::settle(store);
        assert_holds_writer_0(store, 0, sent);
    }
}

/// After a clean close, the first shared opener loads a queue at its first use; another
/// process appending to that queue before then (through a roll into a prepared file) leaves
/// it longer than the clean-shutdown record says: the first use checks the part the record
/// vouches for and serves every message. (It was refused as corrupted, or every queue had to
/// be loaded at the first open.)
#[test]
fn a_queue_another_writer_grew_before_its_first_use_here_is_served_whole() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        let s = Store::open(root, warm()).unwrap();
        s.create_topic(TOPIC, 2, 6, false, false).unwrap();
        for i in 0..100 {
            for q in 0..2 {
                s.put(&MessageRef::new(TOPIC, q, &body_of(0, i))).unwrap();
            }
        }
        s.close().unwrap();
    }
    // Queue 1's third file as a preparer leaves it (a shared writer's stays at its close).
    let third = common::cq_file(root, TOPIC, 1, 2 * 64 * 20);
    if !third.exists() {
        std::fs::write(&third, vec![0u8; 64 * 20]).unwrap();
    }
    // Lazy: tests/consume_queue_clean_open.rs counts the loads (this binary's tests run in
    // parallel, so a count here would see theirs).
    let a = Store::open(root, warm()).unwrap();
    let b = Store::open(root, warm()).unwrap();
    for i in 100..150 {
        b.put(&MessageRef::new(TOPIC, 0, &body_of(0, i))).unwrap();
    }
    common::settle(&b);
    for (q, n) in [(0, 150), (1, 100)] {
        for store in [&b, &a] {
            assert_holds_writer_0(store, q, n);
        }
    }
}
