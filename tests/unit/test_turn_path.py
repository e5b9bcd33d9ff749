"""The path of one Twilio turn, frame in to first frame out, measured (issue 28).

One Media Streams call on the real app, served in-process on the fake engines, and a
profiler (``sys.setprofile`` and ``threading.setprofile``: Python 3.11 has no
``sys.monitoring``) on every thread from the moment the caller's first ``media`` frame is
handed to the server until the first ``media`` frame of the reply is written to its socket.
What it records: each module of the package in which a function is entered (called, or a
coroutine or generator resumed), in the order first entered, with that function; and each
call back up a layer: a function of a higher layer (the layers contract in
``pyproject.toml``) called directly by one of a lower layer, which is what an injected
callback is. Control that comes back up through the event loop (a future, a queue) is no
call. The fake engines stand in for the engine stage: named, not counted.

The test keeps both numbers from growing; ``python -m tests.unit.test_turn_path`` prints
the path, as docs/architecture.md quotes it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import sys
import threading
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

import httpx
import numpy as np
import uvicorn
import websockets
from starlette.websockets import WebSocket

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.audio.pcm import ulaw_encode
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.server import lifecycle
from voxpipe.server.app import create_app

# Issue 28 asks for <= 25 modules and <= 3 calls back up a layer. These are the measured
# numbers, a ceiling so that the path cannot grow back (lower them if it shrinks).
MODULES_BOUND = 25
MODULES_TODAY = 25  # at the bound
UP_CALLS_BOUND = 3
UP_CALLS_TODAY = 2  # within the bound

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT, DOC = ROOT / "pyproject.toml", ROOT / "docs" / "architecture.md"
FAKES = "tests.unit.fakes"
# The fake engines' classes, by the stage each stands in for.
STAGES = {"FakeVad": "vad", "FakeVadStream": "vad", "FakeStt": "stt", "FakeLlm": "llm",
          "FakeTts": "tts"}  # fmt: skip
SID, CALL, ACCOUNT = "MZ" + "a" * 32, "CA" + "b" * 32, "AC" + "c" * 32
LOUD = ulaw_encode(np.full(160, 16384, dtype="<i2").tobytes())  # 20 ms the fake VAD hears
QUIET = ulaw_encode(bytes(320))
# 0.5 s of speech, then 0.36 s of silence: past preempt_ms (0.2 s), a held reply answers the
# turn so far; then 0.44 s more, past silence_ms (0.5 s): the turn ends, the reply goes out.
SPEECH_FRAMES, PAUSE_FRAMES, SILENCE_FRAMES = 25, 18, 22
TIMEOUT_S = 20.0
SEND_TEXT = WebSocket.send_text.__code__


def layer_ranks() -> dict[str, int]:
    """Each package of the layers contract and its height: 0 for the lowest."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = (c["layers"] for c in contracts if c["type"] == "layers")
    return {
        name.strip(): len(layers) - 1 - i
        for i, entry in enumerate(layers)
        for name in entry.split("|")
    }


@dataclass(frozen=True)
class Step:
    """A module first entered on the path, and the function it was entered by; for an
    engine the fakes stand in for, ``module`` is empty and ``stage`` names it."""

    module: str
    function: str
    stage: str = ""

    def __str__(self) -> str:
        if self.stage:
            return f"the {self.stage} engine (the test's {self.function})"
        return f"{self.module.removeprefix('voxpipe.').replace('.', '/')}.py  {self.function}"


@dataclass(frozen=True)
class UpCall:
    """A direct call from a function of a lower layer to one of a higher layer."""

    caller: Step
    callee: Step

    def __str__(self) -> str:
        return f"{self.caller}  ->  {self.callee}"


@dataclass
class TurnPath:
    steps: list[Step] = field(default_factory=list)
    up_calls: dict[UpCall, int] = field(default_factory=dict)  # and how many times each ran
    writer: Step | None = None  # the function of the package that wrote the first frame out

    @property
    def modules(self) -> list[str]:
        return [s.module for s in self.steps if not s.stage]

    def listing(self) -> list[str]:
        """The numbered modules, each with the function first entered, in order."""
        out, number = [], 0
        for step in self.steps:
            if step.stage:
                out.append(f"     {step}")
            else:
                number += 1
                out.append(f"{number:>3}. {step}")
        return out

    def lines(self) -> list[str]:
        return [
            "One Twilio turn, frame in to first frame out:",
            *self.listing(),
            f"{len(self.modules)} modules (issue 28: <= {MODULES_BOUND}); "
            f"{len(self.up_calls)} calls back up a layer (<= {UP_CALLS_BOUND}):",
            *(f"  {call}  ({n}x)" for call, n in self.up_calls.items()),
        ]


def documented_path() -> list[str]:
    """The listing as docs/architecture.md quotes it: the first block of its section."""
    text = DOC.read_text().split("\n## One Twilio turn, frame in to first frame out\n")[1]
    return text.split("```\n")[1].splitlines()


class PathRecorder:
    """The profile function: records while ``on``, and turns itself off when the first
    ``media`` message is written to a socket (then ``done`` is set)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ranks = layer_ranks()
        self.path = TurnPath()
        self.on = False
        self.done = asyncio.Event()
        self._loop = loop
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._aside: int | None = None  # the thread running a probe of the test's own

    def aside(self, probe: Callable[[], bool]) -> bool:
        """``probe()``, unrecorded: the test looking at the server, no part of the path."""
        self._aside = threading.get_ident()
        try:
            return probe()
        finally:
            self._aside = None

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.on or event != "call" or self._aside == threading.get_ident():
            return
        if frame.f_code is SEND_TEXT:
            if json.loads(frame.f_locals["data"]).get("event") == "media":
                self.on = False
                self.path.writer = self._caller(frame)
                self._loop.call_soon_threadsafe(self.done.set)
            return
        step = self._step(frame)
        if step is None:
            return
        with self._lock:
            key = step.stage or step.module
            if key not in self._seen:
                self._seen.add(key)
                self.path.steps.append(step)
            caller = self._caller(frame)
            if caller is not None and self._rank(caller) < self._rank(step):
                up = UpCall(caller, step)
                self.path.up_calls[up] = self.path.up_calls.get(up, 0) + 1

    def _step(self, frame: FrameType) -> Step | None:
        module = frame.f_globals.get("__name__", "")
        name = frame.f_code.co_qualname
        if name.startswith("__create_fn__"):  # a dataclass's generated method
            name = f"{type(frame.f_locals['self']).__qualname__}.{frame.f_code.co_name}"
        if module == FAKES:
            stage = STAGES.get(name.split(".")[0])
            return None if stage is None else Step("", name, stage)
        return Step(module, name) if module.startswith("voxpipe.") else None

    def _caller(self, frame: FrameType) -> Step | None:
        """The nearest function of the package (or a fake engine) up the stack: what
        called this one directly or through the standard library, never the loop."""
        up = frame.f_back
        while up is not None:
            if (step := self._step(up)) is not None:
                return step
            up = up.f_back
        return None

    def _rank(self, step: Step) -> int:
        module = "voxpipe.engines" if step.stage else step.module
        while module not in self.ranks:
            module = module.rpartition(".")[0]
        return self.ranks[module]


@contextlib.contextmanager
def profiled(recorder: PathRecorder) -> Iterator[None]:
    """The recorder on this thread and on every thread started meanwhile (the runners')."""
    before, before_threads = sys.getprofile(), threading.getprofile()
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        yield
    finally:
        sys.setprofile(before)
        threading.setprofile(before_threads)


def engines(config: Config) -> Engines:
    return Engines(FakeVad(), FakeStt(), FakeLlm(), FakeTts())


@contextlib.asynccontextmanager
async def served(recorder: PathRecorder) -> AsyncIterator[tuple[int, Any]]:
    """The app on the fakes, on a port of its own, once ready; its port and its state. No deadline
    can miss (the profiler slows the turn: a miss would add the filler) and the call's
    watchdog, which is not on the turn's path, sleeps through it."""
    config = Config.load(
        server={"turn_log_path": None},
        store={"path": None},
        deadlines={
            "stt_ms": 60_000,
            "llm_first_token_ms": 60_000,
            "tts_first_chunk_ms": 60_000,
            "filler_ms": 60_000,
        },
    )
    app = create_app(config, engines)
    listening = socket.create_server(("127.0.0.1", 0))  # its own port: no other can take it
    port = listening.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    with mock.patch.object(lifecycle, "WATCH_INTERVAL_S", 3600.0), profiled(recorder):
        task = asyncio.create_task(server.serve(sockets=[listening]))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                while True:
                    if server.started and (await http.get("/readyz")).is_success:
                        break
                    await asyncio.sleep(0.02)
            yield port, app.state.voxpipe
        finally:
            server.should_exit = True
            await task
            listening.close()


async def trace_turn() -> TurnPath:
    """One Twilio turn's path: the stream starts, and once its session is set up and the
    engines idle, the caller speaks and the recorder runs until the reply's first frame."""
    recorder = PathRecorder(asyncio.get_running_loop())
    async with asyncio.timeout(TIMEOUT_S), served(recorder) as (port, state):
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/twilio") as ws:
            number = 0

            async def send(event: str, **body: Any) -> None:
                nonlocal number
                number += 1
                head = {"event": event, "sequenceNumber": str(number), "streamSid": SID}
                await ws.send(json.dumps({**head, **body}))

            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1"}))
            fmt = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
            ids = {"streamSid": SID, "accountSid": ACCOUNT, "callSid": CALL}
            await send("start", start={**ids, "tracks": ["inbound"], "mediaFormat": fmt})
            await until(lambda: state.calls.find_attached(SID) is not None and idle(state))
            session = state.calls.find_attached(SID).session
            frames = [LOUD] * SPEECH_FRAMES + [QUIET] * (PAUSE_FRAMES + SILENCE_FRAMES)
            paused = SPEECH_FRAMES + PAUSE_FRAMES
            recorder.on = True
            for i in range(paused):
                await send("media", media=media(i, frames[i]))
            await until(lambda: recorder.aside(lambda: held_and_ready(session)))
            for i in range(paused, len(frames)):
                await send("media", media=media(i, frames[i]))
            await recorder.done.wait()
    return recorder.path


def media(i: int, ulaw: bytes) -> dict[str, str]:
    """The ``media`` body of the stream's frame ``i``, 20 ms each."""
    payload = base64.b64encode(ulaw).decode()
    return {"track": "inbound", "chunk": str(i + 1), "timestamp": str(20 * i), "payload": payload}


def idle(state: Any) -> bool:
    runners = state.services.runners
    return all(r.idle for r in (runners.vad, runners.stt, runners.llm, runners.tts))


def held_and_ready(session: Any) -> bool:
    """The held reply has done all its work (transcript, words, voice) and holds its first
    frame until the turn ends: the path the default settings take, whatever the timing."""
    held = session.replies.turns.held
    return held is not None and held._audio is not None and held._audio._holding is not None


async def until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110  # polls the server's state
        await asyncio.sleep(0.005)


async def test_one_twilio_turn_stays_within_its_modules_and_calls_back_up() -> None:
    path = await trace_turn()
    modules = path.modules
    assert modules[0] == "voxpipe.transports.telephony.media_stream", "the frame comes in there"
    assert path.writer is not None and path.writer.module == "voxpipe.transports.base", (
        "the first frame goes out there"
    )
    assert [s.stage for s in path.steps if s.stage] == ["vad", "stt", "llm", "tts"]
    assert len(set(modules)) == len(modules)
    report = "\n".join(path.lines())
    modules_now, up_calls_now = len(modules), len(path.up_calls)
    assert modules_now <= MODULES_TODAY, f"the turn crosses more modules than before\n{report}"
    assert up_calls_now <= UP_CALLS_TODAY, f"more calls back up a layer than before\n{report}"
    # The ceiling only comes down: a shorter path lowers it, until the bounds hold.
    assert modules_now == MODULES_TODAY or modules_now <= MODULES_BOUND, (
        f"the path is down to {modules_now} modules: set MODULES_TODAY to it"
    )
    assert up_calls_now == UP_CALLS_TODAY or up_calls_now <= UP_CALLS_BOUND, (
        f"down to {up_calls_now} calls back up a layer: set UP_CALLS_TODAY to it"
    )
    assert path.listing() == documented_path(), "docs/architecture.md quotes the path as it is"


def main() -> None:
    """Print the path (``python -m tests.unit.test_turn_path``)."""
    print("\n".join(asyncio.run(trace_turn()).lines()))


if __name__ == "__main__":
    main()
