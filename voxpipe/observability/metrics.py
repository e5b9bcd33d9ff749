"""Prometheus metrics, one registry per server so tests can run several.

``deploy/prometheus/alerts.yml`` and ``deploy/grafana/voxpipe.json`` query these names, and
``docs/observability.md`` explains them; a renamed metric breaks both (a unit test checks).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping, Sequence

import psutil
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from voxpipe.observability.client_labels import ClientVersions, client_name
from voxpipe.observability.latency_split import PARTS
from voxpipe.observability.timeline import OPTIONAL_STAGES, STAGES, TurnTimeline

_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0,
    1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0,
)  # fmt: skip
_TOKEN_BUCKETS = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

# voxpipe_connections_total{outcome}: a refusal is its error code (at_capacity, ...).
ACCEPTED = "accepted"
HANDSHAKE_FAILED = "handshake_failed"  # the client went before the upgrade completed


class _Declare:
    """Declares metrics into one registry; a histogram of seconds takes the shared buckets."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def histogram(
        self,
        name: str,
        doc: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = _LATENCY_BUCKETS,
    ) -> Histogram:
        return Histogram(name, doc, labels, buckets=buckets, registry=self._registry)

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, doc, labels, registry=self._registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, doc, labels, registry=self._registry)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        m = _Declare(self.registry)
        # process_resident_memory_bytes, CPU, open fds (Linux)
        ProcessCollector(registry=self.registry)
        self.client_versions = ClientVersions()
        self.stage = m.histogram(
            "voxpipe_turn_stage_seconds",
            "Time from the end of the caller's speech to each stage of the turn.",
            ["stage"],
        )
        self.voice_to_voice = m.histogram(
            "voxpipe_voice_to_voice_seconds",
            "End of the caller's speech to the first reply audio frame sent (server side).",
        )
        self.engine_queue = m.histogram(
            "voxpipe_engine_queue_seconds", "Time a job waited for its engine's thread.", ["engine"]
        )
        self.engine_compute = m.histogram(
            "voxpipe_engine_compute_seconds", "Time a job ran on its engine's thread.", ["engine"]
        )
        self.batch_sequences = m.histogram(
            "voxpipe_llm_batch_sequences",
            "Replies that decoded a token together in one step of the batched LLM.",
            buckets=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64),
        )
        self.batch_step = m.histogram(
            "voxpipe_llm_batch_step_seconds",
            "One step of the batched LLM (its decodes and prompt chunks together).",
        )
        self.queue_depth = m.gauge(
            "voxpipe_engine_queue_depth", "Jobs waiting per engine.", ["engine"]
        )
        self.prefill_tokens = m.histogram(
            "voxpipe_llm_prefill_tokens",
            "Prompt tokens evaluated per turn (the rest came from the reused KV cache).",
            buckets=_TOKEN_BUCKETS,
        )
        self.calls = m.gauge(
            "voxpipe_calls",
            "Calls holding a slot: connected, or detached and waiting for a reconnect.",
            ["state"],
        )
        self.refused_calls = m.counter(
            "voxpipe_refused_calls_total", "Calls refused at connect, by reason.", ["reason"]
        )
        self.deadline_misses = m.counter(
            "voxpipe_deadline_misses_total", "Turn stages that missed their deadline.", ["stage"]
        )
        self.fillers = m.counter(
            "voxpipe_fillers_total", "Fillers said because the first LLM token was late."
        )
        self.audio_dropped = m.counter(
            "voxpipe_audio_dropped_seconds_total",
            "Audio dropped by a full buffer, by direction, policy and transport.",
            ["direction", "policy", "transport"],
        )
        self.buffer_age = m.histogram(
            "voxpipe_buffer_age_seconds",
            "How long audio waited in a call's buffer: inbound (before the VAD) and outbound "
            "(before the client's socket took it).",
            ["direction"],
        )
        self.slow_consumers = m.counter(
            "voxpipe_slow_consumers_total", "Calls closed because the client stopped reading."
        )
        self.hangup_cleanup = m.histogram(
            "voxpipe_hangup_cleanup_seconds",
            "From the end of a call to all of its tasks and engine jobs stopped.",
        )
        self.restores = m.counter(
            "voxpipe_session_restores_total",
            "Reconnects to a session this worker did not hold, by outcome: restored from the "
            "shared store, or not found there.",
            ["outcome"],
        )
        self.context_rebuild = m.histogram(
            "voxpipe_context_rebuild_seconds",
            "LLM prefill of a restored conversation's history on its new worker.",
        )
        self.live_tasks = m.gauge(
            "voxpipe_asyncio_tasks", "asyncio tasks alive in the server process."
        )
        self.live_threads = m.gauge("voxpipe_threads", "Threads alive in the server process.")
        self.memory = m.gauge(
            "voxpipe_resident_memory_bytes", "Resident memory of the server process."
        )
        self.turns = m.counter("voxpipe_turns_total", "Turns by outcome.", ["status"])
        self.errors = m.counter("voxpipe_errors_total", "Error events sent to clients.", ["code"])
        self.dtmf = m.counter(
            "voxpipe_dtmf_total", "DTMF key presses received on phone lines, by digit.", ["digit"]
        )
        self.sip_refused = m.counter(
            "voxpipe_sip_refused_total",
            "SIP requests answered with an error (or calls ended for want of an ACK), by status.",
            ["status"],
        )
        self.rtp_dropped = m.counter(
            "voxpipe_rtp_dropped_total",
            "RTP packets dropped: not RTP, a payload type not negotiated, late or duplicate.",
            ["reason"],
        )
        self.preemptions = m.counter(
            "voxpipe_preemptions_total",
            "Replies started during the caller's pause: used at the end of the turn, or wasted "
            "because speech resumed.",
            ["outcome"],
        )
        self.barge_in = m.histogram(
            "voxpipe_barge_in_seconds",
            "From the first window of the caller's interrupting speech to: the reply pausing "
            "(pause), the decision to interrupt (decide), the last reply frame sent (stop), "
            "LLM and TTS stopped (cancel).",
            ["phase"],
        )
        self.ready = m.gauge("voxpipe_ready", "1 once all models are loaded and warm.")
        self.connections = m.counter(
            "voxpipe_connections_total",
            "WebSocket connections by outcome: accepted, refused (the error code) or "
            "handshake_failed; by transport and the client's version (bounded).",
            ["transport", "outcome", "client_version"],
        )
        self.reconnects = m.counter(
            "voxpipe_reconnects_total",
            "Connections that came back to a session this worker holds (?session_id= of a live "
            "or waiting session of the same principal), by transport and client version.",
            ["transport", "client_version"],
        )
        self.upstream_refusals = m.counter(
            "voxpipe_upstream_refusals_total",
            "Requests a remote engine refused or never answered, retried ones included: the "
            "HTTP status, timeout or unreachable.",
            ["engine", "reason"],
        )
        self.client_voice_to_voice = m.histogram(
            "voxpipe_client_voice_to_voice_seconds",
            "End of the caller's speech to the first reply sample played, as the client "
            "measured and reported it.",
            ["transport", "client"],
        )
        self.latency_split = m.histogram(
            "voxpipe_turn_latency_split_seconds",
            "A turn's voice-to-voice in four parts that add up to it: transport (the caller's "
            "last speech to the server), inference (engine compute), application (the rest of "
            "the server's time), playback (the first reply frame sent to its first sample "
            "played); a part is observed once per turn, when it is known.",
            ["part"],
        )

        self.tool_seconds = m.histogram(
            "voxpipe_tool_seconds",
            "How long a tool call ran, by tool and how it ended (ok, error, timeout, cancelled, "
            "unknown_outcome).",
            ["tool", "status"],
        )
        self.tool_calls = m.counter(
            "voxpipe_tool_calls_total", "Tool calls by tool and how they ended.", ["tool", "status"]
        )
        self.unbacked_claims = m.counter(
            "voxpipe_unbacked_claims_total",
            "Replies whose words stated what a tool owns with no result behind them: not "
            "said, the model asked for a call instead.",
            ["kind"],
        )
        self.tool_calls_per_turn = m.histogram(
            "voxpipe_tool_calls_per_turn",
            "Tool calls the model made in one turn, of the turns that were offered tools.",
            buckets=(0, 1, 2, 3, 4, 6, 8),
        )

    def sample_process(self) -> None:
        """Refresh the process gauges (tasks, threads, memory) before a scrape."""
        self.live_threads.set(threading.active_count())
        with contextlib.suppress(RuntimeError):  # no running loop
            self.live_tasks.set(len(asyncio.all_tasks()))
        self.memory.set(psutil.Process().memory_info().rss)

    def client_version(self, claimed: str | None) -> str:
        """A bounded label value for what the client says it is (``client_labels.py``)."""
        return self.client_versions.label(claimed)

    def count_connection(self, transport: str, outcome: str, client_version: str) -> None:
        self.connections.labels(transport, outcome, client_version).inc()

    def count_reconnect(self, transport: str, client_version: str) -> None:
        self.reconnects.labels(transport, client_version).inc()

    def upstream_refused(self, engine: str, reason: str) -> None:
        self.upstream_refusals.labels(engine, reason).inc()

    def observe_client_voice_to_voice(
        self, transport: str, client_version: str, seconds: float
    ) -> None:
        """A client's own voice-to-voice figure; ``client`` is the name part of its label."""
        self.client_voice_to_voice.labels(transport, client_name(client_version)).observe(
            max(0.0, seconds)
        )

    def observe_split(self, parts: Mapping[str, float | None]) -> None:
        """The parts of a turn's latency split (ms, ``latency_split.PARTS``) that are known."""
        for part in PARTS:
            ms = parts.get(part)
            if ms is not None:
                self.latency_split.labels(part).observe(max(0.0, ms) / 1000)

    def observe_tool(self, tool: str, status: str, seconds: float) -> None:
        """One tool call's end (``tool`` is one of the agent's few tool names)."""
        self.tool_seconds.labels(tool, str(status)).observe(max(0.0, seconds))
        self.tool_calls.labels(tool, str(status)).inc()

    def observe_job(self, engine: str, queue_s: float, compute_s: float) -> None:
        self.engine_queue.labels(engine).observe(queue_s)
        self.engine_compute.labels(engine).observe(compute_s)

    def observe_batch_step(self, decode: int, seconds: float) -> None:
        """One step of the batched LLM (called on its thread)."""
        if decode:
            self.batch_sequences.observe(decode)
        self.batch_step.observe(seconds)

    def set_queue_depth(self, engine: str, depth: int) -> None:
        self.queue_depth.labels(engine).set(depth)

    def observe_turn(self, timeline: TurnTimeline, status: str) -> None:
        self.turns.labels(status).inc()
        offsets = timeline.offsets_ms()
        for stage in (*STAGES[1:], *OPTIONAL_STAGES):
            if stage in offsets:
                self.stage.labels(stage).observe(offsets[stage] / 1000)
        v2v = timeline.voice_to_voice_ms()
        if v2v is not None:
            self.voice_to_voice.observe(v2v / 1000)
        for phase, ms in timeline.counters.get("barge_in", {}).items():
            if ms is not None:
                self.barge_in.labels(phase.removesuffix("_ms")).observe(max(0.0, ms) / 1000)
        self.observe_split(timeline.counters.get("split_ms", {}))
        tools = timeline.counters.get("tools")
        if tools is not None:  # the turn was offered tools
            self.tool_calls_per_turn.observe(len(tools))
        prefill = timeline.counters.get("llm", {}).get("prefill_tokens")
        if prefill is not None:
            self.prefill_tokens.observe(prefill)

    def render(self) -> bytes:
        return generate_latest(self.registry)
