"""The OpenAI tool-call format: the history's tool turns as the API wants them, and streamed
``delta.tool_calls`` fragments put back together (the engine end to end with a server is in
test_openai_llm.py)."""

from __future__ import annotations

from typing import Any

from voxpipe.engines.base import ChatMessage, ToolCallDelta, ToolCallRequest, ToolSpec
from voxpipe.engines.openai_tools import ToolCallAssembler, openai_message

BOOK = ToolSpec(
    "book_table",
    "Book a table.",
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "party_size": {"type": "integer"}},
        "required": ["name", "party_size"],
    },
)
HOURS = ToolSpec("opening_hours", "Opening hours.", {"type": "object", "properties": {}})


def fragment(index: int, arguments: str = "", call_id: str = "", name: str = "") -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name:
        function["name"] = name
    piece: dict[str, Any] = {"index": index, "function": function}
    if call_id:
        piece.update(id=call_id, type="function")
    return piece


def chunk(*fragments: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"delta": {"tool_calls": list(fragments)}, "finish_reason": finish}]}


def test_fragments_become_deltas_then_complete_calls_in_index_order() -> None:
    calls = ToolCallAssembler()
    assert calls.push([fragment(0, "", "call_a", "book_table")]) == []
    got = calls.push([fragment(0, '{"name": "Sm'), fragment(1, "{}", "call_b", "opening_hours")])
    got += calls.push([fragment(0, 'ith", "party_size": 2}')])
    assert got == [
        ToolCallDelta("call_a", "book_table", '{"name": "Sm'),
        ToolCallDelta("call_b", "opening_hours", "{}"),
        ToolCallDelta("call_a", "book_table", 'ith", "party_size": 2}'),
    ]
    first, second = calls.calls([BOOK, HOURS])
    assert first == ToolCallRequest(
        "call_a", "book_table", {"name": "Smith", "party_size": 2},
        '{"name": "Smith", "party_size": 2}',
    )  # fmt: skip
    assert (second.call_id, second.name, second.arguments, second.error) == (
        "call_b", "opening_hours", {}, "",
    )  # fmt: skip


def test_a_call_that_cannot_run_says_why_instead_of_vanishing() -> None:
    calls = ToolCallAssembler()
    calls.push([fragment(0, '{"name": "Smith", ', "c0", "book_table")])  # cut off
    calls.push([fragment(1, "[1, 2]", "c1", "book_table")])
    calls.push([fragment(2, '{"name": "Smith"}', "c2", "book_table")])
    calls.push([fragment(3, "{}", "c3", "drop_database")])
    errors = [call.error for call in calls.calls([BOOK])]
    assert "not JSON" in errors[0]
    assert "JSON object" in errors[1]
    assert "party_size" in errors[2]
    assert "drop_database" in errors[3]


def test_a_name_repeated_in_every_fragment_is_kept_once_and_a_missing_id_is_made() -> None:
    calls = ToolCallAssembler()
    calls.push([{"function": {"name": "opening_hours", "arguments": "{"}}])
    calls.push([{"function": {"name": "opening_hours", "arguments": "}"}}])
    (call,) = calls.calls([HOURS])
    assert call.name == "opening_hours" and call.call_id.startswith("call_") and not call.error


def test_history_tool_turns_in_the_openai_format() -> None:
    call = ToolCallRequest("call_1", "book_table", {"name": "Smith"}, '{"name":"Smith"}')
    assert openai_message(ChatMessage("assistant", "", (call,))) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "book_table", "arguments": '{"name":"Smith"}'},
            }
        ],
    }
    assert openai_message(ChatMessage("tool", '{"ok": true}', tool_call_id="call_1")) == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"ok": true}',
    }
    assert openai_message(ChatMessage("user", "hi")) == {"role": "user", "content": "hi"}
