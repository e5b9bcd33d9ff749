"""Test helpers: real speech clips with transcripts, and a real server in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")
ALSA = Path("/usr/share/sounds/alsa")


def _transcripts(folder: Path, name: str) -> dict[str, str]:
    out = {}
    for line in (folder / name).read_text().splitlines():
        text, _, key = line.rpartition("(")
        out[key.strip(" )")] = text.replace("<s>", "").replace("</s>", "").strip()
    return out


@dataclass(frozen=True)
class Clip:
    path: Path
    text: str


def librivox_clips() -> list[Clip]:
    if not LIBRIVOX.is_dir():
        pytest.fail("Debian's pocketsphinx-testdata is missing: run `make sysdeps`")
    texts = _transcripts(LIBRIVOX, "transcription")
    return [Clip(LIBRIVOX / f"{k}.wav", v) for k, v in sorted(texts.items())]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    turn_log: Path

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/voice"

    def alive(self) -> bool:
        return self.process.poll() is None


def start_server(tmp: Path, env: dict[str, str] | None = None) -> RunningServer:
    port = free_port()
    log_path, turn_log = tmp / "server.log", tmp / "turns.jsonl"
    full_env = {
        **os.environ,
        "VOXPIPE_SERVER__TURN_LOG_PATH": str(turn_log),
        "VOXPIPE_SERVER__LOG_LEVEL": "warning",
        **(env or {}),
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "voxpipe.cli", "serve", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    return RunningServer(process, port, log_path, turn_log)


def wait_ready(server: RunningServer, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"server exited:\n{server.log_path.read_text()}")
        try:
            if httpx.get(f"{server.http}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server not ready in {timeout_s} s:\n{server.log_path.read_text()}")


def stop_server(server: RunningServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
