"""Natural turn-taking with the real models: barge-in, backchannels, pauses, long calls."""

from __future__ import annotations

import asyncio
import time

import jiwer
import numpy as np
import pytest

from tests.support import (
    BRIEF,
    CARDS,
    STORYTELLER,
    RunningServer,
    history_of,
    librivox_clips,
    normalised,
)
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import (
    NativeClient,
    TurnResult,
    speech_end_sample,
    speech_start_sample,
)

pytestmark = pytest.mark.e2e


def _trimmed(path: object) -> np.ndarray:
    audio, rate = read_wav(path)  # type: ignore[arg-type]
    assert rate == 16000
    return audio[speech_start_sample(audio, rate) : speech_end_sample(audio, rate)]


def _answer_began(turn: TurnResult) -> bool:
    return any(e["type"] == "response.text.delta" for e in turn.events)


async def test_barge_in_stops_the_reply_and_keeps_what_was_heard(server: RunningServer) -> None:
    clips = librivox_clips()
    ask, interrupt = read_wav(clips[1].path), read_wav(clips[4].path)
    async with NativeClient(server.ws) as client:
        await client.connect(instructions=STORYTELLER)
        client.say(*ask)
        first = await client.wait_for(lambda: client.turns.get(1), 60)
        await client.wait_for(lambda: first.first_audio_ns, 60)
        # The first audio may be the filler (a slow machine): the answer's words are heard
        # only once its text has begun; then let the caller hear a sentence or so.
        await client.wait_for(lambda: _answer_began(first), 60)
        await asyncio.sleep(2.0)
        interrupted_at = time.monotonic_ns()
        client.say(*interrupt)
        await client.wait_for(lambda: first.complete.is_set(), 30)
        second = await client.wait_for(lambda: client.completed_turn(2), 60)
        history = await history_of(client)

    assert first.status == "interrupted"
    clear = [e for e in first.events if e["type"] == "playback.clear"]
    assert len(clear) == 1, "exactly one flush event"
    assert client.audio_after_clear == [], "audio of the interrupted reply arrived after the flush"
    assert max(first.seqs) <= clear[0]["last_seq"]
    heard, generated = first.done["text"].split(), first.done["generated_text"].split()
    assert 0 < len(heard) < len(generated), (heard, generated)
    assert generated[: len(heard)] == heard, "the heard text is a prefix of what was generated"
    sent_ms = first.done["audio_ms"]
    assert 0 < first.done["heard_ms"] <= sent_ms
    # The server stopped sending well before the reply was over (it was paced, not dumped).
    listened_ms = (interrupted_at - first.first_audio_ns) / 1e6
    assert sent_ms < listened_ms + 3000
    barge = first.metrics["barge_in"]
    assert {"pause_ms", "decide_ms", "stop_ms", "cancel_ms"} <= barge.keys()
    assert barge["decide_ms"] is not None and barge["cancel_ms"] is not None

    messages = history["messages"]
    assert isinstance(messages, list)
    assert messages[0]["role"] == "user" and messages[1] == {
        "role": "assistant",
        "content": first.done["text"],
    }, "the history keeps only what the caller heard"

    assert second.status == "completed" and second.reply.strip()
    assert jiwer.wer(normalised(clips[4].text), normalised(second.transcript)) <= 0.25
    llm1, llm2 = first.metrics["llm"], second.metrics["llm"]
    # The KV cache was rolled back to the heard text, not rebuilt.
    assert llm2["reused_tokens"] >= llm1["prompt_tokens"]
    assert llm2["prefill_tokens"] * 2 < llm2["prompt_tokens"]


async def test_a_short_burst_during_the_reply_does_not_interrupt(server: RunningServer) -> None:
    clips = librivox_clips()
    # 150 ms of a word: Silero hears it as speech (~190 ms of windows) at any alignment.
    burst_audio, _ = read_wav(clips[3].path)
    burst = burst_audio[56000 : 56000 + 2400]
    async with NativeClient(server.ws) as client:
        await client.connect(instructions=STORYTELLER)
        client.say(*read_wav(clips[1].path))
        first = await client.wait_for(lambda: client.turns.get(1), 60)
        await client.wait_for(lambda: first.first_audio_ns, 60)
        await asyncio.sleep(1.0)
        heard_before = len(client.events)
        client.say(burst, 16000)
        await client.wait_for(lambda: first.complete.is_set(), 90)
        await asyncio.sleep(1.0)  # time for a wrongly detected turn to show up
    during = [e["type"] for e in client.events[heard_before:]]
    assert "vad.speech_started" in during, "the burst must be heard as speech to test anything"
    assert first.status == "completed"
    assert not [e for e in client.events if e["type"] == "playback.clear"]
    assert list(client.turns) == [1], "the burst became a turn"
    assert first.metrics["session_counts"].get("backchannels") == 1


async def test_a_pause_mid_sentence_is_one_turn(server: RunningServer) -> None:
    pause = np.zeros(int(0.3 * 16000), dtype=np.float32)
    words = np.concatenate([_trimmed(CARDS / "001.wav"), pause, _trimmed(CARDS / "003.wav")])
    async with NativeClient(server.ws) as client:
        await client.connect(instructions=BRIEF)
        turn = await client.speak(words, 16000)
        await asyncio.sleep(0.5)
    assert list(client.turns) == [1], f"split into turns: {client.turns}"
    text = normalised(turn.transcript)
    assert ("ten" in text or "10" in text) and ("seven" in text or "7" in text), text
    assert turn.status == "completed"
    counts = turn.metrics["session_counts"]
    assert counts.get("preempt_wasted", 0) >= 1, "the pause should have started preemptive work"


async def test_twenty_turns_prefill_only_the_new_tokens(server: RunningServer) -> None:
    clips = [c.path for c in librivox_clips()] + sorted(CARDS.glob("00*.wav"))
    turns = []
    async with NativeClient(server.ws) as client:
        await client.connect(instructions=BRIEF, turn={"silence_ms": 400})
        for i in range(20):
            turns.append(await client.speak(*read_wav(clips[i % len(clips)])))
    assert [t.status for t in turns] == ["completed"] * 20
    llm = [t.metrics["llm"] for t in turns]
    assert llm[19]["prompt_tokens"] > 10 * llm[0]["prompt_tokens"] // 4
    # Turn 20 evaluates only its own message: everything before came from the KV cache.
    assert llm[19]["reused_tokens"] >= llm[18]["prompt_tokens"]
    assert llm[19]["prefill_tokens"] * 8 < llm[19]["prompt_tokens"]
