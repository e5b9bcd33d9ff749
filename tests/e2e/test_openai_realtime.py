"""The official ``openai`` SDK against voxpipe's ``/v1/realtime``, on the real models.

Real speech (LibriVox clips resampled to 24 kHz) is appended at real-time pace, the
server's VAD ends each turn, Whisper's words come back as the user item's
transcription and the reply comes back as audio deltas. Both SDK entry points are
used: ``client.realtime`` (GA event names) and ``client.beta.realtime`` (beta names).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jiwer
import numpy as np
import pytest
from openai import AsyncOpenAI

from tests.realtime_client import RATE, Listener, pcm24k, silence, voiced_seconds
from tests.support import Clip, RunningServer, assert_spoken, librivox_clips
from voxpipe.audio.pcm import pcm16_to_float, read_wav

pytestmark = pytest.mark.e2e

TURN_TIMEOUT_S = 90.0
BRIEF = "You are a voice assistant. Answer every message with one short sentence."
STORYTELLER = (
    "You are a storyteller on a phone call. Whatever the caller says, answer with a long story "
    "of at least six full sentences."
)
SERVER_VAD = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
}


def _norm(text: str) -> str:
    return str(jiwer.RemovePunctuation()(text.lower().replace("-", " "))).strip()


def _wer(clip: Clip, heard: str) -> float:
    return float(jiwer.wer(_norm(clip.text), _norm(heard)))


def _speech(clip: Clip) -> bytes:
    return pcm24k(*read_wav(clip.path))


@contextlib.asynccontextmanager
async def realtime(server: RunningServer, beta: bool = False) -> AsyncIterator[Listener]:
    client = AsyncOpenAI(api_key="test", websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
    entry = client.beta.realtime if beta else client.realtime
    async with entry.connect(model="gpt-realtime") as connection:
        listener = Listener(connection)
        try:
            await listener.next("session.created", timeout_s=30)
            yield listener
        finally:
            await listener.close()


async def _brief_with(rt: Listener, turn_detection: dict[str, Any] | None) -> dict[str, Any]:
    """A GA ``session.update`` to BRIEF with this ``turn_detection``; the session updated."""
    await rt.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "instructions": BRIEF,
                "audio": {"input": {"turn_detection": turn_detection}},
            },
        }
    )
    return dict((await rt.next("session.updated"))["session"])


def _done(rt: Listener, since: int, response_id: str | None = None) -> dict[str, Any] | None:
    for event in rt.of("response.done", since):
        if response_id in (None, event["response"]["id"]):
            return dict(event["response"])
    return None


async def _spoken_turn(rt: Listener, clip: Clip) -> tuple[str, dict[str, Any], str]:
    """Speak ``clip`` then silence; returns (user item id, the response, the transcription)."""
    before = len(rt.events)
    await rt.stream(_speech(clip) + silence(1.5))
    response = await rt.wait_for(lambda: _done(rt, before), TURN_TIMEOUT_S)
    committed = rt.of("input_audio_buffer.committed", before)[0]
    transcribed = await rt.next(
        "conversation.item.input_audio_transcription.completed",
        before,
        TURN_TIMEOUT_S,
        item_id=committed["item_id"],
    )
    return committed["item_id"], response, transcribed["transcript"]


def _assert_spoken(rt: Listener, response: dict[str, Any]) -> None:
    assert response["status"] == "completed", response
    [item] = response["output"]
    assert item["role"] == "assistant" and item["status"] == "completed"
    assert item["content"][0]["transcript"].strip()
    assert_spoken(item["content"][0]["transcript"])
    audio = rt.audio(response["id"])
    samples = pcm16_to_float(audio)
    assert samples.shape[0] / RATE > 0.3 and voiced_seconds(audio) > 0.3, "no spoken reply"
    assert np.sqrt(np.mean(samples**2)) > 0.01, "the reply audio is silent"


async def test_ga_two_turn_spoken_conversation(server: RunningServer) -> None:
    clips = librivox_clips()
    async with realtime(server) as rt:
        created = rt.of("session.created")[0]["session"]
        assert created["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
        await rt.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "instructions": BRIEF,
                    "output_modalities": ["audio"],
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "transcription": {"model": "whisper-1"},
                            "turn_detection": SERVER_VAD,
                        },
                        "output": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "voice": "marin",
                        },
                    },
                },
            }
        )
        updated = (await rt.next("session.updated"))["session"]
        assert updated["instructions"] == BRIEF
        assert updated["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 500
        turns = [await _spoken_turn(rt, clip) for clip in (clips[1], clips[4])]
        await rt.send({"type": "conversation.item.retrieve", "item_id": turns[0][0]})
        retrieved = (await rt.next("conversation.item.retrieved"))["item"]

    for clip, (_, response, transcript) in zip((clips[1], clips[4]), turns, strict=True):
        assert _wer(clip, transcript) <= 0.35, (transcript, clip.text)
        _assert_spoken(rt, response)
        deltas = rt.of("response.output_audio.delta", response_id=response["id"])
        assert max(len(d["delta"]) for d in deltas) < 256 * 1024, "audio deltas stay small"
        text = "".join(
            e["delta"]
            for e in rt.of("response.output_audio_transcript.delta", response_id=response["id"])
        )
        assert text.strip() == response["output"][0]["content"][0]["transcript"].strip()
    assert retrieved["content"] == [{"type": "input_audio", "transcript": turns[0][2]}]
    assert not rt.of("error"), rt.of("error")
    assert not [e for e in rt.events if e["type"].startswith("response.audio")], "beta names"
    parsed = {type(p).__name__ for p in rt.parsed}
    expected = {
        "InputAudioBufferSpeechStartedEvent",
        "InputAudioBufferCommittedEvent",
        "ConversationItemInputAudioTranscriptionCompletedEvent",
        "ResponseCreatedEvent",
        "ResponseAudioDeltaEvent",
        "ResponseAudioTranscriptDeltaEvent",
        "ResponseDoneEvent",
        "ConversationItemRetrieved",
    }
    assert expected <= parsed, expected - parsed


async def test_beta_barge_in_and_truncate_keep_only_what_was_heard(
    server: RunningServer,
) -> None:
    clips = librivox_clips()
    async with realtime(server, beta=True) as rt:
        await rt.send(
            {
                "type": "session.update",
                "session": {
                    "modalities": ["audio", "text"],
                    "instructions": STORYTELLER,
                    "voice": "alloy",
                    "input_audio_format": "pcm16",
                    "output_audio_format": "pcm16",
                    "input_audio_transcription": {"model": "whisper-1"},
                    "turn_detection": SERVER_VAD,
                },
            }
        )
        assert (await rt.next("session.updated"))["session"]["turn_detection"]["type"] == (
            "server_vad"
        )
        before = len(rt.events)
        await rt.stream(_speech(clips[1]) + silence(1.0))
        created = await rt.next("response.created", before, TURN_TIMEOUT_S)
        first_id = created["response"]["id"]
        started_at = await rt.wait_for(lambda: rt.first_audio_at.get(first_id), TURN_TIMEOUT_S)
        item_id = rt.of("response.output_item.added", before)[0]["item"]["id"]
        # The client plays the reply; 2 s in, the caller talks over it.
        await asyncio.sleep(max(0.0, started_at + 2.0 - time.monotonic()))
        over_at = len(rt.events)
        speaking = asyncio.create_task(rt.stream(_speech(clips[4]) + silence(1.5)))
        await rt.next("input_audio_buffer.speech_started", over_at, 15)
        # As an OpenAI client does: stop playback and tell the server what was played.
        received_ms = len(rt.audio(first_id)) / 2 / RATE * 1000
        played_ms = int(min((time.monotonic() - started_at) * 1000, received_ms))
        await rt.send(
            {
                "type": "conversation.item.truncate",
                "item_id": item_id,
                "content_index": 0,
                "audio_end_ms": played_ms,
            }
        )
        truncated = await rt.next("conversation.item.truncated", over_at, 15)
        first = await rt.wait_for(lambda: _done(rt, before, first_id), 15)
        await speaking
        second = await rt.wait_for(
            lambda: next(
                (
                    r
                    for e in rt.of("response.done", over_at)
                    if (r := e["response"])["id"] != first_id
                ),
                None,
            ),
            TURN_TIMEOUT_S,
        )
        user_item = rt.of("input_audio_buffer.committed", over_at)[0]["item_id"]
        transcribed = await rt.next(
            "conversation.item.input_audio_transcription.completed", over_at, item_id=user_item
        )
        # The next turn's history, seen through the item: only the part that was heard.
        await rt.send({"type": "conversation.item.retrieve", "item_id": item_id})
        kept = (await rt.next("conversation.item.retrieved", over_at))["item"]

    assert (truncated["item_id"], truncated["audio_end_ms"]) == (item_id, played_ms)
    assert first["status"] == "cancelled", first
    assert first["status_details"]["reason"] in ("client_cancelled", "turn_detected")
    assert first["output"][0]["status"] == "incomplete"
    generated = rt.transcript(first_id).split()
    heard = kept["content"][0]["transcript"].split()
    assert kept["content"][0]["type"] == "audio"
    assert 0 < len(heard) < len(generated), (heard, generated)
    assert generated[: len(heard)] == heard, "what is kept is what was played, from the start"
    assert played_ms >= 1500 and received_ms >= played_ms
    # Audio stopped soon after the interruption: the reply was paced, not dumped.
    assert len(rt.audio(first_id)) / 2 / RATE * 1000 < played_ms + 3000

    assert _wer(clips[4], transcribed["transcript"]) <= 0.35, transcribed["transcript"]
    _assert_spoken(rt, second)
    kinds = {e["type"] for e in rt.events}
    assert {"response.audio.delta", "response.audio_transcript.delta"} <= kinds
    assert {"conversation.item.created", "conversation.item.truncated"} <= kinds
    assert not {"response.output_audio.delta", "conversation.item.added"} & kinds


async def test_manual_commit_then_response_create(server: RunningServer) -> None:
    clip = librivox_clips()[2]
    async with realtime(server) as rt:
        updated = await _brief_with(rt, None)
        assert updated["audio"]["input"]["turn_detection"] is None
        # No VAD: the whole clip may arrive at once; the commit says where the turn ends.
        await rt.stream(_speech(clip), chunk_ms=200, real_time=False)
        await rt.send({"type": "input_audio_buffer.commit", "event_id": "commit-1"})
        committed = await rt.next("input_audio_buffer.committed", timeout_s=30)
        transcribed = await rt.next(
            "conversation.item.input_audio_transcription.completed",
            timeout_s=TURN_TIMEOUT_S,
            item_id=committed["item_id"],
        )
        assert not rt.of("input_audio_buffer.speech_started")
        assert not rt.of("response.created"), "a commit alone is not answered"
        await rt.send({"type": "response.create"})
        response = await rt.wait_for(lambda: _done(rt, 0), TURN_TIMEOUT_S)
    assert _wer(clip, transcribed["transcript"]) <= 0.35, transcribed["transcript"]
    _assert_spoken(rt, response)
    assert not rt.of("error"), rt.of("error")


async def test_bad_input_gets_openai_errors_and_the_call_goes_on(server: RunningServer) -> None:
    bad: list[tuple[str, str, str | None]] = [
        ('{"type": "session.update", "session": ', "invalid_json", None),
        ('{"type": "conversation.item.frobnicate", "event_id": "evt_1"}', "invalid_value", "type"),
        (
            json.dumps({"type": "session.update", "session": {"voice": "alloy", "colour": "red"}}),
            "unknown_parameter",
            "session.colour",
        ),
        (
            json.dumps(
                {"type": "session.update", "session": {"turn_detection": {"threshold": "0.5"}}}
            ),
            "invalid_type",
            "session.turn_detection.threshold",
        ),
        (
            json.dumps(
                {
                    "type": "session.update",
                    "session": {"turn_detection": {"silence_duration_ms": -5}},
                }
            ),
            "invalid_value",
            "session.turn_detection.silence_duration_ms",
        ),
        (
            json.dumps({"type": "session.update", "session": {"input_audio_format": "opus"}}),
            "invalid_value",
            "session.input_audio_format",
        ),
    ]
    async with realtime(server, beta=True) as rt:
        for text, code, param in bad:
            before = len(rt.events)
            await rt.send_raw(text)
            event = await rt.next("error", before)
            error = event["error"]
            assert event["event_id"].startswith("event_")
            assert error["type"] == "invalid_request_error", error
            assert (error["code"], error["param"]) == (code, param), (text, error)
            assert error["message"]
        assert rt.of("error")[1]["error"]["event_id"] == "evt_1", "the client's event id"
        assert not rt.of("session.updated"), "a refused session.update changes nothing"

        # The same connection still works: a text turn, answered with speech.
        await rt.send({"type": "session.update", "session": {"instructions": BRIEF}})
        assert (await rt.next("session.updated"))["session"]["instructions"] == BRIEF
        await rt.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Say hello to me."}],
                },
            }
        )
        await rt.next("conversation.item.created")
        await rt.send({"type": "response.create"})
        response = await rt.wait_for(lambda: _done(rt, 0), TURN_TIMEOUT_S)
    _assert_spoken(rt, response)


async def test_semantic_vad_waits_through_a_mid_sentence_pause(server: RunningServer) -> None:
    """``semantic_vad`` ends turns by the turn model: a caller pausing 1.1 s after "I'd like
    a table for" is one turn (the fixed 500 ms silence cuts it in two: test_smart_turn)."""
    from bench.turn_model import RATE as CLIP_RATE
    from bench.turn_model import paused_sentence

    clip = paused_sentence("I'd like a table for", "four people tonight.", 1.1)
    async with realtime(server) as rt:
        updated = await _brief_with(rt, {"type": "semantic_vad", "eagerness": "low"})
        before = len(rt.events)
        await rt.stream(pcm24k(clip, CLIP_RATE) + silence(1.5))
        response = await rt.wait_for(lambda: _done(rt, before), TURN_TIMEOUT_S)
        await asyncio.sleep(1.0)  # time for a second turn, had the pause ended one
        commits = rt.of("input_audio_buffer.committed", before)
        transcribed = await rt.next(
            "conversation.item.input_audio_transcription.completed", before, TURN_TIMEOUT_S
        )

    detection = updated["audio"]["input"]["turn_detection"]
    assert detection["type"] == "semantic_vad" and detection["eagerness"] == "low"
    assert len(commits) == 1, [e["item_id"] for e in commits]
    heard = _norm(transcribed["transcript"])
    assert "table" in heard and "tonight" in heard, heard
    assert response["status"] == "completed"
    records = [json.loads(line) for line in server.turn_log.read_text().splitlines()]
    assert records[-1].get("turn_model"), "the turn model judged the pause"
