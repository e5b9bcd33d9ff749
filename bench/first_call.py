"""The first call after a fresh start, beside steady-state calls that said the same words.

A first call is only comparable with a later call of the same sentences: a long read
sentence takes longer to answer than a card name, whenever it comes. So ``python -m bench caller
--starts N`` starts N fresh servers and gives call ``c`` of start ``s`` conversation
``s + c``: conversation ``k`` is the first call of start ``k`` and a later call of start
``k - 1``, with a different call before it (no KV prefix shared beyond the system
prompt). Each first-call turn is paired with the later turn of the same conversation,
sentence and transport, and the ratios are of the medians over those pairs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Row = dict[str, Any]


def _key(row: Row) -> tuple[str, int, int]:
    return row["transport"], row["conversation"], row["sentence"]


def _answer(row: Row) -> float | None:
    value = row.get("answer_ms")
    return None if value is None else float(value)


def _ttft(row: Row) -> float | None:
    value = (row.get("server") or {}).get("compute_ms", {}).get("llm_ttft")
    return None if value is None else float(value)


def _paired(
    pairs: Sequence[tuple[Row, Row]], measure: Callable[[Row], float | None]
) -> dict[str, Any]:
    both: list[tuple[float, float]] = []
    for first_row, steady_row in pairs:
        a, b = measure(first_row), measure(steady_row)
        if a is not None and b is not None:
            both.append((a, b))
    if not both:
        return {"n": 0, "first_ms": None, "steady_ms": None, "ratio": None}
    first = statistics.median(a for a, _ in both)
    steady = statistics.median(b for _, b in both)
    return {
        "n": len(both),
        "first_ms": round(first, 1),
        "steady_ms": round(steady, 1),
        "ratio": round(first / steady, 2) if steady else None,
    }


def first_call_summary(rows: Sequence[Row]) -> dict[str, Any] | None:
    """First calls (``order == 0``: the first call a fresh server took) against the later
    calls of the same conversation; None when no conversation was said both ways."""
    later = {_key(r): r for r in rows if r.get("order", 0) > 0 and "conversation" in r}
    first = [r for r in rows if r.get("order") == 0 and "conversation" in r]
    pairs = [(r, later[_key(r)]) for r in first if _key(r) in later]
    if not pairs:
        return None
    openers = [(f, s) for f, s in pairs if f["sentence"] == 0]
    return {
        "starts": len({r.get("start") for r in first}),
        "paired_turns": len(pairs),
        "answer": _paired(pairs, _answer),
        "llm_ttft": _paired(pairs, _ttft),
        "first_turn_answer": _paired(openers, _answer),
        "first_turn_llm_ttft": _paired(openers, _ttft),
        "fillers_on_first_calls": sum(bool(r.get("filler")) for r in first),
        "first_call_turns": len(first),
    }


def render_first_call(summary: dict[str, Any] | None) -> list[str]:
    if summary is None:
        return []
    lines = [
        "",
        f"**The first call after a fresh start** ({summary['starts']} starts; each first-call "
        "turn beside a later call's turn of the same conversation and sentence; targets: "
        "answer ratio ≤ 1.05, time to first token ≤ 1.2, no filler)",
        "",
        "| measure | pairs | first call p50 | steady p50 | ratio |",
        "|---|---|---|---|---|",
    ]
    for key, name in (
        ("answer", "first answer audio (ms)"),
        ("llm_ttft", "LLM time to first token (ms)"),
        ("first_turn_answer", "… the call's first sentence: answer (ms)"),
        ("first_turn_llm_ttft", "… the call's first sentence: first token (ms)"),
    ):
        m = summary[key]
        cells = ["–" if m[k] is None else f"{m[k]:.0f}" for k in ("first_ms", "steady_ms")]
        ratio = "–" if m["ratio"] is None else f"{m['ratio']:.2f}"
        lines.append(f"| {name} | {m['n']} | {cells[0]} | {cells[1]} | {ratio} |")
    lines.append(
        f"\nFillers on first calls: {summary['fillers_on_first_calls']} in "
        f"{summary['first_call_turns']} turns."
    )
    return lines
