"""OpenAI Realtime API compatibility at ``/v1/realtime?model=…`` (``docs/openai-realtime.md``).

An OpenAI SDK (or any Realtime client) pointed at voxpipe holds a spoken
conversation with the local models. This module translates only: client events
become :class:`~voxpipe.conversation.session.Session` calls (audio appends, manual
commits, ``response.create``, item edits), and the session's events become the
Realtime server events, in the GA names or the beta ones. Conversation items are
voxpipe turns seen from the client: a committed user turn is a user audio item, a
reply is an assistant audio item; item ids (``item_…``) and response ids
(``resp_…``) are made here, and every decision (turn-taking, barge-in, what the
history keeps) is the session's.

A dropped connection ends the call: the Realtime API has no resume.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.conversation.events import (
    AudioDropped,
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
    ResponseDone,
    ResponseTextDelta,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    TranscriptPartial,
)
from voxpipe.transports.base import (
    Undecodable,
    call_send_buffer,
    decode_json,
    end_on_invalid_text,
    invalid_text,
)
from voxpipe.transports.call import Call, Rates, SessionSinks
from voxpipe.transports.realtime_audio import (
    SESSION_RATE,
    BadAudio,
    InboundAudio,
    OutboundAudio,
)
from voxpipe.transports.realtime_events import (
    CLIENT_EVENTS,
    TEXT_CONTENT,
    AppendAudio,
    BufferEvent,
    Dialect,
    Item,
    ItemCreate,
    ItemRef,
    Items,
    ItemTruncate,
    RealtimeError,
    ResponseCancel,
    ResponseCreate,
    SessionSettings,
    SessionUpdate,
    VadSettings,
    error_event,
    event_type,
    new_id,
    rate_limits,
    session_shape,
)

log = logging.getLogger("voxpipe.realtime")

SUBPROTOCOL = "realtime"
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"
MAX_ITEMS = 256  # items a connection remembers for retrieve, delete, truncate
INPUT_AUDIO_DROPPED = "input_audio_dropped"  # voxpipe's audio_dropped, in the Realtime's words
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


@dataclass
class _Response:
    """A response in flight: one voxpipe reply, at most one assistant item."""

    id: str
    turn_id: int
    text_only: bool
    encoder: OutboundAudio
    item: Item | None = None
    generated: str = ""
    metadata: dict[str, str] | None = None
    client_stopped: bool = False  # a truncate or cancel from the client ended it
    audio_ms: float = field(default=0.0)


class RealtimeConnection:
    def __init__(self, ws: WebSocket, call: Call) -> None:
        self.ws = ws
        self.call = call
        self.services = call.services
        self.cfg = call.services.config
        self.dialect = Dialect.BETA if _asks_beta(ws) else Dialect.GA
        vad = VadSettings.of(self.cfg.turn)
        self.settings = SessionSettings(
            id=new_id("sess"),
            model=ws.query_params.get("model", "")[:128],
            instructions=self.cfg.llm.system_prompt,
            voice=self.services.engines.tts.name,
            max_output_tokens=self.cfg.llm.max_tokens,
            vad_defaults=vad,
            turn_detection=vad,
            temperature=self.cfg.llm.temperature,
        )
        self.sink = call_send_buffer(ws, call, "the client", text_only=True)
        self.items = Items(MAX_ITEMS)
        self.inbound = InboundAudio(self.settings.input_format)
        self.session = call.open_session(
            self.settings.id,
            SessionSinks(self._on_event, self._on_audio),
            Rates.both(SESSION_RATE),
            vad.turn_config(self.cfg.turn),
            self.settings.instructions,
        )
        self._speech_item: str | None = None  # promised in speech_started, made at commit
        self._partial_sent: dict[str, str] = {}  # item -> transcription sent in deltas
        self._user_items: dict[int, Item] = {}  # turn -> user item awaiting its transcript
        self._responses: dict[int, _Response] = {}
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "conversation.item.retrieve": self._item_retrieve,
            "conversation.item.truncate": self._item_truncate,
            "conversation.item.delete": self._item_delete,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
        }

    # -- sending ------------------------------------------------------------

    def _emit(self, ga_type: str, *, audio_ms: float = 0.0, **fields: Any) -> None:
        kind = event_type(ga_type, self.dialect)
        if kind is None:
            return
        body = {"type": kind, "event_id": new_id("event"), **fields}
        self.sink.put(json.dumps(body, separators=(",", ":")), audio_ms)

    def _error(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        self.services.metrics.errors.labels(error.code).inc()
        body = error_event(error.code, error.message, error.param, client_event_id, error.kind)
        self.sink.put(json.dumps(body, separators=(",", ":")), 0.0)

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self.sink.run(), name=f"send-{self.call.id}")
        self._emit("session.created", session=self.settings.wire(self.dialect))
        self._emit(
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
                    self._error(
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
            started = time.monotonic()
            await self.session.close()
            self.services.metrics.hangup_cleanup.observe(time.monotonic() - started)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _on_text(self, text: str) -> None:
        payload = decode_json(text, self.cfg.server.max_message_bytes)
        if isinstance(payload, Undecodable):
            message = (
                f"message {payload.reason}; send audio in smaller appends (20-100 ms each)"
                if payload.code is ErrorCode.MESSAGE_TOO_LARGE
                else f"We could not parse the JSON body of your request{payload.where}: "
                f"{payload.reason}"
            )
            self._error(RealtimeError(payload.code.value, message))
            return
        if not isinstance(payload, dict):
            self._error(RealtimeError("invalid_type", "an event must be a JSON object"))
            return
        event_id = payload.get("event_id") if isinstance(payload.get("event_id"), str) else None
        kind = payload.get("type")
        if not isinstance(kind, str):
            self._error(
                RealtimeError(
                    "missing_required_parameter", "Missing required parameter: 'type'.", "type"
                ),
                event_id,
            )
            return
        handler = self._handlers.get(kind)
        if handler is None:
            supported = ", ".join(f"'{name}'" for name in CLIENT_EVENTS)
            self._error(
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
            self._error(RealtimeError.of(exc), event_id)
        except RealtimeError as exc:
            self._error(exc, event_id)
        except Exception:  # a bug must cost one event, not the call
            log.exception("realtime event %s failed", kind)
            self._error(
                RealtimeError(
                    ErrorCode.INTERNAL.value, f"{kind} failed on the server", kind="server_error"
                ),
                event_id,
            )

    # -- client events ------------------------------------------------------

    async def _session_update(self, payload: dict[str, Any]) -> None:
        update = SessionUpdate.model_validate(payload)
        shape = session_shape(update.session, self.dialect)
        settings = self.settings.updated(update.session, shape)
        vad = settings.turn_detection
        turn = vad.turn_config(self.session.turn_config) if vad is not None else None
        if shape is Dialect.BETA:
            self.dialect = Dialect.BETA  # a flat session.update: the client speaks beta
        self.settings = settings
        if turn is not None:
            self.session.update_turn_config(turn)
        self.session.set_turn_taking(vad is not None, vad is None or vad.create_response)
        self.session.set_system_prompt(settings.instructions)
        if settings.input_format is not self.inbound.format:
            self.inbound = InboundAudio(settings.input_format)
        self._emit("session.updated", session=settings.wire(self.dialect))

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
        if self.session.server_vad:
            self.session.feed(pcm)
            # Backpressure: a client appending faster than real time waits (this loop stops
            # reading, so TCP slows it) while the VAD catches up; what is dropped even so is
            # told to it (input_audio_dropped).
            await self.session.keep_up()
        else:
            await self.session.push_audio(pcm)  # no VAD: only a resample, and nothing lost

    async def _commit(self, payload: dict[str, Any]) -> None:
        BufferEvent.model_validate(payload)
        if self.session.server_vad:
            raise RealtimeError(
                "invalid_value",
                "with server_vad turn detection the server commits the audio itself; set "
                "turn_detection to null to commit turns with input_audio_buffer.commit",
            )
        turn_id = await self.session.commit_input()
        if turn_id is None:
            raise RealtimeError(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small. Expected at least "
                "100ms of audio.",
            )
        self._commit_item(turn_id, new_id("item"))

    async def _clear(self, payload: dict[str, Any]) -> None:
        BufferEvent.model_validate(payload)
        self.session.clear_input()
        self._speech_item = None
        self._emit("input_audio_buffer.cleared")

    async def _item_create(self, payload: dict[str, Any]) -> None:
        create = ItemCreate.model_validate(payload)
        spec = create.item
        if spec.type != "message":
            raise RealtimeError(
                "invalid_value",
                f"items of type '{spec.type}' are not supported: voxpipe's LLM has no tools",
                "item.type",
            )
        if spec.role is None:
            raise RealtimeError(
                "missing_required_parameter",
                "Missing required parameter: 'item.role'.",
                "item.role",
            )
        for i, part in enumerate(spec.content):
            if part.type not in TEXT_CONTENT:
                raise RealtimeError(
                    "invalid_value",
                    f"content of type '{part.type}' is not supported in conversation.item.create;"
                    " send text, or append audio to the input audio buffer",
                    f"item.content.{i}.type",
                )
        if create.previous_item_id not in (None, self.items.last_id):
            raise RealtimeError(
                "invalid_value",
                "items can only be added at the end of the conversation",
                "previous_item_id",
            )
        if spec.id is not None and spec.id in self.items:
            raise RealtimeError("invalid_value", f"item '{spec.id}' already exists", "item.id")
        text = "\n".join(part.text or "" for part in spec.content)
        message = self.session.add_message(spec.role, text)
        item = Item(spec.id or new_id("item"), spec.role, False, text, message=message)
        item.finished = True
        previous = self.items.add(item)
        self._emit(
            "conversation.item.added", previous_item_id=previous, item=item.wire(self.dialect)
        )
        self._emit(
            "conversation.item.done", previous_item_id=previous, item=item.wire(self.dialect)
        )

    def _item(self, item_id: str) -> Item:
        item = self.items.get(item_id)
        if item is None:
            raise RealtimeError(
                "item_not_found", f"Item with item_id '{item_id[:64]}' not found.", "item_id"
            )
        return item

    async def _item_retrieve(self, payload: dict[str, Any]) -> None:
        item = self._item(ItemRef.model_validate(payload).item_id)
        self._emit("conversation.item.retrieved", item=item.wire(self.dialect))

    async def _item_delete(self, payload: dict[str, Any]) -> None:
        item = self._item(ItemRef.model_validate(payload).item_id)
        if item.message is not None:
            self.session.delete_message(item.message)
        elif item.turn_id is not None:
            turn = self.session.turn_messages(item.turn_id)
            if turn is None and not item.finished:
                raise RealtimeError(
                    "invalid_value", "the item's turn is still in progress", "item_id"
                )
            message = None if turn is None else turn.user if item.role == "user" else turn.assistant
            if message is not None:
                self.session.delete_message(message)
        self.items.remove(item.id)
        self._emit("conversation.item.deleted", item_id=item.id)

    async def _item_truncate(self, payload: dict[str, Any]) -> None:
        truncate = ItemTruncate.model_validate(payload)
        item = self._item(truncate.item_id)
        if item.role != "assistant" or not item.audio or item.turn_id is None:
            raise RealtimeError(
                "invalid_value", "only an assistant audio item can be truncated", "item_id"
            )
        if truncate.content_index != 0:
            raise RealtimeError(
                "invalid_value", "the item has one content part, index 0", "content_index"
            )
        response = self._responses.get(item.turn_id)
        if response is not None:
            response.client_stopped = True
        text = await self.session.truncate_reply(item.turn_id, truncate.audio_end_ms)
        if text is None:
            raise RealtimeError("invalid_value", "the item's audio is no longer known", "item_id")
        item.text = text
        self._emit(
            "conversation.item.truncated",
            item_id=item.id,
            content_index=0,
            audio_end_ms=truncate.audio_end_ms,
        )

    async def _response_create(self, payload: dict[str, Any]) -> None:
        params = ResponseCreate.model_validate(payload).response
        if params is not None and (params.conversation == "none" or params.input is not None):
            raise RealtimeError(
                "invalid_value",
                "out-of-band responses (conversation 'none', input) are not supported",
                "response.conversation" if params.conversation == "none" else "response.input",
            )
        active = next(iter(self._responses.values()), None)
        if self.session.responding:
            where = f": {active.id}" if active is not None else ""
            raise RealtimeError(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress{where}. Wait until "
                "the response is finished before creating a new one.",
            )
        response = self._start(self.session.respond())
        response.metadata = params.metadata if params is not None else None

    async def _response_cancel(self, payload: dict[str, Any]) -> None:
        cancel = ResponseCancel.model_validate(payload)
        targets = [r for r in self._responses.values() if cancel.response_id in (None, r.id)]
        if cancel.response_id is not None and not targets:
            raise RealtimeError(
                "response_cancel_not_active",
                f"Cancellation failed: no active response with id '{cancel.response_id[:64]}'.",
                "response_id",
            )
        for response in targets:
            response.client_stopped = True
        if not await self.session.cancel_response():
            raise RealtimeError(
                "response_cancel_not_active", "Cancellation failed: no active response found."
            )

    # -- session events -----------------------------------------------------

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, SpeechStarted):
            self._speech_item = new_id("item")
            self._emit(
                "input_audio_buffer.speech_started",
                audio_start_ms=round(event.audio_ms),
                item_id=self._speech_item,
            )
        elif isinstance(event, SpeechStopped):
            item_id, self._speech_item = self._speech_item or new_id("item"), None
            self._emit(
                "input_audio_buffer.speech_stopped",
                audio_end_ms=round(event.audio_ms),
                item_id=item_id,
            )
            if event.turn_id:  # 0: a backchannel over the reply, not a turn
                self._commit_item(event.turn_id, item_id)
            else:
                self._partial_sent.pop(item_id, None)
        elif isinstance(event, Transcript):
            self._transcribed(event)
        elif isinstance(event, TranscriptPartial):
            self._partial(event)
        elif isinstance(event, ResponseTextDelta):
            response = self._output(event.turn_id)
            response.generated += event.delta
            kind = (
                "response.output_text.delta"
                if response.text_only
                else ("response.output_audio_transcript.delta")
            )
            self._emit(kind, **self._part_of(response), delta=event.delta)
        elif isinstance(event, ResponseDone):
            self._done(event)
        elif isinstance(event, AudioDropped):
            self._audio_dropped(event)
        elif isinstance(event, ErrorEvent):
            self._error(RealtimeError(event.code, event.message, kind="server_error"))
        # playback.clear, turn.metrics and the rest have no Realtime counterpart

    def _audio_dropped(self, event: AudioDropped) -> None:
        """voxpipe's ``audio_dropped`` in the Realtime shape: an ``error`` whose code says
        what happened (``input_audio_dropped``), with the amounts as extra fields."""
        self.services.metrics.errors.labels(INPUT_AUDIO_DROPPED).inc()
        body = error_event(INPUT_AUDIO_DROPPED, event.message, kind="server_error")
        body["error"].update(dropped_ms=event.dropped_ms, total_dropped_ms=event.total_dropped_ms)
        self.sink.put(json.dumps(body, separators=(",", ":")), 0.0)

    async def _on_audio(self, frame: AudioOut) -> None:
        response = self._output(frame.turn_id)
        if response.text_only:
            return  # the reply is still paced as speech; only its text goes out
        self._send_audio(response, response.encoder.encode(frame.pcm))

    def _send_audio(self, response: _Response, data: bytes) -> None:
        if not data:
            return
        ms = response.encoder.format.ms(len(data))
        response.audio_ms += ms
        self._emit(
            "response.output_audio.delta",
            audio_ms=ms,
            **self._part_of(response),
            delta=base64.b64encode(data).decode(),
        )

    def _commit_item(self, turn_id: int, item_id: str) -> None:
        item = Item(item_id, "user", True, turn_id=turn_id)
        previous = self.items.add(item)
        self._user_items[turn_id] = item
        self._emit("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id)
        self._emit(
            "conversation.item.added", previous_item_id=previous, item=item.wire(self.dialect)
        )

    def _partial(self, event: TranscriptPartial) -> None:
        """Words while the caller speaks, as transcription deltas of the item the speech
        will become. Deltas only add: a partial that revises what was sent adds nothing, and
        the ``completed`` event carries the final text."""
        item_id = self._speech_item
        if item_id is None:
            return
        sent = self._partial_sent.get(item_id, "")
        if event.text.startswith(sent) and len(event.text) > len(sent):
            self._partial_sent[item_id] = event.text
            where: dict[str, Any] = {"item_id": item_id, "content_index": 0}
            delta = event.text[len(sent) :]
            self._emit("conversation.item.input_audio_transcription.delta", **where, delta=delta)

    def _transcribed(self, event: Transcript) -> None:
        item = self._user_items.pop(event.turn_id, None)
        if item is None:
            return
        item.text = event.text
        where: dict[str, Any] = {"item_id": item.id, "content_index": 0}
        sent = self._partial_sent.pop(item.id, "")
        rest = event.text[len(sent) :] if event.text.startswith(sent) else ""
        if rest:
            self._emit("conversation.item.input_audio_transcription.delta", **where, delta=rest)
        self._emit(
            "conversation.item.input_audio_transcription.completed", **where, transcript=event.text
        )
        self._emit("conversation.item.done", previous_item_id=None, item=item.wire(self.dialect))

    # -- responses ------------------------------------------------------------

    def _response_object(
        self,
        response: _Response,
        status: str,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        item = response.item
        body: dict[str, Any] = {
            "id": response.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": [] if item is None or status == "in_progress" else [item.wire(self.dialect)],
            "conversation_id": None,
            "metadata": response.metadata,
            "usage": None,
        }
        fmt = self.settings.output_format
        modalities = ["text"] if response.text_only else ["audio"]
        if self.dialect is Dialect.BETA:
            body.update(
                modalities=modalities if response.text_only else ["audio", "text"],
                output_audio_format=fmt.value,
                voice=self.settings.voice,
                temperature=self.settings.temperature,
                max_output_tokens=self.settings.max_output_tokens,
            )
        else:
            body.update(
                output_modalities=modalities,
                audio={"output": {"format": fmt.ga(), "voice": self.settings.voice}},
                max_output_tokens=self.settings.max_output_tokens,
            )
        return body

    def _start(self, turn_id: int) -> _Response:
        response = _Response(
            new_id("resp"),
            turn_id,
            self.settings.text_only,
            OutboundAudio(self.settings.output_format),
        )
        self._responses[turn_id] = response
        self._emit("response.created", response=self._response_object(response, "in_progress"))
        self._emit("rate_limits.updated", rate_limits=rate_limits())
        return response

    def _part_of(self, response: _Response) -> dict[str, Any]:
        assert response.item is not None
        return {
            "response_id": response.id,
            "item_id": response.item.id,
            "output_index": 0,
            "content_index": 0,
        }

    def _part(self, response: _Response, text: str) -> dict[str, Any]:
        if response.text_only:
            return {"type": "text", "text": text}
        return {"type": "audio", "transcript": text}

    def _output(self, turn_id: int) -> _Response:
        """The response for ``turn_id``, with its assistant item open (made on first use)."""
        response = self._responses.get(turn_id) or self._start(turn_id)
        if response.item is None:
            item = Item(new_id("item"), "assistant", not response.text_only, turn_id=turn_id)
            item.status = "in_progress"
            response.item = item
            previous = self.items.add(item)
            wire = item.wire(self.dialect)
            self._emit(
                "response.output_item.added", response_id=response.id, output_index=0, item=wire
            )
            self._emit("conversation.item.added", previous_item_id=previous, item=wire)
            self._emit(
                "response.content_part.added",
                **self._part_of(response),
                part=self._part(response, ""),
            )
        return response

    def _done(self, event: ResponseDone) -> None:
        for of_turn in self.items.of_turn(event.turn_id):
            of_turn.finished = True
        self._user_items.pop(event.turn_id, None)
        response = self._responses.pop(event.turn_id, None)
        if response is None:
            if event.status in ("committed", "empty"):
                return  # a turn with nothing to answer (or not asked to): no response
            response = self._start(event.turn_id)
            self._responses.pop(event.turn_id, None)
        status, details = _status(event, response.client_stopped)
        item = response.item
        if item is not None:
            self._send_audio(response, response.encoder.flush())
            item.text = event.text
            item.status = "completed" if status == "completed" else "incomplete"
            part = self._part_of(response)
            if response.text_only:
                self._emit("response.output_text.done", **part, text=response.generated)
            else:
                self._emit("response.output_audio.done", **part)
                self._emit(
                    "response.output_audio_transcript.done", **part, transcript=response.generated
                )
            self._emit("response.content_part.done", **part, part=self._part(response, event.text))
            wire = item.wire(self.dialect)
            self._emit(
                "response.output_item.done", response_id=response.id, output_index=0, item=wire
            )
            self._emit("conversation.item.done", previous_item_id=None, item=wire)
        self._emit("response.done", response=self._response_object(response, status, details))


def _status(event: ResponseDone, client_stopped: bool) -> tuple[str, dict[str, Any] | None]:
    """voxpipe's reply status -> the Realtime response status and its details."""
    if event.status in ("completed", "empty"):
        return "completed", None
    if event.status == "interrupted":
        reason = "client_cancelled" if client_stopped else "turn_detected"
        return "cancelled", {"type": "cancelled", "reason": reason}
    if event.status == "cancelled":
        return "cancelled", {"type": "cancelled", "reason": "client_cancelled"}
    error = {"type": "server_error", "code": ErrorCode.TURN_FAILED.value, "message": event.reason}
    return "failed", {"type": "failed", "error": error}


__all__ = ["RealtimeConnection", "RealtimeTransport"]
