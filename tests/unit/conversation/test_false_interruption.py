"""A barge-in that proves to be no turn (an acknowledgement, or a sound with no words): the
reply goes on from the first word the caller missed, with no LLM request, and the history
holds one answer and no turn of the caller's. A real interruption stays a turn."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from voxpipe.config.turn import BACKCHANNEL_PHRASES
from voxpipe.conversation.events import SpeechStopped
from voxpipe.conversation.overlap_words import is_acknowledgement, resume_at, unheard


def sentences(n: int) -> list[str]:
    return [f"{' ' if i else ''}Number {i} is here." for i in range(n)]


async def _barge(call: Call) -> None:
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 12)  # more than two clauses played
    await call.push(speech(12))  # 384 ms: past min_interruption_ms, an interruption
    await call.until(lambda: call.done(1) is not None)
    await call.push(silence(30))
    await call.idle()


@pytest.mark.parametrize("overlap", ["Mm-hmm.", "Yeah, okay.", "", "I see."])
async def test_an_acknowledgement_over_the_reply_resumes_it(
    make_call: Callable[..., Call], overlap: str
) -> None:
    llm = FakeLlm(sentences(8), ["Never said."], delay_s=0.005)
    stt = FakeStt("tell me everything", overlap)
    call = make_call(stt=stt, llm=llm, tts=FakeTts(delay_s=0.005))
    await _barge(call)

    first, second = call.done(1), call.done(2)
    assert first is not None and first.status == "interrupted"
    assert second is not None and second.status == "completed"
    assert len(llm.calls) == 1  # the rest is said as it was written: no second request
    rest = unheard(first.generated_text, first.text)
    assert rest and second.text == rest
    assert rest.startswith("Number")  # the cut sentence again, whole
    start = resume_at(first.text)
    joined = " ".join([*first.text.split()[:start], rest])
    assert joined.split() == first.generated_text.split()
    # One answer, heard in two parts, and none of the caller's sound.
    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "tell me everything"),
        ("assistant", joined),
    ]
    assert call.session.counts["false_interruptions"] == 1
    assert call.session.counts["interruptions"] == 1


async def test_a_word_that_is_no_acknowledgement_makes_a_turn(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(sentences(8), ["Sure, Friday."], delay_s=0.005)
    call = make_call(stt=FakeStt("tell me everything", "Yeah, but Friday."), llm=llm)
    await _barge(call)

    second = call.done(2)
    assert second is not None and second.text == "Sure, Friday."
    assert len(llm.calls) == 2
    assert [m.role for m in call.session.history.turns] == ["user", "assistant"] * 2
    assert call.session.counts["false_interruptions"] == 0


async def test_yes_over_a_question_answers_it(make_call: Callable[..., Call]) -> None:
    question = [*sentences(6), " Shall I book it?"]
    llm = FakeLlm(question, ["Booked."], delay_s=0.005)
    call = make_call(stt=FakeStt("book a table", "Yes."), llm=llm)
    await _barge(call)

    second = call.done(2)
    assert second is not None and second.text == "Booked."
    assert [(m.role, m.content) for m in call.session.history.turns][2] == ("user", "Yes.")


async def test_with_resume_off_every_interruption_is_a_turn(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(sentences(8), ["Yes?"], delay_s=0.005)
    call = make_call(
        stt=FakeStt("tell me everything", "Okay."),
        llm=llm,
        turn={"resume_false_interruptions": False},
    )
    await _barge(call)

    second = call.done(2)
    assert second is not None and second.text == "Yes?"
    assert len(llm.calls) == 2


def test_acknowledgements_are_only_acknowledgement_phrases() -> None:
    phrases = list(BACKCHANNEL_PHRASES)
    for said in ["Mm-hmm.", "Uh-huh.", "Okay.", "Yeah, yeah.", "Right, I see.", "", "..."]:
        assert is_acknowledgement(said, phrases, 4), said
    for said in ["Wait.", "Stop.", "No, Friday.", "Hold on.", "Sorry, can I ask something?",
                 "Yeah, but Friday.", "Okay okay okay okay okay."]:  # fmt: skip
        assert not is_acknowledgement(said, phrases, 4), said


def test_the_rest_starts_with_the_sentence_the_caller_was_cut_off_in() -> None:
    assert unheard("One two. Three four five.", "One two. Three") == "Three four five."
    assert unheard("One two.", "One two.") == ""
    long = "a b c d e f g h i j k l m n o"
    assert unheard(f"{long}, and more words here.", f"{long}, and") == "and more words here."
    assert unheard(f"{long} {long}.", long) == long + "."  # no mark near: from the cut


async def test_two_backchannels_keep_one_answer(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(sentences(30), ["Never said."], delay_s=0.005)
    stt = FakeStt("tell me everything", "Okay.", "Mm-hmm.")
    call = make_call(stt=stt, llm=llm, tts=FakeTts(delay_s=0.005))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 12)
    await call.push(speech(12))  # "okay": stops the reply, which then goes on
    await call.until(lambda: call.done(1) is not None)
    await call.push(silence(30))
    await call.until(lambda: len(call.frames(2)) >= 12)
    await call.push(speech(12))  # a second acknowledgement, over the resumed reply
    await call.until(lambda: call.done(2) is not None)
    await call.push(silence(30))
    await call.idle()

    assert [call.done(i).status for i in (1, 2, 3)] == [  # type: ignore[union-attr]
        "interrupted",
        "interrupted",
        "completed",
    ]
    assert len(llm.calls) == 1
    history = [(m.role, m.content) for m in call.session.history.turns]
    assert [role for role, _ in history] == ["user", "assistant"]
    assert history[1][1].split() == "".join(sentences(30)).split()
    assert call.session.counts["false_interruptions"] == 2


@pytest.mark.parametrize(("overlap", "ends_early"), [("Okay.", True), ("Wait, Friday.", False)])
async def test_an_acknowledgement_ends_its_turn_at_the_first_silence_check(
    make_call: Callable[..., Call], overlap: str, ends_early: bool
) -> None:
    """With the fixed silence (500 ms, 16 windows), an interrupting turn's words are read
    at its first silence: an acknowledgement's turn ends after backchannel_silence_ms
    (350 ms, 11 windows), so the reply goes on sooner; other words wait the silence."""
    llm = FakeLlm(sentences(8), ["Sure, Friday."], delay_s=0.005)
    stt = FakeStt("tell me everything", overlap)
    call = make_call(stt=stt, llm=llm, tts=FakeTts(delay_s=0.005))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 12)
    await call.push(speech(12))  # an interruption
    await call.until(lambda: call.done(1) is not None)
    await call.push(silence(12))  # 384 ms: past the verdict's 350, short of 500
    await call.until(lambda: len(stt.calls) == 2)
    await asyncio.sleep(0.05)
    stopped = call.of(SpeechStopped)
    assert len(stopped) == (2 if ends_early else 1)
    await call.push(silence(30))
    await call.idle()

    assert len(stt.calls) == 2, "the check's transcript is the turn's"
    assert call.session.counts["overlaps_ended_by_words"] == int(ends_early)
    assert call.session.counts["false_interruptions"] == int(ends_early)
    (check,) = call.session.turns[-1]["turn_model"]  # type: ignore[misc]
    assert check == {"overlap": True, "words": overlap, "no_turn": ends_early}


async def test_a_backchannel_in_two_parts_still_resumes_the_reply(
    make_call: Callable[..., Call],
) -> None:
    """ "Oh, ... I see" with a long pause: the first part ends its turn (after
    backchannel_silence_ms), and the second stops the resumed reply before its first word;
    the reply still goes on."""
    llm = FakeLlm(sentences(30), ["Never said."], delay_s=0.005)
    stt = FakeStt("tell me everything", "Oh.", "I see.")
    call = make_call(stt=stt, llm=llm, tts=FakeTts(delay_s=0.005))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 12)
    await call.push(np.concatenate([speech(12), silence(12), speech(12), silence(30)]))
    await call.until(lambda: call.done(3) is not None, within_s=10)  # the rest is played
    await call.idle()

    first, second, third = (call.done(i) for i in (1, 2, 3))
    assert first is not None and second is not None and third is not None
    assert (first.status, second.status, third.status) == (
        "interrupted",
        "interrupted",
        "completed",
    )
    assert third.text.startswith("Number"), third.text
    assert len(llm.calls) == 1
    history = [(m.role, m.content) for m in call.session.history.turns]
    assert [role for role, _ in history] == ["user", "assistant"]
    assert history[1][1].split() == "".join(sentences(30)).split()
    assert call.session.counts["false_interruptions"] == 2


@pytest.mark.parametrize("resume", [True, False])
@pytest.mark.parametrize("overlap", ["Right.", ""])
async def test_speech_before_the_reply_has_a_word_is_answered(
    make_call: Callable[..., Call], overlap: str, resume: bool
) -> None:
    """The caller goes on after a pause ("Front, ... right.", or a cough) while the reply to
    the first part has not written a word: there is nothing to resume, so the caller's turn
    is answered, never left in silence, whether false interruptions resume or not."""
    llm = FakeLlm(["Front, noted."], ["Front right, noted."], delay_s=0.3)
    call = make_call(
        stt=FakeStt("front", overlap),
        llm=llm,
        tts=FakeTts(delay_s=0.005),
        turn={"resume_false_interruptions": resume},
    )
    await call.say()
    await call.until(lambda: len(llm.calls) == 1)
    await call.push(speech(12))  # 384 ms: an interruption, before the reply's first token
    await call.until(lambda: call.done(1) is not None)
    await call.push(silence(30))
    await call.until(lambda: call.done(2) is not None, within_s=3)
    await call.idle()

    first, second = call.done(1), call.done(2)
    assert first is not None and first.status == "interrupted" and not first.text
    assert second is not None and second.status == "completed"
    assert second.text == "Front right, noted."
    assert len(llm.calls) == 2
    assert call.session.counts["false_interruptions"] == 0
    said = [(m.role, m.content) for m in call.session.history.turns]
    assert said[0] == ("user", "front") and said[-1] == ("assistant", "Front right, noted.")
