"""The calls a server holds: admission at connect, and sessions waiting for a reconnect.

Capacity counts *sessions*: a connected call, and a call whose connection dropped
and that keeps its slot for ``resume_grace_s`` so its caller can come back. A call
beyond ``max_calls`` is refused at connect, never queued: a queue of callers only
turns one slow call into many.
"""

from __future__ import annotations

import asyncio

from voxpipe.conversation.events import ErrorCode
from voxpipe.conversation.resume import Detached
from voxpipe.conversation.session import Session
from voxpipe.observability.metrics import Metrics
from voxpipe.transports.call import Call, CallEnd, CloseCode, ExpireSession


class CallRegistry:
    """Every call this server holds; a transport reaches it as
    :class:`~voxpipe.transports.call.LiveSessions`."""

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
        self, session: Session, state: object, grace_s: float, on_expire: ExpireSession
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

    async def replace(self, session_id: str) -> None:
        """End the connection on which ``session_id`` is live, if any: another connection
        takes the session over. (The connection taking it over holds no session yet, so
        it is never the one found.)"""
        live = self.find_attached(session_id)
        if live is not None:
            await live.end(
                CallEnd(
                    ErrorCode.SESSION_REPLACED,
                    "the session reconnected on another connection",
                    CloseCode.REPLACED,
                )
            )

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
