"""Partial transcripts while the caller is still speaking.

Every ``stt.partial_interval_ms`` of a turn's speech, the turn's audio so far
is transcribed in the background and sent as ``transcript.partial``, so a
client can show the words as they are said. A partial never delays an answer:
one starts only while the caller is audibly speaking (not in a pause, when the
end of the turn and its final transcript may be near) and only when the STT
engine is idle, and at most one runs at a time. The final transcript is still
made from the whole turn at its end, so partials cost no accuracy. Each partial's words
are also warmed into the call's KV (``prompt_warming.py``), so the reply starts sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voxpipe.conversation.events import ClientOutbox, TranscriptPartial
from voxpipe.conversation.history import History
from voxpipe.conversation.prompt_warming import PromptWarming
from voxpipe.conversation.services import Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.engines.base import STT_SAMPLE_RATE
from voxpipe.engines.runner import EngineBusy, JobClock

log = logging.getLogger("voxpipe.partials")


@dataclass
class PartialStats:
    """One turn's partials, for its timeline: how many, and how soon the first came."""

    count: int = 0
    first_ms: float | None = None  # after the arrival of the turn's first speech

    def as_dict(self) -> dict[str, float | int | None]:
        return {"count": self.count, "first_ms": self.first_ms}


class PartialTranscripts:
    def __init__(
        self,
        session_id: str,
        services: Services,
        outbox: ClientOutbox,
        history: History,
        ledger: ToolLedger,
    ) -> None:
        self.services = services
        self._outbox = outbox
        self.warming = PromptWarming(session_id, services, history, ledger)
        interval_ms = services.config.stt.partial_interval_ms
        self._interval = interval_ms * STT_SAMPLE_RATE // 1000
        self._task: asyncio.Task[None] | None = None
        self._turn_id = 0
        self._next_at = self._interval  # samples of speech before the next partial
        self._speech_started_ns = 0
        self._stats = PartialStats()

    def speech_started(self, turn_id: int, arrived_ns: int) -> None:
        """A new turn's speech: count from here."""
        self._turn_id = turn_id
        self._next_at = self._interval
        self._speech_started_ns = arrived_ns
        self._stats = PartialStats()

    def speaking(self, speech_samples: int, audio: Callable[[], np.ndarray]) -> None:
        """The caller is audibly speaking, ``speech_samples`` into the turn; ``audio`` gives
        the turn so far. Starts a partial when one is due and the STT is free."""
        if self._interval <= 0 or speech_samples < self._next_at:
            return
        if self._task is not None and not self._task.done():
            return
        if not self.services.stt.idle:
            return  # a final transcript is being made: it goes first
        self._next_at = speech_samples + self._interval
        self._task = asyncio.get_running_loop().create_task(
            self._transcribe(self._turn_id, audio()), name=f"partial-{self._turn_id}"
        )

    def turn_ended(self) -> PartialStats:
        """The turn is over (its final transcript is on the way): no more of its partials."""
        self._turn_id = 0
        return self._stats

    async def _transcribe(self, turn_id: int, audio: np.ndarray) -> None:
        try:
            result = await self.services.stt.transcribe(audio, JobClock())
        except EngineBusy:
            return
        except Exception as exc:  # a partial is a courtesy: the final transcript still comes
            log.warning("partial transcript failed: %s", exc)
            return
        text = result.text.strip()
        if turn_id != self._turn_id or not text:
            return  # the turn ended meanwhile: its final transcript says it better
        self._stats.count += 1
        self.warming.words_so_far(text)
        if self._stats.first_ms is None:
            self._stats.first_ms = round((time.monotonic_ns() - self._speech_started_ns) / 1e6, 1)
        with contextlib.suppress(Exception):  # the connection may be gone
            await self._outbox.send(TranscriptPartial(turn_id, text))

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.warming.close()
