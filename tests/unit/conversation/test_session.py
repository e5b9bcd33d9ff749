"""Session orchestration with fake engines: what a call sees, in what order, and cleanup."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.unit.conversation.harness import (
    FRAME,
    Call,
    W,
    assert_causal_stages,
    others_running,
    silence,
    speech,
)
from tests.unit.conversation.tools_support import running
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from voxpipe.agent import tool
from voxpipe.conversation.events import (
    AudioOut,
    ErrorEvent,
    PlaybackClear,
    ResponseDone,
    ResponseTextDelta,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    TranscriptPartial,
    TurnMetrics,
)
from voxpipe.conversation.services import Filler
from voxpipe.observability.timeline import STAGES


def assert_monotonic_stages(metrics: dict[str, Any], complete: bool = True) -> None:
    """Without preemption, the stages come in the order of STAGES."""
    stages = metrics["stages_ms"]
    if complete:
        assert list(stages) == list(STAGES), f"missing: {set(STAGES) - set(stages)}"
    values = list(stages.values())
    assert values == sorted(values), stages
    assert_causal_stages(metrics)


@pytest.mark.parametrize("preempt_ms", [200, None], ids=["preempted", "plain"])
async def test_a_turn_from_speech_to_reply(
    make_call: Callable[..., Call], preempt_ms: int | None
) -> None:
    llm = FakeLlm(["Sure", " thing", ",", " I", " can", " help", "."])
    call = make_call(stt=FakeStt("hello there"), llm=llm, turn={"preempt_ms": preempt_ms})
    await call.push(silence(10))
    await call.say(loud_windows=12, silence_windows=30)
    await call.idle()

    events = [e for e in call.sent if not isinstance(e, AudioOut)]
    assert events[:3] == [
        SpeechStarted(320.0),  # window 10 is the first loud one: 10 * 32 ms
        SpeechStopped(704.0, 1),  # window 21 the last: it ends at 22 * 32 ms
        Transcript(1, "hello there"),
    ]
    deltas = call.of(ResponseTextDelta)
    assert [d.delta for d in deltas] == llm.replies[0]
    assert [type(e) for e in events] == [
        SpeechStarted,
        SpeechStopped,
        Transcript,
        *[ResponseTextDelta] * len(deltas),
        ResponseDone,
        TurnMetrics,
    ]

    # 9 windows of padding, 12 of speech and a 3-window tail went to STT.
    (stt_audio,) = call.stt.calls
    assert stt_audio.shape[0] == (9 + 12 + 3) * W
    assert call.llm.calls[0][-1].content == "hello there"
    assert call.tts.clauses == ["Sure thing,", "I can help."]

    # Two clauses of 100 ms in 20 ms frames, numbered from 1, between transcript and done.
    frames = call.frames(1)
    assert [f.seq for f in frames] == list(range(1, 11))
    assert all(len(f.pcm) == 2 * FRAME for f in frames)
    first_audio = call.index(lambda e: isinstance(e, AudioOut))
    last_audio = max(i for i, e in enumerate(call.sent) if isinstance(e, AudioOut))
    assert call.index(lambda e: isinstance(e, Transcript)) < first_audio
    assert last_audio < call.index(lambda e: isinstance(e, ResponseDone))

    done = call.done(1)
    assert done == ResponseDone(
        1, "completed", "Sure thing, I can help.", 200.0, 1, 10, "", "Sure thing, I can help.",
        answer_seq=1,
    )  # fmt: skip
    (metrics,) = call.of(TurnMetrics)
    assert metrics.turn_id == 1
    assert list(metrics.metrics["stages_ms"]) == list(STAGES)
    if preempt_ms is None:
        assert_monotonic_stages(metrics.metrics)
    else:  # STT and LLM began in the pause, maybe before eot; the audio waited for it
        assert_causal_stages(metrics.metrics)
    assert metrics.metrics["preempted"] is (preempt_ms is not None)
    assert call.session.counts["preempt_used"] == (preempt_ms is not None)
    assert call.session.counts["preempt_wasted"] == 0
    assert metrics.metrics["status"] == "completed"
    assert metrics.metrics["transcript"] == "hello there"
    assert metrics.metrics["first_clause"] == "Sure thing,"
    assert metrics.metrics["llm"]["completion_tokens"] == 7
    assert metrics.metrics["voice_to_voice_ms"] == metrics.metrics["stages_ms"]["first_audio_sent"]
    assert call.session.turns == [metrics.metrics]
    assert call.counted("completed") == 1

    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "hello there"),
        ("assistant", "Sure thing, I can help."),
    ]


async def test_reply_audio_is_resampled_to_the_output_rate(make_call: Callable[..., Call]) -> None:
    tts = FakeTts(sample_rate=22050, samples_per_clause=2205)  # 100 ms per clause
    call = make_call(llm=FakeLlm(["One thing, then", " another."]), tts=tts, output_rate=24000)
    await call.say()
    await call.idle()
    done = call.done(1)
    assert done is not None and done.status == "completed"
    assert done.audio_ms == pytest.approx(200.0, abs=2.0)
    frames = call.frames(1)
    assert all(len(f.pcm) == 2 * 480 for f in frames[:-1])  # 20 ms at 24 kHz
    assert sum(len(f.pcm) for f in frames) / 2 / 24000 == pytest.approx(0.2, abs=0.002)


async def test_sequence_numbers_keep_increasing_across_turns(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(stt=FakeStt("one", "two"))
    await call.say()
    await call.idle()
    await call.say()
    await call.idle()
    seqs = [f.seq for f in call.frames()]
    assert seqs == list(range(1, len(seqs) + 1))
    first, second = call.done(1), call.done(2)
    assert first is not None and second is not None
    assert first.last_seq is not None and second.first_seq == first.last_seq + 1
    # The second prompt holds the whole first exchange.
    assert [m.content for m in call.llm.calls[1][1:]] == ["one", "Hello there.", "two"]


def is_word_prefix(prefix: str, text: str) -> bool:
    words = prefix.split()
    return text.split()[: len(words)] == words


@pytest.mark.parametrize("preempt_ms", [200, None], ids=["preempted", "plain"])
async def test_a_new_user_turn_interrupts_a_long_reply(
    make_call: Callable[..., Call], preempt_ms: int | None
) -> None:
    long_reply = ["word "] * 100
    llm = FakeLlm(long_reply, ["Okay", "."], delay_s=0.01)
    call = make_call(
        stt=FakeStt("tell me a story", "stop"), llm=llm, turn={"preempt_ms": preempt_ms}
    )
    await call.say()
    await call.until(lambda: call.frames(1))
    started = time.monotonic()
    await call.say()  # barge-in
    await call.idle()
    assert time.monotonic() - started < 1.0

    first, second = call.done(1), call.done(2)
    assert first is not None and second is not None
    assert first.status == "interrupted" and first.reason == "the caller spoke over the reply"
    assert first.generated_text and is_word_prefix(first.text, first.generated_text)
    assert first.heard_ms is not None and first.heard_ms <= first.audio_ms
    assert second.status == "completed" and second.text == "Okay."
    assert llm.yielded[0] < len(long_reply)  # the LLM itself stopped, not just its reader
    assert llm.running == 0 and call.tts.running == 0
    assert call.session.counts["interruptions"] == 1

    # The client was told to drop its buffer; no turn-1 audio after that, and turn 1 is over
    # (done + metrics) before turn 2 is answered.
    (clear,) = call.of(PlaybackClear)
    assert clear == PlaybackClear(1, first.last_seq)
    assert all(call.sent.index(f) < call.sent.index(clear) for f in call.frames(1))
    assert call.index(lambda e: e == clear) < call.index(lambda e: e == first)
    assert call.index(lambda e: e == first) < call.index(
        lambda e: isinstance(e, Transcript) and e.turn_id == 2
    )
    seqs = [f.seq for f in call.frames()]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert first.last_seq == call.frames(1)[-1].seq
    (metrics1,) = [m for m in call.of(TurnMetrics) if m.turn_id == 1]
    assert metrics1.metrics["status"] == "interrupted"
    assert metrics1.metrics["reply"] == first.text
    assert_causal_stages(metrics1.metrics)
    assert call.counted("interrupted") == 1 and call.counted("completed") == 1

    # The history keeps what the caller heard of turn 1, not what was generated.
    heard = [("assistant", first.text)] if first.text else []
    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "tell me a story"),
        *heard,
        ("user", "stop"),
        ("assistant", "Okay."),
    ]


async def test_close_during_a_reply_cancels_it_and_leaves_nothing_running(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(["word "] * 200, delay_s=0.005)
    call = make_call(llm=llm)
    await call.say()
    await call.until(lambda: call.frames(1))
    await asyncio.wait_for(call.session.close(), 1.0)

    assert others_running() == []
    assert llm.running == 0 and call.tts.running == 0
    assert llm.yielded[0] < 200
    assert llm.forgotten == ["call-1"]
    assert call.session.turns[-1]["status"] == "cancelled"
    assert call.counted("cancelled") == 1
    # Nothing is sent on a closed call, not even response.done.
    sent = len(call.sent)
    await asyncio.sleep(0.05)
    assert len(call.sent) == sent
    assert call.done(1) is None


async def test_close_when_idle(make_call: Callable[..., Call]) -> None:
    call = make_call()
    await call.session.close()
    assert call.llm.forgotten == ["call-1"] and others_running() == []


async def test_an_empty_transcript_ends_the_turn_without_a_reply(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(stt=FakeStt("  ...  "))
    await call.say()
    await call.idle()
    assert call.of(Transcript) == [Transcript(1, "...")]
    assert call.done(1) == ResponseDone(
        1, "empty", "", 0.0, None, None, "no words in the transcript"
    )
    assert call.of(ResponseTextDelta) == [] and call.frames() == []
    assert call.llm.calls == [] and call.session.history.turns == []
    (metrics,) = call.of(TurnMetrics)
    assert metrics.metrics["status"] == "empty"
    assert call.counted("empty") == 1


async def test_an_stt_failure_is_reported_and_the_call_goes_on(
    make_call: Callable[..., Call], caplog: pytest.LogCaptureFixture
) -> None:
    call = make_call(stt=FakeStt(RuntimeError("decoder exploded"), "are you there"))
    await call.say()
    await call.idle()
    (error,) = call.of(ErrorEvent)
    assert error.code == "turn_failed" and "RuntimeError: decoder exploded" in error.message
    done = call.done(1)
    assert done is not None and done.status == "failed"
    assert call.index(lambda e: e == error) < call.index(lambda e: e == done)
    assert "turn 1 of call-1 failed" in caplog.text

    await call.say()
    await call.idle()
    second = call.done(2)
    assert second is not None and second.status == "completed"
    assert [m.content for m in call.session.history.turns] == ["are you there", "Hello there."]
    assert call.counted("failed") == 1 and call.counted("completed") == 1


async def test_silence_and_short_blips_make_no_turn(make_call: Callable[..., Call]) -> None:
    call = make_call()
    await call.push(silence(40))
    await call.push(np.concatenate([speech(2), silence(20), speech(1), silence(20)]))
    await call.idle()
    assert call.sent == [] and call.stt.calls == []


async def test_updated_turn_config_applies_from_the_next_turn(
    make_call: Callable[..., Call],
) -> None:
    call = make_call()
    call.session.update_turn_config(call.config.turn.model_copy(update={"silence_ms": 96}))
    await call.say(silence_windows=5)  # 3 windows of silence now end the turn
    await call.idle()
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]


# -- known bugs ----------------------------------------------------------------


async def test_speech_stopped_comes_before_the_next_speech_started(
    make_call: Callable[..., Call],
) -> None:
    call = make_call()
    await call.push(speech(12), frame=W)
    await call.push(silence(4), frame=W)
    # One 704 ms frame (the protocol accepts up to 1000 ms): the end of turn 1 and turn 2's start.
    await call.push(np.concatenate([silence(12), speech(10)]), frame=22 * W)
    await call.push(silence(30))
    await call.idle()
    vad = [e for e in call.sent if isinstance(e, SpeechStarted | SpeechStopped)]
    assert [type(e) for e in vad] == [SpeechStarted, SpeechStopped, SpeechStarted, SpeechStopped]


async def test_barge_in_during_the_first_clause_is_prompt(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(
        ["Once", " upon", " a", " time", ",", *[" word"] * 100], ["Okay", "."], delay_s=0.005
    )
    tts = FakeTts(delay_s=2.0)  # the first chunk of audio is far off
    call = make_call(stt=FakeStt("tell me a story", "stop"), llm=llm, tts=tts)
    await call.say()
    await call.until(lambda: tts.running)
    await asyncio.sleep(0.05)  # the LLM thread is now waiting on the gate
    started = time.monotonic()
    await call.say()  # barge-in: turn 1 is cancelled before any of its audio was made
    await call.until(lambda: call.done(1) is not None)
    assert time.monotonic() - started < 0.4


async def test_close_during_stt_waits_for_the_stt_job(make_call: Callable[..., Call]) -> None:
    gate = threading.Event()
    stt = FakeStt("hello", gate=gate)
    call = make_call(stt=stt)
    try:
        await call.say()
        await call.until(lambda: stt.running)
        threading.Timer(0.2, gate.set).start()  # the job can't be interrupted; it ends soon
        await asyncio.wait_for(call.session.close(), 1.0)
        assert not stt.running, "the STT job outlived close()"
        assert others_running() == []
    finally:
        gate.set()


async def test_the_filler_goes_out_in_whole_frames_and_the_answer_follows(
    make_call: Callable[..., Call],
) -> None:
    """A late first token gets the filler; its last frame is padded to a whole 20 ms frame,
    so only the reply's very last frame may be short (a phone gateway plays whole frames)."""
    odd = np.full(FRAME * 7 + 123, 0.2, np.float32)  # not a whole number of frames
    filler = Filler("One moment.", odd, 16000)
    call = make_call(
        llm=FakeLlm(["Sure", ", here", " it is."], delay_s=0.15),
        filler=filler,
        deadlines={"llm_first_token_ms": 50},
    )
    await call.say()
    await call.until(lambda: call.done(1))
    frames = call.frames(1)
    metrics = call.of(TurnMetrics, 1)[0]
    assert "filler_sent" in metrics.metrics["stages_ms"], metrics.metrics
    assert len(frames) > 8  # the filler's 8 frames, then the answer
    done = call.done(1)
    assert done is not None and done.first_seq == 1 and done.answer_seq == 9  # after them
    assert all(len(f.pcm) == 2 * FRAME for f in frames[:-1]), [len(f.pcm) for f in frames]
    assert 0 < len(frames[-1].pcm) <= 2 * FRAME
    # The filler's padding is silence, and the answer comes after it.
    assert frames[7].pcm[2 * 123 :] == bytes(2 * FRAME - 2 * 123)
    assert any(max(abs(v) for v in np.frombuffer(f.pcm, np.int16)) > 0 for f in frames[8:])


@tool(effect="read_only")
async def opening_hours() -> str:
    """When the restaurant is open."""
    return "noon to ten"


@pytest.mark.parametrize(
    ("tools", "delay_s", "filler_due_ms", "missed"),
    [(True, 0.3, 100, False), (True, 0.8, 100, True), (False, 0.3, None, False),
     (False, 0.8, 600, True)],
)  # fmt: skip
async def test_the_filler_is_due_sooner_for_a_reply_that_may_call_a_tool(
    make_call: Callable[..., Call],
    tools: bool,
    delay_s: float,
    filler_due_ms: int | None,
    missed: bool,
) -> None:
    """A reply offered tools waits for the decision on a call before its words, so its
    filler is due at ``filler_ms``; a reply with none gets it at the first token's deadline,
    which counts the miss for both (a first token between the two: a filler, no miss)."""
    filler = Filler("One moment.", np.full(FRAME * 3, 0.2, np.float32), 16000)
    call = make_call(
        llm=FakeLlm(["Here it is."], delay_s=delay_s), filler=filler,
        deadlines={"filler_ms": 100, "llm_first_token_ms": 600},
        agent=running(opening_hours) if tools else None,
    )  # fmt: skip
    await call.say()
    await call.until(lambda: call.done(1))
    record = call.of(TurnMetrics, 1)[0].metrics
    stages = record["stages_ms"]
    if filler_due_ms is None:
        assert "filler_sent" not in stages, stages
    else:
        assert filler_due_ms <= stages["filler_sent"] < filler_due_ms + 200, stages
        assert stages["filler_sent"] < stages["first_audio_sent"], stages
    assert ("llm_first_token" in record.get("deadline_misses", [])) is missed, record


@pytest.mark.parametrize(("words", "filler_due_ms"), [("okay, goodbye", 600), ("hello", 100)])
async def test_a_goodbye_gets_no_early_filler(
    make_call: Callable[..., Call], words: str, filler_due_ms: int
) -> None:
    """ "One moment." is no answer to a goodbye: a caller who takes their leave gets the
    filler only at the first token's deadline, even from an agent with tools."""
    filler = Filler("One moment.", np.full(FRAME * 3, 0.2, np.float32), 16000)
    call = make_call(
        stt=FakeStt(words), llm=FakeLlm(["Goodbye!"], delay_s=0.8), filler=filler,
        deadlines={"filler_ms": 100, "llm_first_token_ms": 600}, agent=running(opening_hours),
    )  # fmt: skip
    await call.say()
    await call.until(lambda: call.done(1))
    stages = call.of(TurnMetrics, 1)[0].metrics["stages_ms"]
    assert filler_due_ms <= stages["filler_sent"] < filler_due_ms + 200, stages


async def test_no_filler_when_the_answer_is_on_its_way_in_time(
    make_call: Callable[..., Call],
) -> None:
    filler = Filler("One moment.", np.full(FRAME * 3, 0.2, np.float32), 16000)
    call = make_call(llm=FakeLlm(["Here it is."], delay_s=0.05), filler=filler,
                     deadlines={"filler_ms": 400})  # fmt: skip
    await call.say()
    await call.until(lambda: call.done(1))
    record = call.of(TurnMetrics, 1)[0].metrics
    assert "filler_sent" not in record["stages_ms"] and "filler" not in record, record


async def test_partial_transcripts_arrive_while_the_caller_speaks(
    make_call: Callable[..., Call],
) -> None:
    stt = FakeStt("book a", "book a table", "book a table for two")
    call = make_call(stt=stt, stt_config={"partial_interval_ms": 300})
    await call.push(speech(50))  # 1.6 s of speech, no pause: partials at 0.3, 0.6, ... s
    await call.until(lambda: len(call.of(TranscriptPartial)) >= 2)
    await call.push(silence(30))
    await call.until(lambda: call.done(1))
    partials = call.of(TranscriptPartial)
    assert [p.turn_id for p in partials] == [1] * len(partials)
    assert [p.text for p in partials[:2]] == ["book a", "book a table"]
    # Before the end of the turn, and each on the audio heard so far (growing).
    stopped = call.index(lambda e: isinstance(e, SpeechStopped))
    assert call.index(lambda e: isinstance(e, TranscriptPartial)) < stopped
    sizes = [a.shape[0] for a in stt.calls]
    assert sizes[:2] == sorted(sizes[:2]) and sizes[0] < sizes[-1]
    record = call.of(TurnMetrics, 1)[0].metrics
    assert record["partials"]["count"] == len(partials) and record["partials"]["first_ms"] > 0
    # The final transcript is made from the whole turn.
    assert call.of(Transcript, 1)[0].text == stt.script[min(len(stt.calls), 3) - 1]


async def test_a_partial_waits_for_a_busy_stt_and_none_come_when_off(
    make_call: Callable[..., Call],
) -> None:
    gate = threading.Event()
    stt = FakeStt("first", gate=gate)
    call = make_call(stt=stt, stt_config={"partial_interval_ms": 100})
    await call.push(speech(10))
    await call.until(lambda: stt.running)  # a partial holds the engine
    await call.push(speech(20))  # partials fall due meanwhile: none starts beside it
    assert len(stt.calls) == 1
    gate.set()
    await call.push(silence(30))
    await call.until(lambda: call.done(1))

    quiet = make_call(stt=FakeStt("hello"))  # partial_interval_ms 0
    await quiet.push(speech(60))
    await quiet.push(silence(30))
    await quiet.until(lambda: quiet.done(1))
    assert quiet.of(TranscriptPartial) == []


async def test_the_first_phrase_and_the_tokens_it_waited_for_are_recorded(
    make_call: Callable[..., Call],
) -> None:
    words = ["The", " restaurant", " opens", " every", " morning", " at", " nine", "."]
    call = make_call(llm=FakeLlm(words))
    await call.say()
    await call.until(lambda: call.done(1))
    record = call.of(TurnMetrics, 1)[0].metrics
    assert record["first_clause"] == "The restaurant opens"
    assert record["first_clause_tokens"] == 4  # released as the fourth token began a new word
