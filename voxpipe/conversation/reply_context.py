"""What every reply of a call borrows from its session: where it sends, records and traces,
the call's history and tools, and whether the call is over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from voxpipe.conversation.events import ClientOutbox, SendAudio
from voxpipe.conversation.history import CallRecorder, History
from voxpipe.conversation.reply_audio import FrameNumbers, Pacer
from voxpipe.conversation.services import Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.engines.base import ChatMessage
from voxpipe.observability.tracing import NO_CALL, CallTrace


class TurnCommits(Protocol):
    """Who puts a turn's words into the history ahead of its answer (the session's
    ``TurnHistory``; it imports the reply, so it is named here by what it does)."""

    def commit_turn(self, turn_id: int, transcript: str) -> ChatMessage | None:
        """The caller's words of turn ``turn_id`` into the history now (ahead of a tool
        call), if any: the message added."""


class _NoCommits:
    def commit_turn(self, turn_id: int, transcript: str) -> ChatMessage | None:
        return None


NO_COMMITS: TurnCommits = _NoCommits()  # a reply with no session's history (tests)


@dataclass
class ReplyContext:
    """What a reply borrows from its session."""

    session_id: str
    recorder: CallRecorder  # where the turns are recorded
    services: Services
    outbox: ClientOutbox  # the call's events to its client: quiet once the call is over
    send_audio: SendAudio
    frames: FrameNumbers
    pacer: Pacer
    output_rate: int
    history: History  # the call's conversation: a reply reads it, and its tools add to it
    trace: CallTrace = NO_CALL  # the call's span: each reply's turn span is its child
    ledger: ToolLedger | None = None  # the session's tools: None, none offered
    turns: TurnCommits = NO_COMMITS  # the caller's words into the history ahead of a call
