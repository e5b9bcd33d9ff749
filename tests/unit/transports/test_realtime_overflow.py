"""``/v1/realtime`` with a client that appends faster than real time, on fake engines with a
slow VAD, through the official ``openai`` SDK: backpressure loses nothing; without it, the
client gets ``input_audio_dropped`` errors whose ``dropped_ms`` add up to the counter."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.realtime_client import Listener
from tests.support import metric_value
from tests.unit.conversation.test_inbound_overflow import SlowVad
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from tests.unit.transports.in_process import serving
from tests.unit.transports.test_openai_realtime import TIMEOUT_S, connect, loud
from voxpipe.config import Config
from voxpipe.engines.base import Engines

DROPPED = (
    'voxpipe_audio_dropped_seconds_total{direction="inbound",policy="drop_oldest",'
    'transport="realtime"}'
)


@contextlib.asynccontextmanager
async def serve(vad_delay_s: float, **limits: Any) -> AsyncIterator[tuple[int, httpx.AsyncClient]]:
    config = Config.load(
        server={"turn_log_path": None},
        store={"path": None},
        deadlines={"filler": ""},
        turn={"silence_ms": 300},
        limits=limits,
    )

    def engines(config: Config) -> Engines:
        return Engines(
            SlowVad(vad_delay_s),
            FakeStt("hello"),
            FakeLlm(["Hi."]),
            FakeTts(samples_per_clause=800),
        )

    async with serving(config, engines, TIMEOUT_S) as (port, http):
        yield port, http


def told_ms(rt: Listener) -> float:
    return sum(e["error"]["dropped_ms"] for e in rt.of("error"))


async def dropped_ms(http: httpx.AsyncClient) -> float:
    return (metric_value((await http.get("/metrics")).text, DROPPED) or 0.0) * 1000


async def test_backpressure_loses_nothing_from_a_fast_appender() -> None:
    # The VAD takes a 100 ms append in 20 ms: five times real time, far slower than the client.
    async with serve(0.02) as (port, http), connect(port) as rt:
        started = time.monotonic()
        await rt.stream(loud(0.6) + bytes(24000 * 2 * 8), chunk_ms=100, real_time=False)
        await rt.next("input_audio_buffer.speech_stopped", timeout_s=TIMEOUT_S)
        assert time.monotonic() - started < 8.6, "faster than real time"
        await rt.next("response.done", timeout_s=TIMEOUT_S)
        assert await dropped_ms(http) == 0
        assert not rt.of("error"), rt.of("error")


async def test_audio_dropped_anyway_is_told_as_input_audio_dropped() -> None:
    # No backpressure, a 200 ms bound: a client 100x faster than the VAD must lose audio.
    async with (
        serve(0.05, inbound_wait_ms=0, inbound_buffer_ms=200) as (port, http),
        connect(port) as rt,
    ):
        await rt.stream(loud(0.6) + bytes(24000 * 2 * 4), chunk_ms=100, real_time=False)
        first = (await rt.next("error", timeout_s=TIMEOUT_S))["error"]
        assert (first["type"], first["code"]) == ("server_error", "input_audio_dropped")
        assert first["dropped_ms"] > 0 and first["total_dropped_ms"] >= first["dropped_ms"]
        assert "limits.inbound_buffer_ms" in first["message"]
        # Every dropped millisecond reaches the client (the rest within a second).
        await rt.wait_for(
            lambda: rt.of("error")[-1]["error"]["total_dropped_ms"] >= 3000, TIMEOUT_S
        )
        total = await dropped_ms(http)
        async with asyncio.timeout(5):
            while abs(told_ms(rt) - total) > 0.1 * len(rt.of("error")):
                await asyncio.sleep(0.1)
                total = await dropped_ms(http)
        assert 3000 <= total < 4600, total
        assert {e["error"]["code"] for e in rt.of("error")} == {"input_audio_dropped"}
        assert len(rt.of("error")) <= 8, "told at most once a second, not once per append"
        parsed = [p for p in rt.parsed if type(p).__name__ == "RealtimeErrorEvent"]
        assert parsed and parsed[0].error.code == "input_audio_dropped", "the SDK reads it"
