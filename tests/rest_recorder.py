"""A local stand-in for a provider's REST API (Twilio's): it records every POST and
answers 200 with a new call SID, so a test can check the request the server made."""

from __future__ import annotations

import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    form: dict[str, list[str]]


class RestRecorder:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                form = urllib.parse.parse_qs(body)
                recorder.requests.append(Recorded(self.path, dict(self.headers), form))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(f'{{"sid": "CA{uuid.uuid4().hex}"}}'.encode())

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

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
