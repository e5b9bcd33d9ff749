"""Fixtures for the session's tests: calls on fake engines, closed after each test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from tests.unit.conversation.harness import Call


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("VOXPIPE_"):
            monkeypatch.delenv(name)
    yield


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
