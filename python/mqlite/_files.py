"""File helpers for client metadata: flock, atomic JSON writes, checked RocketMQ JSON reads.

Every file operation on client metadata (consumer offsets, group and member locks) runs under
``store_io``, which raises an ``OSError`` as the store's typed error, classified as the Rust
core classifies its own: no space (ENOSPC, EDQUOT, EFBIG) is ``StoreFullError``, ENOENT
``StoreNotFoundError``, ENOTDIR ``StoreNotADirectoryError``, any other errno ``StoreIOError``;
each keeps ``errno`` and ``filename``. These are ``OSError`` subclasses (``StoreNotFoundError``
is a ``FileNotFoundError``), so handlers of the built-in classes still match.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from mqlite.errors import (
    ConfigFileError,
    MQError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreNotADirectoryError,
    StoreNotFoundError,
)

__all__ = [
    "Loaded",
    "atomic_write_json",
    "config_error",
    "flocked",
    "fsync_dir",
    "load_json_object",
    "open_lock",
    "read_with_backup",
    "store_error",
    "store_io",
    "try_flock",
]

T = TypeVar("T")

FILE_MODE = 0o600
DIR_MODE = 0o700
# fastjson writes integer map keys unquoted ({0:12}); quote them so json.loads accepts the text.
_BARE_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')
# The errnos the core reports as StoreFullError (its Error::io).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_BY_ERRNO: dict[int, type[StoreIOError]] = {
    errno.ENOENT: StoreNotFoundError,
    errno.ENOTDIR: StoreNotADirectoryError,
}


def store_error(exc: OSError, op: str, path: str | os.PathLike[str] | None = None) -> StoreError:
    """The store's typed error for ``exc``, raised by ``op`` on a client file (``path`` names the
    file when the error does not)."""
    where = exc.filename if exc.filename is not None else path
    shown = "" if where is None else f" {os.fsdecode(where)}"
    reason = exc.strerror or str(exc)
    err: StoreError
    if exc.errno in _NO_SPACE:
        text = f"no space left for{shown}: {reason}"
        err = StoreFullError(text)
    else:
        text = f"{op} failed on{shown}: {reason}" if shown else f"{op} failed: {reason}"
        err = _BY_ERRNO.get(exc.errno or 0, StoreIOError)(text)
    # As the core's errors: OSError's str() is "[Errno n] strerror: filename" once they are set
    # (without a filename: "[Errno n] strerror").
    err.errno, err.strerror = exc.errno, text
    if where is not None:
        err.filename = os.fsdecode(where)
    return err


@contextlib.contextmanager
def store_io(op: str, path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Raise an ``OSError`` of the block as the store's typed error (see ``store_error``);
    usable as a decorator too."""
    try:
        yield
    except MQError:
        raise
    except OSError as exc:
        raise store_error(exc, op, path) from exc


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if missing; returns it."""
    with store_io("create_dir", path):
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


def open_lock(path: Path) -> int:
    """Open (creating) a lock file; the caller closes the descriptor."""
    ensure_dir(path.parent)
    with store_io("open", path):
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)


def try_flock(fd: int, exclusive: bool = True) -> bool:
    """Non-blocking ``flock``; False when another open file description holds a conflicting lock."""
    with store_io("flock"):
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
        with store_io("flock", path):
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync of a directory: the entries created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The kill points of this module (crash tests): ``offsets.before_rename`` is reached when a
#: JSON file's temp copy is written and synced, before the ``.bak`` copy and the rename.
KILL_POINTS = ("offsets.before_rename",)

#: Crash tests only: when set, called as ``kill_hook(point, path)`` at each kill point (``path``:
#: the file being replaced); the crash loop's child sets it to abort the process there. ``None``
#: (always, outside that test): nothing happens.
kill_hook: Callable[[str, Path], None] | None = None


def atomic_write_json(path: Path, data: Any, *, durable: bool = True, rotate: bool = True) -> None:
    """Write ``data`` as JSON: temp file, fsync, keep ``<name>.bak``, rename, fsync the directory.

    ``rotate=False`` skips keeping the current file as ``.bak``: callers pass it when the
    current file could not be read, so that the ``.bak`` they read instead is not overwritten
    with it."""
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    text = json.dumps(data, indent=2).encode()
    with store_io("write", tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            view = memoryview(text)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    if kill_hook is not None:
        kill_hook("offsets.before_rename", path)
    with store_io("replace", path):
        if rotate and path.exists():
            shutil.copyfile(path, path.with_name(path.name + ".bak"))
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)


def loads_lenient(text: str) -> Any:
    """``json.loads`` that also accepts fastjson's unquoted integer keys."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def load_json_object(path: Path, raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw`` (the bytes of ``path``; fastjson's unquoted integer keys
    accepted). Raises ConfigFileError when it is not UTF-8 JSON, nests too deep, holds a number
    Python will not convert, or is not an object."""
    try:
        data = loads_lenient(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise config_error(path, "", f"not valid JSON: {reason}") from None
    if not isinstance(data, dict):
        raise config_error(path, "", f"expected a JSON object, found {type(data).__name__}")
    return data


def config_error(path: Path, field: str, reason: str) -> ConfigFileError:
    """ConfigFileError for the value at ``field`` (a JSON path; empty: the whole file)."""
    where = f"{path}: {field}" if field else str(path)
    return ConfigFileError(f"unreadable {where}: {reason}", path=str(path), field=field)


@dataclass(frozen=True, slots=True)
class Loaded(Generic[T]):
    """A config file's content as read by ``read_with_backup``. ``main_unreadable``: it came
    from the ``.bak`` because the main file exists but does not decode (a write must then not
    rotate the main file into the ``.bak``)."""

    value: T
    main_unreadable: bool


def read_with_backup(path: Path, decode: Callable[[Path, bytes], T]) -> Loaded[T] | None:
    """``decode`` of ``path``, or of ``<path>.bak`` when the file is missing, blank or does not
    decode (``decode`` raises ConfigFileError), as RocketMQ reads its config files.

    None only when neither file holds anything. A file that does not decode is never taken as
    empty: without a ``.bak`` that decodes, its error is raised (the main file's when both are
    bad, with what is wrong with the ``.bak`` appended)."""
    errors: list[ConfigFileError] = []
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            with store_io("read", p):
                raw = p.read_bytes()
        except FileNotFoundError:
            continue
        if not raw.strip():
            continue
        try:
            return Loaded(decode(p, raw), main_unreadable=p != path)
        except ConfigFileError as e:
            errors.append(e)
    if not errors:
        return None
    first = errors[0]
    if Path(first.path) != path:
        raise first
    if len(errors) == 1:
        also = "; its .bak is missing or empty"
    elif _fault(errors[1]) == _fault(first):
        also = "; its .bak has the same fault"
    else:
        also = f"; its .bak is unreadable too ({errors[1]})"
    raise ConfigFileError(first.message + also, path=first.path, field=first.field)


def _fault(e: ConfigFileError) -> str:
    """What ``config_error`` said is wrong, without the file's name."""
    return e.message.removeprefix(f"unreadable {e.path}")
