from __future__ import annotations

import pytest

from voxpipe.config import TurnConfig
from voxpipe.conversation.turn_detector import Verdict
from voxpipe.conversation.turn_words import ends_unfinished, last_word, verdict

WORDS = TurnConfig().unfinished_words


@pytest.mark.parametrize(
    "text",
    [
        "I'd like a table for",
        "I need a taxi from the station to...",
        "Can you tell me when?",
        "I ordered a book last week and",
        "My name is, um",
        "Could I get THE",
    ],
)
def test_words_that_leave_the_sentence_open(text: str) -> None:
    assert ends_unfinished(text, WORDS)


@pytest.mark.parametrize(
    "text",
    [
        "I'd like a table for four people tonight.",
        "Yes, I do.",
        "Sorry, what?",
        "Can I come in?",
        "Thanks, goodbye.",
        "",
        "...",
    ],
)
def test_words_that_can_end_a_sentence(text: str) -> None:
    assert not ends_unfinished(text, WORDS)


def test_the_last_word_keeps_its_apostrophe_and_drops_punctuation() -> None:
    assert last_word("that's what I'd...") == "i'd"
    assert last_word("  'to'  ") == "to"
    assert last_word("") == ""


def test_the_words_compare_without_case() -> None:
    assert ends_unfinished("a table FOR", ["For"])


def _cfg(**update: float) -> TurnConfig:
    return TurnConfig(end_of_turn="smart_turn", **update)  # type: ignore[arg-type]


def test_words_that_need_more_are_unfinished_whatever_was_heard() -> None:
    assert verdict(True, True, 0.9, _cfg()) is Verdict.UNFINISHED
    assert verdict(False, True, 0.9, _cfg()) is Verdict.UNFINISHED


def test_the_llm_holds_a_complete_verdict_on_words_unlikely_to_end() -> None:
    cfg = _cfg(llm_turn_end_threshold=0.005)
    assert verdict(True, False, 0.001, cfg) is Verdict.UNFINISHED
    assert verdict(True, False, 0.2, cfg) is Verdict.COMPLETE
    assert verdict(True, False, None, cfg) is Verdict.COMPLETE  # not asked


def test_the_llm_ends_a_doubted_turn_on_words_clearly_ended() -> None:
    cfg = _cfg(llm_turn_complete_threshold=0.05)
    assert verdict(False, False, 0.3, cfg) is Verdict.LIKELY_COMPLETE
    assert verdict(False, False, 0.01, cfg) is Verdict.UNFINISHED
    assert verdict(False, False, None, cfg) is Verdict.UNFINISHED
    off = _cfg(llm_turn_complete_threshold=0.0)
    assert verdict(False, False, 0.9, off) is Verdict.UNFINISHED
