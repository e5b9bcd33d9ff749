"""What Luigi's tools let the embedded model write: the day and time patterns of their schema
(which the call's grammar enforces) admit the words a host books with and nothing the tools
would read as another time, and every value they admit is one the normalisers read."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from agent import DAY_PATTERN, TIME_PATTERN
from normalize import MONTHS, WEEKDAYS, parse_date, parse_time

from tests.unit.examples.conftest import RESTAURANT
from voxpipe.agent import load_agent
from voxpipe.engines.qwen_tools import call_steps


@pytest.mark.parametrize(
    "said", ["today", "tonight", "Tomorrow", "friday", "next Wednesday", "14 march", "3 May"]
)
def test_the_day_pattern_admits_a_day_as_a_caller_says_it(said: str) -> None:
    assert re.search(DAY_PATTERN, said)


@pytest.mark.parametrize("said", ["2025-03-14", "03/14", "Friday 14", "soon", "", "fri"])
def test_the_day_pattern_refuses_dates_the_model_makes_up(said: str) -> None:
    assert not re.search(DAY_PATTERN, said)


@pytest.mark.parametrize("said", ["7 pm", "7pm", "8:15 pm", "12:30 pm", "noon", "10 PM"])
def test_the_time_pattern_admits_an_afternoon_or_evening_time(said: str) -> None:
    assert re.search(TIME_PATTERN, said)


@pytest.mark.parametrize("said", ["07:00", "19:00", "17:00", "7 am", "seven", "7", "13 pm"])
def test_the_time_pattern_refuses_a_morning_or_24_hour_time(said: str) -> None:
    """The forms a small model gets wrong: "seven" written as 07:00, or as 17:00."""
    assert not re.search(TIME_PATTERN, said)


def test_every_time_the_pattern_admits_is_read_as_the_hour_meant() -> None:
    pattern = TIME_PATTERN
    for hour in range(1, 13):
        for minute in range(0, 60, 5):
            written = f"{hour}:{minute:02d} pm" if minute else f"{hour} pm"
            assert re.search(pattern, written), written
            assert parse_time(written) == dt.time(hour % 12 + 12, minute), written
    assert parse_time("noon") == dt.time(12, 0)


def test_every_day_word_the_pattern_admits_is_read(restaurant_today: dt.date) -> None:
    words = ["today", "tonight", "tomorrow", *WEEKDAYS, *(f"next {d}" for d in WEEKDAYS)]
    words += [f"{day} {month}" for month in MONTHS for day in (1, 28)]
    for word in words:
        assert re.search(DAY_PATTERN, word), word
        assert parse_date(word) >= restaurant_today, word


def test_the_tools_grammars_are_ones_llama_cpp_accepts() -> None:
    """The patterns become GBNF (the grammars of ``call_steps``), which llama.cpp must be
    able to parse."""
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar")
    tools = load_agent(f"{RESTAURANT / 'agent.py'}:agent").python_tools
    grammars = [s.grammar for tool in tools for s in call_steps(tool.spec) if s.grammar]
    written = "\n".join(grammars)
    assert '[Ff] "rida" "y"' in written and '" "? ("p" "m" | "P" "M")' in written
    for grammar in grammars:
        assert llama_grammar.LlamaGrammar.from_string(grammar, verbose=False)
