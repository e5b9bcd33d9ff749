"""The results as a table on the terminal."""

from __future__ import annotations

from typing import Any


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _of(part: int, whole: int) -> str:
    return f"{part}/{whole} ({_pct(part / whole if whole else None)})"


def render(results: dict[str, Any]) -> str:
    lines = [
        f"tool-eval ({results['mode']}, agent {results['agent']}, "
        f"{'speech' if results['speech'] else 'text'}, today {results['today']})"
    ]
    if not results["tools_supported"]:
        lines.append(f"  !! {results['tools_note']}: tool selection not scored")
    scored = results.get("requests")
    if scored:
        if results["tools_supported"]:
            lines += [
                "",
                f"  {'tool':<20} {'precision':>9} {'recall':>7} {'tp':>4} {'fp':>4} {'fn':>4}",
            ]
            for name, c in [*scored["per_tool"].items(), ("overall", scored["overall"])]:
                lines.append(
                    f"  {name:<20} {_pct(c['precision']):>9} {_pct(c['recall']):>7} "
                    f"{c['tp']:>4} {c['fp']:>4} {c['fn']:>4}"
                )
            right = sum(1 for r in scored["rows"] if r["expected"] and r["right_tool"])
            exact = sum(1 for r in scored["rows"] if r["exact_arguments"])
            lines += [
                "",
                f"  exact arguments:   {_of(exact, scored['tool_requests'])} of tool requests, "
                f"{_of(exact, right)} of those with the right tool",
            ]
            no_tool_right = sum(1 for r in scored["rows"] if not r["expected"] and r["right_tool"])
            lines.append(f"  no-tool accuracy:  {_of(no_tool_right, scored['no_tool_requests'])}")
        e = scored["no_tool_echo"]
        lines.append(f"  echo, no-tool requests: {_of(e['echoes'], e['measured'])} measured")
        e = scored["echo"]
        lines.append(f"  echo, all requests:     {_of(e['echoes'], e['measured'])} measured")
        if scored["errors"]:
            lines.append(f"  errors: {scored['errors']} requests got no answer")
    read = results.get("read")
    if read:
        lines.append(f"  echo, read sentences:   {_of(read['echoes'], read['measured'])} measured")
        if "called" in read:
            lines.append(
                f"  read sentences that called a tool: {read['called']}/{len(read['rows'])}"
            )
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
