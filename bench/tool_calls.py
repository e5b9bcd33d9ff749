"""``python -m bench tool-calls``: how well the embedded model calls tools, from typed text.

A restaurant's four tools and 26 typed requests (20 that need a tool, 6 that do not), run
through :class:`~voxpipe.engines.llama_llm.LlamaLlm` in a few configurations: the decision
rule (only Qwen's ``<tool_call>`` tag, or any call-like first token, at a threshold), the
system prompt (bare, or with worked examples) and the temperature of the arguments. For
each it prints tool-selection precision and recall and how many calls had exactly the
expected arguments; and, for the plain answers, time to first token with and without tools.
This is the text-level floor; the spoken evaluation comes after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage, ToolCallRequest, ToolSpec
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path
from voxpipe.engines.qwen_tools import system_with_tools


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


_DATE = {"type": "string", "format": "date", "description": "YYYY-MM-DD"}
_TIME = {
    "type": "string",
    "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$",
    "description": "24-hour HH:MM, e.g. 19:30 for half past seven in the evening",
}
_PARTY = {"type": "integer", "minimum": 1, "description": "number of guests"}
_NAME = {"type": "string", "description": "the guest's surname"}
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

TOOLS = [
    ToolSpec(
        "check_availability",
        "Check whether a table is free at a date and time.",
        _object({"date": _DATE, "time": _TIME, "party_size": _PARTY}),
    ),
    ToolSpec(
        "book_table",
        "Book a table.",
        _object({"name": _NAME, "date": _DATE, "time": _TIME, "party_size": _PARTY}),
    ),
    ToolSpec("cancel_booking", "Cancel a booking.", _object({"name": _NAME, "date": _DATE})),
    ToolSpec(
        "opening_hours",
        "The restaurant's opening hours on a day of the week.",
        _object({"day": {"type": "string", "enum": DAYS}}),
    ),
]

SLOTS = [f"{h:02d}:{m:02d}" for h in (12, 13, 14, 18, 19, 20, 21, 22) for m in (0, 30)]
_SLOT = {"type": "string", "enum": SLOTS, "description": "24-hour HH:MM"}
# The same tools with the time narrowed to the bookable slots, which the grammar enforces.
SLOT_TOOLS = [
    ToolSpec(t.name, t.description, {**t.parameters, "properties": {
        k: _SLOT if k == "time" else v for k, v in t.parameters["properties"].items()}})
    for t in TOOLS
]  # fmt: skip

TODAY = "Today is Friday, 13 June 2025 (2025-06-13); tomorrow is Saturday 2025-06-14."
BARE = f"You are the phone assistant of the restaurant Chez Voxpipe. {TODAY}"
EXAMPLES = (
    BARE + " Use a tool whenever the caller asks to check, book or cancel a table, or asks "
    "when the restaurant is open; otherwise answer in one short sentence.\n\n"
    "Examples:\n"
    "Caller: Do you have room for three on Sunday at half past eight in the evening?\n"
    '<tool_call>\n{"name": "check_availability", "arguments": '
    '{"date": "2025-06-15", "time": "20:30", "party_size": 3}}\n</tool_call>\n'
    "Caller: Please reserve a table for six on Saturday at noon, the name is Garcia.\n"
    '<tool_call>\n{"name": "book_table", "arguments": '
    '{"name": "Garcia", "date": "2025-06-14", "time": "12:00", "party_size": 6}}\n</tool_call>\n'
    "Caller: Are you open on Monday?\n"
    '<tool_call>\n{"name": "opening_hours", "arguments": {"day": "monday"}}\n</tool_call>\n'
    "Caller: Thanks, that's all.\n"
    "You're welcome, goodbye!"
)

HINTS = (
    " Times are 24-hour: add 12 to an afternoon or evening hour (1 pm is 13:00, 7 pm or "
    "seven tonight is 19:00, 8:15 pm is 20:15). Tonight means today, 2025-06-13; tomorrow "
    "means 2025-06-14."
)

T, W = "2025-06-13", "2025-06-14"  # today, tomorrow
CASES: list[tuple[str, str | None, dict[str, Any]]] = [
    ("Book a table for two at seven tonight under the name Smith", "book_table",
     {"name": "Smith", "date": T, "time": "19:00", "party_size": 2}),
    ("Is there a table for four tomorrow at 8 pm?", "check_availability",
     {"date": W, "time": "20:00", "party_size": 4}),
    ("Can you check if you have space for 2 tonight at 9?", "check_availability",
     {"date": T, "time": "21:00", "party_size": 2}),
    ("Please cancel my booking for tonight, the name is Brown.", "cancel_booking",
     {"name": "Brown", "date": T}),
    ("What time do you open on Sunday?", "opening_hours", {"day": "sunday"}),
    ("Are you open on Tuesday?", "opening_hours", {"day": "tuesday"}),
    ("I'd like to reserve a table for five tomorrow at 1 pm, name Lee.", "book_table",
     {"name": "Lee", "date": W, "time": "13:00", "party_size": 5}),
    ("Cancel the reservation under Johnson for tomorrow.", "cancel_booking",
     {"name": "Johnson", "date": W}),
    ("Do you have a free table for 3 people on 2025-06-20 at 19:30?", "check_availability",
     {"date": "2025-06-20", "time": "19:30", "party_size": 3}),
    ("What are your opening hours on Saturday?", "opening_hours", {"day": "saturday"}),
    ("Book me a table for one tonight at 8, my name is Miller.", "book_table",
     {"name": "Miller", "date": T, "time": "20:00", "party_size": 1}),
    ("Is a table for six available tomorrow at noon?", "check_availability",
     {"date": W, "time": "12:00", "party_size": 6}),
    ("When are you open on Wednesday?", "opening_hours", {"day": "wednesday"}),
    ("I need to cancel my table on 2025-06-21, the name is Davis.", "cancel_booking",
     {"name": "Davis", "date": "2025-06-21"}),
    ("Reserve a table for 4 on 2025-06-18 at 18:30 for Wilson.", "book_table",
     {"name": "Wilson", "date": "2025-06-18", "time": "18:30", "party_size": 4}),
    ("Could you see if there's room for eight tonight at seven thirty?", "check_availability",
     {"date": T, "time": "19:30", "party_size": 8}),
    ("Are you open on Monday?", "opening_hours", {"day": "monday"}),
    ("Please book a table for three tomorrow at 7 pm under Taylor.", "book_table",
     {"name": "Taylor", "date": W, "time": "19:00", "party_size": 3}),
    ("Cancel my booking for tonight, it's under Clark.", "cancel_booking",
     {"name": "Clark", "date": T}),
    ("Check availability for two on Friday 2025-06-20 at 8:15 pm.", "check_availability",
     {"date": "2025-06-20", "time": "20:15", "party_size": 2}),
    ("Tell me a joke", None, {}),
    ("Hello, how are you today?", None, {}),
    ("Do you have vegetarian dishes?", None, {}),
    ("Thank you very much, goodbye.", None, {}),
    ("Is there parking near the restaurant?", None, {}),
    ("What kind of food do you serve?", None, {}),
]  # fmt: skip

TTFT_PROMPTS = [case[0] for case in CASES if case[1] is None] + [
    "Can I bring my dog?",
    "Do you take credit cards?",
    "Who is the chef?",
    "Is the restaurant wheelchair accessible?",
]


@dataclass(frozen=True)
class Variant:
    name: str
    system: str
    threshold: float = 0.5
    tag_only: bool = False  # decide on Qwen's <tool_call> tag alone
    temperature: float = 0.0
    tools: Sequence[ToolSpec] = tuple(TOOLS)


VARIANTS = [
    Variant("tag-only, bare prompt", BARE, tag_only=True),
    Variant("call-like start >= 0.5, bare prompt", BARE),
    Variant("call-like start >= 0.5, examples", EXAMPLES),
    Variant("call-like start >= 0.3, examples", EXAMPLES, threshold=0.3),
    Variant("call-like start >= 0.5, examples, temperature 0.3", EXAMPLES, temperature=0.3),
    Variant("call-like start >= 0.5, bare prompt and time hints", BARE + HINTS),
    Variant("call-like start >= 0.5, examples and time hints", EXAMPLES + HINTS),
    Variant("call-like start >= 0.5, bare prompt, time hints, slots", BARE + HINTS,
            tools=tuple(SLOT_TOOLS)),
    Variant("call-like start >= 0.5, examples, time hints, slots", EXAMPLES + HINTS,
            tools=tuple(SLOT_TOOLS)),
]  # fmt: skip


@dataclass
class Outcome:
    prompt: str
    expected: str | None
    called: str | None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    exact: bool = False
    p_call: float = 0.0
    seconds: float = 0.0


def _same(expected: Mapping[str, Any], got: Mapping[str, Any]) -> bool:
    def norm(value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    return {k: norm(v) for k, v in expected.items()} == {k: norm(v) for k, v in got.items()}


def run_variant(llm: LlamaLlm, variant: Variant) -> list[Outcome]:
    tools = llm._tools
    tools.threshold, tools.temperature = variant.threshold, variant.temperature
    starts = tools.call_starts()
    if variant.tag_only:
        tools._starts = np.array([tools.call_open], dtype=np.intp)
    system = ChatMessage("system", variant.system)
    outcomes = []
    try:
        for prompt, expected, arguments in CASES:
            usage, began = LlmUsage(), time.monotonic()
            call: ToolCallRequest | None = None
            messages = [system, ChatMessage("user", prompt)]
            for item in llm.stream("bench", messages, CancelToken(), usage, tools=variant.tools):
                if isinstance(item, ToolCallRequest):
                    call = item
                elif isinstance(item, str):
                    break  # a text answer: the decision is all this measures
            outcome = Outcome(prompt, expected, call.name if call else None)
            outcome.p_call = float(usage.extra.get("tool_call_p", 0.0))
            outcome.seconds = time.monotonic() - began
            if call is not None:
                outcome.arguments = call.arguments
                outcome.exact = call.name == expected and _same(arguments, call.arguments)
            outcomes.append(outcome)
            got = f" -> {json.dumps(dict(outcome.arguments))}" if call else ""
            mark = "exact" if outcome.exact else "     "
            print(f"  {outcome.called or '-':<19} p={outcome.p_call:.2f} {mark} {prompt}{got}",
                  flush=True)  # fmt: skip
    finally:
        tools._starts = starts
    return outcomes


def scores(outcomes: Sequence[Outcome]) -> dict[str, float]:
    called = [o for o in outcomes if o.called]
    needed = [o for o in outcomes if o.expected]
    right = [o for o in called if o.called == o.expected]
    return {
        "precision": len(right) / len(called) if called else 0.0,
        "recall": len(right) / len(needed) if needed else 0.0,
        "exact_arguments": sum(o.exact for o in needed) / len(needed) if needed else 0.0,
        "no_tool_correct": sum(o.called is None for o in outcomes if not o.expected)
        / max(1, sum(not o.expected for o in outcomes)),
        "call_seconds_p50": statistics.median([o.seconds for o in called]) if called else 0.0,
    }


def ttft(llm: LlamaLlm, system: str, tools: Sequence[ToolSpec] | None) -> list[float]:
    """Time to the first item (a text delta, or a call's first piece) of each plain
    question, the system prompt warm."""
    times = []
    messages = [ChatMessage("system", system)]
    for _ in llm.stream("ttft", [*messages, ChatMessage("user", "Hi")], CancelToken(),
                        LlmUsage(), tools=tools):  # fmt: skip
        break  # warm: the system prompt (and tools) in the KV cache
    for prompt in TTFT_PROMPTS:
        began = time.monotonic()
        for _ in llm.stream("ttft", [*messages, ChatMessage("user", prompt)], CancelToken(),
                            LlmUsage(), tools=tools):  # fmt: skip
            times.append(time.monotonic() - began)
            break
    return times


def main(args: argparse.Namespace) -> int:
    config = Config()
    llm = LlamaLlm(llm_model_path(config), threads=args.threads, n_ctx=config.llm.n_ctx,
                   n_batch=config.llm.n_batch, seed=config.llm.seed)  # fmt: skip
    chosen = [v for v in VARIANTS if not args.variants or any(s in v.name for s in args.variants)]
    report: dict[str, Any] = {"variants": {}, "cases": len(CASES)}
    for variant in chosen:
        print(f"{variant.name}:", flush=True)
        outcomes = run_variant(llm, variant)
        report["variants"][variant.name] = {
            **scores(outcomes),
            "outcomes": [o.__dict__ | {"arguments": dict(o.arguments)} for o in outcomes],
        }
    if args.ttft:
        system = BARE + HINTS
        report["ttft_s"] = {
            "without tools": ttft(llm, system, None),
            # the same prompt text, to tell the longer prompt's cost from the decision's
            "tools' text, no tools": ttft(llm, system_with_tools(system, TOOLS), None),
            "with tools": ttft(llm, system, TOOLS),
        }
    print(f"\n{'variant':<52} precision recall exact-args no-tool-ok call-s")
    for name, row in report["variants"].items():
        print(f"{name:<52} {row['precision']:9.2f} {row['recall']:6.2f} "
              f"{row['exact_arguments']:10.2f} {row['no_tool_correct']:10.2f} "
              f"{row['call_seconds_p50']:6.1f}")  # fmt: skip
    if args.ttft:
        for label, times in report["ttft_s"].items():
            print(f"TTFT {label:<22}: p50 {statistics.median(times) * 1000:.0f} ms, "
                  f"max {max(times) * 1000:.0f} ms over {len(times)} prompts")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    return 0
