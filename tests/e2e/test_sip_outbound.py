"""Calls the server places itself (``POST /v1/calls`` with ``provider: sip``), answered by
``baresip`` (Debian's, headless, answering on its own), with the real models.

The agent has a greeting: once baresip answers, the agent speaks first, baresip records what
it hears, and Whisper hears the greeting's words in the recording. The callee then asks a
question (a WAV as its microphone) and hears an answer. The POST's answer says the call was
answered; the same POST again (its Idempotency-Key) gets the same answer and baresip no
second call. baresip hangs up; the server's calls go back to 0. A callee that refuses
(baresip with no such account: 404) is the API's ``call_failed`` with that SIP status.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import jiwer
import numpy as np
import pytest

from tests.e2e.test_sip import (
    RATE,
    Baresip,
    _baresip_config,
    _spoken_turns,
    _turns,
    _until_no_calls,
    _voiced,
    _wav,
)
from tests.support import (
    RunningServer,
    free_sip_port,
    letter_error_rate,
    normalised,
    serving,
    tracebacks,
    voiced,
)
from voxpipe.audio.pcm import pcm16_to_float, resample
from voxpipe.engines.base import STT_SAMPLE_RATE
from voxpipe.engines.whisper_stt import WhisperStt

pytestmark = pytest.mark.e2e

KEY = "outbound-sip-e2e-key-0123456789abcdef"
# Plain words: Whisper tiny hears a made-up name ("Voxpipe") as anything ("box but i age"),
# and this checks that the greeting is heard, not Whisper's vocabulary.
GREETING = "Hello, this is the restaurant calling about your table for two tonight."
QUESTION = "What time is the table booked for?"
LISTEN_S = 8  # the callee listens to the greeting before it asks
WAIT_S = 40  # then listens for the answer


@pytest.fixture(scope="module")
def dialer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server that dials SIP, serving an agent with a greeting."""
    folder = tmp_path_factory.mktemp("sip-outbound")
    agent = folder / "caller.yaml"
    agent.write_text(
        "instructions: |\n"
        "  You call to confirm a table for two at eight tonight. Answer in one sentence.\n"
        f"greeting: {GREETING}\n"
    )
    env = {
        "VOXPIPE_AGENT": str(agent),
        "VOXPIPE_AUTH__API_KEYS": f'["{KEY}"]',
        "VOXPIPE_SIP__ENABLED": "true",
        "VOXPIPE_SIP__HOST": "127.0.0.1",
        "VOXPIPE_SIP__PORT": str(free_sip_port()),
        "VOXPIPE_SIP__DIAL_TIMEOUT_S": "20",
    }
    yield from serving(folder, env)


@pytest.fixture(scope="module")
def whisper() -> WhisperStt:
    engine = WhisperStt(threads=1)
    engine.warmup()
    return engine


def _answering(folder: Path, port: int, mode: str = "auto") -> None:
    """baresip's account: it answers every call at once (``auto``), or lets it ring."""
    account = f"<sip:callee@127.0.0.1:{port}>;answermode={mode};regint=0\n"
    (folder / "accounts").write_text(account)
    config = folder / "config"
    config.write_text(
        config.read_text().replace("sip_listen 127.0.0.1:0", f"sip_listen 127.0.0.1:{port}")
    )


async def _post(server: RunningServer, to: str, key: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(
            f"{server.http}/v1/calls",
            json={"to": to, "provider": "sip"},
            headers={"Authorization": f"Bearer {KEY}", "Idempotency-Key": key},
        )


NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def _spelled(text: str) -> str:
    """``normalised``, with small numbers as words: the model writes "two" or "2", and Whisper
    hears either, which is the same word to the caller."""
    words = normalised(text).split()
    return " ".join(NUMBER_WORDS[int(w)] if w.isdigit() and int(w) <= 12 else w for w in words)


async def test_baresip_answers_hears_the_greeting_and_an_answer(
    dialer: RunningServer, whisper: WhisperStt, tmp_path: Path
) -> None:
    question, rate = voiced(QUESTION)
    asked = resample(question, rate, RATE)
    says = _wav(
        tmp_path / "callee.wav",
        np.zeros(LISTEN_S * RATE, np.float32),  # listens to the greeting
        asked,
        np.zeros(WAIT_S * RATE, np.float32),  # listens to the answer
    )
    # Where the recording has no more of the callee's question: the answer comes after it,
    # however fast (a fixed offset missed a short answer that came quickly).
    asked_end = LISTEN_S * RATE + asked.shape[0]
    port = free_sip_port()
    folder = tmp_path / "baresip"
    _baresip_config(folder, says, tmp_path / "heard")
    _answering(folder, port)
    callee = await Baresip.start(folder, tmp_path / "heard")
    try:
        await callee.until(lambda: "baresip is ready" in callee.said, 20, "baresip started")
        to = f"sip:callee@127.0.0.1:{port}"
        answered = await _post(dialer, to, "e2e-call-1")
        assert answered.status_code == 201, answered.text
        placed = answered.json()
        assert placed["status"] == "answered" and placed["provider"] == "sip"

        again = await _post(dialer, to, "e2e-call-1")  # a client's retry
        assert again.json() == placed and again.headers["idempotent-replayed"] == "true"

        # The greeting, then the callee's question and the agent's whole answer to it (the
        # turn is logged once its last audio is sent).
        await _until_answered(callee, dialer, asked_end)
        await asyncio.sleep(1.0)  # the answer's last packets
        await callee.command("/hangup")
        await callee.until(lambda: callee.hung_up, 20, "the callee hung up")
    finally:
        await callee.close()
    _until_no_calls(dialer)
    assert _incoming(callee) == 1, callee.said[-2000:]  # the retry placed no second call

    heard = callee.heard()
    greeting = pcm16_to_float(heard[: LISTEN_S * RATE].tobytes())
    words = normalised(whisper.transcribe(resample(greeting, RATE, STT_SAMPLE_RATE)).text)
    assert jiwer.wer(normalised(GREETING), words) <= 0.3, words

    turn = (await _turns(dialer, 1))[0]
    assert letter_error_rate(QUESTION, turn["transcript"]) <= 0.25, turn
    reply_audio = pcm16_to_float(heard[asked_end:].tobytes())
    reply_words = _spelled(whisper.transcribe(resample(reply_audio, RATE, STT_SAMPLE_RATE)).text)
    generated = _spelled(turn["generated"])
    # A filler ("One moment") may come first, when the answer's first word is late. The
    # words are compared letter by letter, as the other phone tests do: Whisper tiny on
    # 8 kHz G.711 gets a short word wrong now and then ("eight pm" as "ap dam", a run here),
    # which a word-by-word count takes as a different answer.
    heard_words = reply_words.split()
    closest = min(jiwer.cer(generated, " ".join(heard_words[k:])) for k in range(3))
    assert heard_words and closest <= 0.3, (reply_words, generated, _timeline(heard))
    assert not tracebacks(dialer.log_path.read_text())


async def test_a_callee_that_refuses_is_the_api_s_error(
    dialer: RunningServer, tmp_path: Path
) -> None:
    port = free_sip_port()
    folder = tmp_path / "baresip"
    silence = _wav(tmp_path / "silence.wav", np.zeros(RATE, np.float32))
    _baresip_config(folder, silence, tmp_path / "heard")
    _answering(folder, port, "manual")
    callee = await Baresip.start(folder, tmp_path / "heard")
    try:
        await callee.until(lambda: "baresip is ready" in callee.said, 20, "baresip started")
        placing = asyncio.create_task(
            _post(dialer, f"sip:callee@127.0.0.1:{port}", "e2e-call-refused")
        )
        await callee.until(lambda: _incoming(callee) == 1, 20, "the call rang")
        await callee.command("/hangup")  # rejected while ringing
        refused = await asyncio.wait_for(placing, 30)
    finally:
        await callee.close()
    assert refused.status_code == 502, refused.text
    error = refused.json()
    assert error["code"] == "call_failed" and 400 <= error["sip_status"] < 700, error
    _until_no_calls(dialer)


async def _until_answered(callee: Baresip, server: RunningServer, asked_end: int) -> None:
    """Until the server has logged the question's turn and the callee heard audio after
    the question; on a timeout, says what was heard when and what the server logged."""

    def answered() -> bool:
        heard_after = _voiced(callee.heard()[asked_end:]).sum() * 0.02
        return bool(_spoken_turns(server)) and heard_after >= 0.3

    def why() -> str:
        log = server.turn_log.read_text() if server.turn_log.exists() else "(no turn log)"
        return (
            f"{_timeline(callee.heard())}, question ends at {asked_end / RATE:.1f} s; "
            f"turns: {log[-3000:]}; server: {server.log_path.read_text()[-3000:]}"
        )

    await callee.until(answered, WAIT_S, "no answer to the question was heard", why)


def _timeline(pcm: np.ndarray) -> str:
    """What the callee heard, a character per half second: ``#`` voiced, ``.`` not."""
    frames = _voiced(pcm)
    halves = frames[: frames.shape[0] // 25 * 25].reshape(-1, 25).mean(axis=1)
    return "".join("#" if v > 0.3 else "." for v in halves)


def _incoming(callee: Baresip) -> int:
    """The calls that reached baresip: answered at once, or ringing."""
    return len(re.findall(r"answering call on line|[Ii]ncoming call", callee.said))
