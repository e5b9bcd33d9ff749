"""The small typed values a session sends out; transports turn them into wire messages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar


class ErrorCode(StrEnum):
    """Every error a client can receive. ``docs/protocol.md`` explains each."""

    INVALID_JSON = "invalid_json"
    INVALID_EVENT = "invalid_event"
    INVALID_UTF8 = "invalid_utf8"
    UNKNOWN_EVENT = "unknown_event"
    NOT_STARTED = "session_not_started"
    ALREADY_STARTED = "session_already_started"
    BAD_AUDIO_FRAME = "bad_audio_frame"
    UNSUPPORTED_SAMPLE_RATE = "unsupported_sample_rate"
    MESSAGE_TOO_LARGE = "message_too_large"
    START_TIMEOUT = "start_timeout"
    NOT_READY = "server_not_ready"
    ENGINE_BUSY = "engine_busy"
    TURN_FAILED = "turn_failed"
    CONTEXT_EXCEEDED = "context_length_exceeded"
    INTERNAL = "internal_error"
    UNAUTHORIZED = "unauthorized"
    TOKENS_DISABLED = "tokens_disabled"
    AT_CAPACITY = "at_capacity"
    SHUTTING_DOWN = "server_shutdown"
    IDLE_TIMEOUT = "idle_timeout"
    MAX_DURATION = "max_duration"
    SLOW_CONSUMER = "slow_consumer"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    AUDIO_DROPPED = "audio_dropped"
    SESSION_REPLACED = "session_replaced"
    RESUME_FAILED = "resume_failed"
    SESSION_NOT_FOUND = "session_not_found"
    SESSION_ID_TAKEN = "session_id_taken"
    TRANSFER_FAILED = "transfer_failed"
    CALL_FAILED = "call_failed"


@dataclass(frozen=True)
class Event:
    type: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}


@dataclass(frozen=True)
class SessionStarted(Event):
    type: ClassVar[str] = "session.started"
    session_id: str
    input_sample_rate: int
    output_sample_rate: int
    out_frame_ms: int
    config: dict[str, Any]
    models: dict[str, str]
    resumed: bool = False
    input_samples: int = 0  # on resume: caller audio the server has; resend from there
    replayed: int = 0  # on resume: missed messages sent again after this one
    restored: bool = False  # on resume: carried on from the shared store on a new worker


@dataclass(frozen=True)
class Pong(Event):
    """Answer to ``ping``: an application-level heartbeat for clients that want one."""

    type: ClassVar[str] = "pong"


@dataclass(frozen=True)
class SessionUpdated(Event):
    type: ClassVar[str] = "session.updated"
    config: dict[str, Any]


@dataclass(frozen=True)
class TurnScoped(Event):
    """An event of one turn: ``turn_id`` is the turn whose caller words, reply or tool
    call it tells of."""

    turn_id: int


@dataclass(frozen=True)
class SpeechStarted(Event):
    type: ClassVar[str] = "vad.speech_started"
    audio_ms: float  # position in the inbound audio, from the first sample of the call


@dataclass(frozen=True)
class SpeechStopped(Event):
    type: ClassVar[str] = "vad.speech_stopped"
    audio_ms: float
    turn_id: int


@dataclass(frozen=True)
class CallerWords(TurnScoped):
    """What the caller said in the turn; its kinds below, each its own type, so that a
    transport tells a final transcript from a partial one."""

    text: str


@dataclass(frozen=True)
class Transcript(CallerWords):
    type: ClassVar[str] = "transcript"


@dataclass(frozen=True)
class TranscriptPartial(CallerWords):
    """The turn's words so far, while the caller is still speaking; the ``transcript``
    event that follows the turn's end is the final text and may differ."""

    type: ClassVar[str] = "transcript.partial"


@dataclass(frozen=True)
class ResponseTextDelta(TurnScoped):
    type: ClassVar[str] = "response.text.delta"
    delta: str


@dataclass(frozen=True)
class ResponseDone(TurnScoped):
    type: ClassVar[str] = "response.done"
    status: str  # completed | interrupted | cancelled | failed | empty
    text: str  # what the caller heard (all of it unless interrupted)
    audio_ms: float  # reply audio sent
    first_seq: int | None
    last_seq: int | None
    reason: str = ""
    generated_text: str = ""  # everything the LLM produced, heard or not
    heard_ms: float | None = None
    answer_seq: int | None = None  # the answer's first frame, after any filler or phrase


@dataclass(frozen=True)
class ToolCallEvent(TurnScoped):
    """A step of one tool call (``call_id``, of tool ``name``) that the turn made; its
    kinds below."""

    call_id: str
    name: str


@dataclass(frozen=True)
class ToolArgumentsDelta(ToolCallEvent):
    """A piece of a CLIENT tool's arguments as the model writes them, before its
    :class:`ToolStarted` (Realtime ``response.function_call_arguments.delta``; the native
    transport may drop these)."""

    type: ClassVar[str] = "tool.arguments.delta"
    delta: str


@dataclass(frozen=True)
class ToolStarted(ToolCallEvent):
    """The model called a tool, and the call is recorded: the server runs it now
    (``executor`` "server"), or the reply ends and the client runs it ("client")."""

    type: ClassVar[str] = "tool.started"
    arguments: dict[str, Any]
    arguments_json: str
    executor: str = "server"  # server | client


@dataclass(frozen=True)
class ToolFinished(ToolCallEvent):
    """A server tool's result is recorded in the history (``status``: ok, error, timeout,
    cancelled, unknown_outcome); ``output`` is the result as the model reads it."""

    type: ClassVar[str] = "tool.finished"
    status: str
    duration_ms: float
    output: str = ""


@dataclass(frozen=True)
class PlaybackFlush(TurnScoped):
    """The caller may be starting to talk over the reply: drop the reply frames still
    buffered now, so the agent falls silent at once. Unlike a clear, more may come: if the
    sound proves to be no turn, the audio the caller did not hear is sent again (new seqs).
    Only a transport that says it can (``SessionSinks.flushes``) is sent one."""

    type: ClassVar[str] = "playback.flush"


@dataclass(frozen=True)
class PlaybackClear(TurnScoped):
    """Barge-in: drop every reply frame still buffered; none after ``last_seq`` will come."""

    type: ClassVar[str] = "playback.clear"
    last_seq: int | None


@dataclass(frozen=True)
class CallEnded(Event):
    """The server ends the call (the agent's ``end_call``), now that the last reply has
    played: the transport hangs up, or tells its client to."""

    type: ClassVar[str] = "call.ended"
    reason: str


@dataclass(frozen=True)
class CallTransfer(Event):
    """The agent hands the call to ``target`` (its ``transfer_call``), now that what it
    said first has played: the transport asks the provider (a REST call update, a SIP
    REFER)."""

    type: ClassVar[str] = "call.transfer"
    target: str


@dataclass(frozen=True)
class HistorySnapshot(Event):
    """The conversation as the LLM will see it next turn (answer to ``history.get``)."""

    type: ClassVar[str] = "history"
    messages: list[dict[str, str]]
    summary: str
    summarized_messages: int


@dataclass(frozen=True)
class TurnMetrics(TurnScoped):
    type: ClassVar[str] = "turn.metrics"
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **self.metrics, "turn_id": self.turn_id}


@dataclass(frozen=True)
class ErrorEvent(Event):
    type: ClassVar[str] = "error"
    code: str
    message: str

    @classmethod
    def of(cls, code: ErrorCode, message: str) -> ErrorEvent:
        return cls(code.value, message)


@dataclass(frozen=True)
class AudioDropped(ErrorEvent):
    """Caller audio the server dropped (``audio_dropped``): an ``error`` whose call goes on,
    with the amounts in fields so a client need not parse the message. Each dropped
    millisecond is in exactly one of these, so their ``dropped_ms`` add up to the total."""

    dropped_ms: float = 0.0  # since the previous audio_dropped of this call
    total_dropped_ms: float = 0.0  # in the whole call


@dataclass(frozen=True)
class AudioOut:
    """One outbound frame of reply audio (PCM16 mono at the session's output rate)."""

    seq: int  # per session, strictly increasing across turns
    turn_id: int
    pcm: bytes


SendEvent = Callable[[Event], Awaitable[None]]  # a session's events, to its transport
SendAudio = Callable[[AudioOut], Awaitable[None]]  # a session's reply frames, to its transport


class ClientOutbox:
    """A call's events on their way to its client, and the one flag that says the call is
    over. The session builds it around its transport's :data:`SendEvent` and closes it when
    the call ends; everything that tells the client anything (the session, its replies, the
    tool ledger, the partial transcripts, the call's end) sends through it, so no event
    reaches a client after its call, whichever task was still running. Only the caller's
    dropped audio is told past it (``Inbound``): its last notice goes out as the call
    closes, while the client may still hear."""

    def __init__(self, transport: SendEvent) -> None:
        self._transport = transport
        self._closed = False

    @property
    def closed(self) -> bool:
        """The call is over: nothing more is sent."""
        return self._closed

    async def send(self, event: Event) -> None:
        """To the client, unless the call is over (then dropped). A transport's error
        (the connection gone) reaches the sender."""
        if not self._closed:
            await self._transport(event)

    def close(self) -> None:
        self._closed = True
