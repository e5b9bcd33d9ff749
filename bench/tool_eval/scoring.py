"""Scores: tool selection, exact arguments, no-tool accuracy, echo rate.

Each request expects one tool or none; what it called is the set of tools the model asked
for in that turn. Per tool, a request that expects it and called it is a true positive; a
call to it that the request did not expect (and that :data:`~dataset.ALSO_FINE` does not
allow) a false positive; a request that expected it and did not call it a false negative.
Overall precision and recall add these up over the tools (no-tool requests contribute
false positives only). **No-tool accuracy** is the share of no-tool requests that called
nothing.

**Exact arguments**: a call to the expected tool whose arguments, after the tools' own
normalisers (``examples/restaurant/normalize.py``, with the run's today, so "tonight" and
the date of the run are the same answer, and "7pm" is "19:00") and with unset (``None``)
values dropped, equal the expected ones. It is given over all tool requests and over those
that chose the right tool. The other agents' tools have no normalisers of their own: their
arguments are compared after the tool's own validation (its schema's types and defaults, so
a left-out argument equals its default) and :func:`plain_value` (case, punctuation, a
leading "the", spaces between digits, and a clock time with am/pm written as "15:00" are
all the same answer); a ``free_text`` argument matches when it is set.

**Invented facts** (``invented.py``): the replies of turns that called no tool which state
a fact one of the agent's tools owns.

**Per agent and per half**: :func:`summary` gives each agent's precision, recall, exact
arguments, no-tool accuracy and invented facts against :data:`TARGETS`, and the mean of
each figure over the tuning agents and over the held-out ones (each agent weighs the same).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.tool_eval.dataset import EvalAgent, Utterance
from bench.tool_eval.echo import echo_rate, is_echo
from bench.tool_eval.invented import FactChecker
from bench.tool_eval.outcome import Outcome
from voxpipe.agent import Agent, InvalidArguments

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "restaurant"
Normalizer = Callable[[str, Mapping[str, Any]], dict[str, Any]]


def restaurant_normalizer(on: dt.date | None = None) -> Normalizer:
    """The restaurant tools' own ``normalize_arguments``, with today fixed to ``on``."""
    module = _load(EXAMPLE / "normalize.py", "tool_eval_restaurant_normalize")
    day = on or module.today()

    def normalize(tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = module.normalize_arguments(tool, arguments, day)
        return out

    return normalize


_CLOCK = re.compile(r"^(1[0-2]|0?[1-9])(?:[: ]([0-5]\d))? ?([ap])\.? ?m\.?$")


def plain_value(value: Any) -> Any:
    """A string argument as it is compared: lower case, words only, no leading article,
    digits run together ("4 8 1 5" is "4815"), "3 pm", "3:00 PM" and "3 00 p.m." as "15:00"."""
    if not isinstance(value, str):
        return value
    text = " ".join(value.lower().split())
    if text == "noon":
        return "12:00"
    clock = _CLOCK.match(text)
    if clock:
        hour = int(clock[1]) % 12 + (12 if clock[3] == "p" else 0)
        return f"{hour:02d}:{clock[2] or '00'}"
    text = " ".join(re.findall(r"[a-z0-9:]+", text.replace("'", "")))
    text = re.sub(r"(?<=\d) (?=\d)", "", text)
    return re.sub(r"^(?:the|a|an) ", "", text)


def tool_normalizer(agent: Agent, free_text: frozenset[str] = frozenset()) -> Normalizer:
    """Arguments as the agent's own tool reads them (module docstring); a call its tool
    refuses keeps its raw arguments and an ``_invalid`` mark, so it matches nothing."""
    tools = {t.name: t for t in agent.python_tools}

    def normalize(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        tool = tools.get(name)
        try:
            read = tool.validate(arguments) if tool is not None else dict(arguments)
        except InvalidArguments:
            return {"_invalid": True, **arguments}
        return {
            key: (bool(value) if key in free_text else plain_value(value))
            for key, value in read.items()
        }

    return normalize


def normalizer_for(eval_agent: EvalAgent, agent: Agent) -> Normalizer:
    """Luigi's has its tools' own normalisers; every other agent the generic one."""
    if eval_agent.name == "restaurant":
        return restaurant_normalizer()
    return tool_normalizer(agent, eval_agent.free_text)


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn)

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "precision": self.precision, "recall": self.recall}


def selection(utterance: Utterance, outcome: Outcome) -> dict[str, Counts]:
    """This request's true/false positives and negatives, per tool."""
    out: dict[str, Counts] = {}
    expected = utterance.tool
    called = outcome.tools
    if expected is not None:
        out[expected] = Counts(tp=1) if expected in called else Counts(fn=1)
    for name in called - {expected} - utterance.also_fine:
        out[name] = out.get(name, Counts()) + Counts(fp=1)
    return out


def same_arguments(utterance: Utterance, outcome: Outcome, normalize: Normalizer) -> bool:
    """A call to the expected tool with the expected arguments (module docstring)."""
    if utterance.tool is None:
        return False
    expected = _settled(normalize(utterance.tool, utterance.arguments))
    return any(
        call.name == utterance.tool and _settled(normalize(call.name, call.arguments)) == expected
        for call in outcome.calls
    )


def _settled(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in arguments.items() if v is not None}


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def invented_facts(outcome: Outcome, facts: FactChecker | None) -> list[str] | None:
    """The owned facts a reply states unaided, as "fact: text"; None when not checked (a
    tool was called, no answer came, or the agent lists no owned facts)."""
    if facts is None or outcome.calls or outcome.error is not None:
        return None
    return [f"{i.fact}: {i.text}" for i in facts.find(outcome.reply, outcome.heard)]


def score_requests(
    pairs: Sequence[tuple[Utterance, Outcome]],
    normalize: Normalizer,
    facts: FactChecker | None = None,
) -> dict[str, Any]:
    """Every figure of the requests (module docstring); ``rows`` has one per request."""
    per_tool: dict[str, Counts] = {}
    rows: list[dict[str, Any]] = []
    for utterance, outcome in pairs:
        for name, counts in selection(utterance, outcome).items():
            per_tool[name] = per_tool.get(name, Counts()) + counts
        invented = invented_facts(outcome, facts)
        rows.append(
            {
                "id": utterance.id,
                "expected": utterance.tool,
                "called": sorted(outcome.tools),
                "right_tool": (utterance.tool in outcome.tools)
                if utterance.tool
                else not outcome.calls,
                "exact_arguments": same_arguments(utterance, outcome, normalize),
                "echo": is_echo(outcome.heard or utterance.text, outcome.reply),
                "invented": invented,
            }
        )
    checked = [r["invented"] for r in rows if r["invented"] is not None]
    overall = sum(per_tool.values(), Counts())
    tool_rows = [r for r in rows if r["expected"]]
    right = [r for r in tool_rows if r["right_tool"]]
    exact = sum(r["exact_arguments"] for r in tool_rows)
    no_tool = [(u, o) for u, o in pairs if u.tool is None]
    echoes, measured = echo_rate([(o.heard or u.text, o.reply) for u, o in no_tool])
    all_echoes, all_measured = echo_rate([(o.heard or u.text, o.reply) for u, o in pairs])
    return {
        "requests": len(pairs),
        "tool_requests": len(tool_rows),
        "no_tool_requests": len(no_tool),
        "overall": overall.to_dict(),
        "per_tool": {name: per_tool[name].to_dict() for name in sorted(per_tool)},
        "exact_arguments": _share(exact, len(tool_rows)),
        "exact_arguments_given_tool": _share(exact, len(right)),
        "no_tool_accuracy": _share(sum(not o.calls for _, o in no_tool), len(no_tool)),
        "no_tool_echo": {
            "echoes": echoes,
            "measured": measured,
            "rate": _share(echoes, measured),
        },
        "echo": {
            "echoes": all_echoes,
            "measured": all_measured,
            "rate": _share(all_echoes, all_measured),
        },
        "invented_facts": {
            "replies": sum(bool(found) for found in checked),
            "checked": len(checked),
            "rate": _share(sum(bool(found) for found in checked), len(checked)),
        },
        "errors": sum(o.error is not None for _, o in pairs),
        "rows": rows,
    }


TARGETS: Mapping[str, float] = {"precision": 0.95, "recall": 0.90, "no_tool_accuracy": 0.95}
"""Issue 25's targets, met by every agent or not met."""

FIGURES = ("precision", "recall", "exact_arguments", "no_tool_accuracy", "invented_rate")


def agent_row(scores: Mapping[str, Any]) -> dict[str, Any]:
    """One agent's headline figures, and the targets it misses."""
    row = {
        "requests": scores["requests"],
        "precision": scores["overall"]["precision"],
        "recall": scores["overall"]["recall"],
        "exact_arguments": scores["exact_arguments"],
        "no_tool_accuracy": scores["no_tool_accuracy"],
        "invented": scores["invented_facts"]["replies"],
        "invented_checked": scores["invented_facts"]["checked"],
        "invented_rate": scores["invented_facts"]["rate"],
        "errors": scores["errors"],
    }
    # no false positive at all leaves precision undefined: that meets the target
    row["missed_targets"] = [
        name
        for name, target in TARGETS.items()
        if (row[name] is not None and row[name] < target)
        or (name == "recall" and row[name] is None and scores["tool_requests"])
    ]
    return row


def summary(agents: Sequence[tuple[EvalAgent, Mapping[str, Any]]]) -> dict[str, Any]:
    """Per agent rows, and each half's means (module docstring)."""
    rows = {a.name: {"held_out": a.held_out, **agent_row(s)} for a, s in agents}
    halves: dict[str, Any] = {}
    for half, held_out in (("tuning", False), ("held_out", True)):
        members = [r for r in rows.values() if r["held_out"] is held_out]
        if not members:
            continue
        mean: dict[str, Any] = {"agents": len(members)}
        for figure in FIGURES:
            values = [r[figure] for r in members if r[figure] is not None]
            mean[figure] = sum(values) / len(values) if values else None
        mean["invented"] = sum(r["invented"] for r in members)
        mean["invented_checked"] = sum(r["invented_checked"] for r in members)
        mean["agents_meeting_targets"] = sum(not r["missed_targets"] for r in members)
        halves[half] = mean
    return {"agents": rows, "halves": halves}


def score_echo(pairs: Sequence[tuple[Utterance, Outcome]]) -> dict[str, Any]:
    """The echo rate of the read sentences, over what the model heard."""
    echoes, measured = echo_rate([(o.heard or u.text, o.reply) for u, o in pairs])
    return {
        "echoes": echoes,
        "measured": measured,
        "rate": _share(echoes, measured),
        "errors": sum(o.error is not None for _, o in pairs),
        "called": sum(bool(o.calls) for _, o in pairs),  # a read line is no request
        "rows": [
            {
                "id": u.id,
                "heard": o.heard,
                "reply": o.reply,
                "echo": is_echo(o.heard or u.text, o.reply),
                "tools": [c.name for c in o.calls],
            }
            for u, o in pairs
        ],
    }
