"""OpenAI Realtime API compatibility at ``/v1/realtime?model=…`` (``docs/openai-realtime.md``).

An OpenAI SDK (or any Realtime client) pointed at voxpipe holds a spoken
conversation with the local models. This module translates only: client events
become :class:`~voxpipe.conversation.session.Session` calls (audio appends, manual
commits, ``response.create``, item edits, the client's own tools), and the session's
events become the Realtime server events, in the GA names or the beta ones.
Conversation items are voxpipe turns seen from the client: a committed user turn is a
user audio item, a reply is an assistant audio item, a tool call a function call
item; item ids (``item_…``) and response ids (``resp_…``) are made here, and every
decision (turn-taking, barge-in, what the history keeps, which tool runs where) is
the session's.

The connection reads the socket, checks each event and hands it on: the session
settings and the input audio buffer are handled here, item edits in
``realtime_item_edits.py``, the client's tools in ``realtime_tools.py``, responses in
``realtime_responses.py`` (their function calls in ``realtime_function_calls.py``); the
session's events go to ``realtime_user_items.py`` (the caller's turns) and to the
responses.
Everything sent goes through one :class:`~voxpipe.transports.realtime_wire.ServerEvents`.

A dropped connection ends the call: the Realtime API has no resume. A call the agent ends
(its ``end_call`` tool) closes the socket normally once the goodbye has been sent and had
time to play: the Realtime API has no event for it, and a client sees the call end as the
close.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.conversation.events import (
    AudioDropped,
    AudioOut,
    CallEnded,
    ErrorCode,
    ErrorEvent,
    Event,
    ResponseDone,
    ResponseTextDelta,
    SpeechStarted,
    SpeechStopped,
    ToolArgumentsDelta,
    ToolFinished,
    ToolStarted,
    Transcript,
    TranscriptPartial,
)
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.tool_ledger import ToolRefused
from voxpipe.transports.base import (
    SocketConnection,
    Undecodable,
    call_send_buffer,
    close_when_sent,
    decode_json,
    end_on_invalid_text,
    invalid_text,
)
from voxpipe.transports.call import Call, Rates, SessionSinks
from voxpipe.transports.realtime_audio import SESSION_RATE, BadAudio, InboundAudio
from voxpipe.transports.realtime_client_events import (
    CLIENT_EVENTS,
    AppendAudio,
    BufferEvent,
    SessionUpdate,
    session_shape,
)
from voxpipe.transports.realtime_item_edits import ItemEdits
from voxpipe.transports.realtime_items import Items
from voxpipe.transports.realtime_responses import Responses
from voxpipe.transports.realtime_session import SessionSettings, VadSettings
from voxpipe.transports.realtime_user_items import UserItems
from voxpipe.transports.realtime_wire import (
    Dialect,
    RealtimeError,
    ServerEvents,
    error_event,
    new_id,
)

log = logging.getLogger("voxpipe.realtime")

SUBPROTOCOL = "realtime"
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"
MAX_ITEMS = 256  # items a connection remembers for retrieve, delete, truncate
# Refusals that are the client's doing; the rest are the server's.
_CLIENT_CODES = {
    ErrorCode.UNAUTHORIZED,
    ErrorCode.IDLE_TIMEOUT,
    ErrorCode.MAX_DURATION,
    ErrorCode.INVALID_UTF8,
}


def _asks_beta(ws: WebSocket) -> bool:
    header = ws.headers.get("openai-beta", "")
    return "realtime=v1" in header or BETA_SUBPROTOCOL in ws.scope.get("subprotocols", [])


class RealtimeTransport:
    name = "realtime"
    path = "/v1/realtime"

    def subprotocol(self, ws: WebSocket) -> str | None:
        """Browsers offer ``realtime`` (plus the key and beta markers); they need it back."""
        return SUBPROTOCOL if SUBPROTOCOL in ws.scope.get("subprotocols", []) else None

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        kind = "invalid_request_error" if code in _CLIENT_CODES else "server_error"
        return json.dumps(error_event(code.value, message, kind=kind))

    async def serve(self, ws: WebSocket, call: Call) -> None:
        await RealtimeConnection(ws, call).run()


class RealtimeConnection(SocketConnection):
    def __init__(self, ws: WebSocket, call: Call) -> None:
        super().__init__(ws, call)
        vad = VadSettings.of(self.cfg.turn)
        self.settings = SessionSettings(
            # A token scoped to one session opens that session here too: the server names
            # Realtime sessions, so it names this one as the token says.
            id=call.principal.session_id or new_id("sess"),
            model=ws.query_params.get("model", "")[:128],
            instructions=self.services.instructions,  # the agent's, until the client's
            voice=self.services.engines.tts.name,
            max_output_tokens=self.cfg.llm.max_tokens,
            vad_defaults=vad,
            turn_detection=vad,
            temperature=self.cfg.llm.temperature,
        )
        self.sink = call_send_buffer(ws, call, "the client", text_only=True)
        dialect = Dialect.BETA if _asks_beta(ws) else Dialect.GA
        self.out = ServerEvents(self.sink, self.services.metrics, dialect)
        self.items = Items(MAX_ITEMS)
        self.inbound = InboundAudio(self.settings.input_format)
        self.session = call.open_session(
            self.settings.id,
            SessionSinks(self._on_event, self._on_audio),
            Rates.both(SESSION_RATE),
            vad.turn_config(self.cfg.turn),
            self.settings.instructions,
        )
        self.user_items = UserItems(self.out, self.items)
        self.responses = Responses(self.out, self.items, self.session, lambda: self.settings)
        self.item_edits = ItemEdits(self.out, self.items, self.responses, self.session)
        self._warned = False  # a refused tool was logged (_warn_once)
        self._ending: asyncio.Task[None] | None = None  # the agent ended the call (CallEnded)
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self.item_edits.create,
            "conversation.item.retrieve": self.item_edits.retrieve,
            "conversation.item.truncate": self.item_edits.truncate,
            "conversation.item.delete": self.item_edits.delete,
            "response.create": self.responses.create,
            "response.cancel": self.responses.cancel,
        }

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self.sink.run(), name=f"send-{self.call.id}")
        self.out.emit("session.created", session=self.settings.wire(self.out.dialect))
        self.out.emit(
            "conversation.created",
            conversation={"id": new_id("conv"), "object": "realtime.conversation"},
        )
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") is not None:
                    await self._on_text(message["text"])
                elif message.get("bytes") is not None:
                    self.out.error(
                        RealtimeError(
                            "invalid_value",
                            "binary messages are not part of the Realtime API; send audio as "
                            "base64 in input_audio_buffer.append",
                        )
                    )
                elif (detail := invalid_text(message)) is not None:
                    await end_on_invalid_text(self.call, detail)
                    return
        except WebSocketDisconnect:
            return
        finally:
            await hang_up(self.session)
            tasks = [t for t in (writer, self._ending) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_text(self, text: str) -> None:
        payload = decode_json(text, self.cfg.server.max_message_bytes)
        if isinstance(payload, Undecodable):
            message = (
                f"message {payload.reason}; send audio in smaller appends (20-100 ms each)"
                if payload.code is ErrorCode.MESSAGE_TOO_LARGE
                else f"We could not parse the JSON body of your request{payload.where}: "
                f"{payload.reason}"
            )
            self.out.error(RealtimeError(payload.code.value, message))
            return
        if not isinstance(payload, dict):
            self.out.error(RealtimeError("invalid_type", "an event must be a JSON object"))
            return
        event_id = payload.get("event_id") if isinstance(payload.get("event_id"), str) else None
        kind = payload.get("type")
        if not isinstance(kind, str):
            self.out.error(
                RealtimeError(
                    "missing_required_parameter", "Missing required parameter: 'type'.", "type"
                ),
                event_id,
            )
            return
        handler = self._handlers.get(kind)
        if handler is None:
            supported = ", ".join(f"'{name}'" for name in CLIENT_EVENTS)
            self.out.error(
                RealtimeError(
                    "invalid_value",
                    f"Invalid value: '{kind[:64]}'. Supported values are: {supported}.",
                    "type",
                ),
                event_id,
            )
            return
        try:
            await handler(payload)
        except ValidationError as exc:
            self.out.error(RealtimeError.of(exc), event_id)
        except RealtimeError as exc:
            if exc.warn:
                self._warn_once(kind, exc)
            self.out.error(exc, event_id)
        except Exception:  # a bug must cost one event, not the call
            log.exception("realtime event %s failed", kind)
            self.out.error(
                RealtimeError(
                    ErrorCode.INTERNAL.value, f"{kind} failed on the server", kind="server_error"
                ),
                event_id,
            )

    def _warn_once(self, kind: str, error: RealtimeError) -> None:
        """A refused tool or tool record: logged once a connection, with no traceback, so a
        client repeating it cannot flood the log (the metrics count every one)."""
        if self._warned:
            return
        self._warned = True
        log.warning(
            "realtime call %s: %s refused (%s, %s): %s; further refusals of tools on this "
            "connection are only counted",
            self.call.id,
            kind,
            error.code,
            error.param,
            error.message[:300],
        )

    # -- session settings and the input audio buffer -------------------------

    async def _session_update(self, payload: dict[str, Any]) -> None:
        update = SessionUpdate.model_validate(payload)
        shape = session_shape(update.session, self.out.dialect)
        settings = self.settings.updated(update.session, shape)
        vad = settings.turn_detection
        turn = vad.turn_config(self.session.turn_config) if vad is not None else None
        tools_changed = settings.tools != self.settings.tools
        if tools_changed or settings.instructions != self.settings.instructions:
            # first: a refusal must leave the session as it was
            overflow = self.session.commands.prompt_overflow(
                settings.instructions, settings.tools.specs
            )
            if overflow is not None:
                where = "session.tools" if tools_changed else "session.instructions"
                raise RealtimeError("invalid_value", overflow, where, warn=True)
        if tools_changed:
            try:
                self.session.commands.set_client_tools(settings.tools.specs, settings.tools.choice)
            except ToolRefused as exc:  # a name the server's own tools already use
                raise RealtimeError(
                    "invalid_value", str(exc), f"session.tools.{exc.where}", warn=True
                ) from None
        if shape is Dialect.BETA:
            self.out.dialect = Dialect.BETA  # a flat session.update: the client speaks beta
        self.settings = settings
        if turn is not None:
            self.session.update_turn_config(turn)
        self.session.commands.set_turn_taking(vad is not None, vad is None or vad.create_response)
        self.session.commands.set_system_prompt(settings.instructions)
        if settings.input_format is not self.inbound.format:
            self.inbound = InboundAudio(settings.input_format)
        self.out.emit("session.updated", session=settings.wire(self.out.dialect))

    async def _append(self, payload: dict[str, Any]) -> None:
        append = AppendAudio.model_validate(payload)
        try:
            data = base64.b64decode(append.audio, validate=True)
            pcm = self.inbound.decode(data)
        except (binascii.Error, ValueError) as exc:
            reason = str(exc) if isinstance(exc, BadAudio) else "audio is not valid base64"
            raise RealtimeError("invalid_value", reason, "audio") from None
        if not pcm:
            return
        if self.session.commands.server_vad:
            self.session.feed(pcm)
            # Backpressure: a client appending faster than real time waits (this loop stops
            # reading, so TCP slows it) while the VAD catches up; what is dropped even so is
            # told to it (input_audio_dropped).
            await self.session.keep_up()
        else:
            await self.session.push_audio(pcm)  # no VAD: only a resample, and nothing lost

    async def _commit(self, payload: dict[str, Any]) -> None:
        BufferEvent.model_validate(payload)
        if self.session.commands.server_vad:
            raise RealtimeError(
                "invalid_value",
                "with server_vad turn detection the server commits the audio itself; set "
                "turn_detection to null to commit turns with input_audio_buffer.commit",
            )
        turn_id = await self.session.commands.commit_input()
        if turn_id is None:
            raise RealtimeError(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small. Expected at least "
                "100ms of audio.",
            )
        self.user_items.commit(turn_id, new_id("item"))

    async def _clear(self, payload: dict[str, Any]) -> None:
        BufferEvent.model_validate(payload)
        self.session.commands.clear_input()
        self.user_items.cleared()
        self.out.emit("input_audio_buffer.cleared")

    # -- session events -----------------------------------------------------

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, SpeechStarted):
            self.user_items.speech_started(event)
        elif isinstance(event, SpeechStopped):
            self.user_items.speech_stopped(event)
        elif isinstance(event, Transcript):
            self.user_items.transcribed(event)
        elif isinstance(event, TranscriptPartial):
            self.user_items.partial(event)
        elif isinstance(event, ResponseTextDelta):
            self.responses.text_delta(event)
        elif isinstance(event, ToolArgumentsDelta):
            self.responses.tool_arguments_delta(event)
        elif isinstance(event, ToolStarted):
            self.responses.tool_started(event)
        elif isinstance(event, ToolFinished):
            self.responses.tool_finished(event)
        elif isinstance(event, ResponseDone):
            self.user_items.turn_over(event.turn_id)
            self.responses.done(event)
        elif isinstance(event, AudioDropped):
            self.out.audio_dropped(event)
        elif isinstance(event, ErrorEvent):
            self.out.error(RealtimeError(event.code, event.message, kind="server_error"))
        elif isinstance(event, CallEnded) and self._ending is None:
            # The receive loop sees the close and hangs up.
            closing = close_when_sent(self.ws, self.sink, f"call ended: {event.reason}")
            self._ending = asyncio.create_task(closing, name=f"end-{self.call.id}")
        # playback.clear, turn.metrics and the rest have no Realtime counterpart

    async def _on_audio(self, frame: AudioOut) -> None:
        self.responses.audio(frame)


__all__ = ["RealtimeConnection", "RealtimeTransport"]
