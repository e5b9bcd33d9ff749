"""Keypad digits (DTMF) as the caller's turn.

A phone caller types a number, an account or a menu choice on the keypad; the agent gets
the digits as one message ("Keypad: 1234"), as it gets words. Digits gather until the
caller presses ``#``, stops for ``turn.keypad_idle_ms``, or reaches
``turn.keypad_max_digits`` (the bound: a stuck key cannot grow the buffer). The clock is
the call's audio samples, not wall time: a phone line sends audio all the time, and the
same input makes the same turns.

:class:`Keypad` gathers the digits; :class:`KeypadTurns` (the session's ``keypad``) makes
them the caller's turn.
"""

from __future__ import annotations

from collections import Counter

from voxpipe.config import TurnConfig
from voxpipe.conversation.client_commands import ClientCommands
from voxpipe.conversation.history import CallRecorder, History
from voxpipe.conversation.replies import Replies

TERMINATOR = "#"


class Keypad:
    def __init__(self, idle_ms: int, max_digits: int, rate: int = 16000) -> None:
        self._idle = idle_ms * rate // 1000
        self._max = max_digits
        self._digits: list[str] = []
        self._last = 0  # the sample clock at the latest key

    def press(self, digit: str, now: int) -> str | None:
        """A key at sample ``now``; the digits entered, when this key ends them."""
        self._last = now
        if digit != TERMINATOR:
            self._digits.append(digit)
        if digit == TERMINATOR or len(self._digits) >= self._max:
            return self._take() or None
        return None

    def due(self, now: int) -> str | None:
        """The digits entered, once the caller has pressed nothing for ``idle_ms``."""
        if self._digits and now - self._last >= self._idle:
            return self._take()
        return None

    @property
    def holding(self) -> bool:
        """Digits are entered and not yet taken."""
        return bool(self._digits)

    def _take(self) -> str:
        digits, self._digits = "".join(self._digits), []
        return digits


def keypad_message(digits: str) -> str:
    """The caller's digits as the agent reads them."""
    return f"Keypad: {digits}"


class KeypadTurns:
    """The caller's keys as turns of the call, on the clock of the call's inbound audio."""

    def __init__(
        self,
        replies: Replies,
        commands: ClientCommands,
        history: History,
        recorder: CallRecorder,
        counts: Counter[str],
        config: TurnConfig,
    ) -> None:
        """``commands`` says whether a turn starts a reply (a Realtime client may answer
        itself)."""
        self._replies, self._commands = replies, commands
        self._history, self._recorder, self._counts = history, recorder, counts
        self._keypad = Keypad(config.keypad_idle_ms, config.keypad_max_digits)
        # The keypad's clock: the call's inbound audio at 16 kHz, counted only while digits
        # wait for their end (:attr:`waiting`), which is all the idle rule reads.
        self._samples = 0
        self.waiting = False  # digits typed and not yet a turn: the session calls heard()

    async def pressed(self, digit: str) -> None:
        """A keypad key (DTMF: 0-9, *, #, A-D) from the phone line."""
        self._counts["dtmf"] += 1
        digits = self._keypad.press(digit, self._samples)
        self.waiting = self._keypad.holding
        if digits is not None:
            await self._entered(digits)

    async def heard(self, samples: int) -> None:
        """``samples`` more of the caller's audio (16 kHz) while :attr:`waiting`: the digits
        typed end once the caller has pressed nothing for ``turn.keypad_idle_ms``."""
        self._samples += samples
        digits = self._keypad.due(self._samples)
        self.waiting = self._keypad.holding
        if digits is not None:
            await self._entered(digits)

    async def _entered(self, digits: str) -> None:
        """The caller typed ``digits``: a turn of its own, answered like words. A reply
        still speaking stops first, as for a barge-in: a caller keying over a menu has
        heard enough of it."""
        replies = self._replies
        self._counts["keypad_turns"] += 1
        speaking = replies.turns.speaking()
        if speaking is not None and replies.turns.config.interrupt:
            await replies.interrupt(speaking)
            await speaking.wait()  # what was heard of it goes into the history first
        text = keypad_message(digits)
        self._history.add_user(text)
        self._recorder.message(replies.last_turn_id + 1, "user", text)
        if self._commands.auto_respond:
            replies.respond()
