"""Hand-off: a send that wakes a consumer idle in ``poll`` gives it the CPU at once.

The child process pins itself to one CPU, so the producer and the consumer share it, as the
scheduler tends to arrange on small machines. Without the hand-off the woken consumer runs only
when the scheduler preempts the producer (about a third of the time on the machines measured)
or the producer next blocks; with it, the consumer has the message before ``send`` returns.
"""

from __future__ import annotations

import json
import os

import pytest

# A scheduler property of this machine, not a correctness one: the perf tier.
pytestmark = pytest.mark.perf

CHILD = r"""
import json, os, sys, threading, time
import mqlite

os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
store = mqlite.open(sys.argv[1])
store.create_topic("t", queues=1)
consumer = store.pull_consumer("g", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
consumer.subscribe("t")
got = []

def consume():
    while len(got) < ROUNDS:
        got.extend(int(m.body) for m in consumer.poll(1.0))

ROUNDS = 40
t = threading.Thread(target=consume)
t.start()
producer = store.producer()
early = 0
for i in range(ROUNDS):
    time.sleep(0.005)  # the consumer is idle in poll well past the hand-off threshold
    producer.send(mqlite.Message("t", str(i).encode()), queue_id=0)
    early += len(got) > i
t.join(10)
consumer.close()
store.close()
print(json.dumps({"early": early, "rounds": ROUNDS, "got": got}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_an_idle_consumer_has_the_message_before_send_returns(run_py, tmp_path):
    r = run_py(CHILD, tmp_path / "store")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["got"] == list(range(out["rounds"]))
    # Allow for the odd interrupt or timer tick landing between the wake-up and the yield.
    assert out["early"] >= out["rounds"] * 0.8, out
