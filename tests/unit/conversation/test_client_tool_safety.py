"""A client's tools and records against the agent's own tools (issue 29): a client tool may
not take a server tool's name, a client may not write a server tool's call or result, and a
turn whose instructions and tools cannot fit the context ends with a typed error, not a
traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm
from voxpipe.agent import tool
from voxpipe.conversation.events import ErrorEvent, ResponseDone
from voxpipe.conversation.tool_ledger import ToolRefused
from voxpipe.engines.base import (
    LlmOutput,
    LlmRequest,
    PromptTooLong,
    ToolSpec,
)

cancelled: list[str] = []


@tool(effect="mutating")
async def cancel_booking(name: str) -> dict[str, Any]:
    """Cancel a booking."""
    cancelled.append(name)
    return {"cancelled": True}


LOOKUP = ToolSpec("lookup", "Look a customer up.", {"type": "object", "properties": {}})
SHADOW = ToolSpec("cancel_booking", "Cancel, the client's way.", {"type": "object"})


def test_a_client_tool_may_not_take_a_server_tools_name(make_call: Callable[..., Call]) -> None:
    call = make_call(agent=running(cancel_booking))
    call.session.commands.set_client_tools([LOOKUP])
    with pytest.raises(ToolRefused) as refused:
        call.session.commands.set_client_tools([LOOKUP, SHADOW], "cancel_booking")
    assert refused.value.where == "1.name"
    offered = call.session.ledger.offered() or []
    assert [t.name for t in offered] == ["cancel_booking", "lookup"], "the tools stay as they were"
    assert call.session.ledger.tool_choice == "auto"
    assert not call.session.ledger.runs_on_client("cancel_booking")


def test_a_client_may_not_write_a_server_tools_call(make_call: Callable[..., Call]) -> None:
    call = make_call(agent=running(cancel_booking))
    with pytest.raises(ToolRefused) as refused:
        call.session.commands.add_tool_call("call_f", "cancel_booking", '{"name": "Lee"}')
    assert refused.value.where == "name"
    assert call.session.history.turns == []
    commands = call.session.commands
    assert commands.add_tool_call("call_c", "lookup", "{}") is True  # its own: as before


async def test_a_client_may_not_answer_a_server_tools_call(
    make_call: Callable[..., Call],
) -> None:
    """The model's call of a server tool is recorded before it runs: until then nothing but
    the tool's name tells it from a call the client runs, and the client may not answer it."""
    call = make_call(agent=running(cancel_booking))
    call.session.ledger.record_calls(1, [called("cancel_booking", "call_s", name="Lee")])
    with pytest.raises(ToolRefused) as refused:
        call.session.commands.add_tool_output("call_s", '{"cancelled": true}')
    assert refused.value.where == "call_id"
    assert [m.role for m in call.session.history.turns] == ["assistant"], "no result recorded"
    assert not call.session.ledger.answered("call_s")


class TooLongLlm(FakeLlm):
    """An engine whose prompt's instructions and tools fill the context (as the llama.cpp
    engine raises it: ``tests/e2e/test_realtime_tool_safety.py`` runs the real one)."""

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        raise PromptTooLong("the instructions and tools alone take 5000 tokens")


async def test_a_turn_that_cannot_fit_ends_with_a_typed_error_and_no_traceback(
    make_call: Callable[..., Call], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    call = make_call(llm=TooLongLlm())
    call.session.replies.respond()
    await call.idle()
    errors = call.of(ErrorEvent)
    assert [(e.code, e.message) for e in errors] == [
        ("context_length_exceeded", "the instructions and tools alone take 5000 tokens")
    ]
    (done,) = call.of(ResponseDone)
    assert done.status == "failed"
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    assert len([r for r in caplog.records if "5000 tokens" in r.getMessage()]) == 1
