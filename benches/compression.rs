//! Body codecs (FORMAT.md §1.6): compressing and decompressing a 4 KiB and a 64 KiB JSON body
//! with each codec at RocketMQ's default level 5, reported in bytes of the original body per
//! second. `baseline/copy` copies the same body once: what storing it raw costs beyond the
//! append itself.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mqlite::message::compression::{Codec, DEFAULT_LEVEL};

fn json_body(size: usize) -> Vec<u8> {
    let mut out = String::from("[");
    let mut i = 0u64;
    while out.len() < size {
        let kind = ["view", "click", "buy"][(i % 3) as usize];
        out.push_str(&format!(
            "{{\"event\":\"{kind}\",\"user\":{},\"path\":\"/products/{}\",\"ts\":{}}},",
            1000 + i * 7 % 997,
            i * 13 % 401,
            1_700_000_000_000 + i
        ));
        i += 1;
    }
    out.truncate(size);
    out.into_bytes()
}

fn codecs(c: &mut Criterion) {
    let mut g = c.benchmark_group("compression");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    for size in [4096usize, 65536] {
        let body = json_body(size);
        let label = format!("{}KiB", size / 1024);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("baseline/copy", &label), |b| {
            b.iter(|| black_box(body.clone()))
        });
        for codec in [Codec::Lz4, Codec::Zstd, Codec::Zlib] {
            let packed = codec.compress(&body, DEFAULT_LEVEL).unwrap();
            g.bench_function(
                BenchmarkId::new(format!("compress/{}", codec.name()), &label),
                |b| b.iter(|| codec.compress(black_box(&body), DEFAULT_LEVEL).unwrap()),
            );
            g.bench_function(
                BenchmarkId::new(format!("decompress/{}", codec.name()), &label),
                |b| b.iter(|| codec.decompress(black_box(&packed)).unwrap()),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, codecs);
criterion_main!(benches);
