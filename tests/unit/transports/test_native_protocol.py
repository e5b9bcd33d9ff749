"""The native protocol's one handling of the client events its two wires share
(``transports/native_protocol.ClientEvents``): each event, each malformed one, and the
``session.start`` each wire hands in."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from voxpipe.config import TurnConfig
from voxpipe.conversation.events import (
    ErrorCode,
    ErrorEvent,
    Event,
    HistorySnapshot,
    Pong,
    SessionUpdated,
)
from voxpipe.conversation.session import Session
from voxpipe.transports.native_protocol import ClientEvents, TurnOptions, merge_turn

MAX_BYTES = 1024


class FakeSaved:
    """The session's saved conversation (``Session.saved``): its history."""

    def history_snapshot(self) -> HistorySnapshot:
        return HistorySnapshot(messages=[], summary="", summarized_messages=0)


class FakeSession:
    """What the events reach of a session: its turn options, playback and history."""

    def __init__(self) -> None:
        self.turn_config = TurnConfig()
        self.acked: list[int] = []
        self.saved = FakeSaved()

    def update_turn_config(self, turn_config: TurnConfig) -> None:
        self.turn_config = turn_config

    def playback_ack(self, seq: int) -> bool:
        self.acked.append(seq)
        return seq <= 10  # frames 1..10 were sent


class Wire:
    """A connection's side of :class:`ClientEvents`: what it sent, and its session.start."""

    def __init__(self, started: bool = True) -> None:
        self.session: FakeSession | None = FakeSession() if started else None
        self.sent: list[Event] = []
        self.starts: list[dict[str, Any]] = []
        self.events = ClientEvents(
            self.send_event, lambda: cast(Session | None, self.session), self.start, MAX_BYTES
        )

    async def send_event(self, event: Event) -> None:
        self.sent.append(event)

    async def start(self, payload: dict[str, Any]) -> None:
        self.starts.append(payload)

    async def handle(self, event: dict[str, Any] | str) -> bool:
        return await self.events.handle(event if isinstance(event, str) else json.dumps(event))

    def errors(self) -> list[tuple[str, str]]:
        return [(e.code, e.message) for e in self.sent if isinstance(e, ErrorEvent)]


async def test_ping_is_answered_and_session_end_hangs_up() -> None:
    wire = Wire()
    assert not await wire.handle({"type": "ping"})
    assert wire.sent == [Pong()]
    assert await wire.handle({"type": "session.end"})


async def test_session_start_goes_to_the_wires_own_handling() -> None:
    wire = Wire(started=False)
    start = {"type": "session.start", "session_id": "s1"}
    assert not await wire.handle(start)
    assert wire.starts == [start] and wire.sent == []


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("{nope", "invalid_json", "not valid JSON: "),
        ("x" * (MAX_BYTES + 1), "message_too_large", "text message "),
        ("[1, 2]", "invalid_event", "an event is a JSON object with a string 'type'"),
        ('{"type": 7}', "invalid_event", "an event is a JSON object with a string 'type'"),
        ('{"type": "dance"}', "unknown_event", "unknown event type 'dance'"),
        ('{"type": "playback.ack", "seq": 0}', "invalid_event", "playback.ack: "),
        ('{"type": "playback.ack", "seq": 11}', "invalid_event", "playback.ack: no reply frame 11"),
        ('{"type": "session.update", "turn": {"silence_ms": 1}}', "invalid_event",
         "session.update: "),
        ('{"type": "session.update", "extra": 1}', "invalid_event", "session.update: "),
    ],
)  # fmt: skip
async def test_a_malformed_event_gets_a_typed_error_and_the_connection_goes_on(
    text: str, code: str, message: str
) -> None:
    wire = Wire()
    assert not await wire.handle(text)
    [(sent_code, sent_message)] = wire.errors()
    assert sent_code == code and sent_message.startswith(message), sent_message


@pytest.mark.parametrize("kind", ["session.update", "playback.ack", "history.get", "client.turn"])
async def test_a_session_event_before_session_start_is_refused(kind: str) -> None:
    wire = Wire(started=False)
    assert not await wire.handle({"type": kind, "seq": 1})
    assert wire.errors() == [(ErrorCode.NOT_STARTED, f"send session.start before {kind}")]


async def test_started_tells_the_client_what_needs_a_session() -> None:
    wire = Wire(started=False)
    assert await wire.events.started("audio") is None
    assert wire.errors() == [(ErrorCode.NOT_STARTED, "send session.start before audio")]


async def test_playback_ack_reaches_the_session() -> None:
    wire = Wire()
    await wire.handle({"type": "playback.ack", "seq": 4})
    assert wire.session is not None and wire.session.acked == [4]
    assert wire.sent == []


async def test_session_update_merges_the_turn_options_and_says_so() -> None:
    wire = Wire()
    await wire.handle({"type": "session.update", "turn": {"silence_ms": 900, "preempt_ms": 0}})
    assert wire.session is not None
    turn = wire.session.turn_config
    assert turn.silence_ms == 900 and turn.preempt_ms is None, "preempt_ms 0 turns it off"
    assert wire.sent == [SessionUpdated(config={"turn": turn.model_dump()})]


async def test_history_get_sends_the_sessions_history() -> None:
    wire = Wire()
    await wire.handle({"type": "history.get"})
    assert wire.sent == [HistorySnapshot(messages=[], summary="", summarized_messages=0)]


def test_merge_turn_keeps_what_is_not_named() -> None:
    base = TurnConfig(silence_ms=700)
    assert merge_turn(base, None) is base
    merged = merge_turn(base, TurnOptions(threshold=0.7))
    assert (merged.threshold, merged.silence_ms) == (0.7, 700)
