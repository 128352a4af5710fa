"""Dead-letter and retry views of a consumer group: ``Store.dead_letters(group)`` and
``Store.retries(group)``.

A group's dead-letter topic ``%DLQ%<group>`` (queue 0) is append-only, like every topic. Its
view starts at the group's own committed offset on that topic (``consumerOffset.json``, key
``%DLQ%<group>@<group>``; no consumer of the group reads the topic, so nothing else moves it):
``purge`` moves that offset to the end, which hides everything stored so far; the records stay
in the commit log until the store's retention removes its files. ``redrive`` sends a fresh copy
of each chosen message to its origin topic (body, tags, keys, user properties; reconsume count
0) and leaves the dead letter where it is; ``purge`` after a ``redrive`` of everything empties
the view (a crash between the two re-drives again on the next ``redrive``, never loses).

A retry view lists the records of ``%RETRY%<group>`` the group has not consumed yet (from its
committed offset); retries still waiting for their delay level are in the delay topic and not
listed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from mqlite import _core
from mqlite._context import ClientContext
from mqlite.errors import IllegalArgumentError, MessageNotFoundError
from mqlite.group import check_group
from mqlite.message import Message, MessageExt, MessageQueue, SendResult
from mqlite.offsets import group_offsets, offset_key
from mqlite.producer import Producer
from mqlite.retry import dlq_topic, retry_topic
from mqlite.topic import TopicConfig, check_topic


class Store(Protocol):
    """What the views use of a ``mqlite.Store``."""

    @property
    def _client_context(self) -> ClientContext: ...
    def topics(self) -> list[TopicConfig]: ...
    def offsets(self, mq: MessageQueue) -> tuple[int, int]: ...
    def read_result(self, mq: MessageQueue, offset: int, max_messages: int = ...) -> _core.GetResult: ...
    def producer(self) -> Producer: ...

__all__ = ["DeadLetter", "DeadLetterQueue", "RetryView"]

_READ = 256
# Properties a re-driven copy does not take: every name reserved for the store's and RocketMQ's
# bookkeeping (the retry's, the timers', delivery's), which a user's message may not carry; keys
# and tags go as the message's own fields.
_NOT_REDRIVEN = _core.RESERVED_PROPERTIES


@dataclass(frozen=True)
class DeadLetter:
    """One record of a retry or dead-letter topic, with what the send-back stored on it."""

    message: MessageExt
    """The record as stored (``message.msg_id`` is its own id)."""

    @property
    def msg_id(self) -> str:
        return self.message.msg_id

    @property
    def origin_message_id(self) -> str:
        """The id of the message as first sent."""
        return self.message.get_property("ORIGIN_MESSAGE_ID") or self.message.msg_id

    @property
    def origin_topic(self) -> str:
        """The topic the message was first sent to."""
        return self.message.get_property("RETRY_TOPIC") or self.message.message_queue.topic

    @property
    def error_type(self) -> str | None:
        """The type name of the last failure, when the consumer gave one."""
        return self.message.get_property("MQLITE_ERROR_TYPE")

    @property
    def error(self) -> str | None:
        """The text of the last failure (at most 1,024 bytes), when the consumer gave one."""
        return self.message.get_property("MQLITE_ERROR")

    @property
    def reconsume_times(self) -> int:
        return self.message.reconsume_times

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def keys(self) -> tuple[str, ...]:
        return self.message.keys

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset

    def to_json(self) -> dict[str, object]:
        """A JSON-ready description (the body in base64), as ``export`` writes it."""
        m = self.message
        return {
            "msgId": m.msg_id,
            "originMessageId": self.origin_message_id,
            "originTopic": self.origin_topic,
            "queueOffset": m.queue_offset,
            "storeTimestamp": m.store_timestamp,
            "bornTimestamp": m.born_timestamp,
            "reconsumeTimes": m.reconsume_times,
            "tags": m.tags,
            "keys": list(m.keys),
            "errorType": self.error_type,
            "error": self.error,
            "properties": m.properties,
            "body": base64.b64encode(m.body).decode("ascii"),
        }


class RetryView:
    """The records of one of a group's topics from the group's committed offset on (see the
    module doc)."""

    def __init__(self, store: Store, group: str, topic: str) -> None:
        self._store = store
        self._group = check_group(group)
        self.topic = topic
        self._mq = MessageQueue(topic, 0)

    def _exists(self) -> bool:
        return self.topic in {t.name for t in self._store.topics()}

    def floor(self) -> int:
        """The first offset the view shows: the group's committed offset on the topic, or the
        topic's first."""
        if not self._exists():
            return 0
        low, _ = self._store.offsets(self._mq)
        committed = group_offsets(self._store._client_context.client_root()).get(
            offset_key(self.topic, self._group)).get(0)
        return low if committed is None else max(low, committed)

    def _records(self) -> Iterator[DeadLetter]:
        if not self._exists():
            return
        offset = self.floor()
        while True:
            got = self._store.read_result(self._mq, offset, _READ)
            for m in got.messages:
                yield DeadLetter(m)
            if got.next_offset <= offset or got.next_offset >= got.max_offset:
                return
            offset = got.next_offset

    def list(
        self, origin_topic: str | None = None, *, key: str | None = None, limit: int | None = None
    ) -> list[DeadLetter]:
        """The records, oldest first, of messages first sent to ``origin_topic`` and carrying
        ``key`` (each filter when given), at most ``limit``."""
        if origin_topic is not None:
            check_topic(origin_topic)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise IllegalArgumentError(f"limit must be an int >= 0 or None, got {limit!r}")
        out: list[DeadLetter] = []
        for d in self._records():
            if limit is not None and len(out) >= limit:
                break
            if origin_topic is not None and d.origin_topic != origin_topic:
                continue
            if key is not None and key not in d.keys:
                continue
            out.append(d)
        return out

    def count(self, origin_topic: str | None = None) -> int:
        """How many records ``list`` would return."""
        return len(self.list(origin_topic))

    def get(self, msg_id: str) -> DeadLetter:
        """The record whose own id or origin message id is ``msg_id``; MessageNotFoundError
        when the view has none."""
        for d in self._records():
            if msg_id in (d.msg_id, d.origin_message_id):
                return d
        raise MessageNotFoundError(f"no message {msg_id!r} in {self.topic}")

    def export(self, out: str | Path | IO[str], origin_topic: str | None = None) -> int:
        """Writes the records (filtered by ``origin_topic``) as JSON lines (``to_json``) to a
        file path or a text stream; returns how many."""
        chosen = self.list(origin_topic)
        lines = "".join(json.dumps(d.to_json(), sort_keys=True) + "\n" for d in chosen)
        if isinstance(out, (str, Path)):
            Path(out).write_text(lines, encoding="utf-8")
        else:
            out.write(lines)
        return len(chosen)


class DeadLetterQueue(RetryView):
    """The dead-letter topic of a group (see the module doc)."""

    def __init__(self, store: Store, group: str) -> None:
        super().__init__(store, group, dlq_topic(group))

    def redrive(
        self,
        *,
        all: bool = False,  # noqa: A002 - the natural name at the call site: redrive(all=True)
        ids: Iterable[str] | None = None,
        key: str | None = None,
        origin_topic: str | None = None,
    ) -> list[SendResult]:
        """Sends a fresh copy of the chosen dead letters to their origin topics and returns the
        send results, oldest first. Choose with ``all=True``, or any of ``ids`` (own or origin
        message ids), ``key`` and ``origin_topic`` (a letter must match each one given).
        The dead letters stay in the view: ``purge`` them once re-driven."""
        wanted = None if ids is None else set(ids)
        if ids is not None and isinstance(ids, str):
            raise IllegalArgumentError("ids must be an iterable of message ids, not a str")
        if not all and wanted is None and key is None and origin_topic is None:
            raise IllegalArgumentError("redrive needs all=True, ids, key or origin_topic")
        chosen = [
            d for d in self.list(origin_topic, key=key)
            if wanted is None or d.msg_id in wanted or d.origin_message_id in wanted
        ]
        producer = self._store.producer()
        results: list[SendResult] = []
        for d in chosen:
            m = d.message
            props = {k: v for k, v in m.properties.items() if k not in _NOT_REDRIVEN}
            results.append(producer.send(Message(
                d.origin_topic, m.body, tags=m.tags, keys=list(m.keys) or None,
                properties=props or None, flag=m.flag,
            )))
        return results

    def purge(self) -> int:
        """Hides every dead letter stored so far (the view then starts at the topic's end);
        returns how many it hid."""
        if not self._exists():
            return 0
        start = self.floor()
        _, high = self._store.offsets(self._mq)
        if high > start:
            group_offsets(self._store._client_context.client_root(),
                          durable=self._store._client_context.durable).update(
                offset_key(self.topic, self._group), {0: high})
        return max(0, high - start)


def retries(store: Store, group: str) -> RetryView:
    """The retry view of ``group``."""
    return RetryView(store, group, retry_topic(check_group(group)))
