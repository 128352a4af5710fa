//! The commit log's appends as one of several writer processes of a store
//! (`StoreConfig::shared_writers`, docs/design-many-writers.md): each append takes the append
//! lock of the shared writer mapping (`shared::WriterShm`, FORMAT.md §14) inside this
//! process's own appender lock, and runs the intent/publish protocol (shared/protocol.rs)
//! around the single writer's append code (append.rs).
//!
//! Invariants
//! - Under the append lock the log end and each queue's next offset are the mapping's: before
//!   it writes, a process moves its writer to the mapping's log end ([`CommitLog::follow_to`]),
//!   mapping the files other processes created, and takes the queue's next offset from the
//!   mapping's table, at the queue's slot. The slot is cached in this process (the
//!   appender's `shared_slots`) for as long as it keeps the mapping: slots never move. This
//!   process's own queue-offset table is not used (append.rs, `assigned`).
//! - The reservation covers every byte the append writes: when it rolls, the END_OF_FILE blank
//!   and the rest of the full file, then the records. It is published only once whole, and an
//!   append that fails after reserving is undone as a repair undoes a dead holder's.
//! - Bytes below the mapping's log end are whole records and never change, so any process
//!   publishes them in its own mappings without the append lock ([`CommitLog::follow_shared`])
//!   for its readers and its dispatch.
//! - Each process dispatches every record of the log into the consume queues (a unit's place
//!   follows from its record's queue offset, so the processes write the same bytes there):
//!   the repair therefore has nothing to dispatch again.
//! - Files are created by a roll under the append lock or ahead of it by any process's
//!   preparer, always published whole under their name by a no-replace link
//!   (mapped_file_queue/mod.rs), so a roll in any process finds a prepared file. Pages ahead of
//!   the writer are faulted in without writing (`WarmAhead::Fault`): a zero fill past one
//!   process's writer could overwrite another's records.
//!
//! Crash behaviour: a process killed holding the append lock leaves at most one unpublished
//! append; the next locker, in any process, zeroes its bytes and gives its queue its offset
//! back ([`LogRepair`]) before its own append. Nothing published is touched, so nothing
//! acknowledged is lost.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::append::{Appended, Appender, Prepared};
use super::CommitLog;
use crate::error::{Error, Result};
use crate::message::{sysflag, MessageRef};
use crate::shared::protocol::{QueueSlot, Repair, Reserved};
use crate::shared::{AppendLock, Writer, WriterShm};

/// What a repair (or an abandoned append) does to the log through this process's mappings.
#[derive(Debug)]
pub struct LogRepair<'a> {
    log: &'a CommitLog,
}

impl<'a> LogRepair<'a> {
    /// The repair of `log`.
    pub fn new(log: &'a CommitLog) -> Self {
        LogRepair { log }
    }
}

impl Repair for LogRepair<'_> {
    fn zero(&mut self, from: u64, to: u64) -> Result<()> {
        let files = self.log.files();
        // The dead append may have rolled into a file this process has not listed yet.
        files.refresh(false)?;
        let reached = files.zero_fill(from, to);
        // Stopping at a file that does not exist is fine: nothing was written there.
        match files.find(reached) {
            Some(f) if reached < to => Err(Error::io(
                "zero an unpublished append",
                f.path(),
                std::io::Error::other(format!("stopped at {reached} of [{from}, {to})")),
            )),
            _ => Ok(()),
        }
    }

    fn redispatch(&mut self, _from: u64, _to: u64) -> Result<()> {
        // Every process dispatches every record below the log end itself (module doc).
        Ok(())
    }
}

impl CommitLog {
    /// Makes this log one of several writer processes' from now on (module doc); set once, at
    /// open, after recovery.
    pub fn set_shared(&self, shm: Arc<WriterShm>) {
        let _ = self.shared.set(shm);
    }

    /// The shared writer mapping, when this log is a shared writer's.
    pub fn shared(&self) -> Option<&Arc<WriterShm>> {
        self.shared.get()
    }

    /// Takes `shm`'s append lock, first repairing what a holder that died left.
    pub fn lock_shared<'s>(&self, shm: &'s WriterShm) -> Result<Writer<'s>> {
        match shm.lock()? {
            AppendLock::Held(w) => Ok(w),
            AppendLock::OwnerDied(dead) => Ok(dead.repair(&mut LogRepair::new(self))?.0),
        }
    }

    /// Moves this process's writer to `end`, the mapping's log end: within its file, or to the
    /// file holding `end` (mapped from the directory when another process created it), the
    /// file it leaves published whole (another process ended it with its blank). With
    /// `create`, a log end at a file boundary with no file there (a new store) creates it.
    pub(crate) fn follow_to(&self, a: &mut Appender, end: u64, create: bool) -> Result<()> {
        if self.follow_in_file(a, end) {
            return Ok(());
        }
        let size = self.files.file_size();
        if let Some(w) = a.writer.as_mut() {
            if end > w.file().from_offset() {
                w.fill_to_end();
            }
        }
        a.writer = None;
        let writer = match self.files.writer_at(end)? {
            Some(w) => Some(w),
            None if create && end.is_multiple_of(size) => Some(self.files.roll(end)?),
            None if create => {
                return Err(Error::Corrupted {
                    path: "commitlog".into(),
                    offset: end,
                    reason: "no commit-log file holds the shared log end".into(),
                    cause: None,
                })
            }
            None => None,
        };
        if let Some(mut w) = writer {
            w.reposition(end - w.file().from_offset());
            a.writer = Some(w);
            self.max.store(end, Ordering::Release);
        }
        Ok(())
    }

    /// `follow_to` when `end` lies in this process's current file (the usual case: no file to
    /// map); false, having changed nothing, otherwise.
    #[inline(always)]
    fn follow_in_file(&self, a: &mut Appender, end: u64) -> bool {
        let Some(w) = a.writer.as_mut() else {
            return false;
        };
        let base = w.file().from_offset();
        if !(base..base + self.files.file_size()).contains(&end) {
            return false;
        }
        if base + w.pos() != end {
            w.reposition(end - base);
        }
        self.max.store(end, Ordering::Release);
        true
    }

    /// The writer mapping's slot of (topic, queue id): this process's cached copy, else the
    /// mapping's (added there when new), then cached. A slot keeps its queue for the mapping's
    /// life (shared/table.rs) and this log keeps one mapping from `set_shared` to its close (a
    /// mapping is rebuilt only by a first opener, before any process shares it), so a cached
    /// slot is never stale: the send path finds it without hashing the topic's name.
    #[inline(always)]
    fn queue_slot(
        a: &mut Appender,
        w: &Writer<'_>,
        topic: &str,
        queue_id: u32,
    ) -> Result<QueueSlot> {
        match a.shared_slots.slot(topic, queue_id) {
            Some(&mut Some(slot)) => Ok(slot),
            Some(cached) => {
                let slot = w.queue_slot(topic, queue_id)?;
                *cached = Some(slot);
                Ok(slot)
            }
            None => w.queue_slot(topic, queue_id),
        }
    }

    /// Shared writers: shows this process's readers and dispatch every record the store's
    /// processes published (module doc). Cheap when nothing is new.
    pub fn follow_shared(&self) -> Result<()> {
        let Some(shm) = self.shared.get() else {
            return Ok(());
        };
        if self.max.load(Ordering::Acquire) == shm.log_end() {
            return Ok(());
        }
        let mut a = self.lock_appender();
        // Read under this process's appender lock: an end read before it may predate an append
        // this process published meanwhile, and following it would move the writer,
        // `max_offset` and the mapping's published end (which dispatch has read past) back.
        let end = shm.log_end();
        self.follow_to(&mut a, end, false)
    }

    /// Under the append lock, the writer at the log end: adopts the mapping's latest store
    /// timestamp and reserves `len` record bytes (and `count` offsets of `m`'s queue when
    /// it is dispatched; the reservation's `queue_offset` is the first).
    #[inline(always)]
    fn reserve_shared(
        &self,
        a: &mut Appender,
        w: &Writer<'_>,
        m: &MessageRef<'_>,
        len: u64,
        count: u64,
    ) -> Result<Reserved> {
        let slot = if sysflag::is_dispatched(m.sysflag) {
            Some(Self::queue_slot(a, w, m.topic, m.queue_id)?)
        } else {
            None
        };
        a.adopt_store_ts(w.last_store_timestamp());
        // A roll writes the blank and fills the rest of the full file first (append.rs).
        let span = match (a.fits(len), a.writer.as_ref()) {
            (None, Some(fw)) => fw.remaining() + len,
            _ => len,
        };
        Ok(w.reserve(slot, span, count))
    }

    /// Publishes `r` once the append ended where it was reserved to (at `end`, its last record
    /// stamped `ts`); otherwise undoes it. Always inlined, as the append it ends (append.rs):
    /// what is left of a send's publication is four stores into the mapping.
    #[inline(always)]
    fn settle(&self, w: &Writer<'_>, r: &Reserved, end: u64, ts: i64) -> Result<()> {
        if end != r.end {
            return self.unsettled(w, r, end);
        }
        w.publish(r);
        w.set_last_store_timestamp(ts);
        self.max.store(end, Ordering::Release);
        Ok(())
    }

    /// `settle` of an append that did not end where it was reserved to: undone.
    #[cold]
    #[inline(never)]
    fn unsettled(&self, w: &Writer<'_>, r: &Reserved, end: u64) -> Result<()> {
        // The mismatch is the error to report; a failed zeroing is harmless (`protocol::abandon`).
        let _ = w.abandon(&mut LogRepair::new(self));
        Err(Error::Corrupted {
            path: "commitlog".into(),
            offset: end,
            reason: format!("an append reserved to {} ended at {end}", r.end),
            cause: None,
        })
    }

    /// `put` of a shared writer (module doc).
    pub(super) fn put_shared(&self, shm: &WriterShm, p: &Prepared<'_>) -> Result<Appended> {
        let mut a = self.lock_appender();
        if let Some(cause) = &a.poisoned {
            return Err(Error::Poisoned {
                cause: Arc::clone(cause),
            });
        }
        let w = self.lock_shared(shm)?;
        self.follow_to(&mut a, w.log_end(), true)?;
        let r = self.reserve_shared(&mut a, &w, &p.msg, p.len as u64, 1)?;
        let out = a.append_one(
            &self.files,
            self.warm.fence(),
            p,
            None,
            Some(r.queue_offset),
        );
        match &out {
            Ok(x) => self.settle(
                &w,
                &r,
                x.physical_offset + u64::from(x.size),
                x.store_timestamp,
            )?,
            // The write's own error is the one to report; a failed zeroing of its unpublished
            // bytes is harmless (`protocol::abandon`).
            Err(_) => {
                let _ = w.abandon(&mut LogRepair::new(self));
            }
        }
        drop(w);
        let out = out?;
        self.after_shared_write(&a, out.physical_offset + u64::from(out.size), true);
        drop(a);
        self.last_store_ts
            .store(out.store_timestamp, Ordering::Relaxed);
        Ok(out)
    }

    /// `try_put` of a shared writer: declines (`Ok(None)`, nothing written) whenever the
    /// append could wait: this process's appender or the append lock held elsewhere, the log
    /// end in another file than this process's writer, a roll, or pages not known to be
    /// faulted in. A dead holder's repair, found on taking the lock, is done here (it cannot be
    /// handed back undone).
    pub(super) fn try_put_shared(
        &self,
        shm: &WriterShm,
        p: &Prepared<'_>,
        now_ms: i64,
    ) -> Result<Option<Appended>> {
        let Some(mut a) = crate::util::sync::try_lock(&self.appender) else {
            return Ok(None);
        };
        if a.poisoned.is_some() {
            return Ok(None);
        }
        let w = match shm.try_lock()? {
            Some(AppendLock::Held(w)) => w,
            Some(AppendLock::OwnerDied(dead)) => dead.repair(&mut LogRepair::new(self))?.0,
            None => return Ok(None),
        };
        if !self.follow_in_file(&mut a, w.log_end()) {
            return Ok(None);
        }
        let len = p.len as u64;
        match a.fits(len) {
            Some(to) if self.warm.is_warm(to - len, to) && self.warm.fence().try_announce(to) => {}
            _ => return Ok(None),
        }
        let r = self.reserve_shared(&mut a, &w, &p.msg, len, 1)?;
        let out = a.append_one(
            &self.files,
            self.warm.fence(),
            p,
            Some(now_ms),
            Some(r.queue_offset),
        );
        match &out {
            Ok(x) => self.settle(
                &w,
                &r,
                x.physical_offset + u64::from(x.size),
                x.store_timestamp,
            )?,
            // The write's own error is the one to report; a failed zeroing of its unpublished
            // bytes is harmless (`protocol::abandon`).
            Err(_) => {
                let _ = w.abandon(&mut LogRepair::new(self));
            }
        }
        drop(w);
        let out = out?;
        self.after_shared_write(&a, out.physical_offset + u64::from(out.size), true);
        drop(a);
        self.last_store_ts
            .store(out.store_timestamp, Ordering::Relaxed);
        Ok(Some(out))
    }

    /// After a published append ending at `end` (this process's appender lock held, the
    /// append lock released): the next file and warm-ahead asked for as the single writer
    /// asks (`warm`: the append went through the mapping).
    #[inline(always)]
    fn after_shared_write(&self, a: &Appender, end: u64, warm: bool) {
        self.maybe_prepare_next(a);
        self.warm.set_wanted(warm);
        if warm {
            self.warm.after_write(end);
        }
    }

    /// `put_batch` of a shared writer (module doc).
    pub(super) fn put_batch_shared(
        &self,
        shm: &WriterShm,
        batch: &[Prepared<'_>],
        out: &mut Vec<Appended>,
    ) -> Result<()> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let mut a = self.lock_appender();
        if let Some(cause) = &a.poisoned {
            return Err(Error::Poisoned {
                cause: Arc::clone(cause),
            });
        }
        let w = self.lock_shared(shm)?;
        self.follow_to(&mut a, w.log_end(), true)?;
        let total: u64 = batch.iter().map(|p| p.len as u64).sum();
        let r = self.reserve_shared(&mut a, &w, &first.msg, total, batch.len() as u64)?;
        let start = out.len();
        // Called once the batch's place is known and announced, before any of it is written.
        let warm = |start: u64, end: u64| self.warm.is_warm(start, end);
        let written = a.append_batch(
            &self.files,
            self.warm.fence(),
            batch,
            warm,
            Some(r.queue_offset),
            out,
        );
        let gathered = match &written {
            Ok(total) => super::append::written_by_gathering(*total, batch.len()),
            Err(_) => false,
        };
        let settled = match (written, out.get(start..).and_then(<[Appended]>::last)) {
            (Ok(_), Some(last)) => self.settle(
                &w,
                &r,
                last.physical_offset + u64::from(last.size),
                last.store_timestamp,
            ),
            (Ok(_), None) => self.settle(&w, &r, r.start, a.last_store_ts()),
            (Err(e), _) => {
                let _ = w.abandon(&mut LogRepair::new(self));
                Err(e)
            }
        };
        if let Err(e) = settled {
            out.truncate(start);
            return Err(e);
        }
        drop(w);
        if let Some(last) = out.get(start..).and_then(<[Appended]>::last) {
            self.after_shared_write(&a, last.physical_offset + u64::from(last.size), !gathered);
        }
        drop(a);
        if let Some(last) = out.last() {
            self.last_store_ts
                .store(last.store_timestamp, Ordering::Relaxed);
        }
        Ok(())
    }
}
