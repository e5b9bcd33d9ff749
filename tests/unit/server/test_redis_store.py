"""The Redis store against a real redis-server (Debian's) on loopback."""

from __future__ import annotations

import shutil
import socket
from collections.abc import AsyncIterator

import pytest
import redis

from voxpipe.config import StoreConfig
from voxpipe.conversation.services import CallRecord
from voxpipe.server.redis_store import RedisStore, list_calls, show_call

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


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
    call = CallRecord("c1", "s1", "key:acme")
    store.call_started(call, {"input_sample_rate": 16000})
    store.message(call, 1, "user", "hello")
    store.message(call, 1, "assistant", "hi there", "completed")
    store.turn_finished(call, {"turn_id": 1, "status": "completed"})
    state = {"messages": [{"role": "user", "content": "hello"}], "epoch": 0, "call_id": "c1"}
    store.save_state(call, state)
    await store.flush()
    assert (await store.load_state("s1"))["messages"][0]["content"] == "hello"  # type: ignore[index]
    assert await store.load_state("never-started") is None
    store.call_ended(call, "hangup", {"interruptions": 0})
    await store.flush()
    r = raw(redis_url)
    keys = sorted(r.keys("voxpipe:{s1}:*"))
    assert keys == [f"voxpipe:{{s1}}:{k}:c1" for k in ("call", "messages", "turns")]
    assert [m.count("hello") + m.count("hi there") for m in r.lrange(keys[1], 0, -1)] == [1, 1]
    record = r.hgetall(keys[0])
    assert record["end_reason"] == "hangup"
    assert float(record["ended_at"]) >= float(record["started_at"])
    assert record["owner"] == "key:acme"
    assert all(0 < r.ttl(k) <= 600 for k in keys)
    assert r.zscore("voxpipe:calls", "c1:s1") is not None
    # Ended: the session cannot be resumed, and its id is free for a new call.
    assert await store.load_state("s1") is None

    # `voxpipe calls` reads it back in the SQLite store's shapes.
    cfg = StoreConfig(backend="redis", redis_url=redis_url)
    listed = next(c for c in list_calls(cfg) if c["call_id"] == "c1")
    assert listed["session_id"] == "s1" and listed["owner"] == "key:acme"
    assert listed["turns"] == 1 and listed["end_reason"] == "hangup"
    for wanted in ("s1", "c1"):
        shown = show_call(cfg, wanted)
        assert shown is not None
        assert [(m["role"], m["text"]) for m in shown["messages"]] == [
            ("user", "hello"),
            ("assistant", "hi there"),
        ]
        assert shown["turns"] == [{"turn_id": 1, "status": "completed", "voice_to_voice_ms": None}]
    assert show_call(cfg, "no-such-call") is None


async def test_a_reused_session_id_gets_a_record_of_its_own(
    store: RedisStore, redis_url: str
) -> None:
    first, second = CallRecord("c4a", "s4", "key:acme"), CallRecord("c4b", "s4", "key:other")
    store.call_started(first, {})
    store.message(first, 1, "user", "my order number is four")
    store.turn_finished(first, {"turn_id": 1, "status": "completed"})
    store.call_ended(first, "hangup", {"turns": 1})
    store.call_started(second, {})
    store.message(second, 1, "user", "hello from someone else")
    store.turn_finished(second, {"turn_id": 1, "status": "interrupted"})
    await store.flush()
    cfg = StoreConfig(backend="redis", redis_url=redis_url)
    old, new = show_call(cfg, "c4a"), show_call(cfg, "c4b")
    assert old is not None and new is not None
    assert [m["text"] for m in old["messages"]] == ["my order number is four"]
    assert old["turns"][0]["status"] == "completed" and old["end_reason"] == "hangup"
    assert [m["text"] for m in new["messages"]] == ["hello from someone else"]
    assert new["end_reason"] is None and new["owner"] == "key:other"
    assert show_call(cfg, "s4")["call_id"] == "c4b"  # type: ignore[index]  # the latest


async def test_an_older_copy_of_a_session_cannot_overwrite_or_end_the_newer(
    redis_url: str,
) -> None:
    cfg = StoreConfig(backend="redis", redis_url=redis_url)
    old, new = await RedisStore.open(cfg, "w-old"), await RedisStore.open(cfg, "w-new")
    before, after = CallRecord("c2", "s2", "key:acme", 0), CallRecord("c2", "s2", "key:acme", 1)
    try:
        old.save_state(before, {"turns": 2, "epoch": 0, "call_id": "c2"})
        await old.flush()
        new.save_state(after, {"turns": 3, "epoch": 1, "call_id": "c2"})  # restored elsewhere
        new.call_started(after, {})
        await new.flush()
        old.save_state(before, {"turns": 2, "stale": True, "epoch": 0})  # the old copy goes on
        old.call_ended(before, "resume_expired", {})
        await old.flush()
        assert await new.load_state("s2") == {"turns": 3, "epoch": 1, "call_id": "c2"}
        assert raw(redis_url).hget("voxpipe:{s2}:call:c2", "end_reason") == ""
        new.call_ended(after, "hangup", {})
        await new.flush()
        assert raw(redis_url).hget("voxpipe:{s2}:call:c2", "end_reason") == "hangup"
    finally:
        await old.aclose()
        await new.aclose()


async def test_a_dead_workers_live_calls_are_marked_crashed_and_a_restore_takes_them_back(
    redis_url: str,
) -> None:
    cfg = StoreConfig(backend="redis", redis_url=redis_url)
    dead = await RedisStore.open(cfg, "w-dead")
    call = CallRecord("c5", "s5", "key:acme")
    dead.call_started(call, {})
    dead.save_state(call, {"turns": 1, "epoch": 0, "call_id": "c5", "owner": "key:acme"})
    await dead.flush()
    # A SIGKILL: the writer stops, the heartbeat is never refreshed nor deleted.
    for task in (dead._writer, dead._sweeper):
        assert task is not None
        task.cancel()
    r = raw(redis_url)
    alive = await RedisStore.open(cfg, "w-alive")  # its first sweep runs at open
    try:
        assert r.hget("voxpipe:{s5}:call:c5", "end_reason") == ""  # the beat is still fresh
        r.delete("voxpipe:worker:w-dead")  # what STALE_S of silence does
        assert await alive.sweep() == 1
        record = r.hgetall("voxpipe:{s5}:call:c5")
        assert record["end_reason"] == "crashed" and float(record["ended_at"]) > 0
        assert listed_reason(cfg, "c5") == "crashed"
        assert await alive.load_state("s5") is not None  # its owner may still resume it
        assert await alive.sweep() == 0  # once

        # A worker that starts again under the same name knows its last life's calls died.
        again = CallRecord("c6", "s6", "key:acme")
        alive.call_started(again, {})
        await alive.flush()
        for task in (alive._writer, alive._sweeper):  # killed too; its beat is still fresh
            assert task is not None
            task.cancel()
        reborn = await RedisStore.open(cfg, "w-alive")
        try:
            assert r.hget("voxpipe:{s6}:call:c6", "end_reason") == "crashed"
            # The restore takes it back: live again, held by the worker that restored it.
            reborn.call_started(CallRecord("c6", "s6", "key:acme", 1), {})
            await reborn.flush()
            assert r.hget("voxpipe:{s6}:call:c6", "end_reason") == ""
            assert await reborn.sweep() == 0
        finally:
            await reborn.aclose()
    finally:
        await alive.aclose()
        await dead._redis.aclose()


def listed_reason(cfg: StoreConfig, call_id: str) -> str | None:
    return next(c for c in list_calls(cfg) if c["call_id"] == call_id)["end_reason"]


async def test_an_unreachable_server_fails_at_open_with_its_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}"):
        await RedisStore.open(StoreConfig(backend="redis", redis_url=url))


async def test_a_full_queue_drops_and_counts_instead_of_waiting(store: RedisStore) -> None:
    for i in range(1200):  # nothing awaited: the writer task cannot drain meanwhile
        store.message(CallRecord("c3", "s3", "anonymous"), i, "user", "x")
    assert store.dropped == 1200 - 1000
    await store.flush()
