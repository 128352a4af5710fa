"""The model of scheduled delivery and retries shared by the state machines
(test_state_machine.py, test_shared_state_machine.py).

Every process runs on a manual clock (``mqlite.testing.ManualClock``) that the test moves, so
due times are exact and nothing waits. The model keeps, per queue, the bodies a queue holds in
order (the machine's own model dict, which the delivered copies join), the messages waiting for
their time, and per original message how many times a consumer got it. After the clock moves
and the leader delivers, ``check_delivered`` asserts that each queue holds exactly the newly due
messages after the model's, each once, intact and stored at or after its due time.

Each timer (a scheduled send or a retry) carries its identity (timer id, unique id, offset id);
a delivered or cancelled one moves to ``done``. ``named`` picks the naming arguments of a cancel
or reschedule and the timers they name; ``changed`` checks the answers against them and
applies them; ``listed`` is what a listing must return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

import mqlite
from mqlite import MessageQueue

DELAY_LEVELS = "1s 5s 30s"
LEVEL_MS = (1_000, 5_000, 30_000)
GROUP = "g"
RETRY = (f"%RETRY%{GROUP}", 0)
DLQ = (f"%DLQ%{GROUP}", 0)
# Deliveries of a message that fails every time: the original, then MAX_RECONSUME retries.
MAX_RECONSUME = 1
# The manual clock's start.
T0 = 1_700_000_000_000

kinds = st.sampled_from(["delay_level", "delay", "deliver_at"])
levels = st.integers(1, len(LEVEL_MS))
offsets_ms = st.integers(-2_000, 40_000)
keys = st.lists(st.sampled_from(["k1", "k2", "k3"]), max_size=2, unique=True)
tags = st.sampled_from([None, "A", "B"])
user_props = st.dictionaries(st.sampled_from(["p", "q"]), st.text("xyz", min_size=1, max_size=3), max_size=2)
advances = st.sampled_from([0, 1, 999, 1_000, 4_999, 5_000, 30_000]) | st.integers(0, 40_000)
send_back_levels = st.sampled_from([0, 1, 2])  # 0: the automatic level


def when(kind: str, level: int, ms: int, now: int) -> tuple[dict[str, int], int]:
    """The send's time as JSON-able fields (``delay_ms`` for ``delay``), and its due time."""
    if kind == "delay_level":
        return {"delay_level": level}, now + LEVEL_MS[level - 1]
    if kind == "delay":
        return {"delay_ms": max(ms, 0)}, now + max(ms, 0)
    return {"deliver_at": now + ms}, now + ms


def message_kwargs(fields: dict[str, int]) -> dict[str, Any]:
    """``when``'s fields as ``Message`` keyword arguments."""
    out: dict[str, Any] = dict(fields)
    if "delay_ms" in out:
        out["delay"] = timedelta(milliseconds=out.pop("delay_ms"))
    return out


@dataclass
class Pending:
    """A message waiting for its time: where it goes, what it must look like there, when."""

    dest: tuple[str, int]
    due: int
    body: bytes
    keys: tuple[str, ...]
    tags: str | None
    props: dict[str, str]
    topic: str  # the topic a consumer sees (a retry's original topic)
    reconsume_times: int = 0
    origin: str = ""  # the original message's id (retries)
    extra: dict[str, str] = field(default_factory=dict)  # properties the copy must carry
    # Its timer identity (``PendingTimer``): the id a delivered copy carries as
    # ``MQLITE_TIMER_ID``, its message's unique id and the offset id of its record.
    id: str = ""
    unique_id: str | None = None
    offset_msg_id: str = ""

    def matches(self, m: mqlite.MessageExt) -> bool:
        return (
            m.body == self.body and m.keys == self.keys and m.tags == self.tags
            and m.topic == self.topic and m.reconsume_times == self.reconsume_times
            and all(m.properties.get(k) == v for k, v in {**self.props, **self.extra}.items())
            and m.store_timestamp >= self.due  # never early
            and (not self.id or m.properties.get("MQLITE_TIMER_ID") == self.id)
        )


class ScheduledModel:
    def __init__(self, queues: dict[tuple[str, int], list[bytes]]) -> None:
        self.queues = queues
        queues.setdefault(RETRY, [])
        queues.setdefault(DLQ, [])
        self.pending: list[Pending] = []
        self.deliveries: dict[str, int] = {}
        self.failed: set[tuple[str, int, int]] = set()
        # Timers no longer pending, by id: "delivered" or "cancelled", and the timer.
        self.done: dict[str, tuple[str, Pending]] = {}
        # The msg_ids of messages sent to be due at once: never timers (a retry of one shares it).
        self.not_timers: list[str] = []

    def sent(self, dest: tuple[str, int], now: int, due: int, result: tuple[int, bool], body: bytes,
             keys: list[str], tags: str | None, props: dict[str, str], timer_id: str = "",
             ids: tuple[str, str] = ("", "")) -> str:
        """Records a scheduled send's acknowledgement ``(queue offset, scheduled)``; returns
        the event to count. ``timer_id`` and ``ids`` (the send's ``msg_id``, ``offset_msg_id``)
        name the timer for cancels (empty: not tracked)."""
        qo, scheduled = result
        assert scheduled == (due > now), (due, now)
        if not scheduled:  # due at once: stored in its queue directly
            q = self.queues[dest]
            assert qo == len(q)
            q.append(body)
            return "at once"
        self.pending.append(Pending(dest, due, body, tuple(keys), tags, props, dest[0], id=timer_id,
                                    unique_id=ids[0] or None, offset_msg_id=ids[1]))
        return "scheduled"

    def check_delivered(self, store: mqlite.Store, now: int) -> bool:
        """After the clock reads ``now`` and the leader delivered: each queue holds, after the
        model's messages, exactly the pending ones due by now, once each, as sent. True when
        any was delivered."""
        any_delivered = False
        for dest in {p.dest for p in self.pending}:
            q = self.queues[dest]
            copies = store.read_result(MessageQueue(*dest), len(q), 1000).messages
            due = [p for p in self.pending if p.dest == dest and p.due <= now]
            assert len(copies) == len(due), (dest, now, len(copies), due)
            for m in copies:
                match = next((p for p in due if p.matches(m)), None)
                assert match is not None, (dest, m, m.properties, due)
                due.remove(match)
                self.pending.remove(match)
                if match.id:
                    self.done[match.id] = ("delivered", match)
                q.append(m.body)
                if dest == RETRY:
                    self.deliveries[match.origin] += 1
                any_delivered = True
        return any_delivered

    def to_fail(self, pick: int, retried: bool) -> tuple[str, int, int] | None:
        """A message a consumer may fail (a retry when ``retried`` and there is one): one not
        failed yet, not a dead letter."""
        cands = [(t, q, i) for (t, q), msgs in self.queues.items() if (t, q) != DLQ
                 for i in range(len(msgs)) if (t, q, i) not in self.failed]
        retries = [c for c in cands if c[:2] == RETRY]
        cands = retries if retried and retries else cands
        return cands[pick % len(cands)] if cands else None

    def failed_one(self, store: mqlite.Store, where: tuple[str, int, int], m: mqlite.MessageExt, delay: int,
                   now: int, sent: tuple[str, bool, int, int]) -> str:
        """Checks and records the send-back ``sent`` (topic, dead, reconsume times, level) of
        message ``m`` at ``where``, failed with level ``delay`` at ``now``; returns the event."""
        origin = m.properties.get("ORIGIN_MESSAGE_ID", m.msg_id)
        seen = self.deliveries.setdefault(origin, 1)
        assert seen == m.reconsume_times + 1, (seen, m)
        self.failed.add(where)
        user = {k: v for k, v in m.properties.items() if k in ("p", "q")}
        if seen == MAX_RECONSUME + 1:
            # Exactly max + 1 deliveries, then the dead-letter queue, at once.
            assert sent[:2] == (DLQ[0], True), sent
            q = self.queues[DLQ]
            [d] = store.read_result(MessageQueue(*DLQ), len(q), 10).messages
            assert (d.body, d.keys, d.tags, d.properties.get("RETRY_TOPIC")) == (m.body, m.keys, m.tags, m.topic)
            assert all(d.properties.get(k) == v for k, v in user.items())
            q.append(d.body)
            return "dead letter"
        level = delay or min(3 + m.reconsume_times, len(LEVEL_MS))
        assert sent == (RETRY[0], False, m.reconsume_times + 1, level), sent
        retry = Pending(
            RETRY, now + LEVEL_MS[level - 1], m.body, m.keys, m.tags, user, m.topic,
            reconsume_times=m.reconsume_times + 1, origin=origin, extra={"ORIGIN_MESSAGE_ID": origin},
        )
        if all(p.id for p in self.pending):
            # The retry is a timer of its level: the listing's one timer the model does not know.
            known = {p.id for p in self.pending}
            [t] = [t for t in store.list_timers() if t.id not in known]
            assert (t.id.startswith(f"L{level}:"), t.due_ms, t.keys) == (True, retry.due, m.keys), t
            retry.id, retry.unique_id, retry.offset_msg_id = t.id, t.unique_id, t.offset_msg_id
        self.pending.append(retry)
        return f"retry {m.reconsume_times + 1}"


    # -- cancel, reschedule, list ------------------------------------------------------------

    def timers(self) -> list[tuple[str, Pending]]:
        """Every timer the model knows with its state: "pending", "delivered", "cancelled"."""
        return [("pending", p) for p in self.pending if p.id] + list(self.done.values())

    def named(self, how: str, pick: int, key: str) -> tuple[dict[str, Any], list[tuple[str, Pending]], bool]:
        """A cancel's or reschedule's naming arguments for ``how`` ("offset id", "msg id",
        "key", "key and topic", "unknown id": a random one
        or the msg_id of a message sent to be due at once) with the timer ``pick`` selects, the timers they
        name (state, timer) and whether the answer is exact (an offset id names one timer; a
        unique id or key names every timer that has it, of which the store answers for the
        pending ones and, when there are none, for at least one done one)."""
        known = self.timers()
        if how == "unknown id" and self.not_timers and pick % 2:
            msg_id = self.not_timers[pick // 2 % len(self.not_timers)]
            retries = [x for x in known if x[1].unique_id == msg_id]
            return {"msg_id": msg_id}, retries, not retries
        if how == "unknown id" or not known:
            return {"msg_id": f"{pick:032X}"}, [], True
        state, t = known[pick % len(known)]
        if how == "offset id":
            return {"msg_id": t.offset_msg_id}, [(state, t)], True
        if how == "msg id":
            return {"msg_id": t.unique_id}, [x for x in known if x[1].unique_id == t.unique_id], False
        key = t.keys[pick % len(t.keys)] if t.keys else key
        if how == "key":
            return {"key": key}, [x for x in known if key in x[1].keys], False
        return {"key": key, "topic": t.dest[0]}, [x for x in known if key in x[1].keys and x[1].dest[0] == t.dest[0]], False

    def changed(self, named: list[tuple[str, Pending]], exact: bool, answers: list[Any], now: int,
                due: int | None) -> bool:
        """Checks a cancel's (``due`` None) or reschedule's answers against the timers it named
        and applies them: a pending timer is cancelled (it never arrives) or moved to ``due``;
        a done one answers its state. True when a change was written."""
        from mqlite import TimerOutcome as O
        if not named:
            assert [(a.outcome, a.id, a.timer) for a in answers] == [(O.NOT_FOUND, None, None)], answers
            return False
        by_id = {t.id: (state, t) for state, t in named}
        got = {a.id: a for a in answers}
        assert len(got) == len(answers) and set(got) <= set(by_id), (answers, by_id)
        if exact:
            assert set(got) == set(by_id), (answers, by_id)
        elif pending := {i for i, (state, _) in by_id.items() if state == "pending"}:
            assert pending <= set(got), (answers, by_id)
        else:
            assert got, (answers, by_id)
        wrote = False
        for i, a in got.items():
            state, t = by_id[i]
            assert a.timer is not None and (a.timer.keys, a.timer.unique_id) == (t.keys, t.unique_id), (a, t)
            if state != "pending":
                want = O.ALREADY_DELIVERED if state == "delivered" else O.ALREADY_CANCELLED
                assert a.outcome is want, (a, state)
                continue
            wrote = True
            if due is None:
                assert a.outcome is O.CANCELLED, a
                self.pending.remove(t)
                self.done[i] = ("cancelled", t)
            else:
                assert (a.outcome, a.timer.due_ms) == (O.RESCHEDULED, due), a
                assert due > now  # the rule moves to a future time: only ``advance`` delivers
                t.due = due
        return wrote

    def listed(self, topic: str | None, key: str | None, lo: int | None, hi: int | None) -> list[Pending]:
        """The pending timers a listing with these filters returns, the earliest first."""
        return sorted(
            (p for p in self.pending if (topic is None or p.dest[0] == topic) and (key is None or key in p.keys)
             and (lo is None or p.due >= lo) and (hi is None or p.due < hi)),
            key=lambda p: p.due,
        )


def deliver_due(store: mqlite.Store) -> None:
    """Runs the leader's delivery until nothing more is due: two passes at least, as the
    delay-level pass reads its queues as dispatched and the timer pass (after it) dispatches
    first."""
    calls, delivered = 0, 1
    while delivered or calls < 2:
        delivered = store.deliver_due()
        calls += 1
        assert calls < 50, "deliver_due keeps delivering"
