//! Test hooks: counters of what the core did, for tests that assert on a cost by its cause
//! (how many queues an open loaded) rather than by the time it took. Not part of the API.

use pyo3::prelude::*;

/// How many consume queues this process has loaded from their files since it started
/// (`mqlite::consume_queue::store::queue_loads`), every store counted.
#[pyfunction]
#[pyo3(name = "_queue_loads")]
pub fn queue_loads() -> u64 {
    mqlite::consume_queue::store::queue_loads()
}
