"""Tools that go wrong, on a real server with the real models: every failure is a typed
result the caller hears an answer to, and the call goes on.

- A badly defined tool stops ``voxpipe serve`` (and ``voxpipe agent``) before any model
  loads, with one line that names the tool and the problem, and exit code 2.
- ``bad_tools_agent.py`` served on the embedded models, over the native protocol with
  Piper-voiced requests: a tool that raises ends as ``tool.finished`` ``error`` with the
  exception, one that runs past ``timeout_s`` as ``timeout`` and the agent says its
  ``timeout_phrase`` (heard back with Whisper); both are counted in ``voxpipe_tool_*``, the
  next turn's tool answers normally on the same connection, and nothing is left running.
  Both of the agent's MCP servers are down: the server starts, logs each, and runs without
  their tools.
- A remote model (a scripted OpenAI-compatible endpoint) that writes arguments that are not
  JSON, arguments the schema refuses, or a tool that does not exist: each call is answered
  with its error, which the model is shown on its next request, and the caller hears the
  model's answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.e2e.bad_tools_agent import STOCK_TIMEOUT_S, WEATHER_FAILURE
from tests.e2e.scripted_llm import ScriptedModel, serving
from tests.support import (
    RunningServer,
    assert_server_up,
    metric_value,
    metrics_text,
    start_server,
    stop_server,
    tracebacks,
    wait_ready,
)
from voxpipe.audio.pcm import pcm16_to_float
from voxpipe.clients.native_client import NativeClient, TurnResult
from voxpipe.config import Config
from voxpipe.conversation.spoken import result_for_model
from voxpipe.engines.base import CancelToken
from voxpipe.engines.loader import load_stt
from voxpipe.loadtest.server_process import free_port

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).with_name("bad_tools_agent.py")
REQUESTS = {
    "weather": "What is the weather like in Paris today?",
    "stock": "Do you have any umbrellas in stock?",
    "hours": "What are your opening hours on Monday?",
}
OUTPUT_RATE = 16_000  # the reply audio as Whisper takes it
TURN_TIMEOUT_S = 120.0
CLI_TIMEOUT_S = 120.0
SLOW_START_S = 600.0  # the embedded models, warmed with the agent's tools, on shared cores

# -- a badly defined tool stops the start ---------------------------------------------

UNTYPABLE = """\
from voxpipe.agent import Agent, tool

class Opaque:
    pass

@tool
async def lookup(thing: Opaque) -> str:
    \"\"\"Look a thing up.\"\"\"
    return ""

agent = Agent("Be brief.", tools=[lookup])
"""
DUPLICATE = """\
from voxpipe.agent import Agent, HttpToolConfig, tool

@tool
def hours(day: str) -> str:
    \"\"\"Opening hours.\"\"\"
    return "nine to six"

webhook = HttpToolConfig(name="hours", description="Hours.", url="http://127.0.0.1:9/hours")
agent = Agent("Be brief.", tools=[hours], http_tools=[webhook], name="desk")
"""
FINE = """\
from voxpipe.agent import Agent

agent = Agent("Be brief.")
"""
INVALID_URL = """\
instructions: Be brief.
http_tools:
  - name: hours
    description: Opening hours.
    url: "http://[::1"
"""
BAD_SCHEMA = """\
instructions: Be brief.
http_tools:
  - name: hours
    description: Opening hours.
    url: http://127.0.0.1:9/hours
    parameters: {type: object, properties: {day: {type: text}}}
"""
BAD_AGENTS = {  # file name, its text, the reference's suffix, what the one line says
    "untypable": (
        "untypable_agent.py",
        UNTYPABLE,
        ":agent",
        "ToolDefinitionError: tool lookup: parameter thing: its type Opaque has no JSON schema",
    ),
    "duplicate": ("duplicate_agent.py", DUPLICATE, ":agent", "two tools are named hours"),
    "invalid_url": (
        "invalid_url.yaml",
        INVALID_URL,
        "",
        "http_tools.0.url: Value error, not a valid URL",
    ),
    "bad_schema": (
        "bad_schema.yaml",
        BAD_SCHEMA,
        "",
        "http_tools.0.parameters: Value error, tool hours: invalid parameters schema",
    ),
    "missing_attr": ("fine_agent.py", FINE, ":front_desk", "fine_agent.py has no 'front_desk'"),
}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxpipe.cli", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("command", ["serve", "agent"])
@pytest.mark.parametrize("case", sorted(BAD_AGENTS))
def test_a_badly_defined_tool_stops_the_start_with_one_line(
    tmp_path: Path, case: str, command: str
) -> None:
    name, text, suffix, problem = BAD_AGENTS[case]
    path = tmp_path / name
    path.write_text(text)
    ref = f"{path}{suffix}"
    extra = ["--port", str(free_port())] if command == "serve" else []
    done = _cli(command, "--agent", ref, *extra)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("voxpipe: agent"), lines[0]
    assert problem in lines[0], lines[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert "loading and warming models" not in done.stdout, "models began to load"


# -- the embedded models: a tool that raises, one that times out, MCP servers down ---


@pytest.fixture(scope="module")
def spoken() -> dict[str, tuple[np.ndarray, int]]:
    """Each request in Piper's voice, with a little silence around it."""
    from voxpipe.engines.piper_tts import PiperTts

    tts = PiperTts(None, threads=1, noise_scale=0.0, noise_w_scale=0.0)  # the same each run
    pad = np.zeros(tts.sample_rate * 3 // 10, np.float32)
    voiced = {}
    for key, text in REQUESTS.items():
        pcm = np.concatenate(list(tts.synthesize(text, CancelToken())))
        voiced[key] = (
            np.concatenate([pad, pcm.astype(np.float32) / 32768.0, pad]),
            tts.sample_rate,
        )
    return voiced


def _agent_env() -> dict[str, str]:
    return {
        "VOXPIPE_AGENT": f"{AGENT}:agent",
        "BAD_TOOLS_MCP_URL": f"http://127.0.0.1:{free_port()}/mcp",  # nothing listens there
    }


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The bad tools' agent on the embedded models, set up for cores it shares with the
    rest of the suite (docs/architecture.md, "Shared cores"); its start includes the tool
    path's warm-up on the LLM."""
    env = {**_agent_env(), "VOXPIPE_LLM__THREADS": "1", "VOXPIPE_STT__THREADS": "1"}
    server = start_server(tmp_path_factory.mktemp("shop"), env=env)
    try:
        wait_ready(server, SLOW_START_S)
        yield server
    finally:
        stop_server(server)


def _of(turn: TurnResult, kind: str, tool: str) -> list[dict[str, Any]]:
    """The turn's ``kind`` events for ``tool``; at least one."""
    found = [e for e in turn.events if e["type"] == kind and e["name"] == tool]
    kinds = [(e["type"], e.get("name")) for e in turn.events]
    assert found, (turn.transcript, kinds)
    return found


def _one(turn: TurnResult, kind: str, tool: str) -> dict[str, Any]:
    """The turn's only ``kind`` event for ``tool``."""
    (found,) = _of(turn, kind, tool)
    return found


def _assert_answered(turn: TurnResult, rate: int) -> None:
    """The turn ended as usual: a reply in words, spoken after the tool's result."""
    kinds = [e["type"] for e in turn.events]
    assert turn.status == "completed", turn.done
    assert turn.reply.strip(), turn.done
    assert kinds.index("tool.finished") < kinds.index("response.done"), kinds
    assert len(turn.audio) / 2 / rate > 0.5, "no spoken answer"
    assert turn.metrics["tools"], turn.metrics


@dataclass
class ToolCounts:
    """``voxpipe_tool_calls_total`` and ``voxpipe_tool_seconds`` for one tool and status."""

    calls: float = 0.0
    seconds_count: float = 0.0
    seconds_sum: float = 0.0

    @classmethod
    def read(cls, page: str, tool: str, status: str) -> ToolCounts:
        labels = f'{{status="{status}",tool="{tool}"}}'  # the client sorts them
        return cls(
            metric_value(page, f"voxpipe_tool_calls_total{labels}") or 0.0,
            metric_value(page, f"voxpipe_tool_seconds_count{labels}") or 0.0,
            metric_value(page, f"voxpipe_tool_seconds_sum{labels}") or 0.0,
        )

    def since(self, before: ToolCounts) -> ToolCounts:
        return ToolCounts(
            self.calls - before.calls,
            self.seconds_count - before.seconds_count,
            self.seconds_sum - before.seconds_sum,
        )


async def _settled(server: RunningServer, tasks_before: float) -> str:
    """The metrics page once the call's session and every task it started are gone."""
    held = ('voxpipe_calls{state="connected"}', 'voxpipe_calls{state="detached"}')
    deadline = time.monotonic() + 30
    while True:
        page = await metrics_text(server)
        calls = [metric_value(page, m) for m in held]
        tasks = metric_value(page, "voxpipe_asyncio_tasks") or 0.0
        if (calls == [0, 0] and tasks <= tasks_before) or time.monotonic() > deadline:
            assert calls == [0, 0], "a session leaked"
            assert tasks <= tasks_before, f"{tasks - tasks_before:g} asyncio tasks leaked"
            return page
        await asyncio.sleep(0.2)


def _heard(turn: TurnResult) -> str:
    """The turn's audio (phrases and answer) as Whisper hears it."""
    samples = pcm16_to_float(bytes(turn.audio))
    text = load_stt(Config()).transcribe(samples).text
    return " ".join(text.lower().replace(",", " ").replace(".", " ").split())


async def test_mcp_servers_that_are_down_are_logged_and_left_out(shop: RunningServer) -> None:
    log = shop.log_path.read_text()
    assert "MCP server crm: ConnectError" in log, log[-3000:]
    assert "MCP server ledger: " in log, log[-3000:]
    assert log.count("the agent runs without its tools") == 2, log[-3000:]
    await assert_server_up(shop)
    # `voxpipe agent` shows the same agent: its own tools, and each server and why it is out.
    done = _cli("agent", env=_agent_env())
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tools: 3" in out and "UNAVAILABLE: MCP server crm: ConnectError" in out, out
    assert "ledger (stdio, " in out and "UNAVAILABLE: MCP server ledger:" in out, out


async def test_a_tool_that_raises_and_one_that_times_out_leave_the_call_going(
    shop: RunningServer, spoken: dict[str, tuple[np.ndarray, int]]
) -> None:
    before = await metrics_text(shop)
    tasks_before = metric_value(before, "voxpipe_asyncio_tasks") or 0.0
    async with NativeClient(shop.ws) as client:
        await client.connect(output_sample_rate=OUTPUT_RATE)
        raised = await client.speak(*spoken["weather"], timeout_s=TURN_TIMEOUT_S)
        slow = await client.speak(*spoken["stock"], timeout_s=TURN_TIMEOUT_S)
        normal = await client.speak(*spoken["hours"], timeout_s=TURN_TIMEOUT_S)
        errors = list(client.errors)

    # The tool that raised: an error result naming the exception, and an answer after it.
    # (The small model may try it once more with other words: each try is such a result.)
    raised_calls = _of(raised, "tool.finished", "weather")
    assert [c["call_id"] for c in _of(raised, "tool.started", "weather")] == [
        c["call_id"] for c in raised_calls
    ]
    for finished in raised_calls:
        assert finished["status"] == "error", finished
        assert json.loads(finished["output"]) == {"error": f"RuntimeError: {WEATHER_FAILURE}"}
    _assert_answered(raised, OUTPUT_RATE)

    # The tool past its timeout: a timeout result, its timeout phrase said, then an answer.
    slow_calls = _of(slow, "tool.finished", "stock_check")
    message = f"stock_check did not finish within {STOCK_TIMEOUT_S:g} s"
    for finished in slow_calls:
        assert finished["status"] == "timeout", finished
        assert json.loads(finished["output"]) == {"error": message}
        assert finished["duration_ms"] >= STOCK_TIMEOUT_S * 1000 * 0.95, finished
    _assert_answered(slow, OUTPUT_RATE)
    heard = _heard(slow)
    # Letters only: Whisper writes "stock room" or "stockroom" as the voice runs.
    assert "stockroomisnotanswering" in heard.replace(" ", ""), heard

    # The next turn on the same connection: a tool that works, and its answer.
    normal_calls = _of(normal, "tool.finished", "opening_hours")
    for finished in normal_calls:
        assert finished["status"] == "ok", finished
        assert json.loads(finished["output"]) == "We are open from nine to six."
    _assert_answered(normal, OUTPUT_RATE)
    assert errors == [], errors  # a tool's failure is a result, never a protocol error

    # Counted, and nothing left behind: the session closed and its tasks (the timed-out
    # tool's among them) ended.
    after = await _settled(shop, tasks_before)
    weather = ToolCounts.read(after, "weather", "error").since(
        ToolCounts.read(before, "weather", "error")
    )
    assert weather.calls == weather.seconds_count == len(raised_calls), weather
    stock = ToolCounts.read(after, "stock_check", "timeout").since(
        ToolCounts.read(before, "stock_check", "timeout")
    )
    assert stock.calls == stock.seconds_count == len(slow_calls), stock
    assert stock.seconds_sum >= len(slow_calls) * STOCK_TIMEOUT_S * 0.95, stock
    hours = ToolCounts.read(after, "opening_hours", "ok").since(
        ToolCounts.read(before, "opening_hours", "ok")
    )
    assert hours.calls == len(normal_calls), hours
    await assert_server_up(shop)
    # The only tracebacks logged are the raising tool's own (for its author to read).
    found = tracebacks(shop.log_path.read_text())
    assert found and all(f"RuntimeError: {WEATHER_FAILURE}" in t for t in found), found
    print("\nheard in the timed-out turn:", heard, "| replies:", raised.reply, "|", slow.reply)


# -- a remote model that writes invalid calls -------------------------------------------

APOLOGY = "Sorry, I could not look that up."
CONFIRMATION = "We are open from nine to six on Monday."
SCRIPT = [  # the tool call the model writes on each turn: its name and its arguments' text
    ("opening_hours", '{"day": "mon'),  # cut off: not JSON
    ("opening_hours", '{"day": 5}'),  # JSON the schema refuses
    ("book_flight", '{"to": "Rome"}'),  # a tool the agent does not have
    ("opening_hours", '{"day": "monday"}'),  # a good call, after all that
]
EXPECTED = [
    ("error", "arguments are not JSON: "),
    ("error", "invalid arguments for opening_hours: day: Input should be a valid string"),
    ("error", "no tool is called 'book_flight'"),
    ("ok", "We are open from nine to six."),
]


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[ScriptedModel, str]]:
    model = ScriptedModel(SCRIPT, APOLOGY, CONFIRMATION)
    with serving(model) as url:
        yield model, url


@pytest.fixture(scope="module")
def remote(
    tmp_path_factory: pytest.TempPathFactory, scripted: tuple[ScriptedModel, str]
) -> Iterator[RunningServer]:
    """The same agent, its LLM the scripted remote model."""
    env = {
        **_agent_env(),
        "VOXPIPE_LLM__ENGINE": "openai",
        "VOXPIPE_REMOTE_LLM__BASE_URL": scripted[1],
    }
    server = start_server(tmp_path_factory.mktemp("remote"), env=env)
    try:
        wait_ready(server)
        yield server
    finally:
        stop_server(server)


async def test_invalid_arguments_from_the_model_are_answered_with_their_error(
    remote: RunningServer,
    scripted: tuple[ScriptedModel, str],
    spoken: dict[str, tuple[np.ndarray, int]],
) -> None:
    model = scripted[0]
    before = await metrics_text(remote)
    tasks_before = metric_value(before, "voxpipe_asyncio_tasks") or 0.0
    turns = []
    async with NativeClient(remote.ws) as client:
        started = await client.connect()
        for _ in SCRIPT:
            turns.append(await client.speak(*spoken["hours"], timeout_s=TURN_TIMEOUT_S))
        errors = list(client.errors)
    assert started["models"]["llm"].startswith("openai-compatible"), started["models"]

    for turn, (name, _), (status, text) in zip(turns, SCRIPT, EXPECTED, strict=True):
        call = _one(turn, "tool.started", name)
        finished = _one(turn, "tool.finished", name)
        assert finished["call_id"] == call["call_id"] and finished["status"] == status, finished
        assert text in finished["output"], finished
        # The model was shown the result, error and all, on its next request (with the line
        # that asks it to tell the caller in words: ``conversation/spoken.py``) ...
        shown = model.shown_result(call["call_id"])
        assert shown == result_for_model(finished["output"]), (shown, finished)
        # ... and what it said to that is the turn's spoken answer.
        _assert_answered(turn, client.output_rate)
        assert turn.reply.strip() == (CONFIRMATION if status == "ok" else APOLOGY), turn.reply
    assert errors == [], errors

    after = await _settled(remote, tasks_before)
    invalid = ToolCounts.read(after, "opening_hours", "error").since(
        ToolCounts.read(before, "opening_hours", "error")
    )
    unknown = ToolCounts.read(after, "unknown", "error").since(
        ToolCounts.read(before, "unknown", "error")
    )
    assert (invalid.calls, unknown.calls) == (2, 1), (invalid, unknown)
    assert "book_flight" not in after, "a name the model made up became a metric label"
    await assert_server_up(remote)
    assert tracebacks(remote.log_path.read_text()) == []
