"""The server, its admission limits and queue bounds, and the per-stage deadlines of a turn."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from voxpipe.config.section import Section


class ServerConfig(Section):
    """The HTTP/WebSocket server."""

    host: str = "127.0.0.1"
    """Interface to listen on (0.0.0.0 for all)."""

    port: int = Field(8765, ge=0, le=65535)
    """TCP port."""

    max_message_bytes: int = Field(256 * 1024, ge=1024)
    """Largest WebSocket message handled; larger gets an error."""

    start_timeout_s: float = Field(10.0, gt=0)
    """A connection must send session.start within this time."""

    turn_log_path: Path | None = Path("var/turns.jsonl")
    """JSON-lines log of every turn's timeline; None = off."""

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Server log level."""

    log_format: Literal["text", "json"] = "text"
    """Log line format: text, or one JSON object per line with call and turn ids
    (docs/observability.md#logs)."""

    socket_send_buffer_bytes: int | None = Field(262144, ge=4096)
    """Kernel send buffer of each connection (SO_SNDBUF); bounds what a stalled client can hold in
    the kernel, so the send buffer's bound takes effect. None = the OS default (autotuned, up to
    megabytes)."""

    heartbeat_s: float = Field(10.0, gt=0)
    """WebSocket ping interval; a peer that misses a pong for as long again is dead (a quiet caller
    still answers pings)."""

    idle_timeout_s: float = Field(300.0, gt=0)
    """A call with no caller speech and no reply this long is closed."""

    max_call_s: float = Field(3600.0, gt=0)
    """Longest call; then it is closed."""

    resume_grace_s: float = Field(30.0, ge=0)
    """A call whose connection dropped (not hung up) waits this long for a reconnect with its
    session id."""

    drain_timeout_s: float = Field(30.0, ge=0)
    """On SIGTERM: stop admitting, let calls finish this long, then close them (server_shutdown,
    close 1001)."""

    worker_id: str | None = None
    """This worker's name in a cluster, sent as the x-voxpipe-worker header and in /healthz;
    default: host name and port."""

    refuse_with_http: bool = False
    """Refuse a call to retry (not ready, at capacity, draining) with HTTP 503 before the WebSocket
    upgrade, instead of an error event and close 1013, so a load balancer (nginx
    proxy_next_upstream http_503) tries the next worker. `voxpipe serve --workers N` turns it
    on."""

    bind_when_ready: bool = False
    """Listen only once the models are warm, so a load balancer without health checks (nginx) never
    sends a call to a cold worker; /healthz is unreachable until then. `voxpipe serve --workers
    N` turns it on."""


class LimitsConfig(Section):
    """Admission control and the bounds of every queue and buffer of a call."""

    max_calls: int = Field(3, ge=1)
    """Concurrent calls admitted; one more is refused at connect (at_capacity, close 1013). 3 is
    the edge of a 1.2 s p99 on two cores with the default engines and thread budgets
    (docs/benchmarks.md; a fourth call is talked over now and then). Size it for your machine
    and models with `voxpipe load --find-capacity`."""

    engine_queue: int = Field(32, ge=1)
    """Jobs that may wait per engine; a job beyond it is rejected (engine_busy). Admission keeps
    the real depth far below."""

    inbound_buffer_ms: int = Field(2000, ge=100)
    """Caller audio waiting for the VAD; on overflow the oldest audio is dropped, counted, logged
    once per episode and reported to the client (audio_dropped)."""

    inbound_wait_ms: int = Field(250, ge=0, le=5000)
    """Backpressure: while over half of inbound_buffer_ms waits for the VAD, a WebSocket call
    (native, OpenAI Realtime, Twilio) stops reading for up to this long per message, so TCP
    slows a sender that runs ahead of real time; 0 = never wait (drop instead). WebRTC cannot be
    slowed."""

    send_buffer_ms: int = Field(5000, ge=200)
    """Reply audio (and events) sent but not yet taken by the client's socket; a client that stops
    reading past this is closed (slow_consumer, close 4002)."""

    replay_buffer_ms: int = Field(10000, ge=0)
    """Reply audio kept after sending, so a reconnecting client can ask for what it missed."""


class DeadlineConfig(Section):
    """Per-stage deadlines of a turn, from the end of the caller's speech; misses are counted."""

    stt_ms: int = Field(1000, ge=50)
    """Transcript due."""

    llm_first_token_ms: int = Field(1400, ge=50)
    """First LLM token due (the first words of the reply, or a tool's phrase); a miss is
    counted, and a reply with no tools offered says the filler then."""

    filler_ms: int = Field(800, ge=0)
    """The filler is said when a reply that may call a tool (tools offered) has no words this
    long after the caller's: its words wait for the decision on the call, so without it the
    caller would sit in silence for over a second. It reaches a phone caller about 100 ms
    later. A reply with no tools gets the filler at ``llm_first_token_ms``: its first words
    come sooner, and an early filler would only hold them back (docs/benchmarks.md, "The
    filler within a second"). Nor does a caller's goodbye: "One moment." is no answer to it,
    and a farewell's reply is quick."""

    tts_first_chunk_ms: int = Field(1800, ge=50)
    """First reply audio due."""

    turn_s: float = Field(30.0, gt=0)
    """A reply still running this long after the turn is cancelled."""

    filler: str = "One moment."
    """Said when a reply is late (``filler_ms``, ``llm_first_token_ms`` above); empty = stay
    silent."""
