"""Calls, transcripts, per-turn metrics and session state in Redis, shared by every worker.

The same contract as the SQLite store: each method only queues the write, and
one task applies the queue in order, batched into pipelines, so the event loop
never waits on the network. What makes it worth a network hop is
:meth:`RedisStore.load_state`: a worker that never saw a session can carry it
on after the worker that held it died.

Every key of a session carries its id as a hash tag (``voxpipe:{id}:state``), so
a Redis Cluster keeps one call's keys on one shard; a call's record is keyed by
its call id inside that (``voxpipe:{id}:call:<call id>``), so a later call that
reuses the session id gets a record of its own. Every key expires ``ttl_s``
after the call's last write. A write that fails is retried once; the queue is
bounded, and past the bound a write is dropped and counted.

Every worker keeps a heartbeat key (``voxpipe:worker:<name>``, holding a
per-start nonce) and, on each beat, sweeps the set of live calls: a call whose
holder's heartbeat is gone, or names another start of that worker, is marked
``crashed`` with the time it was found. A restore of that call on any worker
takes it back.

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
from voxpipe.conversation.services import CallRecord
from voxpipe.server.holders import HEARTBEAT_S, STALE_S, new_holder

log = logging.getLogger("voxpipe.store")

MAX_PENDING = 1000  # writes
MAX_BATCH = 64  # writes per pipeline round trip
RETRY_DELAY_S = 0.2
CALLS_KEPT = 10_000  # the index of recent calls (``voxpipe calls``) is trimmed to this
SWEEP_BATCH = 500  # live calls looked at per round trip of a sweep

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
# KEYS[2]: the call hash. ARGV[2..4]: ended_at, end_reason, counts; ARGV[5]: ttl; ARGV[6]:
# the call id. An older copy cannot end the call a newer epoch carries on; the ended
# session's state goes, so the session cannot be resumed and its id is free again.
END_CALL = (
    _NOT_STALE
    + """
if tonumber(redis.call('HGET', KEYS[2], 'epoch') or 0) > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[2], 'ended_at', ARGV[2], 'end_reason', ARGV[3], 'counts', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[5])
if current then
  local ok, state = pcall(cjson.decode, current)
  if ok and type(state) == 'table' and state['call_id'] == ARGV[6] then
    redis.call('DEL', KEYS[1])
  end
end
return 1
"""
)
# KEYS[1]: the call hash. ARGV[1]: its holder as the sweep saw it, ARGV[2]: now. Marks it
# crashed unless it ended, or a restore took it to another holder, since the sweep looked.
MARK_CRASHED = """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
if (redis.call('HGET', KEYS[1], 'ended_at') or '') ~= '' then return 0 end
redis.call('HSET', KEYS[1], 'ended_at', ARGV[2], 'end_reason', 'crashed')
return 1
"""


def _member(call: CallRecord) -> str:
    """A call in the indexes: call id first (fixed alphabet, no ':'), then its session id."""
    return f"{call.call_id}:{call.session_id}"


def _split(member: str) -> tuple[str, str]:
    call_id, _, session_id = member.partition(":")
    return call_id, session_id


class RedisStore:
    """The shared :class:`~voxpipe.conversation.services.CallStore`."""

    shared = True  # another worker can load what this one saved

    def __init__(self, config: StoreConfig, client: aioredis.Redis, worker: str = "local") -> None:
        self.prefix = config.key_prefix
        self.ttl_s = config.ttl_s
        self._redis = client
        self._queue: asyncio.Queue[Write] = asyncio.Queue(MAX_PENDING)
        self.dropped = 0
        self.failed = 0
        self.worker = worker
        self.holder = new_holder(worker)
        self._writer: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: StoreConfig, worker: str = "local") -> RedisStore:
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
        store = cls(config, client, worker)
        await store.sweep()  # calls of this worker's last life are dead now
        store._writer = asyncio.create_task(store._write_loop(), name="redis-store")
        store._sweeper = asyncio.create_task(store._sweep_loop(), name="redis-store-sweep")
        return store

    def key(self, session_id: str, kind: str) -> str:
        return f"{self.prefix}{{{session_id}}}:{kind}"

    def call_key(self, call: CallRecord, kind: str) -> str:
        return self.key(call.session_id, f"{kind}:{call.call_id}")

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

    def call_started(self, call: CallRecord, info: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(info)
        key, member = self.call_key(call, "call"), _member(call)

        def write(pipe: Pipeline) -> None:
            pipe.hsetnx(key, "started_at", now)  # a restored call keeps its first start
            pipe.hset(
                key,
                mapping={
                    "info": body,
                    "call_id": call.call_id,
                    "session_id": call.session_id,
                    "owner": call.owner,
                    "holder": self.holder,  # a restore takes the call back
                    "epoch": call.epoch,
                    "ended_at": "",
                    "end_reason": "",
                },
            )
            pipe.expire(key, self.ttl_s)
            pipe.zadd(f"{self.prefix}calls", {member: now}, nx=True)
            pipe.zremrangebyrank(f"{self.prefix}calls", 0, -CALLS_KEPT - 1)
            pipe.sadd(f"{self.prefix}live", member)

        self._submit(write)

    def message(
        self, call: CallRecord, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None:
        body = json.dumps(
            {"turn_id": turn_id, "role": role, "text": text, "status": status, "at": time.time()}
        )
        key = self.call_key(call, "messages")

        def write(pipe: Pipeline) -> None:
            pipe.rpush(key, body)
            pipe.expire(key, self.ttl_s)

        self._submit(write)

    def turn_finished(self, call: CallRecord, record: dict[str, Any]) -> None:
        field, body = str(int(record["turn_id"])), json.dumps(record, default=str)
        key = self.call_key(call, "turns")

        def write(pipe: Pipeline) -> None:
            pipe.hset(key, field, body)
            pipe.expire(key, self.ttl_s)

        self._submit(write)

    def save_state(self, call: CallRecord, state: dict[str, Any]) -> None:
        body, key = json.dumps(state), self.key(call.session_id, "state")

        def write(pipe: Pipeline) -> None:
            pipe.eval(SAVE_STATE, 1, key, call.epoch, body, self.ttl_s)

        self._submit(write)

    def call_ended(self, call: CallRecord, reason: str, counts: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(counts)
        keys = (self.key(call.session_id, "state"), self.call_key(call, "call"))

        def write(pipe: Pipeline) -> None:
            pipe.eval(END_CALL, 2, *keys, call.epoch, now, reason, body, self.ttl_s, call.call_id)

        self._submit(write)

    # -- crashed calls -----------------------------------------------------------

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self.sweep()
            except RedisError as exc:  # the next beat tries again
                log.error("redis heartbeat failed: %s", exc)

    async def sweep(self) -> int:
        """Beat, then mark crashed the live calls whose holder is dead: its worker's beat
        is gone (silent for ``STALE_S``) or names another start. Returns how many."""
        r, prefix = self._redis, self.prefix
        await r.set(f"{prefix}worker:{self.worker}", self.holder, ex=int(STALE_S))
        found = 0
        cursor = 0
        while True:
            cursor, members = await r.sscan(f"{prefix}live", cursor, count=SWEEP_BATCH)
            if members:
                found += await self._sweep_batch([str(m) for m in members])
            if cursor == 0:
                break
        if found:
            log.warning("marked %d call(s) crashed: their worker died while they were live", found)
        return found

    async def _sweep_batch(self, members: list[str]) -> int:
        r, prefix = self._redis, self.prefix
        async with r.pipeline(transaction=False) as pipe:
            for member in members:
                call_id, session_id = _split(member)
                pipe.hmget(self.key(session_id, f"call:{call_id}"), "holder", "ended_at")
            rows = await pipe.execute()
        holders = {h for h, ended in rows if h and not ended}
        workers = sorted({h.rpartition("/")[0] for h in holders})
        values = await r.mget([f"{prefix}worker:{w}" for w in workers]) if workers else []
        beats = dict(zip(workers, values, strict=True))
        found, now = 0, time.time()
        done: list[str] = []
        for member, (holder, ended) in zip(members, rows, strict=True):
            if holder is None or ended:  # expired, or ended: no longer live
                done.append(member)
            elif beats.get(holder.rpartition("/")[0]) != holder:
                call_id, session_id = _split(member)
                key = self.key(session_id, f"call:{call_id}")
                found += int(await r.eval(MARK_CRASHED, 1, key, holder, now))
                done.append(member)
        if done:
            await r.srem(f"{prefix}live", *done)
        return found

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until every queued write is applied (shutdown, tests)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout_s)

    async def aclose(self) -> None:
        await self.flush()
        for task in (self._writer, self._sweeper):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(RedisError):  # gone on purpose: nothing of it to mark
            await self._redis.delete(f"{self.prefix}worker:{self.worker}")
        await self._redis.aclose()

    # -- reading (restore on another worker, the CLI) ------------------------------

    async def load_state(self, session_id: str) -> dict[str, Any] | None:
        """The state a worker last saved for ``session_id``; None if there is none (never
        started, ended, expired) or Redis cannot be reached."""
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


def _call_row(r: Any, prefix: str, member: str) -> dict[str, Any] | None:
    call_id, session_id = _split(member)
    key = f"{prefix}{{{session_id}}}:"
    call = r.hgetall(f"{key}call:{call_id}")
    if not call:
        return None  # expired
    started, ended = _float(call.get("started_at")), _float(call.get("ended_at"))
    return {
        "call_id": call_id,
        "session_id": session_id,
        "owner": call.get("owner") or "anonymous",
        "started_at": started,
        "ended_at": ended,
        "duration_s": None if ended is None or started is None else round(ended - started, 1),
        "end_reason": call.get("end_reason") or None,
        "turns": r.hlen(f"{key}turns:{call_id}"),
        "info": json.loads(call.get("info") or "{}"),
        "counts": json.loads(call.get("counts") or "{}"),
    }


def list_calls(config: StoreConfig, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent calls first, with their turn counts."""
    r = _sync_client(config)
    out = []
    for member in r.zrevrange(f"{config.key_prefix}calls", 0, limit - 1):
        row = _call_row(r, config.key_prefix, member)
        if row is not None:
            row.pop("info")
            row.pop("counts")
            out.append(row)
    return out


def show_call(config: StoreConfig, call_or_session_id: str) -> dict[str, Any] | None:
    """One call, by call id or session id (or a prefix of either; the latest call of a
    session): its messages in order and each turn's outcome and latency."""
    r = _sync_client(config)
    prefix, wanted = config.key_prefix, call_or_session_id
    members = r.zrevrange(f"{prefix}calls", 0, -1)

    def rank(member: str) -> int:
        call_id, session_id = _split(member)
        if wanted in (call_id, session_id):
            return 2
        return 1 if call_id.startswith(wanted) or session_id.startswith(wanted) else 0

    best = max(members, key=rank, default=None)  # max keeps the latest among equals
    if best is None or rank(best) == 0:
        return None
    row = _call_row(r, prefix, best)
    if row is None:
        return None
    key = f"{prefix}{{{row['session_id']}}}:"
    messages = [json.loads(m) for m in r.lrange(f"{key}messages:{row['call_id']}", 0, -1)]
    turns = sorted(
        (json.loads(t) for t in r.hvals(f"{key}turns:{row['call_id']}")),
        key=lambda t: int(t["turn_id"]),
    )
    row.pop("turns")
    row.pop("duration_s")
    return {
        **row,
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
