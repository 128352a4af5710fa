"""Type checks of ``mqlite.open`` options before they reach the Rust core.

Only what Rust's signature cannot express is checked here (a bool where an int is expected, a
float, a negative number). Defaults, ranges and the store's file sizes are the core's: an option
left ``None`` is passed on as ``None``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mqlite.errors import InvalidConfigError

__all__ = ["store_options"]

# name -> (minimum, maximum or None)
_INTS: dict[str, tuple[int, int | None]] = {
    "flush_interval_ms": (1, None),
    "sync_flush_timeout_ms": (1, None),
    "commit_log_file_size": (1, None),
    "consume_queue_file_units": (1, None),
    "max_message_size": (1, None),
    "default_queues": (1, None),
    "file_mode": (0, 0o777),
    "dir_mode": (0, 0o777),
}
_BOOLS = ("read_only", "auto_create_topics")


def _number(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidConfigError(f"{name} must be a number, not {type(value).__name__}", field=name)
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidConfigError(f"{name} must be a finite number {bound}, got {value!r}", field=name)
    return number


def store_options(options: Mapping[str, object]) -> dict[str, Any]:
    """Check each option's type and sign; drop the ``None`` ones (the core's default applies)."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name in _BOOLS:
            if not isinstance(value, bool):
                raise InvalidConfigError(f"{name} must be a bool, not {type(value).__name__}", field=name)
            out[name] = value
        elif name in _INTS:
            low, high = _INTS[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidConfigError(f"{name} must be an int, not {type(value).__name__}", field=name)
            if value < low or (high is not None and value > high):
                limit = f">= {low}" if high is None else f"in [{low}, {high:#o}]"
                raise InvalidConfigError(f"{name} must be {limit}, got {value!r}", field=name)
            out[name] = value
        elif name == "flush":
            if value not in ("async", "sync"):
                raise InvalidConfigError(f"flush must be 'async' or 'sync', got {value!r}", field=name)
            out[name] = value
        elif name == "wait":
            out[name] = _number(name, value, positive=False)
        elif name == "retention_hours":
            out[name] = _number(name, value, positive=True)
        else:
            raise InvalidConfigError(f"unknown option {name!r}", field=name)
    return out
