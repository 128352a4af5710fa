//! Argument conversion: every int and str a Python caller hands the binding is converted here,
//! so that a bad value is a typed error (a class of `mqlite.errors`) naming its field.
//!
//! - A Python int is unbounded, and PyO3's own conversion to a machine integer raises a bare
//!   `OverflowError` past the type's range. `Int` accepts any int; its range checks give an int
//!   beyond 64 bits the same typed error as a value just outside the field's range. `Float`
//!   (a number of seconds or hours) takes an int beyond the float range as an infinity, which
//!   the field's own check then refuses or accepts as it does `float("inf")`.
//! - A Python str may hold a lone surrogate, which has no UTF-8 form. `Str`, `OwnedStr` and
//!   `text` report that as the field's typed error instead of a `UnicodeEncodeError`.
//!
//! A value of the wrong type (a str for an int, an int for a str) stays a `TypeError`. So is a
//! bool where a number is expected: Python's `bool` is a subclass of `int`, and PyO3's own
//! conversion would take `True` as 1 (queue 1, one queue, offset 1), so `Int` and `Float`
//! refuse it.

use std::marker::PhantomData;
use std::ops::Deref;

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};

use crate::errors::{
    type_error, FilterExpressionError, IllegalArgumentError, InvalidConfigError, InvalidGroupError,
    InvalidMessageError, InvalidQueueError, InvalidTopicError, MessageNotFoundError,
};

/// A Python int argument: its value when it fits in an i64, else the int itself.
#[derive(Debug)]
pub enum Int {
    /// An int in the i64 range.
    Fits(i64),
    /// An int beyond the i64 range (out of range for every field).
    Beyond(Py<PyAny>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        refuse_bool(obj, "an int")?;
        match obj.extract::<i64>() {
            Ok(v) => Ok(Int::Fits(v)),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                Ok(Int::Beyond(obj.to_owned().unbind()))
            }
            Err(e) => Err(e),
        }
    }
}

impl<'py> IntoPyObject<'py> for &Int {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Int::Fits(v) => Ok(v.into_pyobject(py)?.into_any()),
            Int::Beyond(obj) => Ok(obj.bind(py).clone()),
        }
    }
}

impl Int {
    /// The value as a `T` in `[low, high]`, else `err(text of the value)`.
    pub fn within<T>(&self, low: T, high: T, err: impl FnOnce(&str) -> PyErr) -> PyResult<T>
    where
        T: TryFrom<i64> + PartialOrd + Copy,
    {
        match self {
            Int::Fits(v) => match T::try_from(*v) {
                Ok(t) if low <= t && t <= high => Ok(t),
                _ => Err(err(&v.to_string())),
            },
            Int::Beyond(obj) => Err(err(&beyond_text(obj))),
        }
    }

    /// The value as a `T` anywhere in `T`'s range, else `err(text of the value)`.
    pub fn to<T: TryFrom<i64>>(&self, err: impl FnOnce(&str) -> PyErr) -> PyResult<T> {
        match self {
            Int::Fits(v) => T::try_from(*v).map_err(|_| err(&v.to_string())),
            Int::Beyond(obj) => Err(err(&beyond_text(obj))),
        }
    }
}

/// `TypeError` when `obj` is a bool (PyO3 prefixes an argument's name to the message).
fn refuse_bool(obj: Borrowed<'_, '_, PyAny>, expected: &str) -> PyResult<()> {
    if obj.is_instance_of::<PyBool>() {
        return Err(type_error(format!("expected {expected}, not bool")));
    }
    Ok(())
}

/// The decimal text of an int beyond the i64 range, for a message. (`str()` of an int with
/// more than 4,300 digits raises: such a number is only described.)
fn beyond_text(obj: &Py<PyAny>) -> String {
    Python::attach(|py| {
        obj.bind(py)
            .str()
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "an int of thousands of digits".to_owned())
    })
}

/// A float argument; an int beyond the float range is an infinity of its sign.
#[derive(Debug, Clone, Copy)]
pub struct Float(pub f64);

impl<'a, 'py> FromPyObject<'a, 'py> for Float {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        refuse_bool(obj, "a number")?;
        match obj.extract::<f64>() {
            Ok(v) => Ok(Float(v)),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                let negative = obj.lt(0)?;
                Ok(Float(if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }))
            }
            Err(e) => Err(e),
        }
    }
}

/// A timeout in seconds: a finite number `>= 0`, else `IllegalArgumentError`.
pub fn timeout(t: Float) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(t.0).map_err(|_| {
        IllegalArgumentError::new_err(format!("timeout must be a finite number >= 0, got {}", t.0))
    })
}

/// A queue id: `[0, 2**32)`, else `InvalidQueueError`.
pub fn queue_id(q: &Int) -> PyResult<u32> {
    q.to(|v| InvalidQueueError::new_err(format!("queue id {v} is negative or too large")))
}

/// An optional queue id (`None`: the producer chooses).
pub fn opt_queue_id(q: Option<&Int>) -> PyResult<Option<u32>> {
    q.map(queue_id).transpose()
}

/// A queue or commit-log offset: a Java long `>= 0`, else `IllegalArgumentError`.
pub fn offset(o: &Int, field: &str) -> PyResult<u64> {
    o.within(0, i64::MAX as u64, |v| {
        IllegalArgumentError::new_err(format!("{field} must be in [0, 2**63 - 1], got {v}"))
    })
}

/// Epoch milliseconds (any i64), else `IllegalArgumentError`.
pub fn millis(t: &Int, field: &str) -> PyResult<i64> {
    t.to(|v| {
        IllegalArgumentError::new_err(format!(
            "{field} must be epoch milliseconds in [-2**63, 2**63 - 1], got {v}"
        ))
    })
}

/// A read's `max_messages`: `[1, 65536]`, else `IllegalArgumentError`.
pub fn max_messages(n: &Int) -> PyResult<usize> {
    count(n, "max_messages", 1, mqlite::store::MAX_MESSAGES_PER_READ)
}

/// A byte bound of a read: at least 1, else `IllegalArgumentError`.
pub fn max_bytes(n: &Int) -> PyResult<usize> {
    count(n, "max_bytes", 1, isize::MAX as usize)
}

/// A count in `[low, high]`, else `IllegalArgumentError`.
pub fn count<T>(n: &Int, field: &str, low: T, high: T) -> PyResult<T>
where
    T: TryFrom<i64> + PartialOrd + Copy + std::fmt::Display,
{
    n.within(low, high, |v| {
        IllegalArgumentError::new_err(format!("{field} must be in [{low}, {high}], got {v}"))
    })
}

/// An option: `default` when not given, else its value if a `T` holds it, else
/// `InvalidConfigError` (the core checks the option's own range).
pub fn option<T: TryFrom<i64>>(n: Option<Int>, field: &str, default: T) -> PyResult<T> {
    match n {
        None => Ok(default),
        Some(n) => n.to(|v| {
            InvalidConfigError::new_err(format!("invalid config {field}: {v} is out of range"))
        }),
    }
}

/// What a str argument is: its name in messages and the error class of a bad value.
pub trait Field {
    /// The argument's name, as the messages say it.
    const NAME: &'static str;
    /// The typed error for a bad value of this field.
    fn error(message: String) -> PyErr;
}

macro_rules! fields {
    ($($(#[$doc:meta])* $ty:ident = $name:literal => $exc:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $ty {}
        impl Field for $ty {
            const NAME: &'static str = $name;
            fn error(message: String) -> PyErr {
                $exc::new_err(message)
            }
        }
    )*};
}

fields! {
    /// A topic name.
    TopicName = "topic" => InvalidTopicError;
    /// A producer or consumer group name.
    GroupName = "group" => InvalidGroupError;
    /// A message id (a malformed one names no message).
    MsgIdText = "msg_id" => MessageNotFoundError;
    /// A key looked up in the key index.
    LookupKey = "key" => IllegalArgumentError;
    /// The store path.
    StorePath = "path" => InvalidConfigError;
    /// The store's `flush` option.
    FlushOption = "flush" => InvalidConfigError;
    /// The store's `delay_levels` option.
    DelayLevelsOption = "delay_levels" => InvalidConfigError;
    /// A producer's `compression` option.
    CompressionOption = "compression" => InvalidConfigError;
    /// A tag of a read's tag filter.
    FilterTag = "tags" => FilterExpressionError;
    /// A message's tags.
    MessageTags = "tags" => InvalidMessageError;
    /// A message key.
    MessageKey = "keys" => InvalidMessageError;
    /// A user property name or value.
    MessageProperty = "properties" => InvalidMessageError;
    /// A property name to look up.
    PropertyName = "name" => IllegalArgumentError;
}

/// The UTF-8 of a str of field `F`; `F`'s error when it holds a lone surrogate.
pub fn text<'a, F: Field>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    s.to_str().map_err(|_| no_utf8::<F>(s))
}

fn no_utf8<F: Field>(s: &Bound<'_, PyString>) -> PyErr {
    let shown = s
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    F::error(format!(
        "{} {shown} is not valid text: it holds a lone surrogate (no UTF-8 form)",
        F::NAME
    ))
}

/// A str argument of field `F`, borrowed as UTF-8.
#[derive(Debug)]
pub struct Str<'a, F>(&'a str, PhantomData<F>);

impl<'a, 'py, F: Field> FromPyObject<'a, 'py> for Str<'a, F> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match <&'a str>::extract(obj) {
            Ok(s) => Ok(Str(s, PhantomData)),
            Err(e) => match obj.cast::<PyString>() {
                Ok(s) => Err(no_utf8::<F>(&s)),
                Err(_) => Err(e),
            },
        }
    }
}

impl<'a, F> Str<'a, F> {
    /// A str argument with this value (for defaults).
    pub const fn of(s: &'a str) -> Self {
        Str(s, PhantomData)
    }
}

impl<F> Deref for Str<'_, F> {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

/// A str argument of field `F`, copied (for items of lists and tuples).
#[derive(Debug)]
pub struct OwnedStr<F>(String, PhantomData<F>);

impl<'a, 'py, F: Field> FromPyObject<'a, 'py> for OwnedStr<F> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let s: Str<'_, F> = obj.extract()?;
        Ok(OwnedStr(s.0.to_owned(), PhantomData))
    }
}

impl<F> OwnedStr<F> {
    /// The string.
    pub fn into_inner(self) -> String {
        self.0
    }
}

impl<F> Deref for OwnedStr<F> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}
