"""``CallRegistry``: admission at connect (capacity, draining, a resume takes no new slot),
sessions waiting for a reconnect (detach, expiry, reattach), who owns a live id, and the
``idle`` event a drain waits on; each visible in the ``voxpipe_calls`` gauges."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from voxpipe.conversation.events import ErrorCode
from voxpipe.conversation.principal import Principal
from voxpipe.conversation.session import Session
from voxpipe.observability.metrics import Metrics
from voxpipe.server.calls import CallRegistry
from voxpipe.transports.call import Call, CloseCode

ALICE, BOB = Principal("key:alice"), Principal("key:bob")


class Calls:
    """A registry and what it reports, with calls and sessions that are only their ids:
    admission looks at nothing else."""

    def __init__(self, max_calls: int) -> None:
        self.metrics = Metrics()
        self.registry = CallRegistry(max_calls, self.metrics)
        self.expired: list[str] = []

    def call(self, principal: Principal = ALICE, session_id: str | None = None) -> Call:
        call = Call("native", cast(Any, None), self.registry, principal)
        if session_id is not None:
            call.session = session(session_id, principal)
        return call

    def admitted(self, principal: Principal = ALICE, session_id: str | None = None) -> Call:
        call = self.call(principal, session_id)
        assert self.registry.admit(call) is None
        return call

    async def on_expire(self, session: Session) -> None:
        self.expired.append(session.id)

    def detach(self, session_id: str, owner: Principal = ALICE, grace_s: float = 60) -> None:
        self.registry.detach(session(session_id, owner), "resume state", grace_s, self.on_expire)

    def gauges(self) -> tuple[float | None, float | None]:
        value = self.metrics.registry.get_sample_value
        return value("voxpipe_calls", {"state": "connected"}), value(
            "voxpipe_calls", {"state": "detached"}
        )

    def refused(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value
        return value("voxpipe_refused_calls_total", {"reason": reason}) or 0.0


def session(session_id: str, owner: Principal) -> Session:
    return cast(Session, SimpleNamespace(id=session_id, owner=owner.id, transport=None))


@pytest.fixture
def calls() -> Calls:
    return Calls(max_calls=2)


async def test_calls_are_admitted_up_to_capacity_and_refused_beyond(calls: Calls) -> None:
    first, _ = calls.admitted(), calls.admitted()
    assert calls.registry.load == 2 and calls.gauges() == (2, 0)
    refusal = calls.registry.admit(calls.call())
    assert refusal is not None and refusal.code is ErrorCode.AT_CAPACITY
    assert refusal.close_code is CloseCode.TRY_AGAIN_LATER and "(2 calls)" in refusal.message
    assert calls.registry.refused == 1 and calls.refused("at_capacity") == 1
    calls.registry.release(first)
    assert calls.registry.admit(calls.call()) is None, "a released slot is taken at once"
    calls.registry.release(first)  # twice: nothing more is freed
    assert calls.registry.load == 2


async def test_a_draining_server_refuses_every_call(calls: Calls) -> None:
    calls.registry.draining = True
    refusal = calls.registry.admit(calls.call())
    assert refusal is not None and refusal.code is ErrorCode.SHUTTING_DOWN
    assert refusal.close_code is CloseCode.TRY_AGAIN_LATER and calls.registry.load == 0
    assert calls.refused(ErrorCode.SHUTTING_DOWN.value) == 1


async def test_a_waiting_session_holds_a_slot_and_only_its_owner_resumes_into_it(
    calls: Calls,
) -> None:
    calls.admitted()
    calls.detach("waiting")
    assert calls.registry.load == 2 and calls.gauges() == (1, 1)
    for who, resuming in ((BOB, "waiting"), (ALICE, "another"), (ALICE, None)):
        refusal = calls.registry.admit(calls.call(who), resuming=resuming)
        assert refusal is not None and refusal.code is ErrorCode.AT_CAPACITY, (who, resuming)
    assert calls.registry.admit(calls.call(ALICE), resuming="waiting") is None
    assert calls.registry.load == 3, "over max_calls: the resume needed no new slot"


async def test_a_detached_session_expires_after_its_grace(calls: Calls) -> None:
    calls.detach("short", grace_s=0.05)
    assert calls.registry.find_session("short") and calls.registry.owner_of("short") == ALICE.id
    async with asyncio.timeout(5):
        while not calls.expired:  # noqa: ASYNC110  # the expiry is a loop timer
            await asyncio.sleep(0.01)
    assert calls.expired == ["short"] and calls.gauges() == (0, 0)
    assert not calls.registry.find_session("short") and calls.registry.owner_of("short") is None
    assert calls.registry.reattach("short") is None


async def test_a_reattached_session_is_handed_back_and_never_expires(calls: Calls) -> None:
    calls.detach("back", grace_s=0.05)
    entry = calls.registry.reattach("back")
    assert entry is not None and entry.session.id == "back" and entry.state == "resume state"
    assert calls.gauges() == (0, 0) and calls.registry.load == 0
    await asyncio.sleep(0.15)
    assert calls.expired == [], "the expiry was cancelled"
    assert calls.registry.reattach("back") is None, "handed back once"


async def test_a_detached_session_detached_again_keeps_only_the_newer_expiry(
    calls: Calls,
) -> None:
    calls.detach("twice", grace_s=0.05)
    calls.detach("twice", grace_s=60)  # resumed, dropped again: a new grace
    await asyncio.sleep(0.15)
    assert calls.expired == [] and calls.registry.find_session("twice")
    assert calls.registry.reattach("twice") is not None


async def test_owner_of_and_find_attached_see_connected_calls(calls: Calls) -> None:
    call = calls.admitted(BOB, session_id="live")
    calls.admitted()  # a connection with no session yet
    assert calls.registry.find_attached("live") is call
    assert calls.registry.owner_of("live") == BOB.id and calls.registry.find_session("live")
    assert calls.registry.find_attached("nope") is None and calls.registry.owner_of("nope") is None
    calls.registry.release(call)
    assert calls.registry.owner_of("live") is None


async def test_idle_is_set_only_while_no_call_is_connected(calls: Calls) -> None:
    assert calls.registry.idle.is_set()
    call = calls.admitted()
    assert not calls.registry.idle.is_set()
    calls.detach("waiting")  # a waiting session is not a connected call
    calls.registry.release(call)
    assert calls.registry.idle.is_set() and calls.registry.load == 1
