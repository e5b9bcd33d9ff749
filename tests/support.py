"""Test helpers: real speech clips with transcripts, a real server in a subprocess, and the
causal order a turn's timeline must keep."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from voxpipe.clients.native_client import NativeClient
from voxpipe.loadtest.server_process import ServerProcess

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")
ALSA = Path("/usr/share/sounds/alsa")


def _transcripts(folder: Path, name: str) -> dict[str, str]:
    out = {}
    for line in (folder / name).read_text().splitlines():
        text, _, key = line.rpartition("(")
        out[key.strip(" )")] = text.replace("<s>", "").replace("</s>", "").strip()
    return out


@dataclass(frozen=True)
class Clip:
    path: Path
    text: str


def librivox_clips() -> list[Clip]:
    if not LIBRIVOX.is_dir():
        pytest.fail("Debian's pocketsphinx-testdata is missing: run `make sysdeps`")
    texts = _transcripts(LIBRIVOX, "transcription")
    return [Clip(LIBRIVOX / f"{k}.wav", v) for k, v in sorted(texts.items())]


RunningServer = ServerProcess

# Instructions the turn-taking tests give a call: a reply long enough to barge in on, or short.
STORYTELLER = (
    "You are a storyteller on a phone call. Whatever the caller says, answer with a long story "
    "of at least six full sentences."
)
BRIEF = "You are a voice assistant. Answer every message with one short sentence."


def normalised(text: str) -> str:
    """Lower case, no punctuation or hyphens: what a word error rate compares."""
    import jiwer

    return str(jiwer.RemovePunctuation()(text.lower().replace("-", " "))).strip()


def letter_error_rate(reference: str, heard: str) -> float:
    """How far ``heard`` is from ``reference``, letter by letter, spaces and punctuation aside.

    Whisper tiny's near misses over a phone line ("am you or" for "amiable", "old sposed" for
    "ill disposed", "stock room" for "stockroom") cost a few letters here, where a word error
    rate counts each as one to three whole words wrong and an 8-word sentence fails on two.
    A wrong sentence, half a sentence or nothing still scores far above the bounds the tests
    use (0.2-0.3)."""
    import jiwer

    def letters(text: str) -> str:
        return normalised(text).replace(" ", "")

    return float(jiwer.cer(letters(reference), letters(heard) or "-"))


def without_filler(words: str) -> str:
    """``words`` (normalised) less the filler ("One moment.") that a server says when the
    answer's first word is late, as on a loaded machine: the filler is not the answer."""
    from voxpipe.config import Config

    return " ".join(words.replace(normalised(Config().deadlines.filler), " ").split())


def start_server(tmp: Path, env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess.start(tmp, env=env)


def wait_ready(server: ServerProcess, timeout_s: float = 300) -> None:
    server.wait_ready(timeout_s)


def stop_server(server: ServerProcess) -> None:
    server.stop()


def serving(tmp: Path, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """A server for a module fixture to ``yield from``: started, ready, stopped after."""
    server = start_server(tmp, env)
    try:
        wait_ready(server)
        yield server
    finally:
        stop_server(server)


async def history_of(client: NativeClient) -> dict[str, Any]:
    """Ask the server for the conversation as the LLM will see it next turn."""
    before = len(client.events)
    await client.send_raw(json.dumps({"type": "history.get"}))

    def probe() -> dict[str, Any] | None:
        return next((e for e in client.events[before:] if e["type"] == "history"), None)

    result: dict[str, Any] = await client.wait_for(probe, 10)
    return result


async def assert_server_up(server: ServerProcess) -> None:
    """The process is alive and answers ``/healthz``."""
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.get(f"{server.http}/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "alive"
    assert server.alive(), server.log_path.read_text()[-4000:]


async def metrics_text(server: ServerProcess) -> str:
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.get(f"{server.http}/metrics")
    assert response.status_code == 200
    return response.text


# What must precede what in a turn's timeline (``observability/timeline.py``). A preempted
# turn (STT and LLM begun during the caller's pause) may reach stt_done, the first token,
# even the first TTS audio, before eot: causality still holds, and no audio is sent before
# the end of the turn.
CAUSAL_CHAIN: tuple[str, ...] = (
    "speech_end", "stt_done", "llm_request", "llm_first_token", "first_clause",
    "tts_first_chunk", "first_audio_sent", "response_done",
)  # fmt: skip
EOT_CHAIN: tuple[str, ...] = ("speech_end", "eot", "first_audio_sent")


def order_violations(offsets_ms: dict[str, float]) -> list[str]:
    """Pairs of recorded stages out of causal order (empty when the timeline is sound)."""
    bad = []
    for chain in (CAUSAL_CHAIN, EOT_CHAIN):
        present = [s for s in chain if s in offsets_ms]
        bad += [
            f"{a} ({offsets_ms[a]}) after {b} ({offsets_ms[b]})"
            for a, b in itertools.pairwise(present)
            if offsets_ms[a] > offsets_ms[b]
        ]
    return bad


def metric_value(text: str, sample: str) -> float | None:
    """One sample of a Prometheus text page, e.g. ``voxpipe_calls{state="connected"}``."""
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def tracebacks(log: str) -> list[str]:
    """Every traceback in a server log: the line before it (what was logged), its frames, and
    the exception line. A server that handles bad input logs none."""
    lines = log.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last):"):
            end = i + 1
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                end += 1
            found.append("\n".join(lines[max(0, i - 1) : end + 1]))
    return found


async def until_closed(ws: Any, timeout_s: float) -> tuple[list[Any], int, str]:
    """Every JSON message a WebSocket client gets until the server closes it: (messages,
    close code, close reason). Fails if the server never closes, or closes without a frame."""
    received = []
    with pytest.raises(websockets.ConnectionClosed) as closing:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await ws.recv()
                if isinstance(message, str):
                    received.append(json.loads(message))
    rcvd = closing.value.rcvd
    assert rcvd is not None, "closed without a close frame"
    return received, rcvd.code, rcvd.reason


def voiced(text: str) -> tuple[np.ndarray, int]:
    """``text`` in Piper's voice (float32, its own rate), with 0.3 s of silence around it.

    Without Piper's random noise, so a test's caller says the same audio on every run: with
    it, each run's audio differed, and so did what Whisper heard (a name lost now and then)."""
    from voxpipe.engines.base import CancelToken
    from voxpipe.engines.piper_tts import PiperTts

    tts = PiperTts(None, threads=1, noise_scale=0.0, noise_w_scale=0.0)
    pcm = np.concatenate(list(tts.synthesize(text, CancelToken())))
    pad = np.zeros(tts.sample_rate * 3 // 10, np.float32)
    return np.concatenate([pad, pcm.astype(np.float32) / 32768.0, pad]), tts.sample_rate


# What no spoken reply may hold: JSON, code, markdown, tool syntax, field names.
_MARKUP_SIGNS = (
    (re.compile(r"[{}\[\]<>`\"\\|#*_]"), "a brace, bracket, tag, quote or markdown sign"),
    (re.compile(r"tool_call|tool_response", re.IGNORECASE), "tool syntax"),
    (re.compile(r"\b[a-z]\w*\s*:\s*(?:true|false|null|\d)", re.IGNORECASE), "a field: value pair"),
    (re.compile(r"\b(?:ok|success|booked|confirmed)\s+(?:true|false)\b", re.I), "a read record"),
    (re.compile(r"\b[a-z]\w*\(.*\)", re.IGNORECASE), "a function call"),
)


def assert_spoken(text: str) -> None:
    """``text``, a reply the caller heard (or its transcript), is words: it holds no JSON,
    code, markdown, tool syntax or field names, which a TTS would read aloud."""
    for pattern, what in _MARKUP_SIGNS:
        found = pattern.search(text)
        assert found is None, f"the spoken reply holds {what} ({found.group()!r}): {text!r}"


def free_sip_port() -> int:
    """A loopback port free for UDP and for TCP at once: a SIP server listens on both, and
    a port only checked for UDP may be held on TCP (another test's connection)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with socket.socket() as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
