//! Non-blocking lock attempts for the paths that must never wait (a producer holding Python's
//! GIL). A poisoned lock counts as taken, the rule the crate's blocking `lock()` calls follow
//! too (`unwrap_or_else(|p| p.into_inner())`).

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, TryLockError};

/// `m`'s guard, or `None` while another thread holds it.
pub fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// A read guard of `l`, or `None` while a writer holds it.
pub fn try_read<T>(l: &RwLock<T>) -> Option<RwLockReadGuard<'_, T>> {
    match l.try_read() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn busy_locks_decline_and_poisoned_ones_are_taken() {
        let m = Mutex::new(1);
        let held = m.lock().unwrap();
        assert!(try_lock(&m).is_none());
        drop(held);
        assert_eq!(try_lock(&m).map(|g| *g), Some(1));
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = m.lock().unwrap();
                panic!("poison it");
            })
            .join()
        });
        assert!(m.is_poisoned());
        assert_eq!(try_lock(&m).map(|g| *g), Some(1));

        let l = RwLock::new(2);
        let w = l.write().unwrap();
        assert!(try_read(&l).is_none());
        drop(w);
        let r = l.read().unwrap();
        assert_eq!(try_read(&l).map(|g| *g), Some(2), "readers share");
        drop(r);
    }
}
