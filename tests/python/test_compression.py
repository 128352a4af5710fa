"""Compressed bodies (FORMAT.md §1.6): producers that compress, consumers that see the body as
sent, and records written as RocketMQ's Java producer writes them (zlib, with or without the
codec bits), patched into a real store's commit log."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pytest

import mqlite
from mqlite.cli import main

FIRST = mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
CODEC_BITS = {"lz4": 0x101, "zstd": 0x201, "zlib": 0x301}


def _events(n: int) -> bytes:
    return json.dumps([{"event": "view", "user": i, "path": f"/p/{i % 7}"} for i in range(n)]).encode()


def _read_all(store: mqlite.Store, topic: str, count: int) -> list[mqlite.MessageExt]:
    c = store.pull_consumer("reader", consume_from=FIRST)
    c.subscribe(topic)
    got: list[mqlite.MessageExt] = []
    while len(got) < count:
        batch = c.poll(2.0, 64)
        assert batch, f"only {len(got)} of {count} messages arrived"
        got.extend(batch)
    c.close()
    return sorted(got, key=lambda m: (m.queue_id, m.queue_offset))


@pytest.mark.parametrize("codec", ["zlib", "lz4", "zstd"])
def test_a_compressing_producer_stores_less_and_consumers_get_the_body_as_sent(
    store: mqlite.Store, codec: str
) -> None:
    body = _events(100)
    p = store.producer(compress_over=1024, compression=codec)  # type: ignore[arg-type]
    assert p.compression == (codec, 1024, 5)
    small, noise = b"x" * 1023, random.Random(20240611).randbytes(8000)  # fixed seed: incompressible
    for b in (body, small, noise):
        p.send(mqlite.Message("events", b), queue_id=0)
    p.send_async(mqlite.Message("events", body), queue_id=0).result(5)
    got = _read_all(store, "events", 4)
    assert [m.body for m in got] == [body, small, noise, body]
    # compressed: the record flags it and holds fewer bytes than the body
    for m in (got[0], got[3]):
        assert m.sysflag == CODEC_BITS[codec]
        assert len(m.raw_body) * 4 < len(body)
        assert m.store_size < len(body)
    # under the threshold, or not shorter once compressed: stored as sent
    for m, b in ((got[1], small), (got[2], noise)):
        assert m.sysflag == 0
        assert m.raw_body == b


def test_no_compression_unless_asked_and_never_for_batches(store: mqlite.Store) -> None:
    body = _events(100)
    store.producer().send(mqlite.Message("plain", body), queue_id=0)
    p = store.producer(compress_over=0)
    assert store.producer().compression is None
    p.send_batch([mqlite.Message("plain", body), mqlite.Message("plain", body)], queue_id=0)
    got = _read_all(store, "plain", 3)
    assert [(m.sysflag, m.raw_body) for m in got] == [(0, body)] * 3


def test_the_size_limit_applies_to_the_stored_bytes(tmp_path: Path) -> None:
    # As in RocketMQ: the broker checks the body it receives, which is the compressed one.
    with mqlite.open(tmp_path / "s", max_message_size=4096) as s:
        body = _events(300)
        assert len(body) > 4096
        with pytest.raises(mqlite.MessageTooLargeError):
            s.producer().send(mqlite.Message("t", body))
        s.producer(compress_over=4096, compression="zstd").send(mqlite.Message("t", body))
        assert [m.body for m in _read_all(s, "t", 1)] == [body]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"compress_over": 10, "compression": "snappy"}, "'zlib', 'lz4' or 'zstd'"),
        ({"compress_over": 10, "compression": 3}, "'zlib', 'lz4' or 'zstd'"),
        ({"compress_over": 10, "compression_level": 10}, "0 to 9"),
        ({"compress_over": 10, "compression": "zstd", "compression_level": 0}, "1 to 22"),
        ({"compress_over": -1}, ">= 0"),
        ({"compress_over": True}, "int or None"),
        ({"compress_over": 1.5}, "int or None"),
        ({"compression_level": "5"}, "int or None"),
    ],
)
def test_bad_compression_settings_are_config_errors(
    store: mqlite.Store, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(mqlite.InvalidConfigError, match=match):
        store.producer(**kwargs)  # type: ignore[arg-type]


def _patch_sysflag(store_path: Path, commit_log_offset: int, sysflag: int) -> None:
    """Sets a stored record's SYSFLAG and renews its whole-record CRC property (FORMAT.md
    §1.3, §1.5), as a record RocketMQ's Java producer sent would carry it."""
    path = store_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    at = commit_log_offset
    total = int.from_bytes(data[at : at + 4], "big")
    rec = data[at : at + total]
    rec[36:40] = sysflag.to_bytes(4, "big")
    assert bytes(rec[-20:-11]) == b"__CRC32#\x01"
    crc = zlib.crc32(bytes(rec[:-20])) & 0x7FFFFFFF
    rec[-11:-1] = str(crc).zfill(10)[::-1].encode()
    data[at : at + total] = rec
    path.write_bytes(bytes(data))


def test_records_of_rocketmqs_java_producer_decode_and_a_bad_codec_is_a_typed_error(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = _events(80)
    # java.util.zip.Deflater(5) is zlib at level 5: the Java producer's default compression.
    java_zlib = zlib.compress(body, 5)
    with mqlite.open(store_path) as s:
        p = s.producer()
        offsets = [p.send(mqlite.Message("java", java_zlib), queue_id=0).commit_log_offset for _ in range(3)]
    _patch_sysflag(store_path, offsets[0], 0x301)  # zlib, with the codec bits
    _patch_sysflag(store_path, offsets[1], 0x001)  # zlib, from before the codec bits
    _patch_sysflag(store_path, offsets[2], 0x701)  # no such codec
    with mqlite.open(store_path) as s:
        good, legacy, bad = _read_all(s, "java", 3)
        assert good.body == body and good.raw_body == java_zlib
        assert legacy.body == body and legacy.sysflag == 0x1
        with pytest.raises(mqlite.CompressionError, match="compression type 7") as info:
            bad.body  # noqa: B018 - the property access is what raises
        assert info.value.code == "COMPRESSION"
        assert bad.raw_body == java_zlib  # the record itself is intact
    assert main(["tail", str(store_path), "java", "-q", "0", "-o", "beginning", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [r["body"] for r in rows[:2]] == [body.decode()] * 2
    assert "body_error" not in rows[0]
    assert "compression type 7" in rows[2]["body_error"]
    assert rows[2]["body_encoding"] == "base64"


def test_the_asyncio_producer_takes_the_same_settings(store: mqlite.Store) -> None:
    import asyncio

    from mqlite.aio import AsyncProducer

    body = _events(100)

    async def send() -> None:
        async with AsyncProducer(store, compress_over=1024, compression="lz4") as p:
            await p.send(mqlite.Message("aio", body), queue_id=0)

    asyncio.run(send())
    (m,) = _read_all(store, "aio", 1)
    assert (m.sysflag, m.body) == (0x101, body)
