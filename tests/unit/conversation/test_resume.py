"""The resume policy (``conversation/resume.py``) on fake engines, a fake registry and a fake
store: who gets a session back on a reconnect, and in which of its forms."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.config import Config
from voxpipe.conversation.events import AudioOut, ErrorCode, Event
from voxpipe.conversation.ownership import Refusal
from voxpipe.conversation.principal import Principal
from voxpipe.conversation.resume import Detached, Restored, TakenBack, resume
from voxpipe.conversation.services import CallRecord, Runners, Services
from voxpipe.conversation.session import Session
from voxpipe.engines.base import Engines
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.turn_log import TurnLog

ALICE = Principal("key:alice")
MALLORY = Principal("key:mallory")
RATE = 16000


class Kept:
    """A transport's state, kept with a detached session."""


class FakeStore:
    """Saved states by session id; ``shared`` as a Redis store is."""

    def __init__(self, shared: bool = True) -> None:
        self.shared = shared
        self.states: dict[str, dict[str, Any]] = {}
        self.saved: list[tuple[CallRecord, dict[str, Any]]] = []

    def call_started(self, call: CallRecord, info: dict[str, Any]) -> None:
        pass

    def message(
        self, call: CallRecord, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None:
        pass

    def turn_finished(self, call: CallRecord, record: dict[str, Any]) -> None:
        pass

    def save_state(self, call: CallRecord, state: dict[str, Any]) -> None:
        self.saved.append((call, state))

    def call_ended(self, call: CallRecord, reason: str, counts: dict[str, Any]) -> None:
        pass

    async def load_state(self, session_id: str) -> dict[str, Any] | None:
        return self.states.get(session_id)

    async def aclose(self) -> None:
        pass


@dataclass
class FakeRegistry:
    """The server's live calls as the policy sees them: attached sessions by id (with their
    owner), detached ones, and which sessions were replaced."""

    attached: dict[str, str] = field(default_factory=dict)  # session id -> owner
    detached: dict[str, Detached] = field(default_factory=dict)
    replaced: list[str] = field(default_factory=list)

    def owner_of(self, session_id: str) -> str | None:
        entry = self.detached.get(session_id)
        return entry.session.owner if entry is not None else self.attached.get(session_id)

    def find_session(self, session_id: str) -> bool:
        return session_id in self.detached or session_id in self.attached

    async def replace(self, session_id: str) -> None:
        if self.attached.pop(session_id, None) is not None:
            self.replaced.append(session_id)

    def reattach(self, session_id: str) -> Detached | None:
        return self.detached.pop(session_id, None)


class World:
    """Services on fake engines, a fake store and registry, and the sessions made."""

    def __init__(self, shared: bool = True) -> None:
        self.metrics = Metrics()
        runners = Runners(
            *(EngineRunner(name, observer=self.metrics) for name in ("vad", "stt", "llm", "tts"))
        )
        self.store = FakeStore(shared)
        self.services = Services(
            Config.load(),
            Engines(FakeVad(), FakeStt(), FakeLlm(), FakeTts()),
            runners,
            self.metrics,
            TurnLog(None),
            store=self.store,
        )
        self.registry = FakeRegistry()
        self.sessions: list[Session] = []
        self.opened: list[CallRecord] = []

    async def _send_event(self, event: Event) -> None:
        pass

    async def _send_audio(self, frame: AudioOut) -> None:
        pass

    def session(
        self, session_id: str, owner: str = ALICE.id, record: CallRecord | None = None
    ) -> Session:
        session = Session(
            session_id,
            self.services,
            self._send_event,
            self._send_audio,
            RATE,
            RATE,
            owner=owner,
            record=record,
        )
        self.sessions.append(session)
        return session

    def open_restored(self, session_id: str) -> Any:
        def open_session(record: CallRecord) -> Session:
            self.opened.append(record)
            return self.session(session_id, record=record)

        return open_session

    def detach(self, session: Session, state: object = None) -> None:
        self.registry.detached[session.id] = Detached(session, Kept() if state is None else state)

    async def resume(
        self, session_id: str, principal: Principal = ALICE, audio_seq: int = 0
    ) -> TakenBack[Kept] | Restored | Refusal:
        return await resume(
            self.registry,
            self.services,
            principal,
            session_id,
            state_type=Kept,
            open_restored=self.open_restored(session_id),
            audio_seq=audio_seq,
        )

    def restores(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "voxpipe_session_restores_total", {"outcome": outcome}
        )
        return value or 0.0


@pytest.fixture
async def world() -> AsyncIterator[World]:
    world = World()
    yield world
    for session in world.sessions:
        await session.close()
    world.services.runners.close()


def saved_state(world: World, session_id: str, owner: str = ALICE.id, epoch: int = 0) -> None:
    """What another worker saved for ``session_id``: two turns and their audio."""
    record = CallRecord("call-7", session_id, owner, epoch)
    other = Session(
        session_id, world.services, world._send_event, world._send_audio, RATE, RATE, record=record
    )
    state = other.saved.state()
    state.update(turns=2, audio_seq=40, input_samples=32000)
    world.store.states[session_id] = state


def assert_not_found(outcome: object, session_id: str) -> None:
    assert isinstance(outcome, Refusal)
    assert outcome.code is ErrorCode.SESSION_NOT_FOUND
    assert repr(session_id) in outcome.message


async def test_a_kept_session_is_taken_back_with_its_transports_state(world: World) -> None:
    session, kept = world.session("s1"), Kept()
    world.detach(session, kept)
    outcome = await world.resume("s1")
    assert isinstance(outcome, TakenBack)
    assert outcome.session is session and outcome.state is kept
    assert session.counts["resumes"] == 1 and not session.outbox.closed
    assert "s1" not in world.registry.detached and world.opened == []


async def test_another_principals_session_is_not_found_and_left_alone(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    session = world.session("s1")
    world.detach(session)
    with caplog.at_level(logging.WARNING, "voxpipe.resume"):
        outcome = await world.resume("s1", MALLORY)
    assert_not_found(outcome, "s1")
    assert "s1" in world.registry.detached and not session.outbox.closed, "the owner's call is kept"
    assert [r.getMessage() for r in caplog.records] == [
        "refused a resume of session s1 by key:mallory: it belongs to another principal"
    ]


async def test_a_session_live_on_another_connection_is_replaced(world: World) -> None:
    world.registry.attached["s1"] = ALICE.id
    await world.resume("s1")
    assert world.registry.replaced == ["s1"]


async def test_another_principals_live_session_is_not_replaced(world: World) -> None:
    world.registry.attached["s1"] = ALICE.id
    assert_not_found(await world.resume("s1", MALLORY), "s1")
    assert world.registry.replaced == []


async def test_an_unknown_session_is_not_found(world: World) -> None:
    assert_not_found(await world.resume("nowhere"), "nowhere")
    assert world.restores("not_found") == 1 and world.opened == []


async def test_a_session_never_held_here_is_restored_from_the_store(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    saved_state(world, "s1", epoch=3)
    with caplog.at_level(logging.INFO, "voxpipe.resume"):
        outcome = await world.resume("s1", audio_seq=55)
    assert isinstance(outcome, Restored)
    assert outcome.input_samples == 32000
    assert world.opened == [CallRecord("call-7", "s1", ALICE.id, 4)], "one epoch on"
    session = outcome.session
    assert session.counts["resumes"] == 1 and session.counts["restores"] == 1
    assert session.saved.state()["audio_seq"] == 55, "numbering goes on past the client's frame"
    assert world.restores("restored") == 1
    assert world.store.saved[-1][0].epoch == 4, "persisted at once: the old copy is fenced"
    assert any("restored from the store" in r.getMessage() for r in caplog.records)


async def test_another_principals_saved_state_is_not_restored(world: World) -> None:
    saved_state(world, "s1", owner=MALLORY.id)
    assert_not_found(await world.resume("s1"), "s1")
    assert world.restores("not_owner") == 1 and world.opened == []


async def test_a_session_restored_meanwhile_by_a_twin_is_not_restored_twice(
    world: World,
) -> None:
    saved_state(world, "s1")

    async def twin_restored_it(session_id: str) -> None:
        world.registry.attached[session_id] = ALICE.id  # between the replace and the restore

    world.registry.replace = twin_restored_it  # type: ignore[method-assign]
    assert_not_found(await world.resume("s1"), "s1")
    assert world.opened == []


async def test_a_kept_copy_that_moved_on_elsewhere_is_closed_and_restored(world: World) -> None:
    stale = world.session("s1")
    world.detach(stale)
    saved_state(world, "s1", epoch=stale.record.epoch + 1)  # another worker took it on
    outcome = await world.resume("s1")
    assert isinstance(outcome, Restored)
    assert stale.outbox.closed and outcome.session is not stale
    assert world.opened[0].epoch == stale.record.epoch + 2


async def test_a_moved_on_copy_whose_state_is_gone_fails_the_resume(world: World) -> None:
    stale = world.session("s1")
    world.detach(stale)

    answers: list[dict[str, Any] | None] = [{"epoch": stale.record.epoch + 1}, None]

    async def newer_then_gone(session_id: str) -> dict[str, Any] | None:
        return answers.pop(0)

    world.store.load_state = newer_then_gone  # type: ignore[method-assign]
    outcome = await world.resume("s1")
    assert outcome == Refusal(ErrorCode.RESUME_FAILED, "the session's state is gone")
    assert stale.outbox.closed


async def test_a_kept_session_is_not_checked_against_a_store_that_is_not_shared() -> None:
    world = World(shared=False)
    try:
        session = world.session("s1")
        world.detach(session)
        saved_state(world, "s1", epoch=5)  # this worker's own file: never newer than itself
        outcome = await world.resume("s1")
        assert isinstance(outcome, TakenBack) and outcome.session is session
    finally:
        for session in world.sessions:
            await session.close()
        world.services.runners.close()


async def test_a_session_kept_by_another_transport_is_restored_instead(world: World) -> None:
    session = world.session("s1")
    world.detach(session, state="someone else's")
    saved_state(world, "s1")
    outcome = await world.resume("s1")
    assert isinstance(outcome, Restored) and outcome.session is not session
