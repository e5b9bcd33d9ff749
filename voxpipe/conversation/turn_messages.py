"""What each finished turn left in the history, so a client can edit it later.

A client that plays the audio itself knows better than the server what the caller heard
(OpenAI ``conversation.item.truncate``), and may delete items; the history's messages are
found by identity, so each finished turn keeps the very messages it added, and the words
its audio spoke.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxpipe.conversation.history import History
from voxpipe.conversation.playback import PlaybackTracker
from voxpipe.engines.base import ChatMessage

REMEMBERED_TURNS = 128  # finished turns whose messages a client may still edit


@dataclass
class TurnMessages:
    """What a finished turn left in the history, so a client can edit it later."""

    user: ChatMessage | None
    assistant: ChatMessage | None
    tracker: PlaybackTracker  # which reply audio spoke which words


class FinishedTurns:
    """The last :data:`REMEMBERED_TURNS` finished turns, by turn id, oldest first."""

    def __init__(self, history: History) -> None:
        self._history = history
        self._turns: dict[int, TurnMessages] = {}

    def remember(self, turn_id: int, messages: TurnMessages) -> None:
        self._turns[turn_id] = messages
        while len(self._turns) > REMEMBERED_TURNS:
            del self._turns[next(iter(self._turns))]

    def get(self, turn_id: int) -> TurnMessages | None:
        return self._turns.get(turn_id)

    def delete(self, message: ChatMessage) -> bool:
        """Take a message out of the history; False if it is already gone."""
        for turn in self._turns.values():
            if turn.user is message:
                turn.user = None
            if turn.assistant is message:
                turn.assistant = None
        return self._history.remove(message)

    def truncate(self, turn_id: int, audio_end_ms: float) -> str | None:
        """Reply ``turn_id`` was played only up to ``audio_end_ms`` of its audio: the history
        keeps just the words spoken until then (and may grow back to more of them). Returns
        the text kept; None if the turn is unknown (never finished, or too old)."""
        turn = self._turns.get(turn_id)
        if turn is None:
            return None
        tracker = turn.tracker
        heard = min(tracker.sent_samples, int(audio_end_ms * tracker.rate / 1000))
        text = tracker.text_until(heard)
        if turn.assistant is not None:
            if text:
                turn.assistant = self._history.replace(turn.assistant, text)
            else:
                self._history.remove(turn.assistant)
                turn.assistant = None
        elif text and turn.user is not None:
            message = ChatMessage("assistant", text)
            if self._history.insert_after(turn.user, message):
                turn.assistant = message
        return text
