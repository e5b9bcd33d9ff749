"""The speech filter: every way a model wrote markup into a reply comes out as words."""

from __future__ import annotations

import json

import pytest

from tests.support import assert_spoken
from voxpipe.conversation.spoken import (
    SAY_THE_RESULT,
    SpeechFilter,
    result_for_model,
    results_said,
    said_of,
    spoken,
)
from voxpipe.engines.base import ChatMessage, ToolCallRequest


def streamed(text: str, step: int) -> str:
    """``text`` through a filter ``step`` characters at a time, as tokens come."""
    speech = SpeechFilter()
    out = [speech.push(text[i : i + step]) for i in range(0, len(text), step)]
    return " ".join("".join([*out, speech.flush()]).split())


MARKUP = [
    ('{"ok": true, "table": 12}', "Done: table 12."),
    ('"ok": true, "table": 12}', "Done: table 12."),
    (
        'Sure! {"booked": true, "name": "Smith", "party_size": 2}',
        "Sure! Booked, name Smith, party size 2.",
    ),
    ('<tool_call>\n{"name": "book_taxi", "arguments": {"pickup": "home"}}\n</tool_call>', ""),
    ('{"name": "book_appointment", "arguments": {"day": "tuesday"}}', ""),
    ('>{"name": "book_taxi", "arguments": ["pickup": "home", "passenger_name": "Smith"]}', ""),
    (
        '<tools>\n  <function name="book_taxi">\n    <arguments>\n      <pickup>station</pickup>\n'
        "    </arguments>\n  </function>\n</tools>",
        "",
    ),
    (
        'Your taxi is booked. ```json\n{"eta_minutes": 7}\n```',
        "Your taxi is booked. Eta minutes 7.",
    ),
    ("Here: ```python\nprint(1)\n```", "Here:"),
    ("<tool_response>Your table is booked.</tool_response>", "Your table is booked."),
    ("Call `book_table` now, **please**.", "Call book table now, please."),
    ("See [our menu](https://example.com/menu).", "See our menu."),
    ('He said "hello" to me.', "He said hello to me."),
    ("It arrives in seven minutes (about 19:05).", "It arrives in seven minutes about 19:05."),
    ('{"error": "no_table_free"}', "Sorry, that did not work: no table free."),
    (
        '{"message": "Your check-up is on Tuesday at 09:30."}',
        "Your check-up is on Tuesday at 09:30.",
    ),
    ('{"ok": false}', "Sorry, that did not work."),
    ('{"note": "say \\"hi\\" {now}", "ok": true}', "Done: note say hi now."),
    ("A plain sentence, left as it is.", "A plain sentence, left as it is."),
]


@pytest.mark.parametrize(("text", "said"), MARKUP)
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_markup_is_said_as_words_however_it_streams(text: str, said: str, step: int) -> None:
    assert streamed(text, step) == said
    if said:
        assert_spoken(said)


def test_a_nested_result_is_a_sentence_of_its_values() -> None:
    result = {
        "status": "confirmed",
        "appointment": {"day": "tuesday", "time_slot": "09:30", "dentist": "Dr. Chen"},
        "confirmation_code": "BSD-4471",
    }
    said = said_of(result)
    assert (
        said
        == "Confirmed: day tuesday, time slot 09:30, dentist Dr. Chen, confirmation code BSD-4471."
    )
    assert_spoken(said)
    assert_spoken(spoken(json.dumps(result)))


def test_plain_text_passes_as_it_came_and_a_name_in_code_waits() -> None:
    speech = SpeechFilter()
    assert [speech.push(piece) for piece in ("Your", " taxi", " is", " here.")] == [
        "Your", " taxi", " is", " here.",
    ]  # fmt: skip
    assert speech.push(" Call book_") == " Call "
    assert speech.push("taxi(pickup=") == ""
    assert speech.push('"home").') == "."
    assert speech.flush() == ""
    assert spoken('book_taxi(pickup="home", destination="airport")') == ""


def test_held_markup_is_bounded() -> None:
    speech = SpeechFilter()
    said = speech.push('{"note": "' + "x" * 3000)
    assert said.strip() == "" and speech.flush() == ""


def test_the_model_is_shown_a_result_and_asked_for_words() -> None:
    shown = result_for_model('{"ok":true,"taxi_id":12}')
    assert shown == '{"ok":true,"taxi_id":12}\n' + SAY_THE_RESULT


def test_a_reply_of_only_markup_says_the_results() -> None:
    call = ToolCallRequest("call_1", "book_taxi", {}, "{}")
    messages = [
        ChatMessage("user", "A taxi please."),
        ChatMessage("assistant", "", (call,)),
        ChatMessage("tool", '{"ok": true, "taxi_id": 12}', tool_call_id="call_1"),
        ChatMessage("tool", "Booked for 19:00.", tool_call_id="call_2"),
    ]
    assert results_said(messages) == "Done: taxi id 12. Booked for 19:00."
    assert results_said(messages[:2]) == ""
