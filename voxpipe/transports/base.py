"""What a transport gives the server, so that readiness, auth, admission and the
call's lifecycle (timeouts, drain) are enforced once, in ``server/``, for all of them.

A transport only translates: wire messages in, :class:`~voxpipe.conversation.session.Session`
calls; session events out, wire messages. The server accepts the WebSocket
(with the subprotocol the transport picks) before :meth:`Transport.serve` runs,
and it may close the call at any time by cancelling ``serve``.

**What goes out** waits in one :class:`SendBuffer` per call, bounded by the audio it holds.
The session paces reply audio to ~400 ms ahead of real time, so a client that reads keeps
it nearly empty. One that stops reading (or whose network stalls) makes the socket's send
wait; the messages then pile up here, and past ``max_audio_ms`` of audio the call is closed
(``slow_consumer``): a stuck client costs a bounded amount of memory, never the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import Counter
from pydantic import ValidationError
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.conversation.events import (
    AudioDropped,
    CallEnded,
    CallTransfer,
    ErrorCode,
    ErrorEvent,
    Event,
    PlaybackClear,
    PlaybackFlush,
)
from voxpipe.transports.call import Call, CallEnd, CloseCode

log = logging.getLogger("voxpipe.transport")

# The key of a received message whose text frame was not UTF-8 (its value says where);
# set by voxpipe's uvicorn protocol (server/websocket_protocol.py) instead of failing.
INVALID_TEXT = "voxpipe.invalid_utf8"
MAX_CLOSE_REASON_BYTES = 123  # RFC 6455, 5.5: a control frame's payload is at most 125 bytes


class Transport(Protocol):
    name: str  # metrics label and log name: "native", "realtime", "twilio"
    path: str  # the WebSocket route, e.g. "/v1/voice"

    def subprotocol(self, ws: WebSocket) -> str | None:
        """The subprotocol to answer the handshake with (None: none)."""
        ...

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        """The transport's own error message, sent before the server closes a call it
        refuses or ends (capacity, auth, idle, drain); None sends nothing."""
        ...

    async def serve(self, ws: WebSocket, call: Call) -> None:
        """Run one accepted connection until it ends; ``call.attach`` each session it makes."""
        ...


class PhoneLine(Protocol):
    """A call whose wire has no channel for events (a provider's media stream, a SIP call):
    what the session says is done to the line instead (:func:`act_on_line`)."""

    def clear_playback(self) -> None:
        """Drop the reply audio the far end holds and has not played (a barge-in)."""
        ...

    async def end_call(self, reason: str) -> None:
        """End the call: the agent's goodbye has been sent."""
        ...

    async def transfer(self, target: str) -> None:
        """Put the caller through to ``target``: what the agent said first has been sent."""
        ...

    def warn(self, error: ErrorEvent) -> None:
        """Log an error that no client can be told of."""
        ...


async def act_on_line(line: PhoneLine, event: Event, errors: Counter) -> bool:
    """Do to a phone line what a session event asks; False: the event means nothing there.
    Errors and dropped audio are counted here, since no client hears of them (the session
    logs dropped audio once per episode)."""
    if isinstance(event, PlaybackClear | PlaybackFlush):
        line.clear_playback()
    elif isinstance(event, CallEnded):
        await line.end_call(event.reason)
    elif isinstance(event, CallTransfer):
        await line.transfer(event.target)
    elif isinstance(event, AudioDropped):  # an error event the session logs once an episode
        errors.labels(event.code).inc()
    elif isinstance(event, ErrorEvent):
        errors.labels(event.code).inc()
        line.warn(event)
    else:
        return False
    return True


class SocketConnection:
    """One accepted WebSocket of a call (native, Realtime, a telephony provider's): the
    socket, the call, and the services and config the server admitted the call with."""

    def __init__(self, ws: WebSocket, call: Call) -> None:
        self.ws = ws
        self.call = call
        self.services = call.services
        self.cfg = call.services.config


CLOSE_FLUSH_S = 2.0  # the longest the last messages of a call ended normally wait to go out


async def close_when_sent(ws: WebSocket, sink: SendBuffer, reason: str) -> None:
    """End a call the server or its client ended normally: what is queued goes out (at most
    :data:`CLOSE_FLUSH_S`), then the socket closes with 1000 and ``reason``; a peer already
    gone is no error."""
    await sink.flush(CLOSE_FLUSH_S)
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await ws.close(CloseCode.NORMAL, close_reason(reason))


def call_send_buffer(ws: WebSocket, call: Call, peer: str, text_only: bool = False) -> SendBuffer:
    """The bounded buffer between a call's session and its socket; a ``peer`` that stops
    reading past the bound ends the call (slow_consumer)."""
    limit_ms = call.services.config.limits.send_buffer_ms

    async def write(message: str | bytes) -> None:
        if isinstance(message, str):
            await ws.send_text(message)
        else:
            assert not text_only, f"{peer} takes JSON text only"
            await ws.send_bytes(message)

    return SendBuffer(
        write,
        max_audio_ms=limit_ms,
        on_overflow=lambda: call.slow_consumer(
            f"{peer} stopped reading: over {limit_ms} ms of audio waited for its socket"
        ),
        age=call.services.metrics.buffer_age.labels("outbound"),
    )


async def receive_by(ws: WebSocket, deadline: float | None) -> Message | None:
    """The next message, or None once ``deadline`` (monotonic seconds) has passed first: a
    connection has until ``server.start_timeout_s`` to start its session, and after that
    (``deadline`` None) waits as long as the caller is quiet."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return await asyncio.wait_for(ws.receive(), timeout)
    except TimeoutError:
        return None


def describe_error(error: ValidationError, what: str = "event") -> str:
    """The first validation problem, as ``field.path: reason``, for a client's error event."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or what
    return f"{where}: {first['msg']}"


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame can carry, on a character boundary."""
    return text.encode()[:MAX_CLOSE_REASON_BYTES].decode(errors="ignore")


def invalid_text(message: Mapping[str, Any]) -> str | None:
    """What was wrong with a received text frame that was not UTF-8; None for any other."""
    detail = message.get(INVALID_TEXT)
    return None if detail is None else str(detail)


async def end_on_invalid_text(call: Call, detail: str) -> None:
    """A text frame that is not UTF-8: the connection must fail (RFC 6455, 8.1). The server
    sends the transport's own typed error (``invalid_utf8``) and closes with 1007, and the
    line is logged here, once: the connection ends with it, so a flood cannot repeat it."""
    log.warning(
        "%s call %s: a text message is not UTF-8 (%s); closing 1007",
        call.transport,
        call.id,
        detail,
    )
    await call.end(
        CallEnd(
            ErrorCode.INVALID_UTF8,
            f"a text message must be UTF-8 ({detail}); send JSON as UTF-8 text",
            CloseCode.INVALID_DATA,
        )
    )


@dataclass(frozen=True)
class Undecodable:
    """Why a client's message is not a JSON value; each transport words its own error."""

    code: ErrorCode  # MESSAGE_TOO_LARGE or INVALID_JSON
    reason: str  # "exceeds 65536 bytes", or the parser's message ("Expecting value")
    where: str = ""  # " at 12": the character the parser stopped at, when it says


def decode_json(message: str | bytes, max_bytes: int) -> Any:
    """The JSON value of a client's message, or :class:`Undecodable`. One guarded decode for
    every wire: a message over ``max_bytes`` is not parsed, and neither a huge integer nor
    deep nesting (``ValueError``, ``RecursionError``) escapes as an exception."""
    if isinstance(message, bytes):
        size = len(message)
    else:  # a character is at most 4 bytes: most messages need no encoding to be measured
        size = len(message) if len(message) * 4 <= max_bytes else len(message.encode())
    if size > max_bytes:
        return Undecodable(ErrorCode.MESSAGE_TOO_LARGE, f"exceeds {max_bytes} bytes")
    try:
        return json.loads(message)
    except json.JSONDecodeError as exc:
        return Undecodable(ErrorCode.INVALID_JSON, exc.msg, f" at {exc.pos}")
    except (ValueError, RecursionError) as exc:  # huge ints, deep nesting, bad UTF-8 bytes
        return Undecodable(ErrorCode.INVALID_JSON, type(exc).__name__)


MAX_EVENTS = 8192  # text events waiting (a replay after a reconnect may bring up to 4096)


class Observer(Protocol):
    def observe(self, amount: float) -> None: ...


class SendBuffer:
    def __init__(
        self,
        write: Callable[[str | bytes], Awaitable[None]],
        max_audio_ms: float,
        on_overflow: Callable[[], None],
        age: Observer | None = None,
    ) -> None:
        self._write = write
        self.max_audio_ms = max_audio_ms
        self._on_overflow = on_overflow
        self._age = age
        self._queue: deque[tuple[str | bytes, float, int]] = deque()
        self._audio_ms = 0.0
        self._ready = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self.overflowed = False
        self.broken = False  # the socket failed: the peer is gone

    @property
    def audio_ms(self) -> float:
        return self._audio_ms

    def put(self, message: str | bytes, audio_ms: float) -> None:
        """Queue without waiting; on overflow the policy is to close the call."""
        if self.overflowed or self.broken:
            return
        if self._audio_ms + audio_ms > self.max_audio_ms or len(self._queue) >= MAX_EVENTS:
            self.overflowed = True
            self._queue.clear()
            self._audio_ms = 0.0
            self._on_overflow()
            return
        self._queue.append((message, audio_ms, time.monotonic_ns()))
        self._audio_ms += audio_ms
        self._empty.clear()
        self._ready.set()

    async def run(self) -> None:
        """The writer: one send at a time, in order, until cancelled or the socket fails."""
        while True:
            await self._ready.wait()
            while self._queue:
                message, audio_ms, queued_ns = self._queue[0]
                if self._age is not None and audio_ms:
                    self._age.observe((time.monotonic_ns() - queued_ns) / 1e9)
                try:
                    await self._write(message)
                except Exception:  # disconnect, closed socket: the receive loop sees it too
                    self.broken = True
                    self._queue.clear()
                    self._audio_ms = 0.0
                    self._empty.set()
                    return
                if self._queue:  # not cleared meanwhile by an overflow
                    self._queue.popleft()
                    self._audio_ms -= audio_ms
            self._ready.clear()
            self._empty.set()

    async def flush(self, timeout_s: float) -> None:
        """Wait (bounded) until everything queued has gone out."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._empty.wait(), timeout_s)
