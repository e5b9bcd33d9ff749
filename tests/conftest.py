"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rest_recorder import RestRecorder
from tests.support import RunningServer, start_server, stop_server, wait_ready

RESUME_GRACE_S = 3  # dropped connections' sessions expire quickly on the shared server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real server on the embedded models for the whole test run."""
    running = start_server(
        tmp_path_factory.mktemp("server"),
        env={"VOXPIPE_SERVER__RESUME_GRACE_S": str(RESUME_GRACE_S)},
    )
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="module")
def twilio_api() -> Iterator[RestRecorder]:
    """A stand-in for Twilio's REST API that records what the server asks of it."""
    with RestRecorder().running() as api:
        yield api
