"""The turn-taking machine alone, on stand-in replies: every move it makes, what it decides
on each, and that every other move raises and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any

import pytest

from voxpipe.config import TurnConfig
from voxpipe.conversation.turn_taking import (
    RESUME_AFTER_SILENCE_MS,
    TRANSITIONS,
    IllegalTurnTransition,
    Trigger,
    TurnEnd,
    TurnState,
    TurnTaking,
    Yield,
)

S = TurnState
T = Trigger
MIN_MS = 250.0  # min_interruption_ms
PREEMPT_MS = 200.0


@dataclass(eq=False)
class FakeReply:
    active: bool = True
    respond: bool = True


class Scene:
    """A machine, the reply playing (once started) and the held one, brought into a state by
    legal moves only."""

    def __init__(self, **overrides: Any) -> None:
        cfg = TurnConfig(min_interruption_ms=int(MIN_MS), preempt_ms=int(PREEMPT_MS))
        self.turns: TurnTaking[FakeReply] = TurnTaking(cfg.model_copy(update=overrides))
        self.playing = FakeReply()
        self.held = FakeReply()
        self.end: TurnEnd[FakeReply] = TurnEnd(False, None)

    def play(self) -> Scene:
        self.turns.reply_started(self.playing)
        return self

    def hold(self) -> None:
        assert self.turns.pausing(MIN_MS, PREEMPT_MS, may_hold=True).start
        self.turns.held_started(self.held)

    def into(self, state: TurnState, held: bool = False) -> Scene:
        """``held``: reach ENDING from PREEMPTING, with the held reply not answered yet."""
        turns = self.turns
        if state is S.CALLER_SPEAKING:
            assert turns.speech_began() is None
        elif state is S.OVERLAPPING:
            assert self.play().turns.speech_began() is self.playing
        elif state is S.PREEMPTING:
            self.into(S.CALLER_SPEAKING).hold()
        elif state is S.OVERLAP_PREEMPTING:
            self.into(S.OVERLAPPING)
            self.playing.active = False  # the reply ended by itself under the caller's speech
            assert turns.heard(True, MIN_MS, 0) is None
            self.hold()
            self.playing = FakeReply()
            self.play()  # and the client started another
        elif state is S.ENDING:
            self.into(S.PREEMPTING if held else S.CALLER_SPEAKING)
            self.end = turns.turn_ended(MIN_MS)
        assert turns.state is state
        return self


@dataclass(frozen=True)
class Move:
    start: TurnState
    trigger: Trigger
    to: TurnState
    act: Callable[[Scene], object]
    held: bool = False  # Scene.into(start, held)

    def __str__(self) -> str:
        return f"{self.start}-{self.trigger}-{self.to}"


def pausing(speech_ms: float, silence_ms: float) -> Callable[[Scene], object]:
    return lambda s: s.turns.pausing(speech_ms, silence_ms, may_hold=True)


def heard(loud: bool, speech_ms: float) -> Callable[[Scene], object]:
    return lambda s: s.turns.heard(loud, speech_ms, 0)


def play(s: Scene) -> object:
    return s.play()


def reset(s: Scene) -> object:
    return s.turns.reset()


def drop_held(s: Scene) -> object:
    return s.turns.drop_held()


def speech_began(s: Scene) -> object:
    return s.turns.speech_began()


def words_interrupt(s: Scene) -> object:
    return s.turns.interrupted_by_words()


def turn_ended(speech_ms: float) -> Callable[[Scene], object]:
    return lambda s: s.turns.turn_ended(speech_ms)


# Every move the table allows, each made for real.
LEGAL = [
    Move(S.LISTENING, T.SPEECH_BEGAN, S.CALLER_SPEAKING, speech_began),
    Move(S.LISTENING, T.SPEECH_BEGAN, S.OVERLAPPING, lambda s: s.play().turns.speech_began()),
    Move(S.LISTENING, T.REPLY_STARTED, S.LISTENING, play),
    Move(S.LISTENING, T.RESET, S.LISTENING, reset),
    Move(S.LISTENING, T.DROP_HELD, S.LISTENING, drop_held),
    Move(S.CALLER_SPEAKING, T.HEARD, S.CALLER_SPEAKING, heard(True, MIN_MS)),
    Move(S.CALLER_SPEAKING, T.PAUSING, S.CALLER_SPEAKING, pausing(MIN_MS, PREEMPT_MS)),
    Move(S.CALLER_SPEAKING, T.HELD_STARTED, S.PREEMPTING, lambda s: s.hold()),
    Move(S.CALLER_SPEAKING, T.TURN_ENDED, S.ENDING, turn_ended(0)),
    Move(S.CALLER_SPEAKING, T.REPLY_STARTED, S.CALLER_SPEAKING, play),
    Move(S.CALLER_SPEAKING, T.RESET, S.LISTENING, reset),
    Move(S.CALLER_SPEAKING, T.DROP_HELD, S.CALLER_SPEAKING, drop_held),
    Move(S.OVERLAPPING, T.HEARD, S.OVERLAPPING, heard(True, MIN_MS - 1)),
    Move(S.OVERLAPPING, T.HEARD, S.CALLER_SPEAKING, heard(True, MIN_MS)),
    Move(S.OVERLAPPING, T.WORDS_INTERRUPT, S.CALLER_SPEAKING, words_interrupt),
    Move(S.OVERLAPPING, T.PAUSING, S.OVERLAPPING, pausing(MIN_MS - 1, PREEMPT_MS)),
    Move(S.OVERLAPPING, T.HELD_STARTED, S.OVERLAP_PREEMPTING, lambda s: s.hold()),
    Move(S.OVERLAPPING, T.TURN_ENDED, S.LISTENING, turn_ended(MIN_MS - 1)),
    Move(S.OVERLAPPING, T.TURN_ENDED, S.ENDING, turn_ended(MIN_MS)),
    Move(S.OVERLAPPING, T.REPLY_STARTED, S.OVERLAPPING, play),
    Move(S.OVERLAPPING, T.RESET, S.LISTENING, reset),
    Move(S.OVERLAPPING, T.DROP_HELD, S.OVERLAPPING, drop_held),
    Move(S.PREEMPTING, T.HEARD, S.PREEMPTING, heard(False, MIN_MS)),
    Move(S.PREEMPTING, T.PAUSING, S.PREEMPTING, pausing(MIN_MS, PREEMPT_MS)),
    Move(S.PREEMPTING, T.PAUSING, S.CALLER_SPEAKING, pausing(MIN_MS, PREEMPT_MS - 1)),
    Move(S.PREEMPTING, T.TURN_ENDED, S.ENDING, turn_ended(MIN_MS)),
    Move(S.PREEMPTING, T.REPLY_STARTED, S.PREEMPTING, play),
    Move(S.PREEMPTING, T.RESET, S.LISTENING, reset),
    Move(S.PREEMPTING, T.DROP_HELD, S.CALLER_SPEAKING, drop_held),
    Move(S.OVERLAP_PREEMPTING, T.HEARD, S.OVERLAP_PREEMPTING, heard(False, MIN_MS - 1)),
    Move(S.OVERLAP_PREEMPTING, T.HEARD, S.PREEMPTING, heard(True, MIN_MS)),
    Move(S.OVERLAP_PREEMPTING, T.WORDS_INTERRUPT, S.PREEMPTING, words_interrupt),
    Move(S.OVERLAP_PREEMPTING, T.PAUSING, S.OVERLAP_PREEMPTING, pausing(MIN_MS, PREEMPT_MS)),
    Move(S.OVERLAP_PREEMPTING, T.PAUSING, S.OVERLAPPING, pausing(MIN_MS, 0)),
    Move(S.OVERLAP_PREEMPTING, T.TURN_ENDED, S.ENDING, turn_ended(MIN_MS)),
    # A backchannel only if min_interruption_ms grew meanwhile.
    Move(S.OVERLAP_PREEMPTING, T.TURN_ENDED, S.LISTENING, turn_ended(MIN_MS - 1)),
    Move(S.OVERLAP_PREEMPTING, T.REPLY_STARTED, S.OVERLAP_PREEMPTING, play),
    Move(S.OVERLAP_PREEMPTING, T.RESET, S.LISTENING, reset),
    Move(S.OVERLAP_PREEMPTING, T.DROP_HELD, S.OVERLAPPING, drop_held),
    Move(S.ENDING, T.ANSWER, S.LISTENING, lambda s: s.turns.answer(s.end), held=True),
    Move(S.ENDING, T.ANSWER, S.ENDING, lambda s: s.turns.answer(s.end)),
    Move(S.ENDING, T.ANSWERED, S.LISTENING, lambda s: s.turns.answered(FakeReply())),
    # After the end of a turn failed halfway.
    Move(S.ENDING, T.SPEECH_BEGAN, S.CALLER_SPEAKING, speech_began),
    Move(S.ENDING, T.SPEECH_BEGAN, S.OVERLAPPING, lambda s: s.play().turns.speech_began()),
    Move(S.ENDING, T.SPEECH_BEGAN, S.PREEMPTING, speech_began, held=True),
    Move(
        S.ENDING,
        T.SPEECH_BEGAN,
        S.OVERLAP_PREEMPTING,
        lambda s: s.play().turns.speech_began(),
        held=True,
    ),
    Move(S.ENDING, T.REPLY_STARTED, S.ENDING, play),
    Move(S.ENDING, T.RESET, S.ENDING, reset),
    Move(S.ENDING, T.DROP_HELD, S.ENDING, drop_held),
]

# What each trigger is, as a call with arguments that are fine in the states that take it.
CALLS: dict[Trigger, Callable[[Scene], object]] = {
    T.SPEECH_BEGAN: speech_began,
    T.HEARD: heard(True, 0),
    T.WORDS_INTERRUPT: words_interrupt,
    T.PAUSING: pausing(0, 0),
    T.HELD_STARTED: lambda s: s.turns.held_started(FakeReply()),
    T.TURN_ENDED: turn_ended(MIN_MS),
    T.ANSWER: lambda s: s.turns.answer(s.end),
    T.ANSWERED: lambda s: s.turns.answered(FakeReply()),
    T.REPLY_STARTED: lambda s: s.turns.reply_started(FakeReply()),
    T.RESET: reset,
    T.DROP_HELD: drop_held,
}
ILLEGAL = sorted(
    (state, trigger)
    for state, trigger in product(TurnState, Trigger)
    if trigger not in TRANSITIONS[state]
)


@pytest.mark.parametrize("move", LEGAL, ids=str)
def test_every_move_the_table_allows_is_made(move: Move) -> None:
    scene = Scene().into(move.start, held=move.held)
    move.act(scene)
    assert scene.turns.state is move.to


def test_the_table_holds_exactly_the_moves_made_here() -> None:
    table = {
        (a, t, b) for a, row in TRANSITIONS.items() for t, targets in row.items() for b in targets
    }
    assert table == {(m.start, m.trigger, m.to) for m in LEGAL}
    assert set(TRANSITIONS) == set(TurnState)


@pytest.mark.parametrize(("state", "trigger"), ILLEGAL)
def test_every_other_trigger_raises_and_changes_nothing(state: TurnState, trigger: Trigger) -> None:
    scene = Scene().into(state)
    turns = scene.turns
    before = (turns.state, turns.reply, turns.held)
    with pytest.raises(IllegalTurnTransition, match=f"{trigger} cannot move"):
        CALLS[trigger](scene)
    assert (turns.state, turns.reply, turns.held) == before


def test_a_trigger_cannot_lead_where_its_row_does_not_say() -> None:
    turns = Scene().into(S.CALLER_SPEAKING).turns
    with pytest.raises(IllegalTurnTransition, match="from caller_speaking to ending"):
        turns._move(T.HEARD, S.ENDING)
    assert turns.state is S.CALLER_SPEAKING


# -- what the machine decides ---------------------------------------------------


def test_speech_over_a_playing_reply_overlaps_it_only_with_interrupt_on() -> None:
    scene = Scene(interrupt=False).play()
    assert scene.turns.speech_began() is None
    assert scene.turns.state is S.CALLER_SPEAKING
    scene = Scene().play()
    scene.playing.respond = False  # a commit: transcribes only, says nothing
    assert scene.turns.speech_began() is None


def test_the_overlapped_reply_pauses_resumes_then_is_interrupted() -> None:
    scene = Scene().into(S.OVERLAPPING)
    turns, reply = scene.turns, scene.playing
    paused = turns.heard(True, 100, 0)
    assert paused is not None and (paused.action, paused.reply) == (Yield.PAUSE, reply)
    assert turns.heard(False, 100, RESUME_AFTER_SILENCE_MS - 1) is None  # not yet
    resumed = turns.heard(False, 100, RESUME_AFTER_SILENCE_MS)
    assert resumed is not None and resumed.action is Yield.RESUME
    barge_in = turns.heard(False, MIN_MS, 0)
    assert barge_in is not None and (barge_in.action, barge_in.reply) == (Yield.INTERRUPT, reply)
    assert turns.state is S.CALLER_SPEAKING
    assert turns.heard(True, MIN_MS + 100, 0) is None  # the caller has the floor now


def test_no_preemption_while_speech_over_a_reply_is_only_a_backchannel() -> None:
    scene = Scene().into(S.OVERLAPPING)
    assert not scene.turns.pausing(MIN_MS - 1, PREEMPT_MS, may_hold=True).start
    assert scene.turns.pausing(MIN_MS, PREEMPT_MS, may_hold=True).start


@pytest.mark.parametrize(
    ("silence_ms", "may_hold", "overrides", "start"),
    [
        (PREEMPT_MS, True, {}, True),
        (PREEMPT_MS - 1, True, {}, False),
        (PREEMPT_MS, False, {}, False),  # the client asks for replies itself
        (5000, True, {"preempt_ms": None}, False),  # preemption off
    ],
)
def test_a_held_reply_starts_after_preempt_ms_of_silence(
    silence_ms: float, may_hold: bool, overrides: dict[str, Any], start: bool
) -> None:
    turns = Scene(**overrides).into(S.CALLER_SPEAKING).turns
    decision = turns.pausing(MIN_MS, silence_ms, may_hold)
    assert decision.start is start and decision.discarded is None
    assert turns.state is S.CALLER_SPEAKING and turns.held is None  # until held_started


def test_any_sound_after_preemption_discards_the_held_reply() -> None:
    scene = Scene().into(S.PREEMPTING)
    assert scene.turns.held is scene.held
    assert scene.turns.pausing(MIN_MS, PREEMPT_MS + 100, may_hold=True).discarded is None
    decision = scene.turns.pausing(MIN_MS, 0, may_hold=True)
    assert decision.discarded is scene.held and not decision.start
    assert scene.turns.held is None and scene.turns.state is S.CALLER_SPEAKING


def test_a_backchannel_is_not_a_turn_and_the_reply_plays_on() -> None:
    scene = Scene().into(S.OVERLAPPING)
    end = scene.turns.turn_ended(MIN_MS - 1)
    assert end.backchannel and end.speaking is scene.playing and end.discarded is None
    assert scene.turns.state is S.LISTENING


def test_a_turn_ending_after_preemption_is_answered_by_the_held_reply() -> None:
    scene = Scene().into(S.ENDING, held=True)
    assert scene.turns.held is scene.held  # still held while SpeechStopped is sent
    answer = scene.turns.answer(scene.end)
    assert answer.confirm is scene.held and answer.interrupt is None
    assert scene.turns.reply is scene.held and scene.turns.held is None


def test_a_held_reply_no_longer_working_is_let_go_and_a_new_one_answers() -> None:
    scene = Scene().into(S.ENDING, held=True)
    scene.held.active = False  # e.g. its deadline passed
    answer = scene.turns.answer(scene.end)
    assert answer.confirm is None and scene.turns.held is None
    assert scene.turns.state is S.ENDING
    new = FakeReply()
    scene.turns.answered(new)
    assert scene.turns.reply is new and scene.turns.state is S.LISTENING


@pytest.mark.parametrize("interrupt", [True, False])
def test_a_new_turn_interrupts_the_reply_speaking_unless_interrupt_is_off(
    interrupt: bool,
) -> None:
    # Speaking over the caller: started by the client, or never overlapped (interrupt off).
    scene = Scene(interrupt=interrupt).into(S.CALLER_SPEAKING).play()
    end = scene.turns.turn_ended(MIN_MS)
    assert end.speaking is scene.playing and not end.backchannel
    answer = scene.turns.answer(end)
    assert answer.interrupt is (scene.playing if interrupt else None)


def test_a_reset_forgets_the_speech_discards_the_held_reply_and_resumes_the_reply() -> None:
    scene = Scene().into(S.OVERLAP_PREEMPTING)
    forgotten = scene.turns.reset()
    assert forgotten.discarded is scene.held and forgotten.resume is scene.playing
    assert scene.turns.held is None and scene.turns.state is S.LISTENING


def test_a_reset_while_a_turn_ends_still_answers_it() -> None:
    scene = Scene().into(S.ENDING, held=True)
    assert scene.turns.reset().discarded is scene.held
    assert scene.turns.state is S.ENDING
    assert scene.turns.answer(scene.end).confirm is None


def test_replies_no_longer_automatic_drop_the_held_one() -> None:
    scene = Scene().into(S.PREEMPTING)
    assert scene.turns.drop_held() is scene.held
    assert scene.turns.drop_held() is None
    assert scene.turns.state is S.CALLER_SPEAKING


def test_speaking_is_the_latest_reply_while_it_works_on_something_to_say() -> None:
    scene = Scene()
    assert scene.turns.speaking() is None
    scene.play()
    assert scene.turns.speaking() is scene.playing
    scene.playing.active = False
    assert scene.turns.speaking() is None and scene.turns.reply is scene.playing
