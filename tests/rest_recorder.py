"""A local stand-in for a provider's REST API (Twilio's, Telnyx's, Plivo's, Vonage's): it
records every request (method, path, headers, body) and answers as :meth:`answer` last
said, by default 200 with the new call's id under each provider's own name, so a test can
check the exact request the server made and how it takes each kind of answer."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: str

    @property
    def form(self) -> dict[str, list[str]]:
        """A form body (Twilio's)."""
        return urllib.parse.parse_qs(self.body)

    @property
    def json(self) -> Any:
        """A JSON body (Telnyx's, Plivo's, Vonage's)."""
        return json.loads(self.body)


def call_ids() -> dict[str, Any]:
    """A new call's id as each provider names it in its answer."""
    return {
        "sid": f"CA{uuid.uuid4().hex}",  # Twilio
        "data": {"call_control_id": f"v3:{uuid.uuid4().hex}"},  # Telnyx
        "request_uuid": str(uuid.uuid4()),  # Plivo
        "uuid": str(uuid.uuid4()),  # Vonage
    }


class RestRecorder:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.status = 200
        self.reply: str | None = None  # None: call_ids()
        self.delay_s = 0.0
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                made = Recorded(self.command, self.path, dict(self.headers), body)
                recorder.requests.append(made)
                time.sleep(recorder.delay_s)
                reply = recorder.reply if recorder.reply is not None else json.dumps(call_ids())
                self.send_response(recorder.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(reply.encode())

            do_POST = do_PUT = _record

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def answer(self, status: int = 200, reply: str | None = None, delay_s: float = 0.0) -> None:
        """How the next requests are answered."""
        self.status, self.reply, self.delay_s = status, reply, delay_s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_port}"

    @contextmanager
    def running(self) -> Iterator[RestRecorder]:
        thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._http.shutdown()
            self._http.server_close()
