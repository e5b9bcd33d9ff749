"""Percentiles and the plain-text tables that ``voxpipe load`` and the benchmarks print."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def summarize(values: Iterable[float | None]) -> dict[str, float]:
    """n, p50, p95, p99, max, mean and jitter (p99 - p50) of the values that are present."""
    data = np.array([v for v in values if v is not None], dtype=float)
    if data.size == 0:
        return {"n": 0}
    p50, p95, p99 = np.percentile(data, [50, 95, 99])
    return {
        "n": int(data.size),
        "p50": round(float(p50), 1),
        "p95": round(float(p95), 1),
        "p99": round(float(p99), 1),
        "max": round(float(data.max()), 1),
        "mean": round(float(data.mean()), 1),
        "jitter": round(float(p99 - p50), 1),
    }


def table(rows: Sequence[tuple[str, dict[str, float]]], unit: str = "ms") -> str:
    cols = ("n", "p50", "p95", "p99", "max", "jitter")
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"{'':<{width}}" + "".join(f"{c:>9}" for c in cols) + f"   ({unit})"]
    for name, stats in rows:
        cells = "".join(
            f"{stats.get(c, float('nan')):>9.0f}"
            if c == "n"
            else f"{stats.get(c, float('nan')):>9.1f}"
            for c in cols
        )
        lines.append(f"{name:<{width}}{cells}")
    return "\n".join(lines)
