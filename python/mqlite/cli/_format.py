"""How a stored message is printed: as a JSON object (every header and property) or through a
kcat-like format string (``-f``)."""

from __future__ import annotations

import argparse
import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqlite.message import MessageExt

DEFAULT_FORMAT = "%t[%p]@%o %g %k: %s\\n"


def _body(m: MessageExt) -> tuple[bytes, str | None]:
    """The body as sent, or the stored bytes and the reason when they do not decompress."""
    from mqlite.errors import CompressionError

    try:
        return m.body, None
    except CompressionError as e:
        return m.raw_body, str(e)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _props(m: MessageExt) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(m.properties.items()))


# One character after ``%`` each; docs/cli.md, "Format tokens", lists them.
TOKENS: dict[str, Callable[[MessageExt], str]] = {
    "t": lambda m: m.topic,
    "p": lambda m: str(m.queue_id),
    "o": lambda m: str(m.queue_offset),
    "k": lambda m: ",".join(m.keys),
    "g": lambda m: m.tags or "",
    "s": lambda m: _text(_body(m)[0]),
    "S": lambda m: str(len(_body(m)[0])),
    "T": lambda m: str(m.store_timestamp),
    "B": lambda m: str(m.born_timestamp),
    "i": lambda m: m.msg_id,
    "I": lambda m: m.offset_msg_id,
    "c": lambda m: str(m.commit_log_offset),
    "r": lambda m: str(m.reconsume_times),
    "h": _props,
}
_PIECE = re.compile(r"%(.)|\\(.)|([^%\\]+)|(.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "0": "\0"}
Piece = Callable[["MessageExt"], str]


def compile_format(text: str) -> list[Piece]:
    """An argparse type: the format string as a list of pieces; an unknown ``%x`` or ``\\x`` is
    a usage error naming it."""
    pieces: list[Piece] = []
    for token, escape, literal, lone in _PIECE.findall(text):
        if token:
            if token == "%":
                pieces.append(_const("%"))
            elif token in TOKENS:
                pieces.append(TOKENS[token])
            else:
                raise argparse.ArgumentTypeError(
                    f"unknown format token %{token} (known: %{' %'.join(TOKENS)} %%)"
                )
        elif escape:
            if escape not in _ESCAPES:
                raise argparse.ArgumentTypeError(f"unknown escape \\{escape} in format")
            pieces.append(_const(_ESCAPES[escape]))
        else:
            if lone in ("%", "\\"):
                raise argparse.ArgumentTypeError(f"format ends with a lone {lone!r}")
            pieces.append(_const(literal or lone))
    return pieces


def _const(s: str) -> Piece:
    return lambda _m: s


def render(pieces: list[Piece], m: MessageExt) -> str:
    return "".join(p(m) for p in pieces)


def as_dict(m: MessageExt) -> dict[str, Any]:
    """Every header and property of ``m``; a body that is not UTF-8 comes in base64, with
    ``body_encoding`` saying which."""
    raw, error = _body(m)
    try:
        body, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(raw).decode("ascii"), "base64"
    out: dict[str, Any] = {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "tags": m.tags,
        "keys": list(m.keys),
        "properties": m.properties,
        "flag": m.flag,
        "sysflag": m.sysflag,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "reconsume_times": m.reconsume_times,
        "store_size": m.store_size,
        "body": body,
        "body_encoding": encoding,
    }
    if error is not None:
        out["body_error"] = error
    return out


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC time to the millisecond; ``None`` stays ``None``."""
    if ms is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def duration(ms: int) -> str:
    """A duration in milliseconds as an operator reads it: ``850ms``, ``12.3s``, ``4m05s``,
    ``2h07m``, ``3d04h``."""
    s = ms // 1000
    if ms < 1000:
        return f"{ms}ms"
    if s < 60:
        return f"{ms / 1000:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
