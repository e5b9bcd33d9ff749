"""Simulated callers for ``voxpipe load``: real speech at real-time pace, then listening.

Each caller is one native-protocol call (``NativeClient``). It alternates the
two halves of a phone conversation: it says a real recorded sentence (sent at
real-time pace, with the line's silence around it), waits until the agent's
reply has finished playing, thinks for a moment, and speaks again, until the
step's end. Callers start staggered, so their speech and the agent's replies
overlap the way independent callers do.

A call the server refuses at the door (close 1013: ``at_capacity``,
``server_shutdown``, ``server_not_ready``) is *rejected*, the outcome admission
control promises; any other failure of the connection is a *crash*.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient, TurnResult

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
TRY_AGAIN_LATER = 1013
REFUSED_CODE = re.compile(r"'code': '([a-z_]+)'")
# Errors after which the server closes the call: the caller stops waiting for replies.
FATAL_CODES = frozenset(
    {"idle_timeout", "max_duration", "slow_consumer", "server_shutdown", "session_replaced"}
)


@dataclass(frozen=True)
class Clip:
    name: str
    text: str
    audio: np.ndarray
    rate: int

    @property
    def seconds(self) -> float:
        return float(self.audio.shape[0] / self.rate)


def librivox_clips(folder: Path = LIBRIVOX) -> list[Clip]:
    """The LibriVox sentences of Debian's pocketsphinx-testdata, with their transcripts."""
    index = folder / "transcription"
    if not index.is_file():
        raise SystemExit(f"missing speech clips in {folder}: run `make sysdeps`")
    clips = []
    for line in index.read_text().splitlines():
        text, _, key = line.rpartition("(")
        key = key.strip(" )")
        audio, rate = read_wav(folder / f"{key}.wav")
        clips.append(Clip(key, text.replace("<s>", "").replace("</s>", "").strip(), audio, rate))
    return sorted(clips, key=lambda c: c.name)


@dataclass(frozen=True)
class CallerPlan:
    """How the simulated callers behave; the defaults are a patient, ordinary caller."""

    think_s: tuple[float, float] = (0.5, 2.0)  # pause after the reply finished playing
    stagger_s: float = 1.5  # between caller starts (shrunk so all start in the first half)
    turn_timeout_s: float = 60.0  # a reply not done this long after the speech: failed turn

    def start_offsets(self, calls: int, duration_s: float) -> list[float]:
        """When each caller dials, seconds after the step starts."""
        gap = min(self.stagger_s, duration_s / (2 * max(1, calls)))
        return [i * gap for i in range(calls)]


@dataclass
class CallerTurn:
    """One utterance and its reply, as the caller and the server measured it."""

    call: int
    clip: str
    status: str  # response.done status, or "timeout" when no reply finished in time
    started_s: float  # when the caller began to speak, seconds after the step start
    v2v_ms: float | None = None  # end of speech sent -> first reply audio received
    server_v2v_ms: float | None = None
    queue_ms: dict[str, float] = field(default_factory=dict)  # per engine, from turn.metrics
    transcript: str = ""

    @classmethod
    def of(cls, call: int, clip: str, started_s: float, turn: TurnResult) -> CallerTurn:
        metrics = turn.metrics
        queue = metrics.get("queue_ms") or {
            k: v * 1000 for k, v in (metrics.get("queue_s") or {}).items()
        }
        return cls(
            call=call,
            clip=clip,
            status=turn.status or "unknown",
            started_s=started_s,
            v2v_ms=turn.voice_to_voice_ms,
            server_v2v_ms=metrics.get("voice_to_voice_ms"),
            queue_ms={k: float(v) for k, v in queue.items() if v is not None},
            transcript=turn.transcript,
        )


@dataclass
class CallerResult:
    """One simulated call: admitted and run, refused at the door, or broken."""

    index: int
    outcome: str  # "completed", "rejected" or "crashed"
    reason: str = ""  # the refusal's error code, or what broke
    turns: list[CallerTurn] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error codes received during the call


def refusal_code(exc: BaseException, client: NativeClient) -> str | None:
    """The error code of a refusal at connect, or None when ``exc`` is no refusal.

    The server sends an ``error`` event and closes with 1013; the client may see the
    closed socket before it reads the event, so a still-buffered event is read here.
    """
    if isinstance(exc, RuntimeError):  # NativeClient saw the error event instead of started
        found = REFUSED_CODE.search(str(exc))
        return found.group(1) if found else None
    if isinstance(exc, websockets.ConnectionClosed):
        if exc.rcvd is None or exc.rcvd.code != TRY_AGAIN_LATER:
            return None
        return "try_again_later"
    return None


async def buffered_error_code(client: NativeClient) -> str | None:
    """The code of an ``error`` event still in the closed socket's receive buffer."""
    ws: Any = getattr(client, "_ws", None)  # NativeClient has no public hook for this
    if ws is None:
        return None
    with contextlib.suppress(Exception):
        message = await asyncio.wait_for(ws.recv(), 1.0)
        event = json.loads(message)
        if isinstance(event, dict) and event.get("type") == "error":
            return str(event.get("code"))
    return None


def _line_down(client: NativeClient) -> bool:
    """The connection is gone: the client's reader or sender task has ended (the server
    closed the socket), or the server said it is ending the call."""
    tasks: list[asyncio.Task[None]] = getattr(client, "_tasks", [])
    return any(t.done() for t in tasks) or any(e.get("code") in FATAL_CODES for e in client.errors)


async def _speak(client: NativeClient, clip: Clip, timeout_s: float) -> TurnResult:
    """``client.speak``, given up at once when the connection goes down."""
    speaking = asyncio.create_task(client.speak(clip.audio, clip.rate, timeout_s=timeout_s))
    watching = asyncio.create_task(client.wait_for(lambda: _line_down(client), 24 * 3600))
    try:
        done, _ = await asyncio.wait({speaking, watching}, return_when=asyncio.FIRST_COMPLETED)
        if speaking in done:
            return speaking.result()
        raise ConnectionError("the connection closed during the call")
    finally:
        for task in (speaking, watching):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def run_caller(
    index: int,
    url: str,
    clips: list[Clip],
    plan: CallerPlan,
    origin: float,
    start_s: float,
    stop_s: float,
    rng: random.Random,
) -> CallerResult:
    """Dial at ``origin + start_s``, talk until ``origin + stop_s`` (monotonic seconds),
    finish the turn in progress, and hang up."""
    await asyncio.sleep(max(0.0, origin + start_s - time.monotonic()))
    result = CallerResult(index, "completed")
    client = NativeClient(url)
    try:
        try:
            await client.connect()
        except (RuntimeError, websockets.ConnectionClosed) as exc:
            code = refusal_code(exc, client)
            if code is None:
                raise
            if code == "try_again_later":
                code = await buffered_error_code(client) or code
            result.outcome, result.reason = "rejected", code
            return result
        while time.monotonic() - origin < stop_s:
            clip = clips[rng.randrange(len(clips))]
            started = time.monotonic() - origin
            try:
                turn = await _speak(client, clip, plan.turn_timeout_s)
            except TimeoutError:
                result.turns.append(CallerTurn(index, clip.name, "timeout", started))
                continue
            result.turns.append(CallerTurn.of(index, clip.name, started, turn))
            await asyncio.sleep(rng.uniform(*plan.think_s))
    except Exception as exc:
        result.outcome, result.reason = "crashed", f"{type(exc).__name__}: {exc}"
    finally:
        result.errors = [str(e.get("code")) for e in client.errors]
        with contextlib.suppress(Exception):
            await client.close()
    return result


async def run_callers(
    url: str,
    calls: int,
    duration_s: float,
    clips: list[Clip],
    plan: CallerPlan,
    seed: int = 0,
) -> list[CallerResult]:
    """``calls`` staggered callers talking for ``duration_s``; one result per call."""
    origin = time.monotonic()
    offsets = plan.start_offsets(calls, duration_s)
    return list(
        await asyncio.gather(
            *(
                run_caller(
                    i, url, clips, plan, origin, offsets[i], duration_s, random.Random(seed + i)
                )
                for i in range(calls)
            )
        )
    )
