"""OpenTelemetry traces of a call: session → turn → its stages, exported over OTLP.

The pipeline already times every stage on the monotonic clock (``TurnTimeline``), so the
stage spans are written after the fact from those marks, with the start and end they
really had: nothing is measured twice and the hot path gains no work. Only the call and
the turn are live spans, because a remote LLM request carries the turn's context
(``traceparent``) while the turn runs.

Off, every method is a no-op on a shared object: no span, no allocation per frame.
Transcript text goes into spans only when ``content`` is switched on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("voxpipe.tracing")

Attributes = Mapping[str, str | int | float | bool]


def _epoch_ns(monotonic_ns: int) -> int:
    """A monotonic timestamp on the wall clock the exporter wants."""
    return monotonic_ns + (time.time_ns() - time.monotonic_ns())


class TurnTrace:
    """One turn's span; its stages are children. The no-op base is what tracing off gives."""

    def stage(
        self, name: str, start_ns: int, end_ns: int, attributes: Attributes | None = None
    ) -> None:
        """A finished stage, from monotonic ``start_ns`` to ``end_ns``."""

    def traceparent(self) -> dict[str, str]:
        """W3C trace-context headers that make a remote call a child of this turn."""
        return {}

    def end(self, end_ns: int | None = None, attributes: Attributes | None = None) -> None:
        """Close the turn (``end_ns`` monotonic; now when None)."""


class CallTrace:
    """One call's span; turns are children."""

    def turn(self, turn_id: int, start_ns: int) -> TurnTrace:
        return NO_TURN

    def end(self, attributes: Attributes | None = None) -> None:
        """Close the call's span."""


NO_TURN = TurnTrace()
NO_CALL = CallTrace()


class Tracing:
    """The server's tracer. :meth:`off` gives one that records nothing."""

    content = False  # transcripts in spans

    def call(self, call_id: str, session_id: str, transport: str) -> CallTrace:
        return NO_CALL

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporter thread."""

    @staticmethod
    def off() -> Tracing:
        return _OFF


_OFF = Tracing()


class _OtelTurn(TurnTrace):
    def __init__(self, tracer: Any, span: Any) -> None:
        from opentelemetry import trace

        self._tracer = tracer
        self._span = span
        self._context = trace.set_span_in_context(span)

    def stage(
        self, name: str, start_ns: int, end_ns: int, attributes: Attributes | None = None
    ) -> None:
        span = self._tracer.start_span(
            name, context=self._context, start_time=_epoch_ns(start_ns), attributes=attributes
        )
        span.end(end_time=_epoch_ns(max(start_ns, end_ns)))

    def traceparent(self) -> dict[str, str]:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        headers: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(headers, context=self._context)
        return headers

    def end(self, end_ns: int | None = None, attributes: Attributes | None = None) -> None:
        if attributes:
            self._span.set_attributes(attributes)
        self._span.end(end_time=None if end_ns is None else _epoch_ns(end_ns))


class _OtelCall(CallTrace):
    def __init__(self, tracer: Any, span: Any) -> None:
        from opentelemetry import trace

        self._tracer = tracer
        self._span = span
        self._context = trace.set_span_in_context(span)

    def turn(self, turn_id: int, start_ns: int) -> TurnTrace:
        span = self._tracer.start_span(
            "turn",
            context=self._context,
            start_time=_epoch_ns(start_ns),
            attributes={"voxpipe.turn_id": turn_id},
        )
        return _OtelTurn(self._tracer, span)

    def end(self, attributes: Attributes | None = None) -> None:
        if attributes:
            self._span.set_attributes(attributes)
        self._span.end()


class OtelTracing(Tracing):
    """Spans batched and exported over OTLP/HTTP on the SDK's own thread."""

    def __init__(
        self,
        service_name: str,
        worker: str,
        endpoint: str | None = None,
        content: bool = False,
        exporter: Any = None,
    ) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.content = content
        resource = Resource.create({"service.name": service_name, "service.instance.id": worker})
        # Our own provider, not the global one: a host application's tracing stays its own.
        self._provider = TracerProvider(resource=resource)
        if exporter is None:
            # No endpoint: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT itself.
            traces = None if endpoint is None else endpoint.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(endpoint=traces)
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("voxpipe")

    def call(self, call_id: str, session_id: str, transport: str) -> CallTrace:
        span = self._tracer.start_span(
            "call",
            attributes={
                "voxpipe.call_id": call_id,
                "voxpipe.session_id": session_id,
                "voxpipe.transport": transport,
            },
        )
        return _OtelCall(self._tracer, span)

    def shutdown(self) -> None:
        self._provider.shutdown()
