"""What the tool tests share: an agent started without a server, scripted calls, a store
that keeps what it was given."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.conversation.test_record import Store
from voxpipe.agent import Agent, RunningAgent, Tool, Toolbox
from voxpipe.conversation.services import CallRecord
from voxpipe.engines.base import ToolCallRequest


def running(
    *tools: Tool,
    greeting: str | None = None,
    instructions: str = "You book tables at Chez Test.",
) -> RunningAgent:
    """An agent with these Python tools, as the server would have started it."""
    agent = Agent(instructions=instructions, greeting=greeting, tools=tools)
    started = RunningAgent(agent)
    started.toolbox = Toolbox(agent.python_tools)
    return started


def called(tool: str, call_id: str = "call_1", **arguments: Any) -> ToolCallRequest:
    """The model calls ``tool`` with ``arguments``."""
    return ToolCallRequest(call_id, tool, arguments, json.dumps(arguments))


class StateStore(Store):
    """A store that also keeps every state saved and every message, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[dict[str, Any]] = []

    def save_state(self, call: CallRecord, state: dict[str, Any]) -> None:
        super().save_state(call, state)
        self.states.append(json.loads(json.dumps(state)))  # as a store would keep it

    def messages(self) -> list[tuple[str, str, str | None]]:
        """(role, text, status) of each message written."""
        return [(w[3], w[4], w[5]) for w in self.writes if w[0] == "message"]

    def roles(self) -> list[str]:
        return [role for role, _, _ in self.messages()]


def saved_state(messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    """A state another worker saved (``Session.state``), with these history messages."""
    return {
        "messages": messages,
        "summary": "",
        "summarized_messages": 0,
        "system_prompt": "You book tables at Chez Test.",
        "turns": 1,
        "audio_seq": 40,
        "input_samples": 16000,
        "input_sample_rate": 16000,
        "counts": {},
        "epoch": 0,
        "owner": "anonymous",
        "call_id": "c0ffee",
        **more,
    }
