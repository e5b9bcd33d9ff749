"""Sampling one sequence's next token from its logits, in numpy.

A batched decode gives every sequence its own row of logits, and each sequence keeps its
own settings and random state; llama.cpp's sampler chain is built for one sequence, so the
batching engine samples here instead, in llama.cpp's order: repeat penalty over the last
``penalty_last_n`` tokens, top-k, top-p, min-p, temperature (or the argmax at temperature
0). One call costs about a millisecond over a vocabulary of 151k tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.3
    top_p: float = 0.9
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    penalty_last_n: int = 64


class TokenSampler:
    """One reply's sampler: its settings and its own seeded random state."""

    def __init__(self, settings: SamplingSettings, seed: int) -> None:
        self.settings = settings
        self._rng = np.random.default_rng(seed)

    def sample(self, logits: np.ndarray, recent: Sequence[int]) -> int:
        """``logits``: float32 over the vocabulary (changed in place); ``recent``: the
        tokens generated so far, for the repeat penalty."""
        s = self.settings
        if s.repeat_penalty != 1.0 and recent:
            seen = np.unique(np.asarray(recent[-s.penalty_last_n :], dtype=np.intp))
            values = logits[seen]
            logits[seen] = np.where(
                values > 0, values / s.repeat_penalty, values * s.repeat_penalty
            )
        if s.temperature <= 0.0:
            return int(np.argmax(logits))
        k = min(s.top_k, logits.shape[0]) if s.top_k > 0 else logits.shape[0]
        top = np.argpartition(logits, -k)[-k:]
        top = top[np.argsort(logits[top])[::-1]]
        kept = logits[top].astype(np.float64)
        if not np.isfinite(kept[0]):
            return int(top[0])
        probs = np.exp(kept - kept[0])
        probs /= probs.sum()
        cut = int(np.searchsorted(np.cumsum(probs), s.top_p)) + 1  # smallest set reaching p
        n = max(1, min(cut, len(top)))
        if s.min_p > 0.0:
            n = max(1, min(n, int(np.sum(probs[:n] >= s.min_p * probs[0]))))
        scaled = kept[:n] / s.temperature
        weights = np.exp(scaled - scaled[0])
        weights /= weights.sum()
        return int(top[self._rng.choice(n, p=weights)])
