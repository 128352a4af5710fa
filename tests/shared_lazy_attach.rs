//! A later shared opener (recovery.rs `attach`) loads no consume queue at its open: each is
//! pending, known by the shared table's next offset, and is loaded and checked at its first
//! use (consume_queue/store.rs). On a store of 1,000 queues:
//!
//! - a second opener beside a running first one loads none at open; reads of any queue then
//!   see every message, including those the first appended after the second opened, to queues
//!   the second had not touched; when it closes last with queues it never loaded, its
//!   clean-shutdown record lists them right, so the next open is lazy and exact;
//! - a queue still pending in the later opener whose records the leader's retention deleted
//!   meanwhile loads at its first use and goes on at its next offset;
//! - the first opener, a child, is killed with SIGKILL while it sends to every queue after the
//!   second opened, and (`fault-injection`) aborted inside an append holding the append lock:
//!   the second's lazily loaded queues hold the acknowledged messages (and at most the one
//!   being acknowledged), contiguous, and its sends after the repair continue them.
//!
//! The loads are counted by `consume_queue::store::queue_loads`, a process-wide counter: the
//! tests take `SERIAL` so that no other test of this binary loads queues meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use mqlite::consume_queue::store::queue_loads;
use mqlite::{MessageRef, Store, StoreConfig};

use common::{read_queue, small_config};

static SERIAL: Mutex<()> = Mutex::new(());

/// Topics the tests use, of `QUEUES` queues each.
const TOPICS: usize = 60;
/// More topics whose queues are only directories on disk (made without the store's fsyncs,
/// which would make the test slow): queues that an open beside running writers used to load.
const BARE_TOPICS: usize = 190;
const QUEUES: u32 = 4;

fn topic(i: usize) -> String {
    format!("lazy{i:04}")
}

fn every_queue() -> impl Iterator<Item = (String, u32)> {
    (0..TOPICS).flat_map(|i| (0..QUEUES).map(move |q| (topic(i), q)))
}

/// Opens that must succeed wait for the store's locks (a child of another test holds copies
/// of the descriptors until it execs).
fn shared() -> StoreConfig {
    StoreConfig {
        shared_writers: true,
        lock_wait: Some(Duration::from_secs(30)),
        ..small_config()
    }
}

fn exclusive() -> StoreConfig {
    StoreConfig {
        shared_writers: false,
        ..shared()
    }
}

fn first_body(t: &str, q: u32) -> Vec<u8> {
    format!("{t}/{q}/first").into_bytes()
}

/// Whether queue `q` of topic `i` got a message before the test: one topic in ten (a queue
/// without a unit has no file, so most of the store costs directories only).
fn has_first(i: usize) -> bool {
    i.is_multiple_of(10)
}

/// The queue's first messages: one if `has_first`.
fn firsts(t: &str, q: u32) -> Vec<Vec<u8>> {
    let i: usize = t["lazy".len()..].parse().unwrap();
    if has_first(i) {
        vec![first_body(t, q)]
    } else {
        Vec::new()
    }
}

/// `TOPICS` x `QUEUES` queues, a message in each queue of one topic in ten, closed cleanly;
/// then the `BARE_TOPICS` directories.
fn build(root: &Path) {
    let store = Store::open(root, exclusive()).unwrap();
    let names: Vec<String> = (0..TOPICS).map(topic).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    store.create_topics(&refs, QUEUES, 6, false, false).unwrap();
    for (t, q) in every_queue() {
        if !firsts(&t, q).is_empty() {
            store
                .put(&MessageRef::new(&t, q, &first_body(&t, q)))
                .unwrap();
        }
    }
    store.close().unwrap();
    for i in 0..BARE_TOPICS {
        for q in 0..QUEUES {
            let dir = common::cq_dir(root, &format!("bare{i:04}"), q);
            std::fs::create_dir_all(dir).unwrap();
        }
    }
}

/// Opens `root` shared; returns the store and how many queues the open loaded.
fn open_counting(root: &Path, config: StoreConfig) -> (Store, u64) {
    let before = queue_loads();
    let store = Store::open(root, config).unwrap();
    (store, queue_loads() - before)
}

/// `store`'s queue holds exactly `want`, at offsets 0, 1, ...
fn assert_queue(store: &Store, t: &str, q: u32, want: &[Vec<u8>]) {
    let got = if want.is_empty() {
        Vec::new()
    } else {
        read_queue(store, t, q)
    };
    let want: Vec<(u64, Vec<u8>)> = (0..).zip(want.iter().cloned()).collect();
    assert_eq!(got, want, "{t}:{q}");
    assert_eq!(
        store.queue_offsets(t, q).unwrap(),
        (0, want.len() as u64),
        "{t}:{q}"
    );
}

#[test]
fn a_later_opener_loads_no_queue_at_open_and_serves_every_message_at_first_use() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    build(root);
    let (a, _) = open_counting(root, shared());
    let (b, loaded) = open_counting(root, shared());
    assert_eq!(loaded, 0, "the later opener loaded {loaded} queues at open");

    // After `b` opened, `a` appends to the queues of topics 20..40, which `b` never used:
    // `b`'s dispatch indexes them (loading each queue first).
    let later = |t: &str, q: u32| format!("{t}/{q}/later").into_bytes();
    for i in 20..40 {
        for q in 0..QUEUES {
            a.put(&MessageRef::new(&topic(i), q, &later(&topic(i), q)))
                .unwrap();
        }
    }
    common::settle(&a);
    // `b` reads topics 0..40: first use of each.
    for i in 0..40 {
        for q in 0..QUEUES {
            let t = topic(i);
            let mut want = firsts(&t, q);
            if i >= 20 {
                want.push(later(&t, q));
            }
            assert_queue(&b, &t, q, &want);
        }
    }
    // `b` sends to a queue it has loaded and to one still pending; `a` sees both.
    for i in [10, 50] {
        b.put(&MessageRef::new(&topic(i), 1, b"from b")).unwrap();
    }
    common::settle(&b);
    common::settle(&a);
    for i in [10, 50] {
        let t = topic(i);
        let mut want = firsts(&t, 1);
        want.push(b"from b".to_vec());
        assert_queue(&a, &t, 1, &want);
    }

    // `b` closes last, topics 40..60 (but 50) never loaded in it: its clean-shutdown record
    // lists them as the shared table had them, and the next open trusts it.
    a.close().unwrap();
    b.close().unwrap();
    assert!(root.join("queues.clean").exists());
    let (c, loaded) = open_counting(root, exclusive());
    assert_eq!(loaded, 0, "the clean reopen loaded {loaded} queues");
    for (t, q) in every_queue() {
        let i: usize = t["lazy".len()..].parse().unwrap();
        let mut want = firsts(&t, q);
        if (20..40).contains(&i) {
            want.push(later(&t, q));
        }
        if q == 1 && (i == 10 || i == 50) {
            want.push(b"from b".to_vec());
        }
        assert_queue(&c, &t, q, &want);
    }
    c.close().unwrap();
}

/// The leader's retention deletes the commit-log files that a queue still pending in a later
/// opener points into (its units all expired): loaded at its first use there, the queue is
/// checked against the log as it is now, its expired units passed as at an open. (The check
/// found the records' file gone from under this process's list of files and reported the
/// queue as damaged.)
#[test]
fn a_pending_queue_whose_records_retention_deleted_loads_at_first_use() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        let s = Store::open(root, exclusive()).unwrap();
        s.create_topics(&["old", "fill"], 1, 6, false, false)
            .unwrap();
        s.put(&MessageRef::new("old", 0, b"expires")).unwrap();
        let body = vec![b'x'; 8 << 10];
        while s.commit_log_range().1 < 3 * (128 << 10) {
            s.put(&MessageRef::new("fill", 0, &body)).unwrap();
        }
        s.close().unwrap();
    }
    let expire_at_once = StoreConfig {
        file_reserved_time: Duration::ZERO,
        ..shared()
    };
    let a = Store::open(root, expire_at_once.clone()).unwrap();
    assert!(
        a.wait_leader(Duration::from_secs(30)),
        "the first opener leads"
    );
    let b = Store::open(root, expire_at_once).unwrap();
    assert!(!b.is_leader());
    assert!(
        a.delete_expired_files().unwrap() >= 2,
        "the old files expired"
    );
    assert!(!common::commit_log_file(root, 0).exists());
    let (_, max) = b.queue_offsets("old", 0).unwrap();
    assert_eq!(max, 1);
    // The queue goes on at its next offset.
    let r = b.put(&MessageRef::new("old", 0, b"next")).unwrap();
    assert_eq!(r.appended.queue_offset, 1);
    common::settle(&b);
    let got = b
        .get_messages("old", 0, 1, 8, &mqlite::TagFilter::all())
        .unwrap();
    let bodies: Vec<&[u8]> = got.iter().map(|v| v.body()).collect();
    assert_eq!(bodies, vec![&b"next"[..]]);
    b.close().unwrap();
    a.close().unwrap();
}

/// The first opener, a child, killed while the later opener (this process) runs beside it.
mod killed {
    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Command, Stdio};

    use super::*;

    /// The child's store directory (its presence makes the child entry point act).
    const CHILD_DIR: &str = "MQLITE_LAZY_CHILD_DIR";

    fn child_body(t: &str, q: u32) -> Vec<u8> {
        format!("{t}/{q}/child").into_bytes()
    }

    /// Child: the first shared opener. Says `OPEN`, waits for a line on its stdin, then sends
    /// one message to every queue in order (`every_queue`), printing `ACK <n>` after the `n`th
    /// is acknowledged, until it is killed (or its kill point, `MQLITE_KILL_AT`, aborts it).
    #[test]
    fn lazy_child_first_opener_sends() {
        let Some(dir) = std::env::var_os(CHILD_DIR) else {
            return;
        };
        let store = Store::open(Path::new(&dir), shared()).unwrap();
        let mut out = std::io::stdout().lock();
        writeln!(out, "OPEN").unwrap();
        out.flush().unwrap();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).unwrap();
        for (n, (t, q)) in (1..).zip(every_queue()) {
            store
                .put(&MessageRef::new(&t, q, &child_body(&t, q)))
                .unwrap();
            writeln!(out, "ACK {n}").unwrap();
            out.flush().unwrap();
        }
        store.close().unwrap();
    }

    /// The store built, the child opened first, this process opened second (loading no
    /// queue), the child sending until `kill` ends it (given the child and its `ACK` counts as
    /// they come); then every queue checked at its first use here, and again after this
    /// process's own sends (its first append repairs what the child left under the lock).
    fn killed_while_sending(
        kill_at: Option<&str>,
        kill: impl FnOnce(&mut Child, &mut dyn Iterator<Item = u64>),
    ) {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        build(root);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "killed::lazy_child_first_opener_sends",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, root)
        .env_remove("MQLITE_KILL_AT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        if let Some(at) = kill_at {
            cmd.env("MQLITE_KILL_AT", at);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(|l| l.ok());
        assert!(
            lines.any(|l| l.contains("OPEN")),
            "the child ended before opening"
        );
        let (b, loaded) = open_counting(root, shared());
        assert_eq!(loaded, 0, "the later opener loaded {loaded} queues at open");
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        let last_ack = std::cell::Cell::new(0);
        let mut acks = lines
            .filter_map(|l| {
                l.split_once("ACK ")
                    .map(|(_, n)| n.trim().parse::<u64>().unwrap())
            })
            .inspect(|&n| last_ack.set(n));
        kill(&mut child, &mut acks);
        acks.for_each(drop);
        let acked = last_ack.get();
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child should have been killed");
        let all = TOPICS * QUEUES as usize;
        assert!(acked > 0 && acked < all as u64, "{acked} acknowledged");
        // Every queue, loaded at this first use: the child's messages are a prefix of its
        // order holding every acknowledged one (and at most the one it was acknowledging when
        // killed), nothing torn, offsets contiguous.
        let mut sent_by_child = BTreeSet::new();
        for (t, q) in every_queue() {
            let got = read_all(&b, &t, q);
            let mut want = firsts(&t, q);
            if got.len() > want.len() {
                want.push(child_body(&t, q));
                sent_by_child.insert((t.clone(), q));
            }
            assert_eq!(got, want, "{t}:{q}");
        }
        let prefix: BTreeSet<(String, u32)> = every_queue().take(sent_by_child.len()).collect();
        assert_eq!(
            sent_by_child, prefix,
            "the child's messages are a prefix of its order"
        );
        let n = sent_by_child.len() as u64;
        assert!(
            n == acked || n == acked + 1,
            "{n} present, {acked} acknowledged"
        );
        // `b`'s next append repairs what the child left; its sends continue each queue.
        let after: BTreeSet<(String, u32)> = every_queue().step_by(37).collect();
        for (t, q) in &after {
            b.put(&MessageRef::new(t, *q, b"after")).unwrap();
        }
        common::settle(&b);
        for (t, q) in every_queue() {
            let mut want = firsts(&t, q);
            if sent_by_child.contains(&(t.clone(), q)) {
                want.push(child_body(&t, q));
            }
            if after.contains(&(t.clone(), q)) {
                want.push(b"after".to_vec());
            }
            assert_queue(&b, &t, q, &want);
        }
        b.close().unwrap();
    }

    /// Every message of the queue as bodies, checked contiguous from 0.
    fn read_all(store: &Store, t: &str, q: u32) -> Vec<Vec<u8>> {
        let got = store
            .get_messages(t, q, 0, 16, &mqlite::TagFilter::all())
            .unwrap();
        got.iter()
            .enumerate()
            .map(|(i, v)| {
                assert_eq!(v.queue_offset(), i as u64, "{t}:{q}");
                v.body().to_vec()
            })
            .collect()
    }

    /// Killed with SIGKILL once it has acknowledged 150 sends: wherever it was (inside an
    /// append holding the lock, or between two).
    #[test]
    fn a_first_opener_killed_while_sending_leaves_the_later_openers_lazy_queues_consistent() {
        killed_while_sending(None, |child, mut acks| {
            assert!(
                Iterator::any(&mut acks, |n| n == 150),
                "the child ended early"
            );
            child.kill().unwrap(); // SIGKILL
        });
    }

    /// Aborted at its kill point inside its 200th append, holding the append lock (the record
    /// written, nothing published).
    #[cfg(feature = "fault-injection")]
    #[test]
    fn a_first_opener_killed_mid_append_leaves_the_later_openers_lazy_queues_consistent() {
        killed_while_sending(Some("append.unpublished:200"), |_, _| {});
    }
}
