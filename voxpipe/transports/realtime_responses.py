"""voxpipe's replies as Realtime responses: ``response.created`` to ``response.done``.

One voxpipe reply is one response (``resp_…``) with at most one assistant item,
audio with its transcript or, in a text-only session, text, and the model's tool
calls as ``function_call`` items (``realtime_function_calls.py``), each at the
output index of its arrival. A response begins when the client asks
(``response.create``) or, with server VAD, at the reply's first output; its end
maps voxpipe's reply status onto the Realtime's (completed, cancelled with a
reason, failed). Whether to answer, and what a cancel or a barge-in does, is the
session's; this module only describes the reply.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ResponseDone,
    ResponseTextDelta,
    ToolArgumentsDelta,
    ToolFinished,
    ToolStarted,
)
from voxpipe.conversation.session import Session
from voxpipe.transports.realtime_audio import OutboundAudio
from voxpipe.transports.realtime_client_events import ResponseCancel, ResponseCreate, ResponseIn
from voxpipe.transports.realtime_function_calls import FunctionCalls
from voxpipe.transports.realtime_items import AnyItem, Item, Items
from voxpipe.transports.realtime_session import SessionSettings
from voxpipe.transports.realtime_wire import (
    Dialect,
    RealtimeError,
    ServerEvents,
    new_id,
    rate_limits,
)


@dataclass
class Response:
    """A response in flight: one voxpipe reply, at most one assistant item, and its
    function calls."""

    id: str
    turn_id: int
    text_only: bool
    encoder: OutboundAudio
    item: Item | None = None  # the assistant message
    outputs: list[AnyItem] = field(default_factory=list)  # output_index order
    generated: str = ""
    metadata: dict[str, str] | None = None
    client_stopped: bool = False  # a truncate or cancel from the client ended it
    audio_ms: float = field(default=0.0)


class Responses:
    """The responses of one connection, by the turn each answers.

    ``settings`` reads the session's settings in force when an event is written, so a
    ``session.update`` during a reply shows in its ``response.done``."""

    def __init__(
        self,
        out: ServerEvents,
        items: Items,
        session: Session,
        settings: Callable[[], SessionSettings],
    ) -> None:
        self.out = out
        self.items = items
        self.session = session
        self.settings = settings
        self._responses: dict[int, Response] = {}
        self.calls = FunctionCalls(out, items)

    # -- client events --------------------------------------------------------

    async def create(self, payload: dict[str, Any]) -> None:
        params = ResponseCreate.model_validate(payload).response
        if params is not None and (params.conversation == "none" or params.input is not None):
            raise RealtimeError(
                "invalid_value",
                "out-of-band responses (conversation 'none', input) are not supported",
                "response.conversation" if params.conversation == "none" else "response.input",
            )
        active = next(iter(self._responses.values()), None)
        if self.session.replies.responding:
            where = f": {active.id}" if active is not None else ""
            raise RealtimeError(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress{where}. Wait until "
                "the response is finished before creating a new one.",
            )
        choice = self._tool_choice(params) if params is not None else None
        response = self._start(self.session.replies.respond(tool_choice=choice))
        response.metadata = params.metadata if params is not None else None

    def _tool_choice(self, params: ResponseIn) -> str | None:
        """A response's own ``tool_choice``, checked as the session's is (a name must be
        one of ``session.tools``); None: the session's applies."""
        if params.tool_choice is None:
            return None
        try:
            return self.settings().tools.updated(None, params.tool_choice, True).choice
        except RealtimeError as error:
            raise RealtimeError(error.code, error.message, "response.tool_choice") from None

    async def cancel(self, payload: dict[str, Any]) -> None:
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
        if not await self.session.commands.cancel_response():
            raise RealtimeError(
                "response_cancel_not_active", "Cancellation failed: no active response found."
            )

    def stopped_by_client(self, turn_id: int) -> None:
        """The client truncated the reply to ``turn_id``: if it ends early, the client ended it."""
        response = self._responses.get(turn_id)
        if response is not None:
            response.client_stopped = True

    # -- session events -------------------------------------------------------

    def text_delta(self, event: ResponseTextDelta) -> None:
        response = self._output(event.turn_id)
        response.generated += event.delta
        kind = (
            "response.output_text.delta"
            if response.text_only
            else ("response.output_audio_transcript.delta")
        )
        self.out.emit(kind, **self._part_of(response), delta=event.delta)

    def audio(self, frame: AudioOut) -> None:
        response = self._output(frame.turn_id)
        if response.text_only:
            return  # the reply is still paced as speech; only its text goes out
        self._send_audio(response, response.encoder.encode(frame.pcm))

    def tool_arguments_delta(self, event: ToolArgumentsDelta) -> None:
        response = self._responses.get(event.turn_id) or self._start(event.turn_id)
        self.calls.arguments_delta(response.id, response.outputs, event)

    def tool_started(self, event: ToolStarted) -> None:
        response = self._responses.get(event.turn_id) or self._start(event.turn_id)
        self.calls.started(response.id, response.outputs, event)

    def tool_finished(self, event: ToolFinished) -> None:
        self.calls.finished(event)

    def done(self, event: ResponseDone) -> None:
        for of_turn in self.items.of_turn(event.turn_id):
            of_turn.finished = True
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
                self.out.emit("response.output_text.done", **part, text=response.generated)
            else:
                self.out.emit("response.output_audio.done", **part)
                self.out.emit(
                    "response.output_audio_transcript.done", **part, transcript=response.generated
                )
            self.out.emit(
                "response.content_part.done", **part, part=self._part(response, event.text)
            )
            wire = item.wire(self.out.dialect)
            self.out.emit(
                "response.output_item.done",
                response_id=response.id,
                output_index=part["output_index"],
                item=wire,
            )
            self.out.emit("conversation.item.done", previous_item_id=None, item=wire)
        self.calls.cut(response.id, response.outputs)
        self.out.emit("response.done", response=self._response_object(response, status, details))

    # -- the response and its item ------------------------------------------------

    def _start(self, turn_id: int) -> Response:
        settings = self.settings()
        response = Response(
            new_id("resp"),
            turn_id,
            settings.text_only,
            OutboundAudio(settings.output_format),
        )
        self._responses[turn_id] = response
        self.out.emit("response.created", response=self._response_object(response, "in_progress"))
        self.out.emit("rate_limits.updated", rate_limits=rate_limits())
        return response

    def _output(self, turn_id: int) -> Response:
        """The response for ``turn_id``, with its assistant item open (made on first use)."""
        response = self._responses.get(turn_id) or self._start(turn_id)
        if response.item is None:
            item = Item(new_id("item"), "assistant", not response.text_only, turn_id=turn_id)
            item.status = "in_progress"
            response.item = item
            response.outputs.append(item)
            previous = self.items.add(item)
            wire = item.wire(self.out.dialect)
            self.out.emit(
                "response.output_item.added",
                response_id=response.id,
                output_index=len(response.outputs) - 1,
                item=wire,
            )
            self.out.emit("conversation.item.added", previous_item_id=previous, item=wire)
            self.out.emit(
                "response.content_part.added",
                **self._part_of(response),
                part=self._part(response, ""),
            )
        return response

    def _send_audio(self, response: Response, data: bytes) -> None:
        if not data:
            return
        ms = response.encoder.format.ms(len(data))
        response.audio_ms += ms
        self.out.emit(
            "response.output_audio.delta",
            audio_ms=ms,
            **self._part_of(response),
            delta=base64.b64encode(data).decode(),
        )

    def _part_of(self, response: Response) -> dict[str, Any]:
        assert response.item is not None
        return {
            "response_id": response.id,
            "item_id": response.item.id,
            "output_index": response.outputs.index(response.item),
            "content_index": 0,
        }

    def _part(self, response: Response, text: str) -> dict[str, Any]:
        if response.text_only:
            return {"type": "text", "text": text}
        return {"type": "audio", "transcript": text}

    def _response_object(
        self,
        response: Response,
        status: str,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        dialect = self.out.dialect
        settings = self.settings()
        body: dict[str, Any] = {
            "id": response.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": []
            if status == "in_progress"
            else [item.wire(dialect) for item in response.outputs],
            "conversation_id": None,
            "metadata": response.metadata,
            "usage": None,
        }
        fmt = settings.output_format
        modalities = ["text"] if response.text_only else ["audio"]
        if dialect is Dialect.BETA:
            body.update(
                modalities=modalities if response.text_only else ["audio", "text"],
                output_audio_format=fmt.value,
                voice=settings.voice,
                temperature=settings.temperature,
                max_output_tokens=settings.max_output_tokens,
            )
        else:
            body.update(
                output_modalities=modalities,
                audio={"output": {"format": fmt.ga(), "voice": settings.voice}},
                max_output_tokens=settings.max_output_tokens,
            )
        return body


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
