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
//! - A service whose `run` panics is not silent: its thread ends with a line on stderr naming
//!   it and the panic, and the list's panic hook (`reporting_to`; the store's poisons its
//!   writes, `Error::ServiceFailed`) is told. The thread is not restarted: a panic is a defect,
//!   and what it left half done (a dispatch cursor, a lane's lock) is not known to be sound.
//!
//! Fork safety: a forked child never stops or joins its parent's threads (they do not exist in
//! the child); the store skips `stop_all` there.

use std::panic::AssertUnwindSafe;
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

/// Told the failure when a service's thread panicked (module doc).
pub type PanicHook = Arc<dyn Fn(Error) + Send + Sync>;

/// The running services of a store, in start order.
#[derive(Default)]
pub struct Services {
    running: Mutex<Vec<Running>>,
    on_panic: Option<PanicHook>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("running", &self.names())
            .field("on_panic", &self.on_panic.is_some())
            .finish()
    }
}

impl Services {
    /// No service running; a service thread that panics is reported to `hook` (module doc).
    pub fn reporting_to(hook: PanicHook) -> Self {
        Services {
            running: Mutex::default(),
            on_panic: Some(hook),
        }
    }

    /// Starts each of `services` on its own thread, in order.
    ///
    /// # Errors
    /// `Io` if a thread cannot be spawned; every service started by this call or before it
    /// is then stopped again.
    pub fn start(&self, services: Vec<Arc<dyn Service>>) -> Result<()> {
        for s in services {
            let name = s.name();
            let body = Arc::clone(&s);
            let hook = self.on_panic.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("mqlite-{name}"))
                .spawn(move || run_reporting_panics(name, &*body, hook.as_ref()));
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

/// `service.run()`, a panic reported (module doc) rather than only ending the thread.
fn run_reporting_panics(name: &str, service: &dyn Service, hook: Option<&PanicHook>) {
    let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(|| service.run())) else {
        return;
    };
    let reason = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    let failure = Error::ServiceFailed {
        thread: format!("mqlite-{name}"),
        reason,
    };
    match hook {
        Some(hook) => {
            eprintln!("mqlite: {failure}; the thread stopped, and the store refuses writes");
            hook(failure);
        }
        None => eprintln!("mqlite: {failure}; the thread stopped"),
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

    /// Panics in its thread.
    #[derive(Debug)]
    struct Boom;

    impl Service for Boom {
        fn name(&self) -> &'static str {
            "boom"
        }
        fn run(&self) {
            panic!("the boom service broke");
        }
        fn stop(&self) {}
    }

    #[test]
    fn a_panicking_service_is_reported_to_the_hook() {
        let told: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = Arc::clone(&told);
        let services = Services::reporting_to(Arc::new(move |e: Error| {
            sink.lock().unwrap().push(format!("{} {e}", e.kind()));
        }));
        services.start(vec![Arc::new(Boom)]).unwrap();
        // The join returns once the thread ended, the hook called.
        services.stop_all();
        assert_eq!(
            *told.lock().unwrap(),
            ["SERVICE_FAILED the store's thread mqlite-boom panicked: the boom service broke"]
        );
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
