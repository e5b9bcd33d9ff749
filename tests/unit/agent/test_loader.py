"""Loading an agent: module:attr, a .py file, a factory, or a YAML/JSON agent file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from voxpipe.agent import (
    Agent,
    AgentLoadError,
    HttpToolConfig,
    ToolDefinitionError,
    ToolEffect,
    default_agent,
    load_agent,
    resolve_agent,
)
from voxpipe.config import Config

AGENT_YAML = """\
name: front-desk
instructions: |
  You are the front desk of a small restaurant.
  Keep answers short.
greeting: Hello, Luigi's, how can I help?
http_tools:
  - name: book_table
    description: Book a table.
    url: https://hooks.example.com/book
    headers: {Authorization: "Bearer ${DESK_TOKEN}"}
    parameters:
      type: object
      properties:
        name: {type: string}
        party: {type: integer}
      required: [name, party]
    phrase: Booking that now.
    timeout_s: 4
  - name: opening_hours
    description: When we are open.
    url: https://hooks.example.com/hours
    effect: read_only
    idempotent: true
mcp_servers:
  - name: crm
    command: python
    args: [crm_server.py]
"""

PYTHON_AGENT = '''
from voxpipe.agent import Agent, tool

@tool(effect="read_only")
async def order_status(order: int) -> str:
    """Where an order is."""
    return "shipped"

agent = Agent("You track orders.", greeting="Orders, hello.", tools=[order_status], name="orders")

def make() -> Agent:
    return Agent("Made by a factory.")

def broken() -> Agent:
    raise RuntimeError("no database")

not_an_agent = 42
'''


def test_a_yaml_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESK_TOKEN", "t0k")
    path = tmp_path / "desk.yaml"
    path.write_text(AGENT_YAML)
    agent = load_agent(str(path))
    assert agent.name == "front-desk"
    assert agent.instructions.startswith("You are the front desk")
    assert agent.greeting == "Hello, Luigi's, how can I help?"
    book, hours = agent.http_tools
    assert book.headers == {"Authorization": "Bearer t0k"}
    assert (book.phrase, book.timeout_s, book.effect) == ("Booking that now.", 4, "mutating")
    assert (hours.effect, hours.idempotent) == (ToolEffect.READ_ONLY, True)
    assert agent.mcp_servers[0].args == ["crm_server.py"]
    assert agent.base_dir == tmp_path.resolve()  # a stdio server runs in the file's folder


def test_a_json_agent_takes_its_name_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"instructions": "Be brief."}))
    agent = load_agent(str(path))
    assert (agent.name, agent.instructions, agent.tools, agent.http_tools) == (
        "plain",
        "Be brief.",
        [],
        [],
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("greeting: hi\n", "instructions: Field required"),
        ("instructions: ''\n", "instructions: String should have at least 1 character"),
        ("instructions: hi\ntools: []\n", "tools: Extra inputs are not permitted"),
        (
            "instructions: hi\nhttp_tools:\n  - {name: x, description: d}\n",
            "http_tools.0.url: Field required",
        ),
        (
            "instructions: hi\nhttp_tools:\n  - {name: x, description: d, url: 'h', timout_s: 2}\n",
            "http_tools.0.timout_s: Extra inputs are not permitted",
        ),
        (
            "instructions: hi\nhttp_tools:\n  - {name: x, description: d, url: 'https://h/${NOPE_X}'}\n",
            "http_tools.0.url: Value error, environment variable NOPE_X is not set",
        ),
        (
            "instructions: hi\nhttp_tools:\n  - {name: x, description: d, url: 'http://[::1'}\n",
            "http_tools.0.url: Value error, not a valid URL: Invalid port",
        ),
        (
            "instructions: hi\nhttp_tools:\n  - {name: hours, description: d, url: 'http://h/',"
            " parameters: {type: object, properties: {day: {type: strin}}}}\n",
            "http_tools.0.parameters: Value error, tool hours: invalid parameters schema",
        ),
        (
            "instructions: hi\nhttp_tools:\n  - {name: x, description: d, url: 'http://h/a'}\n"
            "  - {name: x, description: e, url: 'http://h/b'}\n",
            "agent agent: two tools are named x",
        ),
        (
            "instructions: hi\nmcp_servers:\n  - {name: crm, url: crm.example.com/mcp}\n",
            "mcp_servers.0.url: Value error, an http:// or https:// URL",
        ),
        (
            "instructions: hi\nmcp_servers:\n  - {name: crm}\n",
            "mcp_servers.0: Value error, give either command (stdio) or url",
        ),
        ("- just\n- a list\n", "(top): Input should be a valid dictionary"),
        ("instructions: [unclosed\n", "not YAML"),
    ],
)
def test_agent_file_errors_name_the_field(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(AgentLoadError) as caught:
        load_agent(str(path))
    assert str(caught.value).startswith(f"agent file {path}: ")
    assert problem in str(caught.value)


def test_a_missing_agent_file(tmp_path: Path) -> None:
    with pytest.raises(AgentLoadError, match="No such file"):
        load_agent(str(tmp_path / "absent.yml"))


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "orders_agent.py"
    path.write_text(PYTHON_AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield path
    sys.modules.pop("orders_agent", None)
    sys.modules.pop("voxpipe_agent_orders_agent", None)


def test_module_attr_and_file_attr(agent_module: Path) -> None:
    by_module = load_agent("orders_agent:agent")
    by_file = load_agent(f"{agent_module}:agent")
    for agent in (by_module, by_file):
        assert agent.name == "orders"
        assert [t.name for t in agent.tools] == ["order_status"]
    assert load_agent("orders_agent:make").instructions == "Made by a factory."


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("orders_agent:missing", "orders_agent has no 'missing'"),
        ("orders_agent:not_an_agent", "not_an_agent is a int, not an Agent"),
        ("orders_agent:broken", "broken() raised RuntimeError: no database"),
        ("no_such_module_here:agent", "importing no_such_module_here: ModuleNotFoundError"),
        ("orders_agent", "expected module:attr"),
        ("/nowhere/agent.py:agent", "importing /nowhere/agent.py: ImportError: no file"),
    ],
)
def test_bad_references(agent_module: Path, ref: str, problem: str) -> None:
    with pytest.raises(AgentLoadError) as caught:
        load_agent(ref)
    assert problem in str(caught.value)


def test_a_module_whose_tool_is_badly_defined(tmp_path: Path) -> None:
    path = tmp_path / "bad_tool_agent.py"
    path.write_text(
        "from voxpipe.agent import Agent, tool\n"
        "@tool\nasync def untyped(x):\n    return x\n"
        "agent = Agent('hi', tools=[untyped])\n"
    )
    with pytest.raises(AgentLoadError, match="parameter x has no type hint"):
        load_agent(f"{path}:agent")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "class Opaque:\n    pass\n"
            "@tool\nasync def lookup(thing: Opaque) -> str:\n    return ''\n"
            "agent = Agent('hi', tools=[lookup])\n",
            "ToolDefinitionError: tool lookup: parameter thing: its type Opaque has no JSON schema",
        ),
        (
            "from voxpipe.agent import HttpToolConfig\n"
            "hook = HttpToolConfig(name='h', description='d', url='x')\n"
            "agent = Agent('hi', http_tools=[hook])\n",
            "HttpToolConfig: url: Value error, an http:// or https:// URL",
        ),
    ],
)
def test_a_bad_tool_in_a_module_is_one_line_naming_it(
    tmp_path: Path, body: str, problem: str
) -> None:
    path = tmp_path / "one_line_agent.py"
    path.write_text("from voxpipe.agent import Agent, tool\n" + body)
    with pytest.raises(AgentLoadError) as caught:
        load_agent(f"{path}:agent")
    assert problem in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_the_default_is_the_plain_assistant() -> None:
    config = Config.load(server={"turn_log_path": None})
    agent = resolve_agent(config)
    assert agent == default_agent(config)
    assert agent.instructions == config.llm.system_prompt
    assert (agent.greeting, agent.tools, agent.http_tools, agent.mcp_servers) == (None, [], [], [])


def test_the_config_names_the_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"instructions": "From the environment."}')
    monkeypatch.setenv("VOXPIPE_AGENT", str(path))
    assert resolve_agent(Config.load()).instructions == "From the environment."
    assert Config.load(agent="pkg:attr").agent == "pkg:attr"


def test_a_plain_function_is_taken_as_a_tool() -> None:
    async def lookup(order: int) -> str:
        """Look an order up."""
        return "ok"

    agent = Agent("hi", tools=[lookup])
    assert agent.tools[0].name == "lookup"  # type: ignore[union-attr]
    assert isinstance(agent, Agent)


def test_two_declared_tools_with_one_name_are_refused_at_declaration() -> None:
    async def lookup(order: int) -> str:
        """Look an order up."""
        return "ok"

    webhook = HttpToolConfig(name="lookup", description="d", url="http://127.0.0.1:9/")
    with pytest.raises(ToolDefinitionError, match="agent desk: two tools are named lookup"):
        Agent("hi", tools=[lookup], http_tools=[webhook], name="desk")


def test_an_agent_file_offers_the_built_in_call_tools(tmp_path: Path) -> None:
    path = tmp_path / "desk.json"
    path.write_text(json.dumps({"instructions": "Be brief.", "call_control": ["end_call"]}))
    agent = load_agent(str(path))
    assert [t.name for t in agent.python_tools] == ["end_call"]
    assert "call_context" not in json.dumps(agent.python_tools[0].spec.parameters)


def test_an_unknown_call_tool_is_named(tmp_path: Path) -> None:
    path = tmp_path / "desk.json"
    path.write_text(json.dumps({"instructions": "Be brief.", "call_control": ["transfer"]}))
    with pytest.raises(AgentLoadError, match="call_control"):
        load_agent(str(path))
