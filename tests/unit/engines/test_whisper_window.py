"""Fitted Whisper windows: the bucket choice, the token budget and the loop detector.

Pure functions, no model; tests/e2e/test_whisper_window.py runs them on real speech.
"""

from __future__ import annotations

from voxpipe.engines.whisper_window import (
    FULL_WINDOW_S,
    WINDOW_BUCKETS_S,
    WINDOW_MARGIN_S,
    choose_window,
    is_runaway,
    max_new_tokens,
    next_window,
    repeated_ngram,
    words_of,
)


def test_the_shortest_bucket_that_holds_the_audio_and_its_margin() -> None:
    assert WINDOW_BUCKETS_S == (10.0, 20.0, 30.0) and WINDOW_MARGIN_S == 1.0
    assert choose_window(0.0) == 10.0
    assert choose_window(1.1) == 10.0
    assert choose_window(9.0) == 10.0  # 9 s + 1 s margin fits exactly
    assert choose_window(9.01) == 20.0  # the margin would not fit
    assert choose_window(19.5) == 30.0
    assert choose_window(29.0) == 30.0


def test_audio_that_fills_the_last_bucket_goes_without_margin_and_longer_goes_long_form() -> None:
    assert choose_window(29.5) == FULL_WINDOW_S  # no margin left, but it still fits
    assert choose_window(30.0) == FULL_WINDOW_S
    assert choose_window(30.01) is None  # faster-whisper's window-by-window path


def test_buckets_and_margin_can_be_chosen_and_need_not_be_sorted() -> None:
    assert choose_window(1.0, buckets=(30.0, 5.0, 10.0)) == 5.0
    assert choose_window(4.5, buckets=(5.0, 10.0), margin_s=0.5) == 5.0
    assert choose_window(4.6, buckets=(5.0, 10.0), margin_s=0.5) == 10.0
    assert choose_window(11.0, buckets=(5.0, 10.0)) is None


def test_next_window_climbs_the_buckets_and_stops_after_the_last() -> None:
    assert next_window(10.0) == 20.0
    assert next_window(20.0) == 30.0
    assert next_window(30.0) is None
    assert next_window(5.0, buckets=(30.0, 10.0, 5.0)) == 10.0


def test_the_token_budget_grows_with_the_audio_and_covers_fast_speech() -> None:
    assert max_new_tokens(0.0) == 12
    assert max_new_tokens(1.1) == 12 + 9  # ceil(8.8)
    assert max_new_tokens(-1.0) == 12
    # The longest LibriVox sentence of the corpus (7.1 s) decodes to 26 tokens.
    assert max_new_tokens(7.1) >= 2 * 26
    assert max_new_tokens(1.0) < max_new_tokens(2.0) < max_new_tokens(10.0)


def test_words_ignore_case_and_punctuation_but_keep_apostrophes() -> None:
    assert words_of("Side left. Side, LEFT!") == ["side", "left", "side", "left"]
    assert words_of("We're right.") == ["we're", "right"]
    assert words_of("") == []


def test_a_phrase_three_times_in_a_row_is_a_loop() -> None:
    assert repeated_ngram(words_of("10 of clubs 10 of clubs 10 of clubs")) == ("10", "of", "clubs")
    assert repeated_ngram(words_of("Side left. Side left. Side left. Side")) == ("side", "left")
    assert repeated_ngram(words_of("5 5 5 5 5 5")) == ("5",)
    assert repeated_ngram(words_of("Side Right Right Right Right")) == ("right",)
    long_phrase = "he was not an ill disposed young man "
    assert repeated_ngram(words_of(long_phrase * 3)) is not None  # an 8-gram


def test_ordinary_speech_is_not_a_loop() -> None:
    for text in (
        "5 5",  # the cards clip "five five": twice is allowed
        "10 of clubs.",
        "Eight of spades, four of clubs, seven of hearts.",  # "of" recurs, but not back to back
        "He might even have been made amiable himself.",
        "no no",
        "",
    ):
        assert repeated_ngram(words_of(text)) is None, text


def test_repeats_threshold_and_longest_ngram_are_honoured() -> None:
    words = words_of("a b a b")
    assert repeated_ngram(words) is None
    assert repeated_ngram(words, repeats=2) == ("a", "b")
    nine = [str(i) for i in range(9)]
    assert repeated_ngram(nine * 3) is None  # a 9-gram is longer than the default
    assert repeated_ngram(nine * 3, longest=9) == tuple(nine)


def test_a_runaway_repeats_or_reaches_the_budget() -> None:
    assert is_runaway("10 of clubs 10 of clubs 10 of clubs", tokens=9, budget=21)
    assert is_runaway("a long but novel transcript", tokens=21, budget=21)
    assert not is_runaway("10 of clubs.", tokens=4, budget=21)
    assert not is_runaway("", tokens=0, budget=12)
