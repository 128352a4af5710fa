"""Argument checks of the public API that Python does before the binding sees a value, and
the warning of a deprecated call form.

Python's ``bool`` is a subclass of ``int``: without a check, ``True`` passes as 1 (queue 1, one
queue, offset 1). Every int argument the Python layer uses itself goes through ``int_arg``; an
int handed on to the binding is checked there, by its one conversion layer (``args.rs``), which
refuses bools in every int and float argument."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["deprecated", "int_arg"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def int_arg(name: str, value: object) -> int:
    """``value`` if it is an int and not a bool, else TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def deprecated(message: str) -> None:
    """A DeprecationWarning attributed to the first caller outside this package (however many
    of its own frames the call went through)."""
    level = 2
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)
