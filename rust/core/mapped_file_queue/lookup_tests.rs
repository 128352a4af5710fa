//! The list's order and lookups by offset (mod.rs's first invariant) when the list is not one
//! contiguous run: a shared queue's roll to a file before the last listed one.
#![allow(clippy::unwrap_used)]

use super::{Backing, MappedFileQueue};

const SIZE: u64 = 4096;

fn starts(q: &MappedFileQueue) -> Vec<u64> {
    q.read_files().iter().map(|s| s.start).collect()
}

/// The start of the file `find` returns for `offset`, if any.
fn found(q: &MappedFileQueue, offset: u64) -> Option<u64> {
    q.find(offset).map(|f| f.from_offset())
}

#[test]
fn slot_at_returns_only_a_file_holding_the_offset_in_a_list_with_a_gap() {
    let q = MappedFileQueue::new(Backing::Memory, SIZE, true);
    drop(q.roll(0).unwrap());
    drop(q.roll(2 * SIZE).unwrap());
    assert_eq!(starts(&q), [0, 2 * SIZE]);
    assert_eq!(found(&q, SIZE - 1), Some(0));
    // No listed file holds [S, 2S): the file after the gap does not stand for it.
    assert_eq!(found(&q, SIZE), None);
    assert_eq!(found(&q, 2 * SIZE - 1), None);
    assert_eq!(found(&q, 2 * SIZE), Some(2 * SIZE));
    assert_eq!(found(&q, 3 * SIZE - 1), Some(2 * SIZE));
    assert_eq!(found(&q, 3 * SIZE), None);
}

#[test]
fn a_roll_before_the_last_listed_file_goes_in_its_place_once() {
    let q = MappedFileQueue::new(Backing::Memory, SIZE, true);
    drop(q.roll(0).unwrap());
    drop(q.roll(2 * SIZE).unwrap());
    let mut w = q.roll(SIZE).unwrap();
    w.append_with(8, |b| b.fill(7)).unwrap();
    w.publish();
    drop(w);
    assert_eq!(starts(&q), [0, SIZE, 2 * SIZE]);
    for k in 0..3 {
        assert_eq!(found(&q, k * SIZE), Some(k * SIZE));
        assert_eq!(found(&q, k * SIZE + SIZE - 1), Some(k * SIZE));
    }
    // Rolling to a listed start takes its slot: no second slot of one start.
    drop(q.roll(SIZE).unwrap());
    drop(q.roll(2 * SIZE).unwrap());
    assert_eq!(starts(&q), [0, SIZE, 2 * SIZE]);
    assert_eq!((q.min_offset(), q.len()), (0, 3));
}
