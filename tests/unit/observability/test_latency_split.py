"""The four-way split of a caller's wait: the parts add up to what the client measured, each
comes from where it can be known, and Prometheus counts the known ones."""

from __future__ import annotations

import pytest

from voxpipe.config import DeadlineConfig
from voxpipe.observability.latency_split import (
    PARTS,
    ClientTiming,
    LatencySplit,
    inference_ms,
    split,
)
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.timeline import StageTimer, TurnTimeline

MS = 1_000_000  # ns


def client(received: float, played: float) -> ClientTiming:
    return ClientTiming("voxpipe-web/0.1.0", received, played)


def total(parts: LatencySplit) -> float:
    values = parts.as_dict().values()
    assert None not in values
    return sum(v for v in values if v is not None)


def test_with_a_client_report_the_four_parts_add_up_to_its_figure() -> None:
    # The server took 900 ms (600 of them engine compute); the client got the first frame
    # 940 ms after its end of speech left and played it at 1000 ms.
    parts = split(900.0, 600.0, playback=75.0, client=client(940.0, 1000.0))
    assert parts == LatencySplit(transport=20.0, inference=600.0, application=300.0, playback=80.0)
    assert total(parts) == pytest.approx(1000.0)


def test_without_a_report_transport_is_unknown_and_playback_is_the_servers_measure() -> None:
    assert split(900.0, 600.0, playback=75.0) == LatencySplit(None, 600.0, 300.0, 75.0)
    assert split(900.0, 600.0) == LatencySplit(None, 600.0, 300.0, None)


def test_inference_is_at_most_the_servers_time_and_no_part_goes_below_zero() -> None:
    assert split(500.0, 700.0) == LatencySplit(None, 500.0, 0.0, None)
    # A client one frame off: its round trip comes out shorter than the server's part.
    parts = split(900.0, 600.0, client=client(890.0, 950.0))
    assert parts.transport == 0.0 and parts.playback == pytest.approx(50.0)
    assert split(900.0, 600.0, client=client(10.0, 20.0)).playback == 0.0


def test_a_late_report_recomputes_the_split_from_the_record() -> None:
    before = split(900.0, 600.0, playback=75.0)
    again = LatencySplit.from_dict(before.as_dict()).reported(client(940.0, 1000.0))
    assert again == split(900.0, 600.0, playback=75.0, client=client(940.0, 1000.0))


def test_inference_is_the_compute_on_the_way_to_the_first_audio() -> None:
    compute = {"stt": 70.0, "llm_ttft": 400.0, "llm_first_clause": 450.0, "tts_first": 60.0,
               "llm_total": 2000.0, "tts_total": 300.0}  # fmt: skip
    assert inference_ms(compute) == 580.0
    assert inference_ms({"llm_first_clause": 450.0}) == 450.0  # a reply with no STT


def timeline(first_audio_ms: float, filler_ms: float | None = None) -> TurnTimeline:
    tl = TurnTimeline(1)
    tl.mark("speech_end", 1000 * MS)
    tl.mark("eot", 1500 * MS)
    if filler_ms is not None:
        tl.mark("filler_sent", 1000 * MS + int(filler_ms * MS))
    tl.mark("first_audio_sent", 1000 * MS + int(first_audio_ms * MS))
    tl.compute_s.update(stt=0.07, llm_first_clause=0.45, tts_first=0.06)
    return tl


def test_the_stage_timer_writes_the_split_into_the_turns_record() -> None:
    metrics = Metrics()
    tl = timeline(900.0)
    stages = StageTimer(tl, metrics, DeadlineConfig())
    stages.reported(client(940.0, 1000.0))
    stages.split(played_ns=None)
    record = tl.as_dict()
    assert record["split_ms"] == {"transport": 20.0, "inference": 580.0, "application": 320.0,
                                  "playback": 80.0}  # fmt: skip
    assert record["client"] == {"client": "voxpipe-web/0.1.0", "first_audio_received_ms": 940.0,
                                "first_audio_played_ms": 1000.0}  # fmt: skip
    metrics.observe_turn(tl, "completed")
    for part in PARTS:
        count = metrics.registry.get_sample_value(
            "voxpipe_turn_latency_split_seconds_count", {"part": part}
        )
        assert count == 1, part
    inference = metrics.registry.get_sample_value(
        "voxpipe_turn_latency_split_seconds_sum", {"part": "inference"}
    )
    assert inference == pytest.approx(0.58)


def test_without_a_report_playback_comes_from_the_transports_signal() -> None:
    tl = timeline(900.0)
    stages = StageTimer(tl, Metrics(), DeadlineConfig())
    stages.split(played_ns=1000 * MS + 960 * MS)  # began to play 60 ms after it was sent
    assert tl.counters["split_ms"] == {"transport": None, "inference": 580.0,
                                       "application": 320.0, "playback": 60.0}  # fmt: skip


def test_with_a_filler_the_wait_ends_at_the_filler_the_caller_heard_first() -> None:
    tl = timeline(3000.0, filler_ms=1400.0)
    StageTimer(tl, Metrics(), DeadlineConfig()).split(played_ns=None)
    parts = tl.counters["split_ms"]
    assert parts["inference"] + parts["application"] == pytest.approx(1400.0)


def test_a_turn_with_no_reply_audio_has_no_split() -> None:
    tl = TurnTimeline(1)
    tl.mark("speech_end", 1000 * MS)
    StageTimer(tl, Metrics(), DeadlineConfig()).split(played_ns=None)
    assert "split_ms" not in tl.counters


def test_only_known_parts_are_observed() -> None:
    metrics = Metrics()
    metrics.observe_split({"transport": None, "inference": 500.0, "playback": -3.0})
    get = metrics.registry.get_sample_value
    name = "voxpipe_turn_latency_split_seconds_count"
    assert get(name, {"part": "transport"}) is None
    assert get(name, {"part": "inference"}) == 1
    assert get("voxpipe_turn_latency_split_seconds_sum", {"part": "playback"}) == 0.0
