"""What every test client waits on: a probe re-checked whenever the client hears something,
and its background tasks stopped at the end. One copy for the native, Realtime and phone
line clients (:class:`Listening`), which each wake ``changed`` on every message they read."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Self


async def wait_until(probe: Callable[[], Any], changed: asyncio.Event, timeout_s: float) -> Any:
    """Wait until ``probe()`` returns something truthy, and return it; re-checked when
    ``changed`` is set, and every 50 ms (a probe may read the clock)."""
    deadline = time.monotonic() + timeout_s
    while not (result := probe()):
        changed.clear()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"condition not met within {timeout_s:.0f} s")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(remaining, 0.05))
    return result


async def stop_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for each to end, whatever it ended with; empties the list."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task
    tasks.clear()


class Listening:
    """A test client's background tasks (reading, sending, playing), each of which wakes
    ``_changed`` on what it hears; ``async with`` closes the client at the end."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_for(self, probe: Callable[[], Any], timeout_s: float) -> Any:
        """Wait until ``probe()`` returns something truthy, and return it."""
        return await wait_until(probe, self._changed, timeout_s)

    async def _stop_tasks(self) -> None:
        await stop_tasks(self._tasks)

    async def close(self) -> None:
        """Stop the tasks; a client closes its connection after that."""
        await self._stop_tasks()
