"""An alert of ``deploy/prometheus/alerts.yml`` fires in a real Prometheus scraping a live
voxpipe: Debian's ``prometheus`` binary, scraping every second, evaluating the repository's
rules every second, with the first-audio objective made tiny (1 ms, any one turn, 5 s
``for``) in a copy of the rule file. One spoken turn then breaks the objective, and the
alert must go to ``firing``, while the connection-failure alert, given the same short
``for``, stays inactive: every connection was accepted.

The rest of each rule (recording rules, windows, labels) is the shipped one, so a metric
renamed on one side, or an expression Prometheus rejects, fails here. The promtool unit tests
(``tests/unit/test_alerts.py``) check the thresholds themselves on synthetic series.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import RunningServer, librivox_clips
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.loadtest.server_process import free_port

pytestmark = pytest.mark.e2e

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
FIRST_AUDIO = "VoxpipeFirstAudioP99High"
QUIET = "VoxpipeConnectionFailures"
FOR = "5s"
JOB = "voxpipe"
READY_TIMEOUT_S = 30.0
FIRING_TIMEOUT_S = 90.0
POLL_S = 0.5
# The shipped objective and turn minimum, and what this test puts in their place.
TINY_OBJECTIVE = {
    "voxpipe:first_audio_seconds:p99_5m > 1.5": "voxpipe:first_audio_seconds:p99_5m > 0.001",
    "voxpipe:first_audio_turns:increase5m >= 10": "voxpipe:first_audio_turns:increase5m > 0",
}


def tiny_objective_rules(shipped: Path, out: Path) -> Path:
    """``shipped`` with the first-audio objective made 1 ms over any one turn, and a 5 s
    ``for`` on it and on the connection-failure alert; the shipped file is not touched."""
    groups = yaml.safe_load(shipped.read_text())
    rules = {r["alert"]: r for g in groups["groups"] for r in g["rules"] if "alert" in r}
    first_audio = rules[FIRST_AUDIO]
    for old, new in TINY_OBJECTIVE.items():
        assert old in first_audio["expr"], (
            f"{FIRST_AUDIO} no longer reads {old!r}: update this test"
        )
        first_audio["expr"] = first_audio["expr"].replace(old, new)
    first_audio["for"] = rules[QUIET]["for"] = FOR
    out.write_text(yaml.safe_dump(groups, sort_keys=False))
    return out


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def get(self, path: str) -> Any:
        response = httpx.get(f"{self.url}{path}", timeout=5)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "prometheus exited:\n" + self.log()
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("prometheus not ready:\n" + self.log())

    def wait_scraped(self) -> None:
        """Until the target has been scraped once: the counters' values before the call."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            targets = self.get("/api/v1/targets")["activeTargets"]
            if targets and all(t["health"] == "up" for t in targets):
                return
            time.sleep(POLL_S)
        raise TimeoutError(f"voxpipe never scraped: {targets}\n" + self.log())

    def rule(self, name: str) -> dict[str, Any]:
        groups = self.get("/api/v1/rules")["groups"]
        found = [r for g in groups for r in g["rules"] if r["name"] == name]
        assert len(found) == 1, f"{name}: {found}"
        return found[0]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_prometheus(binary: str, workdir: Path, target: str, rules: Path) -> Prometheus:
    """``binary`` on a free loopback port, scraping ``target`` (host:port) every second."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port, log_path = free_port(), workdir / "prometheus.log"
    cmd = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    return Prometheus(process, f"http://127.0.0.1:{port}", log_path)


@pytest.fixture
def prometheus(server: RunningServer, tmp_path: Path) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is missing: `make sysdeps` installs Debian's package")
    rules = tiny_objective_rules(RULES, tmp_path / "alerts.yml")
    running = start_prometheus(binary, tmp_path, f"127.0.0.1:{server.port}", rules)
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()
        print(f"--- prometheus log ({running.log_path}) ---\n{running.log()}")  # shown on failure


async def firing(prometheus: Prometheus, name: str) -> dict[str, Any]:
    """The alert ``name`` once it fires; fails after ``FIRING_TIMEOUT_S``."""
    alerts: list[dict[str, Any]] = []
    deadline = time.monotonic() + FIRING_TIMEOUT_S
    while time.monotonic() < deadline:
        alerts = (await asyncio.to_thread(prometheus.get, "/api/v1/alerts"))["alerts"]
        fired = [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]
        if fired:
            return fired[0]
        await asyncio.sleep(POLL_S)
    rule = await asyncio.to_thread(prometheus.rule, name)
    raise AssertionError(
        f"{name} never fired in {FIRING_TIMEOUT_S} s: alerts {alerts}, rule {rule}"
    )


async def test_a_slow_first_answer_fires_the_first_audio_alert(
    server: RunningServer, prometheus: Prometheus
) -> None:
    await asyncio.to_thread(prometheus.wait_scraped)
    clip = librivox_clips()[1]
    async with NativeClient(server.ws) as client:
        await client.connect()
        turn = await client.speak(*read_wav(clip.path), timeout_s=90)
    assert turn.status == "completed", client.errors
    assert turn.metrics["voice_to_voice_ms"] > 1, "the turn beat even the tiny objective"

    alert = await firing(prometheus, FIRST_AUDIO)
    assert alert["labels"]["job"] == JOB and alert["labels"]["severity"] == "page", alert
    assert float(alert["value"]) > 0.001, alert  # the p99, in seconds
    assert alert["annotations"]["summary"].startswith("p99 first reply audio is "), alert

    fired = prometheus.rule(FIRST_AUDIO)
    quiet = prometheus.rule(QUIET)
    assert fired["health"] == "ok" and fired["state"] == "firing", fired
    assert quiet["health"] == "ok" and quiet["state"] == "inactive", quiet
    assert quiet["duration"] == 5, quiet  # its `for` was shortened too: it is not just waiting
