"""Sessions belong to the principal that started them.

A session id is what a reconnect presents, and clients may choose their own, so
an id alone must never open a call: resume, restore on another worker and every
per-session operation compare the caller's principal with the session's owner.
A mismatch is answered exactly as a session that does not exist
(``session_not_found``), so a guessed id tells an attacker nothing, and the
owner's call is not touched. Starting a new call with an id still held by a
live call is refused; an ended call's id is free again, and the new call gets a
record of its own (``CallRecord.call_id``), never the old one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from voxpipe.conversation.events import ErrorCode
from voxpipe.conversation.principal import Principal
from voxpipe.conversation.saved_state import state_owner
from voxpipe.conversation.services import CallStore


class SessionOwners(Protocol):
    """The one thing these rules ask of the server's live calls (its ``CallRegistry``)."""

    def owner_of(self, session_id: str) -> str | None:
        """The principal whose live session (connected or waiting) has this id, if any."""
        ...


@dataclass(frozen=True)
class Refusal:
    code: ErrorCode
    message: str


def not_found(session_id: str) -> Refusal:
    """The one answer for an id that is unknown, ended, expired or someone else's."""
    return Refusal(
        ErrorCode.SESSION_NOT_FOUND,
        f"no session {session_id[:64]!r} to resume (ended, expired, not yours, or on another "
        "server without a shared store); start a new one",
    )


def may_resume(principal: Principal, owner: str, session_id: str) -> bool:
    return principal.id == owner and principal.may_open(session_id)


async def check_new(
    live: SessionOwners, store: CallStore | None, principal: Principal, session_id: str
) -> Refusal | None:
    """Whether ``principal`` may start a new call named ``session_id``: the id must be in
    its token's scope and not held by a call that is live here, live on another worker, or
    crashed and resumable (its owner may take it back)."""
    refusal = check_new_here(live, principal, session_id)
    if refusal is not None or store is None:
        return refusal
    state = await store.load_state(session_id)
    return None if state is None else _held(principal, state_owner(state), session_id)


def check_new_here(live: SessionOwners, principal: Principal, session_id: str) -> Refusal | None:
    """:func:`check_new` against this server's live calls only, for ids a provider issues
    once per call (a Twilio stream sid) and so never finds in a store."""
    if not principal.may_open(session_id):
        return Refusal(
            ErrorCode.UNAUTHORIZED,
            f"this token is scoped to another session than {session_id[:64]!r}",
        )
    owner = live.owner_of(session_id)
    return None if owner is None else _held(principal, owner, session_id)


def _held(principal: Principal, owner: str, session_id: str) -> Refusal:
    if owner == principal.id:
        return Refusal(
            ErrorCode.ALREADY_STARTED,
            f"session {session_id[:64]!r} is live; send resume to take it over",
        )
    return Refusal(
        ErrorCode.SESSION_ID_TAKEN,
        f"session id {session_id[:64]!r} is taken; choose another, or leave session_id out "
        "for a server-issued one",
    )
