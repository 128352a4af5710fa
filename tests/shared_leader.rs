//! The leader of a store's shared writers and the wake-ups between processes
//! (docs/design-many-writers.md, Roles; rust/core/leader.rs). The test binary runs itself as
//! child processes that open the store shared; parent and children talk through the child's
//! stdin and stdout, so every step waits for its cause (a line the other side printed, a
//! process that died), never for a timer.
//!
//! - The leader killed with SIGKILL: the surviving process takes over, flushes what the dead
//!   one left (the mapping's `flushed` word reaches the log end) and runs retention there.
//! - A clean close of the leader, its process still alive, hands the role over.
//! - Sync sends from two processes, neither of them the leader, are acknowledged only once
//!   the mapping's `flushed` word covers them.
//! - A consumer blocked in one process is woken by a send in another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Lines, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::small_config;
use mqlite::{FlushMode, MessageRef, PutStatus, Store, StoreConfig};

/// The store directory of a child (its presence makes the child entry point act).
const CHILD_DIR: &str = "MQLITE_LEADER_CHILD_DIR";
/// What the child does: `lead`, `sync` or `send`.
const CHILD_MODE: &str = "MQLITE_LEADER_CHILD_MODE";

const TOPIC: &str = "Lead";
/// Long enough for any step of these tests on a loaded machine; never reached when they pass.
const BOUND: Duration = Duration::from_secs(60);
/// Byte of `run/writer.shm` holding the `flushed` word (FORMAT.md §14).
const FLUSHED_AT: u64 = 256;

fn shared() -> StoreConfig {
    StoreConfig {
        shared_writers: true,
        // A child another test of this binary forks holds the store's locks until it execs.
        lock_wait: Some(BOUND),
        ..small_config()
    }
}

/// The mapping's `flushed` word, read from the file as another process would see it.
fn flushed_word(root: &Path) -> u64 {
    let f = std::fs::File::open(root.join("run/writer.shm")).unwrap();
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, FLUSHED_AT).unwrap();
    u64::from_be_bytes(b)
}

fn line(stdin: &mut impl BufRead) -> String {
    let mut l = String::new();
    stdin.read_line(&mut l).unwrap();
    l.trim().to_owned()
}

fn say(out: &mut impl Write, what: &str) {
    writeln!(out, "{what}").unwrap();
    out.flush().unwrap();
}

/// Child entry point (a no-op unless run as a child).
#[test]
fn leader_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let root = Path::new(&dir);
    let mode = std::env::var(CHILD_MODE).unwrap();
    let (mut stdin, mut out) = (std::io::stdin().lock(), std::io::stdout().lock());
    match mode.as_str() {
        // Opens first (the leader), sends through several files without flushing them
        // (flushes only every minute), then closes or is killed as the parent says.
        "lead" => {
            let store = Store::open(
                root,
                StoreConfig {
                    flush_interval: Duration::from_secs(60),
                    ..shared()
                },
            )
            .unwrap();
            assert!(store.wait_leader(BOUND), "the first opener leads");
            let body = vec![b'x'; 4000];
            for _ in 0..100 {
                store.put(&MessageRef::new(TOPIC, 0, &body)).unwrap();
            }
            say(&mut out, &format!("SENT {}", store.commit_log_range().1));
            assert_eq!(line(&mut stdin), "close");
            store.close().unwrap();
            say(&mut out, "CLOSED");
            // Alive until the parent lets go of stdin.
            line(&mut stdin);
        }
        // Sync sends, each checked against the mapping's `flushed` word when acknowledged.
        "sync" => {
            let store = Store::open(
                root,
                StoreConfig {
                    flush_mode: FlushMode::Sync,
                    ..shared()
                },
            )
            .unwrap();
            assert!(!store.is_leader());
            for i in 0..200u32 {
                let body = format!("sync {i}");
                let r = store
                    .put(&MessageRef::new(TOPIC, i % 2, body.as_bytes()))
                    .unwrap();
                assert_eq!(r.status, PutStatus::PutOk);
                let end = r.appended.physical_offset + u64::from(r.appended.size);
                let flushed = flushed_word(root);
                assert!(
                    flushed >= end,
                    "acknowledged at {end} with the store durable to {flushed}"
                );
            }
            store.close().unwrap();
            say(&mut out, "DONE");
        }
        // One send when the parent says.
        "send" => {
            let store = Store::open(root, shared()).unwrap();
            say(&mut out, "OPEN");
            assert_eq!(line(&mut stdin), "send");
            store
                .put(&MessageRef::new(TOPIC, 0, b"from another process"))
                .unwrap();
            say(&mut out, "SENT");
            store.close().unwrap();
        }
        other => panic!("unknown mode {other}"),
    }
}

struct Kid {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Kid {
    fn spawn(root: &Path, mode: &str) -> Kid {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["leader_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, root)
            .env(CHILD_MODE, mode)
            .env_remove("MQLITE_KILL_AT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Kid { child, lines }
    }

    /// The text after `word` on the next line that has it (libtest may print before it).
    fn expect(&mut self, word: &str) -> String {
        for l in self.lines.by_ref() {
            let l = l.unwrap();
            if let Some(at) = l.find(word) {
                return l[at + word.len()..].trim().to_owned();
            }
        }
        panic!("the child ended before printing {word}");
    }

    fn tell(&mut self, what: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{what}").unwrap();
        stdin.flush().unwrap();
    }

    fn succeeds(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

fn commit_log_files(root: &Path) -> usize {
    std::fs::read_dir(root.join("commitlog")).unwrap().count()
}

#[test]
fn a_killed_leader_is_replaced_and_the_survivor_flushes_and_deletes_expired_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut leader = Kid::spawn(root, "lead");
    let end: u64 = leader.expect("SENT").parse().unwrap();
    assert!(
        commit_log_files(root) > 2,
        "the leader rolled through files"
    );
    // This process deletes files as soon as they are old enough (at once), but only once it
    // leads.
    let store = Store::open(
        root,
        StoreConfig {
            file_reserved_time: Duration::ZERO,
            ..shared()
        },
    )
    .unwrap();
    assert!(!store.is_leader(), "the child leads");
    assert_eq!(store.delete_expired_files().unwrap(), 0, "not the leader's");
    assert!(
        flushed_word(root) < end,
        "the leader flushes only every minute"
    );

    leader.child.kill().unwrap(); // SIGKILL
    assert!(!leader.child.wait().unwrap().success());
    assert!(store.wait_leader(BOUND), "a survivor takes over");
    // The take-over flushed what the dead leader left and ran retention here.
    assert!(flushed_word(root) >= end);
    assert!(store.flushed_offset() >= end);
    assert_eq!(commit_log_files(root), 1, "every expired file deleted");
    assert!(store.commit_log_range().0 > 0);
    // The new leader's duties go on: its flush covers a new send.
    let r = store.put(&MessageRef::new(TOPIC, 0, b"after")).unwrap();
    store.flush().unwrap();
    assert!(flushed_word(root) >= r.appended.physical_offset + u64::from(r.appended.size));
    store.close().unwrap();
}

#[test]
fn a_leader_closing_cleanly_hands_over_while_its_process_lives() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut leader = Kid::spawn(root, "lead");
    leader.expect("SENT");
    let store = Store::open(root, shared()).unwrap();
    assert!(!store.is_leader());
    leader.tell("close");
    leader.expect("CLOSED");
    assert!(store.wait_leader(BOUND), "handed over at the close");
    assert!(
        leader.child.try_wait().unwrap().is_none(),
        "by the close, not by the process's exit"
    );
    leader.succeeds();
    store.close().unwrap();
}

#[test]
fn sync_sends_of_two_processes_are_acknowledged_once_the_leader_made_them_durable() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The first opener leads; the children's sync sends wait for its flushes.
    let store = Store::open(
        root,
        StoreConfig {
            flush_mode: FlushMode::Sync,
            ..shared()
        },
    )
    .unwrap();
    assert!(store.wait_leader(BOUND));
    let kids = [Kid::spawn(root, "sync"), Kid::spawn(root, "sync")];
    for mut k in kids {
        k.expect("DONE");
        k.succeeds();
    }
    let (_, end) = store.commit_log_range();
    assert!(flushed_word(root) >= end);
    store.close().unwrap();
}

#[test]
fn a_consumer_in_one_process_is_woken_by_a_send_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    // The queue exists, empty past its first message.
    store.put(&MessageRef::new(TOPIC, 0, b"first")).unwrap();
    let mut sender = Kid::spawn(root, "send");
    sender.expect("OPEN");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| store.wait_for_messages(&[(TOPIC, 0, 1)], Some(BOUND)));
        // The consumer announces itself asleep on the store's wake-up word (bit 0).
        let deadline = Instant::now() + BOUND;
        while std::fs::read(root.join("wakeup")).unwrap()[3] & 1 == 0 {
            assert!(
                Instant::now() < deadline,
                "the consumer never slept on the word"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        sender.tell("send");
        sender.expect("SENT");
        assert!(waiter.join().unwrap().unwrap(), "woken with the message");
    });
    let got = common::read_queue(&store, TOPIC, 0);
    assert_eq!(got.last().unwrap().1, b"from another process");
    sender.succeeds();
    store.close().unwrap();
}
