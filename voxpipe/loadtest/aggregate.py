"""One load step's raw results -> the figures ``voxpipe load`` reports (pure, no I/O).

A step is N callers against one server for the step's duration. Latency is
what the callers measured (voice-to-voice: the end of their speech to the
first reply audio they received); the server's own figures come from each
turn's ``turn.metrics`` event (queue waits per engine) and from ``/metrics``
(buffer age, memory).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from voxpipe.loadtest.callers import CallerResult, CallerTurn
from voxpipe.loadtest.stats import summarize

FAILED_STATUSES = frozenset({"failed", "timeout", "unknown"})


@dataclass
class Memory:
    """Server resident memory around a step, in bytes."""

    source: str  # "psutil" (the server's pid) or "metrics" (its gauge)
    baseline: float | None  # just before the first call
    peak: float | None  # highest sample during the step
    samples: list[tuple[float, float]] = field(default_factory=list)

    def as_dict(self, admitted: int) -> dict[str, Any]:
        increment = (
            (self.peak - self.baseline) / admitted
            if self.peak is not None and self.baseline is not None and admitted
            else None
        )
        return {
            "source": self.source,
            "baseline_bytes": self.baseline,
            "peak_bytes": self.peak,
            "per_call_bytes": None if increment is None else round(increment),
            "samples": self.samples,
        }


@dataclass
class StepResult:
    """Everything measured in one step, before aggregation."""

    calls: int
    duration_s: float
    elapsed_s: float
    callers: list[CallerResult]
    memory: Memory | None = None
    buffer_age_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # by direction
    role: str = "load"  # "load", "search" or "overload"


def _turns(callers: list[CallerResult]) -> list[CallerTurn]:
    return [t for r in callers for t in r.turns]


def summarize_step(step: StepResult, slo_ms: float | None = None) -> dict[str, Any]:
    """The step's report: calls by outcome, turns by status, latency percentiles, server
    stage figures and memory; with ``slo_ms``, whether the step met the SLO."""
    callers = step.callers
    outcomes = Counter(r.outcome for r in callers)
    turns = _turns(callers)
    statuses = Counter(t.status for t in turns)
    completed = [t for t in turns if t.status not in FAILED_STATUSES]
    v2v = [t.v2v_ms for t in completed if t.v2v_ms is not None]
    engines = sorted({e for t in completed for e in t.queue_ms})
    admitted = outcomes["completed"] + outcomes["crashed"]
    summary: dict[str, Any] = {
        "role": step.role,
        "calls": step.calls,
        "duration_s": step.duration_s,
        "elapsed_s": round(step.elapsed_s, 1),
        "outcomes": {
            "admitted": admitted,
            "completed": outcomes["completed"],
            "rejected": outcomes["rejected"],
            "crashed": outcomes["crashed"],
            "rejected_by_code": dict(Counter(r.reason for r in callers if r.outcome == "rejected")),
            "crashes": [f"call {r.index}: {r.reason}" for r in callers if r.outcome == "crashed"],
        },
        "turns": {
            "total": len(turns),
            "completed": statuses["completed"],
            "failed": sum(statuses[s] for s in FAILED_STATUSES),
            "by_status": dict(statuses),
        },
        "errors": dict(Counter(code for r in callers for code in r.errors)),
        "voice_to_voice_ms": summarize(v2v),
        "voice_to_voice_values": [round(v, 1) for v in v2v],
        "server": {
            "voice_to_voice_ms": summarize(t.server_v2v_ms for t in completed),
            "queue_ms": {e: summarize(t.queue_ms.get(e) for t in completed) for e in engines},
            "buffer_age_ms": step.buffer_age_ms,
        },
        "memory": step.memory.as_dict(admitted) if step.memory is not None else None,
        "turn_records": [
            {
                "call": t.call,
                "clip": t.clip,
                "status": t.status,
                "started_s": round(t.started_s, 2),
                "v2v_ms": None if t.v2v_ms is None else round(t.v2v_ms, 1),
                "server_v2v_ms": t.server_v2v_ms,
                "queue_ms": t.queue_ms,
                "transcript": t.transcript,
            }
            for t in turns
        ],
    }
    if slo_ms is not None:
        summary["slo_ms"] = slo_ms
        summary["meets_slo"] = meets_slo(summary, slo_ms)
    return summary


def meets_slo(summary: dict[str, Any], slo_ms: float) -> bool:
    """A step meets the SLO when every caller got in, nothing crashed or failed, and the
    p99 voice-to-voice latency of its turns is under ``slo_ms``. A refused or failed call
    would otherwise hide the latency it did not have."""
    p99 = summary["voice_to_voice_ms"].get("p99")
    outcomes, turns = summary["outcomes"], summary["turns"]
    return (
        p99 is not None
        and p99 < slo_ms
        and outcomes["rejected"] == 0
        and outcomes["crashed"] == 0
        and turns["failed"] == 0
    )
