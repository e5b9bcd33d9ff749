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
that chose the right tool.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.tool_eval.dataset import Utterance
from bench.tool_eval.echo import echo_rate, is_echo
from bench.tool_eval.outcome import Outcome

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


def score_requests(
    pairs: Sequence[tuple[Utterance, Outcome]], normalize: Normalizer
) -> dict[str, Any]:
    """Every figure of the requests (module docstring); ``rows`` has one per request."""
    per_tool: dict[str, Counts] = {}
    rows: list[dict[str, Any]] = []
    for utterance, outcome in pairs:
        for name, counts in selection(utterance, outcome).items():
            per_tool[name] = per_tool.get(name, Counts()) + counts
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
            }
        )
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
        "errors": sum(o.error is not None for _, o in pairs),
        "rows": rows,
    }


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
