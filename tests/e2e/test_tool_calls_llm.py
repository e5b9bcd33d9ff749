"""Tool calls from the embedded model (Qwen2.5 0.5B through llama.cpp): the prompt is the
GGUF's own chat template to the character, a booking request comes back as a valid call
with the caller's details, and small talk as text with no call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jinja2
import pytest

from voxpipe.config import Config
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    LlmOutput,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
)
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


# The bookable slots: a schema this narrow is what keeps the 0.5B model's times right (with
# a free HH:MM pattern it writes 17:00 for "seven tonight"; bench/tool_calls.py has figures).
SLOTS = [f"{h:02d}:{m:02d}" for h in (12, 13, 14, 18, 19, 20, 21, 22) for m in (0, 30)]
TIME = {"type": "string", "enum": SLOTS, "description": "HH:MM, 24-hour"}
DATE = {"type": "string", "format": "date"}
TOOLS = [
    ToolSpec(
        "check_availability",
        "Check whether a table is free.",
        _object(date=DATE, time=TIME, party_size={"type": "integer"}),
    ),
    ToolSpec(
        "book_table",
        "Book a table.",
        _object(name={"type": "string"}, date=DATE, time=TIME, party_size={"type": "integer"}),
    ),
    ToolSpec("opening_hours", "Opening hours on a day.", _object(day={"type": "string"})),
]
SYSTEM = ChatMessage(
    "system",
    "You are the phone assistant of the restaurant Chez Voxpipe. Today is 2025-06-13. "
    "Times are 24-hour: add 12 to an afternoon or evening hour (1 pm is 13:00, 7 pm or "
    "seven tonight is 19:00).",
)


@pytest.fixture(scope="module")
def llm() -> LlamaLlm:
    config = Config()
    return LlamaLlm(llm_model_path(config), threads=config.llm.threads, n_ctx=2048)


def ask(llm: LlamaLlm, text: str) -> tuple[list[LlmOutput], LlmUsage]:
    usage = LlmUsage()
    messages = [SYSTEM, ChatMessage("user", text)]
    items = list(llm.stream("e2e-tools", messages, CancelToken(), usage, tools=TOOLS))
    return items, usage


def _template_messages(messages: list[ChatMessage]) -> Iterator[dict[str, Any]]:
    for m in messages:
        calls = [{"function": {"name": c.name, "arguments": dict(c.arguments)}}
                 for c in m.tool_calls]  # fmt: skip
        yield {"role": m.role, "content": m.content, "tool_calls": calls}


def test_the_prompt_is_the_gguf_chat_templates_own(llm: LlamaLlm) -> None:
    call = ToolCallRequest("call_1", "opening_hours", {"day": "friday"}, '{"day": "friday"}')
    messages = [
        SYSTEM,
        ChatMessage("user", "When do you open?"),
        ChatMessage("assistant", "", (call,)),
        ChatMessage("tool", '{"open": "12:00", "close": "22:00"}', tool_call_id="call_1"),
        ChatMessage("assistant", "From noon to ten."),
        ChatMessage("user", "Thanks."),
    ]
    env = jinja2.Environment()
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    template = env.from_string(llm._llm.metadata["tokenizer.chat_template"])
    expected = template.render(
        messages=list(_template_messages(messages)),
        tools=[t.openai() for t in TOOLS],
        add_generation_prompt=True,
    )
    tokens, dropped = llm.prompt.tokens(messages, tools=TOOLS)
    assert dropped == 0
    assert llm._llm.detokenize(tokens, special=True).decode() == expected


def test_a_booking_request_is_a_book_table_call_with_the_callers_details(llm: LlamaLlm) -> None:
    items, usage = ask(llm, "Book a table for two at seven tonight under the name Smith")
    assert not [i for i in items if isinstance(i, str)]
    *deltas, call = items
    assert isinstance(call, ToolCallRequest) and not call.error, items
    assert call.name == "book_table" and call.call_id.startswith("call_")
    assert call.arguments["name"] == "Smith" and call.arguments["party_size"] == 2
    hours, minutes = map(int, call.arguments["time"].split(":"))
    assert 18 * 60 + 30 <= hours * 60 + minutes <= 19 * 60 + 30, call.arguments
    assert all(isinstance(d, ToolCallDelta) and d.call_id == call.call_id for d in deltas)
    assert "".join(d.arguments_delta for d in deltas if isinstance(d, ToolCallDelta)) == (
        call.arguments_json
    )
    # The name goes out on its own first, so the reply can say the tool's phrase while the
    # arguments are still being written.
    assert deltas[0] == ToolCallDelta(call.call_id, "book_table", "")
    assert usage.finish_reason == "tool_calls"


def test_small_talk_is_text_and_no_call(llm: LlamaLlm) -> None:
    items, usage = ask(llm, "Tell me a joke")
    assert items and all(isinstance(i, str) for i in items), items
    assert "".join(i for i in items if isinstance(i, str)).strip()
    assert usage.finish_reason in ("stop", "length")


def test_without_tools_the_reply_is_text_as_before(llm: LlamaLlm) -> None:
    usage = LlmUsage()
    messages = [SYSTEM, ChatMessage("user", "Book a table for two at seven tonight.")]
    deltas = list(llm.stream("e2e-plain", messages, CancelToken(), usage))
    assert deltas and all(isinstance(d, str) for d in deltas)
    assert "tool_call_p" not in usage.extra


GREETING = ChatMessage("assistant", "Chez Voxpipe, good evening. How can I help you?")
SMALL_TALK = [
    ChatMessage("user", "Is there a dress code?"),
    ChatMessage("assistant", "No, there is no dress code."),
]


def in_a_call(llm: LlamaLlm, text: str, router: bool) -> tuple[list[LlmOutput], LlmUsage]:
    """``text`` said after the greeting and a question answered in words, the prompt
    prefilled from scratch (so two runs compute the same logits). The router's floor is
    next to nothing: after this two-sentence prompt and greeting the request below scores
    0.0096 and a line read from a book 0.0091 (the floor is set for the restaurant agent,
    test_tool_router.py); but the look after the greeting is taken, and must be undone."""
    llm.clear_context()
    llm.tool_router = router
    floor, llm.tool_router_floor = llm.tool_router_floor, 1e-6
    try:
        usage = LlmUsage()
        messages = [SYSTEM, GREETING, *SMALL_TALK, ChatMessage("user", text)]
        items = list(llm.stream("e2e-call", messages, CancelToken(), usage, tools=TOOLS))
        return items, usage
    finally:
        llm.tool_router, llm.tool_router_floor = True, floor


def test_a_request_in_a_call_still_calls_its_tool(llm: LlamaLlm) -> None:
    """After a greeting and an answer in words the model answers in words too, making up
    availability; the router judges the request alone, and it gets the call it gets alone."""
    request = "Do you have a table for four tomorrow at eight?"
    unrouted, before = in_a_call(llm, request, router=False)
    routed, after = in_a_call(llm, request, router=True)
    print(f"\n  P(call) in the call {before.extra['tool_call_p']:.2f}; alone "
          f"{after.extra.get('tool_call_p_alone')}; unrouted: {unrouted[-1]!r}")  # fmt: skip
    assert before.extra["tool_call_p"] < 0.5, "the call's history no longer stops the call"
    assert not any(isinstance(i, ToolCallRequest) for i in unrouted)
    assert after.extra["tool_call_p_alone"] >= 0.5
    # The call is the one the request gets asked alone, name and arguments.
    alone, _ = ask(llm, request)
    assert isinstance(alone[-1], ToolCallRequest), alone
    assert isinstance(routed[-1], ToolCallRequest), routed
    assert (routed[-1].name, routed[-1].arguments) == (alone[-1].name, alone[-1].arguments)
    assert routed[-1].arguments["party_size"] == 4, routed[-1]


def test_the_router_puts_the_context_back_as_it_was(llm: LlamaLlm) -> None:
    """Small talk the router also declines: the reply, sampled after the router's own
    prefill, is the reply without the router, token for token."""
    with_router, usage = in_a_call(llm, "Tell me a joke", router=True)
    without, _ = in_a_call(llm, "Tell me a joke", router=False)
    # Both looks were taken (after the greeting, then alone), and both declined.
    assert "tool_call_p_opening" in usage.extra, usage.extra
    assert usage.extra["tool_call_p_alone"] < 0.5, usage.extra
    assert all(isinstance(i, str) for i in with_router), with_router
    assert "".join(map(str, with_router)) == "".join(map(str, without))
    assert "".join(map(str, with_router)).strip()
