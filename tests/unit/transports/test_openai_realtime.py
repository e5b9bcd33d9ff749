"""``/v1/realtime`` on fake engines, driven by the official ``openai`` SDK (GA and beta):
event order and shapes, manual turns, items, truncation, G.711, and bad input."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import websockets
from openai import AsyncOpenAI

from tests.realtime_client import RATE, Listener, silence
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from voxpipe.audio.pcm import ulaw_encode
from voxpipe.config import Config
from voxpipe.engines.base import Engines

TIMEOUT_S = 20.0
REPLY = ["Hello", " there", ", nice", " to meet", " you", "."]


def loud(seconds: float) -> bytes:
    """Audio the fake VAD hears as speech, PCM16 at 24 kHz."""
    return np.full(int(seconds * RATE), 16384, dtype="<i2").tobytes()


@contextlib.asynccontextmanager
async def serve(**sections: dict[str, Any]) -> AsyncIterator[int]:
    config = quiet_config(**sections)

    def engines(config: Config) -> Engines:
        return Engines(
            FakeVad(),
            FakeStt("hello there"),
            FakeLlm(REPLY, delay_s=0.01),
            FakeTts(samples_per_clause=8000),
        )

    async with serving(config, engines, TIMEOUT_S) as (port, _):
        yield port


@contextlib.asynccontextmanager
async def connect(port: int, beta: bool = False) -> AsyncIterator[Listener]:
    client = AsyncOpenAI(api_key="test", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    realtime = client.beta.realtime if beta else client.realtime
    async with realtime.connect(model="gpt-realtime") as connection:
        listener = Listener(connection)
        try:
            await listener.next("session.created")
            yield listener
        finally:
            await listener.close()


async def speak(listener: Listener, seconds: float = 0.5) -> None:
    await listener.stream(loud(seconds) + silence(0.6), chunk_ms=100, real_time=False)


def error_of(event: dict[str, Any]) -> dict[str, Any]:
    assert event["type"] == "error" and event["event_id"].startswith("event_"), event
    error = event["error"]
    assert set(error) == {"type", "code", "message", "param", "event_id"}, error
    assert isinstance(error["message"], str) and error["message"]
    return dict(error)


async def test_a_server_vad_turn_in_ga_names() -> None:
    async with serve() as port, connect(port) as rt:
        created = rt.of("session.created")[0]["session"]
        assert created["type"] == "realtime" and created["model"] == "gpt-realtime"
        assert created["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        assert created["audio"]["input"]["turn_detection"]["type"] == "server_vad"
        await speak(rt)
        done = await rt.next("response.done", timeout_s=TIMEOUT_S)
        response = done["response"]
        assert response["status"] == "completed" and response["status_details"] is None
        kinds = [e["type"] for e in rt.events]
        order = [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.input_audio_transcription.completed",
            "response.created",
            "rate_limits.updated",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_audio_transcript.delta",
            "response.output_audio.delta",
            "response.output_audio.done",
            "response.output_audio_transcript.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.done",
        ]
        positions = [kinds.index(k) for k in order]
        assert positions == sorted(positions), kinds
        assert not [k for k in kinds if k.startswith("response.audio")], "beta names on GA"
        user_id = rt.of("input_audio_buffer.committed")[0]["item_id"]
        assert rt.of("input_audio_buffer.speech_started")[0]["item_id"] == user_id
        transcribed = rt.of("conversation.item.input_audio_transcription.completed")[0]
        assert (transcribed["item_id"], transcribed["transcript"]) == (user_id, "hello there")
        [item] = response["output"]
        assert item["role"] == "assistant" and item["status"] == "completed"
        assert item["content"] == [
            {"type": "output_audio", "transcript": "Hello there, nice to meet you."}
        ]
        audio = rt.audio(response["id"])
        assert len(audio) / 2 / RATE > 0.8  # two clauses of 0.5 s
        deltas = rt.of("response.output_audio.delta")
        assert max(len(d["delta"]) for d in deltas) < 64 * 1024, "audio deltas are small"
        parsed = {type(p).__name__ for p in rt.parsed}
        assert {"ResponseAudioDeltaEvent", "ResponseDoneEvent", "ConversationItemAdded"} <= parsed

        await rt.send({"type": "conversation.item.retrieve", "item_id": user_id})
        retrieved = await rt.next("conversation.item.retrieved")
        assert retrieved["item"]["content"] == [
            {"type": "input_audio", "transcript": "hello there"}
        ]


async def test_beta_names_by_header_and_by_a_flat_session_update() -> None:
    async with serve() as port:
        async with connect(port, beta=True) as rt:
            assert "input_audio_format" in rt.of("session.created")[0]["session"]
            await speak(rt)
            await rt.next("response.done", timeout_s=TIMEOUT_S)
            kinds = {e["type"] for e in rt.events}
            assert {"response.audio.delta", "response.audio_transcript.delta"} <= kinds
            assert {"conversation.item.created"} <= kinds
            assert not {"response.output_audio.delta", "conversation.item.added"} & kinds
            done = rt.of("response.done")[0]["response"]
            assert done["output"][0]["content"][0]["type"] == "audio"
        async with connect(port) as rt:  # GA connection, beta-style session.update
            await rt.send(
                {"type": "session.update", "session": {"turn_detection": {"type": "server_vad"}}}
            )
            updated = await rt.next("session.updated")
            assert updated["session"]["input_audio_format"] == "pcm16"
            await speak(rt)
            await rt.next("response.done", timeout_s=TIMEOUT_S)
            assert rt.of("response.audio.delta")


async def test_manual_turns_commit_then_response_create() -> None:
    async with serve() as port, connect(port) as rt:
        await rt.send(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
            }
        )
        updated = await rt.next("session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        await speak(rt)
        await asyncio.sleep(0.3)
        assert not rt.of("input_audio_buffer.speech_started"), "no VAD events in manual mode"
        assert not rt.of("response.created")
        await rt.send({"type": "input_audio_buffer.commit", "event_id": "c1"})
        committed = await rt.next("input_audio_buffer.committed")
        done = await rt.next("conversation.item.input_audio_transcription.completed")
        assert done["item_id"] == committed["item_id"] and done["transcript"] == "hello there"
        await asyncio.sleep(0.2)
        assert not rt.of("response.created"), "a commit alone is not answered"

        await rt.send({"type": "response.create"})
        await rt.send({"type": "response.create", "event_id": "twice"})
        busy = error_of(await rt.next("error"))
        assert busy["code"] == "conversation_already_has_active_response"
        assert busy["event_id"] == "twice"
        response = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        assert response["status"] == "completed"
        assert rt.audio(response["id"])

        # The buffer was committed: a second commit has nothing to commit.
        before = len(rt.events)
        await rt.send({"type": "input_audio_buffer.commit", "event_id": "c2"})
        empty = error_of(await rt.next("error", since=before))
        assert (empty["code"], empty["event_id"]) == ("input_audio_buffer_commit_empty", "c2")
        await rt.send({"type": "input_audio_buffer.clear"})
        await rt.next("input_audio_buffer.cleared", since=before)


async def test_text_items_delete_and_truncate() -> None:
    async with serve() as port, connect(port) as rt:
        await rt.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Tell me something."}],
                },
            }
        )
        added = await rt.next("conversation.item.added")
        user_id = added["item"]["id"]
        assert added["item"]["content"] == [{"type": "input_text", "text": "Tell me something."}]
        await rt.send({"type": "response.create", "response": {"metadata": {"k": "v"}}})
        response = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        assert response["metadata"] == {"k": "v"}
        assistant_id = response["output"][0]["id"]
        audio_ms = len(rt.audio(response["id"])) / 2 / RATE * 1000
        assert audio_ms > 800

        # The client played only 0.4 s of the first clause (0.5 s of 1 s): the history keeps that.
        await rt.send(
            {
                "type": "conversation.item.truncate",
                "item_id": assistant_id,
                "content_index": 0,
                "audio_end_ms": 400,
            }
        )
        truncated = await rt.next("conversation.item.truncated")
        assert (truncated["item_id"], truncated["audio_end_ms"]) == (assistant_id, 400)
        await rt.send({"type": "conversation.item.retrieve", "item_id": assistant_id})
        item = (await rt.next("conversation.item.retrieved"))["item"]
        heard = item["content"][0]["transcript"]
        assert heard and "Hello there,".startswith(heard), heard

        await rt.send({"type": "conversation.item.delete", "item_id": user_id})
        assert (await rt.next("conversation.item.deleted"))["item_id"] == user_id
        await rt.send({"type": "conversation.item.retrieve", "item_id": user_id})
        assert error_of(await rt.next("error"))["code"] == "item_not_found"


async def test_g711_ulaw_in_and_out() -> None:
    async with serve() as port, connect(port) as rt:
        pcmu = {"type": "audio/pcmu"}
        await rt.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {"input": {"format": pcmu}, "output": {"format": pcmu}},
                },
            }
        )
        updated = (await rt.next("session.updated"))["session"]
        assert updated["audio"]["output"]["format"] == pcmu
        speech = ulaw_encode(np.full(4000, 16384, dtype="<i2").tobytes())
        quiet = ulaw_encode(bytes(2 * 4800))
        for chunk in (speech[i : i + 800] for i in range(0, len(speech), 800)):
            await rt.send(
                {"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}
            )
        await rt.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(quiet).decode()}
        )
        response = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        audio = rt.audio(response["id"])  # one byte per 8 kHz sample
        assert 0.8 < len(audio) / 8000 < 1.2, len(audio)


async def test_bad_input_gets_openai_errors_and_the_call_goes_on() -> None:
    async with serve() as port, connect(port) as rt:
        cases: list[tuple[str, str, str | None]] = [
            ("{not json", "invalid_json", None),
            ('["a"]', "invalid_type", None),
            ('{"event_id": "e1"}', "missing_required_parameter", "type"),
            ('{"type": "no.such.event", "event_id": "e2"}', "invalid_value", "type"),
            (
                json.dumps({"type": "session.update", "session": {"type": "realtime", "bogus": 1}}),
                "unknown_parameter",
                "session.bogus",
            ),
            (
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {
                            "type": "realtime",
                            "audio": {
                                "input": {
                                    "turn_detection": {"type": "server_vad", "threshold": "high"}
                                }
                            },
                        },
                    }
                ),
                "invalid_type",
                "session.audio.input.turn_detection.threshold",
            ),
            (
                json.dumps({"type": "session.update", "session": {"input_audio_format": "mp3"}}),
                "invalid_value",
                "session.input_audio_format",
            ),
            (
                json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}),
                "invalid_value",
                "audio",
            ),
            (
                json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA"}),
                "invalid_value",
                "audio",
            ),
            (json.dumps({"type": "input_audio_buffer.commit"}), "invalid_value", None),
            (json.dumps({"type": "response.cancel"}), "response_cancel_not_active", None),
            (
                json.dumps(
                    {
                        "type": "conversation.item.truncate",
                        "item_id": "x",
                        "content_index": 0,
                        "audio_end_ms": -1,
                    }
                ),
                "invalid_value",
                "audio_end_ms",
            ),
            (
                json.dumps({"type": "conversation.item.delete", "item_id": "item_nope"}),
                "item_not_found",
                "item_id",
            ),
        ]
        for text, code, param in cases:
            before = len(rt.events)
            await rt.send_raw(text)
            error = error_of(await rt.next("error", since=before))
            assert (error["code"], error["param"]) == (code, param), (text, error)
        assert error_of(rt.of("error")[3])["event_id"] == "e2"
        assert not rt.of("session.updated"), "a bad session.update changes nothing"
        # Still a working call.
        await speak(rt)
        response = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        assert response["status"] == "completed"


async def test_browser_subprotocols_and_refusal_shape() -> None:
    async with serve(auth={"api_keys": ["sekret"]}) as port:
        url = f"ws://127.0.0.1:{port}/v1/realtime?model=x"
        offered = ["realtime", "openai-insecure-api-key.sekret", "openai-beta.realtime-v1"]
        async with websockets.connect(url, subprotocols=offered) as ws:
            assert ws.subprotocol == "realtime"
            created = json.loads(await ws.recv())
            assert created["type"] == "session.created"
            assert "input_audio_format" in created["session"], "the beta marker was honoured"
        async with websockets.connect(url, subprotocols=["realtime"]) as ws:
            refusal = json.loads(await ws.recv())
            assert refusal["type"] == "error"
            assert refusal["error"]["code"] == "unauthorized"
            assert refusal["error"]["type"] == "invalid_request_error"


async def test_create_response_false_waits_for_response_create() -> None:
    async with serve() as port, connect(port) as rt:
        vad = {"type": "server_vad", "create_response": False, "silence_duration_ms": 300}
        await rt.send(
            {
                "type": "session.update",
                "session": {"type": "realtime", "audio": {"input": {"turn_detection": vad}}},
            }
        )
        updated = (await rt.next("session.updated"))["session"]
        assert updated["audio"]["input"]["turn_detection"]["create_response"] is False
        await speak(rt)
        await rt.next("conversation.item.input_audio_transcription.completed")
        await asyncio.sleep(0.3)
        assert not rt.of("response.created"), "create_response false: no reply by itself"
        await rt.send({"type": "response.create"})
        response = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        assert response["status"] == "completed"


async def test_cancel_and_truncate_a_reply_in_flight() -> None:
    async with serve() as port, connect(port) as rt:
        await speak(rt)
        first = (await rt.next("response.created"))["response"]["id"]
        await rt.next("response.output_audio.delta", response_id=first)
        await rt.send({"type": "response.cancel", "response_id": first})
        done = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        assert done["id"] == first and done["status"] == "cancelled"
        assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
        assert done["output"][0]["status"] == "incomplete"

        before = len(rt.events)
        await rt.send({"type": "response.create"})
        second = (await rt.next("response.created", since=before))["response"]["id"]
        delta = await rt.next("response.output_audio.delta", since=before, response_id=second)
        await rt.send(
            {
                "type": "conversation.item.truncate",
                "item_id": delta["item_id"],
                "content_index": 0,
                "audio_end_ms": 0,
            }
        )
        await rt.next("conversation.item.truncated", since=before)
        done = rt.of("response.done", since=before)[0]["response"]
        assert (
            done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
        )
        await rt.send({"type": "conversation.item.retrieve", "item_id": delta["item_id"]})
        item = (await rt.next("conversation.item.retrieved", since=before))["item"]
        assert item["content"] == [{"type": "output_audio", "transcript": ""}], "nothing was heard"
