"""A client-executed tool over ``/v1/realtime`` with the official ``openai`` SDK, on the
real models: the client declares ``book_table``, speaks (Piper's voice) "book a table for
two at seven tonight under the name Smith", receives the model's function call through the
SDK, runs it itself, sends the ``function_call_output`` and ``response.create``, and hears
the spoken answer."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI
from openai.types.realtime import ResponseFunctionCallArgumentsDoneEvent

from tests.realtime_client import RATE, Listener, pcm24k, silence, voiced_seconds
from tests.support import RunningServer, assert_spoken
from voxpipe.audio.pcm import pcm16_to_float
from voxpipe.engines.base import CancelToken
from voxpipe.engines.piper_tts import PiperTts

pytestmark = pytest.mark.e2e

TURN_TIMEOUT_S = 90.0
REQUEST = "Hello. Please book a table for two at seven tonight under the name Smith."
INSTRUCTIONS = (
    "You are the phone assistant of the restaurant Chez Voxpipe. Today is 2025-06-13. "
    "Book tables with the book_table tool. Times are 24-hour: seven tonight is 19:00. "
    "Answer in one short sentence."
)
SLOTS = [f"{h:02d}:{m:02d}" for h in (12, 13, 18, 19, 20, 21) for m in (0, 30)]
BOOK_TABLE = {
    "type": "function",
    "name": "book_table",
    "description": "Book a table at the restaurant.",
    "parameters": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the name the booking is under"},
            "party_size": {"type": "integer", "description": "how many people"},
            "time": {"type": "string", "enum": SLOTS, "description": "HH:MM, 24-hour"},
        },
        "required": ["name", "party_size", "time"],
    },
}
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500, "create_response": True}


def _spoken(text: str) -> bytes:
    """``text`` in Piper's voice, PCM16 at 24 kHz, the same audio each run (no random noise)."""
    tts = PiperTts(noise_scale=0.0, noise_w_scale=0.0)
    pcm = np.concatenate(list(tts.synthesize(text, CancelToken())))
    return pcm24k(pcm.astype(np.float32) / 32768.0, tts.sample_rate)


@contextlib.asynccontextmanager
async def realtime(server: RunningServer) -> AsyncIterator[Listener]:
    client = AsyncOpenAI(api_key="test", websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as connection:
        listener = Listener(connection)
        try:
            await listener.next("session.created", timeout_s=30)
            yield listener
        finally:
            await listener.close()


def _done(rt: Listener, since: int) -> dict[str, Any] | None:
    found = rt.of("response.done", since)
    return dict(found[0]["response"]) if found else None


async def test_the_sdk_runs_book_table_and_hears_the_answer(server: RunningServer) -> None:
    speech = _spoken(REQUEST)
    async with realtime(server) as rt:
        await rt.connection.session.update(
            session={
                "type": "realtime",
                "instructions": INSTRUCTIONS,
                "tools": [BOOK_TABLE],
                "tool_choice": "auto",
                "audio": {"input": {"turn_detection": SERVER_VAD}},
            }
        )
        updated = (await rt.next("session.updated"))["session"]
        assert updated["tools"] == [BOOK_TABLE] and updated["tool_choice"] == "auto"

        before = len(rt.events)
        await rt.stream(speech + silence(1.5))
        first = await rt.wait_for(lambda: _done(rt, before), TURN_TIMEOUT_S)
        assert first["status"] == "completed", first
        calls = [o for o in first["output"] if o["type"] == "function_call"]
        transcript = rt.of("conversation.item.input_audio_transcription.completed", before)
        assert len(calls) == 1, (first["output"], transcript)
        [call] = calls
        assert call["name"] == "book_table", call
        arguments = json.loads(call["arguments"])
        assert "smith" in str(arguments.get("name", "")).lower(), arguments
        assert arguments.get("party_size") == 2, arguments
        parsed = [
            e
            for e in rt.parsed
            if isinstance(e, ResponseFunctionCallArgumentsDoneEvent)
            and e.call_id == call["call_id"]
        ]
        assert parsed and json.loads(parsed[0].arguments) == arguments, "the SDK got the call"

        booking = {"booked": True, "name": "Smith", "party_size": 2, "time": "19:00", "table": 4}
        since = len(rt.events)
        await rt.connection.conversation.item.create(
            item={
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": json.dumps(booking),
            }
        )
        item = (await rt.next("conversation.item.added", since))["item"]
        assert (item["type"], item["call_id"]) == ("function_call_output", call["call_id"])
        await rt.connection.response.create()
        answer = await rt.wait_for(lambda: _done(rt, since), TURN_TIMEOUT_S)

    assert answer["status"] == "completed", answer
    messages = [o for o in answer["output"] if o["type"] == "message"]
    assert messages and messages[0]["content"][0]["transcript"].strip(), answer["output"]
    assert_spoken(messages[0]["content"][0]["transcript"])
    audio = rt.audio(answer["id"])
    samples = pcm16_to_float(audio)
    assert samples.shape[0] / RATE > 0.3 and voiced_seconds(audio) > 0.3, "no spoken answer"
    assert np.sqrt(np.mean(samples**2)) > 0.01, "the answer's audio is silent"
