"""The caller's words, as a small model passes them on, become the values a tool acts on."""

from __future__ import annotations

import datetime as dt

import pytest
from normalize import (
    Unreadable,
    normalize_arguments,
    parse_date,
    parse_day,
    parse_name,
    parse_party_size,
    parse_time,
)

from tests.unit.examples.conftest import TODAY


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("today", TODAY),
        ("tonight", TODAY),
        ("Tonight.", TODAY),
        ("this evening", TODAY),
        ("tomorrow", TODAY + dt.timedelta(days=1)),
        ("tomorrow night", TODAY + dt.timedelta(days=1)),
        ("the day after tomorrow", TODAY + dt.timedelta(days=2)),
        ("Thursday", TODAY),  # a weekday is the next one, today included
        ("next Thursday", TODAY + dt.timedelta(days=7)),
        ("Friday", dt.date(2026, 3, 13)),
        ("this Saturday", dt.date(2026, 3, 14)),
        ("on sunday", dt.date(2026, 3, 15)),
        ("Wednesday", dt.date(2026, 3, 18)),
        ("fri", dt.date(2026, 3, 13)),
        ("2026-04-01", dt.date(2026, 4, 1)),
        ("March 20th", dt.date(2026, 3, 20)),
        ("the 2nd of April", dt.date(2026, 4, 2)),
        ("1 March", dt.date(2027, 3, 1)),  # passed this year: next year's
    ],
)
def test_dates(said: str, expected: dt.date) -> None:
    assert parse_date(said) == expected


@pytest.mark.parametrize("said", ["", "blue", "2026-02-30", "someday soon", "31 June"])
def test_an_unreadable_date_says_so(said: str) -> None:
    with pytest.raises(Unreadable, match="date"):
        parse_date(said)


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("7", "19:00"),
        (7, "19:00"),
        ("seven", "19:00"),
        ("Seven o'clock", "19:00"),
        ("7pm", "19:00"),
        ("7 p.m.", "19:00"),
        ("7 PM", "19:00"),
        ("19:00", "19:00"),
        ("19.30", "19:30"),
        ("1930", "19:30"),
        ("7:30", "19:30"),
        ("seven thirty", "19:30"),
        ("half past seven", "19:30"),
        ("quarter past eight", "20:15"),
        ("quarter to eight", "19:45"),
        ("8 tonight", "20:00"),
        ("at 6", "18:00"),
        ("noon", "12:00"),
        ("12", "12:00"),
        ("12:30", "12:30"),
        ("1pm", "13:00"),
        ("one", "13:00"),
        ("11 am", "11:00"),
        ("9 in the morning", "09:00"),
    ],
)
def test_times(said: str | int, expected: str) -> None:
    value = parse_time(said)
    assert f"{value.hour:02d}:{value.minute:02d}" == expected


@pytest.mark.parametrize("said", ["", "blue", "25:00", "seven-ish maybe later"])
def test_an_unreadable_time_says_so(said: str) -> None:
    with pytest.raises(Unreadable):
        parse_time(said)


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        (2, 2),
        ("2", 2),
        ("two", 2),
        ("two people", 2),
        ("a party of four", 4),
        ("table for 6", 6),
        ("a couple", 2),
        ("just me", 1),
        (3.0, 3),
    ],
)
def test_party_sizes(said: object, expected: int) -> None:
    assert parse_party_size(said) == expected


@pytest.mark.parametrize("said", ["lots", True, "", 2.5])
def test_an_unreadable_party_size_says_so(said: object) -> None:
    with pytest.raises(Unreadable, match="number of people"):
        parse_party_size(said)


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("Smith", "Smith"),
        ("smith", "Smith"),
        ("SMITH", "Smith"),
        ("Mr. Smith", "Smith"),
        ("the name is Jones", "Jones"),
        ("under Garcia", "Garcia"),
        ("anna rossi", "Anna Rossi"),
        ("McDonald", "McDonald"),
    ],
)
def test_names(said: str, expected: str) -> None:
    assert parse_name(said) == expected


def test_an_empty_name_is_refused() -> None:
    with pytest.raises(Unreadable, match="name"):
        parse_name("Mr.")


def test_days() -> None:
    assert parse_day("tomorrow") == "Friday"
    assert parse_day("2026-03-16") == "Monday"


def test_arguments_are_compared_in_the_form_the_tool_acts_on() -> None:
    loose = {"name": "mr smith", "date": "tonight", "time": "7pm", "party_size": "two"}
    exact = {"name": "Smith", "date": "2026-03-12", "time": "19:00", "party_size": 2}
    assert normalize_arguments("book_table", loose) == normalize_arguments("book_table", exact)
    assert normalize_arguments("book_table", exact) == exact


def test_an_unreadable_argument_is_kept_as_given() -> None:
    assert normalize_arguments("x", {"time": "blue", "day": None, "other": 3}) == {
        "time": "blue",
        "day": None,
        "other": 3,
    }
