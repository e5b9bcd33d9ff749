"""TurnTimeline: stage marks of one turn, as offsets from the end of the caller's speech; and
StageTimer: what each stage of a reply leaves in its timeline, and the deadline misses."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from voxpipe.config import DeadlineConfig
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.timeline import STAGES, StageTimer, TurnTimeline

MS = 1_000_000


def test_a_mark_keeps_its_first_value() -> None:
    tl = TurnTimeline(1)
    tl.mark("stt_done", 5 * MS)
    tl.mark("stt_done", 9 * MS)
    assert tl.marks_ns["stt_done"] == 5 * MS
    assert tl.has("stt_done") and not tl.has("eot")


def test_a_mark_without_a_time_uses_the_monotonic_clock() -> None:
    tl = TurnTimeline(1)
    tl.mark("speech_end", 0)
    tl.mark("eot")
    assert tl.marks_ns["eot"] > 0


def test_offsets_are_relative_to_speech_end_in_stage_order() -> None:
    tl = TurnTimeline(3)
    tl.mark("stt_done", 1_500 * MS)  # recorded out of order on purpose
    tl.mark("speech_end", 1_000 * MS)
    tl.mark("eot", 1_500 * MS - 1)
    tl.mark("first_audio_sent", 2_250_500_000)
    offsets = tl.offsets_ms()
    assert list(offsets) == ["speech_end", "eot", "stt_done", "first_audio_sent"]
    assert offsets == {
        "speech_end": 0.0,
        "eot": 500.0,  # rounded to the microsecond
        "stt_done": 500.0,
        "first_audio_sent": 1250.5,
    }
    assert tl.voice_to_voice_ms() == 1250.5


def test_without_speech_end_offsets_start_at_the_first_mark() -> None:
    tl = TurnTimeline(1)
    assert tl.offsets_ms() == {}
    tl.mark("stt_done", 30 * MS)
    tl.mark("eot", 10 * MS)
    assert tl.offsets_ms() == {"eot": 0.0, "stt_done": 20.0}
    assert tl.voice_to_voice_ms() is None


def test_unknown_stage_raises() -> None:
    tl = TurnTimeline(1)
    with pytest.raises(ValueError, match="unknown stage 'tts_done'"):
        tl.mark("tts_done")
    assert tl.marks_ns == {}


def test_as_dict() -> None:
    tl = TurnTimeline(7)
    for i, stage in enumerate(STAGES):
        tl.mark(stage, i * 10 * MS)
    tl.compute_s["stt"] = 0.25
    tl.queue_s["stt"] = 0.0015
    tl.counters["status"] = "completed"
    record = tl.as_dict()
    assert record["turn_id"] == 7
    assert list(record["stages_ms"]) == list(STAGES)
    assert record["stages_ms"]["response_done"] == 80.0
    assert record["voice_to_voice_ms"] == 70.0
    assert record["compute_ms"] == {"stt": 250.0} and record["queue_ms"] == {"stt": 1.5}
    assert record["status"] == "completed"


@dataclass
class Job:
    started_ns: int = 0
    first_item_ns: int = 0
    queue_s: float = 0.0
    compute_s: float = 0.0


@dataclass
class Usage:
    prompt_tokens: int = 12
    instruction_tokens: int = 3
    reused_tokens: int = 4
    prefill_tokens: int = 8
    completion_tokens: int = 5
    state_restored: bool = False
    finish_reason: str = "stop"


def timer(spoke_ms_ago: float = 0.0) -> tuple[StageTimer, Metrics]:
    tl = TurnTimeline(1)
    tl.mark("speech_end", time.monotonic_ns() - int(spoke_ms_ago * MS))
    metrics = Metrics()
    return StageTimer(tl, metrics, DeadlineConfig()), metrics


def misses(metrics: Metrics, stage: str) -> float:
    value = metrics.registry.get_sample_value("voxpipe_deadline_misses_total", {"stage": stage})
    return value or 0.0


def test_stt_records_its_job_and_a_late_transcript() -> None:
    stages, metrics = timer(spoke_ms_ago=1500)
    with stages.stt(Job(queue_s=0.01, compute_s=0.2)):
        pass
    tl = stages.timeline
    assert tl.has("stt_done")
    assert (tl.compute_s["stt"], tl.queue_s["stt"]) == (0.2, 0.01)
    assert tl.counters["deadline_misses"] == ["stt"] and misses(metrics, "stt") == 1


def test_a_failed_stage_records_nothing() -> None:
    stages, _ = timer()
    with pytest.raises(RuntimeError), stages.stt(Job(compute_s=0.2)):
        raise RuntimeError("engine")
    with pytest.raises(RuntimeError), stages.tts(Job(compute_s=0.2)):
        raise RuntimeError("engine")
    tl = stages.timeline
    assert not tl.has("stt_done") and tl.compute_s == {} and tl.queue_s == {}


def test_llm_first_clause_waits_for_tokens_and_counts_them() -> None:
    stages, _ = timer()
    job = Job(started_ns=time.monotonic_ns())
    with stages.llm(job):
        stages.token()
        stages.token()
        stages.clause("Sure,")
        stages.token()
        stages.clause("later")
    tl = stages.timeline
    assert tl.counters["first_clause"] == "Sure," and tl.counters["first_clause_tokens"] == 2
    assert tl.has("llm_request") and tl.has("llm_first_token")
    assert tl.compute_s["llm_first_clause"] >= 0


def test_llm_done_records_even_a_job_that_never_ran() -> None:
    stages, _ = timer()
    stages.llm_done(Job(), Usage())
    tl = stages.timeline
    assert "llm_ttft" not in tl.compute_s
    assert (tl.queue_s["llm"], tl.compute_s["llm_total"]) == (0.0, 0.0)
    assert tl.counters["llm"]["prefill_tokens"] == 8


def test_tts_keeps_the_first_clause_and_sums_the_rest() -> None:
    stages, _ = timer()
    with stages.tts(Job(started_ns=10 * MS, first_item_ns=30 * MS, queue_s=0.5, compute_s=0.1)):
        stages.tts_chunk()
    with stages.tts(Job(started_ns=50 * MS, first_item_ns=55 * MS, queue_s=0.7, compute_s=0.2)):
        stages.tts_chunk()
    tl = stages.timeline
    assert tl.compute_s["tts_first"] == pytest.approx(0.02) and tl.queue_s["tts_first"] == 0.5
    assert tl.compute_s["tts_total"] == pytest.approx(0.3)


def test_the_filler_is_not_the_first_audio() -> None:
    stages, metrics = timer(spoke_ms_ago=2000)
    stages.audio_sent(time.monotonic_ns(), filler=True)
    tl = stages.timeline
    assert tl.has("filler_sent") and not tl.has("first_audio_sent")
    stages.audio_sent(time.monotonic_ns(), filler=False)
    stages.audio_sent(time.monotonic_ns(), filler=False)
    assert tl.counters["deadline_misses"] == ["tts_first_chunk"]
    assert misses(metrics, "tts_first_chunk") == 1


def test_a_deadline_is_counted_from_the_end_of_speech() -> None:
    stages, _ = timer(spoke_ms_ago=400)
    assert 0.9 < stages.wait_s(1400) <= 1.0
    assert 0.3 < stages.wait_s(800) <= 0.4
    stages, _ = timer(spoke_ms_ago=2000)
    assert stages.wait_s(1400) == 0.0
