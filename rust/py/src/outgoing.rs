//! `mqlite.Message`: the outgoing message, a native class that behaves as the dataclass it
//! replaces (fields, defaults, keyword construction, `==`, repr, `dataclasses.fields` /
//! `replace` / `asdict`, pickling) while letting `send` read its fields without six Python
//! attribute look-ups.
//!
//! Fields hold any object, as a dataclass's do: types are checked when the message is sent.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

/// A message to send.
///
/// `keys` is one key or a sequence of keys, each without spaces (the store indexes them:
/// `Store.find_by_key`); `properties` are user
/// properties (names reserved by RocketMQ, such as `KEYS` or `UNIQ_KEY`, are refused);
/// `delay_level` (RocketMQ's delay level, 0 for none) delivers the message to its topic only
/// after its level's delay; `deliver_at` (a `datetime`, or epoch milliseconds) or `delay` (a
/// `timedelta`, or seconds) delivers it at that time (at most one of the three). A send uses the fields as they were when it began; the message may
/// be read or changed meanwhile.
#[pyclass(module = "mqlite", name = "Message", subclass)]
#[derive(Debug)]
pub struct PyMessage {
    #[pyo3(get, set)]
    pub topic: Py<PyAny>,
    #[pyo3(get, set)]
    pub body: Py<PyAny>,
    #[pyo3(get, set)]
    pub tags: Py<PyAny>,
    #[pyo3(get, set)]
    pub keys: Py<PyAny>,
    /// `None` stands for an empty dict not created yet: most messages have no properties, and
    /// the getter creates the dict the first time it is asked for (a dataclass's
    /// `default_factory=dict`, paid only when used).
    pub properties: Option<Py<PyAny>>,
    #[pyo3(get, set)]
    pub flag: Py<PyAny>,
    /// `None` stands for 0, never given: a send then reads no level (most messages have none).
    pub delay_level: Option<Py<PyAny>>,
    #[pyo3(get, set)]
    pub deliver_at: Py<PyAny>,
    #[pyo3(get, set)]
    pub delay: Py<PyAny>,
}

const FIELDS: [&str; 9] = [
    "topic",
    "body",
    "tags",
    "keys",
    "properties",
    "flag",
    "delay_level",
    "deliver_at",
    "delay",
];

/// A message's fields, copied out of it (new references to the same objects).
#[derive(Debug)]
pub struct Fields {
    pub topic: Py<PyAny>,
    pub body: Py<PyAny>,
    pub tags: Py<PyAny>,
    pub keys: Py<PyAny>,
    /// `None` while the properties were never set or read.
    pub properties: Option<Py<PyAny>>,
    pub flag: Py<PyAny>,
    /// `None` while never given (no delay).
    pub delay_level: Option<Py<PyAny>>,
    pub deliver_at: Py<PyAny>,
    pub delay: Py<PyAny>,
}

impl PyMessage {
    /// The fields, read under a shared borrow that ends before this returns.
    ///
    /// Invariant: no borrow of a message is held while Python code runs (a field's `repr`, a
    /// `keys` generator, a `properties` mapping, another thread taking the GIL). Every reader
    /// copies the fields out first, so reading, printing, comparing, pickling or changing a
    /// message never meets a borrow, even while `send` reads the same message. A borrow can
    /// then fail only if that invariant is broken; it is a typed error, never a panic.
    pub fn fields(slf: &Bound<'_, Self>) -> PyResult<Fields> {
        let py = slf.py();
        let m = slf.try_borrow().map_err(|_| {
            crate::errors::IllegalStateError::new_err("the message is being changed; try again")
        })?;
        Ok(Fields {
            topic: m.topic.clone_ref(py),
            body: m.body.clone_ref(py),
            tags: m.tags.clone_ref(py),
            keys: m.keys.clone_ref(py),
            properties: m.properties.as_ref().map(|p| p.clone_ref(py)),
            flag: m.flag.clone_ref(py),
            delay_level: m.delay_level.as_ref().map(|d| d.clone_ref(py)),
            deliver_at: m.deliver_at.clone_ref(py),
            delay: m.delay.clone_ref(py),
        })
    }

    /// The field values in `FIELDS` order (a new empty dict stands for unset properties, 0 for
    /// an unset delay level).
    fn values(slf: &Bound<'_, Self>) -> PyResult<[Py<PyAny>; 9]> {
        let py = slf.py();
        let f = Self::fields(slf)?;
        let properties = f
            .properties
            .unwrap_or_else(|| PyDict::new(py).into_any().unbind());
        Ok([
            f.topic,
            f.body,
            f.tags,
            f.keys,
            properties,
            f.flag,
            f.delay_level.unwrap_or_else(|| zero(py)),
            f.deliver_at,
            f.delay,
        ])
    }

    /// The properties object, creating the empty dict on first use.
    fn properties_dict(&mut self, py: Python<'_>) -> Py<PyAny> {
        self.properties
            .get_or_insert_with(|| PyDict::new(py).into_any().unbind())
            .clone_ref(py)
    }
}

#[pymethods]
impl PyMessage {
    #[new]
    #[pyo3(signature = (
        topic, body, tags = None, keys = None, properties = None, flag = None, delay_level = None,
        deliver_at = None, delay = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        topic: Py<PyAny>,
        body: Py<PyAny>,
        tags: Option<Py<PyAny>>,
        keys: Option<Py<PyAny>>,
        properties: Option<Py<PyAny>>,
        flag: Option<Py<PyAny>>,
        delay_level: Option<Py<PyAny>>,
        deliver_at: Option<Py<PyAny>>,
        delay: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Ok(PyMessage {
            topic,
            body,
            tags: tags.unwrap_or_else(|| py.None()),
            keys: match keys {
                Some(k) => k,
                None => PyTuple::empty(py).into_any().unbind(),
            },
            properties,
            flag: match flag {
                Some(f) => f,
                None => 0i32.into_pyobject(py)?.into_any().unbind(),
            },
            delay_level,
            deliver_at: deliver_at.unwrap_or_else(|| py.None()),
            delay: delay.unwrap_or_else(|| py.None()),
        })
    }

    /// `dataclasses.fields(Message)` and friends read this: the fields of an equivalent
    /// dataclass, built once when the class is created.
    #[classattr]
    fn __dataclass_fields__(py: Python<'_>) -> PyResult<Py<PyAny>> {
        let shape = py
            .import("dataclasses")?
            .getattr("make_dataclass")?
            .call1((
                "Message",
                (
                    ("topic", "str"),
                    ("body", "bytes"),
                    ("tags", "str | None", field(py, Some(py.None()))?),
                    (
                        "keys",
                        "Sequence[str] | str",
                        field(py, Some(PyTuple::empty(py).into_any().unbind()))?,
                    ),
                    ("properties", "Mapping[str, str]", field(py, None)?),
                    (
                        "flag",
                        "int",
                        field(py, Some(0i32.into_pyobject(py)?.into_any().unbind()))?,
                    ),
                    (
                        "delay_level",
                        "int",
                        field(py, Some(0i32.into_pyobject(py)?.into_any().unbind()))?,
                    ),
                    (
                        "deliver_at",
                        "datetime | int | None",
                        field(py, Some(py.None()))?,
                    ),
                    (
                        "delay",
                        "timedelta | float | None",
                        field(py, Some(py.None()))?,
                    ),
                ),
            ))?;
        Ok(shape.getattr("__dataclass_fields__")?.unbind())
    }

    #[getter]
    fn get_delay_level(&self, py: Python<'_>) -> Py<PyAny> {
        match &self.delay_level {
            Some(d) => d.clone_ref(py),
            None => zero(py),
        }
    }

    #[setter]
    fn set_delay_level(&mut self, value: Option<Py<PyAny>>) -> PyResult<()> {
        match value {
            Some(v) => {
                self.delay_level = Some(v);
                Ok(())
            }
            None => Err(pyo3::exceptions::PyAttributeError::new_err(
                "cannot delete attribute 'delay_level'",
            )),
        }
    }

    #[getter]
    fn get_properties(&mut self, py: Python<'_>) -> Py<PyAny> {
        self.properties_dict(py)
    }

    #[setter]
    fn set_properties(&mut self, value: Option<Py<PyAny>>) -> PyResult<()> {
        match value {
            Some(v) => {
                self.properties = Some(v);
                Ok(())
            }
            None => Err(pyo3::exceptions::PyAttributeError::new_err(
                "cannot delete attribute 'properties'",
            )),
        }
    }

    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(PyTuple::new(py, FIELDS)?.unbind())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let values = Self::values(slf)?;
        let mut out = String::from("Message(");
        for (i, (name, value)) in FIELDS.iter().zip(values).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(name);
            out.push('=');
            out.push_str(&value.bind(py).repr()?.to_string_lossy());
        }
        out.push(')');
        Ok(out)
    }

    /// Field-wise equality with another `Message` of the same class, as a dataclass.
    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if !other.get_type().is(slf.get_type()) {
            return Ok(py.NotImplemented());
        }
        let other = other.cast::<PyMessage>()?;
        let a = PyTuple::new(py, Self::values(slf)?)?;
        let b = PyTuple::new(py, Self::values(other)?)?;
        Ok(a.eq(b)?.into_pyobject(py)?.to_owned().into_any().unbind())
    }

    /// Unhashable, as a mutable dataclass with `eq=True`.
    #[classattr]
    fn __hash__(py: Python<'_>) -> Py<PyAny> {
        py.None()
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<(Py<PyAny>, Py<PyTuple>)> {
        let py = slf.py();
        let args = PyTuple::new(py, Self::values(slf)?)?.unbind();
        Ok((slf.get_type().into_any().unbind(), args))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for v in [
            &self.topic,
            &self.body,
            &self.tags,
            &self.keys,
            &self.flag,
            &self.deliver_at,
            &self.delay,
        ] {
            visit.call(v)?;
        }
        for v in [&self.properties, &self.delay_level].into_iter().flatten() {
            visit.call(v)?;
        }
        Ok(())
    }
}

/// The int 0.
fn zero(py: Python<'_>) -> Py<PyAny> {
    0i32.into_pyobject(py)
        .map_or_else(|_| py.None(), |z| z.into_any().unbind())
}

/// `dataclasses.field(default=...)`, or `field(default_factory=dict)` without a default.
fn field(py: Python<'_>, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    let dataclasses = py.import("dataclasses")?;
    let kwargs = PyDict::new(py);
    match default {
        Some(d) => kwargs.set_item("default", d)?,
        None => kwargs.set_item("default_factory", py.get_type::<PyDict>())?,
    }
    Ok(dataclasses
        .getattr("field")?
        .call((), Some(&kwargs))?
        .unbind())
}
