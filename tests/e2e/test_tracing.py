"""One real spoken turn, traced: the server (real models) exports its spans over OTLP/HTTP to
a receiver this test runs, named the standard way (``OTEL_EXPORTER_OTLP_ENDPOINT``), and the
tree it sends is the call's: call → turn → end_of_turn, stt, llm, tts, playout, one trace,
every parent right, the LLM's gen_ai attributes set, and no word of the call in any span.
The tree is printed and saved to ``test-artifacts/trace.txt``."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support import RunningServer, librivox_clips, start_server, wait_ready
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
STAGES = ("end_of_turn", "stt", "llm", "tts", "playout")


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


@dataclass
class Receiver:
    """What an OTLP/HTTP collector was sent on ``POST /v1/traces``, decoded."""

    spans: list[Span] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # path and content type of each
    lock: threading.Lock = field(default_factory=threading.Lock)
    call_ended: threading.Event = field(default_factory=threading.Event)  # a "call" span came

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    span = Span(
                        s.name,
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        {a.key: _value(a.value) for a in s.attributes},
                        str(resource.get("service.name")),
                    )
                    with self.lock:
                        self.spans.append(span)
                    if span.name == "call":
                        self.call_ended.set()

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.requests.append(f"{self.path} {self.headers.get('content-type')}")
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            receiver.take(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    return Handler


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[str, Receiver]]:
    found = Receiver()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", found
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def traced_server(
    tmp_path_factory: pytest.TempPathFactory, receiver: tuple[str, Receiver]
) -> Iterator[RunningServer]:
    url, _ = receiver
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "200"}
    server = start_server(tmp_path_factory.mktemp("traced"), env=env)
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def tree(spans: list[Span]) -> str:
    """The spans as an indented tree, each with its duration and key attributes."""
    children: dict[str, list[Span]] = {}
    for span in spans:
        children.setdefault(span.parent_id, []).append(span)
    keys = (
        "voxpipe.call_id", "voxpipe.session_id", "voxpipe.transport", "voxpipe.call.end",
        "voxpipe.call.turns", "voxpipe.turn.preempted", "voxpipe.filler",
        "voxpipe.turn_id", "voxpipe.turn.status", "voxpipe.turn.interrupted",
        "voxpipe.turn.voice_to_voice_ms", "gen_ai.system", "gen_ai.request.model",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "voxpipe.llm.ttft_ms",
        "voxpipe.llm.prefill_tokens", "voxpipe.llm.reused_tokens", "voxpipe.tts.clause",
        "voxpipe.tts.first_chunk_ms", "voxpipe.queue_ms", "voxpipe.compute_ms",
    )  # fmt: skip
    lines: list[str] = []

    def walk(span: Span, depth: int, origin: int) -> None:
        shown = ", ".join(f"{k}={span.attributes[k]}" for k in keys if k in span.attributes)
        at = (span.start_ns - origin) / 1e6
        lines.append(f"{'  ' * depth}{span.name}  +{at:.1f} ms  {span.ms:.1f} ms  {shown}")
        for child in sorted(children.get(span.span_id, []), key=lambda s: s.start_ns):
            walk(child, depth + 1, origin)

    for root in children.get("", []):
        lines.append(f"trace {root.trace_id} (service {root.service})")
        walk(root, 0, root.start_ns)
    return "\n".join(lines)


async def test_one_spoken_turn_is_exported_as_the_calls_span_tree(
    traced_server: RunningServer, receiver: tuple[str, Receiver]
) -> None:
    _, found = receiver
    clip = librivox_clips()[1]  # "he was not an ill disposed young man": one turn
    async with NativeClient(traced_server.ws) as client:
        await client.connect()
        turn = await client.speak(*read_wav(clip.path), timeout_s=90)
        assert turn.status == "completed", client.errors
        session_id = client.session_id
    # The call's span closes with the session; the batch goes out within 200 ms.
    assert await asyncio.to_thread(found.call_ended.wait, 30), found.requests

    (call,) = found.named("call")
    assert found.requests and all(r.startswith("/v1/traces") for r in found.requests)
    assert call.service == "voxpipe" and call.parent_id == ""
    assert call.attributes["voxpipe.session_id"] == session_id
    assert call.attributes["voxpipe.transport"] == "native"
    assert call.attributes["voxpipe.call_id"] and call.attributes["voxpipe.call.end"]
    spans = [s for s in found.spans if s.trace_id == call.trace_id]
    assert len(spans) == len(found.spans), "every span is of the one call"
    turns = [s for s in spans if s.name == "turn"]
    assert len(turns) == call.attributes["voxpipe.call.turns"]
    assert all(t.parent_id == call.span_id for t in turns)
    (turn_span,) = [t for t in turns if t.attributes["voxpipe.turn_id"] == turn.turn_id]
    assert turn_span.attributes["voxpipe.turn.status"] == "completed"
    assert turn_span.attributes["voxpipe.turn.interrupted"] is False
    stages = [s for s in spans if s.parent_id == turn_span.span_id]
    assert {s.name for s in stages} == set(STAGES)
    assert all(s.parent_id in {t.span_id for t in turns} for s in spans if s.name in STAGES)
    for stage in stages:
        assert turn_span.start_ns <= stage.start_ns <= stage.end_ns <= turn_span.end_ns, stage
    (llm,) = [s for s in stages if s.name == "llm"]
    assert llm.attributes["gen_ai.system"] == "llama.cpp"
    assert llm.attributes["gen_ai.request.model"].endswith(".gguf")
    assert llm.attributes["gen_ai.usage.input_tokens"] > 0
    assert llm.attributes["gen_ai.usage.output_tokens"] > 0
    assert llm.attributes["voxpipe.llm.ttft_ms"] > 0
    for stage in (s for s in stages if s.name in ("stt", "llm", "tts")):
        assert stage.attributes["voxpipe.compute_ms"] > 0, stage
        assert stage.attributes["voxpipe.queue_ms"] >= 0, stage
    # The trace and the turn's own record (turn.metrics) tell the same times.
    marks = turn.metrics["stages_ms"]  # from the caller's last word
    (eot,) = [s for s in stages if s.name == "end_of_turn"]
    assert eot.start_ns == turn_span.start_ns and abs(eot.ms - marks["eot"]) < 0.01
    assert abs((turn_span.end_ns - turn_span.start_ns) / 1e6 - marks["response_done"]) < 0.01
    v2v = turn.metrics["voice_to_voice_ms"]
    assert turn_span.attributes["voxpipe.turn.voice_to_voice_ms"] == v2v
    # Off by default: no word of either side in any span.
    said = {w for w in (clip.text + " " + turn.metrics["reply"]).lower().split() if len(w) > 4}
    values = " ".join(str(v) for s in spans for v in s.attributes.values()).lower()
    assert said and not [w for w in said if w in values]

    shown = tree(spans)
    print("\n" + shown)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "trace.txt").write_text(shown + "\n")
