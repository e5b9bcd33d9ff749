"""OpenTelemetry traces of a call: call → turn → its stages, exported over OTLP/HTTP.

The tree, per call (``docs/observability.md#traces``)::

    call                      the session, from its making to its close
      turn                    one reply, from the end of the caller's speech to the reply's end
        end_of_turn           speech end → end of turn decided (written from the marks)
        stt                   the transcription (live)
        llm                   the request, first token to last (live: a remote LLM gets its
                              ``traceparent``, so the server's own spans hang under it)
        tts                   one per clause (live)
        playout               first audio sent → the reply's end (written from the marks)

Only the call, the turn and the engine stages are live spans; the others are written after
the fact from the turn's monotonic marks (``TurnTimeline``), with the start and end they
really had, so nothing is measured twice and the hot path gains no work. Per-frame code
(the caller's audio, the VAD, the pacing of reply frames) never reaches this module.

Off, every method is a no-op on a shared object: no span, no allocation, and the SDK's
tracing is not even imported. Transcript and reply text go into spans only when ``content`` is on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from voxpipe.config import TracingConfig

log = logging.getLogger("voxpipe.tracing")

AttributeValue = str | int | float | bool | Sequence[str]
Attributes = Mapping[str, AttributeValue]

_NONE: Attributes = MappingProxyType({})


class StageTrace:
    """A stage's span while it runs. The no-op base is what tracing off gives."""

    def traceparent(self) -> dict[str, str]:
        """W3C trace-context headers that make a remote call a child of this stage."""
        return {}

    def end(self, end_ns: int, attributes: Attributes = _NONE, failure: str | None = None) -> None:
        """Close the stage at monotonic ``end_ns``; ``failure`` names the error that
        ended it."""


class TurnTrace:
    """One turn's span; its stages are children."""

    content = False  # transcript and reply text in spans
    model: Attributes = _NONE  # what every llm span says of the model (gen_ai.*)

    def begin(self, name: str, start_ns: int) -> StageTrace:
        """A stage that starts now (``start_ns`` monotonic) and is closed by its owner."""
        return NO_STAGE

    def stage(self, name: str, start_ns: int, end_ns: int, attributes: Attributes = _NONE) -> None:
        """A finished stage, from monotonic ``start_ns`` to ``end_ns``."""

    def end(self, end_ns: int, attributes: Attributes = _NONE) -> None:
        """Close the turn at monotonic ``end_ns``."""


class CallTrace:
    """One call's span; turns are children."""

    def turn(self, turn_id: int, start_ns: int) -> TurnTrace:
        return NO_TURN

    def end(self, attributes: Attributes = _NONE) -> None:
        """Close the call's span (now)."""


NO_STAGE = StageTrace()
NO_TURN = TurnTrace()
NO_CALL = CallTrace()


class Tracing:
    """The server's tracer. :meth:`off` gives the shared one that records nothing."""

    def call(self, call_id: str, session_id: str, transport: str) -> CallTrace:
        return NO_CALL

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporter's thread."""

    @staticmethod
    def off() -> Tracing:
        return _OFF


_OFF = Tracing()


def tracing_for(
    config: TracingConfig,
    worker: str,
    model: Attributes = _NONE,
    environ: Mapping[str, str] = os.environ,
) -> Tracing:
    """The server's tracing as ``config`` and the standard ``OTEL_*`` variables ask;
    ``model`` goes on every llm span."""
    if not config.active(environ):
        return Tracing.off()
    tracing = OtelTracing(
        config.service_name, worker, config.endpoint, content=config.content, model=model
    )
    log.info("traces exported over OTLP/HTTP to %s", tracing.endpoint)
    return tracing


class _OtelStage(StageTrace):
    def __init__(self, span: Any, offset_ns: int) -> None:
        self._span = span
        self._offset_ns = offset_ns

    def traceparent(self) -> dict[str, str]:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        headers: dict[str, str] = {}
        context = trace.set_span_in_context(self._span)
        TraceContextTextMapPropagator().inject(headers, context=context)
        return headers

    def end(self, end_ns: int, attributes: Attributes = _NONE, failure: str | None = None) -> None:
        self._span.set_attributes(attributes)
        if failure is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_attribute("error.type", failure)
            self._span.set_status(Status(StatusCode.ERROR, failure))
        self._span.end(end_time=end_ns + self._offset_ns)


class _OtelTurn(TurnTrace):
    def __init__(self, tracing: OtelTracing, span: Any, offset_ns: int) -> None:
        from opentelemetry import trace

        self._tracer = tracing.tracer
        self._span = span
        self._context = trace.set_span_in_context(span)
        self._offset_ns = offset_ns
        self.content = tracing.content
        self.model = tracing.model

    def begin(self, name: str, start_ns: int) -> StageTrace:
        start = start_ns + self._offset_ns
        span = self._tracer.start_span(name, context=self._context, start_time=start)
        return _OtelStage(span, self._offset_ns)

    def stage(self, name: str, start_ns: int, end_ns: int, attributes: Attributes = _NONE) -> None:
        start = start_ns + self._offset_ns
        span = self._tracer.start_span(
            name, context=self._context, start_time=start, attributes=attributes
        )
        span.end(end_time=max(start_ns, end_ns) + self._offset_ns)

    def end(self, end_ns: int, attributes: Attributes = _NONE) -> None:
        self._span.set_attributes(attributes)
        self._span.end(end_time=end_ns + self._offset_ns)


class _OtelCall(CallTrace):
    def __init__(self, tracing: OtelTracing, span: Any, offset_ns: int) -> None:
        from opentelemetry import trace

        self._tracing = tracing
        self._span = span
        self._context = trace.set_span_in_context(span)
        self._offset_ns = offset_ns

    def turn(self, turn_id: int, start_ns: int) -> TurnTrace:
        span = self._tracing.tracer.start_span(
            "turn",
            context=self._context,
            start_time=start_ns + self._offset_ns,
            attributes={"voxpipe.turn_id": turn_id},
        )
        return _OtelTurn(self._tracing, span, self._offset_ns)

    def end(self, attributes: Attributes = _NONE) -> None:
        self._span.set_attributes(attributes)
        self._span.end(end_time=time.monotonic_ns() + self._offset_ns)


class OtelTracing(Tracing):
    """Spans batched and exported over OTLP/HTTP on the SDK's own thread. ``exporter``
    replaces the OTLP one (tests: the SDK's ``InMemorySpanExporter``)."""

    def __init__(
        self,
        service_name: str,
        worker: str,
        endpoint: str | None = None,
        content: bool = False,
        model: Attributes = _NONE,
        exporter: Any = None,
    ) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.content = content
        self.model = model
        resource = Resource.create({"service.name": service_name, "service.instance.id": worker})
        # Our own provider, not the global one: a host application's tracing stays its own.
        self._provider = TracerProvider(resource=resource)
        if exporter is None:
            # No endpoint: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT itself.
            traces = None if endpoint is None else endpoint.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(endpoint=traces)
        self.endpoint = str(getattr(exporter, "_endpoint", type(exporter).__name__))
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self._provider.get_tracer("voxpipe")

    def call(self, call_id: str, session_id: str, transport: str) -> CallTrace:
        # Monotonic marks become wall-clock times by one offset per call: the call's spans
        # line up to the nanosecond, and a clock step between calls moves no turn.
        offset_ns = time.time_ns() - time.monotonic_ns()
        span = self.tracer.start_span(
            "call",
            start_time=time.monotonic_ns() + offset_ns,
            attributes={
                "voxpipe.call_id": call_id,
                "voxpipe.session_id": session_id,
                "voxpipe.transport": transport,
            },
        )
        return _OtelCall(self, span, offset_ns)

    def shutdown(self) -> None:
        self._provider.shutdown()
