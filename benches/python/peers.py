#!/usr/bin/env python3
"""Peer benchmark for mqlite: measure the queues a Python user might pick instead.

Self-contained: standard library plus the peers' own packages
(persist-queue, litequeue, diskcache, queuelib, redis). `rich` is used for
tables only when it is importable.  A peer whose package (or redis-server
binary) is missing is reported as "skipped", never silently dropped.

Modes
-----
throughput (default)
    For each peer, on the same workload: produce N messages (default 200000,
    random bodies of --size bytes, default 128), then consume all N back in
    order (ack/commit where the peer has one).  Reports msgs/s and MB/s
    (payload bytes only, MB = 1e6 bytes) per phase and the on-disk size
    after produce.  Every phase has a wall-clock budget (--budget seconds);
    a peer that runs out is stopped and its figure is reported as PARTIAL
    with the count it reached.  Each peer runs --repeat times (round-robin
    across peers, to spread machine noise) and the median is reported.

--latency
    A producer thread sends M messages (default 20000, after 500 warm-up
    messages) carrying a perf_counter_ns timestamp, paced at --rate msgs/s
    (default 2000; 0 = as fast as possible); a consumer thread in the same
    process receives them.  Reports p50/p99/p99.9 end-to-end microseconds.
    Both threads share the GIL, as they would in a real Python application.

--physical
    Machine floors for an append-only log written from Python: memcpy
    bandwidth, page-cache write bandwidth, mmap write bandwidth, fdatasync
    latency, and the cost of one Python -> C call (the closest stand-in for
    a PyO3 call crossing that can be measured without building anything).

Adding a peer (e.g. mqlite)
---------------------------
Subclass `Peer`, set `name` and `durability`, implement setup /
produce_chunk / consume_chunk (and optionally finish_produce /
finish_consume / disk_bytes / teardown / latency_pair), and add the class to
PEER_CLASSES.  `MqlitePeer` at the bottom of the peer list is the mqlite
adapter (send_batch of 1000, async flush); it needs mqlite installed in the
running interpreter (./scripts/demo.sh or ./scripts/test.sh builds it into .venv).

Example
-------
    python peers.py --n 200000 --size 128 --repeat 3 --json out.json
    python peers.py --peers raw-file,redis-xadd-pipe100 --n 50000
    python peers.py --latency --m 20000 --rate 2000
    python peers.py --physical
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import mmap
import os
import platform
import queue
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, List, Optional, Tuple

try:  # optional pretty tables
    from rich.console import Console
    from rich.table import Table

    _RICH = True
except Exception:  # pragma: no cover - rich is optional
    _RICH = False

CHUNK = 1000  # messages handed to a peer per produce/consume call (deadline granularity)
LEN = struct.Struct("<I")  # length prefix used by the raw baselines


class PeerUnavailable(Exception):
    """Raised by setup() when a peer cannot run here (package or binary missing)."""


# --------------------------------------------------------------------------------------
# Peer interface
# --------------------------------------------------------------------------------------


class Peer:
    """One queue implementation under test.

    Lifecycle per run: setup(workdir) -> produce_chunk(...)* -> finish_produce()
    -> disk_bytes() -> consume_chunk(...)* -> finish_consume() -> teardown().
    All of produce/consume/finish_* is inside the timed region.
    """

    name = "abstract"
    label = ""  # display name in reports
    durability = ""  # honest one-line description of what "produced" means on disk
    process_crash = ""  # what a crash of the producing process loses (short)
    machine_crash = ""  # what a crash of the machine (OS crash, power loss) loses (short)
    consume_mode = ""  # how the consume phase acknowledges (what a crash re-delivers or loses)
    latency_capable = False
    throughput_capable = True

    def setup(self, workdir: str, args: argparse.Namespace) -> None:
        self.workdir = workdir

    def produce_chunk(self, bodies: List[bytes]) -> None:
        """Append every body in order, the way the peer is normally used."""
        raise NotImplementedError

    def finish_produce(self) -> None:
        """End-of-phase work the peer needs for its stated durability (timed)."""

    def consume_chunk(self, k: int) -> List[bytes]:
        """Return up to k next bodies in order, acking/committing as the peer does."""
        raise NotImplementedError

    def finish_consume(self) -> None:
        """End-of-phase commit (timed)."""

    def disk_bytes(self) -> int:
        return dir_bytes(self.workdir)

    def teardown(self) -> None:
        pass

    # latency mode: return (send(body), recv() -> list of bodies, close())
    def latency_pair(self, workdir: str, args: argparse.Namespace):
        raise NotImplementedError

    # push-style latency mode (used instead of latency_pair when latency_push is True):
    # return (send(body), close()); the peer calls deliver(list of bodies) on its own threads.
    latency_push = False

    def latency_listener(self, workdir: str, args: argparse.Namespace,
                         deliver: Callable[[List[bytes]], None]):
        raise NotImplementedError


def dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


# ---------------------------------- baselines ----------------------------------------


class SimpleQueuePeer(Peer):
    name = "simplequeue"
    label = "queue.SimpleQueue (in memory)"
    durability = "none: in-memory queue.SimpleQueue (upper bound for pure-Python hand-off)"
    process_crash = "everything"
    machine_crash = "everything"
    consume_mode = "get_nowait() per message"
    latency_capable = True

    def setup(self, workdir, args):
        super().setup(workdir, args)
        self.q = queue.SimpleQueue()

    def produce_chunk(self, bodies):
        put = self.q.put
        for b in bodies:
            put(b)

    def consume_chunk(self, k):
        get = self.q.get_nowait
        out = []
        try:
            for _ in range(k):
                out.append(get())
        except queue.Empty:
            pass
        return out

    def disk_bytes(self):
        return 0

    def latency_pair(self, workdir, args):
        q = queue.SimpleQueue()
        return q.put, (lambda: [q.get()]), (lambda: None)


class RawFilePeer(Peer):
    """Length-prefixed records, one os.write per batch of `batch` records."""

    name = "raw-file"
    label = "raw file append, write() per 100 records"
    durability = ("page cache: one write() per 100 length-prefixed records; "
                  "one fdatasync at end of produce (timed)")
    process_crash = "nothing"
    machine_crash = "all since the last fdatasync"
    consume_mode = "1 MiB read() calls; position saved at the end"
    batch = 100
    fsync_each_batch = False

    def setup(self, workdir, args):
        super().setup(workdir, args)
        self.path = os.path.join(workdir, "log.bin")
        self.fd = os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o644)
        self.rfd = None
        self.buf = b""
        self.pos = 0

    def produce_chunk(self, bodies):
        pack = LEN.pack
        fd = self.fd
        bs = self.batch
        for i in range(0, len(bodies), bs):
            parts = []
            for b in bodies[i:i + bs]:
                parts.append(pack(len(b)))
                parts.append(b)
            os.write(fd, b"".join(parts))
            if self.fsync_each_batch:
                os.fdatasync(fd)

    def finish_produce(self):
        os.fdatasync(self.fd)
        os.close(self.fd)
        self.fd = None

    def consume_chunk(self, k):
        if self.rfd is None:
            self.rfd = os.open(self.path, os.O_RDONLY)
        out = []
        unpack_from = LEN.unpack_from
        while len(out) < k:
            if len(self.buf) - self.pos < 4 or \
                    len(self.buf) - self.pos < 4 + unpack_from(self.buf, self.pos)[0]:
                more = os.read(self.rfd, 1 << 20)
                if not more:
                    break
                self.buf = self.buf[self.pos:] + more
                self.pos = 0
                continue
            (ln,) = unpack_from(self.buf, self.pos)
            start = self.pos + 4
            out.append(self.buf[start:start + ln])
            self.pos = start + ln
        return out

    def finish_consume(self):
        # commit the consumer offset the way a real consumer would (one small file)
        with open(os.path.join(self.workdir, "offset"), "w") as f:
            f.write(str(self.pos))

    def teardown(self):
        for fd in (self.fd, self.rfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class RawFileFsyncPeer(RawFilePeer):
    name = "raw-file-fsync"
    label = "raw file append, fdatasync per 100 records"
    durability = "disk: one write()+fdatasync per 100 records (group-commit floor)"
    machine_crash = "up to 100 records"
    fsync_each_batch = True


class RawMmapPeer(Peer):
    """Per-message pack_into + slice store into a pre-sized mmap (one Python->C call pair per msg)."""

    name = "raw-mmap"
    label = "raw mmap, slice store per record"
    durability = "page cache via mmap, one call pair per message; msync (flush) at end of produce (timed)"
    process_crash = "nothing"
    machine_crash = "all since the last msync"
    consume_mode = "slices of the mapping; position in memory"

    def setup(self, workdir, args):
        super().setup(workdir, args)
        self.path = os.path.join(workdir, "log.mmap")
        cap = args.n * (args.size + 4) + 4096
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, cap)
        self.mm = mmap.mmap(self.fd, cap)
        self.wpos = 0
        self.rpos = 0

    def produce_chunk(self, bodies):
        mm = self.mm
        pos = self.wpos
        pack_into = LEN.pack_into
        for b in bodies:
            ln = len(b)
            pack_into(mm, pos, ln)
            pos += 4
            mm[pos:pos + ln] = b
            pos += ln
        self.wpos = pos

    def finish_produce(self):
        self.mm.flush()  # msync of the whole mapping

    def consume_chunk(self, k):
        mm = self.mm
        pos = self.rpos
        end = self.wpos
        unpack_from = LEN.unpack_from
        out = []
        while len(out) < k and pos < end:
            (ln,) = unpack_from(mm, pos)
            pos += 4
            out.append(mm[pos:pos + ln])
            pos += ln
        self.rpos = pos
        return out

    def disk_bytes(self):
        return self.wpos  # file is pre-sized; report bytes actually used

    def teardown(self):
        try:
            self.mm.close()
        finally:
            os.close(self.fd)


class RawMmapPrefaultPeer(RawMmapPeer):
    """As raw-mmap, but the segment is fallocate'd and pre-touched in setup (untimed),
    like RocketMQ's warmMappedFile / Chronicle's pretoucher. Isolates page-fault and
    block-allocation cost from the append path."""

    name = "raw-mmap-prefault"
    label = "raw mmap, pre-faulted"
    durability = ("as raw-mmap, segment posix_fallocate'd + every page pre-touched before "
                  "the timed phase (setup cost not counted); msync at end of produce (timed)")

    def setup(self, workdir, args):
        super().setup(workdir, args)
        cap = len(self.mm)
        try:
            os.posix_fallocate(self.fd, 0, cap)
        except (AttributeError, OSError):
            pass
        zero = bytes(1 << 20)
        for off in range(0, cap, 1 << 20):
            end = min(cap, off + (1 << 20))
            self.mm[off:end] = zero[: end - off]
        self.mm.flush()  # start the timed phase with clean (written-back) pages


# ---------------------------------- Python embedded queues ---------------------------


class QueuelibPeer(Peer):
    name = "queuelib-fifo"
    label = "queuelib FifoDiskQueue"
    durability = ("page cache: one unbuffered os.write per push, no fsync; queue state "
                  "(info.json) is only written by close() -- a crash loses the head/tail pointers")
    process_crash = "all since the last close()"
    machine_crash = "all since the last close()"
    consume_mode = "pop() per message; pointers saved by close()"

    def setup(self, workdir, args):
        super().setup(workdir, args)
        try:
            from queuelib import FifoDiskQueue
        except ImportError as e:
            raise PeerUnavailable(f"queuelib not installed ({e})")
        self.qdir = os.path.join(workdir, "q")
        self.q = FifoDiskQueue(self.qdir)

    def produce_chunk(self, bodies):
        push = self.q.push
        for b in bodies:
            push(b)

    def consume_chunk(self, k):
        pop = self.q.pop
        out = []
        for _ in range(k):
            x = pop()
            if x is None:
                break
            out.append(x)
        return out

    def finish_consume(self):
        self.q.close()  # persists info.json (its only commit point)
        self.q = None

    def teardown(self):
        if getattr(self, "q", None) is not None:
            self.q.close()


class PQFilePeer(Peer):
    name = "pq-file"
    label = "persist-queue Queue (files)"
    process_crash = "nothing"
    machine_crash = "up to 100 puts (fsync per chunk)"
    consume_mode = "get() + task_done() per message"
    durability = ("persistqueue.Queue defaults: each put = pickle+write+flush and an info file "
                  "rewritten via tempfile+rename (no fsync); fsync only when a 100-item chunk "
                  "rolls; consume = get()+task_done() per message (info rewritten each ack)")
    latency_capable = True

    def _make(self, path):
        try:
            import persistqueue
        except ImportError as e:
            raise PeerUnavailable(f"persist-queue not installed ({e})")
        tmp = os.path.join(path, "tmp")
        os.makedirs(tmp, exist_ok=True)
        return persistqueue.Queue(os.path.join(path, "q"), tempdir=tmp)

    def setup(self, workdir, args):
        super().setup(workdir, args)
        self.q = self._make(workdir)

    def produce_chunk(self, bodies):
        put = self.q.put
        for b in bodies:
            put(b)

    def consume_chunk(self, k):
        q = self.q
        out = []
        for _ in range(k):
            if q.qsize() == 0:
                break
            out.append(q.get(block=False))
            q.task_done()
        return out

    def latency_pair(self, workdir, args):
        q = self._make(workdir)

        def recv():
            x = q.get()
            q.task_done()
            return [x]

        return q.put, recv, (lambda: None)


class PQSqlitePeer(Peer):
    name = "pq-sqlite"
    label = "persist-queue SQLiteQueue"
    process_crash = "nothing"
    machine_crash = "nothing (fsync per commit)"
    consume_mode = "get() per message (one DELETE transaction)"
    durability = ("persistqueue.SQLiteQueue(auto_commit=True): one SQLite transaction per put and "
                  "per get (row DELETE); WAL, synchronous=FULL (SQLite default) => WAL fsync per commit")
    latency_capable = True

    def _make(self, path, multithreading=False):
        try:
            import persistqueue
        except ImportError as e:
            raise PeerUnavailable(f"persist-queue not installed ({e})")
        return persistqueue.SQLiteQueue(os.path.join(path, "q"), auto_commit=True,
                                        multithreading=multithreading)

    def setup(self, workdir, args):
        super().setup(workdir, args)
        self.q = self._make(workdir)

    def produce_chunk(self, bodies):
        put = self.q.put
        for b in bodies:
            put(b)

    def consume_chunk(self, k):
        import persistqueue

        q = self.q
        out = []
        for _ in range(k):
            try:
                out.append(q.get(block=False))
            except persistqueue.Empty:
                break
        return out

    def teardown(self):
        self.q.close()

    def latency_pair(self, workdir, args):
        q = self._make(workdir, multithreading=True)
        return q.put, (lambda: [q.get()]), q.close


class PQSqliteAckPeer(PQSqlitePeer):
    name = "pq-sqlite-ack"
    label = "persist-queue SQLiteAckQueue"
    consume_mode = "get() + ack() per message (two transactions)"
    durability = ("persistqueue.SQLiteAckQueue: one transaction per put, per get (status->unack) "
                  "and per ack (status->acked); WAL, synchronous=FULL; acked rows stay until "
                  "clear_acked_data()")
    latency_capable = False

    def _make(self, path, multithreading=False):
        try:
            import persistqueue
        except ImportError as e:
            raise PeerUnavailable(f"persist-queue not installed ({e})")
        return persistqueue.SQLiteAckQueue(os.path.join(path, "q"), multithreading=multithreading)

    def consume_chunk(self, k):
        import persistqueue

        q = self.q
        out = []
        for _ in range(k):
            try:
                item = q.get(block=False, raw=True)
            except persistqueue.Empty:
                break
            q.ack(item)
            out.append(item["data"])
        return out


class LiteQueuePeer(Peer):
    name = "litequeue"
    label = "litequeue (SQLite)"
    process_crash = "nothing"
    machine_crash = "commits since the last WAL sync"
    consume_mode = "pop() + done() per message"
    durability = ("litequeue.LiteQueue: autocommit statement per put/pop/done; WAL, "
                  "synchronous=NORMAL => no fsync per commit (survives process crash, not power loss)")

    def setup(self, workdir, args):
        super().setup(workdir, args)
        try:
            import litequeue
        except ImportError as e:
            raise PeerUnavailable(f"litequeue not installed ({e})")
        self.q = litequeue.LiteQueue(os.path.join(workdir, "q.db"))

    def produce_chunk(self, bodies):
        put = self.q.put  # stores bytes as a BLOB in its TEXT column
        for b in bodies:
            put(b)

    def consume_chunk(self, k):
        q = self.q
        out = []
        for _ in range(k):
            m = q.pop()
            if m is None:
                break
            q.done(m.message_id)
            out.append(m.data)
        return out

    def teardown(self):
        self.q.close()


class DiskcacheDequePeer(Peer):
    name = "diskcache-deque"
    label = "diskcache Deque (SQLite)"
    process_crash = "nothing"
    machine_crash = "commits since the last WAL sync"
    consume_mode = "popleft() per message"
    durability = ("diskcache.Deque defaults: one SQLite transaction per append/popleft; WAL, "
                  "synchronous=NORMAL => no fsync per commit")

    def setup(self, workdir, args):
        super().setup(workdir, args)
        try:
            import diskcache
        except ImportError as e:
            raise PeerUnavailable(f"diskcache not installed ({e})")
        self.q = diskcache.Deque(directory=os.path.join(workdir, "dq"))

    def produce_chunk(self, bodies):
        append = self.q.append
        for b in bodies:
            append(b)

    def consume_chunk(self, k):
        popleft = self.q.popleft
        out = []
        for _ in range(k):
            try:
                out.append(popleft())
            except IndexError:
                break
        return out

    def teardown(self):
        self.q._cache.close()


# ---------------------------------- Redis Streams ------------------------------------


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RedisServer:
    """A private redis-server on 127.0.0.1, durable config, stopped by its pid."""

    def __init__(self, workdir: str):
        exe = shutil.which("redis-server")
        if not exe:
            raise PeerUnavailable("redis-server not installed")
        try:
            import redis  # noqa: F401  (client library needed before we start a server)
        except ImportError as e:
            raise PeerUnavailable(f"redis-py not installed ({e})")
        self.dir = os.path.join(workdir, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
             "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
             "--protected-mode", "yes", "--daemonize", "no", "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise PeerUnavailable("redis-server did not start")
                time.sleep(0.02)

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=False)

    def aof_bytes(self) -> int:
        return dir_bytes(self.dir)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM to this pid only
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RedisStreamPeer(Peer):
    name = "redis-xadd"
    label = "Redis Streams XADD (redis-py)"
    process_crash = "nothing (the server holds it)"
    machine_crash = "up to 1 s (AOF everysec)"
    consume_mode = "XREADGROUP COUNT 1 + XACK per message"
    durability = ("Redis 7 Stream on a private local server, AOF appendfsync everysec (up to ~1 s "
                  "of acked writes lost on power loss); produce = one XADD round-trip per message; "
                  "consume = XREADGROUP COUNT 1 + XACK per message")
    latency_capable = True
    pipeline = 1  # messages per round trip

    KEY = b"bench"
    GROUP = b"g"

    def _need_redis(self):
        try:
            import redis  # noqa: F401
        except ImportError as e:
            raise PeerUnavailable(f"redis-py not installed ({e})")

    def setup(self, workdir, args):
        super().setup(workdir, args)
        self._need_redis()
        self.server = RedisServer(workdir)
        self.r = self.server.client()
        self.r.xgroup_create(self.KEY, self.GROUP, id="0", mkstream=True)

    def produce_chunk(self, bodies):
        key = self.KEY
        if self.pipeline == 1:
            xadd = self.r.xadd
            for b in bodies:
                xadd(key, {b"b": b})
        else:
            p = self.r.pipeline(transaction=False)
            bs = self.pipeline
            for i in range(0, len(bodies), bs):
                for b in bodies[i:i + bs]:
                    p.xadd(key, {b"b": b})
                p.execute()

    def consume_chunk(self, k):
        out = []
        r = self.r
        count = self.pipeline
        while len(out) < k:
            resp = r.xreadgroup(self.GROUP, b"c1", {self.KEY: b">"}, count=min(count, k - len(out)))
            if not resp:
                break
            entries = resp[0][1]
            if not entries:
                break
            ids = []
            for mid, fields in entries:
                ids.append(mid)
                out.append(fields[b"b"])
            r.xack(self.KEY, self.GROUP, *ids)
        return out

    def disk_bytes(self):
        return self.server.aof_bytes()

    def teardown(self):
        try:
            self.r.close()
        finally:
            self.server.stop()

    def latency_pair(self, workdir, args):
        self._need_redis()
        server = RedisServer(workdir)
        prod = server.client()
        cons = server.client()
        key = self.KEY
        state = {"last": b"0-0"}

        def send(b):
            prod.xadd(key, {b"b": b})

        def recv():
            resp = cons.xread({key: state["last"]}, count=100, block=0)
            out = []
            for _k, entries in resp:
                for mid, fields in entries:
                    state["last"] = mid
                    out.append(fields[b"b"])
            return out

        def close():
            prod.close()
            cons.close()
            server.stop()

        return send, recv, close


class RedisStreamPipePeer(RedisStreamPeer):
    name = "redis-xadd-pipe100"
    label = "Redis Streams XADD, pipelined 100"
    consume_mode = "XREADGROUP COUNT 100 + one XACK per 100"
    durability = ("as redis-xadd, but XADD pipelined 100 per round-trip; consume = XREADGROUP "
                  "COUNT 100 + one XACK of those 100 ids")
    latency_capable = False
    pipeline = 100


# ---------------------------------- mqlite slot ---------------------------------------


class MqlitePeer(Peer):
    """mqlite through its public Python API, sending in bulk the way a user should: send_batch.

    Produce: one `Producer.send_batch(bodies, topic=...)` per harness chunk (1000 bodies). The
    producer picks the queue per batch (round robin over the topic's 4 queues); the queue and
    first offset of every batch are remembered so the consumer can replay them in send order.
    Consume: `Store.read(MessageQueue(topic, q), offset, k)` following that record.
    Durability: the commit log is an mmap; with flush="async" a background thread msyncs every
    500 ms and nothing waits for it (a process crash loses nothing, an OS crash up to 500 ms).
    """

    name = "mqlite"
    label = "mqlite send_batch(bytes) x1000 / Store.read"
    durability = "mmap commit log, async flush (msync every 500 ms); send_batch of 1000"
    process_crash = "nothing"
    machine_crash = "up to 500 ms"
    consume_mode = "Store.read (the caller tracks offsets)"
    latency_capable = True
    topic = "bench"
    queues = 4

    def setup(self, workdir, args):
        super().setup(workdir, args)
        try:
            import mqlite
        except ImportError as e:
            raise PeerUnavailable(f"mqlite not importable ({e})")
        self.mqlite = mqlite
        self.store = mqlite.open(os.path.join(workdir, "store"), flush="async")
        self.store.create_topic(self.topic, queues=self.queues)
        self.producer = self.store.producer()
        # (queue id, next offset to read, messages left) per sent batch, in send order
        self.segments = collections.deque()
        self.mqs = {}

    def produce_chunk(self, bodies):
        r = self.producer.send_batch(bodies, topic=self.topic)
        self.segments.append([r.message_queue.queue_id, r.first_queue_offset, len(bodies)])

    def finish_produce(self):
        # Reads go through the consume queues, which dispatch fills asynchronously; wait
        # (inside the timed phase) until every produced message is visible.
        want = {}
        for qid, first, count in self.segments:
            want[qid] = max(want.get(qid, 0), first + count)
        deadline = time.monotonic() + 60
        for qid, end in want.items():
            mq = self._mq(qid)
            while self.store.offsets(mq)[1] < end:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dispatch did not reach offset {end} on queue {qid}")
                time.sleep(0.0005)

    def _mq(self, qid):
        mq = self.mqs.get(qid)
        if mq is None:
            mq = self.mqs[qid] = self.mqlite.MessageQueue(self.topic, qid)
        return mq

    def consume_chunk(self, k):
        if not self.segments:
            return []
        seg = self.segments[0]
        qid, offset, left = seg
        msgs = self.store.read(self._mq(qid), offset, min(k, left))
        if not msgs:
            return []
        out = [m.body for m in msgs]
        seg[1] = msgs[-1].queue_offset + 1
        seg[2] = left - len(msgs)
        if seg[2] <= 0:
            self.segments.popleft()
        return out

    def latency_pair(self, workdir, args):
        # Producer thread: Producer.send of one message to a one-queue topic. Consumer thread:
        # PullConsumer.poll, which blocks in the store and is woken by notification.
        import mqlite
        store = mqlite.open(os.path.join(workdir, "lat-store"), flush="async")
        store.create_topic("lat", queues=1)
        producer = store.producer()
        consumer = store.pull_consumer(
            "lat", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        consumer.subscribe("lat")
        Message = mqlite.Message

        def send(body):
            producer.send(Message("lat", body), queue_id=0)

        def recv():
            return [m.body for m in consumer.poll(1.0)]

        def close():
            consumer.close()
            store.close()

        return send, recv, close

    def teardown(self):
        store = getattr(self, "store", None)
        if store is not None:
            store.close()


class MqliteSendPeer(Peer):
    """mqlite one message at a time: `Producer.send(Message(topic, body))` per message into a
    one-queue topic (so the order is the send order), consumed with `PullConsumer.poll()` at
    its default batch (32), offsets committed at the end of the consume phase."""

    name = "mqlite-send"
    label = "mqlite send(Message) / PullConsumer.poll()"
    durability = "mmap commit log, async flush (msync every 500 ms); one send per message"
    process_crash = "nothing"
    machine_crash = "up to 500 ms"
    consume_mode = "poll() (32 per call); offsets committed every 5 s and at the end"
    topic = "bench1"

    def setup(self, workdir, args):
        super().setup(workdir, args)
        try:
            import mqlite
        except ImportError as e:
            raise PeerUnavailable(f"mqlite not importable ({e})")
        self.mqlite = mqlite
        self.store = mqlite.open(os.path.join(workdir, "store"), flush="async")
        self.store.create_topic(self.topic, queues=1)
        self.producer = self.store.producer()
        self.sent = 0
        self.consumer = None

    def produce_chunk(self, bodies):
        send = self.producer.send
        Message = self.mqlite.Message
        topic = self.topic
        for b in bodies:
            send(Message(topic, b))
        self.sent += len(bodies)

    def finish_produce(self):
        # as MqlitePeer: wait (timed) until dispatch made every message visible to readers
        mq = self.mqlite.MessageQueue(self.topic, 0)
        deadline = time.monotonic() + 60
        while self.store.offsets(mq)[1] < self.sent:
            if time.monotonic() > deadline:
                raise RuntimeError(f"dispatch did not reach offset {self.sent}")
            time.sleep(0.0005)

    def consume_chunk(self, k):
        if self.consumer is None:
            self.consumer = self.store.pull_consumer(
                "bench", consume_from=self.mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            self.consumer.subscribe(self.topic)
        out = []
        poll = self.consumer.poll
        while len(out) < k:
            msgs = poll(0.5, min(32, k - len(out)))
            if not msgs:
                break
            out.extend([m.body for m in msgs])
        return out

    def finish_consume(self):
        if self.consumer is not None:
            self.consumer.commit()

    def teardown(self):
        if getattr(self, "consumer", None) is not None:
            self.consumer.close()
        store = getattr(self, "store", None)
        if store is not None:
            store.close()


class MqlitePushPeer(Peer):
    """Latency only: `Producer.send` in the producer thread, a `PushConsumer` (concurrent mode,
    its default 4 threads) calls the listener, which records the arrival."""

    name = "mqlite-push"
    label = "mqlite send -> PushConsumer listener"
    durability = "mmap commit log, async flush (msync every 500 ms)"
    process_crash = "nothing"
    machine_crash = "up to 500 ms"
    latency_capable = True
    throughput_capable = False
    latency_push = True

    def latency_listener(self, workdir, args, deliver):
        import mqlite

        store = mqlite.open(os.path.join(workdir, "lat-store"), flush="async")
        store.create_topic("lat", queues=1)
        producer = store.producer()
        consumer = store.push_consumer(
            "lat", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("lat")
        success = mqlite.ConsumeStatus.CONSUME_SUCCESS

        def listener(msgs):
            deliver([m.body for m in msgs])
            return success

        consumer.register_message_listener(listener)
        consumer.start()
        Message = mqlite.Message

        def send(body):
            producer.send(Message("lat", body), queue_id=0)

        def close():
            consumer.shutdown()
            store.close()

        return send, close


PEER_CLASSES = [
    SimpleQueuePeer,
    RawFilePeer,
    RawFileFsyncPeer,
    RawMmapPeer,
    RawMmapPrefaultPeer,
    QueuelibPeer,
    PQFilePeer,
    PQSqlitePeer,
    PQSqliteAckPeer,
    LiteQueuePeer,
    DiskcacheDequePeer,
    RedisStreamPeer,
    RedisStreamPipePeer,
    MqlitePeer,
    MqliteSendPeer,
    MqlitePushPeer,
]
PEERS = {c.name: c for c in PEER_CLASSES}


# --------------------------------------------------------------------------------------
# Throughput runner
# --------------------------------------------------------------------------------------


def make_bodies(n: int, size: int, seed_bytes: Optional[bytes] = None) -> List[bytes]:
    blob = os.urandom(n * size)
    return [blob[i * size:(i + 1) * size] for i in range(n)]


def run_throughput_once(cls, bodies: List[bytes], args, base: str) -> dict:
    n = len(bodies)
    size = len(bodies[0])
    res = {"peer": cls.name, "size": size, "n": n, **peer_info(cls)}
    workdir = tempfile.mkdtemp(prefix=f"{cls.name}-", dir=base)
    peer = cls()
    try:
        try:
            peer.setup(workdir, args)
        except PeerUnavailable as e:
            res["skipped"] = str(e)
            return res
        # ---------------- produce
        gc.collect()
        t0 = time.perf_counter()
        deadline = t0 + args.budget
        produced = 0
        while produced < n:
            peer.produce_chunk(bodies[produced:produced + CHUNK])
            produced = min(n, produced + CHUNK)
            if time.perf_counter() > deadline:
                break
        peer.finish_produce()
        tp = time.perf_counter() - t0
        res["produce"] = phase(produced, size, tp, produced < n)
        res["disk_bytes"] = peer.disk_bytes()
        # ---------------- consume (everything that was produced)
        gc.collect()
        t0 = time.perf_counter()
        deadline = t0 + args.budget
        consumed = 0
        mismatches = 0
        while consumed < produced:
            got = peer.consume_chunk(min(CHUNK, produced - consumed))
            if not got:
                break
            for j, b in enumerate(got):
                if b != bodies[consumed + j]:
                    mismatches += 1
            consumed += len(got)
            if time.perf_counter() > deadline:
                break
        peer.finish_consume()
        tc = time.perf_counter() - t0
        res["consume"] = phase(consumed, size, tc, consumed < produced)
        res["mismatches"] = mismatches
    except Exception as e:  # report, never hide
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        try:
            peer.teardown()
        except Exception:
            pass
        shutil.rmtree(workdir, ignore_errors=True)
    return res


def peer_info(cls) -> dict:
    """The descriptive fields of a peer class, copied into every result row."""
    return {"label": cls.label or cls.name, "durability": cls.durability,
            "process_crash": cls.process_crash, "machine_crash": cls.machine_crash,
            "consume_mode": cls.consume_mode}


def phase(count: int, size: int, secs: float, partial: bool) -> dict:
    return {
        "count": count,
        "secs": secs,
        "msgs_per_s": count / secs if secs > 0 else 0.0,
        "mb_per_s": count * size / secs / 1e6 if secs > 0 else 0.0,
        "partial": partial,
    }


def summarize(results: List[dict]) -> List[dict]:
    """Median per (peer, size) across repeats."""
    groups = {}
    for r in results:
        groups.setdefault((r["peer"], r["size"]), []).append(r)
    out = []
    for (peer, size), rs in groups.items():
        s = {"peer": peer, "size": size, "runs": len(rs),
             **{k: rs[0].get(k, "") for k in ("label", "durability", "process_crash",
                                              "machine_crash", "consume_mode")}}
        ok = [r for r in rs if "produce" in r and "error" not in r]
        if not ok:
            s["note"] = rs[0].get("skipped") or rs[0].get("error") or "no result"
            s["status"] = "skipped" if "skipped" in rs[0] else "error"
            out.append(s)
            continue
        for ph in ("produce", "consume"):
            vals = [r[ph]["msgs_per_s"] for r in ok if ph in r]
            if not vals:
                continue
            s[ph] = {
                "msgs_per_s": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
                "mb_per_s": statistics.median([r[ph]["mb_per_s"] for r in ok if ph in r]),
                "count": statistics.median([r[ph]["count"] for r in ok if ph in r]),
                "partial": any(r[ph]["partial"] for r in ok if ph in r),
                "secs": statistics.median([r[ph]["secs"] for r in ok if ph in r]),
            }
        s["disk_bytes"] = statistics.median([r["disk_bytes"] for r in ok])
        s["mismatches"] = sum(r.get("mismatches", 0) for r in ok)
        s["errors"] = [r["error"] for r in rs if "error" in r]
        s["status"] = "ok"
        out.append(s)
    return out


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def print_table(title: str, header: List[str], rows: List[List[str]]) -> None:
    if _RICH:
        t = Table(title=title)
        for h in header:
            t.add_column(h)
        for r in rows:
            t.add_row(*r)
        Console().print(t)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def report_throughput(summary: List[dict], n: int) -> None:
    for size in sorted({s["size"] for s in summary}):
        rows = []
        ss = [s for s in summary if s["size"] == size]
        base = next((s for s in ss if s["peer"] == "raw-file" and s["status"] == "ok"), None)
        for s in ss:
            if s["status"] != "ok":
                rows.append([s["peer"], s["status"], "", "", "", "", "", "", s.get("note", "")[:70]])
                continue
            p, c = s["produce"], s.get("consume", {})
            notes = []
            if p["partial"]:
                notes.append(f"produce PARTIAL {int(p['count'])}/{n} in budget")
            if c.get("partial"):
                notes.append(f"consume PARTIAL {int(c['count'])}/{int(p['count'])} in budget")
            if s["mismatches"]:
                notes.append(f"{s['mismatches']} out-of-order/corrupt")
            if s["errors"]:
                notes.append("errors: " + "; ".join(s["errors"])[:60])
            ratio_p = f"{p['msgs_per_s'] / base['produce']['msgs_per_s']:.3f}" if base else "-"
            ratio_c = (f"{c['msgs_per_s'] / base['consume']['msgs_per_s']:.3f}"
                       if base and c else "-")
            per_msg = s["disk_bytes"] / p["count"] if p["count"] else 0
            rows.append([
                s["peer"],
                f"{fmt_rate(p['msgs_per_s'])} ({fmt_rate(p['min'])}-{fmt_rate(p['max'])})",
                f"{p['mb_per_s']:.1f}",
                f"{fmt_rate(c.get('msgs_per_s', 0))} ({fmt_rate(c.get('min', 0))}-{fmt_rate(c.get('max', 0))})",
                f"{c.get('mb_per_s', 0):.1f}",
                f"{ratio_p} / {ratio_c}",
                f"{s['disk_bytes'] / 2**20:.1f}",
                f"{per_msg:.0f}",
                "; ".join(notes),
            ])
        print_table(
            f"Throughput, body {size} B, N={n}, median of runs (min-max)",
            ["peer", "produce msg/s", "MB/s", "consume msg/s", "MB/s", "x raw-file (p/c)",
             "disk MiB", "B/msg", "notes"], rows)


# --------------------------------------------------------------------------------------
# Latency runner
# --------------------------------------------------------------------------------------

LAT_HDR = struct.Struct("<qq")  # seq, send perf_counter_ns


def paced_send(send: Callable[[bytes], None], total: int, rate: float, size: int) -> float:
    """Send `total` bodies (seq, perf_counter_ns timestamp, padding to `size`) at `rate`/s
    (0 = flat out); the timestamp is taken just before send() is called. Returns seconds."""
    pad = b"\0" * max(0, size - LAT_HDR.size)
    pack = LAT_HDR.pack
    now_ns = time.perf_counter_ns
    interval = 1.0 / rate if rate > 0 else 0.0
    t_start = time.perf_counter()
    next_t = t_start
    for seq in range(total):
        if interval:
            next_t += interval
            while True:
                d = next_t - time.perf_counter()
                if d <= 0:
                    break
                time.sleep(d if d > 0.0002 else 0)
        send(pack(seq, now_ns()) + pad)
    return time.perf_counter() - t_start


def run_latency_once(cls, args, base: str) -> dict:
    """One latency run: a producer thread (this one) sends warmup + m paced messages; the
    consumer side (a thread calling recv(), or the peer's own listener threads) records the
    arrival time of each. Pull-style peers are also checked for order."""
    rate = args.rate_map.get(cls.name, args.rate)
    res = {"peer": cls.name, "m": args.m, "rate": rate, "size": args.size}
    workdir = tempfile.mkdtemp(prefix=f"lat-{cls.name}-", dir=base)
    peer = cls()
    close = None
    try:
        warm = args.warmup
        total = warm + args.m
        lat: List[int] = []
        errors: List[str] = []
        done = threading.Event()
        seen = [0]
        lock = threading.Lock()

        def deliver(bodies: List[bytes]) -> None:  # push style: called on the peer's threads
            now = time.perf_counter_ns()
            with lock:
                for b in bodies:
                    seq, ts = LAT_HDR.unpack_from(b, 0)
                    if seq >= warm:
                        lat.append(now - ts)
                seen[0] += len(bodies)
                if seen[0] >= total:
                    done.set()

        try:
            if cls.latency_push:
                send, close = peer.latency_listener(workdir, args, deliver)
            else:
                send, recv, close = peer.latency_pair(workdir, args)
        except PeerUnavailable as e:
            res["skipped"] = str(e)
            return res

        if not cls.latency_push:
            def consumer():
                try:
                    expect = 0
                    while seen[0] < total:
                        for b in recv():
                            now = time.perf_counter_ns()
                            seq, ts = LAT_HDR.unpack_from(b, 0)
                            if seq != expect:
                                errors.append(f"order: got {seq} expected {expect}")
                                expect = seq
                            expect += 1
                            if seq >= warm:
                                lat.append(now - ts)
                            seen[0] += 1
                except Exception as e:  # pragma: no cover
                    errors.append(f"{type(e).__name__}: {e}")
                finally:
                    done.set()

            th = threading.Thread(target=consumer, daemon=True)
            th.start()
        send_secs = paced_send(send, total, rate, args.size)
        if not done.wait(args.budget):
            errors.append(f"consumer did not finish in {args.budget}s (got {len(lat)} samples)")
        with lock:
            lat = sorted(lat)
        res["send_rate"] = total / send_secs
        res["samples"] = len(lat)
        if lat:
            res["p50_us"] = pct(lat, 50) / 1e3
            res["p99_us"] = pct(lat, 99) / 1e3
            res["p999_us"] = pct(lat, 99.9) / 1e3
            res["max_us"] = lat[-1] / 1e3
        if errors:
            res["errors"] = errors[:5]
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        if close:
            try:
                close()
            except Exception:
                pass
        shutil.rmtree(workdir, ignore_errors=True)
    return res


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    k = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def summarize_latency(results: List[dict]) -> List[dict]:
    """Median of each percentile per (peer, size) across runs."""
    groups = {}
    for r in results:
        groups.setdefault((r["peer"], r.get("size")), []).append(r)
    summary = []
    for (peer, size), rs in groups.items():
        info = peer_info(PEERS[peer]) if peer in PEERS else {}
        ok = [r for r in rs if "p50_us" in r]
        errs = [e for r in rs for e in r.get("errors", [])] + [r["error"] for r in rs if "error" in r]
        if not ok:
            skipped = rs[0].get("skipped")
            note = skipped or rs[0].get("error") or str(rs[0].get("errors"))
            summary.append({"peer": peer, "size": size, **info,
                            "status": "skipped" if skipped else "error", "note": note,
                            "errors": errs})
            continue
        med = {k: statistics.median([r[k] for r in ok])
               for k in ("p50_us", "p99_us", "p999_us", "max_us", "send_rate")}
        summary.append({"peer": peer, "size": size, **info, "status": "ok", "runs": len(ok),
                        "rate": ok[0]["rate"], "m": ok[0]["m"],
                        "samples": min(r["samples"] for r in ok), **med, "errors": errs})
    return summary


def report_latency(results: List[dict]) -> List[dict]:
    summary = summarize_latency(results)
    rows = []
    for s in summary:
        if s["status"] != "ok":
            rows.append([s["peer"], str(s["size"]), "-", "-", "-", "-", "-",
                         f"{s['status']}: {s['note']}"[:70]])
            continue
        errs = len(s["errors"])
        rows.append([s["peer"], str(s["size"]), f"{s['p50_us']:.1f}", f"{s['p99_us']:.1f}",
                     f"{s['p999_us']:.1f}", f"{s['max_us']:.0f}",
                     f"{s['rate']:.0f} / {s['send_rate']:.0f}",
                     f"runs={s['runs']}" + (f"; {errs} errors" if errs else "")])
    print_table("End-to-end latency (us), producer thread -> consumer thread, median of runs",
                ["peer", "body B", "p50", "p99", "p99.9", "max", "target / achieved msg/s",
                 "notes"], rows)
    return summary


# --------------------------------------------------------------------------------------
# Physical floors
# --------------------------------------------------------------------------------------


def run_physical(base: str) -> dict:
    out = {}
    # memcpy: bytearray slice assignment is a memmove of the whole buffer
    sz = 256 << 20
    src = bytearray(os.urandom(1 << 20)) * 256
    dst = bytearray(sz)
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        dst[:] = src
        ts.append(time.perf_counter() - t)
    out["memcpy_GBps"] = sz / statistics.median(ts) / 1e9
    del dst

    # page-cache write bandwidth: 512 MiB in 1 MiB write() calls, no fsync; then fdatasync
    path = os.path.join(base, "pc.bin")
    chunk = bytes(src[: 1 << 20])
    total = 512 << 20
    ws, fs = [], []
    for _ in range(3):
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        t = time.perf_counter()
        for _i in range(total >> 20):
            os.write(fd, chunk)
        ws.append(time.perf_counter() - t)
        t = time.perf_counter()
        os.fdatasync(fd)
        fs.append(time.perf_counter() - t)
        os.close(fd)
        os.unlink(path)
    out["pagecache_write_GBps"] = total / statistics.median(ws) / 1e9
    out["writeback_fdatasync_512MiB_s"] = statistics.median(fs)
    out["device_write_GBps_incl_fsync"] = total / statistics.median([a + b for a, b in zip(ws, fs)]) / 1e9

    # mmap write bandwidth into a fresh file (page faults + zeroing included)
    ms = []
    for _ in range(3):
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        os.ftruncate(fd, total)
        mm = mmap.mmap(fd, total)
        t = time.perf_counter()
        for off in range(0, total, 1 << 20):
            mm[off:off + (1 << 20)] = chunk
        ms.append(time.perf_counter() - t)
        mm.close()
        os.close(fd)
        os.unlink(path)
    out["mmap_write_fresh_GBps"] = total / statistics.median(ms) / 1e9
    del src

    # fdatasync latency after a 4 KiB append
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    b4k = os.urandom(4096)
    lat = []
    for _ in range(300):
        os.write(fd, b4k)
        t = time.perf_counter_ns()
        os.fdatasync(fd)
        lat.append(time.perf_counter_ns() - t)
    os.close(fd)
    os.unlink(path)
    lat.sort()
    out["fdatasync_4k_p50_us"] = pct(lat, 50) / 1e3
    out["fdatasync_4k_p99_us"] = pct(lat, 99) / 1e3

    # per-call costs from Python (ns/call), best of 5 x 1e6 calls
    body = os.urandom(128)
    buf = bytearray(1 << 20)
    mm = mmap.mmap(-1, 1 << 20)
    pack_into = LEN.pack_into
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o644)

    def loop_empty(n):
        for _ in range(n):
            pass

    def loop_len(n):
        f = len
        for _ in range(n):
            f(body)

    def loop_pack(n):
        for _ in range(n):
            pack_into(buf, 0, 128)

    def loop_mmap_slice(n):
        for i in range(n):
            mm[0:128] = body

    def loop_write(n):
        w = os.write
        for _ in range(n):
            w(fd, body)

    def best(f, n):
        return min(_timeit(f, n) for _ in range(5)) / n * 1e9

    empty = best(loop_empty, 1_000_000)
    out["py_loop_iter_ns"] = empty
    out["py_call_C_len_ns"] = best(loop_len, 1_000_000) - empty
    out["py_struct_pack_into_ns"] = best(loop_pack, 1_000_000) - empty
    out["py_mmap_slice_store_128B_ns"] = best(loop_mmap_slice, 1_000_000) - empty
    out["py_os_write_128B_ns"] = best(loop_write, 200_000) - empty
    os.close(fd)
    os.unlink(path)
    mm.close()
    rows = [[k, f"{v:.3f}" if v < 100 else f"{v:.0f}"] for k, v in out.items()]
    print_table("Physical floors on this machine", ["metric", "value"], rows)
    return out


def _timeit(f, n):
    t = time.perf_counter()
    f(n)
    return time.perf_counter() - t


# --------------------------------------------------------------------------------------


def environment() -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    try:
        from importlib.metadata import version

        for p in ("persist-queue", "litequeue", "diskcache", "queuelib", "redis"):
            try:
                env[p] = version(p)
            except Exception:
                env[p] = None
    except Exception:
        pass
    exe = shutil.which("redis-server")
    if exe:
        try:
            env["redis-server"] = subprocess.run([exe, "--version"], capture_output=True,
                                                 text=True, timeout=5).stdout.strip()
        except Exception:
            pass
    try:
        import sqlite3

        env["sqlite"] = sqlite3.sqlite_version
    except Exception:
        pass
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="", help="comma-separated peer names (default: all). "
                    "Known: " + ",".join(PEERS))
    ap.add_argument("--n", type=int, default=200_000, help="messages per throughput run")
    ap.add_argument("--size", type=int, default=128, help="body bytes (random)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per peer; median reported")
    ap.add_argument("--budget", type=float, default=30.0,
                    help="seconds allowed per phase before a peer is stopped and marked PARTIAL")
    ap.add_argument("--json", default="", help="write raw results + summary to this file")
    ap.add_argument("--dir", default="", help="base directory for peer data (default: a temp dir)")
    ap.add_argument("--latency", action="store_true", help="end-to-end latency mode")
    ap.add_argument("--m", type=int, default=20_000, help="latency mode: measured messages")
    ap.add_argument("--warmup", type=int, default=500, help="latency mode: unmeasured first messages")
    ap.add_argument("--rate", type=float, default=2000.0, help="latency mode: send rate msgs/s (0 = flat out)")
    ap.add_argument("--rate-for", default="",
                    help="latency mode: per-peer rate overrides, e.g. pq-file=400,pq-sqlite=1000 "
                         "(use for peers whose capacity is below --rate, else you measure a backlog)")
    ap.add_argument("--physical", action="store_true", help="measure machine floors only")
    from bench import PRIME_MIB, prime_page_cache

    ap.add_argument("--prime-mib", type=int, default=PRIME_MIB,
                    help="MiB written and deleted twice before measuring (see "
                         "bench.prime_page_cache; 0: none)")
    args = ap.parse_args(argv)
    args.rate_map = {}
    for item in filter(None, (x.strip() for x in args.rate_for.split(","))):
        k, _, v = item.partition("=")
        args.rate_map[k] = float(v)

    base = args.dir or tempfile.mkdtemp(prefix="peerbench-")
    os.makedirs(base, exist_ok=True)
    env = environment()
    env["page_cache_prime"] = prime_page_cache(base, args.prime_mib)
    print("environment:", json.dumps(env))
    out = {"env": env, "argv": sys.argv, "args": vars(args)}

    if args.physical:
        out["physical"] = run_physical(base)
    else:
        names = [p.strip() for p in args.peers.split(",") if p.strip()] or list(PEERS)
        unknown = [p for p in names if p not in PEERS]
        if unknown:
            ap.error(f"unknown peers: {unknown}; known: {list(PEERS)}")
        classes = [PEERS[p] for p in names]
        if args.latency:
            classes = [c for c in classes if c.latency_capable]
            results = []
            for rep in range(args.repeat):
                for c in classes:
                    r = run_latency_once(c, args, base)
                    r["run"] = rep
                    results.append(r)
                    print(f"  [lat run {rep}] {c.name}: "
                          + (f"p50={r['p50_us']:.1f}us p99={r['p99_us']:.1f}us p99.9={r['p999_us']:.1f}us"
                             if "p50_us" in r else str(r.get('skipped') or r.get('error') or r.get('errors'))),
                          flush=True)
            out["latency_results"] = results
            out["latency_summary"] = report_latency(results)
        else:
            classes = [c for c in classes if c.throughput_capable]
            bodies = make_bodies(args.n, args.size)
            results = []
            for rep in range(args.repeat):
                for c in classes:
                    r = run_throughput_once(c, bodies, args, base)
                    r["run"] = rep
                    results.append(r)
                    if "produce" in r:
                        msg = (f"produce {fmt_rate(r['produce']['msgs_per_s'])}/s"
                               f"{' PARTIAL' if r['produce']['partial'] else ''}")
                        if "consume" in r:
                            msg += (f", consume {fmt_rate(r['consume']['msgs_per_s'])}/s"
                                    f"{' PARTIAL' if r['consume']['partial'] else ''}")
                        if r.get("error"):
                            msg += f" ERROR {r['error']}"
                    else:
                        msg = r.get("skipped") or r.get("error")
                    print(f"  [run {rep}] {c.name} size={args.size}: {msg}", flush=True)
            summary = summarize(results)
            out["results"] = results
            out["summary"] = summary
            report_throughput(summary, args.n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"wrote {args.json}")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
