"""An OpenAI Realtime client that appends real speech as fast as it can, on the real models.

With server VAD, voxpipe takes such a client at the VAD's pace (it stops reading, and TCP
slows the sender): every word arrives and every turn is answered. Where audio is dropped
even so (here forced: backpressure off and the smallest bound), the client is told with
``input_audio_dropped`` errors whose ``dropped_ms`` add up to the server's counter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jiwer
import pytest

from tests.e2e.test_openai_realtime import BRIEF, _assert_spoken, _speech, realtime
from tests.realtime_client import RATE, Listener, silence
from tests.support import (
    RunningServer,
    librivox_clips,
    metric_value,
    metrics_text,
    start_server,
    stop_server,
    wait_ready,
)

pytestmark = pytest.mark.e2e

TURN_TIMEOUT_S = 180.0
DROPPED = (
    'voxpipe_audio_dropped_seconds_total{direction="inbound",policy="drop_oldest",'
    'transport="realtime"}'
)


def _session(silence_ms: int) -> dict[str, Any]:
    vad = {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": silence_ms,
        "create_response": True,
        # The next turn arrives long before this one's reply is heard: answer each in turn.
        "interrupt_response": False,
    }
    return {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "instructions": BRIEF,
            "audio": {"input": {"turn_detection": vad}},
        },
    }


async def _dropped_ms(server: RunningServer) -> float:
    return (metric_value(await metrics_text(server), DROPPED) or 0.0) * 1000


def _told(rt: Listener, since: int = 0) -> list[dict[str, Any]]:
    return [
        e["error"] for e in rt.of("error", since) if e["error"]["code"] == "input_audio_dropped"
    ]


def _settled(rt: Listener, turns: int) -> bool:
    """Every committed turn answered, and all turns committed, or the client told of drops."""
    committed = len(rt.of("input_audio_buffer.committed"))
    answered = len(rt.of("response.done")) >= committed > 0
    return answered and (committed >= turns or bool(_told(rt)))


def _norm(text: str) -> str:
    return str(jiwer.RemovePunctuation()(text.lower().replace("-", " "))).strip()


async def _agree(rt: Listener, server: RunningServer, before_ms: float) -> float:
    """The server's counter (since ``before_ms``) once the client has been told all of it."""
    async with asyncio.timeout(10):
        while True:
            counted = await _dropped_ms(server) - before_ms
            told = sum(e["dropped_ms"] for e in _told(rt))
            if abs(told - counted) <= 0.1 * len(_told(rt)) + 1e-6:
                return counted
            await asyncio.sleep(0.2)


async def test_a_fast_sender_loses_nothing_and_every_turn_is_answered(
    server: RunningServer,
) -> None:
    clips = librivox_clips()
    spoken = [*clips, clips[1]]  # six turns of real speech, each ended by silence
    pcm = b"".join(_speech(clip) + silence(1.5) for clip in spoken)
    audio_s = len(pcm) / 2 / RATE
    before = await _dropped_ms(server)
    async with realtime(server) as rt:
        await rt.send(_session(800))
        await rt.next("session.updated")
        started = time.monotonic()
        await rt.stream(pcm, chunk_ms=100, real_time=False)  # as fast as it is let
        sent_s = time.monotonic() - started
        await rt.wait_for(lambda: _settled(rt, len(spoken)), TURN_TIMEOUT_S)
        committed = rt.of("input_audio_buffer.committed")
        ids = [c["item_id"] for c in committed]
        await rt.wait_for(
            lambda: len(rt.of("conversation.item.input_audio_transcription.completed")) >= len(ids),
            TURN_TIMEOUT_S,
        )
        dropped = await _agree(rt, server, before)
    transcripts = {
        e["item_id"]: e["transcript"]
        for e in rt.of("conversation.item.input_audio_transcription.completed")
    }
    heard = " ".join(transcripts[i] for i in ids)
    said = " ".join(clip.text for clip in spoken)
    wer = float(jiwer.wer(_norm(said), _norm(heard)))
    print(
        f"fast sender: {audio_s:.1f} s of speech sent in {sent_s:.1f} s, {len(ids)} turns, "
        f"{len(rt.of('response.done'))} answers, {dropped:.0f} ms dropped, WER {wer:.2f}"
    )
    assert sent_s < audio_s * 0.8, "the client sent faster than real time"
    if dropped == 0:  # backpressure: nothing lost, and every turn answered
        assert not _told(rt), _told(rt)
        assert len(ids) >= len(spoken)
        assert wer <= 0.35, (heard, said)
        for done in rt.of("response.done"):
            _assert_spoken(rt, done["response"])
    else:  # the VAD fell behind for longer than the wait: told, and to the millisecond
        assert _told(rt), "audio was dropped and the client was not told"


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server that never holds a sender back, with the smallest inbound bound (100 ms)."""
    running = start_server(
        Path(tmp_path_factory.mktemp("no-backpressure")),
        env={"VOXPIPE_LIMITS__INBOUND_WAIT_MS": "0", "VOXPIPE_LIMITS__INBOUND_BUFFER_MS": "100"},
    )
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)


async def test_audio_dropped_anyway_is_told_and_agrees_with_the_counter(
    overloaded: RunningServer,
) -> None:
    clips = librivox_clips()
    pcm = b"".join(_speech(clip) + silence(1.0) for clip in clips)
    before = await _dropped_ms(overloaded)
    async with realtime(overloaded) as rt:
        session_id = rt.of("session.created")[0]["session"]["id"]
        await rt.send(_session(500))
        await rt.next("session.updated")
        await rt.stream(pcm, chunk_ms=1000, real_time=False)
        first = await rt.next("error", timeout_s=30)
        dropped = await _agree(rt, overloaded, before)
    told = _told(rt)
    print(
        f"no backpressure: {len(pcm) / 2 / RATE:.1f} s sent, {dropped:.0f} ms dropped, told {told}"
    )
    assert first["error"]["code"] == "input_audio_dropped", first
    assert first["error"]["type"] == "server_error"
    assert dropped > 0 and told
    assert abs(told[-1]["total_dropped_ms"] - dropped) <= 0.1
    assert len(told) < 10, "told once a second at most, not once per append"
    log = overloaded.log_path.read_text()
    episodes = [line for line in log.splitlines() if session_id in line and "dropped" in line]
    assert len(episodes) == 1, episodes  # one WARNING line for the one episode
    assert " WARNING " in episodes[0], episodes
