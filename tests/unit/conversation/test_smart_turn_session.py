"""The session with ``end_of_turn: smart_turn``: it asks the turn model once the caller
falls silent, waits for the verdict, and ends the turn after the silence the verdict picks.
(The model here is a stand-in; the real one: tests/e2e/test_smart_turn.py.)"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.unit.conversation.harness import Call, silence, speech
from voxpipe.conversation.events import SpeechStopped, TurnMetrics

SMART = {
    "end_of_turn": "smart_turn",
    "smart_turn_complete_ms": 192,  # 6 windows
    "smart_turn_max_silence_ms": 1280,  # 40 windows
    "preempt_ms": None,
}


class ScriptedTurnModel:
    """Says ``probability`` of every turn, and keeps the audio it was asked about."""

    name = "scripted-turn"

    def __init__(self, probability: float) -> None:
        self.probability = probability
        self.heard: list[int] = []

    def probability_complete(self, audio: np.ndarray) -> float:
        self.heard.append(audio.shape[0])
        return self.probability

    def warmup(self) -> None:
        pass


async def test_a_complete_turn_ends_after_the_short_silence(
    make_call: Callable[..., Call],
) -> None:
    model = ScriptedTurnModel(0.9)
    call = make_call(turn=SMART, turn_model=model)
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    # asked once, after 2 silent windows, about the speech and those 2 windows
    assert model.heard == [14 * 512]
    await call.idle()
    metrics = call.of(TurnMetrics)[0]
    assert [c["p"] for c in metrics.metrics["turn_model"]] == [0.9]


async def test_an_unfinished_turn_waits_for_the_longest_silence(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.1))
    await call.push(speech(12))
    await call.push(silence(39))
    assert call.of(SpeechStopped) == [], "the 500 ms silence_ms no longer ends the turn"
    await call.push(silence(1))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]


async def test_the_caller_going_on_after_the_pause_is_one_turn(
    make_call: Callable[..., Call],
) -> None:
    model = ScriptedTurnModel(0.1)
    call = make_call(turn=SMART, turn_model=model)
    await call.push(speech(12))
    await call.push(silence(30))  # a 0.96 s pause mid-sentence
    await call.push(speech(12))
    model.probability = 0.9
    await call.push(silence(8))
    assert call.of(SpeechStopped) == [SpeechStopped((12 + 30 + 12) * 32.0, 1)]
    assert len(model.heard) == 2
