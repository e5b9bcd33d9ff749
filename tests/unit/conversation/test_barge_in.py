"""Turn-taking over a reply: barge-in, backchannels, interrupt off, preemption, playback acks.

The fake engines are fast, so each test lets the reply get as far as it needs (frames sent,
audio synthesized) before pushing the caller's audio, which arrives all at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from tests.support import order_violations
from tests.unit.conversation.harness import Call, W, assert_causal_stages, silence, speech
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.conversation.events import (
    AudioOut,
    PlaybackClear,
    ResponseDone,
    ResponseTextDelta,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    TurnMetrics,
)


def sentences(n: int) -> list[str]:
    """``n`` deltas that the chunker makes ``n`` clauses of (100 ms of fake audio each)."""
    return [f"{' ' if i else ''}Number {i} is here." for i in range(n)]


def is_word_prefix(prefix: str, text: str) -> bool:
    words = prefix.split()
    return text.split()[: len(words)] == words


def metrics_of(call: Call, turn_id: int) -> dict[str, object]:
    (metrics,) = [m for m in call.of(TurnMetrics) if m.turn_id == turn_id]
    return metrics.metrics


async def test_speech_over_a_reply_interrupts_it(make_call: Callable[..., Call]) -> None:
    reply = sentences(100)
    llm = FakeLlm(reply, ["Okay", "."], delay_s=0.005)
    tts = FakeTts(delay_s=0.005)  # 20 ms to make each 100 ms clause
    call = make_call(stt=FakeStt("tell me everything", "stop"), llm=llm, tts=tts)
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 12)  # more than two clauses played

    await call.push(speech(12))  # 384 ms of speech: past min_interruption_ms (250)
    await call.until(lambda: call.done(1) is not None)
    done = call.done(1)
    assert done is not None
    # The LLM and the TTS themselves have stopped, not just their readers.
    assert llm.running == 0 and tts.running == 0
    assert llm.yielded[0] < len(reply) and len(tts.clauses) < len(reply)
    yielded, synthesized = llm.yielded[0], len(tts.clauses)

    (clear,) = call.of(PlaybackClear)
    assert clear == PlaybackClear(1, done.last_seq)
    cleared_at = call.sent.index(clear)
    assert all(call.sent.index(f) < cleared_at for f in call.frames(1))
    assert done.last_seq == call.frames(1)[-1].seq

    assert done.status == "interrupted"
    assert done.generated_text.startswith("Number 0 is here. Number 1 is here.")
    assert done.text and is_word_prefix(done.text, done.generated_text)
    assert len(done.text) < len(done.generated_text)
    assert done.heard_ms is not None and 0 < done.heard_ms <= done.audio_ms
    assert call.session.history.turns[-1].role == "assistant"
    assert call.session.history.turns[-1].content == done.text
    metrics = metrics_of(call, 1)
    assert metrics["reply"] == done.text and metrics["generated"] == done.generated_text
    barge_in = metrics["barge_in"]
    assert isinstance(barge_in, dict)
    # Timed from the arrival of the first speech window, not of the silence before it.
    assert 0 <= barge_in["pause_ms"] <= barge_in["decide_ms"] <= barge_in["cancel_ms"] < 100
    assert call.session.counts["interruptions"] == 1

    await call.push(silence(30))  # the interrupting speech is the caller's next turn
    await call.idle()
    second = call.done(2)
    assert second is not None and second.status == "completed" and second.text == "Okay."
    assert [f.turn_id for f in call.sent[cleared_at:] if isinstance(f, AudioOut)] == [2] * 5
    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "tell me everything"),
        ("assistant", done.text),
        ("user", "stop"),
        ("assistant", "Okay."),
    ]
    assert llm.yielded[0] == yielded  # turn 1's LLM did not go on in the background
    assert len(tts.clauses) == synthesized + 1  # nor its TTS: only "Okay." since


async def test_over_a_stalled_link_the_clear_follows_the_last_frame_and_names_it(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(llm=FakeLlm(sentences(20)))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 3)
    call.audio_flowing.clear()  # the link stalls with a frame in the transport
    await call.until(lambda: call.audio_stalled)
    asyncio.get_running_loop().call_later(0.05, call.audio_flowing.set)
    await call.push(speech(12))
    await call.until(lambda: call.done(1) is not None)

    done = call.done(1)
    assert done is not None and done.status == "interrupted"
    (clear,) = call.of(PlaybackClear)
    last_frame = call.frames(1)[-1]
    assert call.sent.index(last_frame) < call.sent.index(clear)
    assert clear.last_seq == done.last_seq == last_frame.seq


async def test_a_short_burst_over_a_reply_is_a_backchannel(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(sentences(6))
    call = make_call(stt=FakeStt("go on", "uh-huh"), llm=llm)
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 3)

    await call.push(speech(5))  # 160 ms: under min_interruption_ms
    await call.push(silence(30))
    await call.idle()

    done = call.done(1)
    assert done is not None and done.status == "completed"
    assert done.text == done.generated_text == "".join(sentences(6))
    assert done.audio_ms == 600.0 and done.heard_ms is None
    assert call.of(PlaybackClear) == []
    seqs = [f.seq for f in call.frames()]
    assert seqs == list(range(1, 31))
    # The burst is not a turn: no transcript, no reply, no history; its stop has no turn.
    assert call.session.counts["backchannels"] == 1
    assert call.session.counts["interruptions"] == 0
    assert call.of(Transcript) == [Transcript(1, "go on")]
    # Its words were read once, at its first silence: "uh-huh" does not ask for the floor.
    assert len(call.stt.calls) == 2 and len(call.session.turns) == 1
    assert call.session.counts["overlaps_interrupted_by_words"] == 0
    assert [type(e) for e in call.sent if isinstance(e, SpeechStarted | SpeechStopped)] == [
        SpeechStarted,
        SpeechStopped,
        SpeechStarted,
        SpeechStopped,
    ]
    assert [e.turn_id for e in call.of(SpeechStopped)] == [1, 0]
    assert len(call.session.history.turns) == 2
    # It paused the reply, which then went on: no barge-in timings for it.
    assert "barge_in" not in metrics_of(call, 1)
    assert (
        call.metrics.registry.get_sample_value(
            "voxpipe_barge_in_seconds_count", {"phase": "cancel"}
        )
        is None
    )


@pytest.mark.parametrize(("words", "stops"), [("Wait, stop.", True), ("Okay.", False)])
async def test_a_short_burst_that_asks_for_the_floor_interrupts(
    make_call: Callable[..., Call], words: str, stops: bool
) -> None:
    llm = FakeLlm(sentences(6), ["Sure", "."])
    call = make_call(stt=FakeStt("go on", words), llm=llm)
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 3)

    await call.push(speech(5))  # 160 ms: under min_interruption_ms, a pause by duration
    await call.push(silence(30))
    await call.idle()

    done = call.done(1)
    assert done is not None
    assert call.session.counts["overlaps_interrupted_by_words"] == int(stops)
    if not stops:  # a backchannel: the reply went on to its end, and no turn was made
        assert done.status == "completed" and call.done(2) is None
        assert call.session.counts["backchannels"] == 1
        return
    assert done.status == "interrupted" and len(done.text) < len(done.generated_text)
    assert call.session.counts["interruptions"] == 1 and call.session.counts["backchannels"] == 0
    second = call.done(2)
    assert second is not None and second.status == "completed" and second.text == "Sure."
    assert [(m.role, m.content) for m in call.session.history.turns][-2:] == [
        ("user", "Wait, stop."),
        ("assistant", "Sure."),
    ]
    assert len(call.stt.calls) == 2  # the check's transcript is the turn's


@pytest.mark.parametrize("preempt_ms", [200, None], ids=["preempted", "plain"])
async def test_with_interrupt_off_the_reply_plays_out_then_the_turn_is_answered(
    make_call: Callable[..., Call], preempt_ms: int | None
) -> None:
    llm = FakeLlm(sentences(8), ["Okay", "."])
    call = make_call(
        stt=FakeStt("tell me", "and then"),
        llm=llm,
        turn={"interrupt": False, "preempt_ms": preempt_ms},
    )
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 3)
    await call.say()  # a whole turn over the reply
    await call.idle()

    first, second = call.done(1), call.done(2)
    assert first is not None and second is not None
    assert first.status == "completed" and first.audio_ms == 800.0
    assert first.text == first.generated_text and first.heard_ms is None
    assert second.status == "completed" and second.text == "Okay."
    assert call.of(PlaybackClear) == []
    assert call.session.counts["interruptions"] == 0
    assert call.session.counts["backchannels"] == 0
    # Turn 2 is answered only once turn 1 is over, and from a history that holds all of it.
    assert call.index(lambda e: e == first) < call.index(
        lambda e: isinstance(e, Transcript) and e.turn_id == 2
    )
    assert call.index(lambda e: e == first) < call.sent.index(call.frames(2)[0])
    assert [m.content for m in llm.calls[1][1:]] == ["tell me", first.text, "and then"]
    assert [f.seq for f in call.frames()] == list(range(1, len(call.frames()) + 1))
    assert_causal_stages(metrics_of(call, 2))


async def test_speech_resuming_after_a_pause_discards_the_preemptive_reply(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(["Held", " reply", "."], ["Real", " reply", "."])
    call = make_call(
        stt=FakeStt("I want", "I want to book a table"),
        llm=llm,
        turn={"silence_ms": 500, "preempt_ms": 200},
    )
    await call.push(speech(12))
    await call.push(silence(9))  # ~300 ms: preemption starts, the turn does not end
    await call.until(lambda: call.tts.clauses)  # the held reply has made its audio
    assert call.kinds() == ["vad.speech_started"]
    assert call.session.counts["preempt_started"] == 1

    await call.push(speech(12))  # more of the same turn
    await call.push(silence(30))
    await call.idle()

    assert call.session.counts["preempt_wasted"] == 1
    assert call.session.counts["preempt_used"] == 1  # the second pause's, which was the end
    # One turn, answered from all of its audio; nothing of the held reply was ever sent.
    assert [type(e) for e in call.sent if isinstance(e, SpeechStarted | SpeechStopped)] == [
        SpeechStarted,
        SpeechStopped,
    ]
    assert call.of(Transcript) == [Transcript(1, "I want to book a table")]
    assert [d.delta for d in call.of(ResponseTextDelta)] == ["Real", " reply", "."]
    (done,) = call.of(ResponseDone)
    assert done.status == "completed" and done.audio_ms == 100.0
    assert len(call.of(TurnMetrics)) == 1 and len(call.session.turns) == 1
    assert [f.seq for f in call.frames()] == [1, 2, 3, 4, 5]
    assert len(call.stt.calls) == 2 and call.stt.calls[1].shape[0] > call.stt.calls[0].shape[0]
    assert call.counted("completed") == 1 and call.counted("cancelled") is None
    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "I want to book a table"),
        ("assistant", "Real reply."),
    ]
    assert llm.running == 0 and call.tts.running == 0


async def test_a_turn_ending_after_preemption_uses_the_held_reply(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(stt=FakeStt("hello there"), turn={"silence_ms": 500, "preempt_ms": 200})
    await call.push(speech(12))
    await call.push(silence(10))  # 320 ms: past preempt_ms, before silence_ms
    await call.until(lambda: call.tts.clauses)
    # Everything is computed; nothing is sent before the end of the turn.
    assert call.kinds() == ["vad.speech_started"]

    await call.push(silence(20))
    await call.idle()
    assert call.session.counts["preempt_used"] == 1
    assert call.session.counts["preempt_started"] == 1
    assert call.session.counts["preempt_wasted"] == 0
    assert len(call.stt.calls) == 1
    assert call.tts.clauses == ["Hello there."]
    stopped = call.index(lambda e: isinstance(e, SpeechStopped))
    assert stopped < call.index(lambda e: isinstance(e, Transcript))
    assert stopped < call.index(lambda e: isinstance(e, AudioOut))
    done = call.done(1)
    assert done is not None and done.status == "completed" and done.text == "Hello there."

    metrics = metrics_of(call, 1)
    stages = metrics["stages_ms"]
    assert isinstance(stages, dict)
    assert order_violations(stages) == []
    assert stages["stt_done"] < stages["eot"] and stages["tts_first_chunk"] < stages["eot"]
    assert stages["eot"] <= stages["first_audio_sent"]
    assert metrics["preempted"] is True
    assert metrics["voice_to_voice_ms"] == stages["first_audio_sent"]


async def test_events_made_while_the_held_ones_are_sent_are_not_lost(
    make_call: Callable[..., Call],
) -> None:
    script = [f" w{i}" for i in range(40)]
    llm = FakeLlm(script, delay_s=0.003)
    call = make_call(llm=llm, send_yields=True)  # every send waits, as on a socket
    await call.push(speech(12))
    await call.push(silence(10))
    await call.until(lambda: llm.yielded and llm.yielded[0] >= 8)  # a backlog of held deltas
    await call.push(silence(20))
    await call.idle()
    assert [d.delta for d in call.of(ResponseTextDelta)] == script
    done = call.done(1)
    assert done is not None and done.generated_text == "".join(script).strip()


async def test_a_playback_ack_bounds_what_was_heard(make_call: Callable[..., Call]) -> None:
    call = make_call(llm=FakeLlm(sentences(20)))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 16)  # three clauses sent
    frames = call.frames(1)
    assert call.session.playback_ack(frames[4].seq)  # the client has played chunk 1
    assert not call.session.playback_ack(0)
    assert not call.session.playback_ack(frames[-1].seq + 1000)

    await call.push(speech(12))
    await call.until(lambda: call.done(1) is not None)
    done = call.done(1)
    assert done is not None and done.status == "interrupted"
    # By the pacing estimate the caller heard more than 200 ms; the ack says 100.
    assert done.heard_ms == 100.0
    assert done.text == "Number 0 is"  # the first phrase: three words
    assert call.session.history.turns[-1].content == "Number 0 is"


async def test_close_during_a_held_reply_stops_it(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(["word "] * 200, delay_s=0.005)
    call = make_call(llm=llm)
    await call.push(speech(12))
    await call.push(silence(10))
    await call.until(lambda: llm.running)
    await asyncio.wait_for(call.session.close(), 1.0)
    assert llm.running == 0 and call.tts.running == 0 and llm.yielded[0] < 200
    assert call.kinds() == ["vad.speech_started"]


class _LevelVadStream:
    """Loud windows are speech (1.0), quiet ones are neither speech nor silence (0.4, between
    the default release threshold 0.35 and threshold 0.5), the rest silence."""

    def process(self, audio: np.ndarray) -> list[float]:
        levels = np.abs(audio).reshape(-1, W).mean(axis=1)
        return [1.0 if level > 0.4 else 0.4 if level > 0.1 else 0.0 for level in levels]


class _LevelVad(FakeVad):
    def new_stream(self) -> _LevelVadStream:  # type: ignore[override]
        return _LevelVadStream()


async def test_quiet_sound_after_preemption_discards_the_held_reply(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(vad=_LevelVad(), turn={"silence_ms": 500, "preempt_ms": 200})
    quiet = np.full(6 * W, 0.2, np.float32)
    await call.push(speech(12))
    await call.push(silence(9))  # preemption starts on the turn so far
    await call.until(lambda: call.stt.calls)
    await call.push(quiet)  # not silence: the turn goes on, and its audio grows
    await call.push(silence(30))
    await call.idle()
    assert call.session.counts["preempt_wasted"] == 1
    # The reply answered the whole turn: 12 windows of speech, 9 of pause, 6 quiet ones and
    # a 3-window tail (no padding: the call starts with speech).
    assert call.stt.calls[-1].shape[0] == (12 + 9 + 6 + 3) * W
    done = call.done(1)
    assert done is not None and done.status == "completed"


async def test_acks_of_a_reply_still_playing_after_the_next_turn_are_accepted(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(llm=FakeLlm(sentences(8), ["Okay", "."]), turn={"interrupt": False})
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 3)
    await call.say()  # turn 2 ends while reply 1 still plays
    assert call.of(SpeechStopped)[-1].turn_id == 2 and call.done(1) is None
    assert call.session.playback_ack(call.frames(1)[-1].seq)
    await call.idle()
    assert call.session.playback_ack(call.frames(1)[-1].seq)  # late, after reply 2 began
    assert call.session.playback_ack(call.frames(2)[-1].seq)
    assert not call.session.playback_ack(call.frames(2)[-1].seq + 1)


async def test_words_heard_of_a_clause_still_being_synthesized_are_kept(
    make_call: Callable[..., Call],
) -> None:
    text = "One two three four five six seven eight nine ten."
    tts = FakeTts(samples_per_clause=16000, chunks=20, delay_s=0.05)  # 1 s, made in real time
    call = make_call(llm=FakeLlm([text]), tts=tts)
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 10)  # 200 ms of the clause sent
    await call.push(speech(12))
    await call.until(lambda: call.done(1) is not None)
    done = call.done(1)
    assert done is not None and done.status == "interrupted"
    assert done.heard_ms is not None and done.heard_ms >= 100  # a tenth of the clause at least
    assert done.text and is_word_prefix(done.text, text)
