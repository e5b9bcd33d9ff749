"""Speech over a reply on a transport that can flush (a telephony provider's clear): the
client drops its buffered reply audio the moment the reply pauses, and the audio the caller
did not hear is sent again if the speech proves to be no turn (``turn.clear_on_pause``).

The fake TTS here speaks a ramp, each sample one step above the last (3, so that the float
round trip's rounding cannot blur it), so the frames a client plays show whether anything
was lost or said twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.conversation.test_barge_in import metrics_of, sentences
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from voxpipe.conversation.events import AudioOut, Event, PlaybackClear, PlaybackFlush
from voxpipe.engines.base import CancelToken

STEP = 3  # the ramp's step: 9600 samples stay under 2**15


class RampTts(FakeTts):
    """Each clause is ``samples_per_clause`` samples counting on from the last clause's."""

    def __init__(self) -> None:
        super().__init__(delay_s=0.002)
        self._said = 0

    def synthesize(self, text: str, cancel: CancelToken) -> Iterator[np.ndarray]:
        for piece in super().synthesize(text, cancel):
            yield (STEP * np.arange(self._said, self._said + len(piece))).astype(np.int16)
            self._said += len(piece)


def ramp(frame: AudioOut) -> np.ndarray:
    """The frame's samples as the ramp's indices."""
    return np.round(np.frombuffer(frame.pcm, "<i2") / STEP).astype(np.int64)


def played(sent: list[Event | AudioOut], turn_id: int) -> np.ndarray:
    """What a client plays of a turn's frames if a flush drops every frame it had buffered:
    those sent before a flush count up to where the frames after it start again."""
    heard: list[np.ndarray] = []
    for item in sent:
        if isinstance(item, PlaybackFlush) and heard:
            restart = None  # the next frame's first sample: what was played stops there
            for later in sent[sent.index(item) :]:
                if isinstance(later, AudioOut) and later.turn_id == turn_id:
                    restart = ramp(later)[0]
                    break
            if restart is not None:
                joined = np.concatenate(heard)
                heard = [joined[joined < restart]]
        elif isinstance(item, AudioOut) and item.turn_id == turn_id:
            heard.append(ramp(item))
    return np.concatenate(heard)


@pytest.mark.parametrize("flushes", [True, False], ids=["flushing", "no-flush"])
async def test_a_burst_flushes_the_client_and_the_reply_goes_on_where_it_stopped(
    make_call: Callable[..., Call], flushes: bool
) -> None:
    call = make_call(
        stt=FakeStt("go on", "uh-huh"), llm=FakeLlm(sentences(6)), tts=RampTts(), flushes=flushes
    )
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 6)

    await call.push(speech(5))  # 160 ms: a pause, under min_interruption_ms
    await call.push(silence(30))
    await call.idle()

    done = call.done(1)
    assert done is not None and done.status == "completed"
    assert done.text == done.generated_text == "".join(sentences(6))
    assert done.audio_ms == 600.0, "audio sent again is not counted twice"
    assert call.of(PlaybackClear) == []
    flushed = call.of(PlaybackFlush)
    assert flushed == ([PlaybackFlush(1)] if flushes else [])
    # The caller heard the whole reply once, in order: nothing lost, nothing twice.
    assert played(call.sent, 1).tolist() == list(range(9600))
    seqs = [f.seq for f in call.frames()]
    assert seqs == list(range(1, len(seqs) + 1))  # frames sent again take new seqs
    if flushes:
        at = call.sent.index(flushed[0])
        before = [f for f in call.frames(1) if call.sent.index(f) < at]
        after = [f for f in call.frames(1) if call.sent.index(f) > at]
        assert ramp(after[0])[0] <= ramp(before[-1])[0], "sent again from the heard frame"
        assert metrics_of(call, 1)["flushes"] == 1
    else:
        assert len(seqs) == 30


async def test_an_interruption_flushes_at_once_then_clears(make_call: Callable[..., Call]) -> None:
    call = make_call(
        stt=FakeStt("tell me everything", "stop"),
        llm=FakeLlm(sentences(40), ["Okay", "."], delay_s=0.005),
        tts=RampTts(),
        flushes=True,
    )
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 8)

    await call.push(speech(12))  # 384 ms: an interruption
    await call.until(lambda: call.done(1) is not None)
    done = call.done(1)
    assert done is not None and done.status == "interrupted"
    (flush,), (clear,) = call.of(PlaybackFlush), call.of(PlaybackClear)
    at_flush, at_clear = call.sent.index(flush), call.sent.index(clear)
    assert at_flush < at_clear
    # Paused from the flush on: no frame of the reply between the flush and the clear.
    assert not [f for f in call.frames(1) if at_flush < call.sent.index(f) < at_clear]
    assert clear.last_seq == done.last_seq
    # What the caller heard ends where the flush cut it, and the history holds only that.
    heard = played(call.sent, 1)
    assert done.heard_ms is not None and done.heard_ms <= len(heard) / 16 + 20
    assert done.text and done.generated_text.startswith(done.text)
    assert call.session.history.turns[1].content == done.text


async def test_clear_on_pause_off_only_stops_sending(make_call: Callable[..., Call]) -> None:
    call = make_call(
        llm=FakeLlm(sentences(6)),
        tts=RampTts(),
        flushes=True,
        turn={"clear_on_pause": False},
    )
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 6)
    await call.push(speech(5))
    await call.push(silence(30))
    await call.idle()
    assert call.of(PlaybackFlush) == [] and call.of(PlaybackClear) == []
    assert [f.seq for f in call.frames()] == list(range(1, 31))
