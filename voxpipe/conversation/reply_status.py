"""How a reply ends: its status and the moves between statuses. The one setter that checks
each move is the reply's own (:class:`~voxpipe.conversation.reply.ReplyOutcome`).

A reply starts ``pending`` and usually leaves it once, for its outcome. A few later moves
are real, because the session's control (discard, barge-in, a client's cancel, hang-up)
races the reply's own task, which keeps running until it has recorded its end:

* a held reply that already knows its outcome waits for the session's decision, so it may
  still be discarded;
* a reply recording its end (turn log, store, ``response.done``) is still active, so it
  may still be interrupted;
* a reply winding down after a cancel may still fail, or be cancelled by the client or by
  the session closing.

:data:`TRANSITIONS` lists exactly the moves the code makes; any other is a bug in the
caller and raises :class:`IllegalReplyTransition`.

The values are the strings written to ``response.done``, ``turn.metrics``, the turn log,
the store and ``voxpipe_turns_total{status}``: a ``StrEnum`` serializes as its value, so
they read as they always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class ReplyStatus(StrEnum):
    PENDING = "pending"  # working, or held until the session decides
    COMPLETED = "completed"  # ran to its end
    EMPTY = "empty"  # no words in the transcript: nothing to answer
    COMMITTED = "committed"  # transcribed only; the client asks for replies itself
    INTERRUPTED = "interrupted"  # barge-in: the caller spoke over it
    CANCELLED = "cancelled"  # stopped by a cancel: the client's, or the session closing
    FAILED = "failed"  # an engine error or a missed deadline
    DISCARDED = "discarded"  # held work thrown away: never reported to anyone


# status -> the statuses it may move to (the module docstring says why the later moves exist)
TRANSITIONS: Mapping[ReplyStatus, frozenset[ReplyStatus]] = {
    ReplyStatus.PENDING: frozenset(ReplyStatus) - {ReplyStatus.PENDING},
    # Interrupted: still active while it records its end. Discarded: a held reply (its LLM
    # said nothing; no words; an engine error) waits for the session's decision.
    ReplyStatus.COMPLETED: frozenset({ReplyStatus.INTERRUPTED, ReplyStatus.DISCARDED}),
    ReplyStatus.EMPTY: frozenset({ReplyStatus.INTERRUPTED, ReplyStatus.DISCARDED}),
    # Never held, never barged in on: only a truncate of its turn reaches it.
    ReplyStatus.COMMITTED: frozenset({ReplyStatus.INTERRUPTED}),
    # As above; and while its error is sent, the session may close or the client cancel
    # it, or the send itself fail.
    ReplyStatus.FAILED: frozenset(
        {ReplyStatus.INTERRUPTED, ReplyStatus.DISCARDED, ReplyStatus.CANCELLED, ReplyStatus.FAILED}
    ),
    # Cancelled without its token (a waiter on its task was cancelled), a reply is still
    # active; a held one is still the session's held reply after the call has closed.
    ReplyStatus.CANCELLED: frozenset(
        {ReplyStatus.INTERRUPTED, ReplyStatus.DISCARDED, ReplyStatus.CANCELLED, ReplyStatus.FAILED}
    ),
    # Winding down after its cancel: the client cancels it (interrupt, then cancel), the
    # session closes, or an engine error or the turn deadline surfaces first.
    ReplyStatus.INTERRUPTED: frozenset({ReplyStatus.CANCELLED, ReplyStatus.FAILED}),
    ReplyStatus.DISCARDED: frozenset({ReplyStatus.CANCELLED, ReplyStatus.FAILED}),
}


class IllegalReplyTransition(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow: the caller has a bug."""
