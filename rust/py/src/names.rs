//! `check_topic` and `check_group`: the core's name rules, for the Python package's consumers
//! and admin calls, so that one rule (the one a send applies) guards every name that becomes a
//! path in the store directory.

use mqlite::message::validate;
use pyo3::prelude::*;

use crate::args::{GroupName, Str, TopicName};
use crate::errors::PyMqError;

/// Raises `InvalidTopicError` unless `topic` is a valid topic name (1 to 127 characters from
/// `[A-Za-z0-9_%|-]`, 255 for `%RETRY%` / `%DLQ%` topics).
#[pyfunction]
pub fn check_topic(topic: Str<'_, TopicName>) -> PyResult<()> {
    validate::check_topic(&topic).map_err(|e| PyMqError(e).into())
}

/// Raises `InvalidGroupError` unless `group` is a valid group name (1 to 120 characters from
/// `[A-Za-z0-9_%|-]`).
#[pyfunction]
pub fn check_group(group: Str<'_, GroupName>) -> PyResult<()> {
    validate::check_group(&group).map_err(|e| PyMqError(e).into())
}
