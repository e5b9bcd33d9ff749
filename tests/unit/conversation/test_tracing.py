"""A call's trace on fake engines: the span tree, its parentage and attributes, what the
remote LLM is told, what stays out of spans, and that per-frame work never touches tracing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from voxpipe.observability.tracing import (
    Attributes,
    CallTrace,
    OtelTracing,
    StageTrace,
    Tracing,
    TurnTrace,
)

MODEL = {"gen_ai.system": "fake", "gen_ai.request.model": "fake-llm"}
STAGES = {"end_of_turn", "stt", "llm", "tts", "playout"}


def otel(content: bool = False) -> tuple[OtelTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return OtelTracing("voxpipe", "w1", content=content, model=MODEL, exporter=exporter), exporter


async def traced_call(
    make_call: Callable[..., Call], tracing: Tracing, exporter: InMemorySpanExporter
) -> tuple[Call, list[ReadableSpan]]:
    """One answered turn, the call closed, its spans exported."""
    llm = FakeLlm(["It is", " noon", "."])
    call = make_call(stt=FakeStt("what time is it"), llm=llm, tracing=tracing)
    await call.say()
    await call.until(lambda: call.done(1) is not None)
    await call.session.close()
    tracing.shutdown()
    return call, list(exporter.get_finished_spans())


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    assert span.attributes is not None
    return dict(span.attributes)


async def test_a_call_is_one_trace_call_turn_stages(make_call: Callable[..., Call]) -> None:
    tracing, exporter = otel()
    call, spans = await traced_call(make_call, tracing, exporter)

    (root,) = named(spans, "call")
    (turn,) = named(spans, "turn")
    assert {s.name for s in spans} == {"call", "turn"} | STAGES
    assert root.parent is None and root.context is not None and turn.context is not None
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    assert turn.parent is not None and turn.parent.span_id == root.context.span_id
    for span in spans:
        if span.name in STAGES:
            assert span.parent is not None and span.parent.span_id == turn.context.span_id
            assert span.start_time is not None and span.end_time is not None
            assert turn.start_time is not None and turn.end_time is not None
            assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time

    assert attrs(root)["voxpipe.call_id"] == call.session.record.call_id
    assert attrs(root)["voxpipe.session_id"] == "call-1"
    assert attrs(root)["voxpipe.call.end"] == "hangup" and attrs(root)["voxpipe.call.turns"] == 1
    assert attrs(turn)["voxpipe.turn_id"] == 1
    assert attrs(turn)["voxpipe.turn.status"] == "completed"
    assert attrs(turn)["voxpipe.turn.interrupted"] is False
    assert attrs(turn)["voxpipe.turn.voice_to_voice_ms"] > 0
    (eot,) = named(spans, "end_of_turn")
    assert eot.start_time == turn.start_time  # the turn counts from the caller's last word
    (playout,) = named(spans, "playout")
    assert playout.end_time == turn.end_time

    (llm,) = named(spans, "llm")
    gen_ai = attrs(llm)
    assert gen_ai["gen_ai.system"] == "fake" and gen_ai["gen_ai.request.model"] == "fake-llm"
    assert gen_ai["gen_ai.usage.output_tokens"] == 3 and gen_ai["gen_ai.usage.input_tokens"] > 0
    assert gen_ai["gen_ai.response.finish_reasons"] == ("stop",)
    assert gen_ai["voxpipe.llm.ttft_ms"] >= 0 and "voxpipe.llm.prefill_tokens" in gen_ai
    for stage in ("stt", "llm", "tts"):
        for span in named(spans, stage):  # queue wait apart from compute
            assert {"voxpipe.queue_ms", "voxpipe.compute_ms"} <= set(attrs(span))
    assert [attrs(s)["voxpipe.tts.clause"] for s in named(spans, "tts")] == [1]


async def test_the_llm_request_carries_the_llm_spans_traceparent(
    make_call: Callable[..., Call],
) -> None:
    tracing, exporter = otel()
    call, spans = await traced_call(make_call, tracing, exporter)
    (llm,) = named(spans, "llm")
    assert llm.context is not None
    (headers,) = call.llm.trace_headers
    version, trace_id, parent_id, flags = headers["traceparent"].split("-")
    assert (version, trace_id) == ("00", f"{llm.context.trace_id:032x}")
    assert parent_id == f"{llm.context.span_id:016x}" and int(flags, 16) & 1  # sampled


async def test_what_was_said_stays_out_of_spans_unless_content_is_on(
    make_call: Callable[..., Call],
) -> None:
    tracing, exporter = otel()
    _, spans = await traced_call(make_call, tracing, exporter)
    values = " ".join(str(v) for s in spans for v in attrs(s).values())
    assert "time is it" not in values and "noon" not in values

    tracing, exporter = otel(content=True)
    _, spans = await traced_call(make_call, tracing, exporter)
    (turn,) = named(spans, "turn")
    assert attrs(turn)["voxpipe.turn.transcript"] == "what time is it"
    assert attrs(turn)["voxpipe.turn.reply"] == "It is noon."


async def test_a_barge_in_marks_its_turn_interrupted(make_call: Callable[..., Call]) -> None:
    tracing, exporter = otel()
    reply = [f"{' ' if i else ''}Number {i} is here." for i in range(100)]
    call = make_call(
        stt=FakeStt("tell me everything", "stop"),
        llm=FakeLlm(reply, ["Okay", "."], delay_s=0.005),
        tts=FakeTts(delay_s=0.005),
        tracing=tracing,
    )
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 12)
    await call.push(speech(12))  # past min_interruption_ms: a barge-in
    await call.until(lambda: call.done(1) is not None)
    await call.session.close()
    tracing.shutdown()

    turns = {
        attrs(s)["voxpipe.turn_id"]: attrs(s) for s in named(exporter.get_finished_spans(), "turn")
    }
    assert turns[1]["voxpipe.turn.status"] == "interrupted"
    assert turns[1]["voxpipe.turn.interrupted"] is True


class CountingTracing(Tracing):
    """Counts every call into tracing, at any depth."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        counting = self

        class Stage(StageTrace):
            def traceparent(self) -> dict[str, str]:
                counting.calls["stage.traceparent"] += 1
                return {}

            def end(self, end_ns: int, attributes: Attributes = {}, failure: object = None) -> None:  # noqa: B006
                counting.calls["stage.end"] += 1

        class Turn(TurnTrace):
            def begin(self, name: str, start_ns: int) -> StageTrace:
                counting.calls["turn.begin"] += 1
                return Stage()

            def stage(self, *args: object, **kwargs: object) -> None:
                counting.calls["turn.stage"] += 1

            def end(self, *args: object, **kwargs: object) -> None:
                counting.calls["turn.end"] += 1

        class Call_(CallTrace):
            def turn(self, turn_id: int, start_ns: int) -> TurnTrace:
                counting.calls["call.turn"] += 1
                return Turn()

            def end(self, attributes: Attributes = {}) -> None:  # noqa: B006
                counting.calls["call.end"] += 1

        self._call = Call_()

    def call(self, call_id: str, session_id: str, transport: str) -> CallTrace:
        self.calls["call"] += 1
        return self._call


async def test_per_frame_work_makes_no_tracing_call(make_call: Callable[..., Call]) -> None:
    tracing = CountingTracing()
    call = make_call(tracing=tracing)
    assert tracing.calls == {"call": 1}  # the call's span, when the session was made
    tracing.calls.clear()
    await call.push(silence(400))  # 12.8 s of silence, 640 frames
    await call.push(speech(150))  # 4.8 s of speech, no turn ended: no reply, no turn span
    assert call.session.counts["preempt_started"] == 0
    assert sum(tracing.calls.values()) == 0

    await call.push(silence(30))  # the turn ends: now a turn is traced
    await call.until(lambda: call.done(1) is not None)
    assert tracing.calls["call.turn"] == 1 and tracing.calls["turn.end"] == 1


def test_off_is_one_shared_no_op_that_makes_no_span() -> None:
    off = Tracing.off()
    assert off is Tracing.off()
    call = off.call("c", "s", "native")
    assert call is off.call("d", "t", "twilio")
    turn = call.turn(1, 0)
    assert turn is call.turn(2, 0)
    stage = turn.begin("llm", 0)
    assert stage is turn.begin("stt", 0) and stage.traceparent() == {}
    assert type(call) is CallTrace and type(turn) is TurnTrace and type(stage) is StageTrace
