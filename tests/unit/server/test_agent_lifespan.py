"""The server starts its agent with the models (readiness waits for MCP tools to be found)
and closes it at shutdown; a badly defined agent keeps the server from becoming ready."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from starlette.testclient import TestClient

from tests.unit.agent import mcp_server
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.agent import Agent, McpServerConfig, tool
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.server.app import create_app
from voxpipe.server.state import ServerState


def fake_engines(config: Config) -> Engines:
    return Engines(FakeVad(), FakeStt("hello"), FakeLlm(), FakeTts())  # type: ignore[arg-type]


def wait_for(client: TestClient, status: str) -> dict[str, object]:
    deadline = time.monotonic() + 20
    while (body := client.get("/readyz").json())["status"] != status:
        assert time.monotonic() < deadline, body
        time.sleep(0.02)
    return body  # type: ignore[no-any-return]


@tool(effect="read_only")
async def opening_hours(day: str) -> str:
    """When we are open."""
    return "noon to ten"


def test_the_agent_starts_with_the_models_and_closes_at_shutdown() -> None:
    kitchen = McpServerConfig(
        name="kitchen", command=sys.executable, args=[mcp_server.__file__], tool_prefix="k_"
    )
    agent = Agent("Be brief.", tools=[opening_hours], mcp_servers=[kitchen])
    config = Config.load(server={"turn_log_path": None}, store={"path": None})
    app = create_app(config, fake_engines, agent=agent)
    state: ServerState = app.state.voxpipe
    with TestClient(app) as client:
        wait_for(client, "ready")
        assert state.agent is not None
        assert len(state.agent.toolbox) == 7
        connection = state.agent.connections[0]
        assert connection.connected
    assert not connection.connected  # the MCP session (and its process) ended with the server


def test_the_configured_agent_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "desk.yaml"
    path.write_text("instructions: You are the front desk.\n")
    config = Config.load(server={"turn_log_path": None}, store={"path": None}, agent=str(path))
    app = create_app(config, fake_engines)
    with TestClient(app) as client:
        wait_for(client, "ready")
        assert app.state.voxpipe.agent.agent.instructions == "You are the front desk."


def test_a_badly_defined_agent_keeps_the_server_from_becoming_ready() -> None:
    # Two declared tools with one name stop the agent's declaration (test_loader.py); an MCP
    # server offering a name the agent has is found only when it is reached.
    kitchen = McpServerConfig(name="kitchen", command=sys.executable, args=[mcp_server.__file__])
    agent = Agent("Be brief.", tools=[opening_hours], mcp_servers=[kitchen])
    config = Config.load(server={"turn_log_path": None}, store={"path": None})
    with TestClient(create_app(config, fake_engines, agent=agent)) as client:
        body = wait_for(client, "failed")
    assert body["error"] == "ToolDefinitionError: two tools are named opening_hours"
