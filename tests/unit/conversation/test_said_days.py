"""The weekday a caller said, read from their words and put back where the model wrote
another day (``said_days.py``)."""

from __future__ import annotations

import datetime

import pytest

from voxpipe.conversation.said_days import coming, day_written_as, the_day_said

TODAY = datetime.date(2026, 12, 7)  # a Monday


@pytest.mark.parametrize(
    ("words", "day"),
    [
        ("Please book me a table for three on Friday at 730", "friday"),
        ("Are you open on Sundays?", "sunday"),
        ("Friday, or maybe Saturday", None),  # two days
        ("this Friday, the 11th", None),  # a date said too
        ("tomorrow, that's Tuesday", None),
        ("a table for two at seven", None),
        ("May I book Friday at seven?", "friday"),  # "may" is no month here
        ("on May 4th, a Friday", None),
    ],
)
def test_the_day_said(words: str, day: str | None) -> None:
    assert the_day_said(words) == day


def test_a_day_written_in_the_models_form() -> None:
    assert day_written_as("2023-10-20", "friday", TODAY) == "2026-12-11"
    assert day_written_as("20 October 2023", "friday", TODAY) == "11 December 2026"
    assert day_written_as("October 20", "friday", TODAY) == "December 11"
    assert day_written_as("Saturday", "friday", TODAY) == "Friday"
    assert day_written_as("saturday", "monday", TODAY) == "monday"
    assert day_written_as("friday", "friday", TODAY) is None
    assert day_written_as("next Friday", "friday", TODAY) is None
    assert day_written_as("2026-12-18", "friday", TODAY) is None  # a later Friday stands
    assert day_written_as("11 December", "friday", TODAY) is None
    assert day_written_as("7 pm", "friday", TODAY) is None
    assert day_written_as("December 18", "friday", TODAY) is None  # next Friday: the model's
    assert day_written_as("next saturday", "friday", TODAY) == "next friday"
    assert coming("monday", TODAY) == TODAY
