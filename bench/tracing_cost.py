"""What tracing costs the caller: the same sentences answered with tracing off and on.

``python -m bench caller --tracing-compare --starts N`` starts N fresh servers in turn,
the even ones with tracing off and the odd ones exporting every span over OTLP/HTTP to
:class:`OtlpSink`, a receiver in this process that decodes what it gets (so the export is
real work, as it would be to a collector). Start ``s`` says conversations ``s`` and
``s + 1`` (see ``first_call.py``), so each conversation after the first is said once with
tracing off and once with it on: the comparison pairs those turns, sentence by sentence,
and also gives the plain medians of all turns of each mode.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Row = dict[str, Any]


def traced(start: int) -> bool:
    return start % 2 == 1


class OtlpSink:
    """An OTLP/HTTP trace receiver on loopback that counts the spans it is sent."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        sink = self
        self.spans = 0
        self.requests = 0
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                count = sum(
                    len(scope.spans)
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                )
                with sink._lock:
                    sink.requests += 1
                    sink.spans += count
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _p95(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    return round(statistics.quantiles(values, n=20, method="inclusive")[18], 1)


def tracing_summary(rows: Sequence[Row], spans: int) -> dict[str, Any]:
    """First answer audio with tracing off and on: all turns of each mode, and the turns of
    the same conversation, sentence and transport said both ways."""
    by_mode: dict[bool, list[float]] = {False: [], True: []}
    keyed: dict[tuple[bool, str, int, int], float] = {}
    for row in rows:
        answer = row.get("answer_ms")
        if answer is None:
            continue
        mode = traced(int(row.get("start", 0)))
        by_mode[mode].append(float(answer))
        keyed[(mode, row["transport"], row["conversation"], row["sentence"])] = float(answer)
    pairs = [
        (answer, keyed[(True, *key[1:])])
        for key, answer in keyed.items()
        if not key[0] and (True, *key[1:]) in keyed
    ]
    off_p50, on_p50 = _median(by_mode[False]), _median(by_mode[True])
    paired_off = _median([a for a, _ in pairs])
    paired_on = _median([b for _, b in pairs])
    return {
        "spans_exported": spans,
        "all": {
            "off": {"n": len(by_mode[False]), "p50_ms": off_p50, "p95_ms": _p95(by_mode[False])},
            "on": {"n": len(by_mode[True]), "p50_ms": on_p50, "p95_ms": _p95(by_mode[True])},
            "ratio": round(on_p50 / off_p50, 3) if off_p50 and on_p50 else None,
        },
        "paired": {
            "n": len(pairs),
            "off_p50_ms": paired_off,
            "on_p50_ms": paired_on,
            "ratio": round(paired_on / paired_off, 3) if paired_off and paired_on else None,
        },
    }


def render_tracing(summary: dict[str, Any] | None) -> list[str]:
    if summary is None:
        return []
    every, paired = summary["all"], summary["paired"]
    return [
        "",
        "## Tracing off and on (first answer audio)",
        "",
        "| turns | n off | n on | p50 off | p50 on | p95 off | p95 on | ratio on/off |",
        "|---|---|---|---|---|---|---|---|",
        f"| all | {every['off']['n']} | {every['on']['n']} | {every['off']['p50_ms']} | "
        f"{every['on']['p50_ms']} | {every['off']['p95_ms']} | {every['on']['p95_ms']} | "
        f"{every['ratio']} |",
        f"| the same sentences | {paired['n']} | {paired['n']} | {paired['off_p50_ms']} | "
        f"{paired['on_p50_ms']} | | | {paired['ratio']} |",
        "",
        f"Spans exported over OTLP/HTTP with tracing on: {summary['spans_exported']}.",
    ]
