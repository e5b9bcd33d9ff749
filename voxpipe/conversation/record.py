"""The one path from a call to its :class:`~voxpipe.conversation.services.CallStore`.

The session and its replies record the call as it goes (its start, every message, every
finished turn, the state another worker would need, its end); they all write through the
call's :class:`CallRecorder`, so what is kept of a call, and under which record, is decided
in one place. Without a store every write is a no-op.
"""

from __future__ import annotations

from typing import Any

from voxpipe.conversation.services import CallRecord, CallStore


class CallRecorder:
    """Writes one call's record. Every write only queues (the store's contract), so none
    waits on a disk or a network from the event loop."""

    def __init__(self, store: CallStore | None, call: CallRecord) -> None:
        self._store = store
        self.call = call

    def started(self, info: dict[str, Any]) -> None:
        """The call began here, or was taken back here by a restore."""
        if self._store is not None:
            self._store.call_started(self.call, info)

    def message(self, turn_id: int, role: str, text: str, status: str | None = None) -> None:
        if self._store is not None:
            self._store.message(self.call, turn_id, role, text, status)

    def turn_finished(self, record: dict[str, Any]) -> None:
        """A reply's end: its timeline, as ``turn.metrics`` and the turn log carry it."""
        if self._store is not None:
            self._store.turn_finished(self.call, record)

    def save(self, state: dict[str, Any]) -> None:
        """What a new worker needs to carry the call on (``Session.state``)."""
        if self._store is not None:
            self._store.save_state(self.call, state)

    def ended(self, reason: str, counts: dict[str, Any]) -> None:
        if self._store is not None:
            self._store.call_ended(self.call, reason, counts)
