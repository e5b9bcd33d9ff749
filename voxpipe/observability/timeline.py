"""Monotonic stage timestamps of one turn, from the caller's last word to the reply's end."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

# The order a turn passes through; every recorded stage is at or after the one before.
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
    "tool_phrase_sent",  # a tool ran past ~300 ms: its phrase went out (before the answer)
)


# What must precede what. A preempted turn (STT and LLM begun during the caller's pause)
# may reach stt_done, the first token, even the first TTS audio, before eot: causality
# still holds, and no audio is sent before the end of the turn.
CAUSAL_CHAIN: tuple[str, ...] = (
    "speech_end", "stt_done", "llm_request", "llm_first_token", "first_clause",
    "tts_first_chunk", "first_audio_sent", "response_done",
)  # fmt: skip
EOT_CHAIN: tuple[str, ...] = ("speech_end", "eot", "first_audio_sent")


def order_violations(offsets_ms: dict[str, float]) -> list[str]:
    """Pairs of recorded stages out of causal order (empty when the timeline is sound)."""
    bad = []
    for chain in (CAUSAL_CHAIN, EOT_CHAIN):
        present = [s for s in chain if s in offsets_ms]
        bad += [
            f"{a} ({offsets_ms[a]}) after {b} ({offsets_ms[b]})"
            for a, b in itertools.pairwise(present)
            if offsets_ms[a] > offsets_ms[b]
        ]
    return bad


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
