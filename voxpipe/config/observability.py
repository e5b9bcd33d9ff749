"""What the server tells the outside about its calls: OpenTelemetry traces."""

from __future__ import annotations

from collections.abc import Mapping

from voxpipe.config.section import Section

# The standard variables that name an OTLP receiver (OpenTelemetry's SDK configuration).
OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SDK_DISABLED_VAR = "OTEL_SDK_DISABLED"


class TracingConfig(Section):
    """OpenTelemetry traces of every call, over OTLP/HTTP (docs/observability.md#traces)."""

    enabled: bool | None = None
    """None: on when an OTLP receiver is named (`endpoint`, or the standard
    OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); true: on (at
    http://localhost:4318 when nothing names a receiver); false: off. OTEL_SDK_DISABLED=true
    turns it off whatever this says. Off costs nothing per frame or per turn."""

    endpoint: str | None = None
    """Base URL of an OTLP/HTTP receiver, e.g. http://collector:4318 (/v1/traces is added);
    overrides the OTEL_EXPORTER_OTLP_* variables. None: they decide."""

    service_name: str = "voxpipe"
    """The spans' service.name (service.instance.id is the worker id)."""

    content: bool = False
    """Put what was said in the spans: the caller's transcript and the reply's text on each turn.
    Off, spans carry timings, counts and ids only; never audio."""

    def active(self, environ: Mapping[str, str]) -> bool:
        """Whether traces are exported, given the process environment."""
        if environ.get(SDK_DISABLED_VAR, "").strip().lower() == "true":
            return False
        if self.enabled is not None:
            return self.enabled
        return self.endpoint is not None or any(environ.get(name) for name in OTLP_ENDPOINT_VARS)
