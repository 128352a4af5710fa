//! END_OF_FILE padding at exact file boundaries (FORMAT.md §1.4): a record goes into the current
//! file only if `len + 8 <= remaining`; otherwise an 8-byte blank marker closes the file and the
//! record (or a whole batch) starts the next one. A record never spans files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{commit_log_file, settle, Rng};
use mqlite::message::codec::{self, RecordView};
use mqlite::{Appended, MessageRef, Store, StoreConfig, TagFilter};

const FILE: u64 = 64 << 10;
const TOPIC: &str = "Pad";
/// Record size = FIXED + body for topic "Pad" and no user properties: 91 fixed bytes, the
/// topic, and the store's 20-byte whole-record CRC property.
const FIXED: u64 = 91 + 3 + codec::RECORD_CRC_LEN as u64;
const MAX_BODY: usize = 16 << 10;

fn config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(FILE),
        consume_queue_file_units: Some(64),
        max_message_size: Some(MAX_BODY),
        warm_mapped_files: false,
        ..Default::default()
    }
}

fn body_of(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|k| (seed as usize * 131 + k) as u8).collect()
}

fn put_sized(store: &Store, queue: u32, record_len: u64, seed: u64) -> Appended {
    assert!(record_len > FIXED);
    let body = body_of((record_len - FIXED) as usize, seed);
    let a = store
        .put(&MessageRef::new(TOPIC, queue, &body))
        .unwrap()
        .appended;
    assert_eq!(u64::from(a.size), record_len);
    a
}

/// Puts records into queue 0 until the commit log ends exactly at `target`; returns the last.
fn fill_to(store: &Store, target: u64) -> Appended {
    let mut last = None;
    let big = FIXED + 16_000;
    loop {
        let end = store.commit_log_range().1;
        assert!(end <= target);
        let gap = target - end;
        if gap == 0 {
            break;
        }
        let len = if gap <= big {
            gap
        } else if gap <= 2 * big {
            gap / 2
        } else {
            big
        };
        assert!(len > FIXED, "cannot fill a gap of {gap} bytes");
        let a = put_sized(store, 0, len, end);
        assert_eq!(
            a.physical_offset, end,
            "a filler record rolled unexpectedly"
        );
        last = Some(a);
    }
    last.expect("fill_to needs a non-empty gap")
}

fn read_u32(b: &[u8], at: u64) -> u32 {
    let at = at as usize;
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// Asserts that the file starting at `file_start` ends with a blank marker at `pos` (global)
/// covering the rest of the file, followed by zeros.
fn assert_blank(root: &Path, file_start: u64, pos: u64) {
    let bytes = std::fs::read(commit_log_file(root, file_start)).unwrap();
    assert_eq!(bytes.len() as u64, FILE);
    let local = pos - file_start;
    let remaining = FILE - local;
    assert_eq!(read_u32(&bytes, local), remaining as u32, "blank length");
    let l = local as usize;
    assert_eq!(
        &bytes[l + 4..l + 8],
        &[0xCB, 0xD4, 0x31, 0x94],
        "blank magic"
    );
    assert!(
        bytes[l + 8..].iter().all(|&b| b == 0),
        "bytes after the blank marker must stay zero"
    );
}

#[test]
fn record_leaving_exactly_eight_bytes_fits_and_next_record_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    // The last filler record ends at FILE - 8: it fits (len + 8 == remaining).
    let last = fill_to(&store, FILE - 8);
    assert!(last.physical_offset < FILE);
    assert_eq!(last.physical_offset + u64::from(last.size), FILE - 8);

    // The smallest possible record no longer fits: it starts the next file.
    let next = put_sized(&store, 0, FIXED + 1, 99);
    assert_eq!(next.physical_offset, FILE);
    store.flush().unwrap();
    assert_blank(dir.path(), 0, FILE - 8);
    let file0 = std::fs::read(commit_log_file(dir.path(), 0)).unwrap();
    assert_eq!(
        &file0[(FILE - 8) as usize..],
        &[0, 0, 0, 8, 0xCB, 0xD4, 0x31, 0x94]
    );
    // The record before the blank is intact and ends right at it.
    let v = RecordView::parse(&file0[last.physical_offset as usize..], true).unwrap();
    assert_eq!(v.physical_offset(), last.physical_offset);
    assert_eq!(v.physical_offset() + u64::from(v.total_size()), FILE - 8);
    assert!(commit_log_file(dir.path(), FILE).exists());
    assert_eq!(
        store.get_by_offset(FILE, |v| v.body().to_vec()).unwrap(),
        body_of(1, 99)
    );
}

#[test]
fn record_one_byte_too_long_goes_to_next_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let remaining = 10_000;
    let pos = FILE - remaining;
    fill_to(&store, pos);
    // len + 8 == remaining + 1: one byte short of fitting.
    let len = remaining - 7;
    let a = put_sized(&store, 0, len, 7);
    assert_eq!(
        a.physical_offset, FILE,
        "the record must start the next file"
    );
    assert_eq!(store.commit_log_range().1, FILE + len);
    store.flush().unwrap();
    assert_blank(dir.path(), 0, pos);
    let file0 = std::fs::read(commit_log_file(dir.path(), 0)).unwrap();
    assert_eq!(read_u32(&file0, pos), remaining as u32);

    // The next file is named by its 20-digit start offset and holds the record at byte 0.
    let name = format!("{FILE:020}");
    assert_eq!(name, "00000000000000065536");
    let file1 = std::fs::read(dir.path().join("commitlog").join(&name)).unwrap();
    let v = RecordView::parse(&file1, true).unwrap();
    assert_eq!(v.physical_offset(), FILE);
    assert_eq!(v.body(), body_of((len - FIXED) as usize, 7).as_slice());

    // A record that fits exactly (len + 8 == remaining) in the second file does not roll.
    let rem2 = 9_000;
    fill_to(&store, 2 * FILE - rem2);
    let b = put_sized(&store, 0, rem2 - 8, 8);
    assert_eq!(b.physical_offset, 2 * FILE - rem2);
    let c = put_sized(&store, 0, FIXED + 1, 9);
    assert_eq!(c.physical_offset, 2 * FILE);
    store.flush().unwrap();
    assert_blank(dir.path(), FILE, 2 * FILE - 8);

    // Everything reads back through the consume queue, in order, across the files.
    settle(&store);
    let (_, max) = store.queue_offsets(TOPIC, 0).unwrap();
    let got = store
        .get_messages(TOPIC, 0, 0, max as usize, &TagFilter::all())
        .unwrap();
    assert_eq!(got.records.len() as u64, max);
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v.queue_offset(), i as u64);
        let start = v.physical_offset() % FILE;
        assert!(start + u64::from(v.total_size()) + 8 <= FILE);
    }
}

#[test]
fn batch_that_does_not_fit_moves_whole_to_next_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    // Three earlier messages in queue 2 so the batch's queue offsets start at 3.
    for i in 0..3 {
        put_sized(&store, 2, FIXED + 10, i);
    }
    let remaining = 5_000;
    let pos = FILE - remaining;
    fill_to(&store, pos);
    // 10 records of 594 bytes: the first 8 would fit, the whole batch does not.
    let bodies: Vec<Vec<u8>> = (0..10).map(|i| body_of(500, 100 + i)).collect();
    let msgs: Vec<MessageRef<'_>> = bodies
        .iter()
        .map(|b| MessageRef::new(TOPIC, 2, b))
        .collect();
    let mut out = Vec::new();
    store.put_batch(&msgs, &mut out).unwrap();
    assert_eq!(out.len(), 10);
    let mut expect = FILE;
    for (i, a) in out.iter().enumerate() {
        assert_eq!(a.physical_offset, expect, "batch records are contiguous");
        assert_eq!(a.queue_offset, 3 + i as u64, "consecutive queue offsets");
        assert_eq!(
            a.physical_offset / FILE,
            1,
            "the whole batch is in the second file"
        );
        expect += u64::from(a.size);
    }
    store.flush().unwrap();
    assert_blank(dir.path(), 0, pos);

    // A batch that fits with exactly 8 bytes to spare stays in the current file.
    let end = store.commit_log_range().1;
    let rem = 2 * FILE - end;
    let per = (rem - 8) / 4;
    let lens = [per, per, per, rem - 8 - 3 * per];
    let bodies: Vec<Vec<u8>> = lens
        .iter()
        .map(|&l| body_of((l - FIXED) as usize, l))
        .collect();
    let msgs: Vec<MessageRef<'_>> = bodies
        .iter()
        .map(|b| MessageRef::new(TOPIC, 2, b))
        .collect();
    let mut out2 = Vec::new();
    store.put_batch(&msgs, &mut out2).unwrap();
    assert_eq!(out2[0].physical_offset, end);
    let last = out2.last().unwrap();
    assert_eq!(last.physical_offset + u64::from(last.size), 2 * FILE - 8);
    assert_eq!(last.queue_offset, 16);

    settle(&store);
    let got = store
        .get_messages(TOPIC, 2, 0, 100, &TagFilter::all())
        .unwrap();
    assert_eq!(got.records.len(), 17);
    for (i, v) in got.iter().enumerate().skip(3).take(10) {
        assert_eq!(v.body(), body_of(500, 100 + i as u64 - 3).as_slice());
        assert_eq!(v.queue_offset(), i as u64);
    }
}

#[test]
fn batch_larger_than_a_file_is_rejected_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    put_sized(&store, 0, FIXED + 5, 1);
    let before = store.commit_log_range();
    let bodies: Vec<Vec<u8>> = (0..5).map(|i| body_of(MAX_BODY, i)).collect();
    let msgs: Vec<MessageRef<'_>> = bodies
        .iter()
        .map(|b| MessageRef::new(TOPIC, 0, b))
        .collect();
    let mut out = Vec::new();
    let err = store.put_batch(&msgs, &mut out).unwrap_err();
    assert!(matches!(err, mqlite::Error::InvalidBatch { .. }), "{err:?}");
    assert!(out.is_empty());
    assert_eq!(store.commit_log_range(), before);
    // The queue offset was not consumed.
    let a = put_sized(&store, 0, FIXED + 5, 2);
    assert_eq!(a.queue_offset, 1);
}

#[test]
fn records_never_span_files_random_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), config()).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut appended: Vec<Appended> = Vec::new();
    for op in 0..700u64 {
        if rng.range(0, 99) < 15 {
            let n = rng.range(2, 8) as usize;
            let bodies: Vec<Vec<u8>> = (0..n)
                .map(|k| body_of(rng.range(1, 4000) as usize, op * 10 + k as u64))
                .collect();
            let msgs: Vec<MessageRef<'_>> = bodies
                .iter()
                .map(|b| MessageRef::new(TOPIC, 1, b))
                .collect();
            let mut out = Vec::new();
            store.put_batch(&msgs, &mut out).unwrap();
            let file = out[0].physical_offset / FILE;
            for w in out.windows(2) {
                assert_eq!(
                    w[1].physical_offset,
                    w[0].physical_offset + u64::from(w[0].size)
                );
                assert_eq!(w[1].queue_offset, w[0].queue_offset + 1);
            }
            assert!(out.iter().all(|a| a.physical_offset / FILE == file));
            appended.extend(out);
        } else {
            let len = rng.range(1, MAX_BODY as u64) as usize;
            let b = body_of(len, op * 10);
            appended.push(store.put(&MessageRef::new(TOPIC, 0, &b)).unwrap().appended);
        }
    }
    for a in &appended {
        let start = a.physical_offset;
        let last_byte = start + u64::from(a.size) - 1;
        assert_eq!(
            start / FILE,
            last_byte / FILE,
            "record at {start} spans files"
        );
        assert!(start % FILE + u64::from(a.size) + 8 <= FILE);
    }
    let end = store.commit_log_range().1;
    store.close().unwrap();

    // Walk the files on disk independently of the store: records, then one blank per full file.
    let mut found = Vec::new();
    let mut file_start = 0;
    while file_start <= end {
        let path = commit_log_file(dir.path(), file_start);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, FILE);
        let mut pos = 0u64;
        loop {
            let size = read_u32(&bytes, pos);
            let magic = read_u32(&bytes, pos + 4);
            if magic == codec::BLANK_MAGIC {
                assert_eq!(u64::from(size), FILE - pos);
                assert!(bytes[(pos + 8) as usize..].iter().all(|&b| b == 0));
                break;
            }
            if size == 0 {
                assert_eq!(file_start + pos, end, "zeros only after the last record");
                break;
            }
            let v = RecordView::parse(&bytes[pos as usize..], true).unwrap();
            assert_eq!(v.physical_offset(), file_start + pos);
            found.push(v.physical_offset());
            pos += u64::from(v.total_size());
            assert!(pos + 8 <= FILE);
        }
        file_start += FILE;
    }
    let want: Vec<u64> = appended.iter().map(|a| a.physical_offset).collect();
    assert_eq!(found, want);
    assert!(end / FILE >= 10, "the run should have rolled many files");
}
