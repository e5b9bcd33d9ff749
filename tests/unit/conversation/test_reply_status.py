"""The reply's state machine: the moves the code makes are legal, no other is, and the
statuses serialize as the strings clients, records and dashboards have always read."""

from __future__ import annotations

import json
import sqlite3
from itertools import product

import pytest
from prometheus_client import CollectorRegistry, Counter

from voxpipe.conversation.reply import ReplyOutcome
from voxpipe.conversation.reply_status import TRANSITIONS, IllegalReplyTransition, ReplyStatus

OLD_VALUES = (
    "pending",
    "completed",
    "empty",
    "committed",
    "interrupted",
    "cancelled",
    "failed",
    "discarded",
)

# (from, to, the code path that makes the move)
LEGAL = [
    ("pending", "completed", "the pipeline ran to its end"),
    ("pending", "empty", "no words in the transcript"),
    ("pending", "committed", "transcribed only: the client asks for replies"),
    ("pending", "interrupted", "barge-in, a new turn, or a truncate"),
    ("pending", "discarded", "speech resumed before the end of the turn"),
    ("pending", "cancelled", "stopped by a cancel, or the session closed"),
    ("pending", "failed", "an engine error or the turn deadline"),
    ("completed", "interrupted", "barge-in while the reply records its end"),
    ("completed", "discarded", "a held reply whose LLM said nothing"),
    ("empty", "interrupted", "barge-in while the reply records its end"),
    ("empty", "discarded", "a held reply with no words"),
    ("committed", "interrupted", "a truncate while the reply records its end"),
    ("failed", "interrupted", "barge-in while the reply records its end"),
    ("failed", "discarded", "a held reply whose engine failed"),
    ("failed", "cancelled", "the session closed while the error was being sent"),
    ("failed", "failed", "sending the deadline's error failed too"),
    ("cancelled", "interrupted", "a task cancelled without its token, still active"),
    ("cancelled", "discarded", "the held reply of a closed call"),
    ("cancelled", "cancelled", "the session closed after the client's cancel"),
    ("cancelled", "failed", "an engine error after the client's cancel"),
    ("interrupted", "cancelled", "the client's cancel, or the session closed"),
    ("interrupted", "failed", "an engine error or the deadline while winding down"),
    ("discarded", "cancelled", "the session closed while the held work wound down"),
    ("discarded", "failed", "an engine error while the held work wound down"),
]
LEGAL_PAIRS = {(a, b) for a, b, _ in LEGAL}
ILLEGAL = sorted(set(product(OLD_VALUES, repeat=2)) - LEGAL_PAIRS)


def outcome_in(status: str) -> ReplyOutcome:
    outcome = ReplyOutcome()
    if status != "pending":
        outcome.move(ReplyStatus(status), f"reached {status}")
    return outcome


def test_the_values_are_the_strings_written_before() -> None:
    assert [s.value for s in ReplyStatus] == list(OLD_VALUES)


@pytest.mark.parametrize("status", list(ReplyStatus))
def test_a_status_serializes_as_its_old_string(status: ReplyStatus) -> None:
    value = status.value
    assert status == value and str(status) == value and f"{status}" == value
    assert "%s" % status == value  # noqa: UP031 - how logging formats it
    assert json.dumps({"status": status}) == json.dumps({"status": value})
    with sqlite3.connect(":memory:") as db:  # the store binds it as a parameter
        db.execute("CREATE TABLE t (status TEXT)")
        db.execute("INSERT INTO t VALUES (?)", (status,))
        assert db.execute("SELECT status FROM t").fetchone() == (value,)
    registry = CollectorRegistry()
    turns = Counter("turns_total", "Turns.", ["status"], registry=registry)
    turns.labels(status).inc()
    assert registry.get_sample_value("turns_total", {"status": value}) == 1.0


@pytest.mark.parametrize(("start", "to", "path"), LEGAL)
def test_every_move_the_code_makes_is_legal(start: str, to: str, path: str) -> None:
    outcome = outcome_in(start)
    outcome.move(ReplyStatus(to), path)
    assert outcome.status is ReplyStatus(to) and outcome.reason == path


@pytest.mark.parametrize(("start", "to"), ILLEGAL)
def test_every_other_move_raises(start: str, to: str) -> None:
    outcome = outcome_in(start)
    with pytest.raises(IllegalReplyTransition, match=f"from {start} to {to}"):
        outcome.move(ReplyStatus(to), "never")
    assert outcome.status is ReplyStatus(start) and outcome.reason != "never"


def test_the_table_holds_exactly_the_moves_listed_here() -> None:
    table = {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == LEGAL_PAIRS
    assert set(TRANSITIONS) == set(ReplyStatus)


def test_a_move_without_a_reason_keeps_the_reason_given() -> None:
    outcome = outcome_in("cancelled")
    outcome.move(ReplyStatus.CANCELLED)
    assert outcome.reason == "reached cancelled"


@pytest.mark.parametrize(
    ("cancelled", "expected"), [(False, ReplyStatus.COMPLETED), (True, ReplyStatus.CANCELLED)]
)
def test_a_pending_reply_that_ran_out_completed_or_was_cancelled(
    cancelled: bool, expected: ReplyStatus
) -> None:
    outcome = ReplyOutcome()
    outcome.ran_out(cancelled)
    assert outcome.status is expected and outcome.reason == ""


@pytest.mark.parametrize("status", ["interrupted", "discarded", "failed", "cancelled"])
def test_an_outcome_decided_before_the_work_ran_out_stands(status: str) -> None:
    outcome = outcome_in(status)
    outcome.ran_out(cancelled=True)
    assert outcome.status is ReplyStatus(status) and outcome.reason == f"reached {status}"
