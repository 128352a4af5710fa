"""Ctrl-C reaches a thread blocked in a call that waits without the GIL.

Each wait runs in a fresh interpreter (a real process, so a real SIGINT and Python's own
handler). A watcher thread of that process sends the SIGINT only once it sees the main thread
inside the wait, then the main thread must raise KeyboardInterrupt although the wait itself has
no end (or one an hour away).

How the watcher knows: it runs Python code, so it holds the GIL and the main thread does not.
- ``Store.wait_for`` and ``PollToken.acquire``: the main thread's innermost frame is on the
  line of the native call, and no bytecode on that line before the call can give the GIL up,
  so the main thread is inside the call.
- ``mqlite.open(wait=)``: the process has the store's lock file open, which only the lock wait
  does, and the lock is held by the test process for the whole test.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import mqlite

RunPy = Callable[..., subprocess.CompletedProcess[str]]

CHILD = r"""
import inspect, json, os, signal, sys, threading, time
import mqlite
from mqlite import MessageQueue, _core

locked, own = sys.argv[1], sys.argv[2]
MAIN = threading.main_thread().ident
outcome = {}

def interrupt_once(inside):
    # Polls a condition (not a guess at a delay), then sends the one SIGINT.
    def watch():
        while not inside():
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=watch, daemon=True).start()

def at_call(code, line):
    def inside():
        frame = sys._current_frames().get(MAIN)
        return frame is not None and frame.f_code is code and frame.f_lineno == line
    return inside

def lock_file_open():
    target = os.path.join(locked, "lock")
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                return True
        except OSError:
            pass
    return False

def attempt(name, call, inside):
    interrupt_once(inside)
    try:
        call()
        outcome[name] = "returned"
    except KeyboardInterrupt:
        outcome[name] = "KeyboardInterrupt"

store = mqlite.open(own)
store.create_topic("t", 1)
lines, first = inspect.getsourcelines(mqlite.Store.wait_for)
line = first + next(i for i, text in enumerate(lines) if "._live().wait_for(" in text)
attempt("Store.wait_for", lambda: store.wait_for({MessageQueue("t", 0): 0}, None),
        at_call(mqlite.Store.wait_for.__code__, line))

token = _core.PollToken(0.05)
held, release = threading.Event(), threading.Event()
def holder():
    token.acquire(lambda: True)
    held.set()
    release.wait()
    token.release()
threading.Thread(target=holder, daemon=True).start()
held.wait()
def take():
    return token.acquire(lambda: True)
attempt("PollToken.acquire", take, at_call(take.__code__, take.__code__.co_firstlineno + 1))
release.set()

attempt("open(wait=)", lambda: mqlite.open(locked, wait=3600), lock_file_open)
store.close()
print(json.dumps(outcome), flush=True)
"""


def test_ctrl_c_interrupts_waits_without_an_end(tmp_path: Path, run_py: RunPy) -> None:
    locked = tmp_path / "locked"
    # The only writer: the child's open(wait=) must wait for it.
    with mqlite.open(locked, exclusive=True):
        done = run_py(CHILD, locked, tmp_path / "own", timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "Store.wait_for": "KeyboardInterrupt",
        "PollToken.acquire": "KeyboardInterrupt",
        "open(wait=)": "KeyboardInterrupt",
    }
