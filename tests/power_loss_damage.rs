//! Power loss without root (reliability plan B.b, black-box layer b2): deterministic damage to
//! the files of a store left in a crashed state, then reopen.
//!
//! A crash image is built in-process, without a child process:
//! 1. open, put the *prefix* (two queues), close cleanly: the checkpoint now says the prefix is
//!    durable (`confirmPhyOffset` = W, the durable watermark) and its bytes are saved;
//! 2. reopen, put the *tail* (crossing at least one commit-log file roll), close;
//! 3. put the saved checkpoint back and create the `abort` marker.
//!
//! That is the disk image of a power loss after the tail reached the page cache (and partly the
//! disk) but before the next checkpoint: everything below W was flushed, everything above it may
//! be torn. Each damage class then changes bytes **above W** and the store must open, keep every
//! record below W and every intact record before the first damaged byte, drop the torn tail,
//! and rebuild consume queues so that what is kept is readable; appends continue and survive a
//! clean reopen. Damage **below W** must surface as `Corrupted` naming the file and the offset
//! (at open, or at the latest when the damaged record is read), never as a silently missing or
//! altered message.
//!
//! Positions are drawn from a seeded RNG; each class runs `ROUNDS` rounds in CI
//! (`MQLITE_SOAK=1`: `SOAK_ROUNDS`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{commit_log_file, cq_dir, cq_file, Rng};
use mqlite::checkpoint::CheckpointData;
use mqlite::{Error, MessageRef, Store, StoreConfig, TagFilter};

const TOPIC: &str = "Power";
const QUEUES: u32 = 2;
const PREFIX: u64 = 200;
const TAIL: u64 = 160;
const ROUNDS: u64 = 10;
const SOAK_ROUNDS: u64 = 300;

fn rounds() -> u64 {
    if std::env::var("MQLITE_SOAK").as_deref() == Ok("1") {
        SOAK_ROUNDS
    } else {
        ROUNDS
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        // Only open and close write the checkpoint: the tail stays above the watermark.
        flush_interval: Duration::from_secs(60),
        ..common::small_config()
    }
}

fn file_size() -> u64 {
    config().commit_log_file_size.unwrap_or_default()
}

/// Body of message `i`: 400..1400 bytes, content derived from `i`.
fn body(i: u64) -> Vec<u8> {
    let len = 400 + (i * 7919 % 1000) as usize;
    (0..len)
        .map(|k| (i.wrapping_mul(131) as usize + k * 13) as u8)
        .collect()
}

#[derive(Debug, Clone)]
struct Msg {
    queue: u32,
    queue_offset: u64,
    phys: u64,
    size: u64,
    body: Vec<u8>,
}

impl Msg {
    fn end(&self) -> u64 {
        self.phys + self.size
    }
}

#[derive(Debug)]
struct Image {
    dir: tempfile::TempDir,
    /// confirmPhyOffset of the restored checkpoint: the durable watermark.
    w: u64,
    /// One past the last tail record.
    end: u64,
    msgs: Vec<Msg>,
}

impl Image {
    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the commit-log file holding global offset `at`, and `at` inside it.
    fn locate(&self, at: u64) -> (PathBuf, u64) {
        let fs = file_size();
        (commit_log_file(self.root(), at - at % fs), at % fs)
    }

    /// The messages that must survive when recovery stops at `cut` (records ending at or before
    /// it; the watermark is a record boundary).
    fn kept_before(&self, cut: u64) -> Vec<Msg> {
        self.msgs
            .iter()
            .filter(|m| m.end() <= cut)
            .cloned()
            .collect()
    }

    /// A random record of the tail (entirely above W).
    fn random_tail_record(&self, rng: &mut Rng) -> Msg {
        let tail: Vec<&Msg> = self.msgs.iter().filter(|m| m.phys >= self.w).collect();
        tail[rng.range(0, tail.len() as u64 - 1) as usize].clone()
    }
}

fn put(store: &Store, i: u64, msgs: &mut Vec<Msg>) {
    let queue = (i % u64::from(QUEUES)) as u32;
    let b = body(i);
    let a = store
        .put(&MessageRef::new(TOPIC, queue, &b))
        .unwrap()
        .appended;
    msgs.push(Msg {
        queue,
        queue_offset: a.queue_offset,
        phys: a.physical_offset,
        size: u64::from(a.size),
        body: b,
    });
}

fn build() -> Image {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut msgs = Vec::new();
    let store = Store::open(root, config()).unwrap();
    for i in 0..PREFIX {
        put(&store, i, &mut msgs);
    }
    store.close().unwrap();
    let cp_bytes = std::fs::read(root.join("checkpoint")).unwrap();
    let cp = CheckpointData::decode(&cp_bytes).unwrap();
    let w = cp.confirm_phy_offset;
    assert_eq!(w, msgs.last().unwrap().end());
    assert_eq!(
        cp.logics_dispatched_offset, w,
        "a clean close checkpoints the dispatched offset: {cp:?}"
    );
    let store = Store::open(root, config()).unwrap();
    for i in PREFIX..PREFIX + TAIL {
        put(&store, i, &mut msgs);
    }
    store.close().unwrap();
    let end = msgs.last().unwrap().end();
    assert!(
        end / file_size() > w / file_size(),
        "the tail must cross a file roll"
    );
    std::fs::write(root.join("checkpoint"), &cp_bytes).unwrap();
    std::fs::write(root.join("abort"), b"12345").unwrap();
    Image { dir, w, end, msgs }
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
    f.sync_all().unwrap();
}

fn read_at(path: &Path, at: u64, len: usize) -> Vec<u8> {
    let f = OpenOptions::new().read(true).open(path).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, at).unwrap();
    b
}

fn zero_range(img: &Image, from: u64, to: u64) {
    assert!(from >= img.w, "damage must stay above the watermark");
    let mut at = from;
    while at < to {
        let (path, local) = img.locate(at);
        let n = (file_size() - local).min(to - at);
        write_at(&path, local, &vec![0u8; n as usize]);
        at += n;
    }
}

fn flip_bit(img: &Image, at: u64, bit: u8) {
    let (path, local) = img.locate(at);
    let b = read_at(&path, local, 1)[0] ^ (1 << bit);
    write_at(&path, local, &[b]);
}

/// Every message of a queue, as (queue offset, physical offset, body).
fn read_queue(store: &Store, queue: u32) -> Result<Vec<(u64, u64, Vec<u8>)>, Error> {
    let mut out = Vec::new();
    let (_, max) = store.queue_offsets(TOPIC, queue)?;
    let mut offset = 0;
    while offset < max {
        let got = store.get_messages(TOPIC, queue, offset, 64, &TagFilter::all())?;
        out.extend(
            got.iter()
                .map(|v| (v.queue_offset(), v.physical_offset(), v.body().to_vec())),
        );
        assert!(got.next_offset > offset, "{:?}", got.status);
        offset = got.next_offset;
    }
    Ok(out)
}

/// Start of the commit-log file after the one holding `offset`.
fn next_file_start(offset: u64) -> u64 {
    (offset / file_size() + 1) * file_size()
}

/// Where recovery must end when the first damaged byte is at `cut` and `kept` survive: after
/// the last kept record, or at the start of the next file when the damage is in a later file
/// (the scan followed the blank marker there).
fn expected_end(kept: &[Msg], cut: u64) -> u64 {
    let e = kept.last().map_or(0, Msg::end);
    if cut >= next_file_start(e) {
        next_file_start(e)
    } else {
        e
    }
}

/// The store holds exactly `kept` (per queue, in order, contiguous from 0), appends continue
/// at the right offsets, and a clean reopen shows the same plus the new messages.
fn assert_store_holds(root: &Path, kept: &[Msg], what: &str) {
    assert_store_holds_to(root, kept, None, what);
}

/// Same, and the recovered end is `expected_end(kept, cut)` when `cut` is given.
fn assert_store_holds_to(root: &Path, kept: &[Msg], cut: Option<u64>, what: &str) {
    let store = Store::open(root, config()).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    for q in 0..QUEUES {
        let want: Vec<(u64, u64, Vec<u8>)> = kept
            .iter()
            .filter(|m| m.queue == q)
            .map(|m| (m.queue_offset, m.phys, m.body.clone()))
            .collect();
        let got = read_queue(&store, q).unwrap_or_else(|e| panic!("{what}: read q{q}: {e}"));
        assert_eq!(got.len(), want.len(), "{what}: queue {q} length");
        assert!(got == want, "{what}: queue {q} content differs");
        for (i, (qo, _, _)) in got.iter().enumerate() {
            assert_eq!(*qo, i as u64, "{what}: queue {q} not contiguous");
        }
        assert_eq!(
            store.queue_offsets(TOPIC, q).unwrap(),
            (0, want.len() as u64),
            "{what}: queue {q} offsets"
        );
    }
    let end = store.commit_log_range().1;
    match cut {
        Some(cut) => assert_eq!(end, expected_end(kept, cut), "{what}: recovered end"),
        None => assert_eq!(
            end,
            kept.last().map_or(0, Msg::end),
            "{what}: recovered end"
        ),
    }
    // Appends continue after the kept records and survive a clean reopen.
    let extra = b"after-recovery".to_vec();
    let n0 = kept.iter().filter(|m| m.queue == 0).count() as u64;
    let a = store
        .put(&MessageRef::new(TOPIC, 0, &extra))
        .unwrap()
        .appended;
    assert_eq!(a.queue_offset, n0, "{what}: next queue offset");
    store.close().unwrap();
    let store = Store::open(root, config()).unwrap();
    assert!(!store.recovery_report().abnormal, "{what}");
    let q0 = read_queue(&store, 0).unwrap();
    assert_eq!(q0.len() as u64, n0 + 1, "{what}: after clean reopen");
    assert_eq!(q0.last().unwrap().2, extra);
    store.close().unwrap();
}

fn report(root: &Path) -> mqlite::recovery::RecoveryReport {
    let store = Store::open(root, config()).unwrap();
    let r = store.recovery_report();
    // Opening a crashed store and dropping it without appends is itself a clean close.
    drop(store);
    r
}

// ---- T0: no damage ----------------------------------------------------------------------

#[test]
fn t0_undamaged_crash_image_keeps_everything() {
    let img = build();
    let r = report(img.root());
    assert!(r.abnormal && !r.torn_tail, "{r:?}");
    assert_eq!(r.end, img.end);
    assert_eq!(
        r.scanned_from,
        img.w - img.w % file_size(),
        "recovery starts at the file holding the durable watermark"
    );
    assert_store_holds(img.root(), &img.msgs, "T0");
}

// ---- T0b: consume-queue files created above the watermark are lost ---------------------

/// A new consume-queue file is made durable (its fsync and its directory's) by the queue's
/// next flush, not when it is created; an OS crash before that flush may lose it. The flush
/// comes before the checkpoint that could cover the file's units, so every unit of such a
/// file is above the watermark, and recovery must rebuild the file from the commit log.
#[test]
fn t0b_consume_queue_files_created_above_the_watermark_are_lost() {
    let img = build();
    let units_per_file = config().consume_queue_file_units.unwrap_or_default();
    let file_bytes = units_per_file * 20;
    let mut lost = 0;
    for q in 0..QUEUES {
        let prefix_units = img
            .msgs
            .iter()
            .filter(|m| m.queue == q && m.end() <= img.w)
            .count() as u64;
        // The file holding the last unit below the watermark stays; later ones go.
        let last_kept = (prefix_units - 1) / units_per_file * file_bytes;
        for entry in std::fs::read_dir(cq_dir(img.root(), TOPIC, q)).unwrap() {
            let p = entry.unwrap().path();
            let start: u64 = p.file_name().unwrap().to_str().unwrap().parse().unwrap();
            if start > last_kept {
                std::fs::remove_file(&p).unwrap();
                lost += 1;
            }
        }
    }
    assert!(
        lost >= QUEUES as usize,
        "the tail must create consume-queue files"
    );
    assert_store_holds(img.root(), &img.msgs, "T0b");
}

// ---- T1: truncated last commit-log file -------------------------------------------------

/// Removes commit-log files after the one holding the last record (an empty preallocated
/// successor), so the data file is the last file, as when the crash came before preallocation.
fn drop_empty_successors(img: &Image) {
    let fs = file_size();
    let last_data = (img.end - 1) / fs * fs;
    for entry in std::fs::read_dir(img.root().join("commitlog")).unwrap() {
        let p = entry.unwrap().path();
        let start: u64 = p.file_name().unwrap().to_str().unwrap().parse().unwrap();
        if start > last_data {
            assert!(std::fs::read(&p).unwrap().iter().all(|&b| b == 0));
            std::fs::remove_file(&p).unwrap();
        }
    }
}

#[test]
fn t1_last_file_truncated_above_watermark() {
    let mut rng = Rng(0x7131);
    for round in 0..rounds() {
        let img = build();
        drop_empty_successors(&img);
        let fs = file_size();
        let file_start = (img.end - 1) / fs * fs;
        let lo = img.w.max(file_start);
        let x = rng.range(lo, img.end - 1);
        let (path, local) = img.locate(x);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(local)
            .unwrap();
        let r = report(img.root());
        assert!(r.abnormal, "{r:?}");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            fs,
            "short last file re-preallocated"
        );
        assert_store_holds_to(
            img.root(),
            &img.kept_before(x),
            Some(x),
            &format!("T1 round {round} x={x}"),
        );
    }
}

#[test]
fn t1_last_file_truncated_to_zero_length() {
    let img = build();
    drop_empty_successors(&img);
    let fs = file_size();
    let file_start = (img.end - 1) / fs * fs;
    assert!(file_start >= img.w, "the last file lies above W");
    let (path, _) = img.locate(file_start);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_store_holds_to(
        img.root(),
        &img.kept_before(file_start),
        Some(file_start),
        "T1 zero-length",
    );
}

// ---- T2: zeroed from x to the end ----------------------------------------------------------

#[test]
fn t2_zeroed_from_x_to_end() {
    let mut rng = Rng(0x7232);
    for round in 0..rounds() {
        let img = build();
        let x = rng.range(img.w, img.end - 1);
        zero_range(&img, x, img.end);
        assert_store_holds_to(
            img.root(),
            &img.kept_before(x),
            Some(x),
            &format!("T2 round {round} x={x}"),
        );
    }
}

// ---- T3 / T4: a zeroed page, a torn page -----------------------------------------------------

/// Where recovery must stop after `[from, to)` was zeroed: the start of the first record
/// that had a non-zero byte there, or the damaged blank marker itself; `None` if only zero
/// padding was overwritten (no damage).
fn zeroed_cut(img: &Image, from: u64, before: &[u8]) -> Option<u64> {
    let o = from + before.iter().position(|&b| b != 0)? as u64;
    Some(
        img.msgs
            .iter()
            .find(|m| m.phys <= o && o < m.end())
            .map_or(o, |m| m.phys),
    )
}

fn zero_and_check(img: &Image, from: u64, to: u64, what: &str) {
    let (path, local) = img.locate(from);
    let before = read_at(&path, local, (to - from) as usize);
    zero_range(img, from, to);
    let cut = zeroed_cut(img, from, &before).unwrap_or(img.end);
    let kept = img.kept_before(cut);
    assert_store_holds_to(img.root(), &kept, Some(cut), what);
}

#[test]
fn t3_zeroed_4k_page_drops_everything_after_it() {
    let mut rng = Rng(0x7333);
    for round in 0..rounds() {
        let img = build();
        let first_page = img.w.div_ceil(4096) * 4096;
        let page = rng.range(first_page / 4096, (img.end - 1) / 4096) * 4096;
        let to = (page + 4096).min(img.end);
        zero_and_check(&img, page, to, &format!("T3 round {round} page={page}"));
    }
}

#[test]
fn t4_torn_page_keeps_first_k_sectors() {
    let mut rng = Rng(0x7434);
    for round in 0..rounds() {
        let img = build();
        // keep the first k*512 bytes of a page above W, lose the rest of the page
        let first_page = img.w.div_ceil(4096) * 4096;
        let page = rng.range(first_page / 4096, (img.end - 1) / 4096) * 4096;
        let from = page + rng.range(1, 7) * 512;
        let to = (page + 4096).min(img.end);
        if from >= to {
            continue;
        }
        zero_and_check(&img, from, to, &format!("T4 round {round} from={from}"));
    }
}

// ---- T5: one flipped bit above the watermark ------------------------------------------------

#[test]
fn t5_flipped_body_bit_in_tail_record_ends_the_log_there() {
    let mut rng = Rng(0x7535);
    for round in 0..rounds() {
        let img = build();
        let victim = img.random_tail_record(&mut rng);
        let at = victim.phys + 88 + rng.range(0, victim.body.len() as u64 - 1);
        flip_bit(&img, at, rng.range(0, 7) as u8);
        let r = report(img.root());
        assert!(r.torn_tail, "{r:?}");
        assert_store_holds_to(
            img.root(),
            &img.kept_before(victim.phys),
            Some(victim.phys),
            &format!("T5 round {round}"),
        );
    }
}

/// FORMAT.md §1: the record CRC covers the body only (RocketMQ's layout), so a flipped bit in
/// QUEUEOFFSET, QUEUEID, FLAG, timestamps or the topic is not caught by it. The plan (B.b T5,
/// "Validation must cover the whole record") requires the damaged record to be treated as the
/// torn tail like a body flip.
#[test]
fn t5_flipped_header_bit_in_tail_record_is_not_served() {
    let mut rng = Rng(0x7536);
    for round in 0..rounds() {
        let img = build();
        let victim = img.random_tail_record(&mut rng);
        // QUEUEOFFSET is bytes 20..28; flip a low bit of its last byte.
        flip_bit(&img, victim.phys + 27, rng.range(0, 3) as u8);
        assert_store_holds_to(
            img.root(),
            &img.kept_before(victim.phys),
            Some(victim.phys),
            &format!("T5h round {round}"),
        );
    }
}

// ---- T6: damage below the watermark ---------------------------------------------------------

/// Damage below W must be reported as `Corrupted` naming the commit-log file holding `victim`
/// and its offset: at open (recovery scans the file holding the checkpoint boundary), or when
/// the victim's queue is read (files before that one); never skipped or served.
fn assert_reported(img: &Image, victim: &Msg, what: &str) {
    let (path, _) = img.locate(victim.phys);
    match Store::open(img.root(), config()) {
        Err(Error::Corrupted {
            path: p, offset, ..
        }) => {
            assert_eq!(p, path, "{what}: open error names the file");
            assert_eq!(offset, victim.phys, "{what}: open error names the offset");
        }
        Err(e) => panic!("{what}: unexpected error {e}"),
        Ok(store) => {
            let err = read_queue(&store, victim.queue)
                .expect_err(&format!("{what}: damaged record was served"));
            match err {
                Error::Corrupted {
                    path: p, offset, ..
                } => {
                    assert_eq!(p, path, "{what}: read error names the file");
                    assert_eq!(offset, victim.phys, "{what}: read error names the offset");
                }
                e => panic!("{what}: unexpected error {e}"),
            }
            // The other queue is still fully readable.
            let other = 1 - victim.queue;
            let n = img.msgs.iter().filter(|m| m.queue == other).count();
            assert_eq!(read_queue(&store, other).unwrap().len(), n, "{what}");
        }
    }
}

/// A body bit flipped in a record below W, anywhere in the durable part of the log.
#[test]
fn t6_flipped_body_bit_below_watermark_is_reported() {
    let mut rng = Rng(0x7637);
    for round in 0..rounds() {
        let img = build();
        let below: Vec<&Msg> = img.msgs.iter().filter(|m| m.end() <= img.w).collect();
        let victim = below[rng.range(0, below.len() as u64 - 1) as usize].clone();
        flip_bit(
            &img,
            victim.phys + 88 + rng.range(0, victim.body.len() as u64 - 1),
            rng.range(0, 7) as u8,
        );
        assert_reported(&img, &victim, &format!("T6 body round {round}"));
    }
}

/// The desired behaviour of the plan (B.b T6): damage below the durable watermark is reported
/// *at open*. Recovery scans only from `min(dispatched, confirmPhyOffset)`, so after a clean
/// checkpoint the damaged record below it is not looked at until it is read.
#[test]
#[ignore = "gap: damage below the checkpoint's scan start is not detected at open (only when the record is read); see docs/reliability.md"]
fn t6_flipped_body_bit_below_watermark_fails_the_open() {
    let img = build();
    let victim = img.msgs[3].clone();
    flip_bit(&img, victim.phys + 88 + 1, 2);
    let (path, _) = img.locate(victim.phys);
    match Store::open(img.root(), config()) {
        Err(Error::Corrupted {
            path: p, offset, ..
        }) => {
            assert_eq!(p, path);
            assert_eq!(offset, victim.phys);
        }
        other => panic!("expected Corrupted at open, got {other:?}"),
    }
}

/// A header bit below W (QUEUEOFFSET): the record passes the body CRC, so a read returns a
/// message whose stored queue offset disagrees with the offset it was read at. Desired:
/// `Corrupted`.
#[test]
fn t6_flipped_header_bit_below_watermark_is_reported() {
    let img = build();
    let victim = img.msgs[5].clone();
    flip_bit(&img, victim.phys + 27, 1);
    let store = Store::open(img.root(), config()).unwrap();
    let err = read_queue(&store, victim.queue).expect_err("damaged record was served");
    assert!(
        matches!(err, Error::Corrupted { offset, .. } if offset == victim.phys),
        "{err:?}"
    );
}

fn zero_record_below_w(pick: usize, what: &str) {
    let img = build();
    let victim = img.msgs[pick].clone();
    assert!(victim.end() <= img.w);
    let (path, local) = img.locate(victim.phys);
    write_at(&path, local, &vec![0u8; victim.size as usize]);
    assert_reported(&img, &victim, what);
}

/// A whole record below W zeroed (a lost write) in a file before the one holding the
/// checkpoint boundary: reported when read.
#[test]
fn t6_zeroed_record_below_watermark_in_an_older_file_is_reported() {
    zero_record_below_w(3, "T6 zeroed record, older file");
}

/// The same in the file holding the checkpoint boundary: recovery sees TOTALSIZE 0 (end of
/// data) below confirmPhyOffset and fails the open, but the error names the *last* commit-log
/// file instead of the file holding the offset (recovery.rs: `path: last.path()`).
#[test]

fn t6_zeroed_record_below_watermark_in_the_boundary_file_names_its_file() {
    zero_record_below_w(PREFIX as usize - 2, "T6 zeroed record, boundary file");
}

/// A non-last commit-log file cut short (below W): reported at open, nothing deleted.
#[test]
fn t6_truncated_middle_file_is_corruption_at_open() {
    let img = build();
    let (path, _) = img.locate(0);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let err = Store::open(img.root(), config()).unwrap_err();
    match err {
        Error::Corrupted {
            path: p, offset, ..
        } => {
            assert_eq!(p, path);
            assert_eq!(offset, 0);
        }
        e => panic!("unexpected {e}"),
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
}

// ---- T7: consume-queue damage ---------------------------------------------------------------

fn cq_files(root: &Path, queue: u32) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cq_dir(root, TOPIC, queue))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// The consume-queue file of `queue` holding unit `index` (a file prepared ahead of the next
/// roll may follow it).
fn cq_file_holding(root: &Path, queue: u32, index: u64) -> PathBuf {
    cq_files(root, queue)
        .into_iter()
        .rfind(|p| {
            let start: u64 = p.file_name().unwrap().to_str().unwrap().parse().unwrap();
            start <= index * 20
        })
        .unwrap()
}

#[test]
fn t7_deleted_consume_queue_files_are_rebuilt() {
    let img = build();
    for q in 0..QUEUES {
        for p in cq_files(img.root(), q) {
            std::fs::remove_file(p).unwrap();
        }
    }
    // With the whole queue gone, only the units above the checkpoint's dispatched offset can
    // come back by re-dispatch from W; the store must still open and keep the tail readable.
    let store = Store::open(img.root(), config()).unwrap();
    for q in 0..QUEUES {
        let (min, max) = store.queue_offsets(TOPIC, q).unwrap();
        let n = img.msgs.iter().filter(|m| m.queue == q).count() as u64;
        assert_eq!(max, n, "queue {q}: max offset after rebuild");
        // Units above W are re-dispatched and readable.
        let tail_first = img
            .msgs
            .iter()
            .find(|m| m.queue == q && m.phys >= img.w)
            .unwrap()
            .queue_offset;
        assert!(min <= tail_first, "queue {q}: min {min}");
        let got = store
            .get_messages(TOPIC, q, tail_first, 1000, &TagFilter::all())
            .unwrap();
        let bodies: Vec<Vec<u8>> = got.iter().map(|v| v.body().to_vec()).collect();
        let want: Vec<Vec<u8>> = img
            .msgs
            .iter()
            .filter(|m| m.queue == q && m.phys >= img.w)
            .map(|m| m.body.clone())
            .collect();
        assert_eq!(bodies, want, "queue {q}");
    }
}

#[test]
fn t7_deleted_consume_queue_files_with_checkpoint_missing_are_rebuilt_completely() {
    let img = build();
    for q in 0..QUEUES {
        for p in cq_files(img.root(), q) {
            std::fs::remove_file(p).unwrap();
        }
    }
    std::fs::remove_file(img.root().join("checkpoint")).unwrap();
    assert_store_holds(img.root(), &img.msgs, "T7 deleted + no checkpoint");
}

/// Units of the last consume-queue file above the watermark: zeroed, garbage, truncated, empty.
#[test]
fn t7_damaged_last_consume_queue_file_is_rebuilt() {
    let mut rng = Rng(0x7737);
    for variant in [0, 1, 3] {
        for round in 0..rounds() {
            let img = build();
            let q = (round % 2) as u32;
            let last = img.msgs.iter().filter(|m| m.queue == q).count() as u64 - 1;
            let path = cq_file_holding(img.root(), q, last);
            let start: u64 = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
            let units_in_file: u64 = img
                .msgs
                .iter()
                .filter(|m| m.queue == q && m.queue_offset * 20 >= start)
                .count() as u64;
            // only units of records above W
            let first_above = img
                .msgs
                .iter()
                .find(|m| m.queue == q && m.phys >= img.w)
                .unwrap()
                .queue_offset;
            let lo = first_above.max(start / 20);
            let hi = start / 20 + units_in_file;
            if lo >= hi {
                continue;
            }
            let k = rng.range(lo, hi - 1);
            let local = k * 20 - start;
            let what = format!("T7 variant {variant} round {round} unit {k}");
            match variant {
                0 => write_at(&path, local, &vec![0u8; ((hi - k) * 20) as usize]),
                1 => {
                    let garbage: Vec<u8> = (0..(hi - k + 3) * 20)
                        .map(|_| rng.next_u64() as u8)
                        .collect();
                    write_at(&path, local, &garbage);
                }
                _ => OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(0)
                    .unwrap(),
            }
            assert_store_holds(img.root(), &img.msgs, &what);
        }
    }
}

/// The last consume-queue unit torn inside its size word (a 20-byte unit can straddle a
/// 512-byte sector): the file is cut 11 bytes into the unit, the size word keeps 3 of its 4
/// bytes. The unit lies above the dispatched watermark, so recovery must drop or rebuild it.
#[test]

fn t7_unit_torn_inside_its_size_word_is_rebuilt() {
    let img = build();
    // a queue whose last record size has a non-zero low byte, so losing that byte matters
    let (q, last) = (0..QUEUES)
        .map(|q| (q, img.msgs.iter().rfind(|m| m.queue == q).unwrap()))
        .find(|(_, m)| m.size & 0xFF != 0)
        .unwrap();
    assert!(last.phys >= img.w);
    let path = cq_file_holding(img.root(), q, last.queue_offset);
    let start: u64 = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
    let local = last.queue_offset * 20 - start;
    // keep the offset and 3 of the 4 size bytes: the size reads as non-zero but wrong
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(local + 11)
        .unwrap();
    assert_store_holds(img.root(), &img.msgs, "T7 torn unit");
}

/// A stale but well-formed unit after the last one (a copy of an earlier unit of the same
/// queue): it points at a valid record of the right queue, but with the wrong queue offset.
/// Recovery must not serve that record twice.
#[test]

fn t7_stale_duplicate_unit_after_the_tail_is_not_served() {
    let img = build();
    let q = 0;
    let n = img.msgs.iter().filter(|m| m.queue == q).count() as u64;
    let start_of = |p: &Path| -> u64 { p.file_name().unwrap().to_str().unwrap().parse().unwrap() };
    let from = cq_file_holding(img.root(), q, n - 1);
    let unit = read_at(&from, (n - 1) * 20 - start_of(&from), 20);
    let to = cq_file_holding(img.root(), q, n);
    write_at(&to, n * 20 - start_of(&to), &unit);
    assert_store_holds(img.root(), &img.msgs, "T7 stale duplicate unit");
}

// ---- T8: checkpoint damage ------------------------------------------------------------------

#[test]
fn t8_checkpoint_damage_loses_nothing() {
    for variant in 0..4 {
        let img = build();
        let p = img.root().join("checkpoint");
        match variant {
            0 => std::fs::remove_file(&p).unwrap(),
            1 => write_at(&p, 0, &[0xEE; 4096]),
            2 => write_at(&p, 10, &[0xEE; 8]), // slot A torn: slot B is used
            _ => OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(0)
                .unwrap(),
        }
        let r = report(img.root());
        assert_eq!(r.end, img.end, "T8 variant {variant}: {r:?}");
        assert_store_holds(img.root(), &img.msgs, &format!("T8 variant {variant}"));
    }
}

/// A checkpoint slot claiming more than the log holds (stale, from a longer log): never
/// trusted blindly: reported as corruption, not served.
#[test]
fn t8_checkpoint_beyond_the_log_is_reported() {
    let img = build();
    let cp = CheckpointData {
        confirm_phy_offset: img.end + 4096,
        logics_dispatched_offset: img.w,
        ..Default::default()
    };
    let slot = cp.encode();
    let p = img.root().join("checkpoint");
    write_at(&p, 0, &slot);
    write_at(&p, 2048, &slot);
    let err = Store::open(img.root(), config()).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
}

// ---- T9: abort marker -----------------------------------------------------------------------

#[test]
fn t9_missing_abort_marker_still_cuts_a_torn_tail() {
    let img = build();
    std::fs::remove_file(img.root().join("abort")).unwrap();
    let victim = img.msgs.last().unwrap().clone();
    zero_range(&img, victim.phys + victim.size / 2, victim.end());
    let r = report(img.root());
    assert!(!r.abnormal && r.torn_tail, "{r:?}");
    // the torn bytes were zeroed on disk
    let (path, local) = img.locate(victim.phys);
    assert!(read_at(&path, local, victim.size as usize)
        .iter()
        .all(|&b| b == 0));
    assert_store_holds_to(
        img.root(),
        &img.kept_before(victim.phys),
        Some(victim.phys),
        "T9 no abort",
    );
}

#[test]
fn t9_abort_marker_left_after_clean_close_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let mut msgs = Vec::new();
    let store = Store::open(dir.path(), config()).unwrap();
    for i in 0..50 {
        put(&store, i, &mut msgs);
    }
    store.close().unwrap();
    std::fs::write(dir.path().join("abort"), b"1").unwrap();
    assert_store_holds(dir.path(), &msgs, "T9 stale abort");
}

// ---- T10: crash during a roll ----------------------------------------------------------------

#[test]
fn t10_zero_length_or_short_new_file_after_the_last_one() {
    for len in [0u64, 4096, 100] {
        let img = build();
        let fs = file_size();
        let mut next = (img.end / fs + 1) * fs;
        while commit_log_file(img.root(), next).exists() {
            next += fs;
        }
        let p = commit_log_file(img.root(), next);
        std::fs::write(&p, vec![0u8; len as usize]).unwrap();
        assert_store_holds(img.root(), &img.msgs, &format!("T10 len {len}"));
    }
}

// ---- T11: metadata files ----------------------------------------------------------------------

#[test]
fn t11_topics_json_missing_or_empty_keeps_the_messages() {
    for variant in 0..3 {
        let img = build();
        let cfg = img.root().join("config");
        let main = cfg.join("topics.json");
        let bak = cfg.join("topics.json.bak");
        match variant {
            0 => std::fs::write(&main, b"").unwrap(),
            1 => std::fs::remove_file(&main).unwrap(),
            _ => {
                // neither file: the topic table is lost, the messages must not be
                std::fs::remove_file(&main).unwrap();
                let _ = std::fs::remove_file(&bak);
            }
        }
        assert_store_holds(img.root(), &img.msgs, &format!("T11 variant {variant}"));
    }
}

#[test]
fn t11_topics_json_that_does_not_parse_is_reported_or_replaced_by_its_bak() {
    let damage: [&[u8]; 2] = [b"{\"topicConfigTable\": {\"Pow", &[0xFF; 300]];
    for (variant, bytes) in damage.into_iter().enumerate() {
        let img = build();
        let cfg = img.root().join("config");
        let main = cfg.join("topics.json");
        let bak = cfg.join("topics.json.bak");
        let good = std::fs::read(&main).unwrap();
        std::fs::write(&main, bytes).unwrap();
        let _ = std::fs::remove_file(&bak);
        // No .bak: an error naming the file, and the file is left as it was.
        match Store::open(img.root(), config()) {
            Err(Error::ConfigFile { path, .. }) => assert_eq!(path, main),
            other => panic!("T11 variant {variant}: {other:?}"),
        }
        assert_eq!(std::fs::read(&main).unwrap(), bytes);
        // A valid .bak stands in.
        std::fs::write(&bak, &good).unwrap();
        assert_store_holds(img.root(), &img.msgs, &format!("T11 bak variant {variant}"));
    }
}

#[test]
fn t11_temp_file_left_by_a_crashed_config_write_is_ignored() {
    let img = build();
    let cfg = img.root().join("config");
    std::fs::write(cfg.join("topics.json.tmp"), b"{garbage").unwrap();
    assert_store_holds(img.root(), &img.msgs, "T11 tmp");
}

#[test]
fn build_helper_sanity() {
    let img = build();
    assert!(img.w > 0 && img.end > img.w);
    assert!(cq_file(img.root(), TOPIC, 0, 0).exists());
    assert_eq!(img.msgs.len() as u64, PREFIX + TAIL);
}
