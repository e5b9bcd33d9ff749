"""Run ``voxpipe serve`` as a child process, the way a user does (``voxpipe load``, the
benchmarks in ``bench/`` and the tests)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from voxpipe.server.local_cluster import Loopback, answers_ready


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess(Loopback):
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    turn_log: Path
    started_at: float

    @classmethod
    def start(
        cls,
        workdir: Path,
        port: int | None = None,
        env: dict[str, str] | None = None,
        config: Path | None = None,
    ) -> ServerProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        log_path, turn_log = workdir / "server.log", workdir / "turns.jsonl"
        full_env = {
            **os.environ,
            "VOXPIPE_SERVER__TURN_LOG_PATH": str(turn_log),
            "VOXPIPE_STORE__PATH": str(workdir / "voxpipe.sqlite3"),
            "VOXPIPE_SERVER__LOG_LEVEL": "warning",
            **(env or {}),
        }
        cmd = [sys.executable, "-m", "voxpipe.cli", "serve", "--port", str(port)]
        if config is not None:
            cmd += ["--config", str(config)]
        with log_path.open("wb") as log:
            process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        return cls(process, port, log_path, turn_log, time.monotonic())

    @property
    def store_path(self) -> Path:
        return self.log_path.parent / "voxpipe.sqlite3"

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, timeout_s: float = 300) -> float:
        """Block until ``/readyz`` is 200; returns seconds since start."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"server exited:\n{self.log_path.read_text()}")
            if answers_ready(self.port):
                return time.monotonic() - self.started_at
            time.sleep(0.1)
        raise TimeoutError(f"server not ready in {timeout_s} s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
