"""The call's replies, one after another: each turn's number, the reply that answers it, and
stopping one.

Every reply of a call starts here, whoever asks for it: the session at the end of a turn or
in the caller's pause (a held reply), a client (``response.create``, a commit), the keypad, a
greeting, or a restore that owes the caller an answer. So one place numbers the turns, waits
each reply behind the one before, and knows the reply the caller's speech last barged in on
(whose rest a false interruption says). Which reply has the floor is
:class:`~voxpipe.conversation.turn_taking.TurnTaking`'s, shared with the session.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from voxpipe.conversation.history import Summarizer
from voxpipe.conversation.reply import Reply, ReplyOwner
from voxpipe.conversation.reply_context import ReplyContext
from voxpipe.conversation.turn_taking import TurnTaking
from voxpipe.engines.base import Transcription
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.timeline import TurnTimeline


class Replies:
    def __init__(
        self,
        ctx: ReplyContext,
        turns: TurnTaking[Reply],
        summarizer: Summarizer,
        counts: Counter[str],
        metrics: Metrics,
        owner: ReplyOwner,
    ) -> None:
        """``owner`` (the session) keeps the books of each finished reply: every reply
        tells it, inside its task, before the next reply reads the history."""
        self.ctx = ctx
        self.turns = turns
        self.last_turn_id = 0  # the latest turn's id: the caller's, a client's or the keypad's
        self.barged: Reply | None = None  # the reply this turn's speech interrupted
        self._summarizer = summarizer
        self._counts = counts
        self._metrics = metrics
        self._owner = owner

    def start(
        self,
        timeline: TurnTimeline,
        audio: np.ndarray | None,
        held: bool,
        respond: bool = True,
        text: str | None = None,
        tool_choice: str | None = None,
        heard: Transcription | None = None,
    ) -> Reply:
        """A reply to turn ``timeline.turn_id``, begun once the reply before it is done."""
        # A summary may run while the caller speaks; the reply needs the LLM after its STT.
        self._summarizer.pause()
        return Reply(
            self.ctx,
            timeline,
            audio,
            held=held,
            previous=self.turns.reply,
            owner=self._owner,
            respond=respond,
            text=text,
            tool_choice=tool_choice,
            resumes=self.barged if audio is not None else None,
            heard=heard,
        )

    def respond(self, say: str | None = None, tool_choice: str | None = None) -> int:
        """Answer the conversation as it stands, with no new caller audio (a client asked,
        e.g. OpenAI ``response.create``; ``say``: these words, not the LLM's, as for a
        greeting; ``tool_choice``: this reply's, in place of the session's). It starts once
        the turn before it is done. Returns its turn id."""
        self.last_turn_id += 1
        timeline = TurnTimeline(self.last_turn_id)
        timeline.mark("speech_end")  # the request: voice-to-voice runs from here
        timeline.mark("eot")
        reply = self.start(timeline, None, held=False, text=say, tool_choice=tool_choice)
        self.turns.reply_started(reply)
        return self.last_turn_id

    @property
    def responding(self) -> bool:
        """A reply is being prepared or spoken."""
        return self.turns.speaking() is not None

    async def interrupt(self, reply: Reply) -> None:
        """The caller stops ``reply`` (speech over it, or a key)."""
        await reply.interrupt(time.monotonic_ns())
        self._counts["interruptions"] += 1

    def discard(self, held: Reply | None) -> None:
        """Throw away a held reply the turn did not end as it assumed."""
        if held is not None:
            held.discard()
            self._counts["preempt_wasted"] += 1
            self._metrics.preemptions.labels("wasted").inc()
