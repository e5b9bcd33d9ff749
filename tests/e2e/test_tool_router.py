"""The embedded model's router in a call to the restaurant agent (Qwen2.5 0.5B through
llama.cpp): the caller's last words are judged alone (``llm.tool_router``) only when, said
right after the agent's greeting, they could be a request (``llm.tool_router_floor``).

Asked alone, the model takes a line read from a book for a request, so without that check a
caller reading aloud sets off a tool call: seconds of writing it, then a phrase and an answer
about tables the caller never asked for.

A lookup (a read-only tool) is the exception: words the floor rules out are judged alone
all the same, and a lookup's call is kept only if the caller said its arguments
(``llm.lookup_router``, ``engines/call_grounding.py``). A question about opening hours reads
like small talk after the greeting; answered in words, the hours are made up."""

from __future__ import annotations

import pytest

from tests.support import librivox_clips
from voxpipe.agent import load_agent
from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmOutput, LlmUsage, ToolCallRequest
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e

AGENT = load_agent("examples/restaurant/agent.py:agent")
TOOLS = [tool.spec for tool in AGENT.python_tools]
FLOOR = Config().llm.tool_router_floor
OPENING = [
    ChatMessage("system", AGENT.instructions),
    ChatMessage("assistant", AGENT.greeting or ""),
]
EXCHANGE = [
    ChatMessage("user", "Is there a dress code?"),
    ChatMessage("assistant", "No, there is no dress code. Come as you are."),
]


@pytest.fixture(scope="module")
def llm() -> LlamaLlm:
    config = Config()
    return LlamaLlm(llm_model_path(config), threads=config.llm.threads, n_ctx=4096)


def in_a_call(
    llm: LlamaLlm, text: str, floor: float, lookups: bool = True
) -> tuple[list[LlmOutput], LlmUsage]:
    """``text`` said after the greeting and a question answered in words."""
    llm.tool_router_floor = floor
    llm.lookup_router = lookups
    try:
        usage = LlmUsage()
        messages = [*OPENING, *EXCHANGE, ChatMessage("user", text)]
        items = list(llm.stream("e2e-router", messages, CancelToken(), usage, tools=TOOLS))
        return items, usage
    finally:
        llm.tool_router_floor = FLOOR
        llm.lookup_router = True


def called(items: list[LlmOutput]) -> list[str]:
    return [item.name for item in items if isinstance(item, ToolCallRequest)]


def test_a_line_read_from_a_book_is_answered_in_words(llm: LlamaLlm) -> None:
    lines = [clip.text.capitalize() + "." for clip in librivox_clips()]
    unchecked = [called(in_a_call(llm, line, floor=0.0)[0]) for line in lines]
    checked = [in_a_call(llm, line, floor=FLOOR) for line in lines]
    for line, before, (_, usage) in zip(lines, unchecked, checked, strict=True):
        print(f"\n  {line!r}: without the check {before}; "
              f"after the greeting P(call) {usage.extra['tool_call_p_opening']:.4f}")  # fmt: skip
    assert any(unchecked), "judged alone, no read line is taken for a request any more"
    for line, (items, usage) in zip(lines, checked, strict=True):
        assert not called(items), (line, items)
        assert usage.extra["tool_call_p_opening"] < FLOOR, (line, usage.extra)
        assert "lookup_said" not in usage.extra, usage.extra
        assert "".join(i for i in items if isinstance(i, str)).strip(), line


@pytest.mark.parametrize(
    ("request_", "tool"),
    [
        ("Can I book a table for two at seven tonight under the name Smith?", "book_table"),
        ("Do you have a table for four tomorrow at eight?", "check_availability"),
        ("I need to cancel my booking, the name is Jones.", "cancel_booking"),
    ],
)
def test_a_request_in_a_call_still_calls_its_tool(llm: LlamaLlm, request_: str, tool: str) -> None:
    items, usage = in_a_call(llm, request_, floor=FLOOR)
    print(f"\n  {request_!r}: {called(items)} {usage.extra}")
    assert usage.extra["tool_call_p_opening"] >= FLOOR, usage.extra
    assert called(items) == [tool], (items, usage.extra)


@pytest.mark.parametrize(
    ("question", "day"),
    [("What time do you open on Sunday?", "sunday"), ("Are you open on Monday?", "monday")],
)
def test_a_question_a_lookup_answers_calls_it_with_what_was_said(
    llm: LlamaLlm, question: str, day: str
) -> None:
    before, _ = in_a_call(llm, question, floor=FLOOR, lookups=False)
    items, usage = in_a_call(llm, question, floor=FLOOR)
    print(f"\n  {question!r}: without lookups {called(before)}; with {called(items)} {usage.extra}")
    assert usage.extra["tool_call_p_opening"] < FLOOR, "the floor lets it through: no test"
    assert not called(before), "the lookup is called without the lookup router"
    calls = [item for item in items if isinstance(item, ToolCallRequest)]
    assert [c.name for c in calls] == ["opening_hours"], (items, usage.extra)
    assert str(calls[0].arguments.get("day", "")).lower() == day, calls[0].arguments


def test_a_goodbye_judged_alone_calls_nothing(llm: LlamaLlm) -> None:
    items, usage = in_a_call(llm, "Okay, goodbye.", floor=FLOOR)
    print(f"\n  goodbye: {usage.extra}")
    assert not called(items), (items, usage.extra)
    assert "".join(i for i in items if isinstance(i, str)).strip(), usage.extra
