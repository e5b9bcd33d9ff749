"""The alert rules (``deploy/prometheus/alerts.yml``) run in Prometheus's own rule engine.

``promtool check rules`` parses them; ``promtool test rules`` plays the synthetic series of
``alerts_test.yml`` through them and compares what fires, labels and annotations included.
That the tests would catch a broken alert is shown too: with every alert made never to fire,
each one's firing case fails; made always to fire, each one's quiet case fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1].parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DOC = ROOT / "docs" / "observability.md"
ANNOTATIONS = {"summary", "description", "runbook_url"}
_DURATION = re.compile(r"(\d+)(ms|[ywdhms])")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_FAILED = re.compile(r"alertname: (\w+), time: (\w+)")


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing: `make sysdeps` installs Debian's prometheus package")
    return found


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def rule_tests() -> Iterator[dict[str, Any]]:
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        yield from case.get("alert_rule_test", [])


def seconds(duration: str) -> float:
    """A Prometheus duration (``1d59m``, ``90m``) in seconds."""
    assert _DURATION.sub("", duration) == "", duration
    return sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(duration))


def run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)


def test_the_rules_parse(promtool: str) -> None:
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_rule_unit_tests_pass(promtool: str) -> None:
    tested = run(promtool, "test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    fired = {t["alertname"] for t in rule_tests() if t.get("exp_alerts")}
    quiet = {t["alertname"] for t in rule_tests() if not t.get("exp_alerts")}
    names = {rule["alert"] for rule in alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested staying quiet"


def test_every_alert_is_explained_with_a_runbook_section() -> None:
    doc = DOC.read_text()
    for rule in alerts():
        assert set(rule["annotations"]) >= ANNOTATIONS, rule["alert"]
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule["alert"]
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor == rule["alert"].lower(), rule["alert"]
        assert f"### {rule['alert']}" in doc, f"docs/observability.md has no ### {rule['alert']}"


def _failures(promtool: str, tmp_path: Path, expr: str) -> set[tuple[str, float]]:
    """Which (alert, time) checks fail when every alert's expression is ``expr``."""
    groups = yaml.safe_load(RULES.read_text())
    for group in groups["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["expr"] = expr
    (tmp_path / RULES.name).write_text(yaml.safe_dump(groups))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    tested = run(promtool, "test", "rules", str(tmp_path / RULE_TESTS.name))
    assert tested.returncode != 0
    return {(name, seconds(at)) for name, at in _FAILED.findall(tested.stdout + tested.stderr)}


def test_an_alert_that_never_fires_fails_its_tests(promtool: str, tmp_path: Path) -> None:
    expected = {(t["alertname"], seconds(t["eval_time"])) for t in rule_tests() if t["exp_alerts"]}
    assert _failures(promtool, tmp_path, "vector(0) > 1") == expected


def test_an_alert_that_always_fires_fails_its_tests(promtool: str, tmp_path: Path) -> None:
    expected = {(t["alertname"], seconds(t["eval_time"])) for t in rule_tests()}
    assert _failures(promtool, tmp_path, "vector(1)") == expected
