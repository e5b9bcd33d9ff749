"""A real spoken conversation with the real server and the real models."""

from __future__ import annotations

import json

import httpx
import jiwer
import numpy as np
import pytest

from bench.stt import normalize
from tests.support import ALSA, RunningServer, librivox_clips, order_violations
from voxpipe.audio.pcm import pcm16_to_float, read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.observability.timeline import OPTIONAL_STAGES, STAGES

pytestmark = pytest.mark.e2e


def _normalise(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower().replace("-", " ")).strip()


def _assert_reply_audio(audio: bytearray, rate: int) -> None:
    assert len(audio) % 2 == 0
    samples = pcm16_to_float(bytes(audio))
    assert samples.shape[0] / rate > 0.3, "reply shorter than 0.3 s"
    assert np.sqrt(np.mean(samples**2)) > 0.01, "reply audio is silent"
    assert np.isfinite(samples).all()


def _assert_timeline(metrics: dict[str, object]) -> None:
    stages = metrics["stages_ms"]
    assert isinstance(stages, dict)
    required = set(stages) - set(OPTIONAL_STAGES)  # a late first token adds filler_sent
    assert required == set(STAGES), f"missing stages: {set(STAGES) - set(stages)}"
    assert order_violations(stages) == [], stages
    if not metrics["preempted"]:  # without preemption every stage follows the one before
        values = [stages[s] for s in STAGES]
        assert values == sorted(values), f"stages out of order: {stages}"


async def test_two_turn_spoken_conversation(server: RunningServer) -> None:
    clips = librivox_clips()
    first, second = (
        clips[1],
        clips[4],
    )  # "he was not an ill disposed young man", "he might even ..."
    async with NativeClient(server.ws) as client:
        started = await client.connect()
        assert started["output_sample_rate"] == 22050
        turns = []
        for clip in (first, second):
            audio, rate = read_wav(clip.path)
            turns.append(await client.speak(audio, rate))
    for clip, turn in zip((first, second), turns, strict=True):
        wer = jiwer.wer(_normalise(clip.text), _normalise(turn.transcript))
        assert wer <= 0.25, f"WER {wer:.2f}: heard {turn.transcript!r} for {clip.text!r}"
        assert turn.status == "completed"
        assert turn.reply.strip()
        _assert_reply_audio(turn.audio, client.output_rate)
        _assert_timeline(turn.metrics)
        assert turn.seqs == sorted(turn.seqs) and len(set(turn.seqs)) == len(turn.seqs)
        kinds = [e["type"] for e in turn.events]
        for kind in ("vad.speech_stopped", "transcript", "response.text.delta", "response.done"):
            assert kind in kinds
    assert turns[1].seqs[0] > turns[0].seqs[-1], "sequence numbers restart between turns"
    llm1, llm2 = turns[0].metrics["llm"], turns[1].metrics["llm"]
    # Turn 2's prompt holds turn 1 whole; only the new user message is evaluated.
    assert llm2["prompt_tokens"] > llm1["prompt_tokens"]
    assert llm2["reused_tokens"] >= llm1["prompt_tokens"]
    assert llm2["prefill_tokens"] * 3 < llm2["prompt_tokens"]
    assert not client.errors

    # The same turns were logged as JSON lines and counted in Prometheus.
    logged = [json.loads(line) for line in server.turn_log.read_text().splitlines()]
    mine = [r for r in logged if r["session_id"] == client.session_id]
    assert [r["turn_id"] for r in mine] == [1, 2]
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{server.http}/metrics")).text
    assert 'voxpipe_turn_stage_seconds_count{stage="first_audio_sent"}' in metrics
    assert "voxpipe_engine_queue_seconds_bucket" in metrics


async def test_48khz_caller_is_resampled_and_understood(server: RunningServer) -> None:
    audio, rate = read_wav(ALSA / "Front_Center.wav")
    assert rate == 48000
    async with NativeClient(server.ws, input_rate=48000) as client:
        await client.connect(output_sample_rate=16000)
        turn = await client.speak(audio, rate)
    assert _normalise(turn.transcript) in ("front center", "front centre"), turn.transcript
    assert client.output_rate == 16000
    _assert_reply_audio(turn.audio, 16000)
    _assert_timeline(turn.metrics)


async def test_partial_transcripts_arrive_before_the_end_of_the_turn(
    server: RunningServer,
) -> None:
    clip = max(librivox_clips(), key=lambda c: c.path.stat().st_size)  # the longest sentence
    audio, rate = read_wav(clip.path)
    assert audio.shape[0] / rate > 3.0
    async with NativeClient(server.ws) as client:
        await client.connect()
        turn = await client.speak(audio, rate)
    kinds = [e["type"] for e in client.events]
    partials = [e for e in client.events if e["type"] == "transcript.partial"]
    assert partials, f"no partial transcript in {kinds}"
    assert kinds.index("transcript.partial") < kinds.index("vad.speech_stopped")
    assert all(p["turn_id"] == turn.turn_id for p in partials)
    # Real words of the sentence, growing as it is spoken ("Mr." is the reference's "mister").
    expected = set(normalize(clip.text))
    first = set(normalize(partials[0]["text"]))
    assert len(first & expected) >= min(2, len(first)), (partials[0], clip.text)
    assert turn.metrics["partials"]["count"] == len(partials)
    assert 0 < turn.metrics["partials"]["first_ms"] < audio.shape[0] / rate * 1000
