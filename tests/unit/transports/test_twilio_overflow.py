"""Twilio media faster than the VAD: the stream is read at the VAD's pace (backpressure); what
is dropped even so cannot be told to Twilio (it has no error message), so it is counted and
logged once per episode."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.unit.conversation.test_inbound_overflow import SlowVad
from tests.unit.transports import media_stream
from tests.unit.transports.test_twilio import QUIET, Line

DROPPED = {"direction": "inbound", "policy": "drop_oldest", "transport": "twilio"}


def line_with(vad: SlowVad, monkeypatch: pytest.MonkeyPatch, **config: dict[str, Any]) -> Line:
    monkeypatch.setattr(media_stream, "fake_vad", lambda: vad)
    return Line(**config)


def dropped_s(line: Line) -> float:
    value = line.metrics.registry.get_sample_value("voxpipe_audio_dropped_seconds_total", DROPPED)
    return value or 0.0


async def test_a_burst_of_media_is_read_at_the_vads_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    vad = SlowVad()
    line = line_with(vad, monkeypatch)
    try:
        line.start()
        await line.until(lambda: line.conn.session is not None)
        vad.gate.clear()  # the VAD stalls: 2 s of media arrive at once behind it
        for i in range(100):
            line.media(QUIET, chunk=i + 1)
        await asyncio.sleep(0.1)
        assert line.ws.inbox.qsize() > 0, "the stream is not read while the VAD is behind"
        vad.gate.set()
        await line.until(lambda: line.ws.inbox.qsize() == 0)
        assert dropped_s(line) == 0
    finally:
        vad.gate.set()
        await line.close()


async def test_dropped_media_is_counted_and_logged_once_and_nothing_is_sent_to_twilio(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    vad = SlowVad()
    line = line_with(vad, monkeypatch, limits={"inbound_wait_ms": 0, "inbound_buffer_ms": 100})
    caplog.set_level(logging.WARNING)
    try:
        line.start()
        await line.until(lambda: line.conn.session is not None)
        vad.gate.clear()
        for i in range(100):
            line.media(QUIET, chunk=i + 1)
        await line.until(lambda: line.errors("audio_dropped") > 0 and not line.ws.inbox.qsize())
        assert 1.7 <= dropped_s(line) <= 2.0  # 2 s behind a stalled VAD, bound 100 ms
        assert not [m for m in line.ws.sent if m["event"] not in ("media", "mark", "clear")]
        logged = [r for r in caplog.records if "dropped" in r.getMessage()]
        assert len(logged) == 1 and logged[0].levelno == logging.WARNING, logged
        assert "(twilio)" in logged[0].getMessage()
    finally:
        vad.gate.set()
        await line.close()
