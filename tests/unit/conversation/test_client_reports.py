"""A client's report of a turn (``client.turn``) joined to the turn: into its record while the
reply plays, into the kept and stored record after; counted once, refused for a turn the
session does not know or a second time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.conversation.harness import Call
from tests.unit.conversation.test_record import Store
from tests.unit.fakes import FakeTts
from voxpipe.conversation.client_reports import ReportOutcome
from voxpipe.conversation.events import TurnMetrics
from voxpipe.observability.latency_split import ClientTiming

REPORT = ClientTiming("voxpipe-python/0.1.0", first_audio_received_ms=9000.0,
                      first_audio_played_ms=9050.0)  # fmt: skip


def counted(call: Call, name: str, **labels: str) -> float | None:
    return call.metrics.registry.get_sample_value(name, labels)


def split_count(call: Call, part: str) -> float | None:
    return counted(call, "voxpipe_turn_latency_split_seconds_count", part=part)


def assert_adds_up(record: dict[str, Any], client_ms: float) -> None:
    parts = record["split_ms"]
    assert None not in parts.values(), parts
    assert sum(parts.values()) == pytest.approx(client_ms, abs=0.3)
    server_ms = record["voice_to_voice_ms"]
    assert parts["transport"] == pytest.approx((REPORT.first_audio_received_ms - server_ms) / 2,
                                               abs=0.1)  # fmt: skip


async def test_a_report_while_the_reply_plays_is_in_the_turns_record(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(tts=FakeTts(samples_per_clause=16000))  # 1 s of reply, 50 ms ahead
    await call.say()
    await call.until(lambda: call.frames(1))
    assert call.session.client_turn(1, REPORT) is ReportOutcome.TAKEN
    assert call.session.client_turn(1, REPORT) is ReportOutcome.ALREADY
    await call.idle()
    [metrics] = call.of(TurnMetrics, 1)
    record = metrics.metrics
    assert record["client"] == REPORT.as_dict()
    assert_adds_up(record, REPORT.first_audio_played_ms)
    labels = {"transport": "unknown", "client": "voxpipe-python"}
    assert counted(call, "voxpipe_client_voice_to_voice_seconds_count", **labels) == 1
    assert counted(call, "voxpipe_client_voice_to_voice_seconds_sum", **labels) == 9.05
    assert all(split_count(call, part) == 1 for part in record["split_ms"])


async def test_a_report_after_the_record_completes_the_kept_and_stored_record(
    make_call: Callable[..., Call],
) -> None:
    store = Store()
    call = make_call(store=store)  # a 100 ms reply: all sent before the client could report
    await call.say()
    await call.idle()
    [metrics] = call.of(TurnMetrics, 1)
    assert "client" not in metrics.metrics
    assert metrics.metrics["split_ms"]["transport"] is None
    assert metrics.metrics["split_ms"]["playback"] is None  # no acks, no report: unknown
    assert (split_count(call, "inference"), split_count(call, "playback")) == (1, None)
    stored = len([w for w in store.writes if w[0] == "turn"])

    assert call.session.client_turn(1, REPORT) is ReportOutcome.LATE
    [record] = call.session.turns
    assert record["client"] == REPORT.as_dict()
    assert_adds_up(record, REPORT.first_audio_played_ms)
    assert len([w for w in store.writes if w[0] == "turn"]) == stored + 1  # replaced
    # Each part counted once: the server's parts at the turn's end, the rest now.
    assert [split_count(call, p) for p in ("transport", "inference", "playback")] == [1, 1, 1]
    assert call.session.client_turn(1, REPORT) is ReportOutcome.ALREADY
    assert call.session.client_turn(2, REPORT) is ReportOutcome.UNKNOWN_TURN
    assert counted(call, "voxpipe_client_voice_to_voice_seconds_count",
                   transport="unknown", client="voxpipe-python") == 1  # fmt: skip


async def test_acks_give_the_playback_part_without_a_report(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(tts=FakeTts(samples_per_clause=16000))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 2)
    assert call.session.playback_ack(call.frames(1)[0].seq)
    await call.idle()
    [metrics] = call.of(TurnMetrics, 1)
    parts = metrics.metrics["split_ms"]
    assert parts["transport"] is None and parts["playback"] is not None
    assert parts["playback"] >= 0
