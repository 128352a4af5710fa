//! The shared writer mapping (`run/writer.shm`) with real processes: this test binary runs
//! itself as children that map the file and take its append lock.
//!
//! - A child takes the lock, starts an append (reserve, part of a record written, and then
//!   nothing more, the table's offset, or the log end), says so on its stdout while still
//!   holding the lock, and the parent kills it with SIGKILL on that line (a cause, not a
//!   timer). The parent's next `lock` must report the death, and the repair must leave the
//!   log end and the queue's offset as the last complete append left them, the torn bytes
//!   zeroed, and the units of published records written again.
//! - Two children each append 100,000 times to one queue under the lock: the queue's next
//!   offset and the log end are exactly 200,000.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use mqlite::shared::layout::Capacity;
use mqlite::shared::protocol::Repair;
use mqlite::shared::{AppendLock, Attached, Initial, WriterShm};

/// The store directory of a child (its presence makes the child entry points act).
const CHILD_DIR: &str = "MQLITE_SHM_CHILD_DIR";
/// How far the dying child gets: `reserved`, `offset` or `published`.
const STAGE: &str = "MQLITE_SHM_STAGE";
/// Appends per counting child.
const COUNT: u64 = 100_000;

const TOPIC: &str = "SharedT";
/// The bytes of the record the dying child writes (half of them before it is killed).
const RECORD: u64 = 64;
/// Where the test's log lives: a plain file standing in for the commit log.
const LOG: &str = "log";

fn attach(root: &Path) -> WriterShm {
    match WriterShm::attach(root).unwrap() {
        Attached::Valid(shm) => shm,
        Attached::Rebuild(why) => panic!("the mapping should be valid: {why}"),
    }
}

fn held(lock: AppendLock<'_>) -> mqlite::shared::Writer<'_> {
    match lock {
        AppendLock::Held(w) => w,
        AppendLock::OwnerDied(_) => panic!("no holder died"),
    }
}

/// Child: takes the lock, appends to `TOPIC`/0 up to the stage asked, writes half of the
/// record's bytes (all of them past `reserved`), says "HOLDING" and waits for its end.
#[test]
fn shm_child_dies_holding_the_lock() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let stage = std::env::var(STAGE).unwrap();
    let root = Path::new(&dir);
    let shm = attach(root);
    let w = held(shm.lock().unwrap());
    let slot = w.queue_slot(TOPIC, 0).unwrap();
    let r = w.reserve(Some(slot), RECORD, 1);
    let log = OpenOptions::new().write(true).open(root.join(LOG)).unwrap();
    let written = if stage == "reserved" {
        RECORD / 2
    } else {
        RECORD
    };
    log.write_all_at(&vec![0xAB; written as usize], r.start)
        .unwrap();
    match stage.as_str() {
        "reserved" => {}
        "offset" => w.commit_offset(&r),
        "published" => {
            w.commit_offset(&r);
            w.commit_end(&r);
        }
        other => panic!("unknown stage {other}"),
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "HOLDING {} {}", r.start, r.end).unwrap();
    out.flush().unwrap();
    // Held until the parent kills this process: stdin is a pipe the parent never writes.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    panic!("the parent should have killed this child");
}

/// Child: 100,000 appends of one byte's reservation to `TOPIC`/0, each under the lock.
#[test]
fn shm_child_counts() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    if std::env::var_os(STAGE).is_some() {
        return;
    }
    let shm = attach(Path::new(&dir));
    let slot = held(shm.lock().unwrap()).queue_slot(TOPIC, 0).unwrap();
    for _ in 0..COUNT {
        let w = held(shm.lock().unwrap());
        let r = w.reserve(Some(slot), 1, 1);
        w.publish(&r);
    }
}

fn child(test: &str, root: &Path, stage: Option<&str>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, root)
        .env_remove(STAGE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(s) = stage {
        cmd.env(STAGE, s);
    }
    cmd.spawn().unwrap()
}

/// The repair's view of the test log: zeroes with `pwrite`, records what it re-dispatches.
struct TestLog {
    file: File,
    redispatched: Vec<(u64, u64)>,
}

impl Repair for TestLog {
    fn zero(&mut self, from: u64, to: u64) -> mqlite::Result<()> {
        self.file
            .write_all_at(&vec![0; (to - from) as usize], from)
            .unwrap();
        Ok(())
    }

    fn redispatch(&mut self, from: u64, to: u64) -> mqlite::Result<()> {
        self.redispatched.push((from, to));
        Ok(())
    }
}

/// A store directory with a mapping whose `TOPIC`/0 is at offset 5 after 100 bytes of log,
/// 40 of them dispatched.
fn store_with_history(root: &Path) -> WriterShm {
    std::fs::write(root.join(LOG), vec![0x11u8; 100]).unwrap();
    let initial = Initial {
        log_end: 100,
        dispatched: 40,
        flushed: 0,
        last_store_timestamp: 0,
        queues: vec![(TOPIC.to_owned(), 0, 5)],
    };
    WriterShm::create(root, Capacity::for_counts(1, 1), &initial, 0o700, 0o600).unwrap()
}

/// Runs a dying child to `stage`, kills it on its "HOLDING" line, and returns the reserved
/// range it printed.
fn kill_holder(root: &Path, stage: &str) -> (u64, u64) {
    let mut c = child("shm_child_dies_holding_the_lock", root, Some(stage));
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    // libtest prints "test <name> ... " before the child's own line, on the same line.
    let holding = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find_map(|l| l.split_once("HOLDING ").map(|(_, rest)| rest.to_owned()))
        .unwrap_or_else(|| panic!("the child ended without holding the lock ({stage})"));
    // `Child::kill` is SIGKILL.
    c.kill().unwrap();
    let status = c.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{stage}: {status:?}");
    let f: Vec<u64> = holding
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    (f[0], f[1])
}

#[test]
fn a_holder_killed_inside_an_append_is_reported_and_repaired() {
    for stage in ["reserved", "offset", "published"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let shm = store_with_history(root);
        let (start, end) = kill_holder(root, stage);
        assert_eq!((start, end), (100, 100 + RECORD), "{stage}");
        // The mapping the dead process left: the intent is still recorded.
        assert_eq!(shm.intent_end(), end, "{stage}");

        let mut log = TestLog {
            file: OpenOptions::new()
                .read(true)
                .write(true)
                .open(root.join(LOG))
                .unwrap(),
            redispatched: Vec::new(),
        };
        let dead = match shm.lock().unwrap() {
            AppendLock::OwnerDied(d) => d,
            AppendLock::Held(_) => panic!("{stage}: the death was not reported"),
        };
        let (w, done) = dead.repair(&mut log).unwrap();
        let slot = w.find_queue(TOPIC, 0).unwrap().unwrap();
        let bytes = std::fs::read(root.join(LOG)).unwrap();
        assert_eq!(bytes.len() as u64, end, "{stage}: the log's length");
        let (published, log_end, next) = if stage == "published" {
            (true, end, 6)
        } else {
            (false, start, 5)
        };
        assert_eq!(w.log_end(), log_end, "{stage}: log end");
        assert_eq!(w.next_offset(slot).unwrap(), next, "{stage}: queue offset");
        assert_eq!(shm.intent_end(), 0, "{stage}: intent cleared");
        assert!(
            bytes[..100].iter().all(|&b| b == 0x11),
            "{stage}: earlier records intact"
        );
        if published {
            assert_eq!(done.zeroed, None, "{stage}");
            assert!(bytes[100..].iter().all(|&b| b == 0xAB), "{stage}");
        } else {
            assert_eq!(done.zeroed, Some((start, end)), "{stage}");
            assert!(
                bytes[100..].iter().all(|&b| b == 0),
                "{stage}: torn bytes zeroed"
            );
            assert_eq!(done.restored, Some(slot), "{stage}");
        }
        assert_eq!(
            log.redispatched,
            vec![(40, log_end)],
            "{stage}: units written again"
        );
        assert_eq!(shm.dispatched(), log_end, "{stage}");
        drop(w);
        // Repaired and marked consistent: the next locker finds a clean lock.
        let again = held(shm.lock().unwrap());
        let r = again.reserve(Some(slot), 8, 1);
        assert_eq!(
            (r.start, r.queue_offset),
            (log_end, next),
            "{stage}: next append"
        );
    }
}

#[test]
fn two_processes_counting_under_the_lock_lose_no_increment() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let shm = WriterShm::create(
        root,
        Capacity::for_counts(1, 1),
        &Initial::default(),
        0o700,
        0o600,
    )
    .unwrap();
    let kids: Vec<Child> = (0..2)
        .map(|_| child("shm_child_counts", root, None))
        .collect();
    for mut k in kids {
        let status = k.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
    let w = held(shm.lock().unwrap());
    let slot = w.find_queue(TOPIC, 0).unwrap().unwrap();
    assert_eq!(w.next_offset(slot).unwrap(), 2 * COUNT);
    assert_eq!(w.log_end(), 2 * COUNT);
    assert_eq!(shm.intent_end(), 0);
}
