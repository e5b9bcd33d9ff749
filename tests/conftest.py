"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import RunningServer, start_server, stop_server, wait_ready


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real server on the embedded models for the whole test run."""
    running = start_server(tmp_path_factory.mktemp("server"))
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)
