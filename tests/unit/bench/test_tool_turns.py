"""``python -m bench tool-turns``: the conversations it says, the answer told from the filler
and the tool's phrase, the silence the caller heard, and tool turns summarized apart from
plain turns; on timelines built by hand (times in ms on the caller's clock)."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.caller_bench import CallLog
from bench.caller_turns import AFTER_FILLER, ANSWERED, FAILED, INTERRUPTED, ReplyFrame, Sentence
from bench.tool_eval.dataset import Utterance, read_sentences, requests
from bench.tool_turns import conversation, expected_tools, plain_sentences, tool_requests
from bench.tool_turns_report import (
    NO_TOOL,
    PLAIN,
    TOOL,
    heard_tool_turn,
    longest_silence_ns,
    render_markdown,
    summarize,
    tool_turn_rows,
    turn_kind,
)

MS = 1_000_000
T0 = 10_000  # the caller's end of speech, ms
SILENCE_MS, GAP_MS = 600, 1500


def frames(start_ms: float, count: int, voiced: bool = True) -> list[ReplyFrame]:
    """``count`` 20 ms frames arriving at their pace from ``start_ms`` after the end of
    speech."""
    return [ReplyFrame(round((T0 + start_ms + 20 * i) * MS), 20 * MS, voiced) for i in range(count)]


def sentence(clip: str = "book-smith", next_start_ms: float | None = None) -> Sentence:
    return Sentence(
        index=0,
        clip=clip,
        start_ns=(T0 - 2500) * MS,
        end_ns=T0 * MS,
        why_next=None if next_start_ms is None else "quiet",
        next_start_ns=None if next_start_ms is None else round((T0 + next_start_ms) * MS),
    )


def record(stages: dict[str, float], tools: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "turn_id": 1,
        "status": "completed",
        "transcript": "Book a table for two at seven tonight under the name Smith.",
        "reply": "You're booked, Smith, for two at seven tonight.",
        "filler": "filler_sent" in stages,
        "stages_ms": {"speech_end": 0.0, "response_done": 6000.0, **stages},
        "tools": tools,
        **extra,
    }


BOOKING = [{"name": "book_table", "status": "ok", "started_ms": 2200.0, "duration_ms": 500.0}]
# "One moment." at 1.4 s (0.8 s), "Booking that for you." at 2.6 s (1.2 s), the answer at 4 s.
TOOL_STAGES = {"filler_sent": 1400.0, "tool_phrase_sent": 2600.0, "first_audio_sent": 4000.0}
TOOL_FRAMES = frames(1410, 40) + frames(2610, 60) + frames(4010, 50)


# -- the conversations ---------------------------------------------------------------------


def test_a_conversation_alternates_plain_and_tool_turns_and_cancels_after_booking() -> None:
    asked = requests()
    tools, plain = tool_requests(asked), plain_sentences(asked, read_sentences())
    assert {u.tool for u in tools} == {
        "check_availability",
        "book_table",
        "opening_hours",
        "cancel_booking",
    }
    assert all(u.tool is None for u in plain) and {u.kind for u in plain} == {"request", "read"}
    order = [u.id for u in tools]
    assert order.index("book-smith") < order.index("cancel-smith")
    first, second = conversation(tools, plain, 6, 0), conversation(tools, plain, 6, 1)
    assert [u.tool is not None for u in first] == [False, True] * 3
    assert first[0].id == "hello"
    assert not {u.id for u in first} & {u.id for u in second}  # the second call goes on


def test_expected_tools_tell_requests_without_a_tool_from_read_sentences() -> None:
    said = [
        Utterance("book-smith", "Book ...", "request", tool="book_table"),
        Utterance("hello", "Hello", "request"),
        Utterance("read-01", "The family of Dashwood ...", "read"),
    ]
    assert expected_tools(said) == {"book-smith": "book_table", "hello": NO_TOOL, "read-01": None}


# -- the silence the caller heard ----------------------------------------------------------------


def test_the_longest_silence_runs_to_the_answer_through_filler_and_phrase() -> None:
    # quiet 1410 ms, the filler, 400 ms, the phrase, 200 ms, the answer
    assert longest_silence_ns(TOOL_FRAMES, T0 * MS, 100, None) == 1410 * MS
    late = frames(100, 10) + frames(3300, 10)  # 0.2 s said, then 3 s of nothing
    assert longest_silence_ns(late, T0 * MS, 10, None) == 3000 * MS


def test_silent_frames_are_silence_and_a_backlog_plays_in_turn() -> None:
    quiet_then_words = frames(0, 50, voiced=False) + frames(1000, 5)
    assert longest_silence_ns(quiet_then_words, T0 * MS, 50, None) == 1000 * MS
    # all ten frames arrive at once: they play one after another, no silence between them
    burst = [ReplyFrame((T0 + 300) * MS, 20 * MS, True) for _ in range(10)]
    assert longest_silence_ns(burst, T0 * MS, 5, None) == 300 * MS


def test_with_no_answer_the_silence_runs_until_the_caller_spoke() -> None:
    filler_only = frames(1400, 40)  # ends at 2200
    assert longest_silence_ns(filler_only, T0 * MS, None, (T0 + 3700) * MS) == 1500 * MS
    assert longest_silence_ns(filler_only, T0 * MS, None, None) is None
    # an answer that came after the caller had begun to talk: the wait ended there
    late = filler_only + frames(4500, 10)
    assert longest_silence_ns(late, T0 * MS, 40, (T0 + 3800) * MS) == 1600 * MS


# -- one turn ---------------------------------------------------------------------------------


def test_a_tool_turn_answers_after_the_filler_and_the_phrase() -> None:
    row = heard_tool_turn(sentence(), TOOL_FRAMES, [record(TOOL_STAGES, BOOKING)])
    assert row["kind"] == TOOL and row["tools"] == ["book_table"]
    assert row["outcome"] == ANSWERED
    assert row["answer_ms"] == 4010  # not the filler's 1410, not the phrase's 2610
    assert row["filler_ms"] == 1410 and row["phrase_ms"] == 2610
    assert row["longest_silence_ms"] == 1410
    assert row["tool_ms"] == 500 and row["tool_started_ms"] == 2200
    assert row["server_tool_phrase_sent_ms"] == 2600 and not row["answer_before_tool"]


def test_a_phrase_without_a_filler_is_not_the_answer() -> None:
    stages = {"tool_phrase_sent": 900.0, "first_audio_sent": 2600.0}
    said = frames(910, 60) + frames(2610, 50)
    row = heard_tool_turn(sentence(), said, [record(stages, BOOKING)])
    assert row["answer_ms"] == 2610 and row["phrase_ms"] == 910 and row["filler_ms"] is None
    assert row["longest_silence_ms"] == 910


def test_words_said_before_the_tool_returned_are_flagged() -> None:
    stages = {"first_audio_sent": 1200.0, "tool_phrase_sent": 2600.0}
    row = heard_tool_turn(sentence(), frames(1210, 30), [record(stages, BOOKING)])
    assert row["answer_before_tool"] and row["answer_ms"] == 1210


def test_a_tool_turn_the_caller_gave_up_on_is_interrupted_after_the_filler() -> None:
    said = frames(1410, 40) + frames(4500, 50)
    stages = {"filler_sent": 1400.0, "first_audio_sent": 4490.0}
    row = heard_tool_turn(sentence(next_start_ms=3800), said, [record(stages, BOOKING)])
    assert row["outcome"] == INTERRUPTED and row["interrupted"] == AFTER_FILLER
    assert row["longest_silence_ms"] >= GAP_MS


def test_a_plain_turn_has_no_tool_figures() -> None:
    stages = {"first_audio_sent": 1000.0}
    row = heard_tool_turn(sentence("hello"), frames(1010, 50), [record(stages, [])])
    assert row["kind"] == PLAIN and row["answer_ms"] == 1010
    assert row["tool_ms"] is None and row["phrase_ms"] is None and row["filler_ms"] is None


def test_a_turn_is_what_happened_else_what_it_was_meant_to_be() -> None:
    assert turn_kind(record(TOOL_STAGES, BOOKING), NO_TOOL) == (TOOL, "ran")
    answered = record({"llm_first_token": 900.0, "first_audio_sent": 1500.0}, [])
    assert turn_kind(answered, "opening_hours") == (PLAIN, "answered")
    # the caller talked into the filler's silence before the model had chosen anything
    cut = record({"stt_done": 300.0, "filler_sent": 1400.0}, [], reply="", status="interrupted")
    assert turn_kind(cut, "book_table") == (TOOL, "meant")
    assert turn_kind(cut, NO_TOOL) == (PLAIN, "meant") and turn_kind(cut, None)[0] == PLAIN
    assert turn_kind({}, "book_table") == (TOOL, "meant")  # no record: the server missed it


# -- the calls, grouped --------------------------------------------------------------------------


def _call(transport: str) -> CallLog:
    """Two sentences: "hello" (plain) at T0, "book-smith" (a tool) 20 s later."""
    later = 20_000
    said = [
        Sentence(0, "hello", (T0 - 1500) * MS, T0 * MS, "answered", (T0 + later - 2500) * MS),
        Sentence(1, "book-smith", (T0 + later - 2500) * MS, (T0 + later) * MS, None, None),
    ]
    plain = record({"first_audio_sent": 1000.0, "response_done": 3000.0}, [], turn_id=1)
    tool = record(TOOL_STAGES, BOOKING, turn_id=2)
    seen = [((T0 + 3000) * MS, plain), ((T0 + later + 6000) * MS, tool)]
    shifted = [ReplyFrame(f.at_ns + later * MS, f.duration_ns, f.voiced) for f in TOOL_FRAMES]
    return CallLog(transport, 0, f"s-{transport}", said, frames(1010, 50) + shifted, seen)


def test_rows_group_into_tool_and_plain_per_transport() -> None:
    expected = {"hello": NO_TOOL, "book-smith": "book_table"}
    rows, _ = tool_turn_rows([_call("twilio"), _call("native")], expected)
    assert [(r["transport"], r["kind"], r["answer_ms"]) for r in rows] == [
        ("twilio", PLAIN, 1010),
        ("twilio", TOOL, 4010),
        ("native", PLAIN, 1010),
        ("native", TOOL, 4010),
    ]
    summary = summarize(rows, ["twilio", "native"], SILENCE_MS, GAP_MS)
    tool, plain = summary["twilio"][TOOL], summary["twilio"][PLAIN]
    assert tool["turns"] == 1 and tool["answer_ms"]["p50"] == 4010
    assert tool["filler_ms"]["p50"] == 1410 and tool["phrase_ms"]["p50"] == 2610
    assert tool["tool_ms"]["max"] == 500 and tool["tools"] == {"book_table": 1}
    assert (
        plain["turns"] == 1 and plain["answer_ms"]["p99"] == 1010 and plain["tool_ms"] == {"n": 0}
    )
    assert summary["twilio"]["mismatches"] == {"tool_meant_none_ran": 0, "no_tool_meant_one_ran": 0}
    assert summary["twilio"]["per_tool"]["book_table"]["answer_ms"]["n"] == 1


def test_a_request_that_ran_no_tool_counts_as_plain_and_as_a_mismatch() -> None:
    rows, _ = tool_turn_rows([_call("twilio")], {"hello": "opening_hours", "book-smith": None})
    summary = summarize(rows, ["twilio"], SILENCE_MS, GAP_MS)["twilio"]
    assert summary["mismatches"] == {"tool_meant_none_ran": 1, "no_tool_meant_one_ran": 1}
    assert summary[PLAIN]["turns"] == 1 and summary[TOOL]["turns"] == 1


def test_a_tool_request_cut_short_is_a_failed_tool_turn_not_a_plain_one() -> None:
    call = _call("twilio")
    cut = record({"stt_done": 300.0, "filler_sent": 1400.0, "response_done": 9000.0}, [])
    cut.update(turn_id=2, reply="", status="interrupted")
    said = [
        call.sentences[0],
        dataclasses.replace(call.sentences[1], why_next="quiet", next_start_ns=(T0 + 23_700) * MS),
    ]
    said.append(Sentence(2, "hello", (T0 + 23_700) * MS, (T0 + 25_000) * MS, None, None))
    seen = [call.seen[0], ((T0 + 20_000 + 9000) * MS, cut)]
    log = dataclasses.replace(call, sentences=said, seen=seen, frames=call.frames[:50])
    rows, _ = tool_turn_rows([log], {"hello": NO_TOOL, "book-smith": "book_table"})
    assert [(r["kind"], r["kind_by"], r["outcome"]) for r in rows] == [
        (PLAIN, "answered", ANSWERED),
        (TOOL, "meant", INTERRUPTED),  # its failure is a tool turn's
        (PLAIN, "meant", FAILED),  # no record at all
    ]
    summary = summarize(rows, ["twilio"], SILENCE_MS, GAP_MS)["twilio"]
    assert summary[TOOL]["interrupted"] == 1 and summary[PLAIN]["failed"] == 1
    assert summary["mismatches"] == {"tool_meant_none_ran": 0, "no_tool_meant_one_ran": 0}


def test_the_markdown_shows_tool_and_plain_turns_apart() -> None:
    rows, _ = tool_turn_rows([_call("twilio")], {"hello": NO_TOOL, "book-smith": "book_table"})
    text = render_markdown(summarize(rows, ["twilio"], SILENCE_MS, GAP_MS), "header", GAP_MS)
    assert "| twilio · tool · first answer audio | 1 | 4010 | 4010 | 4010 | 4010 |" in text
    assert "| twilio · plain · first answer audio | 1 | 1010 | 1010 | 1010 | 1010 |" in text
    assert "| twilio · tool · tool phrase (not an answer) | 1 | 2610 |" in text
    assert "| twilio · tool · longest silence before the answer | 1 | 1410 |" in text
    assert "| twilio · book_table | 1 | 4010 | 4010 | 500 | 500 |" in text
