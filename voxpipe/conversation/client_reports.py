"""A client's own timing of its turns (``client.turn``), joined to the server's.

A client reports a turn once it has heard the reply begin, which is mostly while the reply
still plays: the report then goes into the turn's record as it is made (``turn.metrics``,
the turn log, the store), and completes its latency split (``observability/latency_split.py``).
One that comes after the record was made (a reply shorter than the client's buffer, a slow
line) updates the record the session keeps and the store's, which replaces it; the turn log
(one line per turn, already written) keeps the turn as it was, and nothing is sent again.
Either way the client's figure is counted at once, in
``voxpipe_client_voice_to_voice_seconds``, and each part of the split is counted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from voxpipe.conversation.history import CallRecorder
from voxpipe.conversation.reply import Reply
from voxpipe.observability.latency_split import ClientTiming, LatencySplit
from voxpipe.observability.metrics import Metrics


class ReportOutcome(StrEnum):
    TAKEN = "taken"  # in the turn's record as it is made
    LATE = "late"  # after the record was made: the session's and the store's copies updated
    UNKNOWN_TURN = "unknown_turn"  # no turn of this session by that id (or not kept here)
    ALREADY = "already_reported"  # one report per turn: the first stands


class ClientReports:
    """Joins the reports of one session's client to the session's turns."""

    def __init__(
        self, metrics: Metrics, recorder: CallRecorder, records: Sequence[dict[str, Any]]
    ) -> None:
        self._metrics = metrics
        self._recorder = recorder
        self._records = records  # the session's finished turns (``Session.turns``), oldest first

    def take(
        self, turn_id: int, client: ClientTiming, reply: Reply | None, transport: str
    ) -> ReportOutcome:
        """Apply ``client``'s report of turn ``turn_id``; ``reply`` is the session's latest."""
        if reply is not None and reply.turn_id == turn_id and reply.turn_record is None:
            if reply.stages.client is not None:
                return ReportOutcome.ALREADY
            reply.stages.reported(client)
            outcome = ReportOutcome.TAKEN
        else:
            record = next((r for r in reversed(self._records) if r["turn_id"] == turn_id), None)
            if record is None:
                return ReportOutcome.UNKNOWN_TURN
            if "client" in record:
                return ReportOutcome.ALREADY
            self._late(record, client)
            outcome = ReportOutcome.LATE
        self._metrics.observe_client_voice_to_voice(
            transport, client.client, client.first_audio_played_ms / 1000
        )
        return outcome

    def _late(self, record: dict[str, Any], client: ClientTiming) -> None:
        record["client"] = client.as_dict()
        before = record.get("split_ms")
        if before is not None:
            after = LatencySplit.from_dict(before).reported(client).as_dict()
            record["split_ms"] = after
            self._metrics.observe_split({k: v for k, v in after.items() if before.get(k) is None})
        self._recorder.turn_finished(record)
