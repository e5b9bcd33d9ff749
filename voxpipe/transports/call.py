"""A call as its transport sees it: the connection the server admitted, how it ends, and
what the transport may ask of the server's other live calls.

The server admits a call, watches it and ends it; the transport serves it. The types
they share live here, under the server, so a transport never imports the server: the
server hands each call the registry it lives in, seen through :class:`LiveSessions`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

from voxpipe.config import TurnConfig
from voxpipe.conversation.events import ErrorCode, SendAudio, SendEvent
from voxpipe.conversation.principal import ANONYMOUS, Principal
from voxpipe.conversation.resume import ResumableSessions
from voxpipe.conversation.services import CallRecord, Services
from voxpipe.conversation.session import Session
from voxpipe.observability.client_labels import UNKNOWN
from voxpipe.observability.logs import bind_log_context


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


ExpireSession = Callable[[Session], Coroutine[Any, Any, None]]
"""What closes a session kept for a reconnect that did not come in time."""


class LiveSessions(ResumableSessions, Protocol):
    """The server's live calls (``server.calls.CallRegistry``), as far as a transport may
    reach into them: who owns a session id, keep a session for a reconnect, and what the
    resume policy asks (``conversation/resume.py``: find, replace, take back)."""

    def detach(
        self, session: Session, state: object, grace_s: float, on_expire: ExpireSession
    ) -> None:
        """Keep ``session`` (and the transport's ``state``) for ``grace_s`` seconds; after
        that, ``on_expire`` closes it."""
        ...


@dataclass(frozen=True)
class Rates:
    """A session's sample rates: the caller's audio in, the reply's audio out."""

    input: int
    output: int

    @classmethod
    def both(cls, rate: int) -> Rates:
        return cls(rate, rate)


@dataclass(frozen=True)
class SessionSinks:
    """Where a session's events and reply audio go: the transport's encoders."""

    event: SendEvent
    audio: SendAudio
    # The wire can drop the audio its client has buffered and then play more of the same
    # reply (a telephony clear): the session may then flush a reply the moment the caller
    # may be talking over it (``PlaybackFlush``, ``turn.clear_on_pause``).
    flushes: bool = False


@dataclass(eq=False)
class Call:
    """One admitted connection, as the server's lifecycle sees it."""

    transport: str
    services: Services
    registry: LiveSessions
    principal: Principal = ANONYMOUS
    client_version: str = UNKNOWN  # the client's bounded label (``client_labels.py``)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started_ns: int = field(default_factory=time.monotonic_ns)
    session: Session | None = None
    ended: CallEnd | None = None
    _end: Callable[[CallEnd], Awaitable[None]] | None = None
    _ending: asyncio.Task[None] | None = None

    def attach(self, session: Session) -> None:
        """This connection serves ``session`` now (a new one, a restore or a reconnect).

        Called from the task that serves the call (WebRTC: the offer's request, which starts
        that task): every line it logs from now on, and in the tasks it starts (the session's
        audio pump and its replies), carries the call's ids (``docs/observability.md#logs``)."""
        self.session = session
        session.transport = self.transport
        bind_log_context(call_id=session.record.call_id, session_id=session.id)

    def open_session(
        self,
        session_id: str,
        sinks: SessionSinks,
        rates: Rates,
        turn: TurnConfig | None = None,
        instructions: str | None = None,
        record: CallRecord | None = None,
        caller: str | None = None,
    ) -> Session:
        """The one way a transport makes a session: the server's services, this call's
        principal as its owner, attached to this call. ``record`` continues a call another
        worker recorded (a restore); its owner is already in it. ``caller``: the caller's
        number or SIP URI, where the wire protocol carries one (tools see it)."""
        session = Session(
            session_id,
            self.services,
            sinks.event,
            sinks.audio,
            input_sample_rate=rates.input,
            output_sample_rate=rates.output,
            turn_config=turn,
            system_prompt=instructions,
            owner=self.principal.id,
            record=record,
            transport=self.transport,
            caller=caller,
            flushes=sinks.flushes,
        )
        self.attach(session)
        return session

    def bind_end(self, end: Callable[[CallEnd], Awaitable[None]]) -> None:
        """How the server ends this call once it runs: :meth:`end` awaits ``end``."""
        self._end = end

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
