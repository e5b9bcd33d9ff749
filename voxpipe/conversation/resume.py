"""Who gets a session back when a client reconnects with its id.

A call outlives a dropped connection: its session is kept here (:class:`Detached`) for a
while, and a reconnect that names it may take it back. Which session, if any, that is, is
decided here, once for every transport that resumes: the wire (numbering, replay, what the
client is told) stays in the transport, which hands over its own opaque state when it
detaches a session and gets it back with the session.

The answers, in the order they are tried:

- another principal's session: refused exactly as a session that does not exist
  (``ownership.not_found``), logged, and the owner's call is not touched;
- a session live on another connection: that connection is ended (it was replaced);
- a session kept here for a reconnect: taken back, with the transport's state;
- a kept session that a shared store shows has moved on to another worker (a newer epoch):
  the stale copy is closed (its writes are fenced off) and the session restored;
- a session this worker never held: restored from the store's saved state, one epoch on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from voxpipe.conversation.events import ErrorCode
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.ownership import Refusal, SessionOwners, may_resume, not_found
from voxpipe.conversation.principal import Principal
from voxpipe.conversation.saved_state import continued_record, state_owner
from voxpipe.conversation.services import CallRecord, CallStore, Services
from voxpipe.conversation.session import Session

# Its own logger: a resume or restore is one line, whichever transport asked for it.
log = logging.getLogger("voxpipe.resume")

S = TypeVar("S")


@dataclass
class Detached:
    """A session whose connection dropped, kept for a reconnect."""

    session: Session
    state: object  # the transport's own resume state
    expiry: asyncio.TimerHandle | None = None


class ResumableSessions(SessionOwners, Protocol):
    """What the resume policy asks of the server's live calls (its ``CallRegistry``)."""

    def find_session(self, session_id: str) -> bool:
        """The id belongs to a live session, connected or waiting for a reconnect."""
        ...

    async def replace(self, session_id: str) -> None:
        """End the connection on which ``session_id`` is live, if any: the session is
        being taken over by another connection (close 4003, ``session_replaced``)."""
        ...

    def reattach(self, session_id: str) -> Detached | None:
        """Take back a session kept for a reconnect, if it is still kept."""
        ...


@dataclass(frozen=True)
class TakenBack(Generic[S]):
    """The session kept here for a reconnect, and the state its transport kept with it."""

    session: Session
    state: S


@dataclass(frozen=True)
class Restored:
    """A session carried on from the store's saved state: nothing can be replayed, and the
    client resends its audio from ``input_samples`` (at the session's input rate)."""

    session: Session
    input_samples: int


async def resume(
    live: ResumableSessions,
    services: Services,
    principal: Principal,
    session_id: str,
    *,
    state_type: type[S],
    open_restored: Callable[[CallRecord], Session],
    audio_seq: int,
) -> TakenBack[S] | Restored | Refusal:
    """Give ``principal`` the session ``session_id`` back, or say why not.

    ``state_type`` is the kind of state the asking transport keeps with a detached session
    (a session kept by another is restored instead); ``open_restored`` opens, on the asking
    connection, the session that carries on the call ``record`` in a restore; ``audio_seq``
    is the last reply frame the client has, so a restored session numbers on past it.
    """
    owner = live.owner_of(session_id)
    if owner is not None and not may_resume(principal, owner, session_id):
        log.warning(
            "refused a resume of session %s by %s: it belongs to another principal",
            session_id[:64],
            principal.id,
        )
        return not_found(session_id)
    await live.replace(session_id)
    entry = live.reattach(session_id)
    if entry is None or not isinstance(entry.state, state_type):
        restored = await _restore(live, services, principal, session_id, open_restored, audio_seq)
        return restored or not_found(session_id)
    if await moved_on(services.store, entry.session):
        # While it waited here the session went on on another worker: this copy is old.
        await hang_up(entry.session)  # its writes are fenced off
        restored = await _restore(live, services, principal, session_id, open_restored, audio_seq)
        return restored or Refusal(ErrorCode.RESUME_FAILED, "the session's state is gone")
    entry.session.counts["resumes"] += 1
    return TakenBack(entry.session, entry.state)


async def moved_on(store: CallStore | None, session: Session) -> bool:
    """A shared store holds a newer epoch of ``session`` than this worker's copy."""
    if store is None or not store.shared:
        return False
    state = await store.load_state(session.id)
    return state is not None and int(state.get("epoch", 0)) > session.record.epoch


async def _restore(
    live: ResumableSessions,
    services: Services,
    principal: Principal,
    session_id: str,
    open_restored: Callable[[CallRecord], Session],
    audio_seq: int,
) -> Restored | None:
    """Carry on a session this worker never held (its worker died, or the load balancer
    moved it) from the state in the shared store; the client resends its audio from the
    last answered turn, which this worker answers again."""
    store, metrics = services.store, services.metrics
    state = await store.load_state(session_id) if store is not None else None
    if state is None:
        metrics.restores.labels("not_found").inc()
        return None
    if not may_resume(principal, state_owner(state), session_id):
        log.warning(
            "refused a restore of session %s by %s: it belongs to another principal",
            session_id[:64],
            principal.id,
        )
        metrics.restores.labels("not_owner").inc()
        return None
    if live.find_session(session_id):  # restored meanwhile by a twin
        return None
    session = open_restored(continued_record(state, session_id))  # its owner: this principal
    input_samples = session.saved.restore(state, audio_seq=audio_seq)
    session.counts["resumes"] += 1
    metrics.restores.labels("restored").inc()
    log.info(
        "session %s restored from the store: %d messages, turn %d, resend from sample %d",
        session_id,
        len(session.history.turns),
        state.get("turns", 0),
        input_samples,
    )
    session.saved.persist()  # one epoch on: the copy it was saved from can no longer overwrite it
    return Restored(session, input_samples)
