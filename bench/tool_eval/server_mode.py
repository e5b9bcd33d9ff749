"""Mode ``--server URL``: each utterance spoken to a live server over the native protocol.

The whole path a caller's words take, the server's own agent included: every utterance is
a call of its own (a fresh session), spoken at real-time pace; the tools called are the
turn's ``tool.started`` events (``name``, ``arguments``) and the reply is its
``response.done`` text. A server that speaks a greeting first is fine: the utterance's turn
is the one with a transcript.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench.tool_eval.dataset import Utterance
from bench.tool_eval.outcome import CalledTool, Outcome, arguments_of
from voxpipe.clients.native_client import NativeClient, TurnResult
from voxpipe.engines.base import STT_SAMPLE_RATE

TURN_TIMEOUT_S = 60.0


def tools_started(turn: TurnResult) -> list[CalledTool]:
    return [
        CalledTool(str(e.get("name", "")), arguments_of(e.get("arguments")))
        for e in turn.events
        if e.get("type") == "tool.started"
    ]


async def ask(url: str, utterance: Utterance, audio: np.ndarray) -> Outcome:
    """Call, say ``audio``, wait for the answer to it, hang up."""
    async with NativeClient(url, input_rate=STT_SAMPLE_RATE) as client:
        await client.connect()
        client.say(audio, STT_SAMPLE_RATE)

        def answered() -> TurnResult | None:
            return next(
                (t for t in client.turns.values() if t.transcript and t.complete.is_set()), None
            )

        turn: TurnResult = await client.wait_for(
            answered, TURN_TIMEOUT_S + audio.shape[0] / STT_SAMPLE_RATE
        )
    return Outcome(utterance.id, turn.transcript, turn.reply.strip(), tools_started(turn))


def run(
    url: str,
    utterances: Sequence[Utterance],
    audio_of: Callable[[Utterance], np.ndarray],
    progress: Callable[[Utterance, Outcome], None] = lambda u, o: None,
) -> list[Outcome]:
    outcomes = []
    for utterance in utterances:
        started = time.monotonic()
        try:
            outcome = asyncio.run(ask(url, utterance, audio_of(utterance)))
        except Exception as exc:  # a refused call or a timeout is this row's error
            outcome = Outcome(utterance.id, error=f"{type(exc).__name__}: {exc}")
        outcome.seconds = time.monotonic() - started
        outcomes.append(outcome)
        progress(utterance, outcome)
    return outcomes
