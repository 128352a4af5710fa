"""``mqlite.testing.ManualClock``: a store opened with ``clock=`` reads every time from it (the
producer's born and store timestamps included), and ``Store.deliver_due()`` delivers what the
clock makes due, so scheduled delivery is tested without waiting."""

from __future__ import annotations

from pathlib import Path

import pytest

import mqlite
from mqlite import Message, MessageQueue
from mqlite.errors import IllegalArgumentError, InvalidConfigError, StoreReadOnlyError
from mqlite.testing import ManualClock

T0 = 1_700_000_000_000


@pytest.mark.parametrize("exclusive", [True, False])
def test_sends_read_the_store_clock_and_delivery_follows_it(tmp_path: Path, exclusive: bool) -> None:
    clock = ManualClock(T0)
    with mqlite.open(tmp_path / "s", clock=clock, exclusive=exclusive, delay_levels="1s 5s") as store:
        store.create_topic("t", 1)
        p = store.producer()
        now = p.send(Message("t", b"now"))
        p.send_batch([b"batch"], topic="t")
        p.send(Message("t", b"level", delay_level=1))
        p.send(Message("t", b"delay", delay=2.5))
        p.send(Message("t", b"at", deliver_at=T0 + 3_000))
        mq = MessageQueue("t", 0)

        def stored() -> list[tuple[bytes, int, int]]:
            return [(m.body, m.born_timestamp - T0, m.store_timestamp - T0)
                    for m in store.read_result(mq, 0, 10).messages]

        assert now.queue_offset == 0
        assert stored() == [(b"now", 0, 0), (b"batch", 0, 0)]
        delivered = []
        for to, expect in [(999, []), (1_000, [b"level"]), (2_499, []), (2_500, [b"delay"]),
                           (2_999, []), (3_000, [b"at"])]:
            clock.set_ms(T0 + to)
            store.deliver_due()
            delivered += [(body, 0, to) for body in expect]
            assert stored() == [(b"now", 0, 0), (b"batch", 0, 0), *delivered], f"at +{to} ms"
        assert clock.now_ms == T0 + 3_000
        assert store.deliver_due() == 0


def test_deliver_due_refuses_a_read_only_store_and_delivers_in_the_writer(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with mqlite.open(tmp_path / "s", clock=clock) as store:
        store.producer().send(Message("t", b"x", delay=1))
        with mqlite.open(tmp_path / "s", read_only=True) as ro, pytest.raises(StoreReadOnlyError):
            ro.deliver_due()
        clock.advance_ms(1_000)
        assert store.deliver_due() == 1


def test_bad_clocks_and_moves_are_typed_errors() -> None:
    with pytest.raises(InvalidConfigError) as err:
        mqlite.open(":memory:", clock=T0)  # type: ignore[arg-type]
    assert err.value.field == "clock"
    clock = ManualClock(T0)
    with pytest.raises(IllegalArgumentError):
        clock.advance_ms(-1)
    with pytest.raises(IllegalArgumentError):
        clock.set_ms(2**70)
    with pytest.raises(TypeError):
        clock.advance_ms(1.5)  # type: ignore[arg-type]
    assert clock.now_ms == T0
    clock.set_ms(5)
    clock.advance_ms(10)
    assert (clock.now_ms, repr(clock)) == (15, "ManualClock(now_ms=15)")
