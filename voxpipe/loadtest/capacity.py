"""The search for the most concurrent calls that still meet the latency SLO.

Doubling (1, 2, 4, ...) until a step fails, then bisecting between the last
pass and the first failure: about 2·log2(capacity) steps instead of one per
call count. It assumes latency grows with load; when noise makes a step
disagree with that, the search trusts the bracket it already has (a pass
only raises the lower bound, a failure only lowers the upper one).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CapacitySearch:
    """Ask ``next_calls()`` what to run, tell ``record()`` whether it met the SLO."""

    max_calls: int = 64
    lo: int = 0  # the most calls known to pass (0: none yet)
    hi: int | None = None  # the fewest calls known to fail (None: none yet)
    tried: list[tuple[int, bool]] = field(default_factory=list)

    def next_calls(self) -> int | None:
        """The call count to try next, or None when the capacity is known."""
        if self.hi is None:
            if self.lo >= self.max_calls:
                return None
            return min(self.max_calls, max(1, self.lo * 2))
        if self.hi - self.lo <= 1:
            return None
        return (self.lo + self.hi) // 2

    def record(self, calls: int, passed: bool) -> None:
        self.tried.append((calls, passed))
        if passed:
            self.lo = max(self.lo, calls)
            if self.hi is not None and self.hi <= self.lo:
                self.hi = self.lo + 1  # a noisy pass above an earlier failure
        else:
            self.hi = calls if self.hi is None else min(self.hi, calls)
            if self.hi <= self.lo:
                self.lo = self.hi - 1  # a noisy failure below an earlier pass

    @property
    def capacity(self) -> int:
        """The largest call count that met the SLO (0: even one call did not)."""
        return self.lo

    @property
    def capped(self) -> bool:
        """The search stopped at ``max_calls`` without finding a failure."""
        return self.hi is None and self.lo >= self.max_calls
