//! `MessageQueue`: a hashable, ordered (topic, queue id) pair.

use pyo3::prelude::*;

use crate::no_bool::NoBool;

/// A (topic, queue id) pair.
#[pyclass(
    frozen,
    eq,
    hash,
    ord,
    skip_from_py_object,
    module = "mqlite._core",
    name = "MessageQueue"
)]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyMessageQueue {
    pub topic: String,
    pub queue_id: u32,
}

#[pymethods]
impl PyMessageQueue {
    #[new]
    fn new(topic: String, queue_id: NoBool<i64>) -> PyResult<Self> {
        let NoBool(queue_id) = queue_id;
        let queue_id = u32::try_from(queue_id).map_err(|_| {
            crate::errors::InvalidQueueError::new_err(format!(
                "queue id {queue_id} is negative or too large"
            ))
        })?;
        Ok(PyMessageQueue { topic, queue_id })
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    #[getter]
    fn queue_id(&self) -> u32 {
        self.queue_id
    }

    fn __repr__(&self) -> String {
        format!(
            "MessageQueue(topic={:?}, queue_id={})",
            self.topic, self.queue_id
        )
    }

    fn __getnewargs__(&self) -> (String, u32) {
        (self.topic.clone(), self.queue_id)
    }
}
