//! Golden vectors of rust/FORMAT.md: the codec must produce exactly the fixture bytes, and a
//! record written through a real store must have the same bytes on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use mqlite::consume_queue::unit::CqUnit;
use mqlite::message::codec::{self, RecordCheck, RecordMeta, STORE_HOST};
use mqlite::message::{msg_id, properties};
use mqlite::{MessageRef, RecordView, Store, StoreConfig, TagFilter};

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.trim();
    assert_eq!(text.len() % 2, 0, "{name}: odd number of hex digits");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn golden_meta() -> RecordMeta {
    RecordMeta {
        queue_id: 3,
        flag: 7,
        queue_offset: 42,
        physical_offset: 4096,
        sysflag: 0,
        born_timestamp: 1_700_000_000_000,
        store_timestamp: 1_700_000_000_001,
        reconsume_times: 2,
        prepared_transaction_offset: 0,
    }
}

const BODY: &[u8] = b"hello";
const TOPIC: &str = "TopicTest";
const PROPS: &[u8] = b"TAGS\x01A\x02";

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn record_encode_matches_fixture() {
    let expected = fixture("record_v1.hex");
    assert_eq!(expected.len(), 112);
    let n = codec::encoded_len(BODY.len(), TOPIC.len(), PROPS.len()).unwrap();
    assert_eq!(n, 91 + 5 + 9 + 7);
    let mut buf = vec![0u8; n];
    codec::encode(
        &mut buf,
        &golden_meta(),
        codec::body_crc(BODY),
        BODY,
        TOPIC.as_bytes(),
        PROPS,
    );
    assert_eq!(buf, expected);
    assert_eq!(codec::body_crc(BODY), 0x3610_A686);
}

#[test]
fn cq_unit_encode_matches_fixture() {
    let expected = fixture("cq_unit.hex");
    let unit = CqUnit {
        offset: 4096,
        size: 112,
        tags_code: mqlite::message::tags::of_tag("A"),
    };
    assert_eq!(unit.encode().as_slice(), expected.as_slice());
    let arr: [u8; 20] = expected.as_slice().try_into().unwrap();
    assert_eq!(CqUnit::decode(&arr), Some(unit));
}

#[test]
fn blank_encode_matches_fixture() {
    let expected = fixture("blank.hex");
    let mut buf = [0u8; 8];
    codec::encode_blank(&mut buf, 64);
    assert_eq!(buf.as_slice(), expected.as_slice());
    // Followed by 56 zero bytes it is a blank of the whole 64-byte remainder.
    let mut rest = vec![0u8; 64];
    rest[..8].copy_from_slice(&buf);
    assert_eq!(codec::check(&rest, true, None), RecordCheck::Blank);
    // A marker whose length disagrees with the remainder is not a blank.
    assert!(matches!(
        codec::check(&rest[..32], true, None),
        RecordCheck::Invalid(_)
    ));
}

#[test]
fn record_fixture_decodes_to_expected_fields() {
    let bytes = fixture("record_v1.hex");
    let v = RecordView::parse(&bytes, true).unwrap();
    assert_eq!(v.total_size(), 112);
    assert_eq!(v.magic(), codec::MAGIC_V1);
    assert_eq!(v.body_crc(), 0x3610_A686);
    assert_eq!(v.queue_id(), 3);
    assert_eq!(v.flag(), 7);
    assert_eq!(v.queue_offset(), 42);
    assert_eq!(v.physical_offset(), 4096);
    assert_eq!(v.sysflag(), 0);
    assert_eq!(v.born_timestamp(), 1_700_000_000_000);
    assert_eq!(v.born_host(), &[127, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(v.store_timestamp(), 1_700_000_000_001);
    assert_eq!(v.store_host(), &[127, 0, 0, 1, 0, 0, 0x2a, 0x9f]);
    assert_eq!(v.reconsume_times(), 2);
    assert_eq!(v.prepared_transaction_offset(), 0);
    assert_eq!(v.body(), BODY);
    assert_eq!(v.topic(), TOPIC);
    assert_eq!(v.properties(), PROPS);
    assert_eq!(properties::get(v.properties(), properties::TAGS), Some("A"));
    assert_eq!(mqlite::message::tags::of_tag("A"), 65);
    assert_eq!(mqlite::message::tags::of_tag("TagA"), 2_598_919);
    assert_eq!(
        codec::check(&bytes, true, Some(4096)),
        RecordCheck::Record(112)
    );
    assert_eq!(
        msg_id::offset_msg_id(&STORE_HOST, v.physical_offset()),
        "7F00000100002A9F0000000000001000"
    );
    // One flipped body bit is caught by the CRC check.
    let mut bad = bytes.clone();
    bad[88] ^= 0x01;
    assert!(matches!(
        RecordView::parse(&bad, true),
        Err(codec::DecodeError::CrcMismatch { .. })
    ));
}

fn small_config() -> StoreConfig {
    StoreConfig {
        commit_log_file_size: Some(128 << 10),
        consume_queue_file_units: Some(64),
        max_message_size: Some(64 << 10),
        warm_mapped_files: false,
        ..Default::default()
    }
}

/// The fixture with the fields the store chooses (queue offset, physical offset, store time)
/// replaced.
/// The golden record as the store writes it: the fixture's bytes with the assigned offsets and
/// store time, TOTALSIZE and PROPLEN grown by 20, then the whole-record CRC property
/// (`__CRC32#`, FORMAT.md §1.5): the masked CRC32 of everything before it, as 10 decimal digits
/// written least significant first.
fn expected_on_disk(queue_offset: u64, physical_offset: u64, store_ts: i64) -> Vec<u8> {
    let mut b = fixture("record_v1.hex");
    let props_len_at = b.len() - PROPS.len() - 2;
    let total = (b.len() + 20) as u32;
    b[0..4].copy_from_slice(&total.to_be_bytes());
    b[20..28].copy_from_slice(&queue_offset.to_be_bytes());
    b[28..36].copy_from_slice(&physical_offset.to_be_bytes());
    b[56..64].copy_from_slice(&store_ts.to_be_bytes());
    b[props_len_at..props_len_at + 2].copy_from_slice(&((PROPS.len() + 20) as u16).to_be_bytes());
    let crc = crc32fast::hash(&b) & 0x7FFF_FFFF;
    b.extend_from_slice(b"__CRC32#\x01");
    let mut v = crc;
    for _ in 0..10 {
        b.push(b'0' + (v % 10) as u8);
        v /= 10;
    }
    b.push(0x02);
    b
}

/// Size of the golden record as the store writes it (112 + the 20-byte CRC property).
const REC: u32 = 132;

#[test]
fn store_writes_the_golden_layout_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let mut msg = MessageRef::new(TOPIC, 3, BODY).with_properties(PROPS);
    msg.flag = 7;
    msg.born_timestamp = 1_700_000_000_000;
    msg.reconsume_times = 2;
    assert_eq!(mqlite::message::tags::of_stored(TOPIC, PROPS, 0), 65);
    let first = store.put(&msg).unwrap().appended;
    let second = store.put(&msg).unwrap().appended;
    assert_eq!(
        (first.physical_offset, first.size, first.queue_offset),
        (0, REC, 0)
    );
    assert_eq!(
        (second.physical_offset, second.size, second.queue_offset),
        (REC as u64, REC, 1)
    );
    store.close().unwrap();

    let log = std::fs::read(dir.path().join("commitlog/00000000000000000000")).unwrap();
    assert_eq!(log.len(), 128 << 10);
    for a in [first, second] {
        let at = a.physical_offset as usize;
        let rec = &log[at..at + REC as usize];
        assert_eq!(be_u32(rec, 0), REC, "TOTALSIZE at 0");
        assert_eq!(be_u32(rec, 4), 0xDAA3_20A7, "magic at 4");
        assert_eq!(be_u32(rec, 8), 0x3610_A686, "body CRC at 8");
        assert_eq!(be_u32(rec, 12), 3, "queue id at 12");
        assert_eq!(be_u64(rec, 20), a.queue_offset, "queue offset at 20");
        assert_eq!(be_u64(rec, 28), a.physical_offset, "physical offset at 28");
        assert_eq!(be_u64(rec, 56) as i64, a.store_timestamp, "store ts at 56");
        assert_eq!(
            &rec[64..72],
            &[127, 0, 0, 1, 0, 0, 0x2a, 0x9f],
            "store host at 64"
        );
        assert_eq!(
            rec,
            expected_on_disk(a.queue_offset, a.physical_offset, a.store_timestamp).as_slice()
        );
    }
    // Nothing written after the second record.
    assert!(log[2 * REC as usize..].iter().all(|&b| b == 0));

    // The consume-queue units on disk are the golden unit layout.
    let cq = std::fs::read(
        dir.path()
            .join("consumequeue/TopicTest/3/00000000000000000000"),
    )
    .unwrap();
    assert_eq!(cq.len(), 64 * 20);
    let unit0 = CqUnit {
        offset: 0,
        size: REC,
        tags_code: 65,
    };
    let unit1 = CqUnit {
        offset: REC as u64,
        size: REC,
        tags_code: 65,
    };
    assert_eq!(&cq[..20], unit0.encode().as_slice());
    assert_eq!(&cq[20..40], unit1.encode().as_slice());
    assert!(cq[40..].iter().all(|&b| b == 0));

    // Reopened, the store reads back the same bytes.
    let store = Store::open(dir.path(), small_config()).unwrap();
    let got = store
        .get_messages(TOPIC, 3, 0, 32, &TagFilter::parse("A"))
        .unwrap();
    let recs: Vec<_> = got.iter().map(|v| v.bytes().to_vec()).collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0], &log[0..REC as usize]);
    assert_eq!(recs[1], &log[REC as usize..2 * REC as usize]);
}

/// The body of the compression fixtures (`COMPRESSED_BODY` of `tests/fixtures/make_golden.py`).
fn compressed_fixture_body() -> Vec<u8> {
    b"mqlite golden body, compressed as RocketMQ producers do. ".repeat(8)
}

#[test]
fn compressed_body_fixtures_decode_through_a_stored_record() {
    use mqlite::message::compression::{decoded_body, Codec};
    let body = compressed_fixture_body();
    assert_eq!(body.len(), 456);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let cases = [
        ("body_zlib.hex", Codec::Zlib, 0x301),
        ("body_lz4.hex", Codec::Lz4, 0x101),
        ("body_zstd.hex", Codec::Zstd, 0x201),
    ];
    for (i, (name, codec, flags)) in cases.into_iter().enumerate() {
        let stored = fixture(name);
        assert_eq!(codec.sysflag(), flags);
        assert_eq!(codec.decompress(&stored).unwrap(), body, "{name}");
        let mut msg = MessageRef::new("Compressed", 0, &stored);
        msg.sysflag = flags;
        let put = store.put(&msg).unwrap().appended;
        assert_eq!(put.queue_offset, i as u64);
        let got = store
            .get_messages("Compressed", 0, i as u64, 1, &TagFilter::parse("*"))
            .unwrap();
        let rec = got.iter().next().unwrap();
        let view = RecordView::parse(rec.bytes(), true).unwrap();
        // The record keeps the compressed bytes and their CRC; the reader decodes them.
        assert_eq!(view.sysflag(), flags, "{name}");
        assert_eq!(view.body(), stored.as_slice(), "{name}");
        assert_eq!(view.body_crc(), codec::body_crc(&stored), "{name}");
        assert_eq!(
            decoded_body(view.sysflag(), view.body()).unwrap(),
            body,
            "{name}"
        );
    }
    // RocketMQ's zlib records from before the codec bits: the compressed bit alone.
    let zlib = fixture("body_zlib.hex");
    assert_eq!(decoded_body(0x1, &zlib).unwrap(), body);
    // The same bytes without the compressed bit are a plain body.
    assert_eq!(decoded_body(0x300, &zlib).unwrap(), zlib);
}

#[test]
fn meta_slot_encode_matches_fixture() {
    use mqlite::store_meta::{Geometry, StoreMeta};
    let expected = fixture("meta_slot.hex");
    let meta = StoreMeta {
        format_version: 1,
        geometry: Geometry {
            commit_log_file_size: 32 << 20,
            consume_queue_file_units: 50_000,
        },
        created_by: "mqlite 0.1.0".to_owned(),
    };
    assert_eq!(meta.encode().as_slice(), expected.as_slice());
    assert_eq!(StoreMeta::decode(&expected), Some(meta));
}

#[test]
fn topic_journal_writes_and_reads_the_fixture() {
    use mqlite::topic_config::{Access, TopicConfig, TopicTable};
    let expected = fixture("topics_journal.hex");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("topics.json");
    let table = TopicTable::load(Some(json.clone()), 0o600, Access::Own).unwrap();
    table
        .put(TopicConfig::new("TopicTest", 4, 6, false))
        .unwrap();
    assert!(table.remove("TopicTest").unwrap());
    let written = std::fs::read(dir.path().join("topics.journal")).unwrap();
    assert_eq!(written, expected);
    drop(table);
    // Read back: the fixture's first record alone creates the topic, both leave none.
    let put_only = &expected[..expected.len() - (8 + r#"{"remove":"TopicTest"}"#.len())];
    std::fs::write(dir.path().join("topics.journal"), put_only).unwrap();
    let reader = TopicTable::load(Some(json.clone()), 0o600, Access::Read).unwrap();
    assert_eq!(
        reader.get("TopicTest"),
        Some(TopicConfig::new("TopicTest", 4, 6, false))
    );
    std::fs::write(dir.path().join("topics.journal"), &expected).unwrap();
    let reader = TopicTable::load(Some(json), 0o600, Access::Read).unwrap();
    assert!(reader.all().is_empty());
}

/// FORMAT.md §4.1 and its golden vector: the clean-shutdown record's bytes, both ways.
#[test]
fn queues_clean_record_matches_the_golden_vector() {
    use mqlite::consume_queue::clean::{CleanRecord, QueueState};
    let record = CleanRecord {
        log_end: 4096,
        queues: vec![
            QueueState {
                topic: "a".into(),
                queue_id: 0,
                max_offset: 3,
                max_physical: 4096,
            },
            QueueState {
                topic: "b_2".into(),
                queue_id: 7,
                max_offset: 0,
                max_physical: 0,
            },
        ],
    };
    let expected = fixture("queues_clean.hex");
    assert_eq!(record.encode(), expected);
    assert_eq!(CleanRecord::decode(&expected), Some(record));
}

#[test]
fn writer_shm_header_and_slots_match_fixture() {
    use mqlite::shared::layout::{
        queue_hash, queue_key, topic_hash, Capacity, Header, StoreIdentity,
    };
    use mqlite::shared::{Initial, WriterShm};
    let expected = fixture("writer_shm_header.hex");
    let capacity = Capacity {
        topic_slots: 4096,
        queue_slots: 65536,
    };
    let header = Header {
        mutex_bytes: 40,
        pointer_bytes: 8,
        identity: StoreIdentity {
            device: 2049,
            inode: 0x0102_0304_0506_0708,
        },
        capacity,
    };
    assert_eq!(header.encode().as_slice(), expected.as_slice());
    // The slots FORMAT.md §14 names.
    assert_eq!(topic_hash(b"TopicTest"), 0x6761_5f70_5443_9920);
    assert_eq!(topic_hash(b"TopicTest") % 4096, 2336);
    assert_eq!(queue_hash(queue_key(0, 3)), 0x6e28_b15e_c054_4b0e);

    // A mapping built for TopicTest/3 at next offset 42 after 4,096 bytes of log.
    let dir = tempfile::tempdir().unwrap();
    let initial = Initial {
        log_end: 4096,
        dispatched: 4096,
        flushed: 4096,
        last_store_timestamp: 1_700_000_000_001,
        queues: vec![("TopicTest".to_owned(), 3, 42)],
    };
    drop(WriterShm::create(dir.path(), capacity, &initial, 0o700, 0o600).unwrap());
    let file = std::fs::read(dir.path().join("run/writer.shm")).unwrap();
    assert_eq!(file.len(), 4096 + 4096 * 256 + 65536 * 16);
    assert_eq!(&file[..4], b"MQLW");
    assert_eq!(be_u64(&file, 128), 4096, "log_end");
    assert_eq!(be_u64(&file, 136), 0, "intent_end");
    assert_eq!(
        be_u64(&file, 160),
        1_700_000_000_001,
        "last store timestamp"
    );
    assert_eq!(be_u64(&file, 168), 1, "topics used");
    assert_eq!(be_u64(&file, 176), 1, "queues used");
    assert_eq!(be_u64(&file, 192), 4096, "dispatched");
    assert_eq!(be_u64(&file, 256), 4096, "flushed");
    // Topic id 2336: its slot holds the length, then the name.
    let topic = 4096 + 2336 * 256;
    assert_eq!(file[topic], 9);
    assert_eq!(&file[topic + 1..topic + 10], b"TopicTest");
    let key = queue_key(2336, 3);
    assert_eq!(key, 0x0000_0921_0000_0003);
    let slot = (queue_hash(key) % 65536) as usize;
    assert_eq!(slot, 61887);
    let queue = 4096 + 4096 * 256 + slot * 16;
    assert_eq!(be_u64(&file, queue), key);
    assert_eq!(be_u64(&file, queue + 8), 42);
    // The reserved-chunk bitmap: the topic's chunk (9) and the queue's (31), in word 0.
    assert_eq!((topic - 4096) / 65536, 9);
    assert_eq!((queue - 4096) / 65536, 31);
    assert_eq!(be_u64(&file, 512), 1 << 9 | 1 << 31, "reserved chunks");
    assert!((520..768).step_by(8).all(|at| be_u64(&file, at) == 0));
}

#[test]
fn delay_offsets_file_matches_the_golden_vector() {
    use mqlite::store::schedule::offsets;
    use std::collections::BTreeMap;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/delay_offset.json");
    let expected = std::fs::read(&path).unwrap();
    let table = BTreeMap::from([(18, 0), (1, 3), (3, 12)]);
    assert_eq!(
        offsets::encode(&table, 4, 1_700_000_000_000).as_bytes(),
        &expected[..]
    );
    let read = offsets::decode(&path, &expected).unwrap();
    assert_eq!((read.table, read.counter), (table.clone(), 4));
    // RocketMQ's fastjson form: unquoted level keys, no dataVersion (4.x).
    let rocketmq = b"{\"offsetTable\":{1:3,3:12,18:0}}";
    assert_eq!(offsets::decode(&path, rocketmq).unwrap().table, table);
}

#[test]
fn timer_progress_file_matches_the_golden_vector() {
    use mqlite::store::timer::progress::{self, Progress};
    use std::collections::BTreeMap;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/timer_progress.json");
    let expected = std::fs::read(&path).unwrap();
    let mut p = Progress {
        floor: 12,
        delivered: BTreeMap::from([(14, 16), (20, 21)]),
        rescheduled: BTreeMap::from([(17, 1_700_000_600_000)]),
        levels: BTreeMap::from([(1, 3), (3, 12)]),
        level_done: std::collections::BTreeSet::from([(3, 13)]),
        level_moved: BTreeMap::from([((3, 15), 1_700_000_700_000)]),
        log_offset: 65_536,
        counter: 6,
        main_unreadable: false,
    };
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join(progress::FILE);
    p.store(&written, 1_700_000_000_000, 0o644).unwrap();
    assert_eq!(std::fs::read(&written).unwrap(), expected);
    let read = progress::decode(&path, &expected).unwrap();
    assert_eq!(read, p);
}

#[test]
fn timer_cancel_and_reschedule_records_match_the_golden_bytes() {
    use mqlite::message::tags;
    use mqlite::message::timer::TIMER_TOPIC;
    use mqlite::message::timer_id::{Change, TimerId};
    let cancel = Change::Cancel(TimerId::log(5)).encode();
    assert_eq!(cancel, b"MQLITE_TIMER_CANCEL\x015\x02");
    assert_eq!(tags::of_record(TIMER_TOPIC, &cancel, None, 0), 5);
    let id = TimerId::parse("L3:17").unwrap();
    let moved = Change::Reschedule(id, 1_700_000_600_000).encode();
    assert_eq!(
        moved,
        b"MQLITE_TIMER_CANCEL\x01L3:17\x02MQLITE_TIMER_RESCHEDULE_MS\x011700000600000\x02"
    );
    assert_eq!(
        tags::of_record(TIMER_TOPIC, &moved, None, 0),
        (3 << 48) | 17
    );
}

/// FORMAT.md §1.7 and its golden vector: a repair filler of 160 bytes at offset 4096 is a
/// whole record (both CRCs) that no consume queue takes.
#[test]
fn repair_filler_matches_fixture() {
    let expected = fixture("repair_filler.hex");
    let got = mqlite::repair::filler::record(4096, 160, 1_700_000_000_000).unwrap();
    assert_eq!(got, expected);
    assert_eq!(
        codec::check_stored(&got, true, Some(4096)),
        RecordCheck::Record(160)
    );
    let v = RecordView::parse(&got, true).unwrap();
    assert_eq!(v.topic(), mqlite::repair::filler::FILLER_TOPIC);
    assert!(!mqlite::message::sysflag::is_dispatched(v.sysflag()));
}

/// FORMAT.md §21 and its golden vector: an IndexFile of 64 slots holding three keys of one
/// record and one of a second.
#[test]
fn index_file_matches_the_golden_vector() {
    use mqlite::index::file::{Geometry, IndexFile};
    use mqlite::index::hash::topic_key_hash;
    let expected = fixture("index_file.hex");
    let dir = tempfile::tempdir().unwrap();
    let f = IndexFile::create(
        Some(dir.path()),
        "20231114221320123",
        Geometry::with_slots(64),
        0o600,
    )
    .unwrap();
    let mut h = f.header().unwrap();
    // A record with UNIQ_KEY U1 and KEYS "k1 k2", then one with KEYS "k1" 1.5 s later.
    let props = mqlite::message::properties::encode([("KEYS", "k1 k2"), ("UNIQ_KEY", "U1")]);
    for key in mqlite::index::hash::record_keys(&props) {
        let hash = topic_key_hash("TopicTest", key);
        assert!(f.put(&mut h, hash, 0, 1_700_000_000_123).unwrap());
    }
    let hash = topic_key_hash("TopicTest", "k1");
    assert!(f.put(&mut h, hash, 211, 1_700_000_001_623).unwrap());
    assert_eq!(std::fs::read(f.path()).unwrap(), expected);
}

/// FORMAT.md §20.1 and its golden vector: a transaction snapshot of two transactions.
#[test]
fn transaction_snapshot_file_matches_the_golden_vector() {
    use mqlite::store::txn::snapshot;
    use mqlite::store::txn::state::{Dest, Status, Table, Txn};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/txn_state.json");
    let expected = std::fs::read(&path).unwrap();
    let mut table = Table {
        walked_to: 65_536,
        ..Table::default()
    };
    table.txns.insert(
        "b".into(),
        Txn {
            group: "G".into(),
            halves: vec![4500],
            half_queue_offsets: vec![2],
            status: Status::Open,
            checks: 2,
            first_ms: 1_700_000_000_000,
            last_check_ms: 1_700_000_012_000,
        },
    );
    table.txns.insert(
        "a".into(),
        Txn {
            group: "G".into(),
            halves: vec![4096, 4300],
            half_queue_offsets: vec![0, 1],
            status: Status::Committed,
            checks: 0,
            first_ms: 1_699_999_999_000,
            last_check_ms: 0,
        },
    );
    table.by_queue_offset.insert(2, "b".into());
    table.undelivered.insert(4300, Dest::Real);
    table.progress.insert("sink".into(), "7".into());
    assert_eq!(snapshot::encode(&table).as_bytes(), &expected[..]);
    let read = snapshot::decode(&path, &expected).unwrap();
    assert_eq!(read.walked_to, 65_536);
    assert_eq!(read.txns, table.txns);
    assert_eq!(read.by_queue_offset, table.by_queue_offset);
    assert_eq!(read.undelivered, table.undelivered);
    assert_eq!(read.progress, table.progress);
}
