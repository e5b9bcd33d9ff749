"""Every metric the dashboard (``deploy/grafana/voxpipe.json``) and the alert rules
(``deploy/prometheus/alerts.yml``) query is one a running server exports at ``/metrics``.

A renamed metric otherwise fails silently: the panel goes blank, the alert never fires. The
server here is the real app on fake engines; a labelled metric that nothing has observed yet
still shows its ``# TYPE`` line, which is what is checked (a histogram's family covers its
``_bucket``, ``_sum`` and ``_count`` series).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import serving
from voxpipe.config import Config
from voxpipe.engines.base import Engines

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "voxpipe.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
TIMEOUT_S = 20.0

# PromQL words that look like metric names.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
             "and", "or", "unless", "inf", "nan"}  # fmt: skip
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric (and recording rule) names an expression selects."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery windows
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\b\d[\w.]*", "", text)  # numbers and durations (1h, 2e8)
    names = set()
    for match in _NAME.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group().lower() in _KEYWORDS:
            continue  # a function or an aggregation
        names.add(match.group())
    return names


def test_the_name_parser_finds_metrics_not_functions_or_labels() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (job, le) (rate(a_seconds_bucket{job=~"$job",le="0.5"}'
        "[$__rate_interval]))) > on (job) group_left () 2 * (rec:x:ratio offset 1h) and b_total"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "rec:x:ratio", "b_total"}


def _dashboard_exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


def queried() -> tuple[set[str], set[str]]:
    """(names the dashboard and rules select, recording rules the rules define)."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    exprs = [r["expr"] for r in rules] + list(_dashboard_exprs(json.loads(DASHBOARD.read_text())))
    exprs = [re.sub(r"label_values\(([^,)]+).*", r"\1", e) for e in exprs]  # Grafana's
    return set().union(*(metric_names(e) for e in exprs)), recorded


def exported(page: str) -> set[str]:
    """Every series name ``/metrics`` can carry, from its ``# TYPE`` lines and samples."""
    names = set()
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            names.add(family)
            names.update(family + suffix for suffix in _SUFFIXES.get(kind, ()))
        elif line and not line.startswith("#"):
            names.add(_NAME.match(line).group())  # type: ignore[union-attr]
    return names


@pytest.fixture
async def metrics_page(tmp_path: Path) -> str:
    config = Config.load(server={"turn_log_path": tmp_path / "turns.jsonl"}, store={"path": None})

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt(), FakeLlm(["Hi."]), FakeTts())

    async with serving(config, engines, TIMEOUT_S) as (_, http):
        response = await http.get("/metrics")
        response.raise_for_status()
        return response.text


def test_the_dashboard_and_the_rules_query_only_exported_metrics(metrics_page: str) -> None:
    names, recorded = queried()
    assert len(names) > 20  # the parser found the queries at all
    assert {n for n in names if ":" in n} <= recorded, "a recording rule that is not defined"
    missing = {n for n in names if ":" not in n} - exported(metrics_page)
    assert missing == set(), f"queried but not on /metrics: {sorted(missing)}"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    """Stage percentiles, first audio, queue wait, buffer age, calls and refusals, fillers,
    barge-ins, reconnects, client voice-to-voice, tool latency and tool calls."""
    names, _ = queried()
    for family in (
        "voxpipe_turn_stage_seconds_bucket",
        "voxpipe_voice_to_voice_seconds_bucket",
        "voxpipe_engine_queue_seconds_bucket",
        "voxpipe_buffer_age_seconds_bucket",
        "voxpipe_calls",
        "voxpipe_refused_calls_total",
        "voxpipe_fillers_total",
        "voxpipe_barge_in_seconds_count",
        "voxpipe_reconnects_total",
        "voxpipe_client_voice_to_voice_seconds_bucket",
        "voxpipe_tool_seconds_bucket",
        "voxpipe_tool_calls_total",
        "voxpipe_tool_calls_per_turn_count",
    ):
        assert family in names, family
