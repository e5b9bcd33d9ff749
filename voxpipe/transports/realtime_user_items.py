"""The caller's turns as Realtime user audio items, from first speech to transcript.

An item id is promised at ``input_audio_buffer.speech_started``, the item is made
when the turn is committed (by the session's turn detector, or by the client's
``input_audio_buffer.commit`` without VAD), words arrive as transcription deltas
while the caller speaks, and the transcript completes it. Deltas only add: a
partial that revises what was sent adds nothing, and the ``completed`` event
carries the final text. A backchannel over the reply (speech that is no turn)
makes no item.
"""

from __future__ import annotations

from typing import Any

from voxpipe.conversation.events import SpeechStarted, SpeechStopped, Transcript, TranscriptPartial
from voxpipe.transports.realtime_items import Item, Items
from voxpipe.transports.realtime_wire import ServerEvents, new_id


class UserItems:
    """The user item being spoken, and committed ones waiting for their transcript."""

    def __init__(self, out: ServerEvents, items: Items) -> None:
        self.out = out
        self.items = items
        self._speech_item: str | None = None  # promised in speech_started, made at commit
        self._partial_sent: dict[str, str] = {}  # item -> transcription sent in deltas
        self._user_items: dict[int, Item] = {}  # turn -> user item awaiting its transcript

    def speech_started(self, event: SpeechStarted) -> None:
        self._speech_item = new_id("item")
        self.out.emit(
            "input_audio_buffer.speech_started",
            audio_start_ms=round(event.audio_ms),
            item_id=self._speech_item,
        )

    def speech_stopped(self, event: SpeechStopped) -> None:
        item_id, self._speech_item = self._speech_item or new_id("item"), None
        self.out.emit(
            "input_audio_buffer.speech_stopped",
            audio_end_ms=round(event.audio_ms),
            item_id=item_id,
        )
        if event.turn_id:  # 0: a backchannel over the reply, not a turn
            self.commit(event.turn_id, item_id)
        else:
            self._partial_sent.pop(item_id, None)

    def commit(self, turn_id: int, item_id: str) -> None:
        item = Item(item_id, "user", True, turn_id=turn_id)
        previous = self.items.add(item)
        self._user_items[turn_id] = item
        self.out.emit("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id)
        self.out.emit(
            "conversation.item.added", previous_item_id=previous, item=item.wire(self.out.dialect)
        )

    def cleared(self) -> None:
        """The client cleared the input buffer: the speech in it will be no item."""
        self._speech_item = None

    def partial(self, event: TranscriptPartial) -> None:
        """Words while the caller speaks, as transcription deltas of the item the speech
        will become."""
        item_id = self._speech_item
        if item_id is None:
            return
        sent = self._partial_sent.get(item_id, "")
        if event.text.startswith(sent) and len(event.text) > len(sent):
            self._partial_sent[item_id] = event.text
            where: dict[str, Any] = {"item_id": item_id, "content_index": 0}
            delta = event.text[len(sent) :]
            self.out.emit("conversation.item.input_audio_transcription.delta", **where, delta=delta)

    def transcribed(self, event: Transcript) -> None:
        item = self._user_items.pop(event.turn_id, None)
        if item is None:
            return
        item.text = event.text
        where: dict[str, Any] = {"item_id": item.id, "content_index": 0}
        sent = self._partial_sent.pop(item.id, "")
        rest = event.text[len(sent) :] if event.text.startswith(sent) else ""
        if rest:
            self.out.emit("conversation.item.input_audio_transcription.delta", **where, delta=rest)
        self.out.emit(
            "conversation.item.input_audio_transcription.completed", **where, transcript=event.text
        )
        self.out.emit(
            "conversation.item.done", previous_item_id=None, item=item.wire(self.out.dialect)
        )

    def turn_over(self, turn_id: int) -> None:
        """The turn's reply is done: a transcript that has not come by now is not awaited."""
        self._user_items.pop(turn_id, None)
