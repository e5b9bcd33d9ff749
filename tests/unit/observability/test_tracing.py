"""When tracing is on, where it exports, and what a stage's span says when it fails."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from voxpipe.config import DeadlineConfig, TracingConfig
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.timeline import StageTimer, TurnTimeline
from voxpipe.observability.tracing import OtelTracing, Tracing, tracing_for

COLLECTOR = "http://collector:4318"


@pytest.mark.parametrize(
    ("config", "environ", "on"),
    [
        ({}, {}, False),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR}, True),
        ({}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": COLLECTOR + "/v1/traces"}, True),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR, "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"endpoint": COLLECTOR}, {}, True),
        ({"enabled": False}, {"OTEL_EXPORTER_OTLP_ENDPOINT": COLLECTOR}, False),
        ({"enabled": True}, {}, True),
        ({"enabled": True}, {"OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_on_when_a_receiver_is_named_and_the_sdk_not_disabled(
    config: dict[str, object], environ: dict[str, str], on: bool
) -> None:
    assert TracingConfig.model_validate(config).active(environ) is on


def test_off_is_the_shared_no_op() -> None:
    assert tracing_for(TracingConfig(), "w1", environ={}) is Tracing.off()


def test_the_endpoint_is_a_base_url_that_overrides_the_environment() -> None:
    config = TracingConfig(endpoint=COLLECTOR + "/")
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318"}
    tracing = tracing_for(config, "w1", environ=environ)
    try:
        assert isinstance(tracing, OtelTracing)
        assert tracing.endpoint == COLLECTOR + "/v1/traces"
    finally:
        tracing.shutdown()


def stage_spans(error: BaseException) -> dict[str, object]:
    exporter = InMemorySpanExporter()
    tracing = OtelTracing("voxpipe", "w1", exporter=exporter)
    timeline = TurnTimeline(1)
    timeline.mark("speech_end")
    stages = StageTimer(timeline, Metrics(), DeadlineConfig(), tracing.call("c", "s", "native"))

    class Job:
        started_ns = first_item_ns = 0
        queue_s = compute_s = 0.0

    with pytest.raises(type(error)), stages.stt(Job()):
        raise error
    tracing.shutdown()
    (span,) = exporter.get_finished_spans()
    return {"status": span.status.status_code, **(span.attributes or {})}


def test_a_failed_stage_ends_its_span_as_an_error() -> None:
    span = stage_spans(RuntimeError("engine died"))
    assert span["status"] is StatusCode.ERROR and span["error.type"] == "RuntimeError"


def test_a_cancelled_stage_is_not_an_error() -> None:
    span = stage_spans(asyncio.CancelledError())
    assert span["status"] is StatusCode.UNSET and span["voxpipe.cancelled"] is True


def test_off_the_server_never_imports_the_sdks_tracing() -> None:
    """A server with tracing off, a call and a turn on its path: not a module of it loaded."""
    code = (
        "import sys\n"
        "from voxpipe.config import Config\n"
        "from voxpipe.server.app import create_app\n"
        "from voxpipe.server.state import ServerState\n"
        "create_app(Config.load())\n"
        "ServerState(Config.load()).tracing.call('c', 's', 'native').turn(1, 0).begin('llm', 0)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk.trace')))\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
