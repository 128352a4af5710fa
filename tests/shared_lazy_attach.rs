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
//! - (`fault-injection`) the first opener, a child, is aborted inside an append holding the
//!   append lock after the second opened: the second's lazily loaded queues hold exactly the
//!   acknowledged messages, contiguous, and its sends after the repair continue them.
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

/// The first opener killed inside an append (kill points need the `fault-injection` build).
#[cfg(feature = "fault-injection")]
mod killed {
    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Command, Stdio};

    use super::*;

    /// The child's store directory (its presence makes the child entry point act).
    const CHILD_DIR: &str = "MQLITE_LAZY_CHILD_DIR";

    /// Child: the first shared opener. Says `OPEN`, waits for a line on its stdin, then sends one
    /// message to every queue in order, printing `ACK <topic> <queue>` for each acknowledged one,
    /// until its kill point (`MQLITE_KILL_AT`) aborts it inside an append.
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
        for (t, q) in every_queue() {
            store
                .put(&MessageRef::new(&t, q, format!("{t}/{q}/child").as_bytes()))
                .unwrap();
            writeln!(out, "ACK {t} {q}").unwrap();
            out.flush().unwrap();
        }
        store.close().unwrap();
    }

    fn spawn_first_opener(root: &Path, kill_at: &str) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "killed::lazy_child_first_opener_sends",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, root)
            .env("MQLITE_KILL_AT", kill_at)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_first_opener_killed_mid_append_leaves_the_later_openers_lazy_queues_consistent() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        build(root);
        // The child dies inside its 200th append, holding the append lock (record written,
        // nothing published).
        let mut child = spawn_first_opener(root, "append.unpublished:200");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        loop {
            let line = lines
                .next()
                .expect("the child ended before opening")
                .unwrap();
            if line.contains("OPEN") {
                break;
            }
        }
        let (b, loaded) = open_counting(root, shared());
        assert_eq!(loaded, 0, "the later opener loaded {loaded} queues at open");
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        let acked: BTreeSet<(String, u32)> = lines
            .map_while(|l| l.ok())
            .filter_map(|l| {
                let (_, rest) = l.split_once("ACK ")?;
                let (t, q) = rest.trim().split_once(' ')?;
                Some((t.to_owned(), q.parse().unwrap()))
            })
            .collect();
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child should have been aborted");
        assert!(!acked.is_empty() && acked.len() < TOPICS * QUEUES as usize);
        let child_body = |t: &str, q: u32| format!("{t}/{q}/child").into_bytes();
        let want = |t: &str, q: u32| {
            let mut w = firsts(t, q);
            if acked.contains(&(t.to_owned(), q)) {
                w.push(child_body(t, q));
            }
            w
        };
        // Every queue, loaded at this first use: the acknowledged messages, nothing torn.
        for (t, q) in every_queue() {
            assert_queue(&b, &t, q, &want(&t, q));
        }
        // `b`'s next append repairs what the child left; its sends continue each queue.
        for (t, q) in every_queue().step_by(37) {
            b.put(&MessageRef::new(&t, q, b"after")).unwrap();
        }
        common::settle(&b);
        for (t, q) in every_queue() {
            let mut w = want(&t, q);
            if every_queue().step_by(37).any(|(t2, q2)| t2 == t && q2 == q) {
                w.push(b"after".to_vec());
            }
            assert_queue(&b, &t, q, &w);
        }
        b.close().unwrap();
    }
}
