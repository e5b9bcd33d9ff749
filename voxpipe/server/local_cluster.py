"""A whole cluster on loopback: Redis, N workers under one supervisor, nginx in front.

``voxpipe cluster`` (``make cluster``), the failover test and the affinity
benchmark all run this, so what is tested is what an operator starts: the
shipped nginx template, the ``--workers`` supervisor and the Redis store.
nginx and Redis are Debian's (``make sysdeps``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Literal

import httpx

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf.template"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port_run(count: int) -> int:
    """A port P with P..P+count-1 all free on loopback (nginx, then one per worker)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no run of free ports on loopback")


def answers_ready(port: int) -> bool:
    """Whether the server on loopback ``port`` answers ``/readyz`` 200 now (not yet
    listening, or not warm yet: False)."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Loopback:
    """A voxpipe server (or nginx in front of several) on loopback at ``port``: where its
    clients reach it, whether one process (``loadtest.server_process``) or the cluster."""

    port: int

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        """The native voice endpoint."""
        return f"ws://127.0.0.1:{self.port}/v1/voice"


Balance = Literal["session", "round_robin"]


def render_nginx(
    listen: str, workers: list[str], prefix: Path, balance: Balance = "session"
) -> str:
    """``deploy/nginx.conf.template`` with its three variables filled in.

    ``balance="round_robin"`` drops the template's ``hash ... consistent;`` line and nothing
    else, so nginx round-robins connections: the baseline ``python -m bench cluster`` measures
    session affinity against, not a way to deploy (every reconnect then rebuilds context).
    """
    if not TEMPLATE.exists():
        raise FileNotFoundError(f"{TEMPLATE} is missing: run from a voxpipe checkout")
    upstreams = "\n".join(
        f"        server {address} max_fails=1 fail_timeout=5s;" for address in workers
    )
    # Only ${VOXPIPE_...} is ours, as with envsubst '$VOXPIPE_...'; nginx's $variables stay.
    text = Template(TEMPLATE.read_text()).safe_substitute(
        VOXPIPE_LISTEN=listen, VOXPIPE_UPSTREAMS=upstreams, VOXPIPE_PREFIX=str(prefix)
    )
    if "${VOXPIPE_" in text:
        raise ValueError(f"{TEMPLATE} names a variable render_nginx does not know")
    return without_affinity(text) if balance == "round_robin" else text


def without_affinity(conf: str) -> str:
    """``conf`` less its upstream's ``hash ... consistent;`` line (nginx then round-robins)."""
    lines = conf.splitlines(keepends=True)
    kept = [
        line
        for line in lines
        if not (line.strip().startswith("hash ") and line.strip().endswith(" consistent;"))
    ]
    if len(kept) != len(lines) - 1:
        raise ValueError("expected exactly one `hash ... consistent;` line in the nginx config")
    return "".join(kept)


@dataclass
class LocalCluster(Loopback):
    workdir: Path
    port: int = 8765  # nginx; workers take the ports after it
    workers: int = 2
    redis_port: int = 6390
    env: dict[str, str] = field(default_factory=dict)
    balance: Balance = "session"  # round_robin: the affinity benchmark's baseline only
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_at: float = 0.0

    @property
    def worker_ports(self) -> list[int]:
        return [self.port + 1 + i for i in range(self.workers)]

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def access_log(self) -> Path:
        return self.workdir / "nginx" / "access.log"

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        with self.log(name).open("ab") as out:
            self.processes[name] = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def start(self) -> LocalCluster:
        self.workdir = self.workdir.resolve()  # nginx takes a relative -c as under its -p
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        self._spawn(
            "redis",
            [REDIS, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
        )  # fmt: skip
        env = self.worker_env()
        self._wait_redis()
        self._spawn(
            "workers",
            [sys.executable, "-m", "voxpipe.cli", "serve", "--workers", str(self.workers),
             "--port", str(self.worker_ports[0])],
            env,
        )  # fmt: skip
        prefix = self.workdir / "nginx"
        prefix.mkdir(exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(
            render_nginx(
                f"127.0.0.1:{self.port}",
                [f"127.0.0.1:{p}" for p in self.worker_ports],
                prefix,
                self.balance,
            )
        )
        self._spawn("nginx", [NGINX, "-p", str(prefix), "-c", str(conf), "-e", "stderr"])
        return self

    def worker_env(self) -> dict[str, str]:
        """The workers' environment: the shared Redis store, and one token secret for all of
        them (a token minted through one worker must open a call on another), unless given."""
        return {
            "VOXPIPE_AUTH__TOKEN_SECRET": secrets.token_urlsafe(32),
            **os.environ,
            "VOXPIPE_STORE__BACKEND": "redis",
            "VOXPIPE_STORE__REDIS_URL": self.redis_url,
            "VOXPIPE_SERVER__TURN_LOG_PATH": str(self.workdir / "turns.jsonl"),
            **self.env,
        }

    def _wait_redis(self, timeout_s: float = 10) -> None:
        import redis

        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.redis_port, socket_timeout=1)
        while True:
            try:
                client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or self.processes["redis"].poll() is not None:
                    log = self.log("redis").read_text()
                    raise RuntimeError(f"redis did not start:\n{log}") from None
                time.sleep(0.05)
            finally:
                client.close()

    def workers_ready(self) -> bool:
        """Whether every worker answers ``/readyz`` 200 now (straight, not through nginx)."""
        return all(answers_ready(p) for p in self.worker_ports)

    def wait_ready(self, timeout_s: float = 600) -> float:
        """Block until every worker is warm and nginx answers; seconds since start."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.worker_ports)
        while pending or not answers_ready(self.port):
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited:\n{self.log(name).read_text()[-4000:]}")
            pending = {p for p in pending if not answers_ready(p)}
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not ready in {timeout_s} s (waiting on {pending})")
            time.sleep(0.2)
        return time.monotonic() - self.started_at

    def worker(self, port: int) -> dict[str, object]:
        """A worker's ``/healthz``: its name and pid."""
        body: dict[str, object] = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
        return body

    def stop(self, timeout_s: float = 40) -> None:
        """nginx first (no new connections), then drain the workers, then Redis."""
        for name in ("nginx", "workers", "redis"):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGQUIT if name == "nginx" else signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
