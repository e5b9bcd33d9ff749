"""Who computes on the embedded model's cores now: the batch loop one step at a time, or an
exclusive job (a request on the solo context, clearing the caches) for its whole length."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ComputeTurns:
    """Who computes now: the batch loop one step at a time, or an exclusive job for its whole
    length. An exclusive job waiting goes before the loop's next step, so it never starves;
    two exclusive jobs take turns."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._exclusive_waiting = 0

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._exclusive_waiting += 1
            while self._busy:
                self._cond.wait()
            self._exclusive_waiting -= 1
            self._busy = True
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """A batch step, or a chunk of speculative work (a warm): after every exclusive job
        already waiting."""
        with self._cond:
            while self._busy or self._exclusive_waiting:
                self._cond.wait()
            self._busy = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()
