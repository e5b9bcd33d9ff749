"""The four engine interfaces: VAD, STT, LLM, TTS.

Engines are synchronous and CPU-bound; the session never calls them on the
event loop but through an :class:`~voxpipe.engines.runner.EngineRunner`, which
owns the thread budget. Streaming engines yield as they go and watch a
:class:`CancelToken` between steps, so a cancel stops the work itself, not just
the reading of its output.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from voxpipe.engines.batch_plan import StepRecord

STT_SAMPLE_RATE = 16000


class CancelToken:
    """A thread-safe cancel flag that engines poll and can hook into."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._hooks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def on_cancel(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` on cancel (at once if already cancelled); returns an unregister."""
        with self._lock:
            if not self._event.is_set():
                self._hooks.append(hook)

                def unregister() -> None:
                    with self._lock:
                        if hook in self._hooks:
                            self._hooks.remove(hook)

                return unregister
        hook()
        return lambda: None


class JobObserver(Protocol):
    def observe_job(self, engine: str, queue_s: float, compute_s: float) -> None: ...

    def set_queue_depth(self, engine: str, depth: int) -> None: ...


@dataclass
class JobClock:
    """Monotonic timestamps of one job, in nanoseconds (0 = not yet)."""

    queued_ns: int = 0
    started_ns: int = 0
    first_item_ns: int = 0
    finished_ns: int = 0

    @property
    def queue_s(self) -> float:
        return max(0, self.started_ns - self.queued_ns) / 1e9

    @property
    def compute_s(self) -> float:
        return max(0, self.finished_ns - self.started_ns) / 1e9


class VadStream(Protocol):
    """Per-call VAD state: feed 16 kHz float32 audio, get one probability per window."""

    def process(self, audio: np.ndarray) -> list[float]: ...


class Engine(Protocol):
    """What every engine has: a name, and a warm-up the server runs before it takes calls,
    so that no caller pays for a cold model."""

    name: str

    def warmup(self) -> None: ...


class VadEngine(Engine, Protocol):
    sample_rate: int
    window_samples: int

    def new_stream(self) -> VadStream: ...


@dataclass(frozen=True)
class Transcription:
    text: str
    language: str
    audio_s: float


class SttEngine(Engine, Protocol):
    def transcribe(self, audio: np.ndarray) -> Transcription:
        """``audio``: mono float32 at 16 kHz."""
        ...


Role = Literal["system", "user", "assistant"]  # what a client may write into a conversation
MessageRole = Literal["system", "user", "assistant", "tool"]

# A tool's name as OpenAI accepts it (and as a llama.cpp grammar literal needs no escaping).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def new_tool_call_id() -> str:
    """An id for a tool call the embedded model made (remote servers send their own)."""
    return f"call_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ToolSpec:
    """A tool as an LLM sees it: a name, what it is for, and its parameters' JSON schema
    (an ``object`` schema). Every engine renders it in its own way; :meth:`openai` is the
    shared form (the OpenAI ``tools`` entry, which is also what a GGUF's chat template is
    given: ``tool_family.native_chat``)."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    read_only: bool = False
    """A lookup (the agent's ``effect="read_only"``): calling it changes nothing, so the
    embedded model's router may call it on a weaker cue, if the caller said its arguments
    (``llm.lookup_router``). Not part of what the model is shown."""

    def __post_init__(self) -> None:
        if not TOOL_NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {TOOL_NAME.pattern}")
        if self.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be an object schema")

    def missing_arguments(self, arguments: Mapping[str, Any]) -> list[str]:
        """The schema's required properties that ``arguments`` lacks."""
        return [name for name in self.parameters.get("required", ()) if name not in arguments]

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class ToolCallRequest:
    """A complete tool call the model made: what the agent runs, and what the history keeps
    (on the assistant message) so the model sees its own call on the next generation.

    ``arguments_json`` is the arguments as the model wrote them (what a Realtime client
    gets in ``function_call_arguments.done``). ``error`` is set when the call cannot be run
    as it stands (arguments that are not a JSON object, an unknown tool, output cut off):
    the agent answers it with that error instead of running anything.
    """

    call_id: str
    name: str
    arguments: Mapping[str, Any]
    arguments_json: str
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": dict(self.arguments),
            "arguments_json": self.arguments_json,
        }
        return {**data, "error": self.error} if self.error else data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCallRequest:
        return cls(
            str(data["call_id"]),
            str(data["name"]),
            dict(data.get("arguments") or {}),
            str(data.get("arguments_json") or json.dumps(data.get("arguments") or {})),
            str(data.get("error") or ""),
        )


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call's arguments as the model writes them, for a client that shows
    them as they come (Realtime ``response.function_call_arguments.delta``). Optional: the
    :class:`ToolCallRequest` that follows a call's deltas is what counts, and the deltas of
    one call join to its ``arguments_json``."""

    call_id: str
    name: str
    arguments_delta: str


LlmOutput = str | ToolCallDelta | ToolCallRequest  # what a stream with tools yields


CALLER_SENTENCE = (
    "Hi, I would like to book a table for four people tomorrow evening at seven, "
    "and one of us is vegetarian."
)
"""A caller's sentence of typical length (about 25 tokens): what an LLM's warm-up answers,
so that the first real turn finds its code paths and buffers already sized."""


@dataclass(frozen=True)
class ChatMessage:
    """One message of the conversation. An assistant message may carry the tool calls it
    made (``tool_calls``, its ``content`` then often empty); a ``tool`` message is one
    call's result, tied to it by ``tool_call_id``."""

    role: MessageRole
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form (what a store keeps); :meth:`from_dict` reads it back."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id:
            data["tool_call_id"] = self.tool_call_id
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatMessage:
        calls = tuple(ToolCallRequest.from_dict(c) for c in data.get("tool_calls") or ())
        return cls(data["role"], str(data.get("content") or ""), calls,
                   str(data.get("tool_call_id") or ""))  # fmt: skip


@dataclass
class LlmUsage:
    """Filled in by the engine while it streams."""

    prompt_tokens: int = 0
    instruction_tokens: int = 0  # of those, the system message and tools: no summary shortens them
    reused_tokens: int = 0  # prompt tokens whose KV state was already in the context
    prefill_tokens: int = 0  # prompt tokens actually evaluated for this request
    completion_tokens: int = 0
    state_restored: bool = False
    finish_reason: str = ""
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class Urgency:
    """How urgent one LLM request is, read by a batching engine before every step
    (``engines/batch_plan.py``); the reply that made the request updates it.

    ``held``: the request is speculative (a reply started in the caller's pause; the turn
    may not have ended) until the reply is confirmed. ``gate``: while clear, the reply's
    first clause is being synthesized and the request sits out (for up to ``max_hold_ns``).
    ``heard_by_ns``, kept by the reply's audio, says how far ahead of the caller's ear the
    reply already is: a batching engine pauses a reply that is far enough ahead.
    ``joined_ns`` is set by the engine when the request first enters a step: its queue
    wait ends there. ``late`` is set then too, when it joined so late that the turn will
    miss its mark anyway: the engine lowers its token cap and the reply cuts its first
    phrase short, on purpose, rather than leave the caller in silence longer.
    """

    deadline_ns: int = field(default_factory=time.monotonic_ns)
    held: bool = False
    gate: threading.Event | None = None
    max_hold_ns: int = 1_000_000_000
    joined_ns: int = 0
    late: bool = False  # set by the engine: joined too late; the reply hurries (batch_plan)
    heard_by_ns: int = 0  # when the caller will have heard all the reply generated so far


@runtime_checkable
class ParallelLlm(Protocol):
    """An LLM that serves several requests at once: the runner gives it a thread per request
    it serves (a batching engine's sequences, a remote server's connections); those threads
    only wait on the batch or the stream. Any other LLM gets one."""

    max_sequences: int


@runtime_checkable
class BatchingLlm(Protocol):
    """An LLM that serves many requests at once in this process (the embedded llama.cpp
    model): it takes each request's :class:`Urgency`, and the runner gives it as many
    threads as it has sequences. A remote server batches on its own and needs neither."""

    max_sequences: int

    def observe_steps(self, observer: Callable[[StepRecord], None]) -> None:
        """Tell ``observer`` of every step (the server's metrics)."""
        ...

    def share_cores(self, others_busy: Callable[[], int]) -> None:
        """``others_busy()``: how many threads the other engines are computing on now; the
        LLM gives them those cores for its next step (it never goes below one thread)."""
        ...


@runtime_checkable
class TurnJudgingLlm(Protocol):
    """An LLM that can say, from a call's conversation and the caller's words so far,
    how likely those words end the caller's turn: the probability that the model's next
    token closes the user's message (or a sentence). The embedded model reads it from the
    call's own KV sequence, so the reply that follows evaluates only its last few tokens.
    A remote server cannot give one token's probability cheaply and is not asked."""

    def turn_ends(
        self, session_id: str, messages: Sequence[ChatMessage], cancel: CancelToken
    ) -> float | None:
        """``messages`` end with the caller's words so far (a user message). None: not
        judged (the call's sequence is not warm enough to judge cheaply)."""
        ...


@runtime_checkable
class WarmingLlm(Protocol):
    """An LLM that can evaluate a call's conversation and the caller's words so far into
    the call's own KV sequence while the caller is still speaking, so the reply that follows
    evaluates only what the final words add. The work is speculative: it runs after every
    other request and gives way to the call's own next one. A remote server keeps no
    per-call state to warm and is not asked."""

    def warm(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        tools: Sequence[ToolSpec] = (),
    ) -> bool:
        """Start the evaluation (False: nothing to warm). ``messages`` end with the caller's
        words so far (a user message); ``tools`` are those the call's requests offer, which
        are part of its prompt."""
        ...


@dataclass(frozen=True)
class LlmRequest:
    """One request to an LLM, as every engine gets it (:meth:`LlmEngine.generate`, and
    :meth:`LlmEngine.prefill` for a prompt evaluated ahead of time): the one place an LLM
    call's parameters are declared.

    With ``tools`` the model may call one instead of answering: the stream then yields
    :class:`ToolCallDelta` pieces (where the engine can) and one :class:`ToolCallRequest`
    per call. Without tools it yields ``str`` only. ``tool_choice``: "auto" (the model
    decides), "none" (the tools stay in the prompt, so its cached prefix holds, but the
    model answers in words), "required" (it calls one) or a tool's name (it calls that one).
    ``trace_headers`` (W3C ``traceparent``) make a remote request part of the turn's trace;
    an engine in this process ignores them. ``urgency`` is read by a batching engine
    (:class:`BatchingLlm`); the others ignore it.
    """

    session_id: str
    messages: Sequence[ChatMessage]
    cancel: CancelToken
    usage: LlmUsage
    tools: tuple[ToolSpec, ...] = ()  # none offered: the reply is words only
    tool_choice: str = "auto"
    trace_headers: Mapping[str, str] | None = None
    urgency: Urgency | None = None


class LlmEngine(Engine, Protocol):
    """An LLM. An engine subclasses this protocol for its :meth:`stream`, and implements
    :meth:`generate`, :meth:`prefill`, :meth:`forget` and :meth:`warmup`. Both
    :meth:`generate` and :meth:`prefill` take an :class:`LlmRequest`."""

    def stream(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        usage: LlmUsage,
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: str = "auto",
        trace_headers: Mapping[str, str] | None = None,
        urgency: Urgency | None = None,
    ) -> Iterator[LlmOutput]:
        """Yield the assistant reply's text deltas (and, with ``tools``, its tool calls);
        stop early once ``cancel`` is set. The parameters are :class:`LlmRequest`'s."""
        request = LlmRequest(
            session_id, messages, cancel, usage, tuple(tools or ()), tool_choice, trace_headers,
            urgency,
        )  # fmt: skip
        return self.generate(request)

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        """What :meth:`stream` returns: ``str`` items only when no tools are offered."""
        ...

    def prefill(self, request: LlmRequest) -> None:
        """Evaluate ``request.messages`` ahead of time, so the next request only adds its own
        tokens (with the ``tools`` that request will offer: they are part of its prompt);
        what it cost goes into ``request.usage``. Nothing is generated, so ``tool_choice``
        and ``urgency`` are not read."""
        ...

    def forget(self, session_id: str) -> None:
        """Drop whatever state is kept for ``session_id``."""
        ...


class TtsEngine(Engine, Protocol):
    sample_rate: int

    def synthesize(self, text: str, cancel: CancelToken) -> Iterator[np.ndarray]:
        """Yield mono int16 chunks at ``sample_rate``; stop once ``cancel`` is set."""
        ...


class TurnModel(Engine, Protocol):
    """Judges from its sound whether a caller's turn is complete (``turn.end_of_turn``)."""

    def probability_complete(self, audio: np.ndarray) -> float: ...


@dataclass(frozen=True)
class Engines:
    """The four engines a server runs with, and the turn model when turns end by it."""

    vad: VadEngine
    stt: SttEngine
    llm: LlmEngine
    tts: TtsEngine
    turn: TurnModel | None = None


class EngineError(RuntimeError):
    """An engine failed in a way the caller should be told about."""


class PromptTooLong(EngineError):
    """The prompt's fixed part (instructions and tools) fills the context by itself: no
    turn can be answered until it is smaller. The caller's to fix, not a bug."""
