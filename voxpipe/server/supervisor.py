"""``voxpipe serve --workers N``: N worker processes on consecutive ports, kept alive.

Each worker is a whole server (its own models, its own thread budget) on its
own port, because a load balancer with session affinity has to address each
worker by itself: one shared port would let the kernel, not the session id,
pick the worker. A worker that dies is started again, after a backoff that
grows while it keeps dying. Workers listen only once warm and refuse with HTTP
503 when they cannot take a call, so nginx (``deploy/nginx.conf.template``)
never hands a call to a cold, full or draining worker. SIGTERM drains every
worker and waits for them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

log = logging.getLogger("voxpipe.supervisor")

POLL_S = 0.2
MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_S = 60.0  # a worker up this long has its backoff reset


def _die_with_parent() -> None:
    """In the child: a supervisor killed outright takes its workers with it (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Worker:
    index: int
    port: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff_s: float = MIN_BACKOFF_S
    due_at: float = 0.0  # when a dead worker is started again

    @property
    def name(self) -> str:
        return f"w{self.index}"


@dataclass
class Supervisor:
    workers: int
    base_port: int
    host: str = "127.0.0.1"
    config_file: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    agent: str | None = None  # voxpipe serve --agent, passed on to every worker
    _pool: list[Worker] = field(default_factory=list)
    _stopping: bool = False

    def command(self, worker: Worker) -> list[str]:
        cmd = [sys.executable, "-m", "voxpipe.cli", "serve", "--host", self.host]
        cmd += ["--port", str(worker.port)]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        if self.agent is not None:
            cmd += ["--agent", self.agent]
        return cmd

    def _start(self, worker: Worker) -> None:
        env = {
            **os.environ,
            **self.env,
            "VOXPIPE_SERVER__WORKER_ID": worker.name,
            "VOXPIPE_SERVER__BIND_WHEN_READY": "true",
            "VOXPIPE_SERVER__REFUSE_WITH_HTTP": "true",
        }
        worker.process = subprocess.Popen(
            self.command(worker), env=env, preexec_fn=_die_with_parent
        )
        worker.started_at = time.monotonic()
        log.info("worker %s: pid %d on port %d", worker.name, worker.process.pid, worker.port)

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        if self._stopping:  # a second signal: no more waiting
            for worker in self._pool:
                if worker.process is not None and worker.process.poll() is None:
                    worker.process.kill()
            return
        self._stopping = True
        log.info("draining %d workers", len(self._pool))
        for worker in self._pool:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)

    def _check(self, worker: Worker, now: float) -> None:
        process = worker.process
        if process is None:
            if now >= worker.due_at and not self._stopping:
                self._start(worker)
            return
        code = process.poll()
        if code is None:
            if now - worker.started_at >= STABLE_S:
                worker.backoff_s = MIN_BACKOFF_S
            return
        log.error(
            "worker %s (pid %d) exited with %d; restarting in %.1f s",
            worker.name,
            process.pid,
            code,
            worker.backoff_s,
        )
        worker.process = None
        worker.due_at = now + worker.backoff_s
        worker.backoff_s = min(MAX_BACKOFF_S, worker.backoff_s * 2)

    def run(self) -> int:
        """Start the workers and keep them up until SIGTERM or SIGINT; then drain them."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self._pool = [Worker(i, self.base_port + i) for i in range(self.workers)]
        for worker in self._pool:
            self._start(worker)
        while not self._stopping:
            now = time.monotonic()
            for worker in self._pool:
                self._check(worker, now)
            time.sleep(POLL_S)
        for worker in self._pool:
            if worker.process is not None:
                worker.process.wait()
        return 0
