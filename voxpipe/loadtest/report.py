"""The ``voxpipe load`` report as one self-contained HTML page (inline SVG, no scripts).

One section per step: the voice-to-voice latency as a histogram and as a CDF
with the SLO drawn in, the percentiles, calls by outcome, turns by status,
the server's queue waits and buffer ages, and memory. With a capacity search,
a chart of p99 against the number of calls comes first.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import numpy as np

WIDTH, HEIGHT, PAD = 460, 220, 40
STYLE = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:1000px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-top:1px solid #ccc;padding-top:1em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:2px 10px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.charts{display:flex;gap:1em;flex-wrap:wrap}svg{background:#fafafa;border:1px solid #ddd}
.pass{color:#17702a;font-weight:bold}.fail{color:#b3261e;font-weight:bold}
"""


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return escape(str(value))


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value / 2**20:,.1f} MiB"


def _counts(counts: dict[str, int]) -> str:
    """``{"at_capacity": 2}`` -> `` (at_capacity 2)``; "" when empty."""
    if not counts:
        return ""
    return " (" + ", ".join(f"{escape(k)} {v}" for k, v in sorted(counts.items())) + ")"


def _axes(
    x_max: float, y_max: float, x_label: str, y_label: str, x_ticks: list[float] | None = None
) -> list[str]:
    w, h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    parts = [
        f'<line x1="{PAD}" y1="{PAD + h}" x2="{PAD + w}" y2="{PAD + h}" stroke="#444"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{PAD + h}" stroke="#444"/>',
        f'<text x="{PAD + w / 2}" y="{HEIGHT - 6}" text-anchor="middle" font-size="11">'
        f"{escape(x_label)}</text>",
        f'<text x="12" y="{PAD + h / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {PAD + h / 2})">{escape(y_label)}</text>',
    ]
    for tick in x_ticks if x_ticks is not None else [x_max * i / 4 for i in range(5)]:
        x = PAD + w * tick / x_max
        parts.append(
            f'<text x="{x:.1f}" y="{PAD + h + 14}" font-size="10" text-anchor="middle">'
            f"{tick:,.0f}</text>"
        )
    parts.append(
        f'<text x="{PAD - 4}" y="{PAD + 4}" font-size="10" text-anchor="end">{y_max:g}</text>'
    )
    return parts


def _svg(parts: list[str], title: str) -> str:
    body = "".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'
        f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" font-size="12">{escape(title)}</text>'
        f"{body}</svg>"
    )


def _slo_line(slo_ms: float | None, x_max: float) -> list[str]:
    if slo_ms is None or slo_ms > x_max:
        return []
    w, h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    x = PAD + w * slo_ms / x_max
    return [
        f'<line x1="{x:.1f}" y1="{PAD}" x2="{x:.1f}" y2="{PAD + h}" stroke="#b3261e" '
        f'stroke-dasharray="4 3"/>',
        f'<text x="{x + 3:.1f}" y="{PAD + 10}" font-size="10" fill="#b3261e">SLO</text>',
    ]


def _x_max(values: list[float], slo_ms: float | None) -> float:
    top = max([*values, slo_ms or 0.0, 1.0])
    step = 10 ** math.floor(math.log10(top))
    return float(math.ceil(top * 1.05 / step) * step)


def histogram_svg(values: list[float], slo_ms: float | None = None, bins: int = 30) -> str:
    """Counts of voice-to-voice latencies in equal-width bins from 0 ms."""
    if not values:
        return _svg(_axes(1, 0, "voice-to-voice (ms)", "turns"), "histogram: no turns")
    x_max = _x_max(values, slo_ms)
    counts, edges = np.histogram(values, bins=bins, range=(0.0, x_max))
    y_max = int(counts.max()) or 1
    w, h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    parts = _axes(x_max, y_max, "voice-to-voice (ms)", "turns")
    for count, left, right in zip(counts, edges[:-1], edges[1:], strict=True):
        if not count:
            continue
        bar_h = h * count / y_max
        parts.append(
            f'<rect x="{PAD + w * left / x_max:.1f}" y="{PAD + h - bar_h:.1f}" '
            f'width="{max(1.0, w * (right - left) / x_max - 1):.1f}" height="{bar_h:.1f}" '
            f'fill="#3b6ea8"><title>{left:.0f}–{right:.0f} ms: {count}</title></rect>'
        )
    return _svg([*parts, *_slo_line(slo_ms, x_max)], f"histogram ({len(values)} turns)")


def cdf_svg(values: list[float], slo_ms: float | None = None) -> str:
    """The empirical CDF of voice-to-voice latency, as a step line."""
    if not values:
        return _svg(_axes(1, 1, "voice-to-voice (ms)", "fraction"), "CDF: no turns")
    x_max = _x_max(values, slo_ms)
    w, h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    ordered = sorted(values)
    points = [f"{PAD:.1f},{PAD + h:.1f}"]
    for i, v in enumerate(ordered):
        x = PAD + w * v / x_max
        points.append(f"{x:.1f},{PAD + h * (1 - i / len(ordered)):.1f}")
        points.append(f"{x:.1f},{PAD + h * (1 - (i + 1) / len(ordered)):.1f}")
    points.append(f"{PAD + w:.1f},{PAD:.1f}")
    parts = [
        *_axes(x_max, 1, "voice-to-voice (ms)", "fraction of turns"),
        f'<polyline points="{" ".join(points)}" fill="none" stroke="#3b6ea8" stroke-width="1.5"/>',
        *_slo_line(slo_ms, x_max),
    ]
    return _svg(parts, "CDF")


def capacity_svg(points: list[tuple[int, float | None, bool]], slo_ms: float) -> str:
    """p99 voice-to-voice against the number of calls, one dot per step (green: met)."""
    measured = [p for _, p, _ in points if p is not None]
    n_max = max([n for n, _, _ in points] + [1])
    y_max = max([*measured, slo_ms]) * 1.1
    w, h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    ticks = sorted({0.0, *(float(n) for n, _, _ in points)})
    parts = _axes(float(n_max), round(y_max), "concurrent calls", "p99 v2v (ms)", ticks)
    y_slo = PAD + h * (1 - slo_ms / y_max)
    parts.append(
        f'<line x1="{PAD}" y1="{y_slo:.1f}" x2="{PAD + w}" y2="{y_slo:.1f}" stroke="#b3261e" '
        f'stroke-dasharray="4 3"/>'
    )
    for n, p99, passed in points:
        y = PAD + h * (1 - (p99 if p99 is not None else y_max) / y_max)
        colour = "#17702a" if passed else "#b3261e"
        parts.append(
            f'<circle cx="{PAD + w * n / n_max:.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
            f"<title>{n} calls: p99 {_fmt(p99)} ms</title></circle>"
        )
    return _svg(parts, "capacity: p99 by concurrent calls")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{_fmt(c, 1)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _stats_row(name: str, stats: dict[str, float]) -> list[Any]:
    return [name, *(stats.get(k) for k in ("n", "p50", "p95", "p99", "max", "mean"))]


STATS_HEADER = ["", "n", "p50", "p95", "p99", "max", "mean"]


def step_html(step: dict[str, Any], index: int) -> str:
    slo = step.get("slo_ms")
    v2v: list[float] = step["voice_to_voice_values"]
    outcomes, turns, server = step["outcomes"], step["turns"], step["server"]
    verdict = ""
    if "meets_slo" in step:
        ok = step["meets_slo"]
        verdict = (
            f' <span class="{"pass" if ok else "fail"}">{"meets" if ok else "misses"} SLO</span>'
        )
    latency_rows = [
        _stats_row("voice-to-voice, caller (ms)", step["voice_to_voice_ms"]),
        _stats_row("voice-to-voice, server (ms)", server["voice_to_voice_ms"]),
        *(_stats_row(f"queue wait {e} (ms)", s) for e, s in server["queue_ms"].items()),
        *(_stats_row(f"buffer age {d} (ms)", s) for d, s in server["buffer_age_ms"].items()),
    ]
    memory = step.get("memory") or {}
    crashes = "".join(f"<li>{escape(c)}</li>" for c in outcomes["crashes"])
    refused, errors = _counts(outcomes["rejected_by_code"]), _counts(step["errors"]) or "none"
    return f"""
<h2>Step {index + 1}: {step["calls"]} concurrent call(s), {escape(step["role"])}{verdict}</h2>
<p>{step["duration_s"]:g} s of calls ({step["elapsed_s"]:g} s with the last turns).
Calls: {outcomes["admitted"]} admitted, {outcomes["rejected"]} rejected{refused},
{outcomes["crashed"]} crashed. Turns: {turns["total"]} ({turns["completed"]} completed,
{turns["failed"]} failed{_counts(turns["by_status"])}). Errors received: {errors}.</p>
<div class="charts">{histogram_svg(v2v, slo)}{cdf_svg(v2v, slo)}</div>
{_table(STATS_HEADER, latency_rows)}
<p>Server memory ({escape(str(memory.get("source", "–")))}): baseline
{_mib(memory.get("baseline_bytes"))}, peak {_mib(memory.get("peak_bytes"))}, per call
{_mib(memory.get("per_call_bytes"))}.</p>
{f"<ul>{crashes}</ul>" if crashes else ""}"""


def capacity_html(capacity: dict[str, Any]) -> str:
    slo = capacity["slo_ms"]
    points = [(s["calls"], s["p99_ms"], s["meets_slo"]) for s in capacity["searched"]]
    overload = capacity.get("overload")
    chart = [*points, (overload["calls"], overload["p99_ms"], False)] if overload else points
    over = (
        f"At 2× ({overload['calls']} calls): p99 {_fmt(overload['p99_ms'])} ms, "
        f"{overload['rejected']} rejected, {overload['crashed']} crashed."
        if overload
        else "No overload step (no call count met the SLO)."
    )
    return f"""
<h2>Capacity at p99 voice-to-voice &lt; {slo:g} ms: {capacity["capacity"]} call(s)
{"(the search stopped at its cap)" if capacity.get("capped") else ""}</h2>
<div class="charts">{capacity_svg(chart, slo)}</div>
{_table(["calls", "p99 (ms)", "meets SLO"], [[n, p, "yes" if ok else "no"] for n, p, ok in points])}
<p>{over}</p>"""


def render(result: dict[str, Any]) -> str:
    """The whole report for a ``load.json`` document."""
    capacity = result.get("capacity")
    steps = "".join(step_html(s, i) for i, s in enumerate(result["steps"]))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>voxpipe load</title>
<style>{STYLE}</style></head><body>
<h1>voxpipe load</h1>
<p><code>{escape(result.get("command", ""))}</code><br>
Server: {escape(result.get("server", ""))}. Callers: real speech at real-time pace,
then listening until the reply has played, then {escape(result.get("think", ""))} thinking.</p>
{capacity_html(capacity) if capacity else ""}
{steps}
</body></html>
"""
