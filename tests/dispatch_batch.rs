//! `Dispatcher::dispatch_batch` of the consume queues: runs of records of one queue are written
//! with one lock and one publish, and the result must be exactly what record-by-record
//! dispatch gives: interleaved queues and topics, a record that is not dispatched (a prepared
//! transaction), unit-file rolls inside a run, a queue's first unit past a gap, and a run
//! dispatched again after a crash (idempotent).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mqlite::consume_queue::store::ConsumeQueueStore;
use mqlite::consume_queue::unit::CqUnit;
use mqlite::dispatch::{DispatchRequest, Dispatcher};
use mqlite::message::sysflag;

/// Six units per consume-queue file: the runs below cross several rolls.
const CQ_FILE: u64 = 6 * 20;

struct Log {
    reqs: Vec<(String, u32, u64, i32)>,
}

impl Log {
    fn requests(&self) -> Vec<DispatchRequest<'_>> {
        let mut phys = 0u64;
        self.reqs
            .iter()
            .map(|(topic, queue_id, queue_offset, sysflag)| {
                let size = 100 + (*queue_offset as u32 % 7);
                let r = DispatchRequest {
                    topic,
                    queue_id: *queue_id,
                    commit_log_offset: phys,
                    size,
                    tags_code: (*queue_offset as i64) * 31 + i64::from(*queue_id),
                    store_timestamp: 1,
                    queue_offset: *queue_offset,
                    sysflag: *sysflag,
                    properties: b"",
                    prepared_transaction_offset: 0,
                };
                phys += u64::from(size);
                r
            })
            .collect()
    }
}

fn push(log: &mut Log, topic: &str, queue_id: u32, offsets: std::ops::Range<u64>, flag: i32) {
    for o in offsets {
        log.reqs.push((topic.to_owned(), queue_id, o, flag));
    }
}

fn units(cqs: &ConsumeQueueStore, topic: &str, queue_id: u32) -> Vec<(u64, CqUnit)> {
    let Some(cq) = cqs.get(topic, queue_id) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    cq.units(cq.min_offset(), 1000, &mut out);
    out
}

fn store() -> ConsumeQueueStore {
    ConsumeQueueStore::new(None, CQ_FILE, 0o644, 0o755, false)
}

#[test]
fn batch_dispatch_equals_record_by_record_dispatch() {
    let mut log = Log { reqs: Vec::new() };
    push(&mut log, "T", 0, 0..5, sysflag::TRANSACTION_NOT);
    // Not dispatched, though its queue offset would continue the run before it.
    push(&mut log, "T", 0, 5..6, sysflag::TRANSACTION_PREPARED);
    push(&mut log, "T", 1, 0..3, sysflag::TRANSACTION_NOT);
    push(&mut log, "T", 0, 5..19, sysflag::TRANSACTION_NOT);
    push(&mut log, "U", 0, 0..2, sysflag::TRANSACTION_NOT);
    // A queue whose first unit is past a gap, then a gap inside it (placeholders).
    push(&mut log, "T", 2, 9..13, sysflag::TRANSACTION_NOT);
    push(&mut log, "T", 2, 15..17, sysflag::TRANSACTION_NOT);
    push(&mut log, "T", 1, 3..4, sysflag::TRANSACTION_COMMIT);
    let reqs = log.requests();

    let batched = store();
    // Dispatched as three batches, split inside runs.
    batched.dispatch_batch(&reqs[..3]).unwrap();
    batched.dispatch_batch(&reqs[3..20]).unwrap();
    batched.dispatch_batch(&reqs[20..]).unwrap();
    assert_eq!(reqs.len(), 32);
    let single = store();
    for r in &reqs {
        single.dispatch(r).unwrap();
    }

    for (topic, queue_id) in [("T", 0), ("T", 1), ("T", 2), ("U", 0)] {
        let want: Vec<(u64, CqUnit)> = reqs
            .iter()
            .filter(|r| {
                r.topic == topic && r.queue_id == queue_id && sysflag::is_dispatched(r.sysflag)
            })
            .map(|r| {
                let unit = CqUnit {
                    offset: r.commit_log_offset,
                    size: r.size,
                    tags_code: r.tags_code,
                };
                (r.queue_offset, unit)
            })
            .collect();
        assert!(!want.is_empty());
        let real = |u: &[(u64, CqUnit)]| -> Vec<(u64, CqUnit)> {
            u.iter()
                .filter(|(_, c)| !c.is_placeholder())
                .copied()
                .collect()
        };
        let got = units(&batched, topic, queue_id);
        assert_eq!(real(&got), want, "{topic}:{queue_id} batched");
        assert_eq!(got, units(&single, topic, queue_id), "{topic}:{queue_id}");
        let cq = batched.get(topic, queue_id).unwrap();
        assert_eq!(cq.max_offset(), want.last().unwrap().0 + 1);
        let last = reqs
            .iter()
            .filter(|r| r.topic == topic && r.queue_id == queue_id)
            .map(|r| r.commit_log_offset + u64::from(r.size))
            .max()
            .unwrap();
        assert_eq!(cq.max_physical_offset(), last, "{topic}:{queue_id}");
    }

    // The whole log again (a restart re-dispatching from an old checkpoint): nothing changes.
    let before: Vec<_> = [("T", 0), ("T", 1), ("T", 2), ("U", 0)]
        .iter()
        .map(|(t, q)| units(&batched, t, *q))
        .collect();
    batched.dispatch_batch(&reqs).unwrap();
    let after: Vec<_> = [("T", 0), ("T", 1), ("T", 2), ("U", 0)]
        .iter()
        .map(|(t, q)| units(&batched, t, *q))
        .collect();
    assert_eq!(before, after);
}
