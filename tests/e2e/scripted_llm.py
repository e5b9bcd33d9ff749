"""A scripted OpenAI-compatible ``/chat/completions`` on loopback, for the tests that need a
remote model to misbehave on cue (``test_tool_bad_input.py``): the embedded model writes
calls under a grammar, so only a remote one can write arguments that are not JSON.

On a caller's turn (tools offered, the last message the caller's) it streams, in pieces,
the call ``script`` gives for that turn (the Nth turn is the request with N caller
messages); shown a tool's result it says ``apology`` for an error and ``confirmation``
otherwise; anything else (the warm-up, a prefill) gets a short text. Every request's body
is kept, so a test can read what the model was shown.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ScriptedModel:
    script: Sequence[tuple[str, str]]  # per caller turn: a tool's name, its arguments' text
    apology: str
    confirmation: str
    requests: list[dict[str, Any]] = field(default_factory=list)

    def respond(self, body: dict[str, Any]) -> list[dict[str, Any]] | dict[str, Any]:
        """A JSON body for a plain request, the stream's chunks for a streamed one."""
        self.requests.append(body)
        messages = body.get("messages", [])
        if not body.get("stream"):
            usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
            message = {"role": "assistant", "content": "OK"}
            return {"choices": [{"message": message, "finish_reason": "length"}], "usage": usage}
        last = messages[-1] if messages else {}
        turn = sum(1 for m in messages if m.get("role") == "user") - 1
        if body.get("tools") and last.get("role") == "user" and 0 <= turn < len(self.script):
            return _call_chunks(turn, *self.script[turn])
        if last.get("role") == "tool":
            error = '"error"' in last["content"]
            return _text_chunks(self.apology if error else self.confirmation)
        return _text_chunks("Hello.")

    def shown_result(self, call_id: str) -> str | None:
        """The result of ``call_id`` as a request showed it to the model."""
        for body in self.requests:
            for message in body.get("messages", []):
                if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                    return str(message["content"])
        return None


@contextlib.contextmanager
def serving(model: ScriptedModel) -> Iterator[str]:
    """``model`` on a loopback port; yields its base URL (``.../v1``)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # the stdlib's name for it
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            answer = model.respond(body)
            if isinstance(answer, dict):
                data, kind = json.dumps(answer).encode(), "application/json"
            else:
                events = "".join(f"data: {json.dumps(c)}\n\n" for c in answer)
                data, kind = (events + "data: [DONE]\n\n").encode(), "text/event-stream"
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}/v1"
    finally:
        http.shutdown()
        http.server_close()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
            "finish_reason": finish}]}  # fmt: skip


def _text_chunks(text: str) -> list[dict[str, Any]]:
    words = text.split(" ")
    pieces = [w if i == 0 else f" {w}" for i, w in enumerate(words)]
    return [_chunk({"content": p}) for p in pieces] + [_chunk({}, "stop")]


def _call_chunks(turn: int, name: str, arguments: str) -> list[dict[str, Any]]:
    """The call as servers stream it: the id and name first, the arguments in two pieces."""
    head = {"index": 0, "id": f"call_scripted_{turn}", "type": "function",
            "function": {"name": name, "arguments": ""}}  # fmt: skip
    cut = len(arguments) // 2
    tail = [{"index": 0, "function": {"arguments": p}} for p in (arguments[:cut], arguments[cut:])]
    return (
        [_chunk({"tool_calls": [head]})]
        + [_chunk({"tool_calls": [t]}) for t in tail]
        + [_chunk({}, "tool_calls")]
    )
