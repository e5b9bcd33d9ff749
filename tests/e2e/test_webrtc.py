"""A spoken turn over WebRTC with the real models: an aiortc caller on loopback speaks a
real recording through Opus, hears the reply on its track, reads the events on the data
channel, and hangs up; the call's slot is released."""

from __future__ import annotations

import asyncio
import re

import httpx
import jiwer
import numpy as np
import pytest

from tests.support import RunningServer, librivox_clips
from voxpipe.audio.pcm import pcm16_to_float, read_wav
from voxpipe.clients.webrtc_client import RATE, WebRTCClient

pytestmark = pytest.mark.e2e

TURN_TIMEOUT_S = 180.0  # real models on two shared cores


def _normalise(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower().replace("-", " ")).strip()


def voiced_seconds(pcm: bytes, since_sample: int = 0) -> float:
    """Seconds of 20 ms windows with speech-like energy (RMS over 0.01)."""
    audio = pcm16_to_float(pcm)[since_sample:]
    n = audio.shape[0] // 960
    if n == 0:
        return 0.0
    rms = np.sqrt(np.mean(audio[: n * 960].reshape(n, 960) ** 2, axis=1))
    return float((rms > 0.01).sum()) * 0.02


async def connected_calls(http: httpx.AsyncClient) -> float:
    text = (await http.get("/metrics")).text
    found = re.search(r'^voxpipe_calls\{state="connected"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0  # no sample before the first call


async def test_spoken_turn_over_webrtc_and_hang_up(server: RunningServer) -> None:
    clip = librivox_clips()[1]  # "he was not an ill disposed young man"
    audio, rate = read_wav(clip.path)
    async with httpx.AsyncClient(base_url=server.http, timeout=10) as http:
        before = await connected_calls(http)
        async with WebRTCClient(server.http) as client:
            started = await client.connect(60)
            assert started["output_sample_rate"] == RATE
            assert await connected_calls(http) == before + 1
            silence_until = len(client.audio) // 2  # the track so far: silence between replies
            assert voiced_seconds(bytes(client.audio)) == 0.0

            client.line.say(audio, rate)
            done = await client.wait_for(lambda: client.event("response.done"), TURN_TIMEOUT_S)
            transcript = client.event("transcript")
            assert transcript is not None
            wer = jiwer.wer(_normalise(clip.text), _normalise(transcript["text"]))
            assert wer <= 0.35, f"WER {wer:.2f}: heard {transcript['text']!r} for {clip.text!r}"
            assert done["status"] == "completed", done
            assert done["text"].strip()
            assert client.event("response.text.delta") is not None
            # The reply plays on the track in real time, so its end comes after response.done.
            await client.wait_for(
                lambda: voiced_seconds(bytes(client.audio), silence_until) > 0.3 or None, 30
            )
            metrics = await client.wait_for(lambda: client.event("turn.metrics"), 30)
            assert metrics["turn_id"] == done["turn_id"] == transcript["turn_id"]
            assert not [e for e in client.events if e["type"] == "error"]
        # The client closed its peer connection: the server sees DTLS close and hangs up.
        async with asyncio.timeout(20):
            while True:
                if await connected_calls(http) == before:
                    break
                await asyncio.sleep(0.1)
        assert (await http.get("/readyz")).json()["status"] == "ready"
