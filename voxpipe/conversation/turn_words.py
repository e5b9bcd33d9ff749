"""What the caller's words so far say about the end of their turn.

The turn model hears prosody alone. Over a phone line a caller pausing for a word often
sounds finished to it ("I need a taxi from the station to ..." was judged complete at every
pause length, docs/benchmarks.md), and a careful complete sentence can sound unfinished.
The words settle both: no sentence ends on "to", and "the problem is that my laptop" is
not a sentence either, which the LLM knows from the conversation. So the turn model's
verdict is checked against the transcript so far: a closed list of words that need more
(``turn.unfinished_words``), then the LLM's probability that the words end there.
"""

from __future__ import annotations

from collections.abc import Collection

from voxpipe.config import TurnConfig
from voxpipe.conversation.turn_detector import Verdict


def open_words(text: str) -> str:
    """A transcript so far without the stop Whisper puts at every pause: whether a stop
    belongs there, or what follows, is not known yet."""
    return text.rstrip(".?!,;:… ")


def last_word(text: str) -> str:
    """The last word of a transcript, lower-cased, without the punctuation Whisper adds
    ("to..." and "To?" are "to"); apostrophes stay ("I'd")."""
    for token in reversed(text.split()):
        word = "".join(ch for ch in token.lower() if ch.isalnum() or ch == "'").strip("'")
        if word:
            return word
    return ""


def ends_unfinished(text: str, unfinished_words: Collection[str]) -> bool:
    """True if ``text`` ends on a word no sentence ends on (``unfinished_words``, compared
    lower-cased). No words at all is not unfinished: there is nothing to wait for."""
    word = last_word(text)
    return bool(word) and word in {w.lower() for w in unfinished_words}


def verdict(
    model_complete: bool, words_unfinished: bool, p_end: float | None, cfg: TurnConfig
) -> Verdict:
    """The silence's verdict from the turn model's (``model_complete``), the words
    (``words_unfinished``: they end on one that needs more) and the LLM's probability that
    the words end the turn (``p_end``; None: not asked):

    * words that need more: unfinished, whatever the turn model heard;
    * the model heard an end: complete, unless the LLM finds the words unlikely to end
      there (below ``llm_turn_end_threshold``);
    * the model heard more to come: unfinished, unless the LLM finds the words clearly
      ended (``llm_turn_complete_threshold``): then likely complete, and the turn ends
      after ``silence_ms``, as it would without the model.
    """
    if words_unfinished:
        return Verdict.UNFINISHED
    if model_complete:
        if p_end is not None and p_end < cfg.llm_turn_end_threshold:
            return Verdict.UNFINISHED
        return Verdict.COMPLETE
    if (
        p_end is not None
        and cfg.llm_turn_complete_threshold
        and (p_end >= cfg.llm_turn_complete_threshold)
    ):
        return Verdict.LIKELY_COMPLETE
    return Verdict.UNFINISHED
