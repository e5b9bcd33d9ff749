"""The ids on a call's log lines: a reply's lines, and its engines' on their threads, carry
the call, the session and the turn; attaching a session to a connection binds the call's."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tests.unit.conversation.harness import Call
from tests.unit.fakes import FakeStt, FakeTts
from voxpipe.engines.base import CancelToken, Transcription
from voxpipe.observability.logs import JsonLogFormatter, current_context
from voxpipe.transports.call import Call as Connection

engine_log = logging.getLogger("voxpipe.test_engine")


class LoggingStt(FakeStt):
    def transcribe(self, audio: np.ndarray) -> Transcription:
        engine_log.info("stt job")
        return super().transcribe(audio)


class LoggingTts(FakeTts):
    def synthesize(self, text: str, cancel: CancelToken) -> Iterator[np.ndarray]:
        engine_log.info("tts job")
        yield from super().synthesize(text, cancel)


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """voxpipe's loggers write JSON lines here, as with ``server.log_format: json``."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLogFormatter())
    logger = logging.getLogger("voxpipe")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def ids_of(records: list[dict[str, Any]], message: str) -> list[tuple[Any, ...]]:
    return [
        (r.get("call_id"), r.get("session_id"), r.get("turn_id"))
        for r in records
        if r["message"] == message
    ]


async def test_a_reply_s_lines_carry_the_call_session_and_turn(
    make_call: Callable[..., Call], json_lines: io.StringIO
) -> None:
    call = make_call(
        stt=LoggingStt("hello there", RuntimeError("the model broke")), tts=LoggingTts()
    )
    await call.say()
    await call.idle()
    await call.say()  # the second turn's STT fails: the reply logs it
    await call.idle()
    logged = lines(json_lines)
    call_id = call.session.record.call_id
    turn = {n: (call_id, "call-1", n) for n in (1, 2)}
    assert ids_of(logged, "stt job") == [turn[1], turn[2]]  # on the STT thread
    assert set(ids_of(logged, "tts job")) == {turn[1]}  # on the TTS thread
    assert ids_of(logged, "turn 2 of call-1 failed") == [turn[2]]  # in the reply's task
    (failed,) = [r for r in logged if r["level"] == "ERROR"]
    assert "RuntimeError: the model broke" in failed["exc_info"]
    assert current_context() == {}  # the test's own task carries no call's ids


async def test_attaching_a_session_binds_the_call_s_ids(make_call: Callable[..., Call]) -> None:
    session = make_call().session
    connection = Connection("native", session.services, registry=None)  # type: ignore[arg-type]
    connection.attach(session)
    assert current_context() == {"call_id": session.record.call_id, "session_id": "call-1"}
