//! `mqlite._core`: the thin PyO3 binding of the mqlite core. It converts arguments (messages
//! into the core's builder, `message::builder`), releases
//! the GIL around every call that touches the store, calls the core's public API and maps its
//! errors to the exception classes of `mqlite.errors`. The Python package owns ergonomics.
//!
//! One exception: a single-message send that does not wait for the disk (any send in async
//! mode, a pipelined `send_async` in sync mode) first tries a `Wait::NoWait` put with the
//! GIL held. That append never waits (no lock wait, no file creation, no disk wait, body at
//! most 64 KiB), so it costs less than releasing and retaking the GIL; when it declines, the
//! send releases the GIL and takes the blocking path. What such a put must still wait for
//! (its record's dispatch into a consume-queue file it cannot write at once) or hand to
//! another thread (a consumer's wake-up) runs with the GIL released (`WakeVia`).
//!
//! Helpers that are not the store's: `PollToken` (see `token.rs`), the push consumer's poll
//! leadership, in Rust so that its stall watch runs without the GIL; and the consumer group's
//! byte-range locks (`group_lock.rs`), in Rust for the platform's `struct flock`; and test
//! hooks that count the core's work (`probes.rs`). `read_columns` (`columns.rs`) hands a queue
//! range out as Arrow buffers for columnar readers.
//!
//! A call that may wait for long without the GIL (`wait_for`, a poll, the lock wait of `open`,
//! `wait_durable`, a poll token on the main thread) waits in slices and runs Python's signal
//! handlers in between (`interrupt.rs`), so Ctrl-C ends it with KeyboardInterrupt.

mod args;
mod clock;
mod columns;
mod cursor;
mod errors;
mod group_lock;
mod halves;
mod interrupt;
mod maintenance;
mod message;
mod names;
mod outgoing;
mod probes;
mod producer;
mod queue;
mod store;
mod token;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The property names a message's `properties` may not use (the store's and RocketMQ's).
    m.add(
        "RESERVED_PROPERTIES",
        pyo3::types::PyFrozenSet::new(m.py(), mqlite::message::properties::RESERVED)?,
    )?;
    m.add_function(wrap_pyfunction!(names::check_topic, m)?)?;
    m.add_function(wrap_pyfunction!(names::check_group, m)?)?;
    m.add_function(wrap_pyfunction!(group_lock::ofd_try_lock, m)?)?;
    m.add_function(wrap_pyfunction!(group_lock::ofd_unlock, m)?)?;
    m.add_function(wrap_pyfunction!(probes::queue_loads, m)?)?;
    m.add_function(wrap_pyfunction!(columns::read_columns, m)?)?;
    m.add_function(wrap_pyfunction!(maintenance::verify_store, m)?)?;
    m.add_function(wrap_pyfunction!(maintenance::repair_store, m)?)?;
    m.add_class::<outgoing::PyMessage>()?;
    m.add_class::<queue::PyMessageQueue>()?;
    m.add_class::<message::PySendResult>()?;
    m.add_class::<message::PySendBatchResult>()?;
    m.add_class::<message::PyMessageExt>()?;
    m.add_class::<store::PyGetResult>()?;
    m.add_class::<cursor::PyQueueCursor>()?;
    m.add_class::<producer::PyProducer>()?;
    m.add_class::<store::PyStore>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<token::PyPollToken>()?;
    Ok(())
}
