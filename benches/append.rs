//! Append throughput: single puts and 1000-message batches of 128 B / 1 KiB / 4 KiB bodies
//! (flush mode async, default 32 MiB files, the default warm-ahead of the pages just in front
//! of the writer), reported both as messages/s and bytes/s; plus file rolls with and without
//! pre-faulted files. `append_bytes/baseline/page_cache_write_1MiB` is the machine's floor for
//! the byte rows, in the same run: plain `write()` calls of 1 MiB into a fresh file, no fsync
//! (the page-cache write bandwidth that mqlite's 4 KiB batches are compared with).
//!
//! Each sample writes into fresh stores: a store is replaced (outside the timed region) once
//! it holds `STORE_BYTES`, so the disk use stays bounded however many iterations run. The
//! topic is created before the timed region of each store.
//!
//! Before the first benchmark, 1 GiB is written to a file and deleted, twice (the GB/s of
//! each pass go to stderr): on a virtual machine whose host backs guest memory lazily, the
//! first write into page-cache pages new to the guest costs a host fault per page (0.4 to 0.7
//! GB/s against 5 GB/s on the development VM); after the priming every store writes into
//! pages freed before it, as in a long-running process. `benches/python/bench.py` does the
//! same (`prime_page_cache`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mqlite::{FlushMode, MessageRef, Store, StoreConfig};

const SIZES: [usize; 3] = [128, 1024, 4096];
const BATCH: usize = 1000;
/// Bytes written into one store before it is replaced.
const STORE_BYTES: u64 = 128 << 20;
const TOPIC: &str = "Bench";

fn async_config() -> StoreConfig {
    StoreConfig {
        flush_mode: FlushMode::Async,
        // The default: populating whole files at creation dirties them with zeros that the
        // kernel's writeback then write-protects under the appender (a fault per page).
        warm_mapped_files: false,
        ..Default::default()
    }
}

fn label(size: usize) -> String {
    if size >= 1024 {
        format!("{}KiB", size / 1024)
    } else {
        format!("{size}B")
    }
}

/// Runs `iters` calls of `op` over fresh stores, timing only the calls. `per_call` is the
/// number of commit-log bytes one call writes (used to bound each store's size).
fn run_fresh(
    iters: u64,
    config: &StoreConfig,
    per_call: u64,
    mut op: impl FnMut(&Store),
) -> Duration {
    let per_store = (STORE_BYTES / per_call.max(1)).max(1);
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), config.clone()).unwrap();
        // The topic exists before the clock starts, as in a store that has been serving it:
        // its creation (a config file written and synced, queue files) is not an append.
        store.create_topic(TOPIC, 4, 6, false, true).unwrap();
        let n = left.min(per_store);
        let t = Instant::now();
        for _ in 0..n {
            op(&store);
        }
        total += t.elapsed();
        left -= n;
        store.close().unwrap();
    }
    total
}

fn record_len(body: usize) -> u64 {
    (91 + body + TOPIC.len()) as u64
}

fn single(c: &mut Criterion, unit: &str) {
    let mut g = c.benchmark_group(format!("append_{unit}"));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    let config = async_config();
    for size in SIZES {
        let body = vec![0x5Au8; size];
        g.throughput(if unit == "bytes" {
            Throughput::Bytes(size as u64)
        } else {
            Throughput::Elements(1)
        });
        g.bench_function(BenchmarkId::new("single/async", label(size)), |b| {
            b.iter_custom(|iters| {
                run_fresh(iters, &config, record_len(size), |s| {
                    black_box(s.put(&MessageRef::new(TOPIC, 0, &body)).unwrap());
                })
            })
        });
        let msgs: Vec<MessageRef<'_>> = (0..BATCH)
            .map(|_| MessageRef::new(TOPIC, 0, &body))
            .collect();
        g.throughput(if unit == "bytes" {
            Throughput::Bytes((size * BATCH) as u64)
        } else {
            Throughput::Elements(BATCH as u64)
        });
        g.bench_function(BenchmarkId::new("batch1000/async", label(size)), |b| {
            let mut out = Vec::with_capacity(BATCH);
            b.iter_custom(|iters| {
                run_fresh(iters, &config, record_len(size) * BATCH as u64, |s| {
                    out.clear();
                    black_box(s.put_batch(&msgs, &mut out).unwrap());
                })
            })
        });
    }
    g.finish();
}

fn append_elements(c: &mut Criterion) {
    prime_page_cache();
    single(c, "elements");
}

/// See the module doc. Runs once per process.
fn prime_page_cache() {
    use std::io::Write;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        const MIB: usize = 1024;
        let chunk = vec![0x5Au8; 1 << 20];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prime");
        let mut rates = Vec::new();
        for _ in 0..2 {
            let t = Instant::now();
            let mut f = std::fs::File::create(&path).unwrap();
            for _ in 0..MIB {
                f.write_all(&chunk).unwrap();
            }
            let secs = t.elapsed().as_secs_f64();
            drop(f);
            std::fs::remove_file(&path).unwrap();
            rates.push(format!("{:.2}", (MIB << 20) as f64 / secs / 1e9));
        }
        eprintln!(
            "page cache primed with {MIB} MiB: {} GB/s",
            rates.join(" then ")
        );
    });
}

fn append_bytes(c: &mut Criterion) {
    prime_page_cache();
    single(c, "bytes");
    page_cache_baseline(c);
}

/// Page-cache write bandwidth: `write()` of 1 MiB per call appending to a fresh file (a new
/// file every `STORE_BYTES`, created and deleted outside the timed region), no fsync.
fn page_cache_baseline(c: &mut Criterion) {
    use std::io::Write;
    const CHUNK: usize = 1 << 20;
    let mut g = c.benchmark_group("append_bytes");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10)
        .throughput(Throughput::Bytes(CHUNK as u64));
    let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    g.bench_function("baseline/page_cache_write_1MiB", |b| {
        b.iter_custom(|iters| {
            let per_file = STORE_BYTES / CHUNK as u64;
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let dir = tempfile::tempdir().unwrap();
                let mut f = std::fs::File::create(dir.path().join("log")).unwrap();
                let n = left.min(per_file);
                let t = Instant::now();
                for _ in 0..n {
                    f.write_all(black_box(&chunk)).unwrap();
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
    g.finish();
}

/// Filling 1 MiB files with 4 KiB records (a roll every ~250 records), with pre-faulted
/// (warmed) files and without.
fn roll(c: &mut Criterion) {
    let mut g = c.benchmark_group("roll");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(10);
    let body = vec![0xA5u8; 4096];
    let msgs: Vec<MessageRef<'_>> = (0..64).map(|_| MessageRef::new(TOPIC, 0, &body)).collect();
    g.throughput(Throughput::Bytes((4096 * msgs.len()) as u64));
    for warm in [true, false] {
        let config = StoreConfig {
            commit_log_file_size: Some(1 << 20),
            max_message_size: Some(256 << 10),
            warm_mapped_files: warm,
            ..async_config()
        };
        let name = if warm { "prefaulted" } else { "lazy" };
        g.bench_function(BenchmarkId::new("async/1MiB_files", name), |b| {
            let mut out = Vec::with_capacity(msgs.len());
            b.iter_custom(|iters| {
                run_fresh(iters, &config, record_len(4096) * 64, |s| {
                    out.clear();
                    black_box(s.put_batch(&msgs, &mut out).unwrap());
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, append_elements, append_bytes, roll);
criterion_main!(benches);
