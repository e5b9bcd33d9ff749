"""A real redis-server (Debian's) on loopback, for the stores and the token replay guard."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from voxpipe.loadtest.server_process import free_port

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(REDIS).exists():
        pytest.fail("redis-server is missing: run `make sysdeps`")
    port = free_port()
    process = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis"))],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        process.terminate()
        process.wait(5)
