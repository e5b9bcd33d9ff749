"""The HTML report: self-contained, and showing the numbers of load.json."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from voxpipe.loadtest.aggregate import Memory, StepResult, summarize_step
from voxpipe.loadtest.callers import CallerResult, CallerTurn
from voxpipe.loadtest.report import cdf_svg, histogram_svg, render


def document() -> dict[str, Any]:
    turns = [
        CallerTurn(0, "a", "completed", 0.0, v2v_ms=v, queue_ms={"llm": 12.5})
        for v in (812.0, 934.0, 1377.0, 1620.0)
    ]
    step = summarize_step(
        StepResult(
            calls=2,
            duration_s=20,
            elapsed_s=24,
            callers=[
                CallerResult(0, "completed", turns=turns),
                CallerResult(1, "rejected", reason="at_capacity"),
            ],
            memory=Memory("psutil", 2**30, 2**30 + 2**26),
            buffer_age_ms={"outbound": {"n": 9, "p50": 3.0, "p95": 8.0, "p99": 9.0}},
        ),
        slo_ms=1500,
    )
    return {
        "command": "voxpipe load --find-capacity",
        "server": "a fresh server per step",
        "think": "0.5–2 s",
        "steps": [step],
        "capacity": {
            "slo_ms": 1500,
            "capacity": 3,
            "capped": False,
            "searched": [
                {"calls": 1, "p99_ms": 700.0, "meets_slo": True},
                {"calls": 2, "p99_ms": 950.0, "meets_slo": True},
                {"calls": 4, "p99_ms": 2100.0, "meets_slo": False},
                {"calls": 3, "p99_ms": 1400.0, "meets_slo": True},
            ],
            "overload": {"calls": 6, "p99_ms": 4321.0, "rejected": 2, "crashed": 0},
        },
    }


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_report_shows_the_numbers() -> None:
    html = render(document())
    text = re.sub(r"<[^>]+>", " ", html)
    assert "1,620.0" in text  # max voice-to-voice
    assert "Capacity at p99 voice-to-voice &lt; 1500 ms: 3 call(s)" in html
    assert "At 2× (6 calls): p99 4,321 ms, 2 rejected, 0 crashed." in text
    assert "1 rejected (at_capacity 1)" in text
    assert "queue wait llm" in text and "buffer age outbound" in text
    assert "per call 64.0 MiB" in " ".join(text.split())
    assert "misses SLO" in text  # p99 of the step is over 1500 ms


def test_report_is_self_contained() -> None:
    html = render(document())
    parser = _Tags()
    parser.feed(html)
    assert parser.tags.count("svg") == 3  # capacity, histogram, CDF
    assert "script" not in parser.tags and "link" not in parser.tags and "img" not in parser.tags
    assert not re.search(r"(src|href)=", html)


def test_charts_draw_every_turn_and_the_slo() -> None:
    values = [100.0, 100.0, 900.0, 2000.0]
    hist = histogram_svg(values, slo_ms=1500)
    assert hist.count("<rect") == 3  # two turns share a bin
    assert "SLO" in hist
    cdf = cdf_svg(values, slo_ms=1500)
    assert cdf.count("<polyline") == 1 and "SLO" in cdf
    assert "no turns" in histogram_svg([])
