//! Read-side costs: sequential consume-queue reads of 32 and 1024 messages, single-unit
//! lookups (by offset and by timestamp), dispatch rate, and the recovery scan rate of an
//! abnormal open (abort file present, checkpoint lost: every byte is CRC-checked).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mqlite::{FlushMode, MessageRef, Store, StoreConfig, TagFilter};

const TOPIC: &str = "Read";
const READ_MSGS: u64 = 200_000;

fn config() -> StoreConfig {
    StoreConfig {
        flush_mode: FlushMode::Async,
        ..Default::default()
    }
}

fn wait_dispatched(store: &Store) {
    while store.dispatched_offset() < store.commit_log_range().1 {
        std::hint::spin_loop();
    }
}

/// A store holding READ_MSGS 128-byte messages in queue 0.
fn populated(dir: &std::path::Path) -> (Store, Vec<i64>) {
    let store = Store::open(dir, config()).unwrap();
    let body = vec![0x42u8; 128];
    let msgs: Vec<MessageRef<'_>> = (0..1000)
        .map(|_| MessageRef::new(TOPIC, 0, &body))
        .collect();
    let mut out = Vec::new();
    let mut ts = Vec::new();
    for _ in 0..READ_MSGS / 1000 {
        out.clear();
        store.put_batch(&msgs, &mut out).unwrap();
        ts.push(out[0].store_timestamp);
    }
    wait_dispatched(&store);
    (store, ts)
}

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (store, ts) = populated(dir.path());
    let all = TagFilter::all();
    let mut g = c.benchmark_group("read");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    for n in [32u64, 1024] {
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::new("sequential/async/128B", n), |b| {
            let mut offset = 0;
            b.iter(|| {
                if offset + n > READ_MSGS {
                    offset = 0;
                }
                let r = store
                    .get_messages(TOPIC, 0, offset, n as usize, &all)
                    .unwrap();
                assert_eq!(r.records.len() as u64, n);
                offset = r.next_offset;
                black_box(r)
            })
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("lookup/async/get_messages_1", |b| {
        let mut k = 0u64;
        b.iter(|| {
            k = (k + 7919) % READ_MSGS;
            black_box(store.get_messages(TOPIC, 0, k, 1, &all).unwrap())
        })
    });
    g.bench_function("lookup/async/offset_for_timestamp", |b| {
        let mut k = 0usize;
        b.iter(|| {
            k = (k + 13) % ts.len();
            black_box(store.offset_for_timestamp(TOPIC, 0, ts[k]).unwrap())
        })
    });
    g.finish();
}

/// Time from a put_batch of 1000 messages until all are dispatched to the consume queue.
fn dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    g.throughput(Throughput::Elements(1000));
    let body = vec![0x17u8; 128];
    let msgs: Vec<MessageRef<'_>> = (0..1000)
        .map(|_| MessageRef::new(TOPIC, 1, &body))
        .collect();
    g.bench_function("async/put_batch1000_until_dispatched", |b| {
        let mut out = Vec::with_capacity(1000);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::open(dir.path(), config()).unwrap();
                let n = left.min(500); // ~110 MB per store
                let t = Instant::now();
                for _ in 0..n {
                    out.clear();
                    store.put_batch(&msgs, &mut out).unwrap();
                    wait_dispatched(&store);
                }
                total += t.elapsed();
                left -= n;
                store.close().unwrap();
            }
            total
        })
    });
    g.finish();
}

/// Reopen of a ~200 MB store after a crash that lost the checkpoint: recovery CRC-scans every
/// record from the first file and re-dispatches (finding the units already present).
fn recovery(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let body = vec![0x33u8; 1024];
    let end = {
        let store = Store::open(dir.path(), config()).unwrap();
        let msgs: Vec<MessageRef<'_>> = (0..1000)
            .map(|_| MessageRef::new(TOPIC, 2, &body))
            .collect();
        let mut out = Vec::new();
        for _ in 0..190 {
            out.clear();
            store.put_batch(&msgs, &mut out).unwrap();
        }
        store.close().unwrap();
        store.commit_log_range().1
    };
    let mut g = c.benchmark_group("recovery");
    g.measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    g.throughput(Throughput::Bytes(end));
    g.bench_function("async/abnormal_open_full_scan_200MB", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::fs::write(dir.path().join("abort"), b"0").unwrap();
                let _ = std::fs::remove_file(dir.path().join("checkpoint"));
                let t = Instant::now();
                let store = Store::open(dir.path(), config()).unwrap();
                total += t.elapsed();
                let report = store.recovery_report();
                assert!(report.abnormal);
                assert_eq!((report.scanned_from, report.end), (0, end));
                store.close().unwrap();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, reads, dispatch, recovery);
criterion_main!(benches);
