//! What the commit log says about timers beyond a progress: a walk of the log from a
//! progress's `commitLogOffset` that applies every delivered copy (`MQLITE_TIMER_ID`) and
//! every cancel and reschedule record it meets, for both sources (the timer log and the delay
//! levels). The timer service runs it when it begins hosting; a cancel, a reschedule and a
//! listing run it under the gate (control.rs), which is how a process that does not host
//! learns what the host did since it last wrote its progress.
//!
//! Invariants
//! - A delivered copy, a cancel and a reschedule of a timer are all appended after the timer's
//!   record, and (under the gate) a cancel or reschedule only while the timer is pending; so
//!   applying them in log order to a progress that was true at `from` gives the truth at `end`.
//! - Applying is idempotent: a timer already done ignores every later change.

use super::progress::Progress;
use crate::error::Result;
use crate::message::tags::SCHEDULE_TOPIC;
use crate::message::timer::{self, TIMER_TOPIC};
use crate::message::timer_id::{Change, TimerId, CANCEL_QUEUE};
use crate::message::RecordView;
use crate::store::Store;

/// Shows this process every record the store's processes published, dispatches them, and
/// returns the log's end then: every record below it has its consume-queue units.
///
/// # Errors
/// The shared mapping or dispatch failing (nothing can be known then).
pub(super) fn caught_up(store: &Store) -> Result<u64> {
    let log = &store.inner.commit_log;
    log.follow_shared()?;
    let end = log.max_offset();
    if let Some(r) = &store.inner.reput {
        if r.dispatched_offset() < end {
            r.dispatch_all()?;
        }
    }
    Ok(end)
}

/// Applies `change` to `progress`; true when it changed it.
pub(super) fn apply(progress: &mut Progress, change: Change) -> bool {
    let id = change.target();
    if progress.is_done(id) {
        return false;
    }
    match change {
        Change::Cancel(_) => progress.cancelled(id),
        Change::Reschedule(_, due) => progress.reschedule(id, due),
    }
    true
}

/// Applies a delivered copy of timer `id`; true when it changed `progress`.
pub(super) fn delivered(progress: &mut Progress, id: TimerId) -> bool {
    if progress.is_done(id) {
        return false;
    }
    progress.delivered(id);
    true
}

/// Walks the log in `[from, end)`, applying to `progress` each timer's delivered copy and each
/// cancel and reschedule record; true when anything changed.
pub(super) fn scan_log(store: &Store, from: u64, end: u64, progress: &mut Progress) -> bool {
    let log = &store.inner.commit_log;
    let mut off = from.max(log.min_offset());
    let mut changed = false;
    while off < end {
        let read = log.read_record(off, |v: &RecordView<'_>| {
            // A stored timer or delayed record may carry a copied id: only a delivered copy
            // (in its real topic) counts.
            let stored = matches!(v.topic(), TIMER_TOPIC | SCHEDULE_TOPIC);
            let delivered = v
                .property(timer::TIMER_ID)
                .filter(|_| !stored)
                .and_then(TimerId::parse);
            let change = (v.topic() == TIMER_TOPIC && v.queue_id() == CANCEL_QUEUE)
                .then(|| Change::of(v.properties()))
                .flatten();
            (v.bytes().len() as u64, delivered, change)
        });
        match read {
            Ok((size, id, change)) => {
                if let Some(id) = id {
                    changed |= delivered(progress, id);
                }
                if let Some(c) = change {
                    changed |= apply(progress, c);
                }
                off += size.max(1);
            }
            // The blank at the end of a file.
            Err(_) => off = log.roll_next_file(off),
        }
    }
    changed
}
