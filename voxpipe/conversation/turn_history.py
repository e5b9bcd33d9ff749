"""What the history keeps of each turn, and when.

The caller's words join the history when their reply finishes, or earlier, just before the
reply records a tool call (the call must follow the words it answers). The answer joins as
the words the caller heard. A false interruption's reply says the rest of the answer it
stopped: the history then holds the two as the one answer the caller heard, and no turn of
the caller's. Each finished turn's messages are remembered for a client's later edits
(:class:`~voxpipe.conversation.turn_messages.FinishedTurns`), and each answered turn moves
where a restore resends the caller's audio from (:class:`AnsweredAudio`, which the saved
state carries: :class:`~voxpipe.conversation.saved_state.SavedCall`).
"""

from __future__ import annotations

from collections import Counter

from voxpipe.conversation.history import History
from voxpipe.conversation.reply import Reply
from voxpipe.conversation.turn_messages import FinishedTurns, TurnMessages
from voxpipe.engines.base import ChatMessage

REMEMBERED_TURN_ENDS = 128  # turns in flight whose end is remembered until they are answered


class AnsweredAudio:
    """Where the caller's audio is accounted for, for a restore on another worker: the end
    (16 kHz sample, from the start of the call) of the last turn whose reply finished."""

    def __init__(self) -> None:
        self.offset = 0  # 16 kHz samples of the call before this worker's first
        self.until = 0
        self._turn_ends: dict[int, int] = {}

    def turn_ended(self, turn_id: int, sample: int) -> None:
        """Turn ``turn_id`` ended at ``sample`` of this worker's audio."""
        self._turn_ends[turn_id] = self.offset + sample
        while len(self._turn_ends) > REMEMBERED_TURN_ENDS:
            del self._turn_ends[next(iter(self._turn_ends))]

    def answered(self, turn_id: int) -> None:
        end = self._turn_ends.pop(turn_id, None)
        if end is not None:
            self.until = max(self.until, end)

    def restored(self, offset: int) -> None:
        """This worker's audio starts ``offset`` samples into the call, all answered."""
        self.offset = self.until = offset


class TurnHistory:
    def __init__(
        self,
        history: History,
        finished: FinishedTurns,
        answered: AnsweredAudio,
        counts: Counter[str],
    ) -> None:
        self._history = history
        self._finished = finished
        self._answered = answered
        self._counts = counts

    def commit_turn(self, turn_id: int, transcript: str) -> ChatMessage | None:
        """A reply is about to record a tool call: the caller's words of its turn go into
        the history first, and the turn counts as answered (its audio is not resent to
        another worker, which answers from the recorded call instead)."""
        self._answered.answered(turn_id)
        if any(c.isalnum() for c in transcript):
            return self._history.add_user(transcript)
        return None

    def turn_ended(self, turn_id: int, sample: int) -> None:
        """The caller's turn ``turn_id`` ended at ``sample`` of this worker's audio: once it
        is answered, a restore resends the caller's audio from there."""
        self._answered.turn_ended(turn_id, sample)

    def reply_finished(self, reply: Reply) -> None:
        """``reply`` is done: its turn's words and answer join the history (those not there
        yet), and the turn is answered."""
        user, assistant = reply.user_message, None
        if reply.continues:
            assistant = self._carry_on(reply)  # a second backchannel joins it again
        else:
            if user is None and any(ch.isalnum() for ch in reply.transcript):
                user = self._history.add_user(reply.transcript)
            if reply.answer_text and (user is not None or reply.audio is None):
                assistant = self._history.add_assistant(reply.answer_text)
        self._finished.remember(reply.turn_id, TurnMessages(user, assistant, reply.tracker))
        self._answered.answered(reply.turn_id)  # a restore resends no audio of it

    def _carry_on(self, reply: Reply) -> ChatMessage | None:
        """A false interruption's reply said the rest of the one it stopped: the history
        holds the two as the one answer the caller heard, and no turn of the caller's.
        Returns the message that now holds the answer."""
        self._counts["false_interruptions"] += 1
        said, stopped = reply.answer_text, self._finished.get(reply.continues)
        held = stopped.assistant if stopped is not None else None
        if not said:
            return held
        if stopped is not None and held is not None:
            kept = held.content.split()
            kept = kept[: len(kept) - reply.repeats]  # the cut sentence is said again whole
            joined = self._history.replace(held, " ".join([*kept, said]))
            if joined is not None:
                stopped.assistant = joined
                return joined
        return self._history.add_assistant(said)
