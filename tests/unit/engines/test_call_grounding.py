"""A lookup's call is kept only if the caller said its arguments (``call_grounding.py``)."""

from __future__ import annotations

import pytest

from voxpipe.engines.call_grounding import (
    arguments_said,
    open_value_parts,
    said_so_far,
    said_words,
)


@pytest.mark.parametrize(
    ("words", "arguments"),
    [
        ("Are you open on Tuesdays?", {"day": "tuesday"}),
        ("Are you open tonight?", {"day": "today"}),
        ("A table for four at half past seven", {"party_size": 4, "time": "7:30 pm"}),
        ("Any room for two at eight?", {"party_size": 2.0, "time": "20:00"}),
        ("Is Doctor Patel free at nine thirty?", {"doctor": "Patel", "time": "09:30"}),
        ("What's the status of ticket 5821?", {"ticket_number": 5821}),
        ("From the train station to the airport", {"pickup": "Train Station", "to": "Airport"}),
        ("My name is Lee.", {"name": "Lee", "doctor": None, "urgent": False}),
        ("Lunch at noon", {"time": "12 pm"}),
    ],
)
def test_what_the_caller_said_is_said(words: str, arguments: dict[str, object]) -> None:
    assert arguments_said(arguments, said_words(words))


@pytest.mark.parametrize(
    ("words", "arguments"),
    [
        ("Are you open on Monday?", {"date": "today", "time": "12:00 pm", "party_size": 10**15}),
        ("What day is my appointment? The name is Rossi.", {"day": "today", "doctor": "Rossi"}),
        ("Okay, goodbye.", {"day": "today"}),
        ("He was not an ill-disposed young man.", {"name": "man", "day": "friday"}),
        ("When are you open?", {}),
        ("When are you open?", {"day": None}),
        ("Ticket 5821, please.", {"ticket_number": 5812}),
        ("For six at one", {"party_size": 6, "tags": ["one", "window"]}),
    ],
)
def test_a_value_the_caller_never_said_is_not(words: str, arguments: dict[str, object]) -> None:
    assert not arguments_said(arguments, said_words(words))


@pytest.mark.parametrize(
    ("written", "parts"),
    [
        ('{"date": "2023-1', ["2023"]),  # the year is finished, the month may grow
        ('{"date": "2023', []),
        ('{"date": "', []),
        ('{"da', []),  # a key, not a value
        ('{"date": "2023-10-20", "time": "19', []),
        ('{"pickup": "the train st', ["train"]),  # "the" need not have been said
        ('{"names": ["Dash", "Nor', []),
        ('{"a": {"b": "x y', ["x"]),
        ('{"q": "say \\"hi\\" th', ["say", "hi"]),
        ('{"q": "a\\nb c', ["b"]),  # read as the value reads: "a", a line, "b"
        ('{"name": "Jos\\u00e9 Ga', ["jos"]),
        ('{"name": "Gar\\u00', []),  # an escape cut short: the word may still grow
        ('{"n": 12', []),  # a number is finished only when the value is
        ('{"date": "2023-10-20"}', []),  # nothing open
    ],
)
def test_the_finished_parts_of_a_value_still_being_written(written: str, parts: list[str]) -> None:
    assert open_value_parts(written) == parts


def test_a_call_is_unsaid_at_the_first_finished_part_nobody_said() -> None:
    """A read sentence taken for a request: the made-up date is known by its year, before
    the model writes the rest of it, with the same verdict as on the whole call."""
    heard = said_words("He was not an ill-disposed young man.")
    assert said_so_far('{"date": "2026', heard)
    assert not said_so_far('{"date": "2026-', heard)
    assert not arguments_said({"date": "2026-12-08"}, heard)
    asked = said_words("Is Doctor Patel free at nine thirty?")
    assert said_so_far('{"doctor": "Patel", "time": "09:', asked)
    assert said_so_far('{"doctor": "Patel", "time": "09:30"}', asked)
    assert not said_so_far('{"doctor": "Patel", "time": "10:', asked)
    assert not said_so_far('{"doctor": "Khan", "time": "09', asked)
