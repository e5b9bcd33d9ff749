"""The remote LLM engine against a small real HTTP server that streams SSE like an
OpenAI-compatible one, and misbehaves on request. (The e2e test runs it against
llama-cpp-python's real server.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.unit.engines.test_openai_tools import BOOK, HOURS, chunk, fragment
from voxpipe.config import LlmConfig, RemoteLlmConfig
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    LlmRequest,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
)
from voxpipe.engines.openai_llm import OpenAiCompatibleLlm, _offered

MESSAGES = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hello?")]


@dataclass
class Seen:
    port: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Script:
    """What the server does with each request, in order (the last one repeats)."""

    steps: list[tuple[str, Any]] = field(default_factory=lambda: [("ok", ["Hi", " there", "."])])
    seen: list[Seen] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)

    def next(self) -> tuple[str, Any]:
        return self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def log_message(self, *args: object) -> None:
            pass

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _event(self, payload: object) -> None:
            self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

        def _delta(self, text: str, finish: str | None = None) -> None:
            self._event({"choices": [{"delta": {"content": text}, "finish_reason": finish}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            script.seen.append(Seen(self.client_address[1], dict(self.headers), body))
            kind, arg = script.next()
            if kind == "status":
                payload = json.dumps({"error": "busy"}).encode()
                self.send_response(arg)
                self.send_header("content-length", str(len(payload)))
                self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(payload)
                return
            if not body.get("stream"):
                usage = {"prompt_tokens": 40, "completion_tokens": 1}
                usage["prompt_tokens_details"] = {"cached_tokens": 30}  # type: ignore[assignment]
                payload = json.dumps({"choices": [], "usage": usage}).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            if kind == "slow":
                time.sleep(arg)
                kind, arg = "ok", ["late"]
            if kind == "ok":
                for text in arg:
                    self._delta(text)
                self._event({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            elif kind == "chunks":  # raw chunk payloads, e.g. tool-call deltas
                for payload in arg:
                    self._event(payload)
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            elif kind == "die_after":
                for text in arg:
                    self._delta(text)
                self.close_connection = True
                self.connection.shutdown(2)
            elif kind == "endless":
                try:
                    for i in range(10_000):
                        self._delta(f" w{i}")
                        time.sleep(0.01)
                except (BrokenPipeError, ConnectionResetError):
                    script.disconnected.set()
                    self.close_connection = True

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def engine(url: str, **remote: Any) -> OpenAiCompatibleLlm:
    return OpenAiCompatibleLlm(
        RemoteLlmConfig(base_url=url, model="m1", **remote), LlmConfig(max_tokens=33)
    )


def test_a_reply_streams_and_carries_the_session_key(server: tuple[str, Script]) -> None:
    url, script = server
    llm = engine(url, extra_body={"cache_prompt": True}, api_key="k")
    usage = LlmUsage()
    assert list(llm.stream("call-7", MESSAGES, CancelToken(), usage)) == ["Hi", " there", "."]
    assert (usage.prompt_tokens, usage.completion_tokens) == (12, 3)
    seen = script.seen[0]
    assert seen.body["user"] == "call-7" and seen.headers["x-session-id"] == "call-7"
    assert seen.body["cache_prompt"] is True and seen.body["model"] == "m1"
    assert seen.body["max_tokens"] == 33 and seen.body["stream"] is True
    assert seen.body["messages"][1] == {"role": "user", "content": "Hello?"}
    assert seen.headers["authorization"] == "Bearer k"


def test_a_reply_carries_its_trace_context(server: tuple[str, Script]) -> None:
    """The LLM stage's ``traceparent``: the server's spans join the call's trace."""
    url, script = server
    traceparent = "00-5a635e2d7363593fc621eaed0fbb78f8-4b889533abb9533e-01"
    llm = engine(url)
    deltas = llm.stream(
        "call-7", MESSAGES, CancelToken(), LlmUsage(), trace_headers={"traceparent": traceparent}
    )
    assert "".join(deltas) == "Hi there."
    assert "".join(llm.stream("call-7", MESSAGES, CancelToken(), LlmUsage())) == "Hi there."
    traced, untraced = script.seen
    assert traced.headers["traceparent"] == traceparent
    assert traced.headers["x-session-id"] == "call-7"  # beside the session header
    assert "traceparent" not in untraced.headers


def test_requests_reuse_one_connection(server: tuple[str, Script]) -> None:
    url, script = server
    llm = engine(url)
    for _ in range(3):
        assert "".join(llm.stream("s", MESSAGES, CancelToken(), LlmUsage())) == "Hi there."
    assert len({seen.port for seen in script.seen}) == 1


def test_a_cancel_mid_stream_closes_it_upstream(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [("endless", None)]
    llm = engine(url)
    cancel, usage, got = CancelToken(), LlmUsage(), []
    for delta in llm.stream("s", MESSAGES, cancel, usage):
        got.append(delta)
        if len(got) == 3:
            threading.Thread(target=cancel.cancel).start()  # as a barge-in does, from elsewhere
    assert usage.finish_reason == "cancelled" and 3 <= len(got) < 100
    assert script.disconnected.wait(5), "the server kept streaming to a cancelled request"


def test_a_busy_server_is_retried_before_any_token(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [("status", 503), ("status", 429), ("ok", ["fine"])]
    usage = LlmUsage()
    assert list(engine(url, retries=2).stream("s", MESSAGES, CancelToken(), usage)) == ["fine"]
    assert usage.extra["retries"] == 2 and len(script.seen) == 3


def test_retries_give_up_with_the_status(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [("status", 503)]
    with pytest.raises(EngineError, match="503"):
        list(engine(url, retries=1).stream("s", MESSAGES, CancelToken(), LlmUsage()))
    assert len(script.seen) == 2


def test_a_client_error_is_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [("status", 400)]
    with pytest.raises(EngineError, match=r"400.*busy"):
        list(engine(url).stream("s", MESSAGES, CancelToken(), LlmUsage()))
    assert len(script.seen) == 1


def test_a_stream_that_breaks_after_a_token_fails_the_turn_without_a_resend(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.steps = [("die_after", ["One", " two"])]
    got: list[str] = []
    with pytest.raises(EngineError, match="failed"):
        for delta in engine(url).stream("s", MESSAGES, CancelToken(), LlmUsage()):
            got.append(delta)
    assert got == ["One", " two"] and len(script.seen) == 1


def test_a_silent_server_times_out_instead_of_hanging(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [("slow", 1.0)]
    with pytest.raises(EngineError, match="read_timeout_s"):
        list(engine(url, read_timeout_s=0.2).stream("s", MESSAGES, CancelToken(), LlmUsage()))


def test_an_unreachable_server_is_an_engine_error() -> None:
    llm = engine("http://127.0.0.1:9/v1", retries=0)
    with pytest.raises(EngineError, match="unreachable"):
        llm.warmup()


def test_prefill_asks_for_one_token_and_reads_the_cache_hit(server: tuple[str, Script]) -> None:
    url, script = server
    usage = prefill(engine(url))
    assert script.seen[0].body["max_tokens"] == 1 and not script.seen[0].body["stream"]
    assert (usage.prompt_tokens, usage.reused_tokens, usage.prefill_tokens) == (40, 30, 10)
    assert prefill(engine(url, prefill=False)) == LlmUsage()
    assert len(script.seen) == 1


def prefill(llm: OpenAiCompatibleLlm, tools: tuple[ToolSpec, ...] = ()) -> LlmUsage:
    usage = LlmUsage()
    llm.prefill(LlmRequest("s", MESSAGES, CancelToken(), usage, tools))
    return usage


def test_every_refusal_is_reported_retried_or_not(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [("status", 503), ("status", 429), ("ok", ["fine"])]
    refused: list[str] = []
    llm = OpenAiCompatibleLlm(
        RemoteLlmConfig(base_url=url, model="m1", retries=2), LlmConfig(), refused.append
    )
    assert list(llm.stream("s", MESSAGES, CancelToken(), LlmUsage())) == ["fine"]
    assert refused == ["503", "429"]
    script.steps = [("status", 400)]
    with pytest.raises(EngineError):
        list(llm.stream("s", MESSAGES, CancelToken(), LlmUsage()))
    assert refused == ["503", "429", "400"]


def test_an_unreachable_server_is_reported_as_a_refusal() -> None:
    refused: list[str] = []
    llm = OpenAiCompatibleLlm(
        RemoteLlmConfig(base_url="http://127.0.0.1:9/v1", model="m1", retries=0),
        LlmConfig(),
        refused.append,
    )
    with pytest.raises(EngineError, match="unreachable"):
        llm.warmup()
    assert refused == ["unreachable"]


def test_tools_are_offered_and_streamed_calls_come_back(server: tuple[str, Script]) -> None:
    url, script = server
    script.steps = [
        (
            "chunks",
            [
                {"choices": [{"delta": {"role": "assistant", "content": None}}]},
                chunk(fragment(0, "", "call_x", "book_table")),
                chunk(fragment(0, '{"name": "Smith",')),
                chunk(fragment(0, ' "party_size": 2}')),
                {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
                {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 9}},
            ],
        )
    ]
    call = ToolCallRequest("call_0", "opening_hours", {}, "{}")
    history = [
        *MESSAGES,
        ChatMessage("assistant", "", (call,)),
        ChatMessage("tool", '"12:00-22:00"', tool_call_id="call_0"),
        ChatMessage("user", "Book for two, Smith."),
    ]
    usage = LlmUsage()
    items = list(engine(url).stream("s", history, CancelToken(), usage, tools=[BOOK, HOURS]))
    body = script.seen[0].body
    assert body["tools"] == [BOOK.openai(), HOURS.openai()] and body["tool_choice"] == "auto"
    assert body["messages"][2]["tool_calls"][0]["id"] == "call_0"
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": '"12:00-22:00"',
    }
    assert [i for i in items if isinstance(i, ToolCallDelta)] == [
        ToolCallDelta("call_x", "book_table", '{"name": "Smith",'),
        ToolCallDelta("call_x", "book_table", ' "party_size": 2}'),
    ]
    assert items[-1] == ToolCallRequest(
        "call_x", "book_table", {"name": "Smith", "party_size": 2},
        '{"name": "Smith", "party_size": 2}',
    )  # fmt: skip
    assert usage.finish_reason == "tool_calls" and "ttft_s" in usage.extra


def test_without_tools_the_request_and_the_stream_are_as_before(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.steps = [("chunks", [chunk(fragment(0, "{}", "c", "x")), {"choices": [
        {"delta": {"content": "Hi"}, "finish_reason": "stop"}]}])]  # fmt: skip
    assert list(engine(url).stream("s", MESSAGES, CancelToken(), LlmUsage())) == ["Hi"]
    assert "tools" not in script.seen[0].body and "tool_choice" not in script.seen[0].body
    assert json.dumps(script.seen[0].body["messages"]) == json.dumps(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}]
    )


def test_prefill_offers_the_tools_the_next_request_will(server: tuple[str, Script]) -> None:
    url, script = server
    prefill(engine(url), (BOOK,))
    prefill(engine(url))
    assert script.seen[0].body["tools"] == [BOOK.openai()]
    assert "tools" not in script.seen[1].body


def test_the_tool_choice_goes_with_the_tools() -> None:
    assert _offered((BOOK,), "none")["tool_choice"] == "none"
    assert _offered((BOOK,), "required")["tool_choice"] == "required"
    assert _offered((BOOK, HOURS), "book_table")["tool_choice"] == {
        "type": "function",
        "function": {"name": "book_table"},
    }
    assert _offered((), "none") == {}
