"""The tracing comparison of ``python -m bench caller --tracing-compare``."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from bench.tracing_cost import OtlpSink, traced, tracing_summary


def row(start: int, conversation: int, sentence: int, answer: float | None) -> dict:
    return {
        "start": start,
        "transport": "twilio",
        "conversation": conversation,
        "sentence": sentence,
        "answer_ms": answer,
    }


def test_odd_starts_are_traced() -> None:
    assert [traced(s) for s in range(4)] == [False, True, False, True]


def test_the_same_sentences_are_paired_across_modes() -> None:
    rows = [
        row(0, 0, 0, 500.0),  # conversation 0 is only said untraced
        row(0, 1, 0, 400.0),
        row(0, 1, 1, 600.0),
        row(1, 1, 0, 440.0),  # conversation 1 again, traced
        row(1, 1, 1, 660.0),
        row(1, 2, 0, 300.0),
        row(1, 2, 1, None),  # not answered: left out
    ]
    summary = tracing_summary(rows, spans=42)
    assert summary["spans_exported"] == 42
    assert summary["paired"] == {"n": 2, "off_p50_ms": 500.0, "on_p50_ms": 550.0, "ratio": 1.1}
    assert summary["all"]["off"]["n"] == 3 and summary["all"]["on"]["n"] == 3
    assert summary["all"]["off"]["p50_ms"] == 500.0 and summary["all"]["on"]["p50_ms"] == 440.0


def test_the_sink_decodes_and_counts_exported_spans() -> None:
    sink = OtlpSink()
    try:
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=sink.url + "/v1/traces"))
        )
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("call"), tracer.start_as_current_span("turn"):
            pass
        provider.shutdown()
        assert sink.spans == 2 and sink.requests == 2
    finally:
        sink.close()
