//! Fuzz corpus replay (reliability plan B.d) and the fuzz targets' checks.
//!
//! This file (with `fuzz_checks/`) is the single source of the checks the cargo-fuzz targets in
//! `fuzz/` run: each target is a one-line wrapper that includes this file as a module (`#[path]`)
//! and calls one `check_*` function, so the fuzzer and this replay assert exactly the same invariants. Under
//! plain `cargo test` (stable, no libFuzzer) it feeds every file under `fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/` and `fuzz/artifacts/<target>/` through its target's check, then a
//! few hundred seeded mutations of each file (bit flips, byte overwrites, truncation,
//! extension), so CI exercises the decoders beyond the saved inputs without a nightly toolchain.
//!
//! Targets and their invariants:
//! - `record_decode`: `RecordView::parse` (with and without CRC), `parse_verified`,
//!   `codec::check`, `check_stored` and `peek` never panic and agree with each other; an `Ok`
//!   view lies inside the input, its field lengths add up to TOTALSIZE (no accessor silently
//!   falls back to an empty slice), a CRC-checked view's CRCs are right, and a record with
//!   mqlite's own hosts re-encodes to exactly its bytes.
//! - `cq_unit_decode`: `CqUnit::decode` of every 20-byte chunk is `Some` exactly for in-range,
//!   non-empty units, and such a unit re-encodes to the same bytes.
//! - `checkpoint_decode`: `CheckpointData::decode` never panics, accepts only slots with the
//!   right magic, version and CRC, and decoded values round-trip through `encode`;
//!   `Checkpoint::open` (read-only) on the bytes as a file picks slot A, else slot B, a slot
//!   counting only when it and its progress table (FORMAT.md §5) lie wholly inside the file
//!   and verify.
//! - `topics_json`: `TopicTable::load` of the bytes as `topics.json` never panics; it fails
//!   only with `ConfigFile` naming that file (never with an empty table in its place), a loaded
//!   table agrees with a generic JSON parse, and loading the bytes as the `.bak` behind a damaged
//!   main file gives the same table (or, when they do not load, the main file's error).
//! - `recover_mutated_commit_log`: a small store (two commit-log files, two consume-queue
//!   files in one queue, checkpoint, topics.json) is copied, one of its files is overwritten /
//!   truncated / deleted at a fuzz-chosen offset, optionally with the abort marker; then
//!   `Store::open` (optionally read-only first) returns `Ok` or `Err(Corrupted | Io)` (or
//!   `Err(ConfigFile)` when the file is `topics.json`) within
//!   5 s; after `Ok` every queue reads back `Ok` (only intact records, in queue order) or
//!   `Err(Corrupted)`, a new put is readable at its queue offset, and a reopen after a clean
//!   close succeeds with the same queue offsets.
//! - `properties_decode` and `store_meta_decode`: see `fuzz_checks/properties.rs` and
//!   `fuzz_checks/store_meta.rs`.
//!
//! `fuzz_checks/smoke.rs` holds `fuzz_smoke`, a time-bounded run of every target on stable
//! (ignored by default; `.ci/run` runs it when `cargo fuzz` cannot).
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::host_endian_bytes,
    missing_docs
)]

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mqlite::checkpoint::{Checkpoint, CheckpointData, RocketMqCheckpoint};
use mqlite::consume_queue::unit::{CqUnit, PLACEHOLDER_SIZE};
use mqlite::message::codec::{
    self, Peek, RecordCheck, RecordMeta, BORN_HOST, MAGIC_V1, MAGIC_V2, RECORD_CRC_LEN,
    RECORD_CRC_NAME, STORE_HOST,
};
use mqlite::message::sysflag;
use mqlite::topic_config::{Access, TopicConfig, TopicTable};
use mqlite::{Error, MessageRef, RecordView, Store, StoreConfig, TagFilter};

/// A fuzz target's name and check.
type Target = (&'static str, fn(&[u8]));

/// The fuzz targets, each with the check that replays its inputs.
pub const TARGETS: &[Target] = &[
    ("record_decode", check_record),
    ("cq_unit_decode", check_cq_units),
    ("checkpoint_decode", check_checkpoint),
    ("topics_json", check_topics_json),
    ("recover_mutated_commit_log", check_recover_mutated),
    ("properties_decode", check_properties),
    ("store_meta_decode", check_store_meta),
];

// The checks of the newer targets, one file each (their invariants are in those files).
#[path = "fuzz_checks/properties.rs"]
mod properties_checks;
#[path = "fuzz_checks/store_meta.rs"]
mod store_meta_checks;
// The stable, time-bounded fuzz driver (`fuzz_smoke`, ignored by default).
#[cfg(test)]
#[path = "fuzz_checks/smoke.rs"]
mod smoke;

pub use properties_checks::check_properties;
pub use store_meta_checks::check_store_meta;

// ---------------------------------------------------------------------------------------------
// shared helpers

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes(s.try_into().unwrap()))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .map(|s| u64::from_be_bytes(s.try_into().unwrap()))
}

/// True if `inner` is a sub-slice of `outer` (same memory, inside its bounds).
fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

/// A per-process scratch directory on tmpfs when there is one (the recover target copies a
/// store per input). Statics are never dropped, so the directory is named after the process and
/// the directories of processes that are gone are removed here.
fn scratch_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() && tempfile::tempdir_in(shm).is_ok() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("mqlite-fuzz-scratch-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = base.join(format!("mqlite-fuzz-scratch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// A fresh, empty directory under the scratch root.
fn fresh_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = scratch_root().join(format!("{tag}-{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&d).unwrap();
    d
}

// ---------------------------------------------------------------------------------------------
// record_decode

/// Checks every record entry point on `data` (see the module docs).
pub fn check_record(data: &[u8]) {
    let peeked = codec::peek(data);
    let plain = RecordView::parse(data, false);
    let crc = RecordView::parse(data, true);
    for (checked, parsed) in [(false, &plain), (true, &crc)] {
        let classified = codec::check(data, checked, None);
        match parsed {
            Ok(v) => {
                record_invariants(data, v, checked);
                assert_eq!(peeked, Peek::Record);
                assert_eq!(classified, RecordCheck::Record(v.total_size()));
                let at = v.physical_offset();
                assert_eq!(
                    codec::check(data, checked, Some(at)),
                    RecordCheck::Record(v.total_size())
                );
                assert!(matches!(
                    codec::check(data, checked, Some(at.wrapping_add(1))),
                    RecordCheck::Invalid(_)
                ));
            }
            Err(_) => assert!(
                !matches!(classified, RecordCheck::Record(_)),
                "check() accepted a record parse() rejects: {classified:?}"
            ),
        }
        match classified {
            RecordCheck::Blank => {
                assert_eq!(be_u32(data, 4), Some(codec::BLANK_MAGIC));
                assert_eq!(be_u32(data, 0).map(|n| n as usize), Some(data.len()));
            }
            RecordCheck::End => {
                let total = be_u32(data, 0);
                let magic = be_u32(data, 4).unwrap_or(0);
                assert!(total.is_none() || (total == Some(0) && magic == 0));
                assert_eq!(peeked, Peek::End);
            }
            _ => {}
        }
    }
    // The CRC check only removes records.
    if let Ok(v) = &crc {
        let p = plain
            .as_ref()
            .expect("parse(crc) accepted what parse(no crc) rejects");
        assert_eq!(p.bytes(), v.bytes());
    }
    let verified = RecordView::parse_verified(data);
    match &verified {
        Ok(v) => {
            let c = crc
                .as_ref()
                .expect("parse_verified accepted what parse(crc) rejects");
            assert_eq!(c.bytes(), v.bytes());
            let raw = v.properties_raw();
            // A record without a well-formed property (RocketMQ's) is whole by its structure
            // and body CRC, which `parse(crc)` agreed on above; one with it, also by this CRC.
            let tail = raw.get(raw.len().saturating_sub(RECORD_CRC_LEN)..);
            if let Some(tail) = tail.filter(|t| {
                t.len() == RECORD_CRC_LEN
                    && t.starts_with(RECORD_CRC_NAME)
                    && t[8] == 1
                    && t[19] == 2
                    && t[9..19].iter().all(u8::is_ascii_digit)
                    && t[9..19]
                        .iter()
                        .rev()
                        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'))
                        <= u64::from(u32::MAX)
            }) {
                // The digits (least significant first) are the masked CRC of everything before.
                let stored = tail[9..19]
                    .iter()
                    .rev()
                    .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
                let covered = &v.bytes()[..v.bytes().len() - RECORD_CRC_LEN];
                assert_eq!(stored, u64::from(codec::body_crc(covered)));
                assert_eq!(v.properties().len() + RECORD_CRC_LEN, raw.len());
            }
            assert_eq!(
                codec::check_stored(data, true, None),
                RecordCheck::Record(v.total_size())
            );
        }
        Err(_) => assert!(!matches!(
            codec::check_stored(data, true, None),
            RecordCheck::Record(_)
        )),
    }
    assert_eq!(
        codec::check_stored(data, false, None),
        codec::check(data, false, None)
    );
}

/// Invariants of a successfully parsed record view.
fn record_invariants(data: &[u8], v: &RecordView<'_>, crc_checked: bool) {
    let bytes = v.bytes();
    let total = v.total_size() as usize;
    assert_eq!(bytes.len(), total);
    assert!(
        total <= data.len(),
        "record of {total} bytes in an input of {}",
        data.len()
    );
    assert_eq!(bytes, &data[..total]);
    assert!(total >= codec::FIXED_V1_IPV4);
    assert_eq!(be_u32(data, 0), Some(total as u32));
    let magic = v.magic();
    assert!(magic == MAGIC_V1 || magic == MAGIC_V2);
    let v6 = |bit: i32| if v.sysflag() & bit != 0 { 20 } else { 8 };
    let (bh, sh) = (v6(sysflag::BORNHOST_V6), v6(sysflag::STOREHOST_V6));
    assert_eq!(v.born_host().len(), bh);
    assert_eq!(v.store_host().len(), sh);
    for field in [
        v.body(),
        v.topic_bytes(),
        v.properties_raw(),
        v.born_host(),
        v.store_host(),
    ] {
        assert!(within(bytes, field), "a field lies outside the record");
    }
    // The cheap body locator (sysflag and BODYLEN only) agrees with the full parse.
    let stored = RecordView::stored_body(bytes).expect("stored body of a parsed record");
    assert_eq!(stored.bytes(), v.body());
    assert!(
        within(bytes, stored.bytes()),
        "the stored body lies outside the record"
    );
    assert_eq!(
        stored.is_compressed(),
        v.sysflag() & sysflag::COMPRESSED != 0
    );
    // The field lengths add up to TOTALSIZE: no accessor fell back to an empty slice.
    let body_len_at = 68 + bh + sh;
    assert_eq!(be_u32(bytes, body_len_at), Some(v.body().len() as u32));
    let topic_len_at = body_len_at + 4 + v.body().len();
    let (topic_len, len_bytes) = if magic == MAGIC_V2 {
        (
            u16::from_be_bytes([bytes[topic_len_at], bytes[topic_len_at + 1]]) as usize,
            2,
        )
    } else {
        (bytes[topic_len_at] as usize, 1)
    };
    assert_eq!(topic_len, v.topic_bytes().len());
    assert_eq!(
        body_len_at + 4 + v.body().len() + len_bytes + topic_len + 2 + v.properties_raw().len(),
        total
    );
    assert_eq!(std::str::from_utf8(v.topic_bytes()).ok(), Some(v.topic()));
    assert!(v.properties_raw().starts_with(v.properties()));
    if crc_checked {
        assert_eq!(codec::body_crc(v.body()), v.body_crc());
    }
    // Round trip: a record with mqlite's hosts and the magic mqlite would choose re-encodes to
    // exactly its bytes.
    let host = |h: codec::HostV4| [&h.ip[..], &h.port.to_be_bytes()[..]].concat();
    let ours = v.sysflag() & (sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6) == 0
        && v.born_host() == host(BORN_HOST).as_slice()
        && v.store_host() == host(STORE_HOST).as_slice()
        && (magic == MAGIC_V2) == (v.topic_bytes().len() > 127);
    if ours {
        let (body, topic, props) = (v.body(), v.topic_bytes(), v.properties_raw());
        assert_eq!(
            codec::encoded_len(body.len(), topic.len(), props.len()),
            Some(total)
        );
        let meta = RecordMeta {
            queue_id: v.queue_id(),
            flag: v.flag(),
            queue_offset: v.queue_offset(),
            physical_offset: v.physical_offset(),
            sysflag: v.sysflag(),
            born_timestamp: v.born_timestamp(),
            store_timestamp: v.store_timestamp(),
            reconsume_times: v.reconsume_times(),
            prepared_transaction_offset: v.prepared_transaction_offset(),
        };
        let mut out = vec![0u8; total];
        codec::encode(&mut out, &meta, v.body_crc(), body, topic, props);
        assert_eq!(
            out.as_slice(),
            bytes,
            "decode then encode changed the record"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// cq_unit_decode

/// Decodes every 20-byte chunk of `data` as a consume-queue unit.
pub fn check_cq_units(data: &[u8]) {
    for chunk in data.chunks_exact(20) {
        let b: &[u8; 20] = chunk.try_into().unwrap();
        let offset = be_u64(b, 0).unwrap();
        let size = be_u32(b, 8).unwrap();
        let tags_code = be_u64(b, 12).unwrap() as i64;
        // A placeholder only in its exact shape (0, PLACEHOLDER_SIZE, 0): FORMAT.md §4.
        let valid = size != 0
            && offset <= i64::MAX as u64
            && size <= i32::MAX as u32
            && (size != PLACEHOLDER_SIZE || (offset == 0 && tags_code == 0));
        match CqUnit::decode(b) {
            Some(u) => {
                assert!(valid, "decoded an out-of-range unit {u:?}");
                assert_eq!(
                    u,
                    CqUnit {
                        offset,
                        size,
                        tags_code
                    }
                );
                assert_eq!(&u.encode(), b);
                assert_eq!(u.is_placeholder(), size == PLACEHOLDER_SIZE);
            }
            None => assert!(!valid, "rejected a valid unit {offset}/{size}/{tags_code}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// checkpoint_decode

const CP_SLOT: usize = 64;
const CP_SLOT_B: usize = 2048;
const CP_FILE: usize = 4096;

/// Decodes `data` as a slot and as a whole checkpoint file.
pub fn check_checkpoint(data: &[u8]) {
    // The file: slot A, else slot B, each only from the bytes the file holds (a slot or table
    // cut short by the end of the file is not whole; slot A's table must end before slot B).
    // RocketMQ's fields are read from a zero-filled 4 KiB buffer.
    let mut padded = data.get(..CP_FILE).unwrap_or(data).to_vec();
    padded.resize(CP_FILE, 0);
    let whole = |slot: &[u8]| checkpoint_slot(slot).filter(|_| progress_table_ok(slot));
    let a = whole(&data[..data.len().min(CP_SLOT_B)]);
    let b = || whole(data.get(CP_SLOT_B..data.len().min(CP_FILE))?);
    let expect = a.or_else(b);
    let dir = fresh_dir("cp");
    let path = dir.join("checkpoint");
    std::fs::write(&path, data).unwrap();
    let (cp, got) = Checkpoint::open(&path, false, 0o600).unwrap();
    assert_eq!(got, expect);
    // Without an mqlite slot, RocketMQ's layout may be read: its timestamps carry over.
    let rocketmq = cp.rocketmq();
    assert!(expect.is_none() || rocketmq.is_none());
    let carried = rocketmq.map_or_else(CheckpointData::default, |r| CheckpointData {
        physic_msg_timestamp: r.physic_msg_timestamp,
        logics_msg_timestamp: r.logics_msg_timestamp,
        index_msg_timestamp: r.index_msg_timestamp,
        ..CheckpointData::default()
    });
    assert_eq!(cp.get(), expect.unwrap_or(carried));
    if let Some(r) = rocketmq {
        assert_eq!(
            Some(r),
            RocketMqCheckpoint::decode(&padded[..data.len().min(CP_FILE)])
        );
        assert!(r.physic_msg_timestamp > 0 && r.logics_msg_timestamp >= 0);
    }
    drop(cp);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        data,
        "a read-only open changed the file"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn checkpoint_slot(b: &[u8]) -> Option<CheckpointData> {
    let d = CheckpointData::decode(b);
    let crc_ok = b.len() >= CP_SLOT
        && b[48..52] == *b"MQLC"
        && be_u32(b, 52) == Some(mqlite::checkpoint::VERSION)
        && be_u32(b, 56) == Some(mqlite::util::crc::crc32(&b[..56]));
    if let Some(d) = d {
        assert!(crc_ok, "decoded a slot with a bad magic, version or CRC");
        assert!(d.confirm_phy_offset <= i64::MAX as u64);
        assert!(d.logics_dispatched_offset <= i64::MAX as u64);
        let enc = d.encode();
        assert_eq!(CheckpointData::decode(&enc), Some(d));
        // Every field but masterFlushedOffset (24..32, always written as 0) is kept.
        assert_eq!(enc[..24], b[..24]);
        assert_eq!(enc[32..56], b[32..56]);
    } else if crc_ok {
        // Only a negative offset may make a well-formed slot unusable.
        let neg = |at| be_u64(b, at).unwrap() > i64::MAX as u64;
        assert!(neg(32) || neg(40), "rejected a well-formed slot");
    }
    d
}

/// Whether the progress table after a slot's head verifies: bytes 60..64 hold its CRC32, 0
/// for no table; a table is a `u32` count (1 to 32) and that many 32-byte entries (a name of
/// 16 bytes whose bytes before the first zero are UTF-8, a non-negative `i64` offset, an
/// `i64` timestamp), and the CRC covers the count and the entries.
fn progress_table_ok(slot: &[u8]) -> bool {
    let Some(crc) = be_u32(slot, 60) else {
        return false;
    };
    if crc == 0 {
        return true;
    }
    let Some(n) = be_u32(slot, CP_SLOT).map(|n| n as usize) else {
        return false;
    };
    if n == 0 || n > 32 {
        return false;
    }
    let Some(table) = slot.get(CP_SLOT..CP_SLOT + 4 + 32 * n) else {
        return false;
    };
    mqlite::util::crc::crc32(table) == crc
        && table[4..].chunks(32).all(|e| {
            let name = &e[..16];
            let len = name.iter().position(|&c| c == 0).unwrap_or(16);
            std::str::from_utf8(&name[..len]).is_ok() && e[16] < 0x80
        })
}

// ---------------------------------------------------------------------------------------------
// topics_json

/// Loads `data` as `topics.json`, directly and as the `.bak` behind a damaged main file.
pub fn check_topics_json(data: &[u8]) {
    let dir = fresh_dir("topics");
    let main = dir.join("topics.json");
    std::fs::write(&main, data).unwrap();
    let direct = match TopicTable::load(Some(main.clone()), 0o600, Access::Read) {
        Ok(t) => t,
        Err(e) => {
            assert_config_file_error(&e, &main);
            // The same bytes as the backup of an unparsable main file do not load either: the
            // main file's error is reported.
            std::fs::write(&main, b"{\"topicConfigTable\": [").unwrap();
            std::fs::write(dir.join("topics.json.bak"), data).unwrap();
            let e = TopicTable::load(Some(main.clone()), 0o600, Access::Read).unwrap_err();
            assert_config_file_error(&e, &main);
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
    };
    let table = direct.all();
    for c in &table {
        assert_eq!(
            direct.write_info(&c.topic_name).is_some(),
            direct.get(&c.topic_name).is_some()
        );
    }
    direct.reload().expect("reload of a file that loaded");
    assert_eq!(
        direct.all(),
        table,
        "reload of an unchanged file changed the table"
    );
    // What a generic JSON parser sees: the table is empty or matches topicConfigTable. (serde
    // skips unknown fields without checking their UTF-8, so invalid bytes there are replaced
    // before the generic parse; in a field the table uses they would have failed the load.)
    if !table.is_empty() {
        let text = String::from_utf8_lossy(data);
        let v: serde_json::Value =
            serde_json::from_str(&text).expect("loaded a table from invalid JSON");
        let entries = v["topicConfigTable"]
            .as_object()
            .expect("no topicConfigTable");
        assert_eq!(entries.len(), table.len());
        for ((_, e), c) in entries.iter().zip(&table) {
            assert_eq!(e["topicName"].as_str(), Some(c.topic_name.as_str()));
            assert_eq!(e["perm"].as_u64(), Some(u64::from(c.perm)));
            assert_eq!(
                e["writeQueueNums"].as_u64(),
                Some(u64::from(c.write_queue_nums))
            );
        }
    }
    // The same bytes as the backup of an unparsable main file give the same table (empty
    // bytes hold no table: the main file's error stands).
    std::fs::write(&main, b"{\"topicConfigTable\": [").unwrap();
    std::fs::write(dir.join("topics.json.bak"), data).unwrap();
    match TopicTable::load(Some(main.clone()), 0o600, Access::Read) {
        Ok(fallback) => assert_eq!(fallback.all(), table),
        Err(e) if data.is_empty() => assert_config_file_error(&e, &main),
        Err(e) => panic!("a loadable .bak did not load: {e:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn assert_config_file_error(e: &Error, main: &Path) {
    match e {
        Error::ConfigFile { path, .. } => assert_eq!(path, main),
        other => panic!("topics.json load failed with {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// recover_mutated_commit_log

const T_A: &str = "FuzzA";
const T_B: &str = "FuzzB";
/// Messages per queue of the template store: FuzzA/0 spans two consume-queue files.
const TEMPLATE_MESSAGES: &[(&str, u32, u64)] = &[(T_A, 0, 90), (T_A, 1, 30), (T_B, 0, 30)];
const OPEN_LIMIT: Duration = Duration::from_secs(5);

fn fuzz_config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(64 << 10),
        consume_queue_file_units: Some(64),
        max_message_size: Some(4 << 10),
        default_queues: 2,
        ..Default::default()
    }
}

/// The template store: its directory and its files (relative paths, sorted; the fuzz input's
/// first byte picks one of them).
struct Template {
    _dir: tempfile::TempDir,
    root: PathBuf,
    files: Vec<PathBuf>,
    /// Commit-log offset of each template message, by (topic, queue, queue offset).
    phys: BTreeMap<(String, u32, u64), u64>,
}

fn template_body(topic: &str, queue: u32, i: u64) -> Vec<u8> {
    let len = 300 + (i * 37 % 400) as usize;
    let mut b = format!("{topic}/{queue}/{i}:").into_bytes();
    b.extend((0..len).map(|k| (i as usize * 31 + k * 7) as u8));
    b
}

fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("mqlite-fuzz-template-")
            .tempdir_in(scratch_root())
            .unwrap();
        let root = dir.path().join("store");
        // T_A in a session of its own, as its first put would create it: the clean close
        // writes topics.json with T_A alone, which becomes the `.bak` when the next close
        // writes it with T_B too.
        let store = Store::open(&root, fuzz_config()).unwrap();
        let queues = fuzz_config().default_queues;
        store.create_topic(T_A, queues, 6, false, true).unwrap();
        store.close().unwrap();
        let store = Store::open(&root, fuzz_config()).unwrap();
        let props = mqlite::message::properties::encode([("TAGS", "T"), ("KEYS", "k")]);
        let most = TEMPLATE_MESSAGES.iter().map(|m| m.2).max().unwrap();
        let mut phys = BTreeMap::new();
        for i in 0..most {
            for &(topic, q, n) in TEMPLATE_MESSAGES {
                if i < n {
                    let body = template_body(topic, q, i);
                    let msg = MessageRef::new(topic, q, &body).with_properties(&props);
                    let put = store.put(&msg).unwrap();
                    assert_eq!(put.appended.queue_offset, i);
                    phys.insert((topic.to_owned(), q, i), put.appended.physical_offset);
                }
            }
        }
        store.close().unwrap();
        let mut files = Vec::new();
        walk(&root, &root, &mut files);
        // `lock`, `open.lock`, `config/topics.lock`, `wakeup` and the writer mapping
        // `run/writer.shm` hold no data
        // recovery reads (FORMAT.md §6, §14). `meta` is copied
        // (`copy_tree`) but not mutated: the saved corpus indexes the list without it, and its
        // damage is a `ConfigFile` error covered by the store_meta tests. The topic journal (an
        // 8-byte header after the clean close) is left out likewise: the corpus predates it,
        // and its damage is covered by topic_config's journal tests. So is the consume queues'
        // clean-shutdown record `queues.clean` (FORMAT.md §4.1; consume_queue/clean.rs and
        // tests/consume_queue_clean_open.rs cover its damage and a queue that disagrees with it).
        // The key index `index/<time>` is named by its creation time and is non-critical:
        // recovery never fails on it (the index tests cover its damage).
        files.retain(|p| {
            p != Path::new("lock")
                && p != Path::new("open.lock")
                && p != Path::new("config/topics.lock")
                && p != Path::new("run/writer.shm")
                && p != Path::new("wakeup")
                && p != Path::new(META)
                && p != Path::new("config/topics.journal")
                && p != Path::new("queues.clean")
                && !p.starts_with("index")
        });
        files.sort();
        assert!(files.len() >= 6, "template store too small: {files:?}");
        Template {
            _dir: dir,
            root,
            files,
            phys,
        }
    })
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(root, &p, out);
        } else {
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The decoded fuzz input of `recover_mutated_commit_log`.
#[derive(Debug)]
pub struct Mutation<'a> {
    /// Index into the template's sorted file list (modulo its length).
    pub file: usize,
    /// Create the abort marker (the previous writer "crashed").
    pub abort: bool,
    /// Cut the file right after the written bytes.
    pub truncate: bool,
    /// Open read-only (and read every queue) before the writable open.
    pub read_only_first: bool,
    /// Delete the file instead of writing to it.
    pub delete: bool,
    /// Byte offset (modulo file length + 1).
    pub offset: u32,
    /// Bytes written at `offset`.
    pub payload: &'a [u8],
}

impl<'a> Mutation<'a> {
    /// Layout: `[file][flags][offset: u32 BE][payload...]`; `None` if shorter than 6 bytes.
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (&file, rest) = data.split_first()?;
        let (&flags, rest) = rest.split_first()?;
        let offset = be_u32(rest, 0)?;
        Some(Mutation {
            file: usize::from(file),
            abort: flags & 1 != 0,
            truncate: flags & 2 != 0,
            read_only_first: flags & 4 != 0,
            delete: flags & 8 != 0,
            offset,
            payload: rest.get(4..).unwrap_or(&[]),
        })
    }
}

/// The template's `meta` file, copied with every set of files.
const META: &str = "meta";

fn copy_tree(from: &Path, to: &Path, files: &[PathBuf]) {
    for f in files.iter().map(PathBuf::as_path).chain([Path::new(META)]) {
        let dst = to.join(f);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(from.join(f), &dst).unwrap();
    }
}

/// Applies `data` to a copy of the template store and checks open, reads, a put and a reopen.
pub fn check_recover_mutated(data: &[u8]) {
    let Some(m) = Mutation::parse(data) else {
        return;
    };
    let t = template();
    let work = fresh_dir("recover");
    let root = work.join("store");
    copy_tree(&t.root, &root, &t.files);
    let target = root.join(&t.files[m.file % t.files.len()]);
    let config_damaged = target.ends_with("topics.json") || target.ends_with("topics.json.bak");
    if m.delete {
        std::fs::remove_file(&target).unwrap();
    } else {
        use std::os::unix::fs::FileExt;
        let f = OpenOptions::new().write(true).open(&target).unwrap();
        let len = f.metadata().unwrap().len();
        let at = u64::from(m.offset) % (len + 1);
        f.write_all_at(m.payload, at).unwrap();
        if m.truncate {
            f.set_len(at + m.payload.len() as u64).unwrap();
        }
    }
    if m.abort {
        std::fs::write(root.join("abort"), b"").unwrap();
    }
    if m.read_only_first {
        let cfg = StoreConfig {
            read_only: true,
            ..fuzz_config()
        };
        if let Some(store) = timed_open(&root, cfg, config_damaged) {
            read_every_queue(&store);
            store.close().unwrap();
        }
    }
    if let Some(store) = timed_open(&root, fuzz_config(), config_damaged) {
        let before = read_every_queue(&store);
        let body = b"after-recovery".as_slice();
        match store.put(&MessageRef::new(T_A, 0, body)) {
            Ok(put) => {
                let qo = put.appended.queue_offset;
                let got = store
                    .get_messages(T_A, 0, qo, 1, &TagFilter::all())
                    .expect("a message put after recovery must be readable");
                let rec = got.iter().next().expect("the new message was not returned");
                assert_eq!(rec.body(), body);
                assert_eq!(rec.queue_offset(), qo);
            }
            Err(e) => assert!(
                matches!(
                    e,
                    Error::TopicNotWritable { .. }
                        | Error::InvalidQueue { .. }
                        | Error::StoreFull { .. }
                        | Error::Io { .. }
                ),
                "put after recovery failed with {e:?}"
            ),
        }
        let offsets = queue_offsets(&store);
        let closed = store.close();
        drop(store);
        if closed.is_ok() {
            let again = timed_open(&root, fuzz_config(), false)
                .expect("a store that opened and closed cleanly must open again");
            assert_eq!(queue_offsets(&again), offsets, "reopen changed the queues");
            again.close().unwrap();
        }
        drop(before);
    }
    std::fs::remove_dir_all(&work).unwrap();
}

/// Opens within `OPEN_LIMIT`; `None` for an allowed error (`ConfigFile` only when
/// `config_damaged`: the mutation hit `topics.json` or its `.bak`).
fn timed_open(root: &Path, cfg: StoreConfig, config_damaged: bool) -> Option<Store> {
    let t0 = Instant::now();
    let r = Store::open(root, cfg);
    assert!(t0.elapsed() < OPEN_LIMIT, "open took {:?}", t0.elapsed());
    match r {
        Ok(s) => Some(s),
        Err(Error::Corrupted { .. } | Error::Io { .. }) => None,
        Err(Error::ConfigFile { .. }) if config_damaged => None,
        Err(e) => panic!("open failed with an unexpected error: {e:?}"),
    }
}

/// Every queue the template wrote plus every queue of every configured topic (capped).
fn queues_of(store: &Store) -> Vec<(String, u32)> {
    let mut qs: Vec<(String, u32)> = TEMPLATE_MESSAGES
        .iter()
        .map(|&(t, q, _)| (t.to_owned(), q))
        .collect();
    let topics: Vec<TopicConfig> = store.topics().unwrap();
    for c in topics {
        for q in 0..c.read_queue_nums.min(8) {
            qs.push((c.topic_name.clone(), q));
        }
    }
    qs.sort();
    qs.dedup();
    qs
}

fn queue_offsets(store: &Store) -> BTreeMap<(String, u32), (u64, u64)> {
    TEMPLATE_MESSAGES
        .iter()
        .map(|&(t, q, _)| ((t.to_owned(), q), store.queue_offsets(t, q).unwrap()))
        .collect()
}

/// Reads every queue from its minimum to its maximum: only intact records of the queue, in
/// order, or `Err(Corrupted)`. For the template's queues no offset may be skipped silently:
/// each is returned, reported as corrupted, or its record is gone from the commit log (below
/// its minimum: expired). Returns the records read per queue.
fn read_every_queue(store: &Store) -> BTreeMap<(String, u32), u64> {
    let t = template();
    let mut counts = BTreeMap::new();
    for (topic, q) in queues_of(store) {
        let (min, max) = store.queue_offsets(&topic, q).unwrap();
        assert!(min <= max);
        let mut accounted = std::collections::BTreeSet::new();
        let (mut off, mut steps) = (min, 0);
        while off < max && steps < 10_000 {
            steps += 1;
            match store.get_messages(&topic, q, off, 64, &TagFilter::all()) {
                Ok(r) => {
                    assert_eq!(
                        r.iter().count(),
                        r.records.len(),
                        "an unparsable record was returned"
                    );
                    let mut last = None;
                    for v in r.iter() {
                        let v = RecordView::parse_verified(v.bytes())
                            .expect("a damaged record was returned");
                        assert_eq!((v.topic(), v.queue_id()), (topic.as_str(), q));
                        assert!(v.queue_offset() >= off && v.queue_offset() < r.next_offset);
                        assert!(
                            last.is_none_or(|l| v.queue_offset() > l),
                            "records out of order"
                        );
                        last = Some(v.queue_offset());
                        accounted.insert(v.queue_offset());
                    }
                    if r.next_offset <= off {
                        break;
                    }
                    off = r.next_offset;
                }
                Err(Error::Corrupted { .. }) => {
                    accounted.insert(off);
                    off += 1;
                }
                Err(e) => panic!("read of {topic}/{q} at {off} failed with {e:?}"),
            }
        }
        if TEMPLATE_MESSAGES
            .iter()
            .any(|&(tt, tq, _)| (tt, tq) == (topic.as_str(), q))
        {
            let cl_min = store.commit_log_range().0;
            for k in min..max {
                let expired = t
                    .phys
                    .get(&(topic.clone(), q, k))
                    .is_some_and(|&p| p < cl_min);
                assert!(
                    accounted.contains(&k) || expired,
                    "{topic}/{q}: offset {k} of [{min}, {max}) was skipped silently"
                );
            }
        }
        counts.insert((topic, q), accounted.len() as u64);
    }
    counts
}

// ---------------------------------------------------------------------------------------------
// replay (plain cargo test)

/// The xorshift64* generator of the other integration tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A mutation of `seed` like libFuzzer's simplest ones.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 | 1 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            2 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] = [0, 0xFF, 0x7F, 0x80][rng.below(4)];
            }
            3 if !d.is_empty() => {
                let n = rng.below(d.len() + 1);
                d.truncate(n);
            }
            4 => {
                let n = 1 + rng.below(16);
                d.extend((0..n).map(|_| rng.next() as u8));
            }
            _ if d.len() >= 4 => {
                // an interesting 32-bit value at a random position
                let i = rng.below(d.len() - 3);
                let v: u32 = [0, 1, 0x7FFF_FFFF, 0xFFFF_FFFF, 91, 4096][rng.below(6)];
                d[i..i + 4].copy_from_slice(&v.to_be_bytes());
            }
            _ => {}
        }
    }
    d
}

fn inputs_of(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for kind in ["corpus", "regressions", "artifacts"] {
        let dir = fuzz.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for p in paths.into_iter().filter(|p| p.is_file()) {
            let bytes = std::fs::read(&p).unwrap();
            out.push((p, bytes));
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `check` on every saved input of `target` and, with `mutations > 0`, on that many seeded
/// mutants of each; fails listing every input that panicked (as hex).
fn replay(target: &str, saved: bool, mutations: usize) {
    let check = TARGETS.iter().find(|t| t.0 == target).unwrap().1;
    let inputs = inputs_of(target);
    assert!(!inputs.is_empty(), "fuzz/corpus/{target} has no inputs");
    let mut failed = Vec::new();
    for (path, bytes) in &inputs {
        if saved && std::panic::catch_unwind(|| check(bytes)).is_err() {
            failed.push(format!("{}: {}", path.display(), hex(bytes)));
        }
    }
    let mut rng = Rng(0x5EED_0000 ^ target.len() as u64);
    for (path, bytes) in &inputs {
        for k in 0..mutations {
            let m = mutate(bytes, &mut rng);
            if std::panic::catch_unwind(|| check(&m)).is_err() {
                failed.push(format!("mutation {k} of {}: {}", path.display(), hex(&m)));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} failing inputs:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn replay_record_decode() {
    replay("record_decode", true, 2_000);
}

#[test]
fn replay_cq_unit_decode() {
    replay("cq_unit_decode", true, 2_000);
}

#[test]
fn replay_checkpoint_decode() {
    replay("checkpoint_decode", true, 500);
}

#[test]
fn replay_topics_json() {
    replay("topics_json", true, 500);
}

#[test]
fn replay_properties_decode() {
    replay("properties_decode", true, 2_000);
}

#[test]
fn replay_store_meta_decode() {
    replay("store_meta_decode", true, 500);
}

#[test]
fn replay_recover_mutated_commit_log_mutations() {
    replay("recover_mutated_commit_log", false, 25);
}

#[test]
fn replay_recover_mutated_commit_log() {
    replay("recover_mutated_commit_log", true, 0);
}

/// The golden record of FORMAT.md passes every record check and is in the corpus.
#[test]
fn golden_record_is_a_seed_and_passes() {
    let hex = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/record_v1.hex"),
    )
    .unwrap();
    let hex = hex.trim();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert!(RecordView::parse(&bytes, true).is_ok());
    check_record(&bytes);
    assert!(
        inputs_of("record_decode").iter().any(|(_, b)| b == &bytes),
        "fuzz/corpus/record_decode lacks the golden record"
    );
}

/// The recover target's first input byte indexes this list: the saved corpus relies on it.
#[test]
fn template_layout_is_stable() {
    let want = [
        "checkpoint",
        "commitlog/00000000000000000000",
        "commitlog/00000000000000065536",
        "config/topics.json",
        "config/topics.json.bak",
        "consumequeue/FuzzA/0/00000000000000000000",
        "consumequeue/FuzzA/0/00000000000000001280",
        "consumequeue/FuzzA/1/00000000000000000000",
        "consumequeue/FuzzB/0/00000000000000000000",
    ];
    let got: Vec<String> = template()
        .files
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------------------------
// bugs found by the fuzzer (kept ignored until the core is fixed; see docs/reliability.md)

/// Bug 1 (found by `recover_mutated_commit_log`): a consume-queue unit right after a queue's
/// tail that points *below* the checkpoint's dispatched offset survives recovery, because
/// `verify_tail` only re-checks units pointing at or after that offset. The phantom unit
/// becomes the queue's last entry; with a large size it also raises the queue's
/// `max_physical_offset`, so every later record of the queue is taken as "already indexed":
/// puts return Ok but their messages never reach the queue.
#[test]
fn stale_unit_after_the_tail_pointing_below_the_checkpoint_is_dropped() {
    let t = template();
    let root = fresh_dir("bug1").join("store");
    copy_tree(&t.root, &root, &t.files);
    // FuzzA/0 holds offsets 0..90; its second file starts at 64, so offset 90 is unit 26.
    let unit = CqUnit {
        offset: 0,
        size: 1 << 30,
        tags_code: 0,
    };
    let cq = root.join("consumequeue/FuzzA/0/00000000000000001280");
    let f = OpenOptions::new().write(true).open(&cq).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &unit.encode(), 26 * 20).unwrap();
    std::fs::write(root.join("abort"), b"").unwrap();
    let store = Store::open(&root, fuzz_config()).unwrap();
    assert_eq!(
        store.queue_offsets(T_A, 0).unwrap(),
        (0, 90),
        "the garbage unit was kept as queue offset 90"
    );
    let put = store.put(&MessageRef::new(T_A, 0, b"new")).unwrap();
    let got = store
        .get_messages(T_A, 0, put.appended.queue_offset, 1, &TagFilter::all())
        .unwrap();
    assert_eq!(
        got.iter().next().map(|v| v.body().to_vec()),
        Some(b"new".to_vec())
    );
}

/// Copies the template, writes `unit` at `unit_index` of the consume-queue file `cq_file`, and
/// opens the store after a clean shutdown (no abort marker).
fn template_with_unit(cq_file: &str, unit_index: u64, unit: [u8; 20]) -> Store {
    let t = template();
    let root = fresh_dir("bug").join("store");
    copy_tree(&t.root, &root, &t.files);
    let f = OpenOptions::new()
        .write(true)
        .open(root.join(cq_file))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &unit, unit_index * 20).unwrap();
    Store::open(&root, fuzz_config()).unwrap()
}

/// Bug 2 (found by `recover_mutated_commit_log`): a damaged consume-queue unit below the
/// checkpoint that points past the end of the commit log is skipped silently by reads: the
/// message at that queue offset (intact in the commit log) is never returned and no
/// `Corrupted` error is raised, so consumers lose it without notice.
#[test]
fn unit_pointing_past_the_log_is_reported_not_skipped() {
    let unit = CqUnit {
        offset: 1_000_000,
        size: 100,
        tags_code: 0,
    };
    let store = template_with_unit(
        "consumequeue/FuzzB/0/00000000000000000000",
        0,
        unit.encode(),
    );
    assert_eq!(store.queue_offsets(T_B, 0).unwrap(), (0, 30));
    match store.get_messages(T_B, 0, 0, 32, &TagFilter::all()) {
        Err(Error::Corrupted { .. }) => {}
        Ok(r) => {
            let first = r.iter().next().map(|v| v.queue_offset());
            panic!(
                "offset 0 skipped silently: status {:?}, first offset returned {first:?}, {} records",
                r.status,
                r.records.len()
            );
        }
        Err(e) => panic!("unexpected error {e:?}"),
    }
}

/// Bug 2, second shape: a zeroed unit in the middle of a queue (below the checkpoint) stops
/// every read at that offset with `OFFSET_FOUND_NULL` and `next_offset` unchanged: no error,
/// and a consumer never gets past it (the following 44 messages are unreachable).
#[test]
fn zeroed_unit_below_the_checkpoint_is_reported_not_a_silent_stall() {
    let store = template_with_unit("consumequeue/FuzzA/0/00000000000000000000", 45, [0; 20]);
    assert_eq!(store.queue_offsets(T_A, 0).unwrap(), (0, 90));
    match store.get_messages(T_A, 0, 45, 32, &TagFilter::all()) {
        Err(Error::Corrupted { .. }) => {}
        Ok(r) => panic!(
            "no error at the zeroed unit: status {:?}, next_offset {}, {} records",
            r.status,
            r.next_offset,
            r.records.len()
        ),
        Err(e) => panic!("unexpected error {e:?}"),
    }
}

/// Bug 4 (found by `recover_mutated_commit_log`): a zeroed unit in a queue's *last*
/// consume-queue file, below the checkpoint, after a clean shutdown: recovery cuts the queue at
/// that unit, and dispatch resumes at the checkpoint's dispatched offset, so the intact records
/// after it are never re-indexed. The queue silently shrinks from 90 to 64 messages, and the
/// next put is given queue offset 64 again: two records in the commit log claim FuzzA/0:64.
#[test]
fn zeroed_unit_in_the_last_cq_file_does_not_cut_the_queue() {
    // FuzzA/0 unit 64 is the first unit of its second (last) file.
    let store = template_with_unit("consumequeue/FuzzA/0/00000000000000001280", 0, [0; 20]);
    let (min, max) = store.queue_offsets(T_A, 0).unwrap();
    let put = store.put(&MessageRef::new(T_A, 0, b"new")).unwrap();
    assert_eq!(
        ((min, max), put.appended.queue_offset),
        ((0, 90), 90),
        "messages 64..89 vanished from the queue and their offsets were reused"
    );
}
