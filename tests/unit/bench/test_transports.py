"""bench-transports' pure parts: voiced-audio detection, turn-log parsing, the aggregate."""

from __future__ import annotations

import json

import numpy as np

from voxpipe.bench.transport_callers import first_voiced, split_at_speech_end, voiced
from voxpipe.bench.transports import aggregate, render_markdown, turns_of

RATE = 16000


def pcm(amplitude: float, ms: int = 20) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (amplitude * 32767 * np.sin(2 * np.pi * 220 * t)).astype("<i2").tobytes()


def row(
    transport: str,
    client: float | None,
    server: float | None,
    status: str = "completed",
    call: int = 0,
) -> dict[str, object]:
    return {
        "transport": transport,
        "call": call,
        "client_v2v_ms": client,
        "server_v2v_ms": server,
        "status": status,
    }


def test_voiced_is_any_loud_window() -> None:
    assert not voiced(b"", RATE)
    assert not voiced(pcm(0.0, 100), RATE)
    assert not voiced(pcm(0.005, 100), RATE)  # about -49 dBFS RMS: a quiet line
    assert voiced(pcm(0.0, 80) + pcm(0.3, 20), RATE)
    assert voiced(pcm(0.3, 5), RATE), "a chunk shorter than a window counts whole"


def test_first_voiced_skips_early_and_silent_chunks() -> None:
    chunks = [(100, pcm(0.3)), (200, pcm(0.0)), (300, pcm(0.0)), (400, pcm(0.3)), (500, pcm(0.3))]
    assert first_voiced(chunks, RATE, after_ns=150) == 400
    assert first_voiced(chunks, RATE, after_ns=0) == 100
    assert first_voiced(chunks, RATE, after_ns=501) is None
    assert first_voiced(chunks[1:3], RATE, after_ns=0) is None


def test_split_at_speech_end_cuts_on_a_frame_after_the_last_loud_sample() -> None:
    frame = RATE // 50
    loud = 0.3 * np.sin(np.arange(frame * 10 + 7) / 3.0)
    audio = np.concatenate([loud, np.zeros(frame * 15)]).astype(np.float32)
    speech, rest = split_at_speech_end(audio, RATE)
    assert speech.shape[0] % frame == 0
    assert speech.shape[0] >= loud.shape[0] and speech.shape[0] - loud.shape[0] < frame
    assert np.array_equal(np.concatenate([speech, rest]), audio)


def test_turns_of_keeps_the_sessions_turns_in_order() -> None:
    lines = [
        {"session_id": "b", "turn_id": 1, "voice_to_voice_ms": 1.0},
        {"session_id": "a", "turn_id": 2, "voice_to_voice_ms": 2.0},
        {"session_id": "a", "turn_id": 0},
        {"session_id": "a", "turn_id": 1, "voice_to_voice_ms": 3.0},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n\n"
    assert [t["turn_id"] for t in turns_of(text, "a")] == [1, 2]
    assert turns_of("", "a") == []


def test_aggregate_compares_each_transport_with_native_and_its_server() -> None:
    rows = [
        *(row("native", c, c - 20) for c in (800.0, 900.0, 1000.0)),
        *(row("twilio", c, c - 100) for c in (1000.0, 1200.0, 1400.0)),
        row("twilio", None, 700.0),  # no voiced reply heard: not counted
        row("twilio", 5000.0, 900.0, status="interrupted"),  # not counted
        row("webrtc", 1100.0, None),  # no server timing: not counted
    ]
    failures = [{"transport": "webrtc", "call": 1, "error": "TimeoutError()"}]
    summary = aggregate(rows, failures, ["native", "twilio", "webrtc"])

    native, twilio, webrtc = summary["native"], summary["twilio"], summary["webrtc"]
    assert list(summary) == ["native", "twilio", "webrtc"]
    assert (native["turns"], native["counted"]) == (3, 3)
    assert native["client_v2v_ms"]["p50"] == 900.0
    assert native["server_v2v_ms"]["p50"] == 880.0
    assert native["overhead_ms"]["p50"] == 20.0
    assert native["vs_native"]["p50"] == 1.0

    assert (twilio["turns"], twilio["counted"]) == (5, 3)
    assert twilio["client_v2v_ms"]["p50"] == 1200.0 and twilio["client_v2v_ms"]["max"] == 1400.0
    assert twilio["overhead_ms"]["p50"] == 100.0 and twilio["overhead_ms"]["max"] == 100.0
    assert twilio["vs_native"]["p50"] == round(1200 / 900, 2)
    assert twilio["vs_native"]["max"] == 1.4

    assert (webrtc["counted"], webrtc["failed_calls"]) == (0, 1)
    assert webrtc["client_v2v_ms"] == {"n": 0}
    assert webrtc["vs_native"]["p50"] is None

    table = render_markdown(summary, "header")
    assert table.startswith("header\n")
    assert "| twilio | 3/5 | 1200 |" in table
    assert "| 1.33× |" in table
    assert "| webrtc | 0/1 (1 calls failed) | – |" in table


def test_aggregate_without_native_has_no_ratio() -> None:
    summary = aggregate([row("twilio", 1000.0, 900.0)])
    assert list(summary) == ["twilio"]
    assert summary["twilio"]["vs_native"] == {"p50": None, "p95": None, "p99": None, "max": None}
