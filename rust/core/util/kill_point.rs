//! Kill points: named places inside the store's critical steps where a test build can end the
//! process at once, so a crash test lands exactly inside an append, a roll, a checkpoint write
//! or a file replace instead of wherever a timer happens to fire.
//!
//! `kill_point!("name")` expands to nothing without the `fault-injection` cargo feature. With
//! it, the environment variable [`ENV`] (`MQLITE_KILL_AT=<name>:<n>`) makes the `n`-th hit
//! (1-based, counted from process start) of that point call `std::process::abort()`: no
//! destructor, no flush, no close, so the files are left as a `kill -9` leaves them (every
//! write already made through a shared mapping or `write` is in the page cache). Every hit of
//! every point is counted in the process, whether or not it is the one armed ([`hits`]).
//!
//! Each name used must be one of [`POINTS`]: the macro checks it at compile time, and
//! tests/kill_points.rs asserts that its crash loop aborts at every one of them.

/// Environment variable arming one kill point: `<name>:<n>`, `n >= 1`.
pub const ENV: &str = "MQLITE_KILL_AT";

/// Every kill point, with the state the files are in when it fires.
pub const POINTS: &[&str] = &[
    // A record (or a batch's records so far) written into the commit log except the last
    // one's whole-record CRC; nothing of it published.
    "append.unsealed",
    // Records whole in the commit log, not yet published (max offset not advanced, not
    // acknowledged).
    "append.unpublished",
    // A new segment file (commit log or consume queue) created with length 0, not yet
    // preallocated.
    "mapped_file.empty",
    // A new consume-queue file given its full length as a hole (every byte reads as zero),
    // not yet reserved.
    "mapped_file.sparse",
    // Commit-log roll: the full file ended (END_OF_FILE blank), the next file created and
    // synced, nothing written to it yet.
    "commit_log.rolled",
    // Consume-queue roll: the next unit file in place, no unit written to it yet.
    "consume_queue.rolled",
    // Checkpoint write: slot B written and synced, slot A still holds the previous values.
    "checkpoint.between_slots",
    // Store meta file: the temp file written and synced, not yet renamed over `meta`.
    "store_meta.before_rename",
    // Topic config: the temp file written and synced, before the `.bak` copy and the rename
    // over `topics.json`.
    "topics.before_rename",
    // Topic journal: a change's record written to `topics.journal`, not yet synced (the call
    // making the change has not returned).
    "topics.journal_unsynced",
    // Topic journal compaction: `topics.json` holds every record of the journal, which is not
    // yet replaced with an empty one.
    "topics.journal_before_reset",
    // Clean close: the consume queues' clean-shutdown record (`queues.clean`) written to its
    // temp file and synced, not yet renamed over the record; the abort marker still present.
    "queues_clean.before_rename",
    // Clean close: the clean-shutdown record in place and durable, the abort marker not yet
    // removed.
    "store.clean_recorded",
    // Timer engine, a delay level: a due delayed message re-put to its real topic (carrying
    // its MQLITE_TIMER_ID), its level's offset not yet advanced nor written to
    // `delayOffset.json`.
    "schedule.delivered_unrecorded",
    // Timer engine: a due timer re-put to its real topic (carrying its MQLITE_TIMER_ID), the
    // timer progress not yet recording it.
    "timer.delivered_unrecorded",
    // Timer cancel: the cancel record appended (the put returned) under the timer gate, the
    // answer not yet returned and the gate still held.
    "timer.cancel_appended",
    // Timer reschedule: the reschedule record appended under the timer gate, the answer not
    // yet returned and the gate still held.
    "timer.reschedule_appended",
    // Timer engine: `timerProgress.json` written (both sources' progress), its mirror
    // `delayOffset.json` not yet.
    "timer.progress_written",
    // Transaction commit or rollback: its op record appended under the transactions' gate
    // (the decision is in the log), no copy of a committed half made yet, the call not
    // returned.
    "txn.decided",
    // Transaction copies: one decided half's copy appended, the next ones not yet (or the
    // call not returned after the last).
    "txn.copy_made",
    // Transaction check: the check record appended (the claim counted), the claim not yet
    // returned to the checker that asks the listener.
    "txn.check_claimed",
    // Transaction snapshot: `transactions.json` written to its temp file and synced, not yet
    // renamed over the previous one.
    "txn.snapshot_before_rename",
];

/// The index of `name` in [`POINTS`]; a name not declared there fails to compile (the macro
/// evaluates this in a const).
pub const fn index_of(name: &str) -> usize {
    let mut i = 0;
    while i < POINTS.len() {
        if str_eq(POINTS[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("kill point not declared in util::kill_point::POINTS")
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Marks a kill point (see the module documentation). Nothing without `fault-injection`.
macro_rules! kill_point {
    ($name:literal) => {{
        #[cfg(feature = "fault-injection")]
        {
            const INDEX: usize = $crate::util::kill_point::index_of($name);
            $crate::util::kill_point::hit(INDEX);
        }
    }};
}
pub(crate) use kill_point;

#[cfg(feature = "fault-injection")]
pub use armed::{hit, hits};

#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    use super::{ENV, POINTS};

    /// Hits so far, by index in `POINTS`.
    static HITS: [AtomicU64; POINTS.len()] = [const { AtomicU64::new(0) }; POINTS.len()];
    /// The armed point and hit number, read from the environment once.
    static ARMED: OnceLock<Option<(usize, u64)>> = OnceLock::new();

    /// Counts a hit of point `index` and aborts the process when it is the armed one.
    pub fn hit(index: usize) {
        let Some(counter) = HITS.get(index) else {
            return;
        };
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        if *ARMED.get_or_init(armed) == Some((index, n)) {
            eprintln!("mqlite: kill point {}:{n} reached, aborting", POINTS[index]);
            std::process::abort();
        }
    }

    /// How many times `name` was hit in this process (0 for an undeclared name).
    pub fn hits(name: &str) -> u64 {
        POINTS
            .iter()
            .position(|p| *p == name)
            .and_then(|i| HITS.get(i))
            .map_or(0, |h| h.load(Ordering::SeqCst))
    }

    /// Parses `ENV`. A malformed value ends the process with exit code 2 and the reason: a
    /// typo must not pass for "the point was never reached".
    fn armed() -> Option<(usize, u64)> {
        let value = std::env::var(ENV).ok()?;
        let parsed = value.rsplit_once(':').and_then(|(name, n)| {
            let index = POINTS.iter().position(|p| *p == name)?;
            let n = n.parse::<u64>().ok().filter(|&n| n >= 1)?;
            Some((index, n))
        });
        if parsed.is_none() {
            eprintln!("mqlite: {ENV}={value:?} is not <point>:<n> with n >= 1 and a point among {POINTS:?}");
            std::process::exit(2);
        }
        parsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declared_point_has_a_distinct_index() {
        for (i, p) in POINTS.iter().enumerate() {
            assert_eq!(index_of(p), i);
        }
    }
}
