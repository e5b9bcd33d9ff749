"""The filler on the wire: when the LLM's first token is late the agent says the filler ("One
moment.") and then the answer, and every outbound audio frame but the reply's very last one is a
whole 20 ms frame in the transport's wire format, on every WebSocket transport.

The fake TTS makes the filler (and each clause) a length that is not a whole number of 20 ms
frames, so a filler that is not padded to its last whole frame would leave a short frame in mid
reply, which a phone network or a jitter buffer plays as a click or a gap. WebRTC is not here:
its ReplyTrack re-frames every reply into 20 ms frames of silence-padded audio by construction
(test_webrtc_track.py), and an aiortc call is too heavy for a per-frame check.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import websockets

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import serving
from voxpipe.audio.pcm import ulaw_encode
from voxpipe.clients.native_client import NativeClient
from voxpipe.config import Config
from voxpipe.conversation.tool_step import FOLLOW_UPS
from voxpipe.engines.base import Engines

TIMEOUT_S = 20.0
FILLER = "One moment."
TTS_RATE = 16000
CLAUSE_SAMPLES = 8170  # 510.6 ms: not whole 20 ms frames at 8, 16 or 24 kHz
FRAME_MS = 20
SID, CALL, ACCOUNT = "MZ" + "a" * 32, "CA" + "b" * 32, "AC" + "c" * 32  # Twilio-shaped ids


class Wire:
    """One transport as its client sees it: how to open the call, say 20 ms of PCM16 at
    ``in_rate``, read reply audio out of a server message, and how the reply is known to be
    over (``done``: the server's event type; None: hang up, and the server flushes first)."""

    path: str
    in_rate: int
    out_rate: int
    bytes_per_sample = 2
    done: str | None = "response.done"

    def opening(self) -> list[str]:
        return []

    def say(self, pcm: bytes) -> str | bytes:
        raise NotImplementedError

    def audio(self, message: str | bytes) -> bytes | None:
        raise NotImplementedError

    def bye(self) -> str:
        raise NotImplementedError

    @property
    def frame_bytes(self) -> int:
        return self.out_rate * FRAME_MS // 1000 * self.bytes_per_sample


class Native(Wire):
    """``/v1/voice``: binary PCM16 frames both ways, out with an 8-byte (seq, turn) header."""

    path, in_rate, out_rate = "/v1/voice", 16000, 16000

    def opening(self) -> list[str]:
        rates = {"input_sample_rate": self.in_rate, "output_sample_rate": self.out_rate}
        return [json.dumps({"type": "session.start", **rates})]

    def say(self, pcm: bytes) -> str | bytes:
        return pcm

    def audio(self, message: str | bytes) -> bytes | None:
        return message[8:] if isinstance(message, bytes) else None


class Twilio(Wire):
    """``/v1/twilio``: μ-law at 8 kHz in base64 ``media`` messages; no end-of-reply event."""

    path, in_rate, out_rate, bytes_per_sample, done = "/v1/twilio", 8000, 8000, 1, None

    def __init__(self) -> None:
        self.sequence = 0

    def _message(self, event: str, **body: Any) -> str:
        self.sequence += 1
        return json.dumps(
            {"event": event, "sequenceNumber": str(self.sequence), "streamSid": SID, **body}
        )

    def opening(self) -> list[str]:
        fmt = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
        ids = {"streamSid": SID, "accountSid": ACCOUNT, "callSid": CALL}
        start = {**ids, "tracks": ["inbound"], "mediaFormat": fmt}
        connected = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
        return [json.dumps(connected), self._message("start", start=start)]

    def say(self, pcm: bytes) -> str | bytes:
        payload = base64.b64encode(ulaw_encode(pcm)).decode()
        chunk = {"track": "inbound", "chunk": str(self.sequence), "timestamp": "0"}
        return self._message("media", media={**chunk, "payload": payload})

    def audio(self, message: str | bytes) -> bytes | None:
        event = json.loads(message)
        if event["event"] != "media":
            return None
        return base64.b64decode(event["media"]["payload"])

    def bye(self) -> str:
        return self._message("stop", stop={"accountSid": ACCOUNT, "callSid": CALL})


class Realtime(Wire):
    """``/v1/realtime`` (OpenAI Realtime, default pcm16): base64 PCM16 at 24 kHz deltas."""

    path, in_rate, out_rate = "/v1/realtime", 24000, 24000

    def say(self, pcm: bytes) -> str | bytes:
        return json.dumps(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
        )

    def audio(self, message: str | bytes) -> bytes | None:
        event = json.loads(message)
        if event["type"] != "response.output_audio.delta":
            return None
        return base64.b64decode(event["delta"])


@contextlib.asynccontextmanager
async def serve(turns: Path, tts: FakeTts) -> AsyncIterator[int]:
    """The real app on fake engines: the filler and the first token due 50 ms after the
    words, the first token 300 ms after them."""
    config = Config.load(
        server={"turn_log_path": turns},
        store={"path": None},
        deadlines={"filler": FILLER, "filler_ms": 50, "llm_first_token_ms": 50},
        turn={"silence_ms": 300},
    )

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("what is it"), FakeLlm(["Here it is."], delay_s=0.3), tts)

    async with serving(config, engines, TIMEOUT_S) as (port, _):
        yield port


def speech(rate: int) -> list[bytes]:
    """0.5 s the fake VAD hears, then 0.6 s of silence (over ``silence_ms``), in 20 ms PCM16."""
    step = rate * FRAME_MS // 1000
    loud = np.full(step, 16384, "<i2").tobytes()
    return [loud] * 25 + [bytes(2 * step)] * 30


async def first_record(turns: Path) -> dict[str, Any]:
    """The first turn in the server's turn log, once it is written."""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            lines = await asyncio.to_thread(lambda: turns.read_text() if turns.exists() else "")
            if lines:
                return dict(json.loads(lines.splitlines()[0]))
            await asyncio.sleep(0.02)


async def one_turn(wire: Wire, port: int, turns: Path) -> tuple[list[bytes], dict[str, Any]]:
    """Say one thing; every reply audio payload as it arrived, and the server's turn record."""
    frames: list[bytes] = []
    async with websockets.connect(f"ws://127.0.0.1:{port}{wire.path}") as ws:

        async def read() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                async for message in ws:
                    if (audio := wire.audio(message)) is not None:
                        frames.append(audio)
                    elif wire.done and json.loads(message).get("type") == wire.done:
                        return

        reader = asyncio.create_task(read())
        for message in wire.opening():
            await ws.send(message)
        for pcm in speech(wire.in_rate):
            await ws.send(wire.say(pcm))
        record = await first_record(turns)
        if wire.done is None:
            await ws.send(wire.bye())  # the server flushes what it queued, then closes
        async with asyncio.timeout(TIMEOUT_S):
            await reader
    return frames, record


@pytest.mark.parametrize("wire", [Native, Twilio, Realtime], ids=lambda w: w.__name__.lower())
async def test_filler_then_answer_go_out_in_whole_20ms_frames(
    wire: type[Wire], tmp_path: Path
) -> None:
    w, tts = wire(), FakeTts(sample_rate=TTS_RATE, samples_per_clause=CLAUSE_SAMPLES)
    async with serve(tmp_path / "turns.jsonl", tts) as port:
        frames, record = await one_turn(w, port, tmp_path / "turns.jsonl")
    # The filler really played, before the answer: the test is not passing on no filler.
    assert tts.clauses[0] == FILLER, tts.clauses
    assert record["status"] == "completed", record
    assert record["filler"] == FILLER and "llm_first_token" in record["deadline_misses"]
    stages = record["stages_ms"]
    assert stages["filler_sent"] < stages["first_audio_sent"], stages
    # Every frame but the last is a whole 20 ms frame; the last is the answer's short rest.
    sizes = [len(f) for f in frames]
    short = [(i, n) for i, n in enumerate(sizes[:-1]) if n != w.frame_bytes]
    assert not short, f"(index, bytes) of {len(sizes)} frames of {w.frame_bytes}: {short}"
    assert 0 < sizes[-1] < w.frame_bytes, "the clause's length must not be whole frames"
    # The answer followed the filler: its frames, past the filler's padded ones, all arrived.
    frame_samples = w.frame_bytes // w.bytes_per_sample
    filler_frames = math.ceil(CLAUSE_SAMPLES * w.out_rate / TTS_RATE / frame_samples)
    answer = [c for c in tts.clauses if c != FILLER and c not in FOLLOW_UPS]  # not start-up's
    answer_samples = len(answer) * CLAUSE_SAMPLES * w.out_rate // TTS_RATE
    assert answer_samples > 0, tts.clauses
    heard = sum(sizes) // w.bytes_per_sample - filler_frames * frame_samples
    assert abs(heard - answer_samples) <= frame_samples, (heard, answer_samples, sizes)


async def test_the_native_client_counts_the_answer_not_the_filler(tmp_path: Path) -> None:
    """``voxpipe load`` judges a server by the client's voice-to-voice: the filler comes
    first, 50 ms after the words here, and is not the answer (``response.done``'s
    ``answer_seq``); the answer's first frame is."""
    tts = FakeTts(sample_rate=TTS_RATE, samples_per_clause=CLAUSE_SAMPLES)
    async with serve(tmp_path / "turns.jsonl", tts) as port:
        async with NativeClient(f"ws://127.0.0.1:{port}/v1/voice") as client:
            await client.connect()
            turn = await client.speak(np.full(TTS_RATE // 2, 0.5, np.float32), TTS_RATE)
    assert turn.metrics["stages_ms"]["filler_sent"] < turn.metrics["stages_ms"]["first_audio_sent"]
    answer = turn.done["answer_seq"]
    assert answer > turn.seqs[0]  # the filler's frames came first
    first_ms = (turn.first_audio_ns - turn.speech_end_sent_ns) / 1e6
    assert turn.voice_to_voice_ms is not None
    assert turn.voice_to_voice_ms == (turn.arrived_ns[answer] - turn.speech_end_sent_ns) / 1e6
    assert turn.voice_to_voice_ms > first_ms
