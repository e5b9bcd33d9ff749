"""The real ASGI app on fake engines, served by uvicorn in the test's own event loop: the
transports' wire protocols checked end to end in seconds, without a model."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from voxpipe.agent import Agent
from voxpipe.config import Config
from voxpipe.loadtest.server_process import free_port
from voxpipe.server.app import EnginesLoader, create_app


def quiet_config(**sections: Any) -> Config:
    """What the in-process protocol tests serve: no turn log, no store, no filler, and a
    300 ms end-of-turn silence so a turn ends quickly; ``sections`` add to it."""
    return Config.load(
        server={"turn_log_path": None, **sections.pop("server", {})},
        store={"path": None},
        deadlines={"filler": ""},
        turn={"silence_ms": 300},
        **sections,
    )


@contextlib.asynccontextmanager
async def serving(
    config: Config, engines: EnginesLoader, timeout_s: float, agent: Agent | None = None
) -> AsyncIterator[tuple[int, httpx.AsyncClient]]:
    """The app on a free port, once ``/readyz`` says ready; its port and an HTTP client.
    ``agent``: the one it serves (default: the configured one, the plain assistant)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(config, engines, agent=agent), port=port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            async with asyncio.timeout(timeout_s):
                while True:
                    if server.started and (await http.get("/readyz")).is_success:
                        break
                    await asyncio.sleep(0.02)
            yield port, http
    finally:
        server.should_exit = True
        await task
