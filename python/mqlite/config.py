"""Validation of ``mqlite.open`` options before they reach the Rust core."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

from mqlite.errors import InvalidConfigError

__all__ = ["existing_sizes", "fit_max_message", "store_options"]

_DEFAULT_MAX_MESSAGE = 4 << 20
# Room a record needs beyond its body, as the core's max_record_len counts it: the fixed header
# (91 bytes), the topic length byte, a system topic (255) and properties (32,767) at their
# limits, and the 8-byte END_OF_FILE reserve after it.
_RECORD_OVERHEAD = 91 + 1 + 255 + 32_767 + 8

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
        raise InvalidConfigError(f"{name} must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidConfigError(f"{name} must be a finite number {bound}, got {value!r}")
    return number


def store_options(options: Mapping[str, object]) -> dict[str, Any]:
    """Check each option's type and range; drop the ``None`` ones (the core's default applies)."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name in _BOOLS:
            if not isinstance(value, bool):
                raise InvalidConfigError(f"{name} must be a bool, not {type(value).__name__}")
            out[name] = value
        elif name in _INTS:
            low, high = _INTS[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidConfigError(f"{name} must be an int, not {type(value).__name__}")
            if value < low or (high is not None and value > high):
                limit = f">= {low}" if high is None else f"in [{low}, {high:#o}]"
                raise InvalidConfigError(f"{name} must be {limit}, got {value!r}")
            out[name] = value
        elif name == "flush":
            if value not in ("async", "sync"):
                raise InvalidConfigError(f"flush must be 'async' or 'sync', got {value!r}")
            out[name] = value
        elif name == "wait":
            out[name] = _number(name, value, positive=False)
        elif name == "retention_hours":
            out[name] = _number(name, value, positive=True)
        else:
            raise InvalidConfigError(f"unknown option {name!r}")
    return out


def _file_size(directory: str, whole: int = 1 << 20) -> tuple[int, bool] | None:
    """The size of the store files (20-digit names, regular files, not symlinks) in
    ``directory`` and whether the names prove it, or None.

    Files are contiguous, so with two or more the step between the first two names is the size,
    proven when one of those two files has it (one may be cut short; a step neither has means a
    missing file, and the first file's size is taken). A lone file counts if its size is a
    multiple of ``whole`` or divides its start offset (the name), as a file starts at a multiple
    of the file size; it is not proof, since a lone file may be cut short. (A kill while the
    last file was being preallocated can leave it short, and the core repairs that to the
    configured size.) A lone file is what retention leaves, and what a new store with small
    files has."""
    try:
        with os.scandir(directory) as it:
            names = sorted(e.name for e in it if len(e.name) == 20 and e.name.isdigit()
                           and e.is_file(follow_symlinks=False))
    except OSError:
        return None
    if not names:
        return None
    try:
        sizes = [os.lstat(os.path.join(directory, n)).st_size for n in names[:2]]
    except OSError:
        return None
    if len(names) > 1:
        step = int(names[1]) - int(names[0])
        if step in sizes:
            return step, True
    size = sizes[0]
    if size > 0 and (len(names) > 1 or size % whole == 0 or int(names[0]) % size == 0):
        return size, False
    return None


def _queue_dirs(root: str) -> Iterator[str]:
    """``<root>/<topic>/<queue id>`` directories, sorted."""
    try:
        topics = sorted(os.listdir(root))
    except OSError:
        return
    for topic in topics:
        try:
            queues = sorted(os.listdir(os.path.join(root, topic)))
        except OSError:
            continue
        for q in queues:
            yield os.path.join(root, topic, q)


def fit_max_message(options: dict[str, Any]) -> None:
    """With a commit-log file too small for the default 4 MiB message limit (given, or found
    on disk) and no limit given, the limit becomes the largest message such a file holds."""
    size = options.get("commit_log_file_size")
    if (isinstance(size, int) and options.get("max_message_size") is None
            and size < _DEFAULT_MAX_MESSAGE + _RECORD_OVERHEAD):
        options["max_message_size"] = max(1, size - _RECORD_OVERHEAD)


def existing_sizes(path: str, given: Mapping[str, object]) -> dict[str, int]:
    """File sizes of an existing store that the caller left unset: a store keeps the sizes it
    was created with, so reopening it (or following it read-only) needs no repeated options.
    Sizes given explicitly are left to the core, which rejects a mismatch (except that a
    consume queue of one file shorter than the size given is rebuilt from the commit log: a
    lone file may be one cut short)."""
    out: dict[str, int] = {}
    if path == ":memory:":
        return out
    if given.get("commit_log_file_size") is None:
        found = _file_size(os.path.join(path, "commitlog"))
        if found is not None:
            out["commit_log_file_size"] = found[0]
    if given.get("consume_queue_file_units") is None:
        # The first size a queue's names prove, else the first a lone file suggests: a file
        # taken for whole that was cut short would make every longer file an error.
        units: int | None = None
        for queue_dir in _queue_dirs(os.path.join(path, "consumequeue")):
            found = _file_size(queue_dir, 20 * 1000)
            if found is None or found[0] % 20:
                continue
            if found[1]:
                units = found[0] // 20
                break
            if units is None:
                units = found[0] // 20
        if units is not None:
            out["consume_queue_file_units"] = units
    return out
