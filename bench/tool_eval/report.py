"""The results as tables on the terminal.

Per tool and per request only for the tuning agents; a held-out agent shows its aggregate
row and nothing more (``dataset.py`` says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _of(part: int, whole: int) -> str:
    return f"{part}/{whole} ({_pct(part / whole if whole else None)})"


def _per_tool(name: str, scored: Mapping[str, Any]) -> list[str]:
    lines = [
        "",
        f"  {name}: {'tool':<20} {'precision':>9} {'recall':>7} {'tp':>4} {'fp':>4} {'fn':>4}",
    ]
    pad = " " * (len(name) + 2)
    for tool, c in [*scored["per_tool"].items(), ("overall", scored["overall"])]:
        lines.append(
            f"  {pad}{tool:<20} {_pct(c['precision']):>9} {_pct(c['recall']):>7} "
            f"{c['tp']:>4} {c['fp']:>4} {c['fn']:>4}"
        )
    rows = scored["rows"]
    right = sum(1 for r in rows if r["expected"] and r["right_tool"])
    exact = sum(1 for r in rows if r["exact_arguments"])
    no_tool_right = sum(1 for r in rows if not r["expected"] and r["right_tool"])
    e, f = scored["echo"], scored["invented_facts"]
    lines += [
        f"  {pad}exact arguments {_of(exact, scored['tool_requests'])} "
        f"({exact}/{right} with the right tool); no-tool accuracy "
        f"{_of(no_tool_right, scored['no_tool_requests'])}",
        f"  {pad}invented facts {_of(f['replies'], f['checked'])} of replies without a tool; "
        f"echo {_of(e['echoes'], e['measured'])}",
    ]
    return lines


HEADER = (
    f"  {'agent':<12} {'half':<9} {'n':>4} {'precision':>9} {'recall':>7} {'exact args':>10} "
    f"{'no-tool':>8} {'invented':>9}  missed targets"
)


def _row(name: str, half: str, row: Mapping[str, Any]) -> str:
    invented = f"{row['invented']}/{row['invented_checked']}"
    if "agents_meeting_targets" in row:  # a half's means
        missed = f"{row['agents_meeting_targets']}/{row['agents']} agents meet every target"
    else:
        missed = ", ".join(row["missed_targets"]) or "-"
    n = row.get("requests", row.get("agents", ""))
    return (
        f"  {name:<12} {half:<9} {n:>4} {_pct(row['precision']):>9} {_pct(row['recall']):>7} "
        f"{_pct(row['exact_arguments']):>10} {_pct(row['no_tool_accuracy']):>8} "
        f"{invented:>9}  {missed}"
    )


def render(results: dict[str, Any]) -> str:
    lines = [
        f"tool-eval ({results['mode']}, {'speech' if results['speech'] else 'text'}, "
        f"today {results['today']})"
    ]
    if not results["tools_supported"]:
        lines.append(f"  !! {results['tools_note']}: tool selection not scored")
    for name, scored in results.get("agents", {}).items():
        if not scored["held_out"]:
            lines += _per_tool(name, scored)
    summary = results.get("summary")
    if summary:
        lines += ["", HEADER]
        for name, row in summary["agents"].items():
            half = "held out" if row["held_out"] else "tuning"
            lines.append(
                _row(name, half, row) + (f"  ({row['errors']} errors)" * bool(row["errors"]))
            )
        for half, mean in summary["halves"].items():
            lines.append(_row(f"mean {half.replace('_', '-')}", "", mean))
        lines.append(
            "  targets: precision >= 95 %, recall >= 90 %, no-tool accuracy >= 95 % per agent; "
            "invented: replies without a tool that state an owned fact / such replies"
        )
    read = results.get("read")
    if read:
        lines.append("")
        lines.append(f"  echo, read sentences:   {_of(read['echoes'], read['measured'])} measured")
        lines.append(f"  read sentences that called a tool: {read['called']}/{len(read['rows'])}")
        if read["errors"]:
            lines.append(f"  errors: {read['errors']} read sentences got no answer")
    return "\n".join(lines)


def progress_line(kind: str, utterance_id: str, outcome: Any) -> str:
    if outcome.error:
        return f"  {kind:<7} {utterance_id:<28} ERROR {outcome.error}"
    calls = " ".join(f"{c.name}{dict(c.arguments)}" for c in outcome.calls) or "-"
    return (
        f"  {kind:<7} {utterance_id:<28} {outcome.seconds:5.1f}s  heard: {outcome.heard!r}\n"
        f"  {'':<7} {'':<28}         tools: {calls}\n"
        f"  {'':<7} {'':<28}         reply: {outcome.reply!r}"
    )
