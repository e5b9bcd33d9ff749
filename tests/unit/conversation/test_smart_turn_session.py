"""The session with ``end_of_turn: smart_turn``: it asks the turn model once the caller
falls silent, waits for the verdict, and ends the turn after the silence the verdict picks.
(The model here is a stand-in; the real one: tests/e2e/test_smart_turn.py.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.conversation.events import SpeechStopped, TurnMetrics
from voxpipe.engines.base import CancelToken, ChatMessage
from voxpipe.engines.runner import EngineBusy

SMART = {
    "end_of_turn": "smart_turn",
    "smart_turn_complete_ms": 192,  # 6 windows
    "smart_turn_max_silence_ms": 1280,  # 40 windows
    "preempt_ms": None,
}


class ScriptedTurnModel:
    """Says ``probability`` of every turn, and keeps the audio it was asked about."""

    name = "scripted-turn"

    def __init__(self, probability: float) -> None:
        self.probability = probability
        self.heard: list[int] = []

    def probability_complete(self, audio: np.ndarray) -> float:
        self.heard.append(audio.shape[0])
        return self.probability

    def warmup(self) -> None:
        pass


async def test_a_complete_turn_ends_after_the_short_silence(
    make_call: Callable[..., Call],
) -> None:
    model = ScriptedTurnModel(0.9)
    call = make_call(turn=SMART, turn_model=model)
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    # asked once, after 2 silent windows, about the speech and those 2 windows
    assert model.heard == [14 * 512]
    await call.idle()
    metrics = call.of(TurnMetrics)[0]
    assert [c["p"] for c in metrics.metrics["turn_model"]] == [0.9]


async def test_an_unfinished_turn_waits_for_the_longest_silence(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.1))
    await call.push(speech(12))
    await call.push(silence(39))
    assert call.of(SpeechStopped) == [], "the 500 ms silence_ms no longer ends the turn"
    await call.push(silence(1))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]


async def test_the_caller_going_on_after_the_pause_is_one_turn(
    make_call: Callable[..., Call],
) -> None:
    model = ScriptedTurnModel(0.1)
    call = make_call(turn=SMART, turn_model=model)
    await call.push(speech(12))
    await call.push(silence(30))  # a 0.96 s pause mid-sentence
    await call.push(speech(12))
    model.probability = 0.9
    await call.push(silence(8))
    assert call.of(SpeechStopped) == [SpeechStopped((12 + 30 + 12) * 32.0, 1)]
    assert len(model.heard) == 2


# -- the words veto: a verdict of complete on words that cannot end a sentence ----------


async def test_words_that_need_more_hold_a_turn_judged_complete(
    make_call: Callable[..., Call],
) -> None:
    """The model says complete, the transcript so far ends on "to": the turn waits as one
    judged unfinished, and the caller's second half joins the same turn."""
    stt = FakeStt("I need a taxi from the station to", "I need a taxi to the airport.")
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=stt)
    await call.push(speech(12))
    await call.push(silence(30))  # the short silence would have ended it at 6 windows
    assert call.of(SpeechStopped) == []
    await call.push(speech(12))
    await call.push(silence(8))
    assert call.of(SpeechStopped) == [SpeechStopped((12 + 30 + 12) * 32.0, 1)]
    await call.idle()
    checks = call.of(TurnMetrics)[0].metrics["turn_model"]
    assert checks[0]["verdict"] == "unfinished"
    assert checks[0]["words"] == "I need a taxi from the station to"
    assert checks[1]["verdict"] == "complete"
    assert call.session.counts["turn_held_by_words"] == 1


async def test_the_check_transcript_is_the_turns_own(make_call: Callable[..., Call]) -> None:
    """A turn judged complete on words that can end a sentence ends after the short silence,
    and its answer uses the transcript the check made: one STT job for the turn."""
    stt = FakeStt("What time do you close today?")
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=stt)
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    assert len(stt.calls) == 1
    metrics = call.of(TurnMetrics)[0].metrics
    assert metrics["stt_at_check"] is True
    assert metrics["transcript"] == "What time do you close today?"


async def test_a_turn_waited_out_on_unfinished_words_reuses_the_check(
    make_call: Callable[..., Call],
) -> None:
    """Words that need more, then nothing: the longest silence ends the turn, and its
    transcript is still the check's (the caller said no more since)."""
    stt = FakeStt("Can you tell me when")
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=stt)
    await call.push(speech(12))
    await call.push(silence(39))
    assert call.of(SpeechStopped) == []
    await call.push(silence(1))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    assert len(stt.calls) == 1


async def test_no_unfinished_words_is_the_models_verdict_alone(
    make_call: Callable[..., Call],
) -> None:
    stt = FakeStt("I need a taxi from the station to")
    call = make_call(
        turn={**SMART, "unfinished_words": [], "llm_turn_end_threshold": 0},
        turn_model=ScriptedTurnModel(0.9),
        stt=stt,
    )
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    assert "words" not in call.of(TurnMetrics)[0].metrics["turn_model"][0]


async def test_speech_after_the_check_makes_a_new_transcript(
    make_call: Callable[..., Call],
) -> None:
    """A check's transcript is of the turn so far: after more speech the next check
    transcribes the whole turn anew, and that one is the turn's (no third STT job)."""
    model = ScriptedTurnModel(0.1)
    stt = FakeStt("I'd like a table", "I'd like a table for four people.")
    call = make_call(turn=SMART, turn_model=model, stt=stt)
    await call.push(speech(12))
    await call.push(silence(10))
    await call.push(speech(12))
    model.probability = 0.9
    await call.push(silence(7))
    await call.idle()
    assert len(stt.calls) == 2 and len(stt.calls[1]) > len(stt.calls[0])
    metrics = call.of(TurnMetrics)[0].metrics
    assert metrics["stt_at_check"] is True
    assert metrics["transcript"] == "I'd like a table for four people."


class JudgingLlm(FakeLlm):
    """A fake LLM that also judges the caller's words (TurnJudgingLlm): ``p_end`` of every
    words, and the messages it was asked about."""

    def __init__(self, p_end: float | None) -> None:
        super().__init__()
        self.p_end = p_end
        self.judged: list[list[ChatMessage]] = []

    def turn_ends(
        self, session_id: str, messages: Sequence[ChatMessage], cancel: CancelToken
    ) -> float | None:
        self.judged.append(list(messages))
        return self.p_end


async def test_the_llm_holds_words_it_does_not_hear_as_finished(
    make_call: Callable[..., Call],
) -> None:
    """Words no list catches ("my laptop"): the LLM's low probability of an end holds the
    turn; it is asked with the conversation and the words without Whisper's full stop."""
    llm = JudgingLlm(0.0004)
    stt = FakeStt("The problem is that my laptop.")
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=stt, llm=llm)
    await call.push(speech(12))
    await call.push(silence(30))
    assert call.of(SpeechStopped) == []
    assert llm.judged[0][-1] == ChatMessage("user", "The problem is that my laptop")
    assert llm.judged[0][0].role == "system"
    await call.push(silence(10))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    check = call.of(TurnMetrics)[0].metrics["turn_model"][0]
    assert check["p_end"] == 0.0004 and check["verdict"] == "unfinished"


async def test_the_llm_lets_finished_words_end_the_turn(make_call: Callable[..., Call]) -> None:
    llm = JudgingLlm(0.3)
    call = make_call(
        turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=FakeStt("My card was stolen."), llm=llm
    )
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    assert len(llm.judged) == 1


async def test_words_the_list_holds_are_not_asked_of_the_llm(
    make_call: Callable[..., Call],
) -> None:
    llm = JudgingLlm(0.9)
    call = make_call(
        turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=FakeStt("a table for"), llm=llm
    )
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == []
    assert llm.judged == []


async def test_an_llm_that_cannot_judge_leaves_the_verdict(
    make_call: Callable[..., Call],
) -> None:
    """None (a cold sequence, a remote LLM): the model's verdict and the words stand."""
    llm = JudgingLlm(None)
    call = make_call(
        turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=FakeStt("My card was stolen."), llm=llm
    )
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    assert "p_end" not in call.of(TurnMetrics)[0].metrics["turn_model"][0]


async def test_the_llm_ends_a_turn_the_model_doubted_after_the_plain_silence(
    make_call: Callable[..., Call],
) -> None:
    """The model hears more to come, the words read as ended: the turn ends after
    silence_ms (16 windows), not the longest silence (40)."""
    llm = JudgingLlm(0.3)
    call = make_call(
        turn={**SMART, "silence_ms": 512, "llm_turn_complete_threshold": 0.05},
        turn_model=ScriptedTurnModel(0.1),
        stt=FakeStt("I'm allergic to nuts."),
        llm=llm,
    )
    await call.push(speech(12))
    await call.push(silence(15))
    assert call.of(SpeechStopped) == []
    await call.push(silence(1))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    assert call.of(TurnMetrics)[0].metrics["turn_model"][0]["verdict"] == "likely_complete"
    assert call.session.counts["turn_ended_by_words"] == 1


async def test_a_failed_transcript_leaves_the_models_verdict(
    make_call: Callable[..., Call],
) -> None:
    """The STT refusing the check's job (its queue full) neither stops the call's audio nor
    holds the turn: the model's verdict stands, and the failure is in the record."""
    stt = FakeStt(EngineBusy("stt queue is full"), "Thanks, goodbye.")
    call = make_call(turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=stt)
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    check = call.of(TurnMetrics)[0].metrics["turn_model"][0]
    assert check["words_error"] == "EngineBusy" and check["verdict"] == "complete"
    assert call.of(TurnMetrics)[0].metrics["transcript"] == "Thanks, goodbye."


class FailingLlm(JudgingLlm):
    def turn_ends(
        self, session_id: str, messages: Sequence[ChatMessage], cancel: CancelToken
    ) -> float | None:
        raise EngineBusy("llm queue is full")


async def test_a_failed_llm_judgement_leaves_the_words_and_the_model(
    make_call: Callable[..., Call],
) -> None:
    llm = FailingLlm(None)
    call = make_call(
        turn=SMART, turn_model=ScriptedTurnModel(0.9), stt=FakeStt("My card was stolen."), llm=llm
    )
    await call.push(speech(12))
    await call.push(silence(7))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]
    await call.idle()
    check = call.of(TurnMetrics)[0].metrics["turn_model"][0]
    assert "p_end" not in check and check["verdict"] == "complete"


async def test_a_failed_turn_model_waits_the_longest_silence(
    make_call: Callable[..., Call],
) -> None:
    class Broken(ScriptedTurnModel):
        def probability_complete(self, audio: np.ndarray) -> float:
            raise RuntimeError("onnxruntime failed")

    call = make_call(turn=SMART, turn_model=Broken(0.9))
    await call.push(speech(12))
    await call.push(silence(39))
    assert call.of(SpeechStopped) == []
    await call.push(silence(1))
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]


async def test_the_llm_is_not_asked_when_the_model_doubts_and_nothing_would_change(
    make_call: Callable[..., Call],
) -> None:
    """With likely-complete off, the LLM's answer on a doubted turn could change nothing."""
    llm = JudgingLlm(0.9)
    call = make_call(
        turn={**SMART, "llm_turn_complete_threshold": 0.0},
        turn_model=ScriptedTurnModel(0.1),
        stt=FakeStt("I'm allergic to nuts."),
        llm=llm,
    )
    await call.push(speech(12))
    await call.push(silence(10))
    assert llm.judged == []
