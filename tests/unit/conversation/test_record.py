"""CallRecorder: the one path from a call to its store, and a session that writes only
through it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.unit.conversation.harness import Call
from voxpipe.conversation.history import CallRecorder
from voxpipe.conversation.services import CallRecord


class Store:
    """A CallStore that lists its writes."""

    shared = False

    def __init__(self) -> None:
        self.writes: list[tuple[Any, ...]] = []

    def call_started(self, call: CallRecord, info: dict[str, Any]) -> None:
        self.writes.append(("started", call))

    def message(
        self, call: CallRecord, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None:
        self.writes.append(("message", call, turn_id, role, text, status))

    def turn_finished(self, call: CallRecord, record: dict[str, Any]) -> None:
        self.writes.append(("turn", call, record["turn_id"]))

    def save_state(self, call: CallRecord, state: dict[str, Any]) -> None:
        self.writes.append(("state", call, state["turns"]))

    def call_ended(self, call: CallRecord, reason: str, counts: dict[str, Any]) -> None:
        self.writes.append(("ended", call, reason))

    async def load_state(self, session_id: str) -> dict[str, Any] | None:
        return None

    async def aclose(self) -> None:
        pass


def test_without_a_store_nothing_is_written() -> None:
    recorder = CallRecorder(None, CallRecord("c", "s", "anonymous"))
    recorder.started({})
    recorder.message(1, "user", "hi")
    recorder.turn_finished({"turn_id": 1})
    recorder.save({"turns": 1})
    recorder.ended("hangup", {})


async def test_a_call_is_recorded_in_order_under_its_record(
    make_call: Callable[..., Call],
) -> None:
    store = Store()
    call = make_call(store=store)
    await call.say()
    await call.until(lambda: call.done(1) is not None)
    await call.session.close()
    record = call.session.record
    assert [w[1] for w in store.writes] == [record] * len(store.writes)
    # The state is saved as the turn joins the history, before the turn is recorded.
    assert [w[0] for w in store.writes] == [
        "started", "message", "state", "message", "turn", "ended",
    ]  # fmt: skip
    assert store.writes[1][2:] == (1, "user", "hello there", None)
    assert store.writes[3][2:] == (1, "assistant", "Hello there.", "completed")
