//! The stable fuzz driver: every target's check run on mutants of its saved inputs for a fixed
//! time, without libFuzzer or a nightly toolchain. It is the fallback of `.ci/run`'s fuzz smoke
//! section where `cargo fuzz` cannot run, and a quick local soak:
//!
//! ```text
//! MQLITE_FUZZ_SECONDS=30 cargo test --release --test fuzz_corpus_replay fuzz_smoke \
//!     -- --ignored --nocapture
//! ```
//!
//! `MQLITE_FUZZ_SECONDS` is the time per target (default 30), `MQLITE_FUZZ_TARGETS` a
//! comma-separated subset, `MQLITE_FUZZ_SEED` the seed (printed; default: from the clock).
//!
//! Not coverage-guided: it stacks the replay's mutations (bit flips, interesting values,
//! truncation, extension) and splices inputs together, keeping a bounded pool of recent
//! mutants so that mutations compound over the run. An input whose check panics is saved under
//! `fuzz/artifacts/<target>/` (which the replay runs from then on) and fails the test.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::{hex, inputs_of, mutate, Rng, TARGETS};

/// Mutants kept to mutate further.
const POOL: usize = 256;
/// Mutants are cut to this length (libFuzzer's `-max_len` of the smoke run), so that splices
/// do not grow inputs without bound.
const MAX_LEN: usize = 65_536;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One mutant: a stack of 1 to 4 replay mutations of a pool input, sometimes spliced first,
/// at most `MAX_LEN` bytes.
fn next_input(pool: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut d = pool[rng.below(pool.len())].clone();
    if rng.below(8) == 0 {
        let other = &pool[rng.below(pool.len())];
        let cut = rng.below(d.len() + 1);
        let from = rng.below(other.len() + 1);
        d.truncate(cut);
        d.extend_from_slice(&other[from..]);
    }
    for _ in 0..1 + rng.below(4) {
        d = mutate(&d, rng);
    }
    d.truncate(MAX_LEN);
    d
}

/// FNV-1a, to name a saved crash input by its content.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Runs `target` for `budget`; returns (executions, failing inputs).
fn run(target: &str, check: fn(&[u8]), budget: Duration, seed: u64) -> (u64, Vec<String>) {
    let mut pool: Vec<Vec<u8>> = inputs_of(target).into_iter().map(|(_, b)| b).collect();
    assert!(!pool.is_empty(), "fuzz/corpus/{target} has no inputs");
    let seeds = pool.len();
    let mut rng = Rng(seed ^ fnv(target.as_bytes()));
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/artifacts")
        .join(target);
    let (mut execs, mut failed) = (0u64, Vec::new());
    let start = Instant::now();
    while start.elapsed() < budget && failed.len() < 5 {
        let input = next_input(&pool, &mut rng);
        execs += 1;
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            std::fs::create_dir_all(&artifacts).unwrap();
            let file = artifacts.join(format!("crash-{:016x}", fnv(&input)));
            std::fs::write(&file, &input).unwrap();
            failed.push(format!("{}: {}", file.display(), hex(&input)));
            continue;
        }
        if pool.len() < seeds + POOL {
            pool.push(input);
        } else {
            let slot = seeds + rng.below(POOL);
            pool[slot] = input;
        }
    }
    (execs, failed)
}

#[test]
#[ignore = "a timed fuzz run (MQLITE_FUZZ_SECONDS per target); .ci/run's fuzz smoke runs it"]
fn fuzz_smoke() {
    let secs: u64 = env_or("MQLITE_FUZZ_SECONDS", 30);
    let only: Option<Vec<String>> = std::env::var("MQLITE_FUZZ_TARGETS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    let clock = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let seed: u64 = env_or("MQLITE_FUZZ_SEED", clock) | 1;
    println!("fuzz smoke: {secs} s per target, MQLITE_FUZZ_SEED={seed}");
    if let Some(names) = &only {
        for n in names {
            assert!(
                TARGETS.iter().any(|t| t.0 == n),
                "unknown fuzz target {n:?}"
            );
        }
    }
    let mut failures = Vec::new();
    for &(name, check) in TARGETS {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let started = Instant::now();
        let (execs, failed) = run(name, check, Duration::from_secs(secs), seed);
        let took = started.elapsed().as_secs_f64();
        println!(
            "fuzz smoke: {name:<28} {execs:>10} execs in {took:5.1} s ({:.0}/s), {} failing",
            execs as f64 / took.max(1e-9),
            failed.len()
        );
        failures.extend(failed);
    }
    assert!(
        failures.is_empty(),
        "fuzz smoke (MQLITE_FUZZ_SEED={seed}): {} failing inputs, saved under fuzz/artifacts:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
