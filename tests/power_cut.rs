//! Power cuts: a store is driven through a seeded workload while the power-cut recorder
//! (`mqlite::testing::power_cut`, feature `fault-injection`) notes what every fsync, fdatasync,
//! msync and directory fsync made durable. Snapshots are taken before randomly chosen I/O
//! calls (inside rolls, checkpoint writes, file creations, atomic replaces, group commits) and
//! between steps; each yields several power-cut images: the durable bytes and namespace plus a
//! seeded subset of the unsynced 4 KiB pages, unsynced creations and renames undone (or, in
//! some images, all of them kept). Each image is opened with the normal store and checked:
//!
//! - it opens, and every record read is whole and CRC-valid and was written by the workload,
//!   at the queue offset it was given; each queue holds a prefix of what was put to it;
//! - sync mode: every message whose put returned `PutOk` is there; async mode: every message
//!   put before a `flush()` or a clean close that returned;
//! - topics created or updated before the cut exist with at least the acknowledged queues;
//! - the store accepts and returns a new message;
//! - in some images a byte of an acknowledged record below the checkpoint's durable watermark
//!   is flipped (a header byte in half of them, lengths, queue id and offsets included): the
//!   open or the read of that record must fail with `Corrupted`, never skip it.
//!
//! Replay: a failure prints the workload seed, the cut and the image seed, and keeps the image
//! under `target/tmp/`. `MQLITE_POWER_CUT_SEED=<seed>` runs that one workload (both modes);
//! `MQLITE_SOAK=1` runs ten times as many workloads.
//! Thread timing decides some cut points, so a replay reruns the workload rather than the
//! exact cut; the kept image reproduces the failing open exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::Rng;
use mqlite::testing::power_cut::{Recording, Snapshot};
use mqlite::{Error, FlushMode, MessageRef, PutStatus, RecordView, Store, StoreConfig, TagFilter};

/// Replays one workload seed.
const SEED_VAR: &str = "MQLITE_POWER_CUT_SEED";
/// Workloads per mode in a normal run.
const WORKLOADS: u64 = 12;
/// Steps per workload.
const STEPS: usize = 160;
/// Chance (per million) of a cut before each recorded I/O call.
const CUT_PER_MILLION: u64 = 60_000;
/// Chance (per thousand) of a cut after a step.
const STEP_CUT_PER_MILLE: u64 = 40;
/// Images built from each snapshot.
const IMAGES_PER_SNAPSHOT: u64 = 6;
/// One image in this many also gets a flipped byte below the durable watermark.
const DAMAGE_EVERY: u64 = 5;

const TOPICS: [&str; 2] = ["PcA", "PcB"];

fn config(mode: FlushMode) -> StoreConfig {
    StoreConfig {
        flush_mode: mode,
        flush_interval: Duration::from_millis(10),
        sync_flush_timeout: Duration::from_secs(60),
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_units: Some(64),
        max_message_size: Some(16 << 10),
        warm_mapped_files: false,
        // One idle mapping: files are unmapped and mapped again all the time, and idle
        // consume queues let go of their last file (mapped_file_queue/cache.rs).
        max_mapped_files: 1,
        ..StoreConfig::default()
    }
}

#[derive(Debug, Clone)]
enum Step {
    Create { topic: usize, queues: u32 },
    Update { topic: usize, queues: u32 },
    Put { id: u64 },
    Batch { ids: Vec<u64> },
    Flush,
    Reopen,
}

/// A message of the workload: where it goes.
#[derive(Debug, Clone, Copy)]
struct Msg {
    topic: usize,
    queue: u32,
    /// Step that put it.
    step: usize,
}

/// What the workload does, and what it got back.
#[derive(Debug, Default)]
struct Plan {
    steps: Vec<Step>,
    msgs: Vec<Msg>,
    /// Per message: the put returned `PutOk` (sync mode: durable), with its record's place.
    acked: Vec<Option<mqlite::Appended>>,
}

fn body(id: u64) -> Vec<u8> {
    let len = 8 + (id * 131 % 1400) as usize;
    let mut b = id.to_be_bytes().to_vec();
    b.extend((8..len).map(|k| (id as usize * 7 + k * 13) as u8));
    b
}

fn plan(seed: u64) -> Plan {
    let mut rng = Rng(seed | 1);
    let mut p = Plan::default();
    let mut queues = [0u32; 2];
    let mut next_id = 0u64;
    p.steps.push(Step::Create {
        topic: 0,
        queues: 2,
    });
    queues[0] = 2;
    while p.steps.len() < STEPS {
        let step = p.steps.len();
        let roll = rng.range(0, 99);
        let live: Vec<usize> = (0..2).filter(|&t| queues[t] > 0).collect();
        let s = match roll {
            0..=2 if queues[1] == 0 => {
                queues[1] = 1;
                Step::Create {
                    topic: 1,
                    queues: 1,
                }
            }
            3..=4 => {
                let t = live[rng.range(0, live.len() as u64 - 1) as usize];
                if queues[t] >= 4 {
                    Step::Flush
                } else {
                    queues[t] += 1;
                    Step::Update {
                        topic: t,
                        queues: queues[t],
                    }
                }
            }
            5..=9 => Step::Flush,
            10 => Step::Reopen,
            11..=24 => {
                let t = live[rng.range(0, live.len() as u64 - 1) as usize];
                let queue = rng.range(0, u64::from(queues[t]) - 1) as u32;
                let n = rng.range(2, 6);
                let ids = (0..n)
                    .map(|_| {
                        p.msgs.push(Msg {
                            topic: t,
                            queue,
                            step,
                        });
                        next_id += 1;
                        next_id - 1
                    })
                    .collect();
                Step::Batch { ids }
            }
            _ => {
                let t = live[rng.range(0, live.len() as u64 - 1) as usize];
                let queue = rng.range(0, u64::from(queues[t]) - 1) as u32;
                p.msgs.push(Msg {
                    topic: t,
                    queue,
                    step,
                });
                next_id += 1;
                Step::Put { id: next_id - 1 }
            }
        };
        p.steps.push(s);
    }
    p.acked = vec![None; p.msgs.len()];
    p
}

/// Figures of one run.
#[derive(Debug, Default)]
struct Tally {
    snapshots: u64,
    images: u64,
    damaged: u64,
    unsynced_pages: u64,
    pages_kept: u64,
    acked_checked: u64,
}

/// A scratch directory, in memory when /dev/shm exists: the simulator decides what survives,
/// so the disk's own fsyncs only cost time.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mqlite-power-cut")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// `MQLITE_SOAK=1`: the long run.
fn soak() -> bool {
    std::env::var("MQLITE_SOAK").is_ok_and(|v| v == "1")
}

/// The workload seeds: the one `MQLITE_POWER_CUT_SEED` names, else `WORKLOADS` fixed seeds
/// (ten times as many with `MQLITE_SOAK=1`).
fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var(SEED_VAR) {
        return vec![s.trim().parse().expect("MQLITE_POWER_CUT_SEED is a u64")];
    }
    let n = if soak() { WORKLOADS * 10 } else { WORKLOADS };
    (1..=n).map(|k| 0x9C0_0000 + k).collect()
}

#[test]
fn sync_mode_power_cuts_lose_no_acknowledged_message() {
    run_mode(FlushMode::Sync);
}

#[test]
fn async_mode_power_cuts_keep_what_a_flush_confirmed_and_nothing_corrupt() {
    run_mode(FlushMode::Async);
}

fn run_mode(mode: FlushMode) {
    let mut tally = Tally::default();
    for seed in seeds() {
        run_workload(seed, mode, &mut tally);
    }
    println!("power cut {mode:?}: {tally:?}");
    assert!(tally.images > 0 && tally.acked_checked > 0, "{tally:?}");
}

fn run_workload(seed: u64, mode: FlushMode, tally: &mut Tally) {
    let dir = scratch();
    let root = dir.path().join("store");
    std::fs::create_dir(&root).unwrap();
    let mut p = plan(seed);
    let rec = Recording::start(&root, seed, CUT_PER_MILLION).unwrap();
    let mut rng = Rng(seed ^ 0xC0FFEE);
    let mut store = Store::open(&root, config(mode)).unwrap();
    let steps = p.steps.clone();
    for (i, step) in steps.iter().enumerate() {
        rec.step_started(i as u64);
        match step {
            Step::Create { topic, queues } => store
                .create_topic(TOPICS[*topic], *queues, 6, false, false)
                .unwrap(),
            Step::Update { topic, queues } => {
                store.update_topic(TOPICS[*topic], *queues).unwrap();
            }
            Step::Put { id } => {
                let m = p.msgs[*id as usize];
                let b = body(*id);
                let r = store
                    .put(&MessageRef::new(TOPICS[m.topic], m.queue, &b))
                    .unwrap();
                if r.status == PutStatus::PutOk {
                    p.acked[*id as usize] = Some(r.appended);
                }
            }
            Step::Batch { ids } => {
                let m = p.msgs[ids[0] as usize];
                let bodies: Vec<Vec<u8>> = ids.iter().map(|&id| body(id)).collect();
                let msgs: Vec<MessageRef<'_>> = bodies
                    .iter()
                    .map(|b| MessageRef::new(TOPICS[m.topic], m.queue, b))
                    .collect();
                let mut out = Vec::new();
                let status = store.put_batch(&msgs, &mut out).unwrap();
                if status == PutStatus::PutOk {
                    for (&id, a) in ids.iter().zip(out) {
                        p.acked[id as usize] = Some(a);
                    }
                }
            }
            Step::Flush => store.flush().unwrap(),
            Step::Reopen => {
                store.close().unwrap();
                drop(store);
                store = Store::open(&root, config(mode)).unwrap();
            }
        }
        rec.step_done(i as u64);
        if rng.range(0, 999) < STEP_CUT_PER_MILLE {
            rec.capture(&format!("after step {i}"));
        }
        for snap in rec.take() {
            check_snapshot(&snap, &p, seed, mode, tally);
        }
    }
    store.close().unwrap();
    drop(store);
    // After a clean close everything is durable, in both modes.
    rec.step_started(steps.len() as u64);
    rec.step_done(steps.len() as u64);
    rec.capture("after a clean close");
    for snap in rec.take() {
        check_snapshot(&snap, &p, seed, mode, tally);
    }
}

fn check_snapshot(snap: &Snapshot, p: &Plan, seed: u64, mode: FlushMode, tally: &mut Tally) {
    assert!(
        snap.problems.is_empty(),
        "seed {seed}: I/O the recorder did not see ({}): {:?}",
        snap.label,
        snap.problems
    );
    tally.snapshots += 1;
    let idx = tally.snapshots;
    for k in 0..IMAGES_PER_SNAPSHOT {
        let image_seed = seed
            .wrapping_mul(1_000_003)
            .wrapping_add(idx * 131 + k)
            .wrapping_add(mode as u64);
        let damage = image_seed.is_multiple_of(DAMAGE_EVERY);
        let dir = scratch();
        let stats = snap.build(dir.path(), image_seed).unwrap();
        tally.images += 1;
        tally.unsynced_pages += stats.unsynced_pages as u64;
        tally.pages_kept += stats.pages_kept as u64;
        let outcome = if damage {
            check_damaged_image(dir.path(), snap, p, mode, image_seed).map(|flipped| {
                tally.damaged += u64::from(flipped);
                0
            })
        } else {
            check_image(dir.path(), snap, p, mode)
        };
        match outcome {
            Ok(acked) => tally.acked_checked += acked,
            Err(why) => {
                let keep = Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("power-cut-{seed}-{image_seed}"));
                let _ = std::fs::remove_dir_all(&keep);
                std::fs::create_dir_all(&keep).unwrap();
                snap.build(&keep, image_seed).unwrap();
                if damage {
                    flip_below_watermark(&keep, snap, p, mode, image_seed);
                }
                panic!(
                    "power cut image failed: {why}\n  mode {mode:?}, workload seed {seed}, cut \
                     {:?} (steps done {}, started {}), image seed {image_seed}{}, {stats:?}\n  \
                     image kept (as built, flipped byte included, before the open) at {}\n  replay the workload: \
                     {SEED_VAR}={seed} cargo test --features fault-injection --test power_cut",
                    snap.label,
                    snap.done,
                    snap.started,
                    if damage { " (with a flipped byte)" } else { "" },
                    keep.display()
                );
            }
        }
    }
}

/// Steps whose effects the cut must keep: sync mode, every acknowledged put before `done`;
/// async mode, puts before the last completed `flush()` or clean close.
fn must_keep(p: &Plan, snap: &Snapshot, mode: FlushMode, id: usize) -> bool {
    let m = p.msgs[id];
    if p.acked[id].is_none() || m.step as u64 >= snap.done {
        return false;
    }
    match mode {
        FlushMode::Sync => true,
        FlushMode::Async => {
            let durable_until = (0..snap.done as usize)
                .rev()
                .find(|&s| s >= p.steps.len() || matches!(p.steps[s], Step::Flush | Step::Reopen))
                .unwrap_or(0);
            m.step < durable_until
        }
    }
}

/// Checks an image; returns how many acknowledged messages it proved present.
fn check_image(root: &Path, snap: &Snapshot, p: &Plan, mode: FlushMode) -> Result<u64, String> {
    let store = Store::open(root, config(mode)).map_err(|e| format!("open failed: {e}"))?;
    let mut proved = 0;
    for (t, topic) in TOPICS.iter().enumerate() {
        let ops: Vec<(usize, u32)> = p
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Step::Create { topic, queues } | Step::Update { topic, queues } if *topic == t => {
                    Some((i, *queues))
                }
                _ => None,
            })
            .collect();
        let lo = ops
            .iter()
            .filter(|(i, _)| (*i as u64) < snap.done)
            .map(|o| o.1)
            .max();
        let hi = ops
            .iter()
            .filter(|(i, _)| (*i as u64) < snap.started)
            .map(|o| o.1)
            .max();
        let have = store
            .topic(topic)
            .map_err(|e| format!("topic {topic}: {e}"))?
            .map(|c| c.write_queue_nums);
        let ok = match (have, lo, hi) {
            (None, None, _) => true,
            (Some(q), lo, Some(hi)) => lo.is_none_or(|lo| q >= lo) && q <= hi,
            _ => false,
        };
        if !ok {
            return Err(format!(
                "topic {topic} has {have:?} queues; acknowledged {lo:?}, at most {hi:?}"
            ));
        }
        for queue in 0..have.unwrap_or(0) {
            let expected: Vec<usize> = (0..p.msgs.len())
                .filter(|&id| p.msgs[id].topic == t && p.msgs[id].queue == queue)
                .collect();
            let got = read_all(&store, topic, queue)?;
            for (n, (qo, id)) in got.iter().enumerate() {
                if *qo != n as u64 || expected.get(n) != Some(id) {
                    return Err(format!(
                        "{topic}/{queue}: record {n} is message {id} at queue offset {qo}, \
                         expected {:?} at {n} (a queue must hold a prefix of its puts)",
                        expected.get(n)
                    ));
                }
                if p.msgs[*id].step as u64 >= snap.started {
                    return Err(format!(
                        "{topic}/{queue}: message {id} was put after the cut"
                    ));
                }
            }
            if let Some(lost) = expected
                .iter()
                .skip(got.len())
                .find(|&&id| must_keep(p, snap, mode, id))
            {
                return Err(format!(
                    "{topic}/{queue}: acknowledged message {lost} lost ({} of {} survive)",
                    got.len(),
                    expected.len()
                ));
            }
            proved += expected
                .iter()
                .take(got.len())
                .filter(|&&id| must_keep(p, snap, mode, id))
                .count() as u64;
        }
    }
    // The recovered store takes new writes.
    let b = b"after the power cut";
    let topic = TOPICS[0];
    if store.topic(topic).ok().flatten().is_some() {
        let r = store
            .put(&MessageRef::new(topic, 0, b))
            .map_err(|e| format!("put after recovery: {e}"))?;
        let back = store
            .get_messages(topic, 0, r.appended.queue_offset, 1, &TagFilter::all())
            .map_err(|e| format!("read after recovery: {e}"))?;
        if back.iter().next().map(|v| v.body().to_vec()) != Some(b.to_vec()) {
            return Err("the message put after recovery does not read back".into());
        }
    }
    store.close().map_err(|e| format!("close: {e}"))?;
    Ok(proved)
}

/// Every record of a queue as (queue offset, message id), each verified whole (CRC) and equal
/// to what the workload put; read errors are returned.
fn read_all(store: &Store, topic: &str, queue: u32) -> Result<Vec<(u64, usize)>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let got = store
            .get_messages(topic, queue, at, 64, &TagFilter::all())
            .map_err(|e| format!("{topic}/{queue}: read at {at}: {e}"))?;
        if got.records.is_empty() {
            return Ok(out);
        }
        for &(s, l) in &got.records {
            let bytes = &got.buffer[s as usize..(s + l) as usize];
            let v = RecordView::parse_verified(bytes)
                .map_err(|e| format!("{topic}/{queue}: a corrupt record was returned: {e:?}"))?;
            let b = v.body();
            let id = b
                .get(..8)
                .map(|h| u64::from_be_bytes(h.try_into().unwrap()))
                .ok_or_else(|| format!("{topic}/{queue}: a body the workload never wrote"))?;
            if v.topic() != topic || v.queue_id() != queue || b != body(id).as_slice() {
                return Err(format!(
                    "{topic}/{queue}: a record the workload never wrote (id {id})"
                ));
            }
            out.push((v.queue_offset(), id as usize));
        }
        at = got.next_offset;
    }
}

/// A byte flipped below the durable watermark: the message and the commit-log offset.
#[derive(Debug, Clone, Copy)]
struct Flip {
    id: usize,
    at: u64,
    watermark: u64,
}

/// Flips a byte, chosen by `image_seed`, inside the last acknowledged record that lies wholly
/// below the image's durable watermark (`None` when the image has no checkpoint or no such
/// record).
fn flip_below_watermark(
    root: &Path,
    snap: &Snapshot,
    p: &Plan,
    mode: FlushMode,
    image_seed: u64,
) -> Option<Flip> {
    let watermark =
        match mqlite::checkpoint::Checkpoint::open(&root.join("checkpoint"), false, 0o600) {
            Ok((_, Some(d))) => d.confirm_phy_offset,
            _ => return None,
        };
    let file_size = config(mode).commit_log_file_size.unwrap();
    let id = (0..p.msgs.len()).rev().find(|&id| {
        must_keep(p, snap, mode, id)
            && p.acked[id].is_some_and(|a| a.physical_offset + u64::from(a.size) <= watermark)
    })?;
    let a = p.acked[id].unwrap();
    // Half the flips hit the fixed 88-byte header (rust/FORMAT.md §1.1: lengths, queue id,
    // offsets, which the body CRC does not cover), the others any byte before the trailing
    // whole-record CRC property (§1.5: a flip that makes the property unreadable leaves a
    // record checked like one RocketMQ wrote, which by design may pass). The damaged images'
    // seeds are multiples of DAMAGE_EVERY: divided out, they vary freely.
    let pick = image_seed / DAMAGE_EVERY;
    let span = if pick.is_multiple_of(2) {
        88
    } else {
        u64::from(a.size) - 20
    };
    let at = a.physical_offset + (pick / 2) % span;
    let path = common::commit_log_file(root, at - at % file_size);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(at % file_size) as usize] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    Some(Flip { id, at, watermark })
}

/// Flips a byte below the durable watermark (`flip_below_watermark`) and checks the damage is
/// reported: the open or the read of that record fails with `Corrupted`. Returns whether a
/// byte was flipped.
fn check_damaged_image(
    root: &Path,
    snap: &Snapshot,
    p: &Plan,
    mode: FlushMode,
    image_seed: u64,
) -> Result<bool, String> {
    let Some(Flip { id, at, watermark }) = flip_below_watermark(root, snap, p, mode, image_seed)
    else {
        return Ok(false);
    };
    let a = p.acked[id].unwrap();
    let m = p.msgs[id];
    let corrupted = |e: &Error| matches!(e, Error::Corrupted { .. });
    let store = match Store::open(root, config(mode)) {
        Err(e) if corrupted(&e) => return Ok(true),
        Err(e) => return Err(format!("open after a flip below the watermark: {e}")),
        Ok(s) => s,
    };
    let read = store.get_messages(
        TOPICS[m.topic],
        m.queue,
        a.queue_offset,
        1,
        &TagFilter::all(),
    );
    let _ = store.close();
    match read {
        Err(e) if corrupted(&e) => Ok(true),
        other => Err(format!(
            "a flipped byte in message {id} at commit-log offset {at}, below the durable \
             watermark {watermark}, was not reported: {:?}",
            other.map(|g| (g.status, g.records.len()))
        )),
    }
}

/// A topic's consume-queue directories are created when the topic is; their entries must be
/// durable before a message acknowledged into them is, or a power cut loses the queue.
#[test]
fn a_new_topics_acknowledged_messages_survive_a_power_cut() {
    let dir = scratch();
    let root = dir.path().join("store");
    std::fs::create_dir(&root).unwrap();
    let rec = Recording::start(&root, 1, 0).unwrap();
    let store = Store::open(&root, config(FlushMode::Sync)).unwrap();
    store.create_topic("PcNew", 1, 6, false, false).unwrap();
    let put = store.put(&MessageRef::new("PcNew", 0, &body(1))).unwrap();
    assert_eq!(put.status, PutStatus::PutOk);
    // The checkpoint now says the consume queue is durable up to the message.
    store.flush().unwrap();
    rec.capture("after the acknowledged put and a flush");
    let snap = rec.take().pop().unwrap();
    assert!(snap.problems.is_empty(), "{:?}", snap.problems);
    for image_seed in 0..16 {
        let image = scratch();
        snap.build(image.path(), image_seed).unwrap();
        let opened = Store::open(image.path(), config(FlushMode::Sync)).unwrap();
        let got = read_all(&opened, "PcNew", 0).unwrap();
        assert_eq!(got, vec![(0, 1)], "image seed {image_seed}");
        opened.close().unwrap();
    }
    store.close().unwrap();
}

/// The recorder's model: an atomic replace (temp, fsync, rename, directory fsync) reverts to
/// the old file in every image cut before its directory fsync completed, unless the image
/// keeps the unsynced namespace changes; once it completed, every image has the new file. A
/// file created and written but never synced has none of its bytes in a durable-namespace
/// image.
#[test]
fn the_recorder_keeps_only_what_a_sync_made_durable() {
    let dir = scratch();
    let root = dir.path();
    let path = root.join("f.json");
    std::fs::write(&path, b"old").unwrap();
    // A cut before every recorded call.
    let rec = Recording::start(root, 3, 1_000_000).unwrap();
    mqlite::util::fs::stage(&path, b"new", 0o600)
        .unwrap()
        .replace(false)
        .unwrap();
    rec.capture("after the replace");
    let snaps = rec.take();
    let labels: Vec<&str> = snaps.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(snaps.len(), 5, "{labels:?}");
    assert!(labels[3].contains("fsync dir"), "{labels:?}");
    for (i, snap) in snaps.iter().enumerate() {
        for image_seed in 0..16 {
            let image = scratch();
            let stats = snap.build(image.path(), image_seed).unwrap();
            let got = std::fs::read(image.path().join("f.json")).unwrap();
            let want: &[u8] = match (i, stats.live_namespace) {
                (4, _) => b"new",
                (3, true) => b"new", // the rename reached the journal
                _ => b"old",
            };
            assert_eq!(got, want, "{}, image seed {image_seed}", snap.label);
        }
    }
    drop(rec);

    let rec = Recording::start(root, 3, 0).unwrap();
    let file = mqlite::util::fs::open_rw(&root.join("unsynced"), 0o600).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[7u8; 5000], 0).unwrap();
    rec.capture("written, never synced");
    let snap = rec.take().pop().unwrap();
    for image_seed in 0..16 {
        let image = scratch();
        let stats = snap.build(image.path(), image_seed).unwrap();
        let got = std::fs::read(image.path().join("unsynced"));
        if !stats.live_namespace {
            assert!(got.is_err(), "image seed {image_seed}: {stats:?}");
        }
    }
}

/// A config file's `.bak` (the reader's fallback when the main file is damaged) holds the
/// previous version whole after a power cut that follows the replace: the copy is made
/// durable before the rename. Before, its bytes were never synced, and an image could keep
/// the `.bak`'s name with none of its content.
#[test]
fn a_config_files_bak_survives_a_power_cut_after_the_replace() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let old = b"{\"version\":\"old\"}".repeat(300);
    std::fs::write(root.join("topics.json"), &old).unwrap();
    let recording = Recording::start(&root, 1, 0).unwrap();
    mqlite::util::fs::stage(&root.join("topics.json"), b"{\"version\":\"new\"}", 0o600)
        .unwrap()
        .replace(true)
        .unwrap();
    recording.capture("after the replace");
    let snaps = recording.take();
    assert_eq!(snaps.len(), 1);
    for image_seed in 0..32 {
        let image = tempfile::tempdir().unwrap();
        snaps[0].build(image.path(), image_seed).unwrap();
        let bak = std::fs::read(image.path().join("topics.json.bak")).unwrap();
        assert_eq!(
            bak, old,
            "image seed {image_seed}: the .bak lost its content"
        );
    }
}
