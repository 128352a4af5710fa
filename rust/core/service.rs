//! Background services: the store's threads (dispatch, flush, preparer, retention; later the
//! schedule, timer and transaction-check services) behind one small trait, owned by one list.
//!
//! Invariants
//! - Services start in registration order, each on its own thread named `mqlite-<name>`, and
//!   stop in reverse order: a service is asked to stop and joined before the one registered
//!   before it is, so a service never outlives one it was started after (and may rely on).
//! - `stop` only asks: it never blocks, and is safe to call more than once and before `run`.
//! - If a thread cannot be spawned, the services already started are stopped (in reverse)
//!   before the error is returned.
//!
//! Fork safety: a forked child never stops or joins its parent's threads (they do not exist in
//! the child); the store skips `stop_all` there.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// A background service run by one thread.
pub trait Service: Send + Sync + std::fmt::Debug {
    /// Short name (the thread is `mqlite-<name>`).
    fn name(&self) -> &'static str;
    /// Body of the thread: returns once `stop` was called.
    fn run(&self);
    /// Asks `run` to return soon; never blocks.
    fn stop(&self);
}

/// A started service and its thread.
type Running = (Arc<dyn Service>, JoinHandle<()>);

/// The running services of a store, in start order.
#[derive(Debug, Default)]
pub struct Services {
    running: Mutex<Vec<Running>>,
}

impl Services {
    /// Starts each of `services` on its own thread, in order.
    ///
    /// # Errors
    /// `Io` if a thread cannot be spawned; every service started by this call or before it
    /// is then stopped again.
    pub fn start(&self, services: Vec<Arc<dyn Service>>) -> Result<()> {
        for s in services {
            let name = s.name();
            let body = Arc::clone(&s);
            let spawned = std::thread::Builder::new()
                .name(format!("mqlite-{name}"))
                .spawn(move || body.run());
            match spawned {
                Ok(t) => self.lock().push((s, t)),
                Err(e) => {
                    self.stop_all();
                    return Err(Error::io("spawn_thread", format!("mqlite-{name}"), e));
                }
            }
        }
        Ok(())
    }

    /// Stops and joins every running service, the last started first.
    pub fn stop_all(&self) {
        let running: Vec<_> = self.lock().drain(..).collect();
        for (s, t) in running.into_iter().rev() {
            s.stop();
            let _ = t.join();
        }
    }

    /// Names of the running services, in start order.
    pub fn names(&self) -> Vec<&'static str> {
        self.lock().iter().map(|(s, _)| s.name()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Condvar;

    /// Logs its stop into a shared journal once its thread has seen the request.
    #[derive(Debug)]
    struct Probe {
        name: &'static str,
        stopping: Mutex<bool>,
        wake: Condvar,
        started: AtomicBool,
        journal: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Service for Probe {
        fn name(&self) -> &'static str {
            self.name
        }
        fn run(&self) {
            self.started.store(true, Ordering::Release);
            let mut s = self.stopping.lock().unwrap();
            while !*s {
                s = self.wake.wait(s).unwrap();
            }
            self.journal.lock().unwrap().push(self.name);
        }
        fn stop(&self) {
            *self.stopping.lock().unwrap() = true;
            self.wake.notify_all();
        }
    }

    #[test]
    fn services_start_in_order_and_stop_in_reverse() {
        let journal = Arc::new(Mutex::new(Vec::new()));
        let probe = |name| {
            Arc::new(Probe {
                name,
                stopping: Mutex::new(false),
                wake: Condvar::new(),
                started: AtomicBool::new(false),
                journal: Arc::clone(&journal),
            })
        };
        let (a, b, c) = (probe("a"), probe("b"), probe("c"));
        let services = Services::default();
        let list: Vec<Arc<dyn Service>> = vec![a.clone(), b.clone(), c.clone()];
        services.start(list).unwrap();
        assert_eq!(services.names(), ["a", "b", "c"]);
        services.stop_all();
        // Each thread wrote its name before it was joined, and joins ran in reverse.
        assert_eq!(*journal.lock().unwrap(), ["c", "b", "a"]);
        assert!(a.started.load(Ordering::Acquire) && c.started.load(Ordering::Acquire));
        assert!(services.names().is_empty());
        services.stop_all();
    }
}
