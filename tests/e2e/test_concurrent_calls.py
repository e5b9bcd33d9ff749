"""Three callers at once on one server, with the real models.

Each call's transcript is its own caller's sentence and its reply is its own; the LLM
batched their replies (the server's batch metric saw more than one sequence in a step).
One caller barges in: only that call's reply stops, the other two complete.
"""

from __future__ import annotations

import asyncio

import jiwer
import pytest

from tests.support import RunningServer, librivox_clips, metrics_text
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient, TurnResult

pytestmark = pytest.mark.e2e

STORYTELLER = (
    "You are a storyteller on a phone call. Whatever the caller says, answer with a long story "
    "of at least six full sentences."
)
BRIEF = "You are a voice assistant. Answer every message with one short sentence."


def _norm(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower().replace("-", " ")).strip()


async def _answered(client: NativeClient, clip_path: object) -> TurnResult:
    audio, rate = read_wav(clip_path)  # type: ignore[arg-type]
    return await client.speak(audio, rate, timeout_s=120)


async def _barged_in(client: NativeClient, ask: object, interrupt: object) -> list[TurnResult]:
    client.say(*read_wav(ask))  # type: ignore[arg-type]
    first = await client.wait_for(lambda: client.turns.get(1), 120)
    await client.wait_for(lambda: any(e["type"] == "response.text.delta" for e in first.events),
                          120)  # fmt: skip
    await asyncio.sleep(1.5)
    client.say(*read_wav(interrupt))  # type: ignore[arg-type]
    await client.wait_for(lambda: first.complete.is_set(), 60)
    second = await client.wait_for(
        lambda: client.turns.get(2) if 2 in client.turns and client.turns[2].complete.is_set()
        else None,
        120,
    )  # fmt: skip
    return [first, second]


async def test_three_calls_at_once_are_answered_each_on_its_own(server: RunningServer) -> None:
    clips = librivox_clips()
    before = await metrics_text(server)
    async with (
        NativeClient(server.ws) as storyteller,
        NativeClient(server.ws) as one,
        NativeClient(server.ws) as two,
    ):
        await asyncio.gather(
            storyteller.connect(instructions=STORYTELLER),
            one.connect(instructions=BRIEF),
            two.connect(instructions=BRIEF),
        )
        barged, first, second = await asyncio.gather(
            _barged_in(storyteller, clips[1].path, clips[4].path),
            _answered(one, clips[2].path),
            _answered(two, clips[3].path),
        )
    after = await metrics_text(server)

    interrupted, answered_after = barged
    assert interrupted.status == "interrupted", "the barge-in stopped the storyteller's reply"
    assert answered_after.status == "completed" and answered_after.reply.strip()
    for turn, clip in ((first, clips[2]), (second, clips[3]), (answered_after, clips[4])):
        wer = jiwer.wer(_norm(clip.text), _norm(turn.transcript))
        assert wer <= 0.3, f"WER {wer:.2f}: heard {turn.transcript!r} for {clip.text!r}"
    for turn in (first, second):
        assert turn.status == "completed", "a barge-in on another call stopped this one"
        assert turn.reply.strip()
    assert not storyteller.errors and not one.errors and not two.errors
    # the replies shared decode steps: some step held two sequences or more
    assert _steps_with_more_than_one(after) > _steps_with_more_than_one(before)


def _steps_with_more_than_one(metrics: str) -> float:
    total = one = 0.0
    for line in metrics.splitlines():
        if line.startswith("voxpipe_llm_batch_sequences_count"):
            total = float(line.split()[-1])
        if line.startswith('voxpipe_llm_batch_sequences_bucket{le="1.0"}'):
            one = float(line.split()[-1])
    return total - one
