"""Keypad digits (DTMF) as the caller's turn.

A phone caller types a number, an account or a menu choice on the keypad; the agent gets
the digits as one message ("Keypad: 1234"), as it gets words. Digits gather until the
caller presses ``#``, stops for ``turn.keypad_idle_ms``, or reaches
``turn.keypad_max_digits`` (the bound: a stuck key cannot grow the buffer). The clock is
the call's audio samples, not wall time: a phone line sends audio all the time, and the
same input makes the same turns.
"""

from __future__ import annotations

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

    def _take(self) -> str:
        digits, self._digits = "".join(self._digits), []
        return digits


def keypad_message(digits: str) -> str:
    """The caller's digits as the agent reads them."""
    return f"Keypad: {digits}"
