"""``voxpipe agent``: the agent's instructions and every tool, MCP servers' found live."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.unit.agent import mcp_server
from voxpipe.cli import build_parser, main


def test_voxpipe_agent_lists_every_tool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "desk.json"
    path.write_text(
        json.dumps(
            {
                "instructions": "You are the front desk of a small restaurant. " * 10,
                "greeting": "Hello!",
                "http_tools": [
                    {
                        "name": "book_table",
                        "description": "Book a table.",
                        "url": "https://hooks.example.com/book",
                        "parameters": {
                            "type": "object",
                            "properties": {"party": {"type": "integer"}},
                        },
                        "timeout_s": 4,
                    }
                ],
                "mcp_servers": [
                    {"name": "kitchen", "command": sys.executable, "args": [mcp_server.__file__]},
                    {"name": "gone", "command": "/nonexistent/mcp"},
                ],
            }
        )
    )
    assert main(["agent", "--agent", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "agent: desk"
    assert out[1].startswith("instructions (460 characters): You are the front desk")
    assert out[1].endswith(" …")
    assert out[2] == "greeting: Hello!"
    assert out[3] == "tools: 7"
    assert out[4] == (
        "  book_table  [http]  effect=mutating  idempotent=no  timeout=4 s  phrase='One moment.'"
    )
    assert out[5] == "    Book a table."
    assert out[6] == '    parameters: {"type":"object","properties":{"party":{"type":"integer"}}}'
    assert "  opening_hours  [mcp]  effect=read_only  idempotent=yes  timeout=8 s" in "\n".join(out)
    assert out[-3] == "mcp servers:"
    assert out[-2].startswith(
        f"  kitchen (stdio, {sys.executable}): 6 tools: opening_hours, cancel_booking, book,"
    )
    assert out[-1].startswith("  gone (stdio, /nonexistent/mcp): UNAVAILABLE: MCP server gone: ")


def test_the_default_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "agent: default"
    assert out[2:] == ["greeting: (none)", "tools: 0"]


def test_a_bad_agent_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("instructions: hi\nhttp_tools: [{name: x}]\n")
    assert main(["agent", "--agent", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"voxpipe: agent file {path}: http_tools.0.description: Field required")


def test_serve_takes_an_agent() -> None:
    args = build_parser().parse_args(["serve", "--agent", "examples.x:agent"])
    assert args.agent == "examples.x:agent"


def test_serve_refuses_a_bad_agent_before_loading_models(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--agent", "no_such_module_here:agent"]) == 2
    assert "importing no_such_module_here: ModuleNotFoundError" in capsys.readouterr().err
