"""Fixtures every unit test shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No VOXPIPE_* setting of the developer's shell leaks into a test's configuration."""
    for name in list(os.environ):
        if name.startswith("VOXPIPE_"):
            monkeypatch.delenv(name)
    yield
