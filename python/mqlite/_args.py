"""Argument checks of the public API that Python does before the binding sees a value.

Python's ``bool`` is a subclass of ``int``: without a check, ``True`` passes as 1 (queue 1, one
queue, offset 1). Every int argument the Python layer handles itself goes through ``int_arg``;
the binding refuses bools in the int arguments of its own public entry points (``send``,
``MessageQueue``, a message's ``flag``)."""

from __future__ import annotations

__all__ = ["int_arg"]


def int_arg(name: str, value: object) -> int:
    """``value`` if it is an int and not a bool, else TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value
