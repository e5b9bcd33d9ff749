"""JSON logs: one object per line, with the call and turn ids of the scope it was logged in,
redacted by the same filter as the text log, and never any audio."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from voxpipe.observability.logs import (
    JsonLogFormatter,
    RedactSecrets,
    bind_log_context,
    configured_handlers,
    current_context,
    install_json,
    log_context,
)

SECRET = "configured-secret-0123"


@pytest.fixture
def lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose handler has the redaction filter and the JSON formatter, as
    ``voxpipe serve`` sets them up with ``server.log_format: json``."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    redact = RedactSecrets([SECRET])
    handler.addFilter(redact)
    handler.setFormatter(JsonLogFormatter(redact.redact))
    logger = logging.getLogger("voxpipe.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, out
    finally:
        logger.removeHandler(handler)


def records(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_is_one_json_object_with_level_logger_message_and_time(
    lines: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = lines
    log.warning("turn %d took %.1f ms", 3, 2950.0)
    (record,) = records(out)
    assert record["level"] == "WARNING" and record["logger"] == "voxpipe.test_logs"
    assert record["message"] == "turn 3 took 2950.0 ms"
    assert record["timestamp"].endswith("+00:00")
    assert "call_id" not in record  # logged outside any call


def test_the_call_and_turn_ids_come_from_the_scope(
    lines: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = lines
    with log_context(call_id="c-1", transport="native"):
        log.info("call started")
        with log_context(turn_id=2):
            log.info("turn started")
        log.info("between turns")
        with log_context(turn_id=3):
            log.info("explicit", extra={"turn_id": 4})  # an explicit extra wins
    log.info("after the call")
    got = [(r.get("call_id"), r.get("turn_id")) for r in records(out)]
    assert got == [("c-1", None), ("c-1", 2), ("c-1", None), ("c-1", 4), (None, None)]
    assert records(out)[0]["transport"] == "native"


async def test_a_task_keeps_the_scope_it_was_created_in() -> None:
    async def child() -> dict[str, str | int]:
        await asyncio.sleep(0)
        return current_context()

    with log_context(connection_id="k1"):
        task = asyncio.create_task(child())
    with log_context(connection_id="k2"):
        other = await task  # awaited in another scope: still its own
    assert other == {"connection_id": "k1"}
    assert current_context() == {}


def test_only_known_ids_go_in_the_context() -> None:
    with pytest.raises(ValueError, match="transcript"), log_context(transcript="hello"):
        pass


def test_secrets_are_redacted_in_the_message_the_extras_and_the_traceback(
    lines: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = lines
    try:
        raise RuntimeError(f"upstream said no to Bearer {SECRET}")
    except RuntimeError:
        log.exception("request to %s failed", f"/v1/voice?api_key={SECRET}",
                      extra={"url": f"wss://x/v1/voice?token={SECRET}"})  # fmt: skip
    text = out.getvalue()
    assert SECRET not in text
    (record,) = records(out)
    assert record["message"] == "request to /v1/voice?api_key=[redacted] failed"
    assert record["url"] == "wss://x/v1/voice?token=[redacted]"
    assert "RuntimeError: upstream said no to Bearer [redacted]" in record["exc_info"]


def test_audio_is_never_written(lines: tuple[logging.Logger, io.StringIO]) -> None:
    log, out = lines
    pcm = np.full(320, 1234, dtype=np.int16)
    log.info("frame", extra={"pcm": pcm.tobytes(), "samples": pcm, "nested": {"b": bytearray(8)}})
    (record,) = records(out)
    assert record["pcm"] == "[640 bytes not logged]"
    assert record["samples"] == "[array of 640 bytes not logged]"
    assert record["nested"] == {"b": "[8 bytes not logged]"}
    assert "1234" not in out.getvalue()


def test_uvicorn_and_redaction_internals_are_not_fields(
    lines: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = lines
    log.info("GET /healthz", extra={"color_message": "\x1b[32mGET\x1b[0m /healthz"})
    (record,) = records(out)
    assert set(record) == {"level", "logger", "message", "timestamp"}


async def test_a_bound_context_lasts_for_its_task_and_the_tasks_it_starts_later() -> None:
    async def serve_a_call() -> tuple[dict[str, str | int], dict[str, str | int]]:
        early = asyncio.create_task(child())  # started before the call's ids were known
        bind_log_context(call_id="c-9", session_id="s-9")
        later = asyncio.create_task(child())
        return await early, await later

    async def child() -> dict[str, str | int]:
        await asyncio.sleep(0)
        return current_context()

    with log_context(connection_id="k1"):
        early, later = await asyncio.create_task(serve_a_call())
        assert current_context() == {"connection_id": "k1"}  # the caller's scope is untouched
    assert early == {"connection_id": "k1"}
    assert later == {"connection_id": "k1", "call_id": "c-9", "session_id": "s-9"}


def test_install_puts_the_formatter_on_every_configured_handler() -> None:
    handler = logging.StreamHandler(io.StringIO())
    logger = logging.getLogger("voxpipe.test_logs.install")
    logger.addHandler(handler)
    before = {h: h.formatter for h in configured_handlers()}  # pytest's own, among others
    try:
        install_json()
        assert isinstance(handler.formatter, JsonLogFormatter)
        first = handler.formatter
        install_json()  # again, as voxpipe serve does once uvicorn has its handlers
        assert handler.formatter is first
    finally:
        logger.removeHandler(handler)
        for h, formatter in before.items():
            h.setFormatter(formatter)
