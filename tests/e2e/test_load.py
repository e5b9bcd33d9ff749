"""``voxpipe load`` end to end: concurrent callers against the server it starts itself.

Short runs (20 s of calls each) on the real models; no latency thresholds, only that
turns were measured, nothing crashed, and admission refusals are counted as rejections.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

TIMEOUT_S = 600  # model load + 20 s of calls + the last turns, on a busy 2-core machine


def voxpipe_load(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    cmd = [sys.executable, "-m", "voxpipe.cli", "load", "--duration", "20", "--out", str(out)]
    done = subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert (out / "load.json").is_file(), done.stdout + done.stderr
    assert (out / "load.html").is_file()
    return done, json.loads((out / "load.json").read_text())


def test_two_concurrent_callers(tmp_path: Path) -> None:
    done, result = voxpipe_load(tmp_path, "--calls", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    [step] = result["steps"]
    assert step["calls"] == 2
    assert step["outcomes"]["admitted"] == 2
    assert step["outcomes"]["crashed"] == 0, step["outcomes"]["crashes"]
    assert step["outcomes"]["rejected"] == 0
    assert {t["call"] for t in step["turn_records"]} == {0, 1}  # both callers spoke
    assert step["turns"]["completed"] >= 2
    v2v = step["voice_to_voice_ms"]
    assert v2v["n"] >= 2 and 0 < v2v["p50"] <= v2v["p99"] <= v2v["max"]
    assert all(t["v2v_ms"] > 0 for t in step["turn_records"] if t["status"] == "completed")
    assert all(t["transcript"] for t in step["turn_records"] if t["status"] == "completed")
    # the server's own figures came through: per-engine queue waits, buffer age, memory
    assert {"stt", "llm"} <= set(step["server"]["queue_ms"])
    assert step["server"]["buffer_age_ms"]["inbound"]["n"] > 0
    assert step["memory"]["source"] == "psutil"
    assert step["memory"]["peak_bytes"] >= step["memory"]["baseline_bytes"] > 0
    assert "histogram" in (tmp_path / "load.html").read_text()


def test_calls_beyond_max_calls_are_rejected_not_crashed(tmp_path: Path) -> None:
    done, result = voxpipe_load(tmp_path, "--calls", "2", "--max-calls", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    [step] = result["steps"]
    outcomes = step["outcomes"]
    assert outcomes["rejected"] >= 1
    assert outcomes["rejected_by_code"].get("at_capacity", 0) >= 1
    assert outcomes["crashed"] == 0, outcomes["crashes"]
    assert outcomes["admitted"] == 2 - outcomes["rejected"] >= 1
    assert step["turns"]["completed"] >= 1  # the admitted caller was served meanwhile
