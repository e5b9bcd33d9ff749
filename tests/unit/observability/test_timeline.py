"""TurnTimeline: stage marks of one turn, as offsets from the end of the caller's speech."""

from __future__ import annotations

import pytest

from voxpipe.observability.timeline import STAGES, TurnTimeline

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
