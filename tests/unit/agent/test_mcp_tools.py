"""MCP tools against a real MCP server (``mcp_server.py``, the SDK's MCPServer): over stdio
as a subprocess, and over streamable HTTP from uvicorn on a free port."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from tests.unit.agent import mcp_server
from voxpipe.agent import (
    Agent,
    CallContext,
    McpServerConfig,
    RunningAgent,
    ToolCall,
    ToolDefinitionError,
    ToolEffect,
    ToolStatus,
    tool,
)

SCRIPT = Path(mcp_server.__file__)
TOOLS = ["opening_hours", "cancel_booking", "book", "whoami", "broken", "slow"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    port = free_port()
    app = mcp_server.build().streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, name="mcp-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the MCP server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(10)


def stdio_server(**fields: object) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {"name": "kitchen", "command": sys.executable, "args": [str(SCRIPT)]} | fields
    )


async def exercise(running: RunningAgent, prefix: str = "") -> None:
    toolbox = running.toolbox
    assert [t.name for t in toolbox] == [prefix + name for name in TOOLS]
    hours = toolbox.get(prefix + "opening_hours")
    assert hours is not None and hours.kind == "mcp"
    assert hours.spec.description == "When the restaurant is open on a day."
    assert hours.spec.parameters["properties"] == {
        "day": {"description": "a weekday", "type": "string"}
    }
    policies = {
        t.name.removeprefix(prefix): (t.policy.effect, t.policy.idempotent) for t in toolbox
    }
    assert policies["opening_hours"] == (ToolEffect.READ_ONLY, True)  # readOnlyHint
    assert policies["cancel_booking"] == (ToolEffect.MUTATING, True)  # idempotentHint
    assert policies["book"] == (ToolEffect.MUTATING, False)  # no hints: the safe reading

    ok = await toolbox.run(ToolCall("c1", prefix + "opening_hours", {"day": "Monday"}))
    assert (ok.status, ok.output) == (ToolStatus.OK, {"result": "Monday: 12:00-22:00"})
    structured = await toolbox.run(ToolCall("c2", prefix + "cancel_booking", {"booking_id": 3}))
    assert structured.output == {"cancelled": 3}
    failed = await toolbox.run(ToolCall("c3", prefix + "broken", {}))
    assert (failed.status, failed.output) == (
        ToolStatus.ERROR,
        {"error": "Error executing tool broken: the kitchen is on fire"},
    )
    context = CallContext("key:one", "c0ffee", "MZ1", "twilio", "+15550142")
    who = await toolbox.run(ToolCall("c5", prefix + "whoami", {}), context)
    assert who.output == context.meta()["voxpipe/call"], who.output
    invalid = await toolbox.run(ToolCall("c4", prefix + "book", {"name": "Smith"}))
    assert invalid.status is ToolStatus.ERROR
    assert invalid.output == {
        "error": f"invalid arguments for {prefix}book: 'party' is a required property"
    }


async def test_stdio_server_tools_are_discovered_and_called() -> None:
    agent = Agent("Be brief.", mcp_servers=[stdio_server(tool_prefix="k_")])
    async with await RunningAgent.start(agent) as running:
        assert running.unavailable == {}
        await exercise(running, prefix="k_")
    assert asyncio.all_tasks() == {asyncio.current_task()}  # nothing left running


async def test_streamable_http_server_tools_are_discovered_and_called(http_url: str) -> None:
    server = McpServerConfig(name="kitchen", url=http_url, headers={"X-Trace": "1"})
    async with await RunningAgent.start(Agent("Be brief.", mcp_servers=[server])) as running:
        await exercise(running)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_server_s_confirm_asks_before_each_tool_that_changes_something() -> None:
    """``confirm`` on an MCP server was accepted and dropped: its bookings ran unasked."""
    agent = Agent("Be brief.", mcp_servers=[stdio_server(confirm=True)])
    async with await RunningAgent.start(agent) as running:
        asks = {t.name: t.policy.confirm for t in running.toolbox}
    assert asks["book"] is True and asks["cancel_booking"] is True
    assert asks["opening_hours"] is False and asks["whoami"] is False  # readOnlyHint


async def test_a_slow_mcp_tool_times_out_and_the_session_goes_on(http_url: str) -> None:
    server = McpServerConfig(name="kitchen", url=http_url, timeout_s=0.3)
    async with await RunningAgent.start(Agent("Be brief.", mcp_servers=[server])) as running:
        late = await running.toolbox.run(ToolCall("c1", "slow", {"seconds": 3}))
        assert late.status is ToolStatus.TIMEOUT
        again = await running.toolbox.run(ToolCall("c2", "slow", {"seconds": 0}))
        assert (again.status, again.output) == (ToolStatus.OK, {"result": "done"})


async def test_servers_that_are_down_leave_the_agent_running_without_them() -> None:
    @tool(effect="read_only")
    async def ping() -> str:
        """Ping."""
        return "pong"

    down = [
        McpServerConfig(name="gone", url=f"http://127.0.0.1:{free_port()}/mcp"),
        stdio_server(name="crashes", args=["-c", "raise SystemExit(3)"]),
        stdio_server(name="missing", command="/nonexistent/mcp-server"),
    ]
    started = time.monotonic()
    async with await RunningAgent.start(
        Agent("Be brief.", tools=[ping], mcp_servers=down)
    ) as running:
        assert time.monotonic() - started < 10
        assert sorted(running.unavailable) == ["crashes", "gone", "missing"]
        assert all(reason.startswith("MCP server ") for reason in running.unavailable.values())
        assert [t.name for t in running.toolbox] == ["ping"]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_two_servers_offering_one_name_stop_the_start(http_url: str) -> None:
    servers = [McpServerConfig(name="a", url=http_url), McpServerConfig(name="b", url=http_url)]
    with pytest.raises(ToolDefinitionError, match="two tools are named opening_hours"):
        await RunningAgent.start(Agent("Be brief.", mcp_servers=servers))
    assert asyncio.all_tasks() == {asyncio.current_task()}


def test_a_server_is_either_a_command_or_a_url() -> None:
    with pytest.raises(ValueError, match="either command"):
        McpServerConfig(name="both", command="x", url="http://y/mcp")
    with pytest.raises(ValueError, match="either command"):
        McpServerConfig(name="neither")
