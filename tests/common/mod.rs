//! Helpers shared by the integration tests (each test file includes this with `mod common;`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mqlite::{GetStatus, Store, StoreConfig, TagFilter};

pub mod scheduled;

/// Small files so rolls happen after a few records.
pub fn small_config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(128 << 10),
        consume_queue_file_units: Some(64),
        max_message_size: Some(64 << 10),
        warm_mapped_files: false,
        ..Default::default()
    }
}

/// Path of the commit-log file that starts at `start`.
pub fn commit_log_file(root: &Path, start: u64) -> PathBuf {
    root.join("commitlog").join(format!("{start:020}"))
}

/// Directory of one consume queue's files.
pub fn cq_dir(root: &Path, topic: &str, queue_id: u32) -> PathBuf {
    root.join("consumequeue")
        .join(topic)
        .join(queue_id.to_string())
}

/// Path of a consume-queue file.
pub fn cq_file(root: &Path, topic: &str, queue_id: u32, start: u64) -> PathBuf {
    cq_dir(root, topic, queue_id).join(format!("{start:020}"))
}

/// Waits until every published record is in its consume queue.
pub fn settle(store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.dispatched_offset() < store.commit_log_range().1 {
        assert!(Instant::now() < deadline, "dispatch did not catch up");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Every message of `topic`/`queue` from offset 0 (up to 1000), as (queue offset, body);
/// asserts the read found messages.
pub fn read_queue(store: &Store, topic: &str, queue: u32) -> Vec<(u64, Vec<u8>)> {
    let got = store
        .get_messages(topic, queue, 0, 1000, &TagFilter::all())
        .unwrap();
    assert_eq!(got.status, GetStatus::Found);
    got.iter()
        .map(|v| (v.queue_offset(), v.body().to_vec()))
        .collect()
}

/// Deterministic body of message `i` (length varies with `i`).
pub fn body(i: u64) -> Vec<u8> {
    let len = 16 + (i * 37 % 200) as usize;
    (0..len).map(|k| (i as usize * 31 + k * 7) as u8).collect()
}

/// xorshift64*: a small deterministic RNG for tests.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Environment variable naming the store directory of a crash child.
pub const CHILD_DIR: &str = "MQLITE_TEST_CRASH_DIR";
/// Line a crash child prints once its work is done.
pub const READY: &str = "MQLITE_CHILD_READY";

/// In a crash child (the test binary re-executed by `spawn_crash_child`), returns the store
/// directory it must work on.
pub fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_DIR).map(PathBuf::from)
}

/// Called by a crash child when its work is done: prints `READY <info>` and sleeps until the
/// parent kills it with SIGKILL (no destructor, no close, no flush).
pub fn child_ready_and_wait(info: &str) -> ! {
    println!("\n{READY} {info}");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Re-executes this test binary running only `test_name` with `CHILD_DIR=dir`, waits for its
/// READY line, SIGKILLs it and returns the text after READY.
pub fn crash_child(test_name: &str, dir: &Path) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut child: Child = Command::new(exe)
        .args([
            test_name,
            "--exact",
            "--nocapture",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut info = None;
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        // libtest prints "test <name> ... " on the same line before the child's output.
        if let Some(at) = line.find(READY) {
            info = Some(line[at + READY.len()..].trim().to_owned());
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    let info = info.expect("the crash child exited before printing READY");
    assert!(!status.success(), "the child must die by the signal");
    info
}

/// A `Wait::NoWait` put of `m` to its own queue, or round robin with `rr`, waking consumers
/// through `wake`.
pub fn put_nowait(
    store: &Store,
    m: &mqlite::MessageRef<'_>,
    rr: Option<&mqlite::RoundRobin>,
    wake: impl Fn(&(dyn Fn() + Sync)),
) -> mqlite::Result<Option<mqlite::PutResult>> {
    put_nowait_request(store, m, rr, None, wake)
}

/// `put_nowait` with the caller's clock reading `now_ms`.
pub fn put_nowait_at(
    store: &Store,
    m: &mqlite::MessageRef<'_>,
    rr: Option<&mqlite::RoundRobin>,
    now_ms: i64,
    wake: impl Fn(&(dyn Fn() + Sync)),
) -> mqlite::Result<Option<mqlite::PutResult>> {
    put_nowait_request(store, m, rr, Some(now_ms), wake)
}

fn put_nowait_request(
    store: &Store,
    m: &mqlite::MessageRef<'_>,
    rr: Option<&mqlite::RoundRobin>,
    now_ms: Option<i64>,
    wake: impl Fn(&(dyn Fn() + Sync)),
) -> mqlite::Result<Option<mqlite::PutResult>> {
    let mut req = mqlite::PutRequest::new(routing(m, rr))
        .wait(mqlite::Wait::NoWait)
        .wake_via(&wake);
    req.now_ms = now_ms;
    store.put_message(m, &req)
}

/// A put of `m` waiting as `wait`, to its own queue or round robin with `rr`.
pub fn put_waiting(
    store: &Store,
    m: &mqlite::MessageRef<'_>,
    rr: Option<&mqlite::RoundRobin>,
    wait: mqlite::Wait,
) -> mqlite::Result<mqlite::PutResult> {
    let req = mqlite::PutRequest::new(routing(m, rr)).wait(wait);
    store
        .put_message(m, &req)
        .map(|r| r.expect("only a NoWait put declines"))
}

fn routing<'r>(
    m: &mqlite::MessageRef<'_>,
    rr: Option<&'r mqlite::RoundRobin>,
) -> mqlite::Routing<'r> {
    rr.map_or(
        mqlite::Routing::Queue(m.queue_id),
        mqlite::Routing::RoundRobin,
    )
}

/// A `Wait::Pipelined` put (see `put_waiting`).
pub fn put_pipelined(
    store: &Store,
    m: &mqlite::MessageRef<'_>,
    rr: Option<&mqlite::RoundRobin>,
) -> mqlite::Result<mqlite::PutResult> {
    put_waiting(store, m, rr, mqlite::Wait::Pipelined)
}

/// Scale tests under a low descriptor limit. In the parent: runs `test` again in a child under
/// `ulimit -Sn nofile` and asserts it passed, returning false. In the child (`MQLITE_SCALE_CHILD`
/// set): checks the limit is in force and returns true (run the body).
pub fn under_descriptor_limit(test: &str, nofile: u64) -> bool {
    if std::env::var_os("MQLITE_SCALE_CHILD").is_some() {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        let soft: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert_eq!(soft, nofile, "{line}");
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -Sn {nofile} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("MQLITE_SCALE_CHILD", "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the child under ulimit -n {nofile} failed"
    );
    false
}
