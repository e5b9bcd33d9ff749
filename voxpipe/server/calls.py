"""The calls a server holds: admission at connect, and sessions waiting for a reconnect.

Capacity counts *sessions*: a connected call, and a call whose connection dropped
and that keeps its slot for ``resume_grace_s`` so its caller can come back. A call
beyond ``max_calls`` is refused at connect, never queued: a queue of callers only
turns one slow call into many.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from voxpipe.conversation.events import ErrorCode
from voxpipe.observability.metrics import Metrics
from voxpipe.server.auth import ANONYMOUS, Principal

if TYPE_CHECKING:
    from voxpipe.conversation.services import Services
    from voxpipe.conversation.session import Session


class CloseCode(IntEnum):
    """WebSocket close codes the server uses (``docs/protocol.md``)."""

    NORMAL = 1000
    GOING_AWAY = 1001  # server shutdown after the drain deadline
    INVALID_DATA = 1007  # a text message that is not UTF-8
    POLICY = 1008  # unauthorized, or no session.start in time
    TOO_BIG = 1009
    INTERNAL = 1011
    TRY_AGAIN_LATER = 1013  # not ready, at capacity, draining
    IDLE = 4000
    MAX_DURATION = 4001
    SLOW_CONSUMER = 4002
    REPLACED = 4003  # the same session connected again elsewhere


@dataclass(frozen=True)
class CallEnd:
    """Why the server ends (or refuses) a call."""

    code: ErrorCode
    message: str
    close_code: CloseCode


@dataclass(eq=False)
class Call:
    """One admitted connection, as the server's lifecycle sees it."""

    transport: str
    services: Services
    registry: CallRegistry
    principal: Principal = ANONYMOUS
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started_ns: int = field(default_factory=time.monotonic_ns)
    session: Session | None = None
    ended: CallEnd | None = None
    _end: Callable[[CallEnd], Awaitable[None]] | None = None
    _ending: asyncio.Task[None] | None = None

    def attach(self, session: Session) -> None:
        self.session = session
        session.transport = self.transport

    async def end(self, why: CallEnd) -> None:
        """Close the call from the server side (idle, max duration, drain, replaced)."""
        if self.ended is None and self._end is not None:
            self.ended = why
            await self._end(why)

    def end_soon(self, why: CallEnd) -> None:
        """:meth:`end` from code that cannot wait (a buffer's overflow callback); once."""
        if self._ending is None:
            self._ending = asyncio.get_running_loop().create_task(
                self.end(why), name=f"end-{self.id}"
            )

    def slow_consumer(self, detail: str) -> None:
        """The peer stopped reading what it is sent: end the call (close 4002), counted."""
        if self._ending is None:
            self.services.metrics.slow_consumers.inc()
        self.end_soon(CallEnd(ErrorCode.SLOW_CONSUMER, detail, CloseCode.SLOW_CONSUMER))


@dataclass
class Detached:
    """A session whose connection dropped, kept for a reconnect."""

    session: Session
    state: object  # the transport's own resume state
    expiry: asyncio.TimerHandle | None = None


class CallRegistry:
    def __init__(self, max_calls: int, metrics: Metrics) -> None:
        self.max_calls = max_calls
        self.metrics = metrics
        self.active: set[Call] = set()
        self.detached: dict[str, Detached] = {}
        self.draining = False
        self.refused = 0
        self.idle = asyncio.Event()  # no connected call (drain waits on it)
        self.idle.set()
        self._expiring: set[asyncio.Task[None]] = set()

    @property
    def load(self) -> int:
        return len(self.active) + len(self.detached)

    def admit(self, call: Call, resuming: str | None = None) -> CallEnd | None:
        """Take a slot for ``call``, or say why not. A reconnect to a waiting session of
        the same principal takes no new slot: its session already holds one."""
        if self.draining:
            return self._refuse(
                CallEnd(
                    ErrorCode.SHUTTING_DOWN,
                    "the server is shutting down; connect to another instance",
                    CloseCode.TRY_AGAIN_LATER,
                )
            )
        resumable = resuming is not None and self.owner_of(resuming) == call.principal.id
        if not resumable and self.load >= self.max_calls:
            return self._refuse(
                CallEnd(
                    ErrorCode.AT_CAPACITY,
                    f"the server is at capacity ({self.max_calls} calls); retry later",
                    CloseCode.TRY_AGAIN_LATER,
                )
            )
        self.active.add(call)
        self._report()
        return None

    def release(self, call: Call) -> None:
        self.active.discard(call)
        self._report()

    def _refuse(self, why: CallEnd) -> CallEnd:
        self.refused += 1
        self.metrics.refused_calls.labels(why.code).inc()
        return why

    # -- sessions waiting for a reconnect --------------------------------------

    def detach(
        self,
        session: Session,
        state: object,
        grace_s: float,
        on_expire: Callable[[Session], Coroutine[Any, Any, None]],
    ) -> None:
        loop = asyncio.get_running_loop()
        entry = Detached(session, state)

        def expire() -> None:
            if self.detached.get(session.id) is entry:
                del self.detached[session.id]
                self._report()
                task = loop.create_task(on_expire(session), name=f"expire-{session.id}")
                self._expiring.add(task)
                task.add_done_callback(self._expiring.discard)

        entry.expiry = loop.call_later(grace_s, expire)
        self.detached[session.id] = entry
        self._report()

    def reattach(self, session_id: str) -> Detached | None:
        entry = self.detached.pop(session_id, None)
        if entry is not None and entry.expiry is not None:
            entry.expiry.cancel()
        self._report()
        return entry

    def find_session(self, session_id: str) -> bool:
        """The id belongs to a live session, connected or waiting for a reconnect."""
        return session_id in self.detached or self.find_attached(session_id) is not None

    def owner_of(self, session_id: str) -> str | None:
        """The principal whose live session (connected or waiting) has this id, if any."""
        entry = self.detached.get(session_id)
        if entry is not None:
            return entry.session.owner
        call = self.find_attached(session_id)
        return None if call is None or call.session is None else call.session.owner

    def find_attached(self, session_id: str) -> Call | None:
        for call in self.active:
            if call.session is not None and call.session.id == session_id:
                return call
        return None

    def _report(self) -> None:
        if self.active:
            self.idle.clear()
        else:
            self.idle.set()
        self.metrics.calls.labels("connected").set(len(self.active))
        self.metrics.calls.labels("detached").set(len(self.detached))
