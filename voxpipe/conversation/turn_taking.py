"""Who has the floor: the caller, a reply, or a held reply waiting for the end of the turn.

The turn detector says what the caller's audio does (speech began, a window of speech or
silence, the turn ended); this machine decides what that means for the replies, and the
session acts on its decisions (pause, resume or interrupt the reply playing; start, confirm
or discard a held reply; start a new one). :class:`TurnTaking` is the only writer of its
state and of the two replies it tracks, and every change goes through ``_move``, which checks
:data:`TRANSITIONS`; any other move raises :class:`IllegalTurnTransition` (a bug in the caller).

Some decisions wait for an ``await`` of the session, so what happens in between sees the
machine as it was: a window is two steps (``heard``: the reply under the caller's speech,
interrupted maybe; then ``pausing``: preemption), and so is a turn's end (``turn_ended``:
a backchannel, or ``ENDING``; then, once ``SpeechStopped`` is sent, ``answer`` and
``answered``), so until then the held reply is still held, and a client's command or the
call closing still reaches it. A new reply is started by the session, which tells the
machine (``held_started``, ``answered``, ``reply_started``). Whether a reply is *speaking*
is the reply's own business (its :class:`~voxpipe.conversation.reply_status.ReplyStatus`):
this machine asks, rather than keep a copy that a reply ending by itself would make stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Generic, Protocol, TypeVar

from voxpipe.config import TurnConfig

RESUME_AFTER_SILENCE_MS = 96  # a backchannel is over once it has been silent this long


class Speaker(Protocol):
    """What turn-taking asks of a reply (a :class:`~voxpipe.conversation.reply.Reply`)."""

    @property
    def active(self) -> bool: ...  # its work is neither done nor cancelled

    @property
    def respond(self) -> bool: ...  # False: it only transcribes, and says nothing


R = TypeVar("R", bound=Speaker)


class TurnState(StrEnum):
    LISTENING = "listening"  # no caller speech: between turns (a reply may be playing)
    CALLER_SPEAKING = "caller_speaking"  # the caller's turn
    # The caller's speech began over a playing reply, which waits paused: a backchannel,
    # or a barge-in once it has lasted min_interruption_ms.
    OVERLAPPING = "overlapping"
    PREEMPTING = "preempting"  # the caller pauses mid-turn; a held reply answers the turn so far
    # Both: the caller's speech began over a reply that has since ended by itself, and has
    # lasted long enough to be a turn. A reply the client starts now is still barged in on.
    OVERLAP_PREEMPTING = "overlap_preempting"
    ENDING = "ending"  # the turn has ended: its answer (the held reply, or a new one) is due


class Trigger(StrEnum):
    """What the session tells the machine: one method of :class:`TurnTaking` each."""

    SPEECH_BEGAN = "speech_began"
    HEARD = "heard"  # a window of the caller's speech: the reply under it
    WORDS_INTERRUPT = "words_interrupt"  # the words of speech over a reply ask for the floor
    PAUSING = "pausing"  # the same window, once any barge-in is done: preemption
    HELD_STARTED = "held_started"
    TURN_ENDED = "turn_ended"
    ANSWER = "answer"  # SpeechStopped is out: confirm the held reply, or not
    ANSWERED = "answered"  # a new reply answers the turn
    REPLY_STARTED = "reply_started"  # the client asked for a reply, or committed its audio
    RESET = "reset"  # the caller's speech in progress is forgotten (a new turn detector)
    DROP_HELD = "drop_held"  # turns are no longer answered unasked (auto_respond off)


S = TurnState  # short, for the table below
_SPEECH = (S.CALLER_SPEAKING, S.OVERLAPPING, S.PREEMPTING, S.OVERLAP_PREEMPTING)


def _moves(**to: frozenset[TurnState] | TurnState) -> dict[Trigger, frozenset[TurnState]]:
    return {
        Trigger(name): states if isinstance(states, frozenset) else frozenset({states})
        for name, states in to.items()
    }


def _either(*states: TurnState) -> frozenset[TurnState]:
    return frozenset(states)


# state -> trigger -> the states it may lead to (the module docstring says why each exists)
TRANSITIONS: Mapping[TurnState, Mapping[Trigger, frozenset[TurnState]]] = {
    S.LISTENING: _moves(
        speech_began=_either(S.CALLER_SPEAKING, S.OVERLAPPING),
        reply_started=S.LISTENING,
        reset=S.LISTENING,
        drop_held=S.LISTENING,
    ),
    S.CALLER_SPEAKING: _moves(
        heard=S.CALLER_SPEAKING,
        pausing=S.CALLER_SPEAKING,
        held_started=S.PREEMPTING,
        turn_ended=S.ENDING,
        reply_started=S.CALLER_SPEAKING,
        reset=S.LISTENING,
        drop_held=S.CALLER_SPEAKING,
    ),
    S.OVERLAPPING: _moves(
        heard=_either(S.OVERLAPPING, S.CALLER_SPEAKING),  # the latter: barge-in
        words_interrupt=S.CALLER_SPEAKING,
        pausing=S.OVERLAPPING,
        held_started=S.OVERLAP_PREEMPTING,
        turn_ended=_either(S.LISTENING, S.ENDING),  # the former: a backchannel
        reply_started=S.OVERLAPPING,
        reset=S.LISTENING,
        drop_held=S.OVERLAPPING,
    ),
    S.PREEMPTING: _moves(
        heard=S.PREEMPTING,
        pausing=_either(S.PREEMPTING, S.CALLER_SPEAKING),  # the latter: speech resumed
        turn_ended=S.ENDING,
        reply_started=S.PREEMPTING,
        reset=S.LISTENING,
        drop_held=S.CALLER_SPEAKING,
    ),
    S.OVERLAP_PREEMPTING: _moves(
        heard=_either(S.OVERLAP_PREEMPTING, S.PREEMPTING),
        words_interrupt=S.PREEMPTING,
        pausing=_either(S.OVERLAP_PREEMPTING, S.OVERLAPPING),
        # A backchannel only if min_interruption_ms grew during the speech.
        turn_ended=_either(S.LISTENING, S.ENDING),
        reply_started=S.OVERLAP_PREEMPTING,
        reset=S.LISTENING,
        drop_held=S.OVERLAPPING,
    ),
    S.ENDING: _moves(
        answer=_either(S.LISTENING, S.ENDING),  # the former: the held reply is the answer
        answered=S.LISTENING,
        # Only when the end of the last turn failed halfway (a send raised): its held reply
        # is still held, and the new speech discards it, as any speech after a pause does.
        speech_began=_either(*_SPEECH),
        reply_started=S.ENDING,
        reset=S.ENDING,  # the turn has ended already: it is answered all the same
        drop_held=S.ENDING,
    ),
}


class IllegalTurnTransition(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow: the caller has a bug."""


class Yield(Enum):
    """What the reply playing under the caller's speech does."""

    PAUSE = "pause"  # the caller is audibly speaking: hold the audio
    RESUME = "resume"  # silent a while: only a backchannel so far, play on
    INTERRUPT = "interrupt"  # long enough to be a turn: barge-in


@dataclass(frozen=True)
class Overlap(Generic[R]):
    action: Yield
    reply: R


@dataclass(frozen=True)
class Preemption(Generic[R]):
    start: bool = False  # start a held reply now, on the turn so far (then held_started)
    discarded: R | None = None  # the held reply to discard: the pause is over


@dataclass(frozen=True)
class TurnEnd(Generic[R]):
    backchannel: bool  # not a turn: nothing is answered
    speaking: R | None  # the reply speaking as the turn ended: resumed, or interrupted
    discarded: R | None = None  # a backchannel's held reply, to discard


@dataclass(frozen=True)
class Answer(Generic[R]):
    confirm: R | None = None  # the held reply answers the turn: confirm it
    interrupt: R | None = None  # else interrupt this one first, then start the answer


@dataclass(frozen=True)
class Forgotten(Generic[R]):
    discarded: R | None  # the held reply, to discard
    resume: R | None  # the reply speaking, paused for speech that is now forgotten


class TurnTaking(Generic[R]):
    """The floor between the caller and the replies. ``config`` may be replaced at any
    time (it is read at each decision); nothing else here is written from outside."""

    def __init__(self, config: TurnConfig) -> None:
        self.config = config
        self._state = TurnState.LISTENING
        self._reply: R | None = None
        self._held: R | None = None

    @property
    def state(self) -> TurnState:
        return self._state

    @property
    def reply(self) -> R | None:
        """The latest reply started for the conversation: speaking, or done."""
        return self._reply

    @property
    def held(self) -> R | None:
        """The preemptive reply waiting for the end of the turn (PREEMPTING, or ENDING
        until it is answered)."""
        return self._held

    def speaking(self) -> R | None:
        """The latest reply, while it is working on something to say."""
        reply = self._reply
        return reply if reply is not None and reply.active and reply.respond else None

    def overlapped(self) -> R | None:
        """The reply that the caller's speech, if it began now, would pause (barge-in)."""
        return self.speaking() if self.config.interrupt else None

    def _move(self, trigger: Trigger, to: TurnState) -> None:
        """The one place the state changes: checked first, so a refused move changes nothing."""
        if to not in TRANSITIONS[self._state].get(trigger, ()):
            raise IllegalTurnTransition(
                f"{trigger} cannot move turn-taking from {self._state} to {to}"
            )
        self._state = to

    def _overlapping(self) -> bool:
        return self._state in (S.OVERLAPPING, S.OVERLAP_PREEMPTING)

    @staticmethod
    def _in_speech(overlapping: bool, held: bool) -> TurnState:
        if held:
            return S.OVERLAP_PREEMPTING if overlapping else S.PREEMPTING
        return S.OVERLAPPING if overlapping else S.CALLER_SPEAKING

    # -- the caller's speech --------------------------------------------------

    def speech_began(self) -> R | None:
        """The caller began a turn. Returns the reply it overlaps (pause it first, then
        tell the client: a barge-in is timed from here), if any."""
        over = self.overlapped()
        self._move(Trigger.SPEECH_BEGAN, self._in_speech(over is not None, self._held is not None))
        return over

    def heard(self, loud: bool, speech_ms: float, silence_ms: float) -> Overlap[R] | None:
        """A window of the caller's turn (``loud``: at or above the speech threshold). A
        reply it overlaps is paused while the caller speaks, resumed after a short
        silence, and interrupted once the speech has lasted ``min_interruption_ms``."""
        speaking = self.speaking()
        overlap: Overlap[R] | None = None
        to = self._state
        if self._overlapping() and speaking is not None:
            if speech_ms >= self.config.min_interruption_ms:
                overlap = Overlap(Yield.INTERRUPT, speaking)
                to = self._in_speech(False, self._held is not None)
            elif loud:
                overlap = Overlap(Yield.PAUSE, speaking)
            elif silence_ms >= RESUME_AFTER_SILENCE_MS:
                overlap = Overlap(Yield.RESUME, speaking)
        self._move(Trigger.HEARD, to)
        return overlap

    def short_overlap(self) -> bool:
        """The caller's speech is over a reply and not yet long enough to interrupt it."""
        return self._overlapping() and self.speaking() is not None

    def interrupted_by_words(self) -> R | None:
        """Speech over a reply, still under ``min_interruption_ms``, asked for the floor in
        words ("Wait, stop."): a barge-in now, and a turn whatever its length. Returns the
        reply to interrupt (None if none is speaking)."""
        speaking = self.speaking()
        self._move(Trigger.WORDS_INTERRUPT, self._in_speech(False, self._held is not None))
        return speaking

    def pausing(self, speech_ms: float, silence_ms: float, may_hold: bool) -> Preemption[R]:
        """The caller's silence so far (0 while speaking), once any barge-in of this window
        is done. After ``preempt_ms`` of it a held reply starts on the turn so far (if
        ``may_hold``: turns are answered without being asked), unless the speech is still
        only a backchannel over a reply; any sound (above ``release_threshold``) ends the
        pause and discards the held reply."""
        cfg, held = self.config, self._held
        if held is not None and (cfg.preempt_ms is None or silence_ms < cfg.preempt_ms):
            self._move(Trigger.PAUSING, self._in_speech(self._overlapping(), False))
            self._held = None
            return Preemption(discarded=held)
        self._move(Trigger.PAUSING, self._state)
        start = (
            held is None
            and may_hold
            and cfg.preempt_ms is not None
            and silence_ms >= cfg.preempt_ms
            and not (self._overlapping() and speech_ms < cfg.min_interruption_ms)
        )
        return Preemption(start=start)

    def held_started(self, reply: R) -> None:
        """The session started the held reply that :meth:`pausing` asked for."""
        self._move(Trigger.HELD_STARTED, self._in_speech(self._overlapping(), True))
        self._held = reply

    def turn_ended(self, speech_ms: float) -> TurnEnd[R]:
        """The caller's turn ended after ``speech_ms`` of speech. Speech that began over a
        reply and stayed under ``min_interruption_ms`` is a backchannel or a cough: not a
        turn, and the reply plays on. Else the turn is ENDING until it is answered."""
        speaking, held = self.speaking(), self._held
        if self._overlapping() and speech_ms < self.config.min_interruption_ms:
            self._move(Trigger.TURN_ENDED, S.LISTENING)
            self._held = None
            return TurnEnd(True, speaking, held)
        self._move(Trigger.TURN_ENDED, S.ENDING)
        return TurnEnd(False, speaking)

    def answer(self, end: TurnEnd[R]) -> Answer[R]:
        """Answer the turn that ``end`` ended: with the held reply if it is still working
        (it becomes the latest reply), else with a new one (then :meth:`answered`), after
        interrupting the reply that was speaking, unless interruptions are off. A held
        reply no longer working is let go."""
        held = self._held
        if held is not None and held.active:
            self._move(Trigger.ANSWER, S.LISTENING)
            self._held, self._reply = None, held
            return Answer(confirm=held)
        self._move(Trigger.ANSWER, S.ENDING)
        self._held = None
        return Answer(interrupt=end.speaking if self.config.interrupt else None)

    def answered(self, reply: R) -> None:
        """The session started the reply that answers the turn."""
        self._move(Trigger.ANSWERED, S.LISTENING)
        self._reply = reply

    # -- the session's own changes --------------------------------------------

    def reply_started(self, reply: R) -> None:
        """A reply the client asked for (or a commit, transcribed only): the latest reply
        now, whatever the caller is doing."""
        self._move(Trigger.REPLY_STARTED, self._state)
        self._reply = reply

    def reset(self) -> Forgotten[R]:
        """The caller's speech in progress is forgotten (a new turn detector): no held
        reply, and the reply it paused plays on."""
        held = self._held
        self._move(Trigger.RESET, S.ENDING if self._state is S.ENDING else S.LISTENING)
        self._held = None
        return Forgotten(held, self.speaking())

    def drop_held(self) -> R | None:
        """Turns are no longer answered without being asked: returns the held reply, to
        discard."""
        held, to = self._held, self._state
        if to is S.PREEMPTING:
            to = S.CALLER_SPEAKING
        elif to is S.OVERLAP_PREEMPTING:
            to = S.OVERLAPPING
        self._move(Trigger.DROP_HELD, to)
        self._held = None
        return held
