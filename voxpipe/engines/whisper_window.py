"""Fitted Whisper windows and the guards that make them safe; pure, no model.

Whisper was trained on 30 s windows and faster-whisper pads every utterance to
one, so a one-second "yes" costs as much encoder time as thirty seconds of
speech. CTranslate2's Whisper accepts shorter inputs, and a window fitted to
the utterance is several times cheaper. The window lengths come from a small
fixed set (buckets), so CTranslate2 sees few shapes and warm-up can visit each.

A short window can make the decoder loop: on a 1.1 s cards clip a 5 s window
decoded "10 of clubs" thirty times. Two guards catch it: the decode is capped
by a token budget derived from the audio's duration, and the output is scanned
for an n-gram repeated back to back. Either sends the audio through the next
longer bucket, and so on up to the full 30 s window (faster-whisper's own).

The price is accuracy at the margin: Whisper is most accurate in the window it
was trained on. On the single clips of the benchmark corpus the fitted window
makes no more word errors than the 30 s one, but on longer turns built from two
clips it made a few more (see docs/benchmarks.md); ``stt.window = "full"``
restores the 30 s window.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

FULL_WINDOW_S = 30.0  # Whisper's native window; the encoder's positions end here
# Measured with `python -m bench stt` on Debian's speech clips: a 5 s bucket looped on two of
# 19 clips (1.1 and 1.6 s of cards) and, on the clips as a phone delivers them (8 kHz mu-law),
# made more word errors than the 30 s window (ratio 1.14); 10 s looped on none of them and
# matched the 30 s window's word error rate.
WINDOW_BUCKETS_S: tuple[float, ...] = (10.0, 20.0, FULL_WINDOW_S)
WINDOW_MARGIN_S = 1.0  # silence kept after the audio inside its window
TOKENS_PER_S = 8.0  # decode budget: well above fast speech (~4-5 Whisper tokens per second)
TOKENS_BASE = 12  # plus this, for short clips of digits or punctuation-heavy text
REPEATS_FOR_RUNAWAY = 3  # the same n-gram this many times back to back
LONGEST_NGRAM = 8  # in words
_WORD = re.compile(r"[\w']+")


def choose_window(
    duration_s: float,
    buckets: Sequence[float] = WINDOW_BUCKETS_S,
    margin_s: float = WINDOW_MARGIN_S,
) -> float | None:
    """The shortest bucket holding the audio plus its margin, or the longest bucket that holds
    the audio itself; ``None`` when the audio is longer than every bucket (transcribe it the
    long-form way, window by window)."""
    for window in sorted(buckets):
        if duration_s + margin_s <= window:
            return window
    fitting = [w for w in buckets if duration_s <= w]
    return max(fitting) if fitting else None


def next_window(window: float, buckets: Sequence[float] = WINDOW_BUCKETS_S) -> float | None:
    """The next longer bucket after a runaway; ``None`` past the longest."""
    longer = [w for w in buckets if w > window]
    return min(longer) if longer else None


def max_new_tokens(duration_s: float) -> int:
    """How many tokens speech of this duration can plausibly need; a decode that reaches it is
    treated as a runaway."""
    return TOKENS_BASE + math.ceil(TOKENS_PER_S * max(0.0, duration_s))


def words_of(text: str) -> list[str]:
    """Lower-case words without punctuation: "Side left. Side left." repeats "side left"."""
    return [w.lower() for w in _WORD.findall(text)]


def repeated_ngram(
    words: Sequence[str],
    repeats: int = REPEATS_FOR_RUNAWAY,
    longest: int = LONGEST_NGRAM,
) -> tuple[str, ...] | None:
    """The first n-gram (n <= ``longest``) that occurs ``repeats`` times back to back, or
    ``None``. Whisper's loops are exactly that; ordinary speech rarely says a phrase three
    times in a row, and when it does the cost is one more pass in a longer window."""
    count = len(words)
    for n in range(1, longest + 1):
        for start in range(count - n * repeats + 1):
            gram = words[start : start + n]
            if all(words[start + k * n : start + (k + 1) * n] == gram for k in range(1, repeats)):
                return tuple(gram)
    return None


def is_runaway(text: str, tokens: int, budget: int) -> bool:
    """The decode hit its token budget or repeats itself."""
    return tokens >= budget or repeated_ngram(words_of(text)) is not None
