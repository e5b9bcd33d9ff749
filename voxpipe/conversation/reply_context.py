"""What every reply of a call borrows from its session: where it sends, records and traces,
the call's history and tools, and whether the call is over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from voxpipe.conversation.events import ClientOutbox, SendAudio
from voxpipe.conversation.history import History
from voxpipe.conversation.playback import Pacer
from voxpipe.conversation.record import CallRecorder
from voxpipe.conversation.reply_audio import FrameNumbers
from voxpipe.conversation.services import Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.engines.base import ChatMessage
from voxpipe.observability.tracing import NO_CALL, CallTrace


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
    # The caller's words of a turn into the history now (ahead of a tool call), if any.
    commit_turn: Callable[[int, str], ChatMessage | None] = lambda turn_id, text: None
