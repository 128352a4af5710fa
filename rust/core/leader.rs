//! The leader of a store's shared writers (docs/design-many-writers.md, Roles): the one
//! process that runs the background duties (flush, checkpoint, retention, the timer engine's
//! delivery; later the transaction checks). [`LeaderRole`] is the one place that starts and
//! stops them; the store registers them there (store/open.rs), and an exclusive writer, its
//! own leader, runs them directly.
//!
//! Election: the OFD write lock on byte [`LEADER_BYTE`] of the store's `lock` file, taken
//! through a descriptor of its own (FORMAT.md §6). A process that cannot take it at once has
//! a thread blocked on it (`F_OFD_SETLKW`); the kernel hands it to one such waiter the moment
//! the holder lets go, by closing its store or by dying.
//!
//! Invariants
//! - At most one process holds the byte, so the duties run in at most one process. The holder
//!   keeps it until its store has closed (after its last flush and checkpoint, `Seat::resign`)
//!   or it dies.
//! - A process that takes the byte first takes over (`take_over`: a flush of the whole log,
//!   which serves every process's sync senders left waiting by a dead leader, and a retention
//!   pass), then starts the duties' threads, and only then reports itself the leader.
//! - A blocked waiter cannot be interrupted: a store closed while its waiter is blocked leaves
//!   that thread blocked until the byte is released; it then lets go of the byte at once and
//!   ends, closing its descriptor. It holds nothing but the seat (one descriptor of `lock`);
//!   a store closed with no waiter blocked closes that descriptor at once.
//! - On a file system without record locks (`EINVAL`, `ENOLCK`) there is no election: every
//!   process leads, as each ran its own duties before the election existed.
//!
//! Crash behaviour: nothing to recover. A leader killed at any point leaves the byte to the
//! kernel, which releases it; what the dead leader had not flushed is flushed by the next one
//! (the shared mapping's `flushed` word says from where), and a retention pass it left half
//! done is finished by the next one's (files already deleted are skipped).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Result;
pub use crate::lock::LEADER_BYTE;
use crate::mapped_file::mmap;
use crate::service::{PanicHook, Service, Services};
use crate::util::fs;

/// How often a process whose waiter thread could not be started tries the byte instead.
const RETRY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct SeatState {
    /// This process holds the byte (or leads without an election).
    held: bool,
    /// Taken over and the duties started.
    leading: bool,
    /// A waiter thread is blocked on the byte.
    waiting: bool,
    /// The role is stopping: no take-over any more.
    stopping: bool,
    /// The store closed: a byte taken from now on is let go of at once.
    closed: bool,
}

/// One process's place in the election: a descriptor of `lock` and what it knows.
#[derive(Debug)]
pub struct Seat {
    /// Closed when the store closes, unless a waiter thread is blocked on it (module doc);
    /// locked after `state` when both are held.
    file: Mutex<Option<File>>,
    path: PathBuf,
    state: Mutex<SeatState>,
    changed: Condvar,
}

impl Seat {
    /// A seat at the store `root` (a descriptor of `<root>/lock` of its own).
    ///
    /// # Errors
    /// `Io` if the file cannot be opened.
    pub fn open(root: &Path, mode: u32) -> Result<Arc<Seat>> {
        let path = root.join("lock");
        let file = fs::open_rw(&path, mode)?;
        Ok(Arc::new(Seat {
            file: Mutex::new(Some(file)),
            path,
            state: Mutex::new(SeatState::default()),
            changed: Condvar::new(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, SeatState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this process leads (took over and started the duties).
    pub fn is_leader(&self) -> bool {
        self.state().leading
    }

    /// Waits until this process leads, or `timeout` passes, or its store closes.
    pub fn wait_leader(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.state();
        while !s.leading && !s.closed {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            s = match self.changed.wait_timeout(s, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        s.leading
    }

    /// The store closed, after its last flush and checkpoint: lets go of the byte (the next
    /// leader takes it at once) and of any byte a blocked waiter takes later.
    pub fn resign(&self) {
        let mut s = self.state();
        s.closed = true;
        s.stopping = true;
        if s.held {
            self.unlock();
            s.held = false;
        }
        s.leading = false;
        if !s.waiting {
            self.close_file();
        }
        self.changed.notify_all();
    }

    /// The descriptor, while open.
    fn fd(&self) -> Option<std::os::unix::io::RawFd> {
        self.file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(AsRawFd::as_raw_fd)
    }

    fn close_file(&self) {
        drop(self.file.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    fn unlock(&self) {
        // Closing the descriptor would release it too; an error leaves that to the close.
        if let Some(fd) = self.fd() {
            let _ = mmap::ofd_range_lock(fd, LEADER_BYTE, 1, true);
        }
    }

    /// One try: `Some(true)` when held, `Some(false)` when another process holds it, `None`
    /// when this file system has no record locks (no election).
    fn try_take(&self) -> Option<bool> {
        let Some(fd) = self.fd() else {
            return Some(false);
        };
        match mmap::ofd_range_lock(fd, LEADER_BYTE, 1, false) {
            Ok(held) => Some(held),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => None,
            // Any other failure: try again later (the waiter's blocking call reports it too).
            Err(_) => Some(false),
        }
    }

    /// Body of the waiter thread: blocks on the byte, then hands it to the role, or lets go
    /// of it when the store has closed meanwhile.
    fn wait_for_byte(&self) {
        // Open while `waiting` is set: the close leaves it to this thread.
        let Some(fd) = self.fd() else {
            self.state().waiting = false;
            self.changed.notify_all();
            return;
        };
        let got = loop {
            match mmap::ofd_range_lock_wait(fd, LEADER_BYTE, 1) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        let mut s = self.state();
        s.waiting = false;
        match got {
            Ok(()) if s.closed => {
                self.unlock();
                self.close_file();
            }
            Ok(()) => s.held = true,
            // No election possible here (see the module doc); other errors leave the role to
            // retry with `try_take`.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOLCK)) => {
                s.held = true
            }
            Err(_) => {}
        }
        self.changed.notify_all();
    }

    /// The role's thread: takes the byte, at once or once a waiter thread got it. Returns
    /// whether it is held; false once the role stops.
    fn take(self: &Arc<Self>) -> bool {
        match self.try_take() {
            Some(true) | None => {
                let mut s = self.state();
                s.held = true;
                return !s.stopping;
            }
            Some(false) => {}
        }
        let mut s = self.state();
        loop {
            if s.stopping {
                return false;
            }
            if s.held {
                return true;
            }
            if !s.waiting {
                s.waiting = self.spawn_waiter();
                if !s.waiting {
                    // No thread: try the byte now and then instead.
                    drop(s);
                    if self.try_take() != Some(false) {
                        self.state().held = true;
                    }
                    s = self.state();
                    if !s.held && !s.stopping {
                        s = match self.changed.wait_timeout(s, RETRY) {
                            Ok((g, _)) => g,
                            Err(p) => p.into_inner().0,
                        };
                    }
                    continue;
                }
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn spawn_waiter(self: &Arc<Self>) -> bool {
        let seat = Arc::clone(self);
        std::thread::Builder::new()
            .name("mqlite-leader-wait".into())
            .spawn(move || seat.wait_for_byte())
            .is_ok()
    }

    fn stop(&self) {
        self.state().stopping = true;
        self.changed.notify_all();
    }

    fn wait_stopping(&self) {
        let mut s = self.state();
        while !s.stopping {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Path of the lock file the seat is on.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What a process does when it takes over, before the duties' threads start.
pub type TakeOver = Box<dyn Fn() + Send + Sync>;

/// The leader role, a service of every shared writer (module doc): waits for the byte, then
/// takes over and runs the duties until the store closes.
pub struct LeaderRole {
    seat: Arc<Seat>,
    take_over: TakeOver,
    duties: Mutex<Option<Vec<Arc<dyn Service>>>>,
    running: Services,
}

impl std::fmt::Debug for LeaderRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderRole")
            .field("seat", &self.seat)
            .field("running", &self.running.names())
            .finish_non_exhaustive()
    }
}

impl LeaderRole {
    /// The role on `seat`: once leader, runs `take_over`, then starts `duties` (in order; they
    /// stop in reverse when the role stops).
    pub fn new(seat: Arc<Seat>, take_over: TakeOver, duties: Vec<Arc<dyn Service>>) -> Self {
        LeaderRole {
            seat,
            take_over,
            duties: Mutex::new(Some(duties)),
            running: Services::default(),
        }
    }

    /// The duties' threads report a panic to `hook` (service.rs).
    pub fn reporting_to(mut self, hook: PanicHook) -> Self {
        self.running = Services::reporting_to(hook);
        self
    }
}

impl Service for LeaderRole {
    fn name(&self) -> &'static str {
        "leader"
    }

    fn run(&self) {
        if !self.seat.take() {
            return;
        }
        (self.take_over)();
        let duties = self.duties.lock().unwrap_or_else(|p| p.into_inner()).take();
        // A thread that cannot be spawned leaves its duty undone here; the others run.
        for duty in duties.into_iter().flatten() {
            let _ = self.running.start(vec![duty]);
        }
        {
            let mut s = self.seat.state();
            s.leading = !s.stopping;
            self.seat.changed.notify_all();
        }
        self.seat.wait_stopping();
        self.running.stop_all();
    }

    fn stop(&self) {
        self.seat.stop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn role(seat: &Arc<Seat>, takes: &Arc<AtomicUsize>) -> Arc<LeaderRole> {
        let takes = Arc::clone(takes);
        Arc::new(LeaderRole::new(
            Arc::clone(seat),
            Box::new(move || {
                takes.fetch_add(1, Ordering::SeqCst);
            }),
            Vec::new(),
        ))
    }

    #[test]
    fn one_seat_leads_and_a_resignation_hands_over_to_the_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Seat::open(dir.path(), 0o600).unwrap(),
            Seat::open(dir.path(), 0o600).unwrap(),
        );
        let takes = Arc::new(AtomicUsize::new(0));
        let services = (Services::default(), Services::default());
        services.0.start(vec![role(&a, &takes)]).unwrap();
        assert!(a.wait_leader(Duration::from_secs(30)));
        services.1.start(vec![role(&b, &takes)]).unwrap();
        // b's waiter is blocked on the byte: a still leads, alone.
        assert!(!b.is_leader());
        assert_eq!(takes.load(Ordering::SeqCst), 1);
        services.0.stop_all();
        a.resign();
        assert!(b.wait_leader(Duration::from_secs(30)), "handed over");
        assert!(!a.is_leader());
        assert_eq!(takes.load(Ordering::SeqCst), 2);
        services.1.stop_all();
        b.resign();
    }

    #[test]
    fn a_closed_seat_lets_go_of_a_byte_its_waiter_gets_later() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            Seat::open(dir.path(), 0o600).unwrap(),
            Seat::open(dir.path(), 0o600).unwrap(),
            Seat::open(dir.path(), 0o600).unwrap(),
        );
        let takes = Arc::new(AtomicUsize::new(0));
        let services = (Services::default(), Services::default());
        services.0.start(vec![role(&a, &takes)]).unwrap();
        assert!(a.wait_leader(Duration::from_secs(30)));
        // b waits, then closes while its waiter is blocked.
        services.1.start(vec![role(&b, &takes)]).unwrap();
        while !b.state().waiting {
            std::thread::yield_now();
        }
        services.1.stop_all();
        b.resign();
        // c waits too; a resigns: whichever waiter the kernel picks, c ends up leading.
        let services_c = Services::default();
        services_c.start(vec![role(&c, &takes)]).unwrap();
        services.0.stop_all();
        a.resign();
        assert!(c.wait_leader(Duration::from_secs(30)));
        assert!(!b.is_leader());
        services_c.stop_all();
        c.resign();
    }
}
