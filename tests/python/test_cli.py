"""The ``mqlite`` command line, driven as a user would: ``python -m mqlite`` in real subprocesses
on real stores, the terminal width fixed through ``COLUMNS``, outputs and exit codes checked, bad
input included. Also the runnable examples."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import mqlite
from mqlite import Message, MessageQueue
from mqlite.cli import main
from mqlite.cli._format import compile_format
from mqlite.cli._offsets import OffsetSpec, parse_offset

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Generous: a deadline on a loaded machine, never a synchronisation.
DEADLINE_S = 60.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "200"
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    return env


def cli(*args: object, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mqlite", *map(str, args)], input=stdin, capture_output=True,
        text=True, timeout=DEADLINE_S, env=_env(), check=False,
    )


def ok(*args: object, stdin: str | None = None) -> str:
    done = cli(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fails_in_child(status: int, *args: object) -> str:
    """The one-line error of a command that exits with ``status``."""
    done = cli(*args)
    assert done.returncode == status, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()[-1]


def ok_here(*args: object) -> str:
    """As ``ok``, run in this process (``main`` is what the child runs)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main([str(a) for a in args])
    assert status == 0, err.getvalue()
    return out.getvalue()


def fails(status: int, *args: object) -> str:
    """As ``fails_in_child``, run in this process (``main`` is what the child runs): the bad-input
    table stays fast. Usage errors end in SystemExit there, as argparse ends them."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            got: object = main([str(a) for a in args])
        except SystemExit as exc:
            got = exc.code
    assert got == status, (out.getvalue(), err.getvalue())
    return err.getvalue().strip().splitlines()[-1]


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def filled(store_path: Path) -> Path:
    """``orders``: five messages in queue 0 (bodies o0..o4, tag T, keys k0..k4), one non-UTF-8
    body in queue 1; ``empty``: one read-only queue."""
    with mqlite.open(store_path) as s:
        s.create_topic("orders", 2)
        s.create_topic("empty", 1, perm=4)
        p = s.producer()
        for i in range(5):
            p.send(Message("orders", f"o{i}".encode(), tags="T", keys=f"k{i}"), queue_id=0)
        p.send(Message("orders", b"\xff\xfe"), queue_id=1)
    return store_path


# -- parsing, in process --------------------------------------------------------------------------

def test_offset_specs_parse_and_resolve_within_the_queue(filled: Path) -> None:
    import argparse

    assert parse_offset("beginning") == OffsetSpec("beginning")
    assert parse_offset("-3") == OffsetSpec("back", 3)
    assert parse_offset("7") == OffsetSpec("offset", 7)
    assert parse_offset("@0") == OffsetSpec("time", 0)
    assert parse_offset("@1970-01-01T00:00:01+00:00") == OffsetSpec("time", 1000)
    for bad in ("middle", "-0", "@yesterday", "", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_offset(bad)
    with mqlite.open(filled, read_only=True) as s:
        q0 = s.queues("orders")[0]
        assert [parse_offset(x).resolve(s, q0) for x in ("beginning", "end", "-2", "-99", "99", "@0")] == [
            0, 5, 3, 0, 5, 0]


def test_format_strings_reject_unknown_tokens() -> None:
    import argparse

    assert len(compile_format("%t %p %o %k %g %s %S %T %B %i %I %c %r %h %% \\n\\t")) > 0
    for bad in ("%x", "%", "\\q", "tail\\"):
        with pytest.raises(argparse.ArgumentTypeError):
            compile_format(bad)


# -- help, usage and the store argument ----------------------------------------------------------

def test_help_lists_every_command_and_the_exit_codes() -> None:
    out = ok("--help")
    for command in ("topic", "send", "consume", "tail", "msg", "group", "store", "txn", "bench", "top", "demo"):
        assert command in out
    assert "3 not found" in out and "transaction" in out and "130 interrupted" in out
    assert "-o" in ok("consume", "--help")
    done = cli()
    assert done.returncode == 2 and "COMMAND" in done.stderr


def test_a_missing_store_or_a_plain_directory_is_not_found(tmp_path: Path) -> None:
    assert "no store at" in fails_in_child(3, "topic", "list", tmp_path / "nothing")
    (tmp_path / "plain").mkdir()
    assert "holds no mqlite store" in fails(3, "topics", tmp_path / "plain")
    assert "no store at" in fails(3, "send", tmp_path / "nothing", "t", "x")
    assert not (tmp_path / "nothing").exists()


# -- topics ---------------------------------------------------------------------------------------

def test_topic_create_list_update(store_path: Path) -> None:
    created = json.loads(ok("topic", "create", store_path, "t", "-q", "2", "--json"))
    assert created == [{"name": "t", "read_queues": 2, "write_queues": 2, "perm": 6, "order": False}]
    assert "exists already" in fails(1, "topic", "create", store_path, "t")
    assert json.loads(ok_here("topic", "update", store_path, "t", "-q", "3", "--json"))[0]["write_queues"] == 3
    assert "unknown topic 'nope'" in fails(3, "topic", "update", store_path, "nope", "-q", "3")
    assert "positive integer" in fails(2, "topic", "create", store_path, "u", "-q", "0")
    rows = {r["name"]: r for r in json.loads(ok("topic", "list", store_path, "--json"))}
    assert rows["t"]["read_queues"] == 3 and rows["t"]["messages"] == 0
    assert "t" in ok_here("topics", store_path)


def test_topic_update_each_setting(store_path: Path) -> None:
    ok_here("topic", "create", store_path, "t", "-q", "2")
    got = json.loads(ok("topic", "update", store_path, "t", "--read-queues", "4", "--write-queues", "3",
                        "--perm", "r", "--order", "--json"))
    assert got == [{"name": "t", "read_queues": 4, "write_queues": 3, "perm": 4, "order": True}]
    got = json.loads(ok_here("topic", "update", store_path, "t", "--perm", "rw", "--no-order", "--json"))
    assert got == [{"name": "t", "read_queues": 4, "write_queues": 3, "perm": 6, "order": False}]
    # Bad values write nothing.
    assert "cannot shrink" in fails(1, "topic", "update", store_path, "t", "--read-queues", "2")
    assert "INVALID_ARGUMENT" in fails(1, "topic", "update", store_path, "t", "--write-queues", "5")
    assert "at least one of" in fails(2, "topic", "update", store_path, "t")
    assert "bad perm" in fails(2, "topic", "update", store_path, "t", "--perm", "x")
    assert json.loads(ok_here("topic", "list", store_path, "--json"))[0]["read_queues"] == 4
    assert "unknown topic 'nope'" in fails(3, "topic", "update", store_path, "nope", "--perm", "r")


def test_topic_status_per_queue(filled: Path) -> None:
    status = json.loads(ok("topic", "status", filled, "orders", "--json"))
    assert (status["name"], status["messages"], status["read_queues"]) == ("orders", 6, 2)
    rows = [(q["queue_id"], q["min_offset"], q["max_offset"], q["messages"], q["consume_queue_bytes"])
            for q in status["queues"]]
    assert rows == [(0, 0, 5, 5, 100), (1, 0, 1, 1, 20)]
    assert all(q["last_store_timestamp"] > 0 and q["last_store_time"] for q in status["queues"])
    assert status["last_store_timestamp"] == max(q["last_store_timestamp"] for q in status["queues"])
    empty = json.loads(ok_here("topic", "status", filled, "empty", "--json"))["queues"]
    assert empty == [{"queue_id": 0, "min_offset": 0, "max_offset": 0, "messages": 0,
                      "last_store_timestamp": None, "last_store_time": None, "consume_queue_bytes": 0}]
    text = ok("topic", "status", filled, "orders")
    assert "last_store_time" in text and "consume_queue_bytes" in text and "6 messages" in text
    assert "unknown topic 'nope'" in fails(3, "topic", "status", filled, "nope")


_MEMBER = """
import sys, mqlite
store = mqlite.open(sys.argv[1])
c = store.pull_consumer(sys.argv[2], consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
c.subscribe(sys.argv[3])
while not c.poll(0.1):
    pass
print("MEMBER", c.client_id, flush=True)
sys.stdin.readline()
c.close()
store.close()
"""


def _live_member(procs: list[subprocess.Popen[str]], path: Path, group: str, topic: str) -> subprocess.Popen[str]:
    """A process with a live, subscribed member of ``group`` that got a message of ``topic``; it
    leaves when its stdin gets a line (``_leave``)."""
    p = subprocess.Popen([sys.executable, "-c", _MEMBER, str(path), group, topic], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    procs.append(p)
    assert _next_line(p).startswith("MEMBER ")
    return p


def _leave(member: subprocess.Popen[str]) -> None:
    assert member.stdin is not None
    member.stdin.write("bye\n")
    member.stdin.flush()
    assert member.wait(timeout=DEADLINE_S) == 0


class _Terminal(io.StringIO):
    """A stdin that is a terminal, holding the operator's answers."""

    def isatty(self) -> bool:
        return True


def test_topic_delete_asks_on_a_terminal_and_refuses_live_groups(
    filled: Path, popen: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    member = _live_member(popen, filled, "g", "orders")
    assert "live consumers" in fails(1, "topic", "delete", filled, "orders", "--yes")
    _leave(member)
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    assert "cancelled" in fails(1, "topic", "delete", filled, "orders")
    assert "orders" in {t["name"] for t in json.loads(ok_here("topic", "list", filled, "--json"))}
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    assert "deleted topic orders" in ok_here("topic", "delete", filled, "orders")
    assert "orders" not in {t["name"] for t in json.loads(ok_here("topic", "list", filled, "--json"))}
    # Not a terminal (a script): no question; --force passes live groups.
    assert json.loads(ok("topic", "delete", filled, "empty", "--force", "--json")) == {"deleted": "empty"}
    assert "unknown topic 'orders'" in fails_in_child(3, "topic", "delete", filled, "orders", "--yes")


def test_names_that_would_leave_the_store_are_refused(filled: Path) -> None:
    for topic in ("../../outside", str(filled.parent / "abs")):
        assert "[INVALID_TOPIC]" in fails(1, "tail", filled, topic)
    assert "[INVALID_GROUP]" in fails(1, "group", "progress", filled, "../g")
    assert sorted(p.name for p in filled.parent.iterdir()) == [filled.name]


# -- send -----------------------------------------------------------------------------------------

def test_send_arguments_stdin_and_options(filled: Path) -> None:
    sent = lines(ok("send", filled, "orders", "a", "b", "--tags", "X", "--keys", "k1", "--keys", "k2",
                    "-p", "region=eu", "-q", "1", "--json"))
    assert [(r["queue_id"], r["queue_offset"], r["status"]) for r in sent] == [(1, 1, "SEND_OK"), (1, 2, "SEND_OK")]
    piped = lines(ok("send", filled, "orders", "--sharding-key", "user-7", "--json", stdin="l1\nl2\r\n"))
    assert len({r["queue_id"] for r in piped}) == 1
    delayed = lines(ok("send", filled, "orders", "later", "--delay", "3600", "--json"))
    assert delayed[0]["scheduled"] is True and "SEND_OK" in ok("send", filled, "orders", "x")
    with mqlite.open(filled, read_only=True) as s:
        m = s.get(sent[0]["offset_msg_id"])  # type: ignore[arg-type]
        assert (m.body, m.tags, m.keys, m.properties["region"]) == (b"a", "X", ("k1", "k2"), "eu")
        mq = mqlite.MessageQueue("orders", int(piped[0]["queue_id"]))  # type: ignore[call-overload]
        assert [x.body for x in s.read(mq, 0, 99) if x.body in (b"l1", b"l2")] == [b"l1", b"l2"]
    assert "unknown topic 'nope'" in fails(3, "send", filled, "nope", "x")
    assert "expected key=value" in fails(2, "send", filled, "orders", "x", "-p", "novalue")
    assert "not allowed with" in fails(2, "send", filled, "orders", "x", "--delay", "1", "--delay-level", "2")
    assert "INVALID_QUEUE" in fails(1, "send", filled, "orders", "x", "-q", "9")


# -- consume and tail -----------------------------------------------------------------------------

def test_consume_offsets_counts_and_formats(filled: Path) -> None:
    def bodies(*args: str) -> list[object]:
        return [r["body"] for r in lines(ok_here("consume", filled, "orders", "-q", "0", "--json", *args))]

    assert bodies() == ["o0", "o1", "o2", "o3", "o4"]
    assert bodies("-o", "end") == []
    assert bodies("-o", "3") == ["o3", "o4"]
    assert bodies("-o", "-2") == ["o3", "o4"]
    assert bodies("-o", "@0", "-n", "2") == ["o0", "o1"]
    assert bodies("-o", f"@{int(time.time() * 1000) + 3_600_000}") == []
    out = ok("consume", filled, "orders", "-q", "0", "-o", "-1", "-f", "%t|%p|%o|%k|%g|%s|%S|%%\\n")
    assert out == "orders|0|4|k4|T|o4|2|%\n"
    row = lines(ok("consume", filled, "orders", "-q", "1", "--json"))[0]
    assert (row["body"], row["body_encoding"]) == ("//4=", "base64")
    assert "bad offset 'middle'" in fails_in_child(2, "consume", filled, "orders", "-o", "middle")
    assert "unknown format token %x" in fails(2, "consume", filled, "orders", "-f", "%x")
    assert "unknown topic 'nope'" in fails_in_child(3, "consume", filled, "nope")
    assert "INVALID_QUEUE" in fails(1, "consume", filled, "orders", "-q", "7")


def test_consume_with_a_group_commits_what_it_printed(filled: Path) -> None:
    first = lines(ok("consume", filled, "orders", "-q", "0", "-g", "g", "-n", "3", "--json"))
    assert [r["body"] for r in first] == ["o0", "o1", "o2"]
    progress = json.loads(ok("group", "progress", filled, "g", "--json"))["queues"]
    assert [(p["queue_id"], p["committed"], p["lag"]) for p in progress] == [(0, 3, 2)]
    rest = lines(ok("consume", filled, "orders", "-q", "0", "-g", "g", "--json"))
    assert [r["body"] for r in rest] == ["o3", "o4"]
    assert lines(ok("consume", filled, "orders", "-q", "0", "-g", "g", "--json")) == []


def test_tail_prints_the_last_messages_of_each_queue(filled: Path) -> None:
    rows = lines(ok("tail", filled, "orders", "-n", "2", "--json"))
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == [(0, 3), (0, 4), (1, 0)]
    assert [r["queue_offset"] for r in lines(ok("tail", filled, "orders", "-q", "0", "-o", "1", "-n", "2", "--json"))] == [1, 2]
    assert "o4" in ok("tail", filled, "orders", "-q", "0")
    assert "positive integer" in fails(2, "tail", filled, "orders", "-n", "-3")


@pytest.fixture
def popen() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=DEADLINE_S)


def _spawn(procs: list[subprocess.Popen[str]], *args: object) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-m", "mqlite", *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env())
    procs.append(p)
    return p


def _next_line(p: subprocess.Popen[str]) -> str:
    """The process's next output line; the test's timeout bounds a process that never writes."""
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line, f"exited with {p.wait()}: {p.stderr.read() if p.stderr else ''}"
    return line


def test_tail_follow_prints_what_a_writer_process_sends(filled: Path, popen: list[subprocess.Popen[str]]) -> None:
    tail = _spawn(popen, "tail", filled, "orders", "-q", "0", "-n", "1", "--follow", "-f", "%o %s\\n")
    assert _next_line(tail) == "4 o4\n"  # the backlog: the follower is running
    writer = subprocess.run(
        [sys.executable, "-c", "import sys, mqlite; s = mqlite.open(sys.argv[1]); "
         "s.producer().send(mqlite.Message('orders', b'from-writer'), queue_id=0); s.close()", str(filled)],
        env=_env(), timeout=DEADLINE_S, check=True,
    )
    assert writer.returncode == 0
    assert _next_line(tail) == "5 from-writer\n"


def test_ctrl_c_ends_a_follow_cleanly_with_130_and_keeps_the_commit(
    filled: Path, popen: list[subprocess.Popen[str]]
) -> None:
    follower = _spawn(popen, "consume", filled, "orders", "-q", "0", "-g", "g", "--follow", "-f", "%s\\n")
    assert [_next_line(follower) for _ in range(5)] == [f"o{i}\n" for i in range(5)]
    follower.send_signal(signal.SIGINT)
    out, err = follower.communicate(timeout=DEADLINE_S)
    assert follower.returncode == 130 and out == "" and "Traceback" not in err
    progress = json.loads(ok("group", "progress", filled, "g", "--json"))["queues"]
    assert [(p["queue_id"], p["committed"]) for p in progress] == [(0, 5)]


# -- messages, groups, the store ------------------------------------------------------------------

def test_msg_get_by_id_and_by_commit_log_offset(filled: Path) -> None:
    first = lines(ok("consume", filled, "orders", "-q", "0", "-n", "1", "--json"))[0]
    by_id = json.loads(ok("msg", "get", filled, "--id", first["offset_msg_id"], "--json"))
    assert by_id == first and by_id["properties"]["KEYS"] == "k0" and "born_timestamp" in by_id
    assert json.loads(ok("msg", "get", filled, "--offset", first["commit_log_offset"], "--json")) == first
    assert "store_timestamp" in ok("msg", "get", filled, "--id", first["offset_msg_id"])
    assert "MESSAGE_NOT_FOUND" in fails_in_child(3, "msg", "get", filled, "--offset", "5")
    assert "MESSAGE_NOT_FOUND" in fails(3, "msg", "get", filled, "--id", "nonsense")
    assert "commit-log offset" in fails(2, "msg", "get", filled, "--offset", "-1")


def test_group_list_progress_and_reset_dry_run_then_execute(filled: Path) -> None:
    with mqlite.open(filled) as s:
        s.reset_offset("done", "orders", to="latest", create=True)
        s.reset_offset("behind", "orders", to="earliest", create=True)
    assert json.loads(ok("group", "list", filled, "--json")) == [
        {"group": "behind", "topics": 1, "queues": 2, "lag": 6},
        {"group": "done", "topics": 1, "queues": 2, "lag": 0},
    ]
    assert json.loads(ok_here("groups", filled, "--json")) == json.loads(ok_here("group", "ls", filled, "--json"))
    plan = json.loads(ok("group", "reset", filled, "done", "--to-offset", "2", "--json"))
    assert [(r["queue_id"], r["committed"], r["new_offset"]) for r in plan] == [(0, 5, 2), (1, 1, 1)]
    assert "dry run" in ok_here("group", "reset", filled, "done", "--to-earliest")
    assert [p["committed"] for p in json.loads(ok_here("groups", filled, "-g", "done", "--json"))["queues"]] == [5, 1]
    ok("group", "reset", filled, "done", "--topic", "orders", "--to-datetime", "0", "--execute")
    assert [p["committed"] for p in json.loads(ok("group", "progress", filled, "done", "--json"))["queues"]] == [0, 0]
    assert "unknown group 'nobody'" in fails(3, "group", "reset", filled, "nobody", "--to-latest")
    assert "no committed offsets" in fails(3, "group", "progress", filled, "nobody")
    assert "unknown topic" in fails(3, "group", "reset", filled, "done", "--topic", "nope", "--to-latest")
    assert "one of the arguments" in fails(2, "group", "reset", filled, "done")


def test_group_progress_shows_owners_last_consume_time_and_the_summary(
    filled: Path, popen: list[subprocess.Popen[str]]
) -> None:
    with mqlite.open(filled) as s:
        s.reset_offset("g", "orders", offset=3, create=True)
        consumed = s.read(MessageQueue("orders", 0), 2, 1)[0].store_timestamp
    got = json.loads(ok_here("group", "progress", filled, "g", "--json"))
    assert {k: got[k] for k in ("group", "members", "lag", "retry_depth", "retry_waiting", "dlq_depth")} == {
        "group": "g", "members": [], "lag": 2, "retry_depth": None, "retry_waiting": None, "dlq_depth": None}
    q0, q1 = got["queues"]
    assert (q0["committed"], q0["last_consume_timestamp"], q0["owner"]) == (3, consumed, None)
    assert (q1["committed"], q1["lag"]) == (1, 0) and q0["last_consume_time"].endswith("+00:00")
    member = _live_member(popen, filled, "g", "orders")
    got = json.loads(ok_here("group", "progress", filled, "g", "--json"))
    [cid] = got["members"]
    assert [q["owner"] for q in got["queues"]] == [cid, cid]
    text = ok("group", "progress", filled, "g")
    assert "last_consume_time" in text and "retry_depth" in text and cid in text
    _leave(member)


def test_group_reset_of_one_queue(filled: Path) -> None:
    with mqlite.open(filled) as s:
        s.reset_offset("g", "orders", to="latest", create=True)
    plan = json.loads(ok_here("group", "reset", filled, "g", "--topic", "orders", "--queue", "1",
                              "--to-earliest", "--json"))
    assert [(r["queue_id"], r["committed"], r["new_offset"]) for r in plan] == [(1, 1, 0)]
    ok("group", "reset", filled, "g", "--topic", "orders", "--queue", "1", "--to-earliest", "--execute")
    queues = json.loads(ok_here("group", "progress", filled, "g", "--json"))["queues"]
    assert [q["committed"] for q in queues] == [5, 0]
    for execute in ([], ["--execute"]):
        assert "INVALID_QUEUE" in fails(1, "group", "reset", filled, "g", "--topic", "orders", "--queue", "2",
                                        "--to-earliest", *execute)
    assert "--queue needs --topic" in fails(2, "group", "reset", filled, "g", "--queue", "0", "--to-earliest")
    assert "bad queue id" in fails(2, "group", "reset", filled, "g", "--topic", "orders", "--queue", "-1",
                                   "--to-earliest")
    assert [q["committed"] for q in json.loads(ok_here("group", "progress", filled, "g", "--json"))["queues"]] == [5, 0]


def test_group_delete_is_a_dry_run_until_execute_and_refuses_live_members(
    filled: Path, popen: list[subprocess.Popen[str]]
) -> None:
    with mqlite.open(filled) as s:
        s.reset_offset("g", "orders", to="earliest", create=True)
    member = _live_member(popen, filled, "g", "orders")
    dry = ok_here("group", "delete", filled, "g")
    assert "dry run" in dry and "orders@g" in dry and "refused unless --force" in dry
    assert "live consumer" in fails(1, "group", "delete", filled, "g", "--execute")
    _leave(member)
    assert "g" in ok_here("group", "list", filled)
    done = json.loads(ok("group", "delete", filled, "g", "--execute", "--json"))
    assert (done["executed"], done["offset_keys"], done["live_members"]) == (True, ["orders@g"], [])
    assert json.loads(ok_here("group", "list", filled, "--json")) == []
    assert "unknown group 'g'" in fails(3, "group", "delete", filled, "g", "--execute")
    assert "unknown group 'nobody'" in fails_in_child(3, "group", "delete", filled, "nobody")


def test_group_dlq_list_get_export_redrive(filled: Path, tmp_path: Path) -> None:
    with mqlite.open(filled) as s, s.pull_consumer("g") as c:
        q0 = s.queues("orders")[0]
        c.assign([q0])
        c.seek(q0, 0)
        got: list[mqlite.MessageExt] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 2 and time.monotonic() < deadline:
            got.extend(c.poll(1.0, max_messages=2 - len(got)))
        for m in got:
            c.send_back(m, dead=True, error=ValueError(f"bad {m.body.decode()}"))
    letters = json.loads(ok("group", "dlq", "list", filled, "g", "--json"))
    assert [(d["origin_topic"], d["error_type"]) for d in letters] == [("orders", "ValueError")] * 2
    one = json.loads(ok("group", "dlq", "get", filled, "g", letters[0]["msg_id"], "--json"))
    assert one["error"] == "bad o0"
    out = tmp_path / "dlq.jsonl"
    ok("group", "dlq", "export", filled, "g", "-o", out)
    assert len(out.read_text().splitlines()) == 2
    assert len(ok("group", "dlq", "export", filled, "g").splitlines()) == 2
    assert "MESSAGE_NOT_FOUND" in fails(3, "group", "dlq", "get", filled, "g", "nope")
    sent = lines(ok("group", "dlq", "redrive", filled, "g", "--all", "--json"))
    assert [r["topic"] for r in sent] == ["orders", "orders"]
    assert "redrive needs" in fails(1, "group", "dlq", "redrive", filled, "g")
    assert "unknown group 'nobody'" in fails(3, "group", "dlq", "list", filled, "nobody")
    assert "No such file or directory" in fails(1, "group", "dlq", "export", filled, "g", "-o", tmp_path / "no" / "f")


def test_store_info_and_gc(filled: Path) -> None:
    info = json.loads(ok("store", "info", filled, "--json"))
    assert (info["topics"], info["messages"], info["pending_timers"]) == (2, 6, 0)
    assert info["disk_bytes"] > 0 and info["commit_log_max_offset"] > 0
    assert info["files"]["commit_log"]["count"] == 1 and info["files"]["consume_queue"]["count"] >= 2
    assert 0 < info["disk_usage_ratio"] <= 1 and info["disk_used_bytes"] <= info["disk_total_bytes"]
    assert info["oldest_store_timestamp"] <= info["newest_store_timestamp"]
    assert info["oldest_store_time"].endswith("+00:00")
    text = ok_here("store", "info", filled)
    assert "files: commit_log" in text and "disk_usage_ratio" in text and "txn list" in text
    assert json.loads(ok("store", "gc", filled, "--json")) == {"deleted": []}
    assert "deleted no file" in ok_here("store", "gc", filled)


_SMALL_LOG = {"commit_log_file_size": 256 << 10, "max_message_size": 32 << 10,
              "consume_queue_file_units": 128}


def test_store_gc_lists_each_deleted_file_with_its_reason(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root, **_SMALL_LOG) as s:  # type: ignore[arg-type]
        s.create_topic("t", 1)
        p = s.producer()
        while len([f for f in (root / "commitlog").iterdir() if f.name.isdigit()]) < 3:
            p.send_batch([b"x" * 1000] * 50, topic="t", queue_id=0)
    files = sorted(f for f in (root / "commitlog").iterdir() if f.name.isdigit())
    old = time.time() - 400 * 3600  # past the default retention_hours
    os.utime(files[0], (old, old))
    deleted = json.loads(ok("store", "gc", root, "--json"))["deleted"]
    assert [(Path(d["path"]).name, d["reason"], d["from_offset"]) for d in deleted] == [
        (files[0].name, "expired", 0)]
    assert deleted[0]["size"] == 256 << 10 and deleted[0]["modified"] is not None
    assert not files[0].exists() and files[1].exists()


def test_msg_get_by_unique_id_and_by_key(tmp_path: Path) -> None:
    """``msg get --id`` takes the unique id a send returns; ``--key`` lists a key's messages
    newest first through the key index, says when the limit cut the answer, and exits 3 when
    none has the key."""
    path = tmp_path / "s"
    with mqlite.open(path) as s:
        s.create_topic("orders", 2)
        p = s.producer()
        sent = [p.send(Message("orders", b"o%d" % i, keys=["cust-7" if i % 2 else "cust-8"])) for i in range(6)]
    got = json.loads(ok("msg", "get", path, "--id", sent[4].msg_id, "--json"))
    assert (got["msg_id"], got["body"]) == (sent[4].msg_id, "o4")
    found = json.loads(ok("msg", "get", path, "--key", "cust-7", "--topic", "orders", "--json"))
    assert [m["body"] for m in found["messages"]] == ["o5", "o3", "o1"]
    assert found["complete"] and not found["truncated"]
    cut = json.loads(ok("msg", "get", path, "--key", "cust-7", "--topic", "orders", "-n", "2", "--json"))
    assert [m["body"] for m in cut["messages"]] == ["o5", "o3"] and cut["truncated"]
    assert "cust-7" in ok_here("msg", "get", path, "--key", "cust-7", "--topic", "orders")
    assert "has key" in fails(3, "msg", "get", path, "--key", "nobody", "--topic", "orders")
    assert "--topic" in fails(2, "msg", "get", path, "--key", "cust-7")
    assert "unknown topic" in fails(3, "msg", "get", path, "--key", "cust-7", "--topic", "nope")
    assert "go with --key" in fails(2, "msg", "get", path, "--id", sent[0].msg_id, "--topic", "orders")


def test_store_verify_and_repair_of_a_damaged_store(tmp_path: Path) -> None:
    """The runbook's path as an operator walks it: verify exits 4 naming the damaged record and
    its message, repair is a dry run that changes nothing until --execute, and after it the
    store opens with exactly the reported message lost."""
    path = tmp_path / "s"
    with mqlite.open(path) as s:
        s.create_topic("t", 1)
        sent = [s.producer().send(Message("t", b"body-%03d" % i * 8)) for i in range(6)]
    assert "no damage" in ok("store", "verify", path)
    log = path / "commitlog" / ("0" * 20)
    with open(log, "r+b") as f:
        f.seek(sent[3].commit_log_offset + 90)
        b = f.read(1)
        f.seek(sent[3].commit_log_offset + 90)
        f.write(bytes([b[0] ^ 0xFF]))
    done = cli("store", "verify", path, "--json")
    assert done.returncode == 4, done.stderr
    report = json.loads(done.stdout)
    [damage] = report["damage"]
    assert (damage["kind"], damage["offset"]) == ("log_record", sent[3].commit_log_offset)
    assert [m["queue_offset"] for m in damage["messages"]] == [3]
    text = cli("store", "verify", path)
    assert text.returncode == 4 and "log_record" in text.stdout and "store repair" in text.stdout
    before = log.read_bytes()
    dry = ok("store", "repair", path)
    assert "dry run" in dry and "would drop" in dry and log.read_bytes() == before
    done_json = json.loads(ok("store", "repair", path, "--execute", "--json"))
    assert done_json["changed"] and [m["queue_offset"] for m in done_json["lost"]] == [3]
    assert "no damage" in ok("store", "verify", path)
    with mqlite.open(path) as s:
        left = s.read(MessageQueue("t", 0), 0, 32)
    assert [m.queue_offset for m in left] == [0, 1, 2, 4, 5]
    assert fails(3, "store", "verify", tmp_path / "nothing-here")
    assert fails(2, "store", "repair", path, "--mode", "chop")


def _undecided(path: Path, *ids: str) -> None:
    """Transactions ``ids`` of producer group ``pg``, one message each, left undecided."""
    unknown = mqlite.LocalTransactionState.UNKNOW

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: object) -> mqlite.LocalTransactionState:
            return unknown

        def check_local_transaction(self, msg: mqlite.MessageExt) -> mqlite.LocalTransactionState:
            return unknown

    with mqlite.open(path) as s, mqlite.TransactionProducer(s, "pg", Listener(), check_interval=None) as p:
        for tid in ids:
            p.send_message_in_transaction(Message("orders", tid.encode()), transaction_id=tid)


def test_txn_list_and_resolve(filled: Path) -> None:
    _undecided(filled, "t-1", "t-2")
    rows = json.loads(ok("txn", "list", filled, "--json"))
    assert [(r["id"], r["group"], r["state"], r["checks"], r["messages"]) for r in rows] == [
        ("t-1", "pg", "open", 0, 1), ("t-2", "pg", "open", 0, 1)]
    assert all(r["age_ms"] >= 0 and r["age"] and r["first_time"] for r in rows)
    assert json.loads(ok_here("txn", "list", filled, "-g", "other", "--json")) == []
    assert "t-1" in ok("txn", "list", filled) and "messages" in ok("txn", "list", filled)
    assert "committed transaction t-1" in ok("txn", "resolve", filled, "t-1", "--commit")
    assert "already committed" in ok_here("txn", "resolve", filled, "t-1", "--commit")
    done = json.loads(ok_here("txn", "resolve", filled, "t-2", "--rollback", "--json"))
    assert done == {"id": "t-2", "decision": "rollback", "changed": True}
    assert json.loads(ok_here("txn", "list", filled, "--json")) == []
    with mqlite.open(filled, read_only=True) as s:
        assert [m.body for m in s.read(MessageQueue("orders", 0), 0, 32)].count(b"t-1") + \
            [m.body for m in s.read(MessageQueue("orders", 1), 0, 32)].count(b"t-1") == 1
    assert "TRANSACTION_STATE" in fails(1, "txn", "resolve", filled, "t-2", "--commit")
    assert "TRANSACTION_NOT_FOUND" in fails_in_child(3, "txn", "resolve", filled, "nope", "--rollback")
    assert "one of the arguments" in fails(2, "txn", "resolve", filled, "t-1")
    assert "not allowed with" in fails(2, "txn", "resolve", filled, "t-1", "--commit", "--rollback")
    assert fails(3, "txn", "list", filled.parent / "nothing-here")


def test_top_once_and_iterations(filled: Path) -> None:
    with mqlite.open(filled) as s:
        s.reset_offset("g", "orders", to="earliest", create=True)
    out = ok("top", filled, "--once")
    assert "orders" in out and "g" in out and "lag" in out
    looks = lines(ok("top", filled, "--iterations", "2", "-i", "0.05", "--json"))
    assert len(looks) == 2 and looks[0]["topics"]["orders"]["msg_per_s"] is None
    assert looks[1]["topics"]["orders"] == {"stored": 6, "depth": 6, "msg_per_s": 0.0}
    assert looks[1]["groups"]["g"]["lag"] == 6 and looks[1]["groups"]["g"]["dlq"] == 0
    # A read-only look cannot list the retries waiting for their delay.
    assert looks[1]["groups"]["g"]["retry"] == 0 and looks[1]["groups"]["g"]["retry_waiting"] is None
    assert "retry waiting" in out
    assert "seconds > 0" in fails(2, "top", filled, "-i", "0")


def test_bench_produce_and_consume(tmp_path: Path) -> None:
    result = json.loads(ok("bench", "produce", tmp_path / "b", "-n", "200", "--json"))
    assert result["messages"] == 200 and result["msg_per_s"] > 0 and "p99_us" in result
    assert json.loads(ok("bench", "consume", tmp_path / "b", "--json"))["messages"] == 200
    assert "msg_per_s" in ok("bench", "produce", "-n", "50")


def test_demo(tmp_path: Path) -> None:
    out = ok("demo", "--dir", tmp_path / "demo")
    assert "send_batch" in out and "unchanged" in out and "CHANGED" not in out


def test_quickstart_example_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), str(tmp_path / "qs")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "reopened" in done.stdout and "tagged 'paid'" in done.stdout
    with mqlite.open(tmp_path / "qs", read_only=True) as s:
        assert sum(s.offsets(mq)[1] for mq in s.queues("orders")) == 5
