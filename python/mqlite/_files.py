"""File helpers for client metadata: flock, atomic JSON writes, lenient RocketMQ JSON reads."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_json", "flocked", "open_lock", "read_json_with_backup", "try_flock"]

FILE_MODE = 0o600
DIR_MODE = 0o700
# fastjson writes integer map keys unquoted ({0:12}); quote them so json.loads accepts the text.
_BARE_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if missing; returns it."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


def open_lock(path: Path) -> int:
    """Open (creating) a lock file; the caller closes the descriptor."""
    ensure_dir(path.parent)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)


def try_flock(fd: int, exclusive: bool = True) -> bool:
    """Non-blocking ``flock``; False when another open file description holds a conflicting lock."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def flocked(path: Path, exclusive: bool) -> Iterator[None]:
    """Hold a blocking ``flock`` on ``path`` for the ``with`` block."""
    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    """Write ``data`` as JSON: temp file, fsync, keep ``<name>.bak``, rename, fsync the directory."""
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    text = json.dumps(data, indent=2).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        os.write(fd, text)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if path.exists():
        shutil.copyfile(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    if durable:
        _fsync_dir(path.parent)


def loads_lenient(text: str) -> Any:
    """``json.loads`` that also accepts fastjson's unquoted integer keys."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def read_json_with_backup(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or in ``<path>.bak`` when the file is missing, empty or bad."""
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            continue
        try:
            data = loads_lenient(raw.decode("utf-8")) if raw.strip() else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data, dict):
            return data
    return None
