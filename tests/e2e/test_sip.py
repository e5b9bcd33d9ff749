"""SIP, directly, with real SIP programs from Debian against the real server and models.

- ``sipp`` (package sip-tester) sets up and tears down 20 calls over UDP and 5 over TCP
  (``sip/calls.xml``: INVITE with an offer, the answer's SDP checked, ACK, BYE), then sends
  malformed requests (``sip/malformed.xml``, and here those SIPp cannot match an answer to:
  no Call-ID, not text, too big), each answered with its 4xx; the server stays up, logs no
  traceback, answers the next call, and its calls go back to 0.
- ``baresip`` with only its ``opus`` module (RFC 7587, 48 kHz) asks a question: the server
  answers in Opus, and Whisper hears baresip's recording as the words the server generated.
- ``baresip`` keys 4 2 7 # during a call (``/sndcode``: RFC 4733 telephone-events): each
  digit counted once, and the agent gets them as one turn, "Keypad: 427" in the call's
  record, which it answers.
- ``baresip`` (headless: its own config folder, ``aufile`` playing a WAV as the microphone,
  ``sndfile`` recording what it hears) calls the server, asks for a story, talks over the
  answer, and hangs up when the WAV ends. Whisper hears the recorded answer as the words the
  server's turn log says it generated; the talking-over is a barge-in (the turn interrupted,
  the answer's audio stopped while the caller spoke), and is itself heard as a turn.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jiwer
import numpy as np
import pytest

from tests.support import (
    RunningServer,
    free_sip_port,
    letter_error_rate,
    librivox_clips,
    normalised,
    serving,
    tracebacks,
    voiced,
    without_filler,
)
from voxpipe.audio.pcm import float_to_pcm16, pcm16_to_float, read_wav, resample, write_wav
from voxpipe.engines.base import STT_SAMPLE_RATE
from voxpipe.engines.whisper_stt import WhisperStt
from voxpipe.server.store import show_call

pytestmark = pytest.mark.e2e

SCENARIOS = Path(__file__).parent / "sip"
RATE = 8000  # the call's audio: baresip's aufile needs the WAV at the audio rate
QUESTION = "Please tell me a long story about a brave young sailor and his ship."
ANSWER_WAIT_S = 60  # the longest the caller waits (in silence) for the answer
HEARD_BEFORE_TALKING_S = 3.0  # the answer heard before the caller talks over it
TAIL_S = 3  # silence after the interruption: its turn ends before the caller hangs up
VOICED_RMS = 300  # a 20 ms frame of PCM16 louder than this (about -40 dBFS) is not silence


@pytest.fixture(scope="module")
def sip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, int]]:
    """A server answering SIP on loopback; its SIP port."""
    port = free_sip_port()
    env = {
        "VOXPIPE_SIP__ENABLED": "true",
        "VOXPIPE_SIP__HOST": "127.0.0.1",
        "VOXPIPE_SIP__PORT": str(port),
        # SIPp keeps 3 calls up at once; a call's slot is free once its cleanup is done,
        # which a loaded machine may delay: room for twice that, so no call meets a 503.
        "VOXPIPE_LIMITS__MAX_CALLS": "8",
    }
    for server in serving(tmp_path_factory.mktemp("sip"), env):
        yield server, port


def _calls(server: RunningServer) -> int:
    return int(httpx.get(f"{server.http}/readyz", timeout=10).json()["calls"])


def _until_no_calls(server: RunningServer, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while _calls(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _calls(server) == 0, "calls went back to 0"


def _sipp(
    tmp: Path, port: int, scenario: str, calls: int, *extra: str
) -> subprocess.CompletedProcess[str]:
    """SIPp run to its end (exit 0: every call passed its scenario)."""
    local = free_sip_port()
    command = [
        "sipp", "-sf", str(SCENARIOS / scenario), f"127.0.0.1:{port}",
        "-m", str(calls), "-r", "10", "-l", "3",
        "-i", "127.0.0.1", "-p", str(local),
        "-timeout", "60", "-timeout_error", "-nostdin", "-trace_err",
        *extra,
    ]  # fmt: skip
    return subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=90)


def _successful(run: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"Successful call\s*\|\s*\d+\s*\|\s*(\d+)", run.stdout)
    return int(found.group(1)) if found else -1


def _errors(tmp: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in tmp.glob("*_errors.log"))


def test_sipp_sets_up_and_tears_down_calls(sip: tuple[RunningServer, int], tmp_path: Path) -> None:
    server, port = sip
    accepted = _metric(server, "voxpipe_connections_total", transport="sip", outcome="accepted")
    udp = _sipp(tmp_path, port, "calls.xml", 20)
    assert udp.returncode == 0 and _successful(udp) == 20, (udp.stdout[-2000:], _errors(tmp_path))
    tcp = _sipp(tmp_path, port, "calls.xml", 5, "-t", "t1")
    assert tcp.returncode == 0 and _successful(tcp) == 5, (tcp.stdout[-2000:], _errors(tmp_path))
    _until_no_calls(server)
    assert (
        _metric(server, "voxpipe_connections_total", transport="sip", outcome="accepted") - accepted
        == 25
    )


def _metric(server: RunningServer, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that carry ``labels``."""
    text = httpx.get(f"{server.http}/metrics", timeout=10).text
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(w in line for w in wanted)
    )


def _exchange(port: int, data: bytes) -> bytes:
    """Send one datagram to the server's SIP port; its answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(10)
        udp.bind(("127.0.0.1", 0))
        udp.sendto(data, ("127.0.0.1", port))
        return udp.recv(65536)


def test_malformed_messages_get_4xx_and_the_server_stays_up(
    sip: tuple[RunningServer, int], tmp_path: Path
) -> None:
    server, port = sip
    refused = _metric(server, "voxpipe_sip_refused_total")
    bad = _sipp(tmp_path, port, "malformed.xml", 1)
    assert bad.returncode == 0 and _successful(bad) == 1, (bad.stdout[-2000:], _errors(tmp_path))
    cseq_method = (
        b"OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bKm1\r\n"
        b"From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:agent@127.0.0.1>\r\nCall-ID: m1\r\n"
        b"CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
    )
    for data, status in [
        (b"hello, is anybody there?\r\n\r\n", 400),  # no SIP at all
        (bytes(range(256)) * 4, 400),  # not text
        (b"OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n", 413),
        (cseq_method, 400),
    ]:
        answer = _exchange(port, data)
        assert answer.startswith(f"SIP/2.0 {status} ".encode()), (data[:60], answer[:200])
    sent = (SCENARIOS / "malformed.xml").read_text().count("<send>") + 4
    assert _metric(server, "voxpipe_sip_refused_total") - refused == sent

    assert httpx.get(f"{server.http}/healthz", timeout=10).status_code == 200
    after = _sipp(tmp_path, port, "calls.xml", 1)  # still answering calls
    assert after.returncode == 0, (after.stdout[-2000:], _errors(tmp_path))
    _until_no_calls(server)
    assert not tracebacks(server.log_path.read_text())


# -- a call from baresip ------------------------------------------------------------------


@pytest.fixture(scope="module")
def whisper() -> WhisperStt:
    engine = WhisperStt(threads=1)
    engine.warmup()
    return engine


def _baresip_config(
    folder: Path,
    wav: Path,
    recordings: Path,
    codecs: tuple[str, ...] = ("g711",),
    rate: int = RATE,
) -> None:
    """A headless baresip: G.711 only (or the ``codecs`` modules, in that order), the WAV
    (at ``rate``) as its microphone, what it hears recorded."""
    folder.mkdir()
    recordings.mkdir()
    (folder / "accounts").write_text("<sip:caller@127.0.0.1>;regint=0\n")
    (folder / "config").write_text(
        "\n".join(
            [
                "poll_method epoll",
                "sip_listen 127.0.0.1:0",
                "sip_transports udp",
                "audio_player alsa,null",  # what it hears goes to sndfile's recording only
                f"audio_source aufile,{wav}",
                "audio_alert alsa,null",
                f"ausrc_srate {rate}",
                f"auplay_srate {rate}",
                "ausrc_channels 1",
                "auplay_channels 1",
                "rtp_ports 30000-30999",
                "module_path /usr/lib/baresip/modules",
                *(f"module {codec}.so" for codec in codecs),
                "module aufile.so",
                "module alsa.so",
                "module sndfile.so",
                "module stdio.so",  # commands on stdin
                "module_app account.so",
                "module_app menu.so",
                f"snd_path {recordings}",
                "",
            ]
        )
    )


def _voiced(pcm: np.ndarray, rate: int = RATE) -> np.ndarray:
    """Per 20 ms frame of PCM16 at ``rate``: louder than silence?"""
    frame = rate // 50
    frames = pcm[: pcm.shape[0] // frame * frame].astype(np.float64).reshape(-1, frame)
    voiced: np.ndarray = np.sqrt(np.mean(frames**2, axis=1)) > VOICED_RMS
    return voiced


def _spoken_turns(server: RunningServer) -> list[dict[str, Any]]:
    """The turns the server has logged with a caller's transcript (not a greeting), so far."""
    text = server.turn_log.read_text() if server.turn_log.exists() else ""
    turns = [t for t in map(json.loads, text.splitlines()) if t.get("transcript")]
    return sorted(turns, key=lambda t: t["turn_id"])


async def _turns(server: RunningServer, count: int) -> list[dict[str, Any]]:
    """The spoken turns of the server's one SIP call with speech, once ``count`` are there."""
    deadline = time.monotonic() + 60
    while True:
        turns = _spoken_turns(server)
        if len(turns) >= count or time.monotonic() > deadline:
            return turns
        await asyncio.sleep(0.2)


class Baresip:
    """baresip as the caller, driven through its stdin (``/ausrc``: another WAV as the
    microphone) and watched through its output and its recording of what it hears."""

    def __init__(self, process: asyncio.subprocess.Process, recordings: Path) -> None:
        self.process = process
        self.recordings = recordings
        self.output = b""
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, config: Path, recordings: Path, *options: str) -> Baresip:
        process = await asyncio.create_subprocess_exec(
            "baresip", "-f", str(config), *options,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        return cls(process, recordings)

    @classmethod
    async def dial(cls, config: Path, recordings: Path, uri: str) -> Baresip:
        return await cls.start(config, recordings, "-e", f"/dial {uri}")

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):  # progress lines end in CR
            self.output += chunk

    @property
    def said(self) -> str:
        return self.output.decode(errors="replace")

    @property
    def established(self) -> bool:
        return re.search(rb"Call established", self.output) is not None

    @property
    def hung_up(self) -> bool:
        return re.search(rb"Call with .* terminated", self.output) is not None

    def heard(self) -> np.ndarray:
        """What it has heard so far (PCM16 at the call's rate: 8 kHz for G.711, 48 kHz for
        Opus; the first channel), from the WAV it is still writing."""
        files = sorted(self.recordings.glob("*-dec.wav"))
        if not files:
            return np.zeros(0, np.int16)
        data = files[0].read_bytes()
        start = data.find(b"data", 12, 512)
        body = data[start + 8 :] if start >= 0 else b""
        channels = max(1, int.from_bytes(data[22:24], "little"))  # Opus: decoded in stereo
        samples = np.frombuffer(body[: len(body) // (2 * channels) * 2 * channels], "<i2")
        return samples.reshape(-1, channels)[:, 0]

    async def until(
        self,
        probe: Callable[[], bool],
        timeout_s: float,
        what: str,
        explain: Callable[[], str] | None = None,
    ) -> None:
        """Wait (polling: the recording is a file) until ``probe`` holds. On a timeout,
        ``explain()`` says why (by default, baresip's last output)."""
        deadline = time.monotonic() + timeout_s
        while not probe():
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: {explain() if explain else self.said[-2000:]}")
            await asyncio.sleep(0.1)

    async def speak(self, wav: Path) -> None:
        """From now on the microphone plays ``wav`` (the call ends when it does)."""
        await self.command(f"/ausrc aufile,{wav}")

    async def command(self, line: str) -> None:
        """One of baresip's commands on its stdin (``/hangup``, ``/ausrc ...``)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()
        await self._reader


def _wav(path: Path, *parts: np.ndarray, rate: int = RATE) -> Path:
    write_wav(path, float_to_pcm16(np.concatenate(parts)), rate)
    return path


async def test_baresip_call_is_answered_in_speech_and_barged_in(
    sip: tuple[RunningServer, int], whisper: WhisperStt, tmp_path: Path
) -> None:
    server, port = sip
    question, rate = voiced(QUESTION)
    clip = librivox_clips()[4]
    interruption, clip_rate = read_wav(clip.path)
    said_s = question.shape[0] / rate
    ask = _wav(
        tmp_path / "question.wav",
        resample(question, rate, RATE),
        np.zeros(ANSWER_WAIT_S * RATE, np.float32),  # the caller listens
    )
    talk = resample(interruption, clip_rate, RATE)
    over = _wav(tmp_path / "over.wav", talk, np.zeros(TAIL_S * RATE, np.float32))
    _baresip_config(tmp_path / "baresip", ask, tmp_path / "heard")

    caller = await Baresip.dial(
        tmp_path / "baresip", tmp_path / "heard", f"sip:agent@127.0.0.1:{port}"
    )
    try:
        # Once it has heard a few seconds of the answer, the caller talks over it; it
        # hangs up (BYE) when what it says ends.
        await caller.until(
            lambda: _voiced(caller.heard()).sum() * 0.02 >= HEARD_BEFORE_TALKING_S,
            ANSWER_WAIT_S,
            "an answer was heard",
        )
        talk_at = caller.heard().shape[0] / RATE  # in the recording's time
        await caller.speak(over)
        await caller.until(lambda: caller.hung_up, 60, "the caller hung up")
    finally:
        await caller.close()
    _until_no_calls(server)
    heard = caller.heard()
    voiced_frames = _voiced(heard)

    first, second = (await _turns(server, 2))[:2]
    # The answer, as the caller heard it before talking over it, is the generated answer.
    answer = pcm16_to_float(heard[: int(talk_at * RATE)].tobytes())
    words = without_filler(
        normalised(whisper.transcribe(resample(answer, RATE, STT_SAMPLE_RATE)).text)
    )
    generated = normalised(first["generated"]).split()
    heard_words = words.split()
    # Whisper tiny on 8 kHz G.711 may drop or add a short word, so the generated prefix
    # compared is the closest of those two words either side of the heard length.
    cer = min(
        jiwer.cer(" ".join(generated[:n]), words)
        for n in range(max(1, len(heard_words) - 2), len(heard_words) + 3)
    )
    assert len(heard_words) >= 3 and cer <= 0.3, (words, first["generated"])
    assert letter_error_rate(QUESTION, first["transcript"]) <= 0.2, first

    # The barge-in: the answer was cut, its audio stopped while the caller talked (from a
    # second in: the VAD's and the turn's own time), and what the caller said over it was a
    # turn of its own.
    assert first["status"] == "interrupted", first
    talk_end = talk_at + talk.shape[0] / RATE
    during = voiced_frames[int((talk_at + 1.5) * 50) : int(talk_end * 50)]
    assert during.size and during.sum() * 0.02 <= 0.5, "the answer stopped for the caller"
    assert letter_error_rate(clip.text, second["transcript"]) <= 0.25, second

    answered_at = int(np.argmax(voiced_frames[int(said_s * 50) :])) * 0.02
    print(
        f"sip first answer: {first['voice_to_voice_ms']:.0f} ms from the end of speech "
        f"(server's turn log); heard {answered_at:.2f} s after the question's audio ended "
        "(baresip's recording)"
    )


# -- keypad digits from baresip -------------------------------------------------------------


async def _turn_where(
    server: RunningServer, probe: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """The first turn in the server's turn log that ``probe`` accepts, once it is there."""
    deadline = time.monotonic() + 60
    while True:
        text = server.turn_log.read_text() if server.turn_log.exists() else ""
        found = next((t for t in map(json.loads, text.splitlines()) if probe(t)), None)
        if found is not None:
            return dict(found)
        assert time.monotonic() < deadline, f"no turn: {what}"
        await asyncio.sleep(0.2)


async def test_baresip_keypad_digits_reach_the_agent(
    sip: tuple[RunningServer, int], tmp_path: Path
) -> None:
    server, port = sip
    counted = {d: _metric(server, "voxpipe_dtmf_total", digit=d) for d in "427#"}
    quiet = _wav(tmp_path / "quiet.wav", np.zeros(60 * RATE, np.float32))
    _baresip_config(tmp_path / "baresip", quiet, tmp_path / "heard")
    caller = await Baresip.dial(
        tmp_path / "baresip", tmp_path / "heard", f"sip:agent@127.0.0.1:{port}"
    )
    try:
        await caller.until(lambda: caller.established, 20, "the call was answered")
        for digit in "427#":  # one key press at a time, as a person types
            await caller.command(f"/sndcode {digit}")
            await asyncio.sleep(0.3)
        turn = await _turn_where(
            server,
            lambda t: bool(t.get("session_counts", {}).get("keypad_turns") and t.get("generated")),
            "the keys' turn, answered",
        )
        await caller.command("/hangup")
        await caller.until(lambda: caller.hung_up, 20, "the caller hung up")
    finally:
        await caller.close()
    _until_no_calls(server)

    # Each key counted once (baresip sends each event in several packets, the last three
    # marking its end), and the digits the agent's one turn, in the call's record.
    assert {d: _metric(server, "voxpipe_dtmf_total", digit=d) - counted[d] for d in "427#"} == {
        d: 1 for d in "427#"
    }
    assert turn["session_counts"]["keypad_turns"] == 1, turn
    call = show_call(server.store_path, turn["session_id"])
    assert call is not None
    said = [m["text"] for m in call["messages"] if m["role"] == "user"]
    assert said == ["Keypad: 427"], call["messages"]


# -- Opus -----------------------------------------------------------------------------------

OPUS_RATE = 48000


async def test_baresip_call_in_opus_gets_a_spoken_answer(
    sip: tuple[RunningServer, int], whisper: WhisperStt, tmp_path: Path
) -> None:
    server, port = sip
    question, rate = voiced("What is the capital of France?")
    ask = _wav(
        tmp_path / "question.wav",
        resample(question, rate, OPUS_RATE),
        np.zeros(ANSWER_WAIT_S * OPUS_RATE, np.float32),
        rate=OPUS_RATE,
    )
    heard_at = tmp_path / "heard"
    _baresip_config(tmp_path / "baresip", ask, heard_at, codecs=("opus",), rate=OPUS_RATE)
    caller = await Baresip.dial(tmp_path / "baresip", heard_at, f"sip:agent@127.0.0.1:{port}")
    try:
        await caller.until(lambda: caller.established, 20, "the call was answered")
        # The answer's turn done (its audio all sent), then heard out: a second of quiet.
        turn = await _turn_where(
            server,
            lambda t: "capital" in t.get("transcript", "").lower() and bool(t.get("generated")),
            "the question's, answered",
        )
        await caller.until(
            lambda: not _voiced(caller.heard(), OPUS_RATE)[-50:].any(), 20, "the answer ended"
        )
        await caller.command("/hangup")
        await caller.until(lambda: caller.hung_up, 20, "the caller hung up")
    finally:
        await caller.close()
    _until_no_calls(server)
    assert re.search(r"opus", caller.said, re.IGNORECASE), caller.said[-2000:]

    heard = pcm16_to_float(caller.heard().tobytes())
    words = normalised(whisper.transcribe(resample(heard, OPUS_RATE, STT_SAMPLE_RATE)).text)
    # A loaded machine says the filler ("One moment.") before the answer: not the answer.
    answer = without_filler(words)
    generated = normalised(turn["generated"])
    assert answer and jiwer.cer(generated, answer) <= 0.3, (words, turn["generated"])
