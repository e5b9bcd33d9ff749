"""A turn's timing: monotonic stage marks from the caller's last word to the reply's end
(:class:`TurnTimeline`), and the one place a reply writes them (:class:`StageTimer`).

A reply runs its STT, then the LLM, the TTS (once per clause) and the playback at once;
the pipeline (``conversation/reply.py``) only says what happened (a token came, a clause
was cut, a frame went out) and :class:`StageTimer` turns that into the turn's timeline:
stage marks, each engine job's queue wait and compute, the deadline misses. ``turn.metrics``,
the turn log and the Prometheus histograms all read that timeline, so their figures come
from here alone.

Every engine stage, and every tool call, begins and ends in :meth:`StageTimer._stage`, and
so does its trace span; the turn's span, and the stages written from its marks (end of
turn, playout), close in :meth:`StageTimer.done` (``observability/tracing.py``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter

from voxpipe.config import DeadlineConfig
from voxpipe.observability.latency_split import ClientTiming, inference_ms, split
from voxpipe.observability.tracing import (
    NO_CALL,
    NO_STAGE,
    NO_TURN,
    Attributes,
    AttributeValue,
    CallTrace,
    StageTrace,
)

# The order a turn passes through. A preempted turn (STT and LLM begun during the caller's
# pause) may pass stt_done, even tts_first_chunk, before eot; no audio goes out before it.
STAGES: tuple[str, ...] = (
    "speech_end",  # arrival of the last audio sample of the caller's speech (sample clock)
    "eot",  # end of turn decided (silence lasted silence_ms)
    "stt_done",
    "llm_request",
    "llm_first_token",
    "first_clause",
    "tts_first_chunk",
    "first_audio_sent",
    "response_done",
)

# Stages a turn may or may not pass, at no fixed place in the order.
OPTIONAL_STAGES: tuple[str, ...] = (
    "filler_sent",  # the first LLM token was late: the filler went out first
    "tool_named",  # the model named the tool it is calling: its phrase may be said from here
    "tool_phrase_sent",  # a tool ran past ~300 ms: its phrase went out (before the answer)
)


@dataclass
class TurnTimeline:
    turn_id: int
    marks_ns: dict[str, int] = field(default_factory=dict)
    compute_s: dict[str, float] = field(default_factory=dict)
    queue_s: dict[str, float] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)

    def mark(self, stage: str, at_ns: int | None = None) -> None:
        """Record ``stage`` once (the first time wins)."""
        if stage not in STAGES and stage not in OPTIONAL_STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        self.marks_ns.setdefault(stage, at_ns if at_ns is not None else time.monotonic_ns())

    def has(self, stage: str) -> bool:
        return stage in self.marks_ns

    def offsets_ms(self) -> dict[str, float]:
        """Each recorded stage in ms after ``speech_end`` (or after the first mark)."""
        if not self.marks_ns:
            return {}
        origin = self.marks_ns.get("speech_end", min(self.marks_ns.values()))
        return {
            s: round((self.marks_ns[s] - origin) / 1e6, 3)
            for s in (*STAGES, *OPTIONAL_STAGES)
            if s in self.marks_ns
        }

    def voice_to_voice_ms(self) -> float | None:
        if "speech_end" in self.marks_ns and "first_audio_sent" in self.marks_ns:
            return round((self.marks_ns["first_audio_sent"] - self.marks_ns["speech_end"]) / 1e6, 3)
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "stages_ms": self.offsets_ms(),
            "voice_to_voice_ms": self.voice_to_voice_ms(),
            "compute_ms": {k: round(v * 1000, 3) for k, v in self.compute_s.items()},
            "queue_ms": {k: round(v * 1000, 3) for k, v in self.queue_s.items()},
            **self.counters,
        }


@dataclass
class BargeIn:
    """The moments of one barge-in, from the caller's first speech to the reply's silence:
    how fast a reply yields is what the caller feels (``voxpipe_barge_in_seconds``)."""

    speech_start_ns: int  # arrival of the first window of the caller's speech
    paused_ns: int = 0
    decided_ns: int = 0
    cancelled_ns: int = 0  # LLM and TTS jobs have stopped
    last_frame_ns: int = 0  # the last reply frame handed to the transport

    def as_dict(self) -> dict[str, float | None]:
        def since(ns: int) -> float | None:
            return round((ns - self.speech_start_ns) / 1e6, 1) if ns else None

        return {
            "pause_ms": since(self.paused_ns),
            "decide_ms": since(self.decided_ns),
            "stop_ms": since(self.last_frame_ns),
            "cancel_ms": since(self.cancelled_ns),
        }


class JobTimes(Protocol):
    """What an engine's runner measured of one job (``engines.base.JobClock``)."""

    started_ns: int
    first_item_ns: int

    @property
    def queue_s(self) -> float: ...

    @property
    def compute_s(self) -> float: ...


class TokenUsage(Protocol):
    """What the LLM counted of one request (``engines.base.LlmUsage``, which the engine
    fills in as it streams)."""

    prompt_tokens: int
    instruction_tokens: int
    reused_tokens: int
    prefill_tokens: int
    completion_tokens: int
    state_restored: bool
    finish_reason: str


class TurnCounters(Protocol):
    """The counters a reply's timing adds to (``metrics.Metrics``, which reads this module's
    timeline, so it is named here by what the timer uses of it)."""

    fillers: Counter
    deadline_misses: Counter
    unbacked_claims: Counter


@dataclass
class ToolTiming:
    """One tool call of a reply, as the turn's ``tools`` list shows it; ``status`` is set by
    whoever learns how it ended ("running": it outlived the reply, after a barge-in)."""

    name: str
    call_id: str
    started_ns: int
    status: str = "running"

    def record(self, tl: TurnTimeline) -> None:
        """The call is over (or its reply is): its time and its entry in the turn's record."""
        now = time.monotonic_ns()
        duration_s = (now - self.started_ns) / 1e9
        tl.compute_s["tool"] = tl.compute_s.get("tool", 0.0) + duration_s
        origin = tl.marks_ns.get("speech_end", self.started_ns)
        entry: dict[str, Any] = {
            "name": self.name,
            "call_id": self.call_id,
            "status": self.status,
            "started_ms": _ms(self.started_ns - origin),
            "duration_ms": _ms(now - self.started_ns),
        }
        tl.counters.setdefault("tools", []).append(entry)


class StageTimer:
    """The timing of one reply. Deadlines count from the end of the caller's speech;
    a miss is counted (``voxpipe_deadline_misses_total``) and listed in the turn's
    ``deadline_misses``."""

    def __init__(
        self,
        timeline: TurnTimeline,
        metrics: TurnCounters,
        deadlines: DeadlineConfig,
        trace: CallTrace = NO_CALL,
    ):
        """``trace``: the call's span, under which this reply's turn span opens now, at the
        end of the caller's speech."""
        self.timeline = timeline
        self._metrics = metrics
        self._deadlines = deadlines
        self._llm_job: JobTimes | None = None
        self._tokens = 0  # LLM deltas so far: how many the first phrase waited for
        self._clauses = 0  # TTS stages begun
        start_ns = timeline.marks_ns.get("speech_end") or time.monotonic_ns()
        self._turn = trace.turn(timeline.turn_id, start_ns)
        self._llm_span = NO_STAGE
        self._more_llm: list[tuple[JobTimes, TokenUsage]] = []  # after tool results
        self.client: ClientTiming | None = None  # the client's report, if it came in time

    @contextlib.contextmanager
    def _stage(self, name: str, attributes: Callable[[], Attributes]) -> Iterator[StageTrace]:
        """Every engine stage (``stt``, ``llm``, each clause's ``tts``) begins and ends
        here and nowhere else, and so does its span, which closes with ``attributes()``:
        what the stage's job measured by then. An exception ends it and goes on."""
        span = self._turn.begin(name, time.monotonic_ns())
        failure: str | None = None
        cancelled = False
        try:
            yield span
        except Exception as error:
            failure = type(error).__name__
            raise
        except BaseException:  # the task was cancelled (the call closed): not an error
            cancelled = True
            raise
        finally:
            if span is not NO_STAGE:  # off: not even the attributes are gathered
                what = {**attributes(), "voxpipe.cancelled": True} if cancelled else attributes()
                span.end(time.monotonic_ns(), what, failure)

    # -- STT ------------------------------------------------------------------

    @contextlib.contextmanager
    def stt(self, job: JobTimes) -> Iterator[None]:
        """The caller's turn transcribed (``job``: the STT's clock); recorded on success."""
        with self._stage("stt", lambda: _job_attributes(job)):
            yield
        tl = self.timeline
        tl.mark("stt_done")
        self._check("stt", self._deadlines.stt_ms)
        tl.compute_s["stt"], tl.queue_s["stt"] = job.compute_s, job.queue_s

    # -- LLM ------------------------------------------------------------------

    @contextlib.contextmanager
    def llm(self, job: JobTimes, usage: TokenUsage | None = None) -> Iterator[None]:
        """The LLM asked for the reply (``job``: its stream's clock; ``usage``: what it
        counts) until it stops."""
        self._llm_job = job
        with self._stage("llm", lambda: _llm_attributes(self._turn.model, job, usage)) as span:
            self._llm_span = span
            self.timeline.mark("llm_request")
            yield

    def trace_headers(self) -> dict[str, str]:
        """The LLM stage's trace context (``traceparent``), for a remote engine's request:
        its spans become the stage's children. Empty when tracing is off."""
        return self._llm_span.traceparent()

    def token(self) -> None:
        self.timeline.mark("llm_first_token")
        self._tokens += 1

    def clause(self, text: str) -> None:
        """A clause was cut for the TTS; the first is what the caller waits for."""
        tl = self.timeline
        if tl.has("first_clause"):
            return
        tl.mark("first_clause")
        tl.counters["first_clause"] = text
        tl.counters["first_clause_tokens"] = self._tokens
        job = self._llm_job
        if job is not None and job.started_ns:
            tl.compute_s["llm_first_clause"] = (tl.marks_ns["first_clause"] - job.started_ns) / 1e9

    def wait_s(self, deadline_ms: int) -> float:
        """How long until ``deadline_ms`` after the end of the caller's words (0: past)."""
        due_ns = self.timeline.marks_ns["speech_end"] + deadline_ms * 1_000_000
        return max(0.0, (due_ns - time.monotonic_ns()) / 1e9)

    def filler(self, text: str) -> None:
        """Nothing of the reply was on its way by the filler's deadline: it is said."""
        self._metrics.fillers.inc()
        self.timeline.counters["filler"] = text

    def unbacked_claim(self, kind: str, text: str) -> None:
        """The model's words stated what a tool owns, with nothing behind it: not said."""
        self._metrics.unbacked_claims.labels(kind).inc()
        self.timeline.counters["unbacked_claim"] = {"kind": kind, "text": text}

    def llm_done(self, job: JobTimes, usage: TokenUsage) -> None:
        """The reply's pipeline is over, however it ended: what the LLM cost."""
        tl = self.timeline
        if job.started_ns and job.first_item_ns:
            tl.compute_s["llm_ttft"] = (job.first_item_ns - job.started_ns) / 1e9
        tl.queue_s["llm"] = job.queue_s
        tl.compute_s["llm_total"] = job.compute_s
        tl.counters["llm"] = {
            "prompt_tokens": usage.prompt_tokens,
            "instruction_tokens": usage.instruction_tokens,
            "reused_tokens": usage.reused_tokens,
            "prefill_tokens": usage.prefill_tokens,
            "completion_tokens": usage.completion_tokens,
            "state_restored": usage.state_restored,
            "finish_reason": usage.finish_reason,
        }
        if self._more_llm:  # the requests that followed tool results: their cost too
            tl.compute_s["llm_total"] += sum(job.compute_s for job, _ in self._more_llm)
            tl.counters["llm"]["requests"] = 1 + len(self._more_llm)
            tl.counters["llm"]["completion_tokens"] += sum(
                u.completion_tokens for _, u in self._more_llm
            )
            tl.counters["llm"]["finish_reason"] = self._more_llm[-1][1].finish_reason

    def llm_again(self, job: JobTimes, usage: TokenUsage) -> None:
        """Another request of the same reply (after tool results) is over."""
        self._more_llm.append((job, usage))

    # -- tools ------------------------------------------------------------------

    def offer_tools(self) -> None:
        """The reply may call tools: its record lists them (``tools``), even none."""
        self.timeline.counters.setdefault("tools", [])

    @contextlib.contextmanager
    def tool(self, name: str, call_id: str) -> Iterator[ToolTiming]:
        """One tool call, from its start to its result (or to the reply's end, for one that
        runs on after a barge-in): its span, under the turn's (OpenTelemetry's gen_ai tool
        names), its time in ``compute_ms["tool"]`` and its entry in the turn's ``tools``."""
        timing = ToolTiming(name, call_id, time.monotonic_ns())

        def attributes() -> Attributes:
            return {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "voxpipe.tool.status": timing.status,
            }

        try:
            with self._stage("tool", attributes):
                yield timing
        finally:
            timing.record(self.timeline)

    def phrase_sent(self, at_ns: int) -> None:
        """A frame of a phrase said while a tool ran (not the answer) went out."""
        self.timeline.mark("tool_phrase_sent", at_ns)

    # -- TTS and playback -------------------------------------------------------

    @contextlib.contextmanager
    def tts(self, job: JobTimes) -> Iterator[None]:
        """One clause synthesized (``job``: its clock); recorded once it is all out. The
        first clause's first chunk is what the caller waits for, not the whole clause."""
        self._clauses += 1
        clause = self._clauses

        def attributes() -> Attributes:
            first = {"voxpipe.tts.first_chunk_ms": _ms(job.first_item_ns - job.started_ns)}
            return {
                "voxpipe.tts.clause": clause,
                **_job_attributes(job),
                **(first if job.first_item_ns else {}),
            }

        with self._stage("tts", attributes):
            yield
        tl = self.timeline
        if job.first_item_ns:
            tl.compute_s.setdefault("tts_first", (job.first_item_ns - job.started_ns) / 1e9)
        tl.queue_s.setdefault("tts_first", job.queue_s)
        tl.compute_s["tts_total"] = tl.compute_s.get("tts_total", 0.0) + job.compute_s

    def tts_chunk(self) -> None:
        self.timeline.mark("tts_first_chunk")

    def audio_sent(self, at_ns: int, filler: bool) -> None:
        """A frame was handed to the transport at ``at_ns``: the filler's, or the reply's."""
        tl = self.timeline
        if filler:
            tl.mark("filler_sent", at_ns)
            return
        if not tl.has("first_audio_sent"):
            self._check("tts_first_chunk", self._deadlines.tts_first_chunk_ms)
        tl.mark("first_audio_sent", at_ns)

    # -- the turn ---------------------------------------------------------------

    def confirmed(self, speech_end_ns: int) -> None:
        """A held reply's turn ended (its speech at ``speech_end_ns``): it counts from here."""
        self.timeline.marks_ns["speech_end"] = speech_end_ns
        self.timeline.mark("eot")

    def done(self, status: str = "", reply_text: str = "") -> None:
        """The reply is over (``status``, its text ``reply_text``): its turn span closes."""
        self.timeline.mark("response_done")
        if self._turn is not NO_TURN:
            self._end_turn(status, reply_text)

    def _end_turn(self, status: str, reply_text: str) -> None:
        """The stages written from the marks, then the turn's span."""
        tl, turn = self.timeline, self._turn
        marks = tl.marks_ns
        end_ns = marks["response_done"]
        if "speech_end" in marks and "eot" in marks:
            turn.stage("end_of_turn", marks["speech_end"], marks["eot"])
        sent = [marks[s] for s in (*_SPOKEN, "first_audio_sent") if s in marks]
        if sent:
            turn.stage("playout", min(sent), end_ns, {"voxpipe.filler": "filler_sent" in marks})
        attributes: dict[str, AttributeValue] = {
            "voxpipe.turn.status": str(status),
            "voxpipe.turn.interrupted": status == "interrupted",  # a barge-in
            "voxpipe.turn.preempted": bool(tl.counters.get("preempted", False)),
            "voxpipe.turn.deadline_misses": tuple(tl.counters.get("deadline_misses", ())),
        }
        voice_to_voice = tl.voice_to_voice_ms()
        if voice_to_voice is not None:
            attributes["voxpipe.turn.voice_to_voice_ms"] = voice_to_voice
        if turn.content:
            attributes["voxpipe.turn.transcript"] = str(tl.counters.get("transcript", ""))
            attributes["voxpipe.turn.reply"] = reply_text
        turn.end(end_ns, attributes)

    def reported(self, client: ClientTiming) -> None:
        """The client's own timing of this turn (``client.turn``), before its record is made."""
        self.client = client
        self.timeline.counters["client"] = client.as_dict()

    def split(self, played_ns: int | None) -> None:
        """The turn's latency split (``latency_split.py``) into its record: ``played_ns`` is
        when the transport's playback signal says the first reply frame began to play."""
        tl, marks = self.timeline, self.timeline.marks_ns
        sent = [marks[s] for s in (*_SPOKEN, "first_audio_sent") if s in marks]
        if not sent or "speech_end" not in marks:
            return  # no reply audio: no wait to split
        first_ns = min(sent)
        playback = None if played_ns is None else (played_ns - first_ns) / 1e6
        compute_ms = {k: v * 1000 for k, v in tl.compute_s.items()}
        server_ms = (first_ns - marks["speech_end"]) / 1e6
        parts = split(server_ms, inference_ms(compute_ms), playback, self.client)
        tl.counters["split_ms"] = parts.as_dict()

    def missed(self, stage: str) -> None:
        self._metrics.deadline_misses.labels(stage).inc()
        self.timeline.counters.setdefault("deadline_misses", []).append(stage)

    def _check(self, stage: str, due_ms: int) -> None:
        """Count a miss if ``stage`` came later than ``due_ms`` after the caller's speech."""
        start = self.timeline.marks_ns.get("speech_end")
        if start is not None and time.monotonic_ns() - start > due_ms * 1_000_000:
            self.missed(stage)


_SPOKEN = ("filler_sent", "tool_phrase_sent")  # audio the caller hears before the answer


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _llm_attributes(model: Attributes, job: JobTimes, usage: TokenUsage | None) -> Attributes:
    """The LLM span's: the gen_ai semantic conventions, and what voxpipe knows beyond them."""
    attributes: dict[str, AttributeValue] = {
        **model,
        "gen_ai.operation.name": "chat",
        **_job_attributes(job),
    }
    if job.started_ns and job.first_item_ns:
        attributes["voxpipe.llm.ttft_ms"] = _ms(job.first_item_ns - job.started_ns)
    if usage is not None:
        attributes.update(
            {
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
                "voxpipe.llm.prefill_tokens": usage.prefill_tokens,
                "voxpipe.llm.reused_tokens": usage.reused_tokens,
                "voxpipe.llm.state_restored": usage.state_restored,
            }
        )
        if usage.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (usage.finish_reason,)
    return attributes


def _job_attributes(job: JobTimes) -> Attributes:
    """An engine job's wait for its thread, apart from its compute."""
    return {
        "voxpipe.queue_ms": round(job.queue_s * 1000, 3),
        "voxpipe.compute_ms": round(job.compute_s * 1000, 3),
    }
