"""What every session of a server shares: engines, their runners, metrics, the turn log,
and the agent (its instructions, greeting and tools)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from voxpipe.agent import RunningAgent, Toolbox
from voxpipe.audio.pcm import trim_silence
from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, Engines, TtsEngine
from voxpipe.engines.queued import (
    QueuedEngines,
    QueuedLlm,
    QueuedStt,
    QueuedTts,
    QueuedTurnModel,
    QueuedVad,
    Runners,
)
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.tracing import Tracing
from voxpipe.observability.turn_log import TurnLog


@dataclass(frozen=True)
class CallRecord:
    """Which record a session writes to. A session id names a conversation a client can
    resume, and may be chosen by the client and reused after the call ends; the record of
    each call is keyed by ``call_id``, issued by the server, so two calls never merge.
    A restore on another worker keeps the call id and raises ``epoch``, which fences the
    older copy's writes."""

    call_id: str
    session_id: str
    owner: str  # the principal that started the call (server/auth.py)
    epoch: int = 0


class CallStore(Protocol):
    """Where a call is recorded as it goes. Every method only queues the write: none may
    wait on a disk or a network from the event loop."""

    shared: bool  # other workers read it: a session may have moved on since this one saw it

    def call_started(self, call: CallRecord, info: dict[str, Any]) -> None:
        """A call began here (or was taken back here by a restore: it is live again)."""
        ...

    def message(
        self, call: CallRecord, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None: ...

    def turn_finished(self, call: CallRecord, record: dict[str, Any]) -> None: ...

    def save_state(self, call: CallRecord, state: dict[str, Any]) -> None: ...

    def call_ended(self, call: CallRecord, reason: str, counts: dict[str, Any]) -> None:
        """The call is over: its record says why, and its session can no longer be
        resumed (a later call with the same session id starts a new record)."""
        ...

    async def load_state(self, session_id: str) -> dict[str, Any] | None:
        """What :meth:`save_state` last saved for the live session ``session_id`` (possibly
        on another worker, when the store is shared); None if it ended or nothing is kept.
        The state names its ``owner`` and ``call_id``."""
        ...

    async def aclose(self) -> None:
        """Apply what is queued, then let go of the disk or the connection."""
        ...


@dataclass(frozen=True)
class Filler:
    """The words said when the LLM is late, synthesized once at start-up: at that moment
    the TTS may be as busy as the LLM, so the filler must not wait for it. The tools'
    phrases are kept the same way (:attr:`Services.phrases`): they are due just as fast.
    Each is kept without the TTS's padding (:func:`~voxpipe.audio.pcm.trim_silence`): a
    filler comes when the caller has waited long already, and the answer follows it."""

    text: str
    audio: np.ndarray  # float32 mono at ``rate``
    rate: int

    @classmethod
    def synthesize(cls, text: str, tts: TtsEngine) -> Filler | None:
        if not text.strip():
            return None
        chunks = list(tts.synthesize(text, CancelToken()))
        pcm = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
        audio = trim_silence(pcm.astype(np.float32) / 32768.0, tts.sample_rate)
        return cls(text, audio, tts.sample_rate)

    @classmethod
    def synthesize_all(cls, texts: Iterable[str], tts: TtsEngine) -> dict[str, Filler]:
        return {t: f for t in sorted(set(texts)) if (f := cls.synthesize(t, tts)) is not None}


@dataclass(frozen=True)
class Services:
    """``vad``, ``stt``, ``llm`` and ``tts`` are the engines behind their runners: how a
    call reaches them. ``engines`` and ``runners`` are for the server that starts and
    stops them. ``tracing`` opens each call's span (off: a shared no-op). ``agent`` is the
    started agent (none: the plain assistant of ``llm.system_prompt``, with no tools)."""

    config: Config
    engines: Engines
    runners: Runners
    metrics: Metrics
    turn_log: TurnLog
    filler: Filler | None = None
    store: CallStore | None = None
    phrases: Mapping[str, Filler] = field(default_factory=dict)  # by text, made at start-up
    tracing: Tracing = field(default_factory=Tracing.off)
    agent: RunningAgent | None = None
    vad: QueuedVad = field(init=False, repr=False, compare=False)
    stt: QueuedStt = field(init=False, repr=False, compare=False)
    llm: QueuedLlm = field(init=False, repr=False, compare=False)
    tts: QueuedTts = field(init=False, repr=False, compare=False)
    turn_model: QueuedTurnModel | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        queued = QueuedEngines.of(self.engines, self.runners)
        object.__setattr__(self, "turn_model", queued.turn)
        for name in ("vad", "stt", "llm", "tts"):
            object.__setattr__(self, name, getattr(queued, name))  # frozen: set once, here

    @property
    def toolbox(self) -> Toolbox:
        """The agent's tools (an empty toolbox: replies run exactly as with no agent)."""
        return self.agent.toolbox if self.agent is not None else _NO_TOOLS

    @property
    def instructions(self) -> str:
        """Every session's system prompt unless its client sets one."""
        return self.agent.agent.instructions if self.agent else self.config.llm.system_prompt

    @property
    def greeting(self) -> str | None:
        """What the agent says first, at the start of a call, if anything."""
        return self.agent.agent.greeting if self.agent is not None else None


_NO_TOOLS = Toolbox()
