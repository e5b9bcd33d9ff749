"""Fixtures for the session's tests: calls on fake engines, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.unit.conversation.harness import Call


@pytest.fixture
async def make_call() -> AsyncIterator[Callable[..., Call]]:
    calls: list[Call] = []

    def make(**kwargs: Any) -> Call:
        call = Call(**kwargs)
        calls.append(call)
        return call

    yield make
    for call in calls:
        await call.session.close()
        call.services.runners.close()
