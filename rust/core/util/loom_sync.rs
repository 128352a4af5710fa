//! The primitives of the crate's hand-written lock-free protocols (the fill fence, the reput
//! hand-off, the notifier, the wake word): std's, or loom's in the model-checking build
//! (`RUSTFLAGS="--cfg loom" cargo test --lib loom_`), so that loom explores the real protocol
//! code rather than a copy of it.
//!
//! Only the protocols' own state goes through here. Under loom, a wait that would block or
//! back off (`yield_now`, `spin_loop`, `sleep`) becomes a loom yield: the model then runs the
//! other threads, and a wait nobody ends is reported as a deadlock, never as a slow test.
//! Condition-variable timeouts are not modelled by loom (`wait_timeout` waits for a
//! notification), so a lost wake-up is a deadlock there too.

#[cfg(not(all(loom, test)))]
pub use std::sync::{atomic, Condvar, Mutex, MutexGuard};

#[cfg(all(loom, test))]
pub use loom::sync::{atomic, Condvar, Mutex, MutexGuard};

/// A CPU hint inside a busy-wait.
#[inline]
pub fn spin_loop() {
    #[cfg(not(all(loom, test)))]
    std::hint::spin_loop();
    #[cfg(all(loom, test))]
    loom::hint::spin_loop();
}

/// Gives the CPU to another thread.
#[inline]
pub fn yield_now() {
    #[cfg(not(all(loom, test)))]
    std::thread::yield_now();
    #[cfg(all(loom, test))]
    loom::thread::yield_now();
}

/// Sleeps inside a wait that re-checks its condition afterwards (a yield under loom, which
/// has no clock).
#[inline]
pub fn sleep(d: std::time::Duration) {
    #[cfg(not(all(loom, test)))]
    std::thread::sleep(d);
    #[cfg(all(loom, test))]
    {
        let _ = d;
        loom::thread::yield_now();
    }
}

/// Runs a loom model: every interleaving with at most `preemptions` preemptions (`None`: all
/// interleavings), unless `LOOM_MAX_PREEMPTIONS` sets the bound. Models with three threads
/// take a bound (4 keeps each within seconds; their state space is otherwise too large for
/// CI); two-thread models are checked exhaustively. Loom's other `LOOM_*` variables apply.
#[cfg(all(loom, test))]
pub fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = preemptions;
    }
    b.check(f);
}
