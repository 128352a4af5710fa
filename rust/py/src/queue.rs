//! `MessageQueue`: a hashable, ordered (topic, queue id) pair.

use pyo3::prelude::*;

use crate::args::{self, Int, OwnedStr, TopicName};

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
    fn new(topic: OwnedStr<TopicName>, queue_id: Int) -> PyResult<Self> {
        Ok(PyMessageQueue {
            queue_id: args::queue_id(&queue_id)?,
            topic: topic.into_inner(),
        })
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
