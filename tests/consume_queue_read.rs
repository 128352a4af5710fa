//! Reads through the consume queues: ranges across many topics and queues, RocketMQ's get
//! statuses, tag filtering, next offsets, reads across consume-queue file rolls, lookups by
//! time, by commit-log offset and by offset message id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{body, settle, small_config};
use mqlite::message::codec::STORE_HOST;
use mqlite::message::{msg_id, properties};
use mqlite::{Error, GetStatus, MessageKey, MessageRef, ReadLimit, Store, TagFilter};

const TAGS: [&str; 3] = ["TagA", "TagB", "TagC"];

/// What was written to one queue: (body, tag) per queue offset.
type Model = HashMap<(String, u32), Vec<(Vec<u8>, &'static str)>>;

fn put_tagged(store: &Store, model: &mut Model, topic: &str, queue: u32, i: u64) -> u64 {
    let tag = TAGS[(i % 3) as usize];
    let props = properties::encode([("TAGS", tag)]);
    let b = body(i);
    let msg = MessageRef::new(topic, queue, &b).with_properties(&props);
    let a = store.put(&msg).unwrap().appended;
    let q = model.entry((topic.to_owned(), queue)).or_default();
    assert_eq!(a.queue_offset, q.len() as u64);
    q.push((b, tag));
    a.physical_offset
}

fn populated() -> (tempfile::TempDir, Store, Model) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let mut model = Model::new();
    let mut i = 0;
    // TopicA queues 0..3 and TopicB queues 0..2, interleaved; TopicA/0 gets the most so its
    // consume queue (64 units per file) rolls twice.
    for round in 0..40u64 {
        for q in 0..3 {
            put_tagged(&store, &mut model, "TopicA", q, i);
            i += 1;
        }
        if round % 2 == 0 {
            for q in 0..2 {
                put_tagged(&store, &mut model, "TopicB", q, i);
                i += 1;
            }
        }
    }
    for _ in 0..110 {
        put_tagged(&store, &mut model, "TopicA", 0, i);
        i += 1;
    }
    settle(&store);
    (dir, store, model)
}

#[test]
fn ranges_match_what_was_written() {
    let (_dir, store, model) = populated();
    assert_eq!(model[&("TopicA".to_owned(), 0)].len(), 150);
    for ((topic, queue), msgs) in &model {
        let (min, max) = store.queue_offsets(topic, *queue).unwrap();
        assert_eq!((min, max), (0, msgs.len() as u64));
        let mut offset = 0u64;
        let mut seen = 0usize;
        while offset < max {
            let got = store
                .get_messages(topic, *queue, offset, 7, &TagFilter::all())
                .unwrap();
            assert_eq!(got.status, GetStatus::Found);
            assert_eq!((got.min_offset, got.max_offset), (0, max));
            let n = got.records.len() as u64;
            assert_eq!(n, 7.min(max - offset));
            for (k, v) in got.iter().enumerate() {
                let qo = offset + k as u64;
                assert_eq!(v.queue_offset(), qo);
                assert_eq!(v.topic(), topic);
                assert_eq!(v.queue_id(), *queue);
                assert_eq!(v.body(), msgs[qo as usize].0.as_slice());
                assert_eq!(
                    properties::get(v.properties(), "TAGS"),
                    Some(msgs[qo as usize].1)
                );
                seen += 1;
            }
            assert_eq!(got.next_offset, offset + n);
            offset = got.next_offset;
        }
        assert_eq!(seen, msgs.len());
    }
}

#[test]
fn reads_across_consume_queue_file_rolls() {
    let (dir, store, model) = populated();
    let msgs = &model[&("TopicA".to_owned(), 0)];
    // 150 units with 64 per file: files at byte offsets 0, 1280 and 2560.
    for start in [0u64, 1280, 2560] {
        assert!(common::cq_file(dir.path(), "TopicA", 0, start).exists());
    }
    assert!(!common::cq_file(dir.path(), "TopicA", 0, 3840).exists());
    for (from, n) in [(60u64, 10usize), (120, 20), (0, 150), (63, 2), (127, 3)] {
        let got = store
            .get_messages("TopicA", 0, from, n, &TagFilter::all())
            .unwrap();
        assert_eq!(got.status, GetStatus::Found);
        assert_eq!(got.records.len(), n);
        let offsets: Vec<u64> = got.iter().map(|v| v.queue_offset()).collect();
        assert_eq!(offsets, (from..from + n as u64).collect::<Vec<_>>());
        for v in got.iter() {
            assert_eq!(v.body(), msgs[v.queue_offset() as usize].0.as_slice());
        }
        assert_eq!(got.next_offset, from + n as u64);
    }
    // Reading past the end returns what there is.
    let got = store
        .get_messages("TopicA", 0, 140, 100, &TagFilter::all())
        .unwrap();
    assert_eq!(got.records.len(), 10);
    assert_eq!(got.next_offset, 150);

    // After a reopen the rolled consume queue is recovered with the same content.
    drop(store);
    let store = Store::open(dir.path(), small_config()).unwrap();
    assert_eq!(store.queue_offsets("TopicA", 0).unwrap(), (0, 150));
    let got = store
        .get_messages("TopicA", 0, 0, 150, &TagFilter::all())
        .unwrap();
    let bodies: Vec<Vec<u8>> = got.iter().map(|v| v.body().to_vec()).collect();
    let want: Vec<Vec<u8>> = msgs.iter().map(|(b, _)| b.clone()).collect();
    assert_eq!(bodies, want);
}

#[test]
fn statuses() {
    let (_dir, store, model) = populated();
    let all = TagFilter::all();
    let max = model[&("TopicB".to_owned(), 1)].len() as u64;

    // Unknown topic, and a queue of a known topic that never got a message.
    let r = store.get_messages("Nope", 0, 0, 10, &all).unwrap();
    assert_eq!(r.status, GetStatus::NoMessageInQueue);
    assert_eq!(r.status.name(), "NO_MESSAGE_IN_QUEUE");
    assert_eq!(r.next_offset, 0);
    let r = store.get_messages("TopicA", 3, 0, 10, &all).unwrap();
    assert_eq!(r.status, GetStatus::NoMessageInQueue);
    let r = store.get_messages("Nope", 0, 5, 10, &all).unwrap();
    assert_eq!(r.status, GetStatus::OffsetOverflowBadly);
    assert_eq!(r.next_offset, 0);

    // At the end: nothing new yet.
    let r = store.get_messages("TopicB", 1, max, 10, &all).unwrap();
    assert_eq!(r.status, GetStatus::OffsetOverflowOne);
    assert_eq!(r.status.name(), "OFFSET_OVERFLOW_ONE");
    assert_eq!(r.next_offset, max);
    assert!(r.records.is_empty() && r.buffer.is_empty());

    // Past the end: next offset is corrected to the max.
    let r = store
        .get_messages("TopicB", 1, max + 100, 10, &all)
        .unwrap();
    assert_eq!(r.status, GetStatus::OffsetOverflowBadly);
    assert_eq!(r.status.name(), "OFFSET_OVERFLOW_BADLY");
    assert_eq!(r.next_offset, max);
    assert_eq!(r.max_offset, max);

    // A filter matching nothing scans to the end and moves next_offset past what it scanned.
    let r = store
        .get_messages("TopicB", 1, 0, 10, &TagFilter::parse("TagZ"))
        .unwrap();
    assert_eq!(r.status, GetStatus::NoMatchedMessage);
    assert_eq!(r.status.name(), "NO_MATCHED_MESSAGE");
    assert_eq!(r.next_offset, max);
    assert!(r.records.is_empty());

    // max_messages is range-checked.
    assert!(matches!(
        store.get_messages("TopicB", 1, 0, 0, &all),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        store.get_messages("TopicB", 1, 0, 65_537, &all),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn tag_filter_returns_only_matching_messages() {
    let (_dir, store, model) = populated();
    let msgs = &model[&("TopicA".to_owned(), 0)];
    let filter = TagFilter::parse("TagA || TagB");
    assert!(!filter.is_all());
    let want: Vec<u64> = msgs
        .iter()
        .enumerate()
        .filter(|(_, (_, t))| *t == "TagA" || *t == "TagB")
        .map(|(i, _)| i as u64)
        .collect();
    // Page through with 5 per read; next_offset is one past the last returned message.
    let mut got_offsets = Vec::new();
    let mut offset = 0;
    loop {
        let r = store.get_messages("TopicA", 0, offset, 5, &filter).unwrap();
        if r.status == GetStatus::OffsetOverflowOne {
            break;
        }
        if r.status == GetStatus::NoMatchedMessage {
            assert_eq!(r.next_offset, msgs.len() as u64);
            break;
        }
        assert_eq!(r.status, GetStatus::Found);
        let page: Vec<u64> = r.iter().map(|v| v.queue_offset()).collect();
        assert!(page.len() <= 5);
        for v in r.iter() {
            let tag = properties::get(v.properties(), "TAGS").unwrap();
            assert!(tag == "TagA" || tag == "TagB", "{tag}");
            assert_eq!(v.body(), msgs[v.queue_offset() as usize].0.as_slice());
        }
        if page.len() == 5 {
            assert_eq!(r.next_offset, page[4] + 1);
        }
        got_offsets.extend(page);
        offset = r.next_offset;
    }
    assert_eq!(got_offsets, want);

    // Single tag, "*" and "" filters.
    let r = store
        .get_messages("TopicA", 0, 0, 1000, &TagFilter::parse("TagC"))
        .unwrap();
    assert_eq!(
        r.records.len(),
        msgs.iter().filter(|m| m.1 == "TagC").count()
    );
    for expr in ["*", ""] {
        let r = store
            .get_messages("TopicA", 0, 0, 1000, &TagFilter::parse(expr))
            .unwrap();
        assert_eq!(r.records.len(), msgs.len());
    }
}

#[test]
fn offset_for_timestamp_finds_the_first_later_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let mut model = Model::new();
    let mut first_ts = Vec::new();
    for group in 0..3u64 {
        for i in 0..10 {
            let b = body(group * 10 + i);
            let a = store.put(&MessageRef::new("Time", 1, &b)).unwrap().appended;
            if i == 0 {
                first_ts.push(a.store_timestamp);
            }
            model
                .entry(("Time".to_owned(), 1))
                .or_default()
                .push((b, ""));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    settle(&store);
    assert!(first_ts.windows(2).all(|w| w[0] < w[1]));
    for (g, ts) in first_ts.iter().enumerate() {
        assert_eq!(
            store.offset_for_timestamp("Time", 1, *ts).unwrap(),
            g as u64 * 10
        );
    }
    assert_eq!(store.offset_for_timestamp("Time", 1, 0).unwrap(), 0);
    assert_eq!(store.offset_for_timestamp("Time", 1, i64::MAX).unwrap(), 30);
    assert_eq!(store.offset_for_timestamp("Nope", 0, 0).unwrap(), 0);
}

#[test]
fn get_by_offset_and_msg_id_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let mut model = Model::new();
    let mut offsets = Vec::new();
    for i in 0..50 {
        offsets.push(put_tagged(&store, &mut model, "Ids", (i % 2) as u32, i));
    }
    for (i, &phys) in offsets.iter().enumerate() {
        let id = msg_id::offset_msg_id(&STORE_HOST, phys);
        assert_eq!(id.len(), 32);
        assert_eq!(store.decode_msg_id(&id).unwrap(), phys);
        let (b, qo, q) = store
            .get_by_offset(phys, |v| {
                (v.body().to_vec(), v.queue_offset(), v.queue_id())
            })
            .unwrap();
        assert_eq!(b, body(i as u64));
        assert_eq!(q, (i % 2) as u32);
        assert_eq!(qo, i as u64 / 2);
        let raw = store.record_bytes(phys).unwrap();
        assert_eq!(
            u32::from_be_bytes(raw[..4].try_into().unwrap()) as usize,
            raw.len()
        );
    }
    // Malformed ids and ids of another host are not found; an offset inside a record is not
    // a record.
    for bad in [
        "",
        "XYZ",
        "7F00000100002A9F00000000000010",
        "0A00000100002A9F0000000000000000",
    ] {
        assert!(
            matches!(store.decode_msg_id(bad), Err(Error::MessageNotFound { key: MessageKey::Id(id) }) if id == bad),
            "{bad}"
        );
    }
    // A lookup by offset names the offset, not an id.
    let inside = offsets[1] + 1;
    assert!(matches!(
        store.get_by_offset(inside, |v| v.queue_offset()),
        Err(Error::MessageNotFound { key: MessageKey::Offset(o) }) if o == inside
    ));
    let end = store.commit_log_range().1;
    let err = store
        .get_by_offset(end + 1000, |v| v.queue_offset())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("no message at commit-log offset {}", end + 1000)
    );
}

/// Reads verify each record's body CRC: a record damaged after it was written (here through
/// the file, which shares the page cache with the store's mapping) is an error naming the file
/// and offset, never a message with a wrong body.
#[test]
fn reads_refuse_a_record_whose_body_crc_no_longer_matches() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    let mut offsets = Vec::new();
    for i in 0..3u64 {
        let b = body(i);
        offsets.push(
            store
                .put(&MessageRef::new("Crc", 0, &b))
                .unwrap()
                .appended
                .physical_offset,
        );
    }
    settle(&store);
    // Flip one body byte of the second record (the body starts at byte 88 of a v1 record).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(common::commit_log_file(dir.path(), 0))
        .unwrap();
    let at = offsets[1] + 88;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x40], at).unwrap();

    let first = store
        .get_messages("Crc", 0, 0, 1, &TagFilter::all())
        .unwrap();
    assert_eq!(first.iter().next().unwrap().body(), body(0).as_slice());
    let err = store
        .get_messages("Crc", 0, 1, 1, &TagFilter::all())
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { offset, .. } if *offset == offsets[1]),
        "{err:?}"
    );
    assert!(store
        .get_by_offset(offsets[1], |v| v.queue_offset())
        .is_err());
    let third = store
        .get_messages("Crc", 0, 2, 1, &TagFilter::all())
        .unwrap();
    assert_eq!(third.iter().next().unwrap().body(), body(2).as_slice());
}

/// Batches are dispatched inline from what the append knows (no re-parse): their units must
/// carry the right commit-log offsets, sizes and tags codes across commit-log and unit-file
/// rolls, so tag filtering finds exactly the tagged messages, before and after a reopen.
#[test]
fn batches_dispatch_offsets_and_tags_codes_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let mut model: Vec<(Vec<u8>, &'static str)> = Vec::new();
    {
        let store = Store::open(dir.path(), small_config()).unwrap();
        let mut i = 0u64;
        // 30 batches of 1..=40 messages of up to ~1.5 KiB: several 128 KiB commit-log files
        // and 64-unit consume-queue files.
        for round in 0..30u64 {
            let n = 1 + (round * 7 % 40) as usize;
            let bodies: Vec<Vec<u8>> = (0..n).map(|k| body(i + k as u64)).collect();
            let tags: Vec<&'static str> = (0..n)
                .map(|k| TAGS[((i + k as u64) % 3) as usize])
                .collect();
            let props: Vec<Vec<u8>> = tags
                .iter()
                .map(|t| properties::encode([("TAGS", *t)]))
                .collect();
            let msgs: Vec<MessageRef<'_>> = bodies
                .iter()
                .zip(&props)
                .map(|(b, p)| MessageRef::new("Batched", 0, b).with_properties(p))
                .collect();
            let mut out = Vec::new();
            store.put_batch(&msgs, &mut out).unwrap();
            for (k, a) in out.iter().enumerate() {
                assert_eq!(a.queue_offset, model.len() as u64 + k as u64);
            }
            model.extend(bodies.into_iter().zip(tags));
            i += n as u64;
        }
        settle(&store);
        check_batched(&store, &model);
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), small_config()).unwrap();
    check_batched(&store, &model);
}

fn check_batched(store: &Store, model: &[(Vec<u8>, &'static str)]) {
    let all = store
        .get_messages("Batched", 0, 0, 10_000, &TagFilter::all())
        .unwrap();
    assert_eq!(all.records.len(), model.len());
    for (v, (b, _)) in all.iter().zip(model) {
        assert_eq!(v.body(), b.as_slice());
    }
    let r = store
        .get_messages("Batched", 0, 0, 10_000, &TagFilter::parse("TagB"))
        .unwrap();
    let want: Vec<u64> = (0..model.len() as u64)
        .filter(|&k| model[k as usize].1 == "TagB")
        .collect();
    let got: Vec<u64> = r.iter().map(|v| v.queue_offset()).collect();
    assert_eq!(got, want);
}

/// A read bounded by bytes stops before the record that would pass the bound and says so; the
/// next read starts at that record. A first record over the bound is returned alone when the
/// limit allows it (`oversized_first`), and otherwise nothing is, without skipping it.
#[test]
fn reads_bounded_by_bytes_stop_before_the_record_that_would_pass_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), small_config()).unwrap();
    for i in 0..6u8 {
        store.put(&MessageRef::new("Sized", 0, &[i; 1000])).unwrap();
    }
    settle(&store);
    let all = TagFilter::all();
    let whole = store.get_messages("Sized", 0, 0, 6, &all).unwrap();
    assert_eq!(whole.records.len(), 6);
    assert!(!whole.byte_limited);
    let record = whole.records[0].1 as usize;

    let limit = |bytes, oversized_first| ReadLimit {
        messages: 6,
        bytes,
        oversized_first,
    };
    // Room for two and a half records: two come back, the third is next.
    let r = store
        .get_messages_within("Sized", 0, 0, limit(record * 5 / 2, false), &all)
        .unwrap();
    assert_eq!(r.records.len(), 2);
    assert!(r.buffer.len() <= record * 5 / 2);
    assert!(r.byte_limited);
    assert_eq!(r.next_offset, 2);
    let bodies: Vec<u8> = r.iter().map(|v| v.body()[0]).collect();
    assert_eq!(bodies, [0, 1]);
    // Exactly two records' worth is room for exactly two.
    let r = store
        .get_messages_within("Sized", 0, 2, limit(record * 2, false), &all)
        .unwrap();
    assert_eq!((r.records.len(), r.next_offset), (2, 4));
    // A bound below one record: one record with oversized_first, none (not skipped) without.
    let r = store
        .get_messages_within("Sized", 0, 4, limit(10, true), &all)
        .unwrap();
    assert_eq!(
        (r.records.len(), r.next_offset, r.byte_limited),
        (1, 5, true)
    );
    let r = store
        .get_messages_within("Sized", 0, 4, limit(10, false), &all)
        .unwrap();
    assert!(r.records.is_empty() && r.byte_limited);
    assert_eq!((r.status, r.next_offset), (GetStatus::OffsetFoundNull, 4));
    // The count bound still applies under a large byte bound.
    let r = store
        .get_messages_within(
            "Sized",
            0,
            0,
            ReadLimit {
                messages: 3,
                ..limit(1 << 30, false)
            },
            &all,
        )
        .unwrap();
    assert_eq!((r.records.len(), r.byte_limited), (3, false));
}
