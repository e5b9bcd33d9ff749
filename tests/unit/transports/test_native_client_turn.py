"""``client.turn`` on the wire: the native client's report of what the caller heard reaches
the turn's record and ``/metrics``; bad reports get typed errors and the call goes on."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.transports.native_wire import RATE, serve, speech
from voxpipe.clients.native_client import CLIENT, NativeClient, with_client

CLIENT_V2V = "voxpipe_client_voice_to_voice_seconds_count"


def test_the_python_client_names_itself_on_connect() -> None:
    assert CLIENT.startswith("voxpipe-python/")
    assert with_client("ws://h/v1/voice") == f"ws://h/v1/voice?client={CLIENT}"
    assert (
        with_client("ws://h/v1/voice?session_id=s")
        == f"ws://h/v1/voice?session_id=s&client={CLIENT}"
    )
    assert with_client("ws://h/v1/voice?client=app/2.0") == "ws://h/v1/voice?client=app/2.0"


async def test_the_native_client_reports_each_turn_into_its_record_and_metrics() -> None:
    async with serve(clause_samples=RATE) as app:  # a 1 s reply: it plays when the report comes
        async with NativeClient(f"ws://127.0.0.1:{app.port}/v1/voice") as client:
            await client.connect()
            turn = await client.speak(np.full(RATE // 2, 0.5, np.float32), RATE)
            assert not client.errors
        report = turn.report
        assert report is not None and report["turn_id"] == 1
        assert 0 < report["first_audio_received_ms"] <= report["first_audio_played_ms"]
        record = turn.metrics
        assert record["client"] == {"client": CLIENT, **{k: report[k] for k in report
                                                         if k.endswith("_ms")}}  # fmt: skip
        parts = record["split_ms"]
        assert None not in parts.values(), parts
        assert sum(parts.values()) == pytest.approx(report["first_audio_played_ms"], abs=0.3)
        sample = f'{CLIENT_V2V}{{client="voxpipe-python",transport="native"}}'
        assert await app.metric(sample) == 1
        assert (
            await app.metric(
                f'voxpipe_connections_total{{client_version="{CLIENT}",outcome="accepted",'
                'transport="native"}'
            )
            == 1
        )
        assert await app.metric('voxpipe_turn_latency_split_seconds_count{part="transport"}') == 1


async def test_bad_reports_get_typed_errors_and_a_good_one_no_answer() -> None:
    good = {"type": "client.turn", "turn_id": 1, "first_audio_received_ms": 700,
            "first_audio_played_ms": 760.5, "client": "voxpipe-web/0.1.0"}  # fmt: skip
    async with serve() as app, app.connect() as line:
        await line.send(good)
        await line.error("session_not_started")
        await line.start()
        await line.speak(speech())
        for bad, says in [
            ({"turn_id": 0}, "turn_id"),
            ({"turn_id": "1"}, "turn_id"),
            ({"first_audio_played_ms": -1}, "first_audio_played_ms"),
            ({"first_audio_received_ms": 1e9}, "first_audio_received_ms"),
            ({"first_audio_played_ms": 600}, "before first_audio_received_ms"),
            ({"first_audio_played_ms": None}, "first_audio_played_ms"),
            ({"extra": 1}, "extra"),
            ({"turn_id": 9}, "no turn 9"),
        ]:
            await line.send({**good, **bad})
            error = await line.error("invalid_event")
            assert error["message"].startswith("client.turn: ") and says in error["message"]
        await line.send(good)
        await line.usable()  # taken: nothing is said
        await line.send({k: v for k, v in good.items() if k != "client"})
        assert "reported already" in (await line.error("invalid_event"))["message"]
        # The connection named no client: the report's own name labels its figure.
        assert await app.metric(f'{CLIENT_V2V}{{client="voxpipe-web",transport="native"}}') == 1
