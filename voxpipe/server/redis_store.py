"""Calls, transcripts, per-turn metrics and session state in Redis, shared by every worker.

The same contract as the SQLite store: each method only queues the write, and
one task applies the queue in order, batched into pipelines, so the event loop
never waits on the network. What makes it worth a network hop is
:meth:`RedisStore.load_state`: a worker that never saw a session can carry it
on after the worker that held it died.

Every key of a session carries its id as a hash tag (``voxpipe:{id}:state``), so
a Redis Cluster keeps one call's keys on one shard, and every key expires
``ttl_s`` after the call's last write. A write that fails is retried once; the
queue is bounded, and past the bound a write is dropped and counted.

Writes of the state are fenced by the session's *epoch*, which each restore on a
new worker raises: a worker still holding an older copy of the session (it was
draining, or the hash ring moved the session while it waited for a reconnect)
can neither overwrite the newer state nor mark the live call ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from voxpipe.config import StoreConfig

log = logging.getLogger("voxpipe.store")

MAX_PENDING = 1000  # writes
MAX_BATCH = 64  # writes per pipeline round trip
RETRY_DELAY_S = 0.2
CALLS_KEPT = 10_000  # the index of recent calls (``voxpipe calls``) is trimmed to this

Write = Callable[[Pipeline], None]

# KEYS[1]: the state. ARGV[1]: this writer's epoch. True when no newer epoch wrote it.
_NOT_STALE = """
local current = redis.call('GET', KEYS[1])
if current then
  local ok, state = pcall(cjson.decode, current)
  if ok and type(state) == 'table' and tonumber(state['epoch'] or 0) > tonumber(ARGV[1]) then
    return 0
  end
end
"""
# ARGV[2]: the state's JSON, ARGV[3]: ttl.
SAVE_STATE = (
    _NOT_STALE
    + """
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"""
)
# KEYS[2]: the call hash. ARGV[2..4]: ended_at, end_reason, counts; ARGV[5]: ttl.
END_CALL = (
    _NOT_STALE
    + """
redis.call('HSET', KEYS[2], 'ended_at', ARGV[2], 'end_reason', ARGV[3], 'counts', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""
)


class RedisStore:
    """The shared :class:`~voxpipe.conversation.services.CallStore`."""

    shared = True  # another worker can load what this one saved

    def __init__(self, config: StoreConfig, client: aioredis.Redis) -> None:
        self.prefix = config.key_prefix
        self.ttl_s = config.ttl_s
        self._redis = client
        self._queue: asyncio.Queue[Write] = asyncio.Queue(MAX_PENDING)
        self.dropped = 0
        self.failed = 0
        self._epochs: dict[str, int] = {}  # the epoch of each session this worker writes
        self._writer: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: StoreConfig) -> RedisStore:
        """Connect and check the server answers; a server that does not is a load failure
        (``/readyz`` says why), not a surprise at the first call."""
        client = aioredis.Redis.from_url(
            config.redis_url,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            health_check_interval=15,
            decode_responses=True,
        )
        try:
            await client.ping()
        except RedisError as exc:
            await client.aclose()
            raise RuntimeError(f"redis at {config.redis_url} does not answer: {exc}") from exc
        store = cls(config, client)
        store._writer = asyncio.create_task(store._write_loop(), name="redis-store")
        return store

    def key(self, session_id: str, kind: str) -> str:
        return f"{self.prefix}{{{session_id}}}:{kind}"

    # -- writing (non-blocking; applied in order) -------------------------------

    def _submit(self, write: Write) -> None:
        try:
            self._queue.put_nowait(write)
        except asyncio.QueueFull:
            self.dropped += 1
            log.error("store queue full (%d writes): a write was dropped", MAX_PENDING)

    async def _write_loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for attempt in (1, 2):
                try:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for write in batch:
                            write(pipe)
                        await pipe.execute()
                    break
                except RedisError as exc:
                    if attempt == 2:
                        self.failed += len(batch)
                        log.error("redis write of %d commands failed: %s", len(batch), exc)
                    else:
                        await asyncio.sleep(RETRY_DELAY_S)
            for _ in batch:
                self._queue.task_done()

    def _touch(self, pipe: Pipeline, session_id: str, *kinds: str) -> None:
        for kind in kinds:
            pipe.expire(self.key(session_id, kind), self.ttl_s)

    def call_started(self, session_id: str, info: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(info)
        key, index = self.key(session_id, "call"), f"{self.prefix}calls"

        def write(pipe: Pipeline) -> None:
            pipe.hsetnx(key, "started_at", now)  # a restored call keeps its first start
            pipe.hset(key, mapping={"info": body, "ended_at": "", "end_reason": ""})
            pipe.zadd(index, {session_id: now}, nx=True)
            pipe.zremrangebyrank(index, 0, -CALLS_KEPT - 1)
            self._touch(pipe, session_id, "call")

        self._submit(write)

    def message(
        self, session_id: str, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None:
        body = json.dumps(
            {"turn_id": turn_id, "role": role, "text": text, "status": status, "at": time.time()}
        )

        def write(pipe: Pipeline) -> None:
            pipe.rpush(self.key(session_id, "messages"), body)
            self._touch(pipe, session_id, "messages")

        self._submit(write)

    def turn_finished(self, session_id: str, record: dict[str, Any]) -> None:
        field, body = str(int(record["turn_id"])), json.dumps(record, default=str)

        def write(pipe: Pipeline) -> None:
            pipe.hset(self.key(session_id, "turns"), field, body)
            self._touch(pipe, session_id, "turns")

        self._submit(write)

    def save_state(self, session_id: str, state: dict[str, Any]) -> None:
        body, epoch = json.dumps(state), int(state.get("epoch", 0))
        self._epochs[session_id] = epoch

        def write(pipe: Pipeline) -> None:
            pipe.eval(SAVE_STATE, 1, self.key(session_id, "state"), epoch, body, self.ttl_s)

        self._submit(write)

    def call_ended(self, session_id: str, reason: str, counts: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(counts)
        epoch = self._epochs.pop(session_id, 0)
        keys = (self.key(session_id, "state"), self.key(session_id, "call"))

        def write(pipe: Pipeline) -> None:
            pipe.eval(END_CALL, 2, *keys, epoch, now, reason, body, self.ttl_s)

        self._submit(write)

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until every queued write is applied (shutdown, tests)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout_s)

    async def aclose(self) -> None:
        await self.flush()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        await self._redis.aclose()

    # -- reading (restore on another worker, the CLI) ------------------------------

    async def load_state(self, session_id: str) -> dict[str, Any] | None:
        """The state a worker last saved for ``session_id``; None if there is none (never
        started, expired) or Redis cannot be reached."""
        try:
            body = await self._redis.get(self.key(session_id, "state"))
        except RedisError as exc:
            log.error("redis read of session %s failed: %s", session_id, exc)
            return None
        return json.loads(body) if body else None


# -- the CLI (``voxpipe calls`` with store.backend redis): same shapes as store.py ----------


def _sync_client(config: StoreConfig) -> Any:
    import redis

    return redis.Redis.from_url(config.redis_url, socket_timeout=5, decode_responses=True)


def _float(value: str | None) -> float | None:
    return float(value) if value else None


def list_calls(config: StoreConfig, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent calls first, with their turn counts."""
    r = _sync_client(config)
    prefix = config.key_prefix
    out = []
    for session_id in r.zrevrange(f"{prefix}calls", 0, limit - 1):
        call = r.hgetall(f"{prefix}{{{session_id}}}:call")
        if not call:
            continue  # expired
        started, ended = _float(call.get("started_at")), _float(call.get("ended_at"))
        out.append(
            {
                "session_id": session_id,
                "started_at": started,
                "duration_s": None
                if ended is None or started is None
                else round(ended - started, 1),
                "end_reason": call.get("end_reason") or None,
                "turns": r.hlen(f"{prefix}{{{session_id}}}:turns"),
            }
        )
    return out


def show_call(config: StoreConfig, session_id: str) -> dict[str, Any] | None:
    """One call: its messages in order and each turn's outcome and latency."""
    r = _sync_client(config)
    prefix = config.key_prefix
    if not r.exists(f"{prefix}{{{session_id}}}:call"):
        matches = [s for s in r.zrevrange(f"{prefix}calls", 0, -1) if s.startswith(session_id)]
        if not matches:
            return None
        session_id = matches[0]
    key = f"{prefix}{{{session_id}}}:"
    call = r.hgetall(key + "call")
    messages = [json.loads(m) for m in r.lrange(key + "messages", 0, -1)]
    turns = sorted((json.loads(t) for t in r.hvals(key + "turns")), key=lambda t: int(t["turn_id"]))
    return {
        "session_id": session_id,
        "started_at": _float(call.get("started_at")),
        "ended_at": _float(call.get("ended_at")),
        "end_reason": call.get("end_reason") or None,
        "info": json.loads(call.get("info") or "{}"),
        "counts": json.loads(call.get("counts") or "{}"),
        "messages": [
            {k: m.get(k) for k in ("turn_id", "role", "text", "status")} for m in messages
        ],
        "turns": [
            {
                "turn_id": int(t["turn_id"]),
                "status": t.get("status"),
                "voice_to_voice_ms": t.get("voice_to_voice_ms"),
            }
            for t in turns
        ],
    }
