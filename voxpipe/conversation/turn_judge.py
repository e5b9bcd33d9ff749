"""What the caller has said of a turn so far: partial transcripts while the caller speaks, and
the verdict on a silence that may end the turn (``end_of_turn: smart_turn``, or a turn that
interrupted a reply).

**Partials.** Every ``stt.partial_interval_ms`` of a turn's speech, the turn's audio so far
is transcribed in the background and sent as ``transcript.partial``, so a client can show
the words as they are said (:class:`PartialTranscripts`). A partial never delays an answer:
one starts only while the caller is audibly speaking (not in a pause, when the end of the
turn and its final transcript may be near) and only when the STT engine is idle, and at most
one runs at a time. The final transcript is still made from the whole turn at its end, so
partials cost no accuracy. Each partial's words are also warmed into the call's KV
(``prompt_warming.py``), so the reply starts sooner.

**The verdict.** The session drives one :class:`TurnJudge` per call. At each check it runs
the turn model and, beside it, transcribes the turn so far; then it checks the model's
verdict against the words (:mod:`voxpipe.conversation.turn_words`), asking the LLM where
that is cheap. A check holds the call's audio pump (the detector's sample clock waits for
the verdict), so nothing in it may hold the turn for long or break the call: every part has
a time limit and every failure falls back to less evidence, down to the longest silence.
The transcript a check made is the turn's own if the caller says no more, so the STT the
answer needs starts a silence earlier than it would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from voxpipe.config import TurnConfig
from voxpipe.conversation.events import ClientOutbox, TranscriptPartial
from voxpipe.conversation.history import History
from voxpipe.conversation.overlap_words import asks_for_the_floor, no_turn
from voxpipe.conversation.prompt_warming import PromptWarming
from voxpipe.conversation.services import Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.conversation.turn_detector import TurnEvent, Verdict
from voxpipe.conversation.turn_words import ends_unfinished, open_words, verdict
from voxpipe.engines.base import STT_SAMPLE_RATE, ChatMessage, JobClock, Transcription
from voxpipe.engines.runner import EngineBusy

log = logging.getLogger("voxpipe.turn")

# How long a check waits for the words (the STT, queued behind other calls' transcripts)
# and for the LLM's judgement: past these the verdict is made without them (a job already
# on an engine's thread finishes there, and its result is dropped).
WORDS_WAIT_S = 0.6
LLM_WAIT_S = 0.3


@dataclass(frozen=True)
class CheckedWords:
    """A check's transcript, and the turn it was made of (its first and last speech)."""

    start: int
    last_speech: int
    heard: Transcription


class JudgedCall(Protocol):
    """The call whose turns are judged (the session; it imports this module, so it is
    named here by what it does)."""

    def llm_may_judge(self) -> bool:
        """Whether the call's LLM sequence is free for a judgement of the words now."""


class TurnJudge:
    def __init__(
        self, session_id: str, services: Services, counts: Counter[str], history: History
    ) -> None:
        self.session_id = session_id
        self.services = services
        self.counts = counts
        self._history = history  # the messages before the caller's words, for the LLM
        self._checked: CheckedWords | None = None

    async def judge(
        self,
        event: TurnEvent,
        stt_audio: np.ndarray,
        cfg: TurnConfig,
        call: JudgedCall,
    ) -> tuple[Verdict, dict[str, Any]]:
        """The verdict on the turn of ``event`` (an ``END_CANDIDATE``), and its record.
        ``stt_audio``: the turn as its end would give it; ``call``: asked, once the words
        are heard, whether its sequence is free for the LLM's judgement."""
        model = self.services.turn_model
        assert model is not None and event.audio is not None
        clock = JobClock()
        by_words = bool(cfg.unfinished_words or cfg.llm_turn_end_threshold)
        jobs: list[Awaitable[Any]] = [model.probability_complete(event.audio, clock)]
        if by_words:
            jobs.append(asyncio.wait_for(self._transcribe(event, stt_audio), WORDS_WAIT_S))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        prob, heard = results[0], results[1] if by_words else None
        check: dict[str, Any] = {"ms": round(clock.compute_s * 1000, 1)}
        if isinstance(prob, BaseException):
            log.warning("turn model failed on %s: %s", self.session_id, prob)
            return Verdict.UNFINISHED, {**check, "error": type(prob).__name__}
        self.services.metrics.observe_job("turn", clock.queue_s, clock.compute_s)
        check["p"] = round(prob, 3)
        model_complete = prob >= cfg.smart_turn_threshold
        if not isinstance(heard, Transcription):
            if heard is not None:
                check["words_error"] = type(heard).__name__
            return _verdict(model_complete, False, None, cfg, check)
        words = heard.text.strip()
        check["words"] = words
        unfinished = ends_unfinished(words, cfg.unfinished_words)
        p_end = None
        wanted = model_complete or cfg.llm_turn_complete_threshold > 0
        if not unfinished and wanted and cfg.llm_turn_end_threshold and call.llm_may_judge():
            p_end = await self._llm_turn_ends(words)
        if p_end is not None:
            check["p_end"] = round(p_end, 4)
        said, check = _verdict(model_complete, unfinished, p_end, cfg, check)
        if said is Verdict.UNFINISHED and model_complete:
            self.counts["turn_held_by_words"] += 1
        elif said is Verdict.LIKELY_COMPLETE:
            self.counts["turn_ended_by_words"] += 1
        return said, check

    async def overlap(
        self, event: TurnEvent, stt_audio: np.ndarray, cfg: TurnConfig, over: str
    ) -> tuple[bool, dict[str, Any]]:
        """Whether the speech of ``event`` (an ``END_CANDIDATE`` of a turn that interrupted
        a reply that said ``over``) is, so far, no turn (:func:`no_turn`), and its record.
        False when the words do not come in time: the turn then ends as any other."""
        check: dict[str, Any] = {"overlap": True}
        heard = await self._overlap_words(event, stt_audio, check)
        if heard is None:
            return False, check
        said = no_turn(heard.text, over, cfg.backchannel_phrases, cfg.backchannel_max_words)
        if said:
            self.counts["overlaps_ended_by_words"] += 1
        return said, {**check, "no_turn": said}

    async def overlap_asks_for_floor(
        self, event: TurnEvent, stt_audio: np.ndarray, cfg: TurnConfig
    ) -> tuple[bool, dict[str, Any]]:
        """Whether the speech of ``event`` (an ``END_CANDIDATE`` of speech over a reply, too
        short to interrupt it by duration) asks for the floor in words
        (:func:`asks_for_the_floor`), and its record. False when the words do not come in
        time: the duration decides, as before."""
        check: dict[str, Any] = {"overlap": True, "short": True}
        heard = await self._overlap_words(event, stt_audio, check)
        if heard is None:
            return False, check
        floor = asks_for_the_floor(heard.text, cfg.interruption_phrases)
        if floor:
            self.counts["overlaps_interrupted_by_words"] += 1
        return floor, {**check, "interrupts": floor}

    async def _overlap_words(
        self, event: TurnEvent, stt_audio: np.ndarray, check: dict[str, Any]
    ) -> Transcription | None:
        """The overlap's transcript, written into ``check`` as ``words``; None (and
        ``words_error``) when it does not come within :data:`WORDS_WAIT_S`."""
        try:
            heard = await asyncio.wait_for(self._transcribe(event, stt_audio), WORDS_WAIT_S)
        except Exception as error:  # an STT queue full, a timeout: the caller's fallback
            check["words_error"] = type(error).__name__
            return None
        check["words"] = heard.text.strip()
        return heard

    def transcript_of(self, start: int, last_speech: int) -> Transcription | None:
        """The last check's transcript, if it was made of this very turn (no speech since)."""
        checked = self._checked
        if checked is not None and (checked.start, checked.last_speech) == (start, last_speech):
            return checked.heard
        return None

    def forget(self) -> None:
        """The turn ended or was reset: its transcript is no one's now."""
        self._checked = None

    async def _transcribe(self, event: TurnEvent, audio: np.ndarray) -> Transcription:
        if (made := self.transcript_of(event.start, event.sample)) is not None:
            return made  # the overlap's check transcribed this very turn
        heard = await self.services.stt.transcribe(audio, JobClock())
        self._checked = CheckedWords(event.start, event.sample, heard)
        return heard

    async def _llm_turn_ends(self, words: str) -> float | None:
        """The LLM's probability that the caller's words end the turn. The words lose the
        stop Whisper puts at every pause: the question is whether one belongs there."""
        bare = open_words(words)
        if not any(ch.isalnum() for ch in bare):
            return None
        clock = JobClock()
        messages = [*self._history.messages(), ChatMessage("user", bare)]
        try:
            p_end = await asyncio.wait_for(
                self.services.llm.turn_ends(self.session_id, messages, clock), LLM_WAIT_S
            )
        except Exception as error:  # the words list and the model still decide
            log.warning("turn judgement failed on %s: %s", self.session_id, error)
            return None
        self.services.metrics.observe_job("turn_words", clock.queue_s, clock.compute_s)
        return p_end


def _verdict(
    model_complete: bool,
    unfinished: bool,
    p_end: float | None,
    cfg: TurnConfig,
    check: dict[str, Any],
) -> tuple[Verdict, dict[str, Any]]:
    said = verdict(model_complete, unfinished, p_end, cfg)
    return said, {**check, "verdict": said.value}


partials_log = logging.getLogger("voxpipe.partials")  # partial transcripts log apart


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
            partials_log.warning("partial transcript failed: %s", exc)
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
