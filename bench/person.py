"""A caller that takes turns like a person on the phone, for ``python -m bench caller``.

A person says something, then waits. When the agent's voice comes, they listen
until it has played out, pause briefly and say the next thing. When the line
stays quiet for :data:`GAP_MS` (after their own last word, or after the last
thing the agent said: a filler "One moment." and then nothing) they take it
that the agent is done or has gone quiet, and talk. That is how a late answer
loses in real calls: it arrives while the caller is already speaking. A
benchmark whose caller waits politely for every reply cannot see that.

The state machine is pure and clocked by the caller's monotonic nanoseconds:
the driver tells it what it heard and asks it when to speak, so it is tested
on recorded timelines without a server. Only the caller's senses feed it (what
plays on its speaker, and whether the agent has finished its turn), never the
server's opinion of which audio is a filler.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

GAP_MS = 1500  # quiet after which the person talks anyway
PAUSE_MS = 300  # the person's pause after an answer has played out


class Phase(Enum):
    SPEAKING = "speaking"  # its own sentence is going out
    WAITING = "waiting"  # said it; no reply audio yet
    LISTENING = "listening"  # reply audio has come (it may be playing, or the line gone quiet)


class Why(Enum):
    """Why the person started its next sentence."""

    ANSWERED = "answered"  # the reply was done and had played out; then a short pause
    QUIET = "quiet"  # GAP_MS without reply audio, the reply not known to be done


@dataclass(frozen=True)
class Speak:
    at_ns: int  # when the person decides to talk
    why: Why
    heard_audio: bool  # whether any reply audio came since its last word


class Person:
    """One caller's turn-taking; the driver owns it and is the only one to change it."""

    def __init__(self, gap_ms: int = GAP_MS, pause_ms: int = PAUSE_MS) -> None:
        self.gap_ns = gap_ms * 1_000_000
        self.pause_ns = pause_ms * 1_000_000
        self.phase = Phase.SPEAKING
        self._spoke_ns = 0  # its last word left
        self._playing_until_ns = 0  # the reply audio received so far has played by then
        self._heard = False
        self._done = False

    # -- what the caller senses ---------------------------------------------------

    def speaking(self) -> None:
        """It has started a sentence: whatever it hears now is talked over."""
        self.phase = Phase.SPEAKING
        self._heard = self._done = False

    def spoke(self, end_ns: int) -> None:
        """Its sentence's last loud sample left at ``end_ns``: now it waits for a reply."""
        self.phase = Phase.WAITING
        self._spoke_ns = end_ns
        self._playing_until_ns = min(self._playing_until_ns, end_ns)
        self._heard = self._done = False

    def hear(self, now_ns: int, playing_until_ns: int, new_audio: bool) -> None:
        """The speaker's state at ``now_ns``: it plays until ``playing_until_ns`` (``now_ns``
        when idle; earlier than before when the agent cleared it), and ``new_audio`` says
        reply audio came since the last call. Audio that came while the person was speaking
        was talked over."""
        if self.phase is Phase.SPEAKING:
            return
        if playing_until_ns > now_ns:
            self._playing_until_ns = playing_until_ns
        else:  # idle: the audio ended when it ended, or now if it was cut short
            self._playing_until_ns = min(self._playing_until_ns, now_ns)
        if new_audio:
            self._heard = True
            self.phase = Phase.LISTENING

    def reply_done(self) -> None:
        """The agent has finished its turn (it sends nothing more for this sentence)."""
        if self.phase is not Phase.SPEAKING:
            self._done = True

    # -- what it does -------------------------------------------------------------

    def quiet_since_ns(self) -> int:
        """Since when the line has been quiet for the person: its last word or the end of
        the last reply audio, whichever is later."""
        return max(self._spoke_ns, self._playing_until_ns)

    def due(self, now_ns: int) -> Speak | None:
        """Whether to start the next sentence now, and why; None: keep listening."""
        if self.phase is Phase.SPEAKING or now_ns < self._playing_until_ns:
            return None
        if self._done and self._heard and now_ns >= self._playing_until_ns + self.pause_ns:
            return Speak(now_ns, Why.ANSWERED, True)
        if now_ns >= self.quiet_since_ns() + self.gap_ns:
            return Speak(now_ns, Why.QUIET, self._heard)
        return None
