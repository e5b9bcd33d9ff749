"""A phone call over Twilio Media Streams (``/v1/twilio``) with the real models.

The caller is :class:`TwilioLine`, which speaks the protocol as Twilio documents it:
``connected``, ``start``, then 160-byte μ-law ``media`` every 20 ms in real time, real
speech resampled to 8 kHz; it plays the reply in real time, echoes each mark once the
audio before it has played, and empties its buffer on ``clear``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import jiwer
import numpy as np
import pytest

from tests.support import RunningServer, letter_error_rate, librivox_clips
from voxpipe.audio.pcm import read_wav, ulaw_decode
from voxpipe.clients.twilio_client import TwilioLine

pytestmark = pytest.mark.e2e

STORYTELLER = (
    "You are a storyteller on a phone call. Whatever the caller says, answer with a long story "
    "of at least six full sentences."
)
VOICED_RMS = 300  # a 20 ms frame of PCM16 louder than this (about -40 dBFS) is not silence


def _url(server: RunningServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/twilio"


def _norm(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower().replace("-", " ")).strip()


def _counter(server: RunningServer, name: str, label: str) -> dict[str, float]:
    text = httpx.get(f"{server.http}/metrics", timeout=10).text
    pattern = rf'^{name}{{{label}="([^"]*)"}} ([0-9.e+]+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.MULTILINE)}


def _voiced_s(media: list[dict[str, Any]]) -> float:
    """Seconds of non-silent audio in ``media`` messages (decoded from μ-law)."""
    ulaw = b"".join(base64.b64decode(m["media"]["payload"]) for m in media)
    pcm = np.frombuffer(ulaw_decode(ulaw), "<i2").astype(np.float64)
    frames = pcm[: pcm.shape[0] // 160 * 160].reshape(-1, 160)
    return float(np.sum(np.sqrt(np.mean(frames**2, axis=1)) > VOICED_RMS) * 0.02)


async def _turns(server: RunningServer, stream_sid: str, count: int) -> list[dict[str, Any]]:
    """The call's turn records from the server's turn log, once ``count`` are there."""
    deadline = time.monotonic() + 120
    while True:
        lines = server.turn_log.read_text().splitlines() if server.turn_log.exists() else []
        turns = [t for t in map(json.loads, lines) if t.get("session_id") == stream_sid]
        if len(turns) >= count or time.monotonic() > deadline:
            return sorted(turns, key=lambda t: t["turn_id"])
        await asyncio.sleep(0.2)


async def say_on_a_line(
    server: RunningServer, words: str, until: Callable[[TwilioLine], object]
) -> tuple[TwilioLine, dict[str, Any], float, int | None]:
    """Say ``words`` (Piper's voice) on a new Twilio line and wait until the turn is
    recorded and ``until(line)`` holds: the line, the turn's record, the seconds of the
    reply still unplayed then, and the server's close code if it had hung up by then (else
    the caller hangs up)."""
    from bench.turn_model import complete_sentence

    async with TwilioLine(_url(server)) as line:
        await line.connect()
        line.say(complete_sentence(words), 16000)
        (turn,) = await _turns(server, line.stream_sid, 1)
        await line.wait_for(lambda: until(line), 60)
        unplayed_s, server_closed = line.buffered_s, line.closed_code
        if server_closed is None:
            await line.hang_up()
    return line, turn, unplayed_s, server_closed


async def test_a_phone_call_is_answered_in_mulaw(server: RunningServer) -> None:
    clip = librivox_clips()[1]  # "he was not an ill disposed young man"
    errors_before = _counter(server, "voxpipe_errors_total", "code")
    dtmf_before = _counter(server, "voxpipe_dtmf_total", "digit").get("5", 0.0)
    async with TwilioLine(_url(server), {"caller": "+15550100"}) as line:
        await line.connect()
        # Malformed messages: logged and counted (Twilio has no error channel); the call goes on.
        await line.send_raw("{not json")
        await line.send_raw(json.dumps({"event": "transcribe", "streamSid": line.stream_sid}))
        said = line.say(*read_wav(clip.path))
        await asyncio.wait_for(said.sent.wait(), 60)
        (turn,) = await _turns(server, line.stream_sid, 1)
        # Twilio plays the reply out and echoes every mark; then the caller presses 5.
        await line.wait_for(line.played_out, 30)
        await line.press("5")
        await asyncio.sleep(0.5)
        close_code = await line.hang_up()

    media = [r.message for r in line.of("media")]
    assert _voiced_s(media) > 0.3, "the spoken reply has under 0.3 s of sound"
    sizes = [len(base64.b64decode(m["media"]["payload"])) for m in media]
    assert set(sizes[:-1]) == {160} and 0 < sizes[-1] <= 160, "20 ms frames; the last may be short"
    assert {m["streamSid"] for m in media} == {line.stream_sid}
    # Every frame is followed by the mark of its seq; the echoes went back in the same order.
    events = [r.message["event"] for r in line.received]
    assert events == ["media", "mark"] * len(media)
    names = [r.message["mark"]["name"] for r in line.of("mark")]
    seqs = [int(name.removeprefix("seq:")) for name in names]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert line.echoed == names
    assert not line.of("clear")
    assert close_code == 1000

    assert turn["status"] == "completed" and turn["reply"].strip()
    off = letter_error_rate(clip.text, turn["transcript"])
    assert off <= 0.2, f"{off:.2f} of the letters wrong on 8 kHz μ-law: {turn['transcript']!r}"
    errors = _counter(server, "voxpipe_errors_total", "code")
    assert errors.get("invalid_json", 0) - errors_before.get("invalid_json", 0) == 1
    assert errors.get("unknown_event", 0) - errors_before.get("unknown_event", 0) == 1
    assert errors.get("invalid_event", 0) == errors_before.get("invalid_event", 0), (
        "every echoed mark was recognised"
    )
    assert _counter(server, "voxpipe_dtmf_total", "digit")["5"] == dtmf_before + 1


async def test_a_signalwire_shaped_start_is_answered(server: RunningServer) -> None:
    """SignalWire's Twilio-compatible streams name the stream, call and account with UUIDs."""
    clip = librivox_clips()[1]
    async with TwilioLine(_url(server)) as line:
        line.stream_sid, line.call_sid, line.account_sid = (str(uuid.uuid4()) for _ in range(3))
        await line.connect()
        said = line.say(*read_wav(clip.path))
        await asyncio.wait_for(said.sent.wait(), 60)
        (turn,) = await _turns(server, line.stream_sid, 1)
        await line.wait_for(line.played_out, 30)
        close_code = await line.hang_up()

    assert turn["status"] == "completed" and turn["reply"].strip()
    media = [r.message for r in line.of("media")]
    assert _voiced_s(media) > 0.3, "the spoken reply has under 0.3 s of sound"
    assert {m["streamSid"] for m in media} == {line.stream_sid}
    assert close_code == 1000


async def test_talking_over_the_reply_sends_clear(server: RunningServer) -> None:
    clips = librivox_clips()
    ask, interruption = read_wav(clips[1].path), read_wav(clips[4].path)
    errors_before = _counter(server, "voxpipe_errors_total", "code")
    async with TwilioLine(_url(server), {"instructions": STORYTELLER}) as line:
        await line.connect()
        line.say(*ask)
        await line.wait_for(lambda: line.of("media"), 90)
        # The caller hears a sentence or so (played, not just sent: on a slow machine the
        # reply's audio can come slower than it plays) before it talks over the reply.
        await line.wait_for(lambda: line.played_s >= 1.5, 90)
        line.say(*interruption)
        clear, *_ = await line.wait_for(lambda: line.of("clear"), 30)
        played_before_clear = line.played_s
        first, second = await _turns(server, line.stream_sid, 2)
        await line.wait_for(lambda: line.buffered_s == 0, 60)
        await line.hang_up()

    assert clear.message == {"event": "clear", "streamSid": line.stream_sid}
    # One clear a barge-in, never two in a row. The reply may pause on the recording's hiss
    # before the first word, go on when that proves to be nothing, and stop at the word: a
    # second clear then follows audio sent after the first.
    clears = line.of("clear")
    assert len(clears) <= 2, clears
    for earlier, later in itertools.pairwise(clears):
        assert any(r.at < later.at for r in line.of("media", since=earlier.at)), clears
    before = [r.message for r in line.of("media") if r.at < clear.at]
    after = [r.message for r in line.of("media", since=clears[-1].at)]  # the answer's
    assert _voiced_s(before) > 0.3 and _voiced_s(after) > 0.3, "a reply before and after"
    assert played_before_clear > 1.0, "the caller heard the reply before talking over it"

    assert first["status"] == "interrupted"
    heard, generated = first["reply"].split(), first["generated"].split()
    assert 0 < len(heard) < len(generated), (heard, generated)
    assert generated[: len(heard)] == heard, "the heard text is a prefix of what was generated"
    assert second["status"] == "completed" and second["reply"].strip()
    assert letter_error_rate(clips[4].text, second["transcript"]) <= 0.25, second["transcript"]
    # The marks the clear dropped came back (as Twilio does) and were not taken as played.
    errors = _counter(server, "voxpipe_errors_total", "code")
    assert errors.get("invalid_event", 0) == errors_before.get("invalid_event", 0)
    assert len(line.echoed) == len(line.of("mark"))


async def test_keypad_digits_reach_the_agent(server: RunningServer) -> None:
    """The caller types 4 2 7 # on the keypad: one turn, "Keypad: 427", which the agent
    answers aloud, reading the number back."""
    agent = (
        "You are a bank's phone agent. When the caller types their account number on the "
        "keypad, read the number back to them in one short sentence."
    )
    async with TwilioLine(_url(server), {"instructions": agent}) as line:
        await line.connect()
        for digit in "427#":
            await line.press(digit)
        (turn,) = await _turns(server, line.stream_sid, 1)
        await line.wait_for(line.played_out, 60)
        await line.hang_up()

    assert turn["status"] == "completed", turn
    digits = re.sub(r"[^0-9]", "", turn["reply"])
    spoken = _norm(turn["reply"])
    assert "427" in digits or "four two seven" in spoken, turn["reply"]
    assert _voiced_s([r.message for r in line.of("media")]) > 0.3
    assert turn["session_counts"]["keypad_turns"] == 1
