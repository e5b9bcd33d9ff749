"""ClauseChunker: where the streamed reply text is cut into clauses for TTS."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

import pytest

from voxpipe.config import ChunkerConfig
from voxpipe.conversation.spoken import ClauseChunker, clean_for_speech

# Five-word first phrases and clauses after them: the rules one at a time. The defaults
# (three-word first phrase, second phrase of eight words at most) have their own tests below.
CFG = ChunkerConfig(first_phrase_max_words=5, first_phrase_min_words=3, second_phrase_max_words=0)


def stream(deltas: Iterable[str], cfg: ChunkerConfig = CFG) -> list[str]:
    chunker = ClauseChunker(cfg)
    out: list[str] = []
    for delta in deltas:
        out += chunker.push(delta)
    return out + chunker.flush()


def tokens(text: str) -> list[str]:
    """Split like an LLM tokenizer does: words with their leading space, punctuation apart."""
    return re.findall(r" ?\w+|[^\w ]+| ", text)


def test_first_clause_is_released_at_the_first_comma() -> None:
    chunker = ClauseChunker(CFG)
    out: list[str] = []
    for token in tokens("Sure thing, I can help you with that"):
        out += chunker.push(token)
        if out:
            break
    # Released as soon as the space after the comma arrives: the caller hears audio early.
    assert out == ["Sure thing,"]


def test_a_comma_before_min_first_chars_does_not_end_the_first_clause() -> None:
    assert stream(tokens("Hi, there, my friend. Bye")) == ["Hi, there,", "my friend.", "Bye"]
    assert stream(tokens("Oh, I see. Bye")) == ["Oh, I see.", "Bye"]


def test_later_clauses_prefer_sentence_ends() -> None:
    text = (
        "Sure, I think so, but let me check. "
        "Your appointment is on Monday at nine in the morning, and it lasts an hour. Bye"
    )
    assert stream(tokens(text)) == [
        "Sure, I think so,",  # the first clause: the first comma past 8 characters
        "but let me check.",  # a short comma is no cut once the first clause is out
        "Your appointment is on Monday at nine in the morning,",  # past 40 characters: cut
        "and it lasts an hour.",
        "Bye",
    ]


def test_sentence_ends_with_closing_quotes_and_ellipses() -> None:
    assert stream(tokens('He said "no way!" Then, well… nothing.')) == [
        'He said "no way!"',
        "Then, well…",
        "nothing.",
    ]


def test_max_chars_forces_a_cut_at_a_space() -> None:
    cfg = CFG.model_copy(update={"max_chars": 20})
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    clauses = stream(tokens(" ".join(words)), cfg)
    assert clauses[0] == "alpha beta gamma"
    assert all(len(c) <= 20 for c in clauses), clauses
    assert " ".join(clauses).split() == words  # no word split or lost


def test_max_chars_cuts_a_word_with_no_space_at_all() -> None:
    cfg = CFG.model_copy(update={"max_chars": 20})
    assert stream(["x" * 45], cfg) == ["x" * 20, "x" * 20, "x" * 5]


def test_markdown_is_stripped() -> None:
    text = "**Sure**, here is `code` and [the docs](http://example.com/a_b). # Done _now_"
    clauses = stream(tokens(text))
    assert clauses == ["Sure,", "here is code and the docs.", "Done now"]
    assert clean_for_speech("> *a*  __b__\n\n~~c~~ | d") == "a b c d"


def test_unspeakable_clauses_are_skipped() -> None:
    # "*** ... !!!" is a sentence to the regex but has nothing to say: it is dropped.
    assert stream(tokens("Well then, *** ... !!! Right. ok")) == ["Well then,", "Right. ok"]
    assert stream(["*** "]) == []


def test_flush_returns_the_remainder_once() -> None:
    chunker = ClauseChunker(CFG)
    assert chunker.push("Okay then, so the answer is forty") == ["Okay then,"]
    assert chunker.flush() == ["so the answer is forty"]
    assert chunker.flush() == []
    assert ClauseChunker(CFG).flush() == []


TEXTS = [
    "Well, hello there. How are you today, my friend? I am fine.",
    "The meeting is at ten. Please bring the report and the slides for the review. Thanks!",
    "Absolutely. " + "word " * 50 + "end.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_any_streaming_split_gives_the_same_clauses(text: str) -> None:
    by_char = stream(text)
    assert stream(tokens(text)) == by_char
    rng = random.Random(7)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), 6))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert stream(pieces) == by_char


@pytest.mark.parametrize("text", TEXTS)
def test_token_stream_gives_the_same_clauses_as_one_push(text: str) -> None:
    assert stream(tokens(text)) == stream([text])


@pytest.mark.parametrize(
    "text",
    [
        "Sure thing, I can help you with that. Anything else?",
        "word " * 40 + "end. ok",
    ],
    ids=["comma-before-sentence-end", "sentence-end-past-max-chars"],
)
def test_one_push_with_a_comma_or_long_run_before_the_sentence_end(text: str) -> None:
    one = stream([text])
    assert one == stream(tokens(text))
    assert all(len(c) <= CFG.max_chars for c in one)


# -- the first phrase: what the caller waits for ---------------------------------------------


def first_chunk(text: str, cfg: ChunkerConfig = CFG) -> tuple[str, int]:
    """The first chunk, and how many tokens had arrived when it was released."""
    chunker = ClauseChunker(cfg)
    pieces = tokens(text)
    for n, token in enumerate(pieces, 1):
        if out := chunker.push(token):
            return out[0], n
    return chunker.flush()[0], len(pieces)


def test_a_long_sentence_with_no_comma_starts_with_a_phrase() -> None:
    text = "The restaurant opens every morning at nine and closes at ten in the evening."
    chunk, arrived = first_chunk(text)
    assert chunk == "The restaurant opens every morning"  # before "at": a natural break
    assert arrived == 6  # released as " at" begins: no need to wait for the sentence end
    assert stream(tokens(text)) == [
        "The restaurant opens every morning",
        "at nine and closes at ten in the evening.",
    ]


def test_a_phrase_ends_before_a_word_that_starts_a_new_one() -> None:
    assert first_chunk("I can book a table for you tonight.")[0] == "I can book a table"
    assert first_chunk("We would love to see you on Friday.")[0] == "We would love"
    # ... but not before one of the first words: a chunk of one or two words sounds clipped.
    assert first_chunk("And we have a table for four tonight.")[0] == "And we have a table"


def test_without_a_break_the_first_phrase_ends_after_max_words() -> None:
    chunk, arrived = first_chunk("Absolutely delightful evening specials tonight include risotto.")
    assert chunk == "Absolutely delightful evening specials tonight"
    assert len(chunk.split()) == CFG.first_phrase_max_words
    assert arrived <= 6 + 1  # five words, and the space-led token that shows the fifth ended


def test_a_short_answer_is_one_chunk_and_a_one_word_answer_is_kept() -> None:
    assert stream(tokens("Yes.")) == ["Yes."]
    assert stream(tokens("Yes, of course.")) == ["Yes, of course."]
    assert stream(tokens("Sure thing, I can help.")) == ["Sure thing,", "I can help."]


def test_only_the_first_chunk_is_a_phrase() -> None:
    text = "Of course. The restaurant opens every morning at nine and closes at ten in the evening."
    assert stream(tokens(text)) == [
        "Of course.",
        "The restaurant opens every morning at nine and closes at ten in the evening.",
    ]


def test_the_phrase_rule_can_be_turned_off() -> None:
    cfg = ChunkerConfig(first_phrase_max_words=0, second_phrase_max_words=0)
    text = "The restaurant opens every morning at nine and closes at ten in the evening."
    assert stream(tokens(text), cfg) == [text]


def test_phrases_do_not_depend_on_how_the_text_arrived() -> None:
    text = "We have tables for two at seven and at nine tonight, and the patio is open."
    by_token = stream(tokens(text))
    by_char = stream(list(text))
    assert by_token == by_char
    assert " ".join(by_token).split() == text.split()


def test_a_late_reply_cuts_its_first_phrase_short() -> None:
    text = "Our kitchen stays open until eleven tonight for every guest who calls ahead."
    chunker = ClauseChunker(CFG)
    chunker.hurry()
    first = chunker.push(text)[0]
    assert first == "Our kitchen stays"  # late_first_phrase_words, not the usual five
    assert stream(tokens(text))[0] == "Our kitchen stays open"  # before "until"


def test_by_default_a_short_first_phrase_and_a_bounded_second() -> None:
    """The defaults: the caller waits for three words, and the second chunk (written and
    synthesized while those play) is a phrase of eight words at most, not a whole clause."""
    cfg = ChunkerConfig()
    text = "He was not an unwell-disposed young man, which means he had a good chance."
    assert stream(tokens(text), cfg) == [
        "He was not",
        "an unwell-disposed young man,",  # a comma ends it, as it ends a first phrase
        "which means he had a good chance.",
    ]
    long = "The restaurant opens every single morning of the week at nine sharp for breakfast."
    assert stream(tokens(long), cfg) == [
        "The restaurant opens",
        "every single morning",  # before "of": a phrase starts there
        "of the week at nine sharp for breakfast.",
    ]
    unbroken = (
        "Absolutely wonderful delightful seasonal evening specials tonight include "
        "risotto pasta salad dessert coffee."
    )
    second = stream(tokens(unbroken), cfg)[1]
    assert len(second.split()) == cfg.second_phrase_max_words


def test_the_second_phrase_rule_can_be_turned_off() -> None:
    cfg = ChunkerConfig(second_phrase_max_words=0)
    text = "He was not an unwell-disposed young man, which means he had a good chance."
    assert stream(tokens(text), cfg) == [
        "He was not",
        "an unwell-disposed young man, which means he had a good chance.",
    ]
