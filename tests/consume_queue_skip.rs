//! `LogicalQueue::skip_below` of a consume queue: the minimum moves to the first unit whose
//! record is at or past a commit-log offset (a topic created again after a delete), across
//! files, and in a queue whose first unit came after a gap (filled with placeholders).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mqlite::consume_queue::unit::CqUnit;
use mqlite::consume_queue::ConsumeQueue;
use mqlite::dispatch::queue_index::LogicalQueue;

const UNIT: u64 = 20;

/// A queue in memory of 8-unit files whose units from queue offset `first` point at commit-log
/// offsets 100, 200, ... (`count` of them); the offsets before `first` are placeholders.
fn queue(first: u64, count: u64) -> ConsumeQueue {
    let q = ConsumeQueue::new("Skip", 0, None, 8 * UNIT, 0o600, false);
    q.recover(true).unwrap();
    for i in 0..count {
        let unit = CqUnit {
            offset: (i + 1) * 100,
            size: 100,
            tags_code: 0,
        };
        assert!(q.put(first + i, unit).unwrap());
    }
    q
}

#[test]
fn the_minimum_moves_to_the_first_record_at_or_past_the_offset_across_files() {
    let q = queue(0, 30);
    // Records 100..=3000; the first at or past 2050 is 2100, the 21st (queue offset 20).
    q.skip_below(2050);
    assert_eq!((q.min_offset(), q.max_offset()), (20, 30));
    // Once skipped, a lower offset changes nothing, and the same one neither.
    q.skip_below(1000);
    q.skip_below(2050);
    assert_eq!(q.min_offset(), 20);
}

#[test]
fn every_record_below_empties_the_queue_and_none_below_keeps_it() {
    let q = queue(0, 12);
    q.skip_below(50);
    assert_eq!(q.min_offset(), 0);
    q.skip_below(10_000);
    assert_eq!((q.min_offset(), q.max_offset()), (12, 12));
}

#[test]
fn a_queue_starting_after_a_gap_skips_from_its_first_record() {
    // Queue offsets 0..5 are placeholders, then records 100..=1000 at 5..15.
    let q = queue(5, 10);
    let start = q.min_offset();
    assert!(start <= 5);
    q.skip_below(50);
    assert_eq!(q.min_offset(), start);
    q.skip_below(450);
    assert_eq!(q.min_offset(), 9);
    let q = queue(5, 10);
    q.skip_below(100_000);
    assert_eq!(q.min_offset(), 15);
}
