//! The append protocol over the shared write state, and the repair after a holder died: pure
//! functions over [`State`] (the mapping's words in production, loom atomics in the model
//! below) and the log callbacks of [`Repair`], so that loom checks the very code that runs.
//!
//! One append, under the append lock (after any repair):
//! 1. [`reserve`]: the position is `log_end`, the queue offsets start at the slot's next one;
//!    the slot and its previous value are recorded, then `intent_end` (release).
//! 2. The caller writes `[start, end)` of the log (padding and records).
//! 3. [`publish`]: the slot's new next offset ([`commit_offset`]), then `log_end = end`
//!    (release, [`commit_end`]), then `intent_end = 0` ([`clear_intent`]).
//!
//! Invariants: bytes below `log_end` are complete records and never change; a queue's offsets
//! below its slot's value are in records below `log_end`, except while an append is between
//! `commit_offset` and `commit_end`, which the recorded previous value undoes; `intent_end` is
//! 0, equal to `log_end` (published, not yet cleared), or above it (being written).
//!
//! Repair, by the next holder after a death, before anything else: if `intent_end` is above
//! `log_end` the dead append never published: its bytes `[log_end, intent_end)` are zeroed
//! and its slot gets its previous value back. Then the intent is cleared, and the
//! consume-queue units of `[dispatched, log_end)` are written again (the dead process may have
//! published and died before writing its unit; a unit's place follows from its record, so
//! writing it twice writes the same bytes). Each step can be repeated: a repairer that dies
//! leaves the lock reporting a dead owner again, and the next one starts over.

use crate::error::Result;
use crate::util::loom_sync::atomic::Ordering;

/// A queue slot of the offset table (its index), as the mapping handed it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueSlot(pub(crate) u32);

/// The shared write state the protocol reads and writes. Loads of `log_end` and
/// `intent_end` acquire and their stores release; the others are only touched under the lock.
pub trait State {
    /// A word, loaded with `order`.
    fn load(&self, word: Word, order: Ordering) -> u64;
    /// A word, stored with `order`.
    fn store(&self, word: Word, value: u64, order: Ordering);
    /// The next offset of a queue slot.
    fn next_offset(&self, slot: QueueSlot) -> u64;
    /// Sets the next offset of a queue slot.
    fn set_next_offset(&self, slot: QueueSlot, next: u64);
}

/// The words of the shared write state the protocol uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// End of the last published record.
    LogEnd,
    /// End of the write in progress, 0 when none.
    IntentEnd,
    /// Slot index + 1 of the write in progress, 0 when none.
    IntentSlot,
    /// That slot's value before the write in progress.
    IntentPrev,
    /// Everything below it has its consume-queue units.
    Dispatched,
}

/// What the repair does to the log.
pub trait Repair {
    /// Zeroes the log's bytes `[from, to)` (the dead append's, possibly across a roll).
    fn zero(&mut self, from: u64, to: u64) -> Result<()>;
    /// Writes the consume-queue units of the records in `[from, to)`.
    fn redispatch(&mut self, from: u64, to: u64) -> Result<()>;
}

/// A reservation of the log, from [`reserve`] to [`publish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// Where the write starts: the log end when reserved.
    pub start: u64,
    /// Where it ends.
    pub end: u64,
    /// The first queue offset of its records (0 without a slot).
    pub queue_offset: u64,
    /// The slot it advances, and by how many offsets.
    pub slot: Option<(QueueSlot, u64)>,
}

/// Step 1: reserves `len` bytes at the log end and `count` offsets of `slot`'s queue.
#[inline(always)]
pub fn reserve(state: &impl State, slot: Option<QueueSlot>, len: u64, count: u64) -> Reserved {
    let start = state.load(Word::LogEnd, Ordering::Acquire);
    let (queue_offset, slot_word) = match slot {
        Some(s) => (state.next_offset(s), u64::from(s.0) + 1),
        None => (0, 0),
    };
    state.store(Word::IntentSlot, slot_word, Ordering::Relaxed);
    state.store(Word::IntentPrev, queue_offset, Ordering::Relaxed);
    // Release: a repairer that sees this end sees the slot and value recorded above.
    state.store(Word::IntentEnd, start + len, Ordering::Release);
    Reserved {
        start,
        end: start + len,
        queue_offset,
        slot: slot.map(|s| (s, count)),
    }
}

/// Step 3a: the slot's new next offset (undone by a repair while `log_end` is not `r.end`).
#[inline(always)]
pub fn commit_offset(state: &impl State, r: &Reserved) {
    if let Some((slot, count)) = r.slot {
        state.set_next_offset(slot, r.queue_offset + count);
    }
}

/// Step 3b: publishes the bytes `[r.start, r.end)`: from here the append happened.
#[inline(always)]
pub fn commit_end(state: &impl State, r: &Reserved) {
    state.store(Word::LogEnd, r.end, Ordering::Release);
}

/// Step 3c: no write in progress.
#[inline(always)]
pub fn clear_intent(state: &impl State) {
    state.store(Word::IntentEnd, 0, Ordering::Release);
}

/// Step 3, all of it, once every byte of `[r.start, r.end)` is written.
#[inline(always)]
pub fn publish(state: &impl State, r: &Reserved) {
    commit_offset(state, r);
    commit_end(state, r);
    clear_intent(state);
}

/// What a repair found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repaired {
    /// The dead append's bytes, zeroed.
    pub zeroed: Option<(u64, u64)>,
    /// The slot given its previous next offset back.
    pub restored: Option<QueueSlot>,
    /// The range whose units were written again.
    pub redispatched: (u64, u64),
}

/// The repair after a holder died (module doc), by the next holder, before its own append.
pub fn repair(state: &impl State, log: &mut impl Repair) -> Result<Repaired> {
    let log_end = state.load(Word::LogEnd, Ordering::Acquire);
    let intent_end = state.load(Word::IntentEnd, Ordering::Acquire);
    let mut done = Repaired {
        zeroed: None,
        restored: None,
        redispatched: (log_end, log_end),
    };
    if intent_end > log_end {
        log.zero(log_end, intent_end)?;
        done.zeroed = Some((log_end, intent_end));
        let slot = state.load(Word::IntentSlot, Ordering::Relaxed);
        if let Some(index) = slot.checked_sub(1).and_then(|i| u32::try_from(i).ok()) {
            let prev = state.load(Word::IntentPrev, Ordering::Relaxed);
            state.set_next_offset(QueueSlot(index), prev);
            done.restored = Some(QueueSlot(index));
        }
    }
    clear_intent(state);
    let dispatched = state.load(Word::Dispatched, Ordering::Acquire).min(log_end);
    log.redispatch(dispatched, log_end)?;
    done.redispatched = (dispatched, log_end);
    advance_dispatched(state, log_end);
    Ok(done)
}

/// A live holder gives up its own append, whose write failed before it published: the
/// queue's offset is restored and the intent cleared whatever happens to the bytes, so queue
/// offsets stay contiguous; then the unpublished bytes are zeroed. A zeroing that fails
/// (the same full disk or file-size limit that failed the write) is returned, and harmless:
/// the bytes lie past `log_end`, where no reader looks and the next append writes from.
pub fn abandon(state: &impl State, log: &mut impl Repair) -> Result<()> {
    let log_end = state.load(Word::LogEnd, Ordering::Acquire);
    let intent_end = state.load(Word::IntentEnd, Ordering::Acquire);
    if intent_end <= log_end {
        clear_intent(state);
        return Ok(());
    }
    let slot = state.load(Word::IntentSlot, Ordering::Relaxed);
    if let Some(index) = slot.checked_sub(1).and_then(|i| u32::try_from(i).ok()) {
        let prev = state.load(Word::IntentPrev, Ordering::Relaxed);
        state.set_next_offset(QueueSlot(index), prev);
    }
    let zeroed = log.zero(log_end, intent_end);
    clear_intent(state);
    zeroed
}

/// Raises `dispatched` to `to` unless it is already past it.
pub fn advance_dispatched(state: &impl State, to: u64) {
    // Only holders write it today; a maximum keeps it monotonic whoever writes.
    if state.load(Word::Dispatched, Ordering::Acquire) < to {
        state.store(Word::Dispatched, to, Ordering::Release);
    }
}

/// Loom model of the protocol (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom_`):
/// a holder dies at each step of an append, a second holder repairs and appends, a reader
/// follows `log_end` meanwhile.
#[cfg(test)]
#[cfg(loom)]
mod loom_model {
    use loom::sync::atomic::AtomicU64;
    use loom::sync::{Arc, Mutex};

    use super::*;

    /// Log cells (one per "byte"); a record's cells are its id, never 0.
    const CELLS: usize = 6;

    struct Model {
        words: [AtomicU64; 5],
        next: AtomicU64,
        log: [AtomicU64; CELLS],
        /// Units written: queue offset -> record id (0: none).
        units: [AtomicU64; 3],
        /// The robust mutex: `true` while its last holder died holding it.
        lock: Mutex<bool>,
    }

    impl Model {
        fn new() -> Self {
            Model {
                words: Default::default(),
                next: AtomicU64::new(0),
                log: Default::default(),
                units: Default::default(),
                lock: Mutex::new(false),
            }
        }
    }

    fn index(w: Word) -> usize {
        match w {
            Word::LogEnd => 0,
            Word::IntentEnd => 1,
            Word::IntentSlot => 2,
            Word::IntentPrev => 3,
            Word::Dispatched => 4,
        }
    }

    impl State for Model {
        fn load(&self, word: Word, order: Ordering) -> u64 {
            self.words[index(word)].load(order)
        }
        fn store(&self, word: Word, value: u64, order: Ordering) {
            self.words[index(word)].store(value, order)
        }
        fn next_offset(&self, _slot: QueueSlot) -> u64 {
            self.next.load(Ordering::Relaxed)
        }
        fn set_next_offset(&self, _slot: QueueSlot, next: u64) {
            self.next.store(next, Ordering::Relaxed)
        }
    }

    /// Dispatch of the model's log: a record is 2 cells; its unit is its id at its offset.
    struct Log<'a>(&'a Model);

    impl Repair for Log<'_> {
        fn zero(&mut self, from: u64, to: u64) -> Result<()> {
            for c in from..to {
                self.0.log[c as usize].store(0, Ordering::Relaxed);
            }
            Ok(())
        }
        fn redispatch(&mut self, from: u64, to: u64) -> Result<()> {
            let mut at = from;
            while at < to {
                let id = self.0.log[at as usize].load(Ordering::Relaxed);
                let qo = self.0.log[at as usize + 1].load(Ordering::Relaxed) - 10;
                self.0.units[qo as usize].store(id, Ordering::Relaxed);
                at += 2;
            }
            Ok(())
        }
    }

    const SLOT: QueueSlot = QueueSlot(0);

    /// One append of record `id` (2 cells: the id, then 10 + its queue offset), stopping
    /// (the holder dies) after `die_after` steps; returns whether it published. A survivor
    /// writes its unit after unlocking, as the write path will.
    fn append(m: &Model, id: u64, die_after: usize) -> bool {
        let mut held = m.lock.lock().unwrap();
        if *held {
            repair(m, &mut Log(m)).unwrap();
            *held = false;
        }
        let steps = 6;
        let mut r = None;
        for step in 0..=steps {
            if step == die_after {
                // The kernel releases a dead holder's robust mutex marked owner-died. It
                // published when it got past `commit_end` (step 4).
                *held = true;
                return step > 4;
            }
            match step {
                0 => r = Some(reserve(m, Some(SLOT), 2, 1)),
                1 => m.log[r.unwrap().start as usize].store(id, Ordering::Relaxed),
                2 => {
                    let r = r.unwrap();
                    m.log[r.start as usize + 1].store(10 + r.queue_offset, Ordering::Relaxed)
                }
                3 => commit_offset(m, &r.unwrap()),
                4 => commit_end(m, &r.unwrap()),
                5 => clear_intent(m),
                _ => {}
            }
        }
        drop(held);
        let r = r.unwrap();
        m.units[r.queue_offset as usize].store(id, Ordering::Relaxed);
        true
    }

    fn check(die_after: usize) {
        crate::util::loom_sync::model(Some(3), move || {
            let m = Arc::new(Model::new());
            let dying = {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || append(&m, 1, die_after))
            };
            let reader = {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || {
                    // Every cell below the published end belongs to a complete record.
                    let end = m.load(Word::LogEnd, Ordering::Acquire);
                    for c in 0..end as usize {
                        assert_ne!(
                            m.log[c].load(Ordering::Relaxed),
                            0,
                            "torn cell {c} below {end}"
                        );
                    }
                })
            };
            let survivor_published = append(&m, 2, usize::MAX);
            let dead_published = dying.join().unwrap();
            reader.join().unwrap();
            // A last holder repairs whatever a death after the survivor left.
            {
                let mut held = m.lock.lock().unwrap();
                if *held {
                    repair(&*m, &mut Log(&m)).unwrap();
                    *held = false;
                }
            }
            assert!(survivor_published);
            let published = 1 + u64::from(dead_published);
            let end = m.load(Word::LogEnd, Ordering::Relaxed);
            assert_eq!(end, 2 * published, "log end");
            assert_eq!(m.next.load(Ordering::Relaxed), published, "queue offsets");
            assert_eq!(m.load(Word::IntentEnd, Ordering::Relaxed), 0);
            for c in end as usize..CELLS {
                assert_eq!(m.log[c].load(Ordering::Relaxed), 0, "cell {c} past the end");
            }
            // Offsets are contiguous, and each published record's unit is written.
            for qo in 0..published {
                let id = m.log[2 * qo as usize].load(Ordering::Relaxed);
                assert_eq!(m.log[2 * qo as usize + 1].load(Ordering::Relaxed), 10 + qo);
                assert_eq!(
                    m.units[qo as usize].load(Ordering::Relaxed),
                    id,
                    "unit {qo}"
                );
            }
        });
    }

    #[test]
    fn loom_a_holder_dying_at_any_step_is_repaired() {
        for die_after in 0..=6 {
            check(die_after);
        }
    }
}
