"""The Redis store against a real redis-server (Debian's) on loopback."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from voxpipe.config import StoreConfig
from voxpipe.server.redis_store import RedisStore, list_calls, show_call

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(REDIS).exists():
        pytest.fail("redis-server is missing: run `make sysdeps`")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis"))],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(5)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    opened = await RedisStore.open(StoreConfig(backend="redis", redis_url=redis_url, ttl_s=600))
    try:
        yield opened
    finally:
        await opened.aclose()


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


async def test_a_call_is_written_in_order_under_one_hash_tag(
    store: RedisStore, redis_url: str
) -> None:
    store.call_started("s1", {"input_sample_rate": 16000})
    store.message("s1", 1, "user", "hello")
    store.message("s1", 1, "assistant", "hi there", "completed")
    store.turn_finished("s1", {"turn_id": 1, "status": "completed"})
    store.save_state("s1", {"messages": [{"role": "user", "content": "hello"}], "epoch": 0})
    store.call_ended("s1", "hangup", {"interruptions": 0})
    await store.flush()
    r = raw(redis_url)
    keys = sorted(r.keys("voxpipe:{s1}:*"))
    assert keys == [f"voxpipe:{{s1}}:{k}" for k in ("call", "messages", "state", "turns")]
    assert [m.count("hello") + m.count("hi there") for m in r.lrange(keys[1], 0, -1)] == [1, 1]
    call = r.hgetall(keys[0])
    assert call["end_reason"] == "hangup" and float(call["ended_at"]) >= float(call["started_at"])
    assert all(0 < r.ttl(k) <= 600 for k in keys)
    assert r.zscore("voxpipe:calls", "s1") is not None
    assert (await store.load_state("s1"))["messages"][0]["content"] == "hello"  # type: ignore[index]
    assert await store.load_state("never-started") is None

    # `voxpipe calls` reads it back in the SQLite store's shapes.
    cfg = StoreConfig(backend="redis", redis_url=redis_url)
    listed = next(c for c in list_calls(cfg) if c["session_id"] == "s1")
    assert listed["turns"] == 1 and listed["end_reason"] == "hangup"
    shown = show_call(cfg, "s1")
    assert shown is not None
    assert [(m["role"], m["text"]) for m in shown["messages"]] == [
        ("user", "hello"),
        ("assistant", "hi there"),
    ]
    assert shown["turns"] == [{"turn_id": 1, "status": "completed", "voice_to_voice_ms": None}]
    assert show_call(cfg, "no-such-call") is None


async def test_an_older_copy_of_a_session_cannot_overwrite_or_end_the_newer(
    redis_url: str,
) -> None:
    cfg = StoreConfig(backend="redis", redis_url=redis_url)
    old, new = await RedisStore.open(cfg), await RedisStore.open(cfg)
    try:
        old.save_state("s2", {"turns": 2, "epoch": 0})
        await old.flush()
        new.save_state("s2", {"turns": 3, "epoch": 1})  # restored on another worker
        new.call_started("s2", {})
        await new.flush()
        old.save_state("s2", {"turns": 2, "stale": True, "epoch": 0})  # the old copy goes on
        old.call_ended("s2", "resume_expired", {})
        await old.flush()
        assert await new.load_state("s2") == {"turns": 3, "epoch": 1}
        assert raw(redis_url).hget("voxpipe:{s2}:call", "end_reason") == ""
        new.call_ended("s2", "hangup", {})
        await new.flush()
        assert raw(redis_url).hget("voxpipe:{s2}:call", "end_reason") == "hangup"
    finally:
        await old.aclose()
        await new.aclose()


async def test_an_unreachable_server_fails_at_open_with_its_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}"):
        await RedisStore.open(StoreConfig(backend="redis", redis_url=url))


async def test_a_full_queue_drops_and_counts_instead_of_waiting(store: RedisStore) -> None:
    for i in range(1200):  # nothing awaited: the writer task cannot drain meanwhile
        store.message("s3", i, "user", "x")
    assert store.dropped == 1200 - 1000
    await store.flush()
