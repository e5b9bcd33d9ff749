"""Single-use tokens: remember each used token id (``jti``) until the token expires.

A token that says ``single_use`` opens one connection; whoever replays it (a leaked URL, a
browser history, a log line) is refused. A token id only has to be remembered while the
token could still be accepted, so each entry lives until the token's expiry and no longer.

With one worker, or workers each on their own store, the ids live in memory: a replay to
*another* worker is not seen. With ``store.backend: redis`` every worker records ids in
Redis with ``SET NX EX``, one atomic round trip, so the first worker to see an id wins and
every other refuses it. Both guards fail closed: an id that cannot be recorded (the memory
bound is full of live tokens, Redis does not answer) is refused, never let through twice.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from voxpipe.config import StoreConfig

log = logging.getLogger("voxpipe.auth")

MAX_REMEMBERED = 100_000  # live single-use token ids held in memory, per worker
REDIS_TIMEOUT_S = 2.0


class ReplayUnavailable(Exception):
    """The id could not be recorded, so the token cannot be proved unused; the message is
    safe to show the caller (no addresses, no internals)."""


class ReplayGuard(Protocol):
    async def first_use(self, jti: str, expires_at: float) -> bool:
        """Record ``jti``; True the first time, False on every replay before ``expires_at``.
        Raises :class:`ReplayUnavailable` when it cannot tell."""
        ...

    async def aclose(self) -> None: ...


class MemoryReplayGuard:
    """Ids in a dict, pruned by expiry through a heap. Bound: ``capacity`` live ids; past it a
    new single-use token is refused (forgetting a live id would let its replay through)."""

    def __init__(
        self, capacity: int = MAX_REMEMBERED, clock: Callable[[], float] = time.time
    ) -> None:
        self.capacity = capacity
        self._clock = clock
        self._expires: dict[str, float] = {}
        self._by_expiry: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expires)

    async def first_use(self, jti: str, expires_at: float) -> bool:
        return self.use(jti, expires_at)

    def use(self, jti: str, expires_at: float) -> bool:
        self._forget_expired(self._clock())
        if jti in self._expires:
            return False
        if len(self._expires) >= self.capacity:
            log.warning("single-use token refused: %d live token ids remembered", self.capacity)
            raise ReplayUnavailable("too many single-use tokens in flight; try again later")
        self._expires[jti] = expires_at
        heapq.heappush(self._by_expiry, (expires_at, jti))
        return True

    def _forget_expired(self, now: float) -> None:
        while self._by_expiry and self._by_expiry[0][0] <= now:
            _, jti = heapq.heappop(self._by_expiry)
            self._expires.pop(jti, None)

    async def aclose(self) -> None:
        return None


class RedisReplayGuard:
    """Ids as Redis keys ``<prefix>token-jti:<jti>`` that expire with their token."""

    def __init__(self, config: StoreConfig, client: aioredis.Redis | None = None) -> None:
        self.prefix = config.key_prefix
        # The client connects on first use, so building it never blocks the loop.
        self._redis = client or aioredis.Redis.from_url(
            config.redis_url,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            decode_responses=True,
        )

    def key(self, jti: str) -> str:
        return f"{self.prefix}token-jti:{jti}"

    async def first_use(self, jti: str, expires_at: float) -> bool:
        ttl_s = max(1, math.ceil(expires_at - time.time()))
        try:
            return bool(await self._redis.set(self.key(jti), "1", nx=True, ex=ttl_s))
        except (RedisError, OSError) as exc:
            log.warning("single-use token refused: redis does not answer: %s", exc)
            raise ReplayUnavailable(
                "cannot check the single-use token now (the shared store does not answer)"
            ) from exc

    async def aclose(self) -> None:
        await self._redis.aclose()


def replay_guard(store: StoreConfig) -> ReplayGuard:
    """Shared through Redis when the calls are, else this worker's memory."""
    if store.backend == "redis":
        return RedisReplayGuard(store)
    return MemoryReplayGuard()
