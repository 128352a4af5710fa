//! Fault injection for tests (cargo feature `fault-injection`, never in release builds): makes
//! the next commit-log / consume-queue flushes fail the way a dying disk does (EIO), to prove
//! that a failed flush poisons the store and nothing is acknowledged after it.

pub mod power_cut;

use std::sync::atomic::{AtomicI64, Ordering};

static FLUSHES_LEFT: AtomicI64 = AtomicI64::new(-1);

/// Lets `n` more flushes succeed, then fails every later one (`None`: never fail again).
pub fn fail_flushes_after(n: Option<u64>) {
    let v = n
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
        .unwrap_or(-1);
    FLUSHES_LEFT.store(v, Ordering::SeqCst);
}

/// Called by each flush: `Err(EIO)` once the budget set by `fail_flushes_after` is used up.
pub(crate) fn flush_fault() -> std::io::Result<()> {
    let left = FLUSHES_LEFT.load(Ordering::SeqCst);
    if left < 0 {
        return Ok(());
    }
    if left == 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EIO));
    }
    FLUSHES_LEFT.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}
