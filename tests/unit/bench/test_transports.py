"""``python -m bench transports``'s pure parts: voiced-audio detection, turn-log parsing, the
aggregate."""

from __future__ import annotations

import json

import numpy as np

from bench.transport_callers import cut_at_marks, first_voiced, frames_through, voiced
from bench.transports import aggregate, render_markdown, turns_of, vad_speech_end_s
from voxpipe.config import TurnConfig

RATE = 16000


def pcm(amplitude: float, ms: int = 20) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (amplitude * 32767 * np.sin(2 * np.pi * 220 * t)).astype("<i2").tobytes()


def row(
    transport: str,
    client: float | None,
    server: float | None,
    status: str = "completed",
    vad_gap: float | None = 150.0,
) -> dict[str, object]:
    """A turn whose VAD heard the end of speech ``vad_gap`` ms before the last loud sample."""
    return {
        "transport": transport,
        "call": 0,
        "client_v2v_ms": client,
        "client_v2v_from_vad_end_ms": (
            None if client is None or vad_gap is None else client + vad_gap
        ),
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


def test_cut_at_marks_ends_each_piece_on_the_frame_holding_its_mark() -> None:
    frame = RATE // 50
    audio = np.arange(frame * 10, dtype=np.float32)
    assert frames_through(0.0, RATE, frame) == 1
    assert frames_through(0.02, RATE, frame) == 1
    assert frames_through(0.0201, RATE, frame) == 2
    pieces = cut_at_marks(audio, RATE, [0.05, 0.05, 0.13, 9.0], frame)
    assert [p.shape[0] // frame for p in pieces] == [3, 0, 4, 3, 0]
    assert np.array_equal(np.concatenate(pieces), audio)


def test_vad_speech_end_is_where_the_turn_detector_ends_speech() -> None:
    """A fake VAD: speech exactly where the clip is loud; the detector's end is its end."""
    window, turn = 512, TurnConfig()

    def probabilities(audio: np.ndarray) -> list[float]:
        n = audio.shape[0] // window
        windows = audio[: n * window].reshape(n, window)
        return [1.0 if p > 0.1 else 0.0 for p in np.abs(windows).max(axis=1)]

    clip = np.concatenate([np.full(window * 20, 0.5), np.zeros(window * 10)]).astype(np.float32)
    assert vad_speech_end_s(probabilities, clip, turn, window) == window * 20 / 16000
    # Off the window grid, the window holding the clip's last loud sample ends the speech.
    end = vad_speech_end_s(probabilities, clip, turn, window, offset=64)
    assert end == (window * 21 - 64) / 16000
    assert vad_speech_end_s(probabilities, np.zeros(16000, np.float32), turn, window) is None


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
        *(row("native", c, c + 130) for c in (800.0, 900.0, 1000.0)),  # overhead 20
        *(row("twilio", c, c + 50) for c in (1000.0, 1200.0, 1400.0)),  # overhead 100
        row("twilio", 900.0, 800.0, vad_gap=None),  # no VAD end: no overhead, v2v counted
        # a filler went out at 600 ms: the client heard it, the overhead is taken against it
        {
            **row("native", 700.0, 2000.0, vad_gap=0.0),
            "server_first_audio_ms": 600.0,
            "filler": "One moment.",
        },
        row("twilio", None, 700.0),  # no voiced reply heard: not counted
        row("twilio", 5000.0, 900.0, status="interrupted"),  # not counted
        row("webrtc", 1100.0, None),  # no server timing: not counted
    ]
    failures = [{"transport": "webrtc", "call": 1, "error": "TimeoutError()"}]
    summary = aggregate(rows, failures, ["native", "twilio", "webrtc"])

    native, twilio, webrtc = summary["native"], summary["twilio"], summary["webrtc"]
    assert list(summary) == ["native", "twilio", "webrtc"]
    assert (native["turns"], native["counted"], native["fillers"]) == (4, 4, 1)
    assert native["client_v2v_ms"]["p50"] == 850.0
    assert native["server_v2v_ms"]["max"] == 2000.0
    assert native["overhead_ms"]["p50"] == 20.0 and native["overhead_ms"]["max"] == 100.0
    assert native["vs_native"]["p50"] == 1.0

    assert (twilio["turns"], twilio["counted"]) == (6, 4)
    assert twilio["client_v2v_ms"]["p50"] == 1100.0 and twilio["client_v2v_ms"]["max"] == 1400.0
    assert twilio["overhead_ms"] == {**twilio["overhead_ms"], "n": 3, "p50": 100.0, "max": 100.0}
    assert twilio["vs_native"]["p50"] == round(1100 / 850, 2)
    assert twilio["vs_native"]["max"] == 1.4

    assert (webrtc["counted"], webrtc["failed_calls"]) == (0, 1)
    assert webrtc["client_v2v_ms"] == {"n": 0}
    assert webrtc["vs_native"]["p50"] is None

    table = render_markdown(summary, "header")
    assert table.startswith("header\n")
    assert "| twilio | 4/6 | 0 | 1100 |" in table
    assert "| 1.29× |" in table
    assert "| webrtc | 0/1 (1 calls failed) | 0 | – |" in table


def test_aggregate_without_native_has_no_ratio() -> None:
    summary = aggregate([row("twilio", 1000.0, 900.0)])
    assert list(summary) == ["twilio"]
    assert summary["twilio"]["vs_native"] == {"p50": None, "p95": None, "p99": None, "max": None}
