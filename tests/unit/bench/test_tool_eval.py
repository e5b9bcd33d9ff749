"""``python -m bench tool-eval``: the set, the scores and the echo metric, without a model."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.tool_eval import dataset, echo, engines_mode, scoring, server_mode
from bench.tool_eval.dataset import Utterance
from bench.tool_eval.outcome import CalledTool, Outcome, arguments_of
from bench.tool_eval.voices import Voices
from voxpipe.agent import load_agent
from voxpipe.clients.native_client import TurnResult
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
)

DAY = dt.date(2026, 3, 12)  # a Thursday
RESTAURANT_AGENT = f"{scoring.EXAMPLE / 'agent.py'}:agent"


@pytest.fixture(scope="module")
def normalize() -> scoring.Normalizer:
    return scoring.restaurant_normalizer(DAY)


# -- the set -----------------------------------------------------------------------------------


def test_the_set_is_what_the_issue_asks() -> None:
    requests = dataset.requests()
    tools = Counter(r.tool for r in requests)
    assert len(requests) >= 48
    assert 0.2 <= tools[None] / len(requests) <= 0.3  # about a quarter: no tool
    assert set(tools) == {
        None,
        "check_availability",
        "book_table",
        "cancel_booking",
        "opening_hours",
    }
    assert min(n for t, n in tools.items() if t) >= 6
    voices = Counter(r.voice.split(":")[0] for r in requests)
    assert voices["piper"] > voices["espeak"] >= 3
    texts = [r.text for r in requests]
    assert "Book a table for two at seven tonight under the name Smith." in texts


def test_every_expected_call_is_one_the_tools_accept() -> None:
    """The expected arguments are valid for the restaurant's own tools (their schema and
    their normalisers), so a right answer can match them."""
    agent = load_agent(RESTAURANT_AGENT)
    tools = {t.name: t for t in agent.python_tools}
    for request in dataset.requests():
        if request.tool is not None:
            tools[request.tool].validate(request.arguments)


def test_read_sentences_put_the_recordings_first(tmp_path: Path) -> None:
    (tmp_path / "transcription").write_text(
        "<s> he was not an ill disposed young man </s> (clip-0880)\n"
        "<s> and mister john dashwood </s> (clip-0870)\n"
    )
    recordings = dataset.librivox_recordings(tmp_path)
    assert [r[0] for r in recordings] == ["clip-0870", "clip-0880"]
    read = dataset.read_sentences(recordings=recordings)
    assert [u.voice for u in read[:2]] == ["recording", "recording"]
    assert read[1].text == "he was not an ill disposed young man"
    assert read[1].path == tmp_path / "clip-0880.wav"
    assert len(read) == 2 + 15 and {u.kind for u in read} == {"read"}
    assert dataset.librivox_recordings(tmp_path / "missing") == []


def test_the_cache_names_a_file_by_its_text_and_voice(tmp_path: Path) -> None:
    voices = Voices(tmp_path)
    a = Utterance("hello", "Hello.", "request")
    assert voices.path(a).parent == tmp_path
    assert voices.path(a) != voices.path(Utterance("hello", "Hello!", "request"))
    assert voices.path(a) != voices.path(Utterance("hello", "Hello.", "request", "espeak:en-us"))
    recording = Utterance("r", "x", "read", "recording", tmp_path / "r.wav")
    assert voices.path(recording) == tmp_path / "r.wav"


# -- the echo metric ---------------------------------------------------------------------------


def test_words_are_normalised() -> None:
    assert echo.words("He was not an ill-disposed young man.") == [
        "he",
        "was",
        "not",
        "an",
        "ill",
        "disposed",
        "young",
        "man",
    ]
    assert echo.words("Table for 2, Luigi's!") == ["table", "for", "two", "luigis"]


@pytest.mark.parametrize(
    ("caller", "reply", "verdict"),
    [
        # word for word, as the issue saw it
        ("He was not an ill-disposed young man.", "He was not an ill-disposed young man.", True),
        # the caller's words with more around them
        (
            "He was not an ill disposed young man",
            "He was not an ill-disposed young man. How can I help you today?",
            True,
        ),
        # one word in five changed still repeats the sentence
        (
            "He might even have been made amiable himself.",
            "He might have been made amiable himself.",
            True,
        ),
        # an answer
        ("He was not an ill disposed young man", "I'm glad to hear he was kind.", False),
        # the same words out of order are not an echo
        (
            "the family of dashwood had long been settled",
            "settled long been had dashwood of family the",
            False,
        ),
        # too short to tell a greeting from a parrot
        ("Hi there.", "Hi there!", None),
        ("Thank you", "", None),
        # an empty reply repeats nothing
        ("Do you have vegetarian dishes?", "", False),
    ],
)
def test_is_echo(caller: str, reply: str, verdict: bool | None) -> None:
    assert echo.is_echo(caller, reply) is verdict


def test_the_threshold_is_eighty_percent_of_the_callers_words() -> None:
    caller = "one two three four five six seven eight nine ten"
    assert echo.echo_share(caller, "one two three four five six seven eight") == 0.8
    assert echo.is_echo(caller, "one two three four five six seven eight")
    assert not echo.is_echo(caller, "one two three four five six seven")


def test_common_in_order() -> None:
    assert echo.common_in_order("a b c d".split(), "a x c y d".split()) == 3
    assert echo.common_in_order([], ["a"]) == 0


def test_echo_rate_counts_only_what_was_measured() -> None:
    pairs = [("a b c d e", "a b c d e"), ("a b c d e", "no"), ("hi", "hi")]
    assert echo.echo_rate(pairs) == (1, 2)


# -- scoring -----------------------------------------------------------------------------------


def _request(id_: str, tool: str | None, **arguments: Any) -> Utterance:
    return Utterance(id_, id_, "request", tool=tool, arguments=arguments)


def _answer(id_: str, *calls: tuple[str, dict[str, Any]], reply: str = "") -> Outcome:
    return Outcome(id_, heard=id_, reply=reply, calls=[CalledTool(n, a) for n, a in calls])


SMITH = {"name": "Smith", "date": "today", "time": "19:00", "party_size": 2}


def test_arguments_match_after_the_tools_normalisers(normalize: scoring.Normalizer) -> None:
    request = _request("book", "book_table", **SMITH)
    loose = {"name": "mr. smith", "date": "tonight", "time": "7pm", "party_size": "two"}
    iso = {"name": "Smith", "date": "2026-03-12", "time": "19:00", "party_size": 2}
    for arguments in (loose, iso):
        assert scoring.same_arguments(
            request, _answer("book", ("book_table", arguments)), normalize
        )
    wrong = [
        {**iso, "time": "20:00"},
        {**iso, "date": "tomorrow"},
        {**iso, "name": "Smythe"},
        {k: v for k, v in iso.items() if k != "party_size"},
    ]
    for arguments in wrong:
        assert not scoring.same_arguments(
            request, _answer("book", ("book_table", arguments)), normalize
        )
    # the right arguments to the wrong tool are not a match
    assert not scoring.same_arguments(request, _answer("b", ("check_availability", iso)), normalize)


def test_an_unset_optional_argument_equals_a_left_out_one(normalize: scoring.Normalizer) -> None:
    request = _request("hours", "opening_hours")
    assert scoring.same_arguments(
        request, _answer("h", ("opening_hours", {"day": None})), normalize
    )
    assert not scoring.same_arguments(
        request, _answer("h", ("opening_hours", {"day": "today"})), normalize
    )


def test_selection_per_tool() -> None:
    book = _request("book", "book_table", **SMITH)
    checked_first = _answer("book", ("check_availability", {}), ("book_table", {}))
    assert scoring.selection(book, checked_first) == {"book_table": scoring.Counts(tp=1)}
    assert scoring.selection(book, _answer("book")) == {"book_table": scoring.Counts(fn=1)}
    assert scoring.selection(book, _answer("book", ("cancel_booking", {}))) == {
        "book_table": scoring.Counts(fn=1),
        "cancel_booking": scoring.Counts(fp=1),
    }
    hello = _request("hello", None)
    assert scoring.selection(hello, _answer("hello")) == {}
    assert scoring.selection(hello, _answer("hello", ("opening_hours", {}))) == {
        "opening_hours": scoring.Counts(fp=1)
    }


def test_score_requests(normalize: scoring.Normalizer) -> None:
    pairs = [
        (_request("b1", "book_table", **SMITH), _answer("b1", ("book_table", SMITH))),
        (
            _request("b2", "book_table", **SMITH),
            _answer("b2", ("book_table", {**SMITH, "time": "20:00"})),
        ),
        (_request("c1", "cancel_booking", name="Smith", date="today"), _answer("c1")),
        (_request("h1", "opening_hours"), _answer("h1", ("opening_hours", {}))),
        (
            _request("hello there my friend", None),
            _answer("hello there my friend", reply="Hello there my friend!"),
        ),
        (_request("n2", None), _answer("n2", ("opening_hours", {}))),
    ]
    score = scoring.score_requests(pairs, normalize)
    assert score["requests"] == 6 and score["tool_requests"] == 4
    assert score["per_tool"]["book_table"] == {
        "tp": 2,
        "fp": 0,
        "fn": 0,
        "precision": 1.0,
        "recall": 1.0,
    }
    assert score["per_tool"]["cancel_booking"]["recall"] == 0.0
    assert score["per_tool"]["opening_hours"]["precision"] == 0.5
    assert score["overall"] == {"tp": 3, "fp": 1, "fn": 1, "precision": 0.75, "recall": 0.75}
    assert score["exact_arguments"] == 2 / 4
    assert score["exact_arguments_given_tool"] == 2 / 3
    assert score["no_tool_accuracy"] == 0.5
    assert score["no_tool_echo"] == {"echoes": 1, "measured": 1, "rate": 1.0}
    assert score["echo"] == {"echoes": 1, "measured": 1, "rate": 1.0}  # the ids are 1-2 words
    assert [r["right_tool"] for r in score["rows"]] == [True, True, False, True, True, False]


def test_score_echo() -> None:
    read = [Utterance(f"r{i}", "he was not an ill disposed young man", "read") for i in range(4)]
    outcomes = [
        Outcome(
            "r0",
            heard="He was not an ill-disposed young man.",
            reply="He was not an ill-disposed young man.",
        ),
        Outcome("r1", heard="He was not an old-sposed young man.", reply="Who was he?"),
        Outcome("r2", reply="he was not an ill disposed young man"),  # nothing heard: the text
        Outcome("r3", error="TimeoutError"),
    ]
    score = scoring.score_echo(list(zip(read, outcomes, strict=True)))
    assert (score["echoes"], score["measured"], score["rate"]) == (2, 4, 0.5)
    assert score["errors"] == 1


def test_arguments_of() -> None:
    assert arguments_of({"a": 1}) == {"a": 1}
    assert arguments_of('{"a": 1}') == {"a": 1}
    assert arguments_of("") == {}
    assert arguments_of(None) == {}
    assert arguments_of("{not json") == {"_raw": "{not json"}
    assert arguments_of("[1]") == {"_raw": "[1]"}


# -- the two modes, without a model -----------------------------------------------------------


class ToolLlm:
    """An engine with the LLM side of tool calls: books whenever it is offered tools."""

    name = "fake-tools"

    def __init__(self) -> None:
        self.offered: list[Any] = []
        self.forgotten: list[str] = []

    def stream(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        usage: LlmUsage,
        trace_headers: Any = None,
        tools: Any = None,
        tool_choice: str = "auto",
    ) -> Iterator[Any]:
        self.offered.append(tools)
        return self.reply(messages, tools, tool_choice)

    def reply(self, messages: Sequence[ChatMessage], tools: Any, tool_choice: str) -> Iterator[Any]:
        if tools:
            arguments = {"name": "Smith", "date": "tonight", "time": "7pm", "party_size": 2}
            yield ToolCallDelta("c1", "book_table", json.dumps(arguments))  # not a call
            yield ToolCallRequest("c1", "book_table", arguments, json.dumps(arguments))
        yield from ("You ", "said: ", messages[-1].content)

    def forget(self, session_id: str) -> None:
        self.forgotten.append(session_id)


class PlainLlm(ToolLlm):
    """An engine from before tool calls: no ``tools`` parameter."""

    def stream(  # type: ignore[override]
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        usage: LlmUsage,
        trace_headers: Any = None,
    ) -> Iterator[str]:
        yield from ToolLlm.stream(self, session_id, messages, cancel, usage)


def _engine_run(llm: ToolLlm) -> engines_mode.EngineRun:
    run = engines_mode.EngineRun.__new__(engines_mode.EngineRun)
    run.stt, run.llm, run.tools_supported = None, llm, engines_mode.takes_tools(llm)  # type: ignore[assignment]
    run.hold_claims = True
    return run


class ClaimingLlm(ToolLlm):
    """Answers in words that make up the hours, and calls ``opening_hours`` when made to."""

    def __init__(self) -> None:
        super().__init__()
        self.choices: list[str] = []

    def reply(self, messages: Sequence[ChatMessage], tools: Any, tool_choice: str) -> Iterator[Any]:
        self.choices.append(tool_choice)
        if tool_choice == "required":
            arguments = {"day": "today"}  # nobody said "today": dropped (it is optional)
            yield ToolCallRequest("c1", "opening_hours", arguments, json.dumps(arguments))
            return
        yield from ("Hello! ", "We are open ", "from 10:00 AM ", "to 6:30 PM.")


def test_engines_mode_stops_a_made_up_answer_as_the_server_does() -> None:
    agent = load_agent(RESTAURANT_AGENT)
    llm = ClaimingLlm()
    [outcome] = _engine_run(llm).run(
        agent, [_request("What are your opening hours?", "opening_hours")], None, True
    )
    assert llm.choices == ["auto", "required"]
    assert outcome.unbacked_claim == "value: 10:00 AM"
    assert outcome.calls == [CalledTool("opening_hours", {})]
    assert outcome.reply == "Hello!"  # the words before the claim


def test_engines_mode_offers_the_agents_tools_and_reads_tool_calls() -> None:
    agent = load_agent(RESTAURANT_AGENT)
    llm = ToolLlm()
    run = _engine_run(llm)
    assert run.tools_supported
    [outcome] = run.run(agent, [_request("Book for Smith.", "book_table")], None, True)
    assert outcome.heard == "Book for Smith."
    assert outcome.calls == [
        CalledTool(
            "book_table", {"name": "Smith", "date": "tonight", "time": "7pm", "party_size": 2}
        )
    ]
    assert outcome.reply == "You said: Book for Smith."
    offered = llm.offered[0]
    assert [t.name for t in offered] == [
        "check_availability",
        "book_table",
        "cancel_booking",
        "opening_hours",
    ]
    assert llm.forgotten == ["tool-eval-0"]  # every utterance is a conversation of its own


def test_an_engine_without_tools_is_asked_without_them() -> None:
    agent = load_agent(RESTAURANT_AGENT)
    run = _engine_run(PlainLlm())
    assert not run.tools_supported
    [outcome] = run.run(agent, [_request("Hello there.", None)], None, True)
    assert outcome.calls == [] and outcome.reply == "You said: Hello there."


def test_an_engine_failure_is_that_rows_error() -> None:
    class Broken(ToolLlm):
        def stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
            raise RuntimeError("boom")

    [outcome] = _engine_run(Broken()).run(
        load_agent(RESTAURANT_AGENT), [_request("x", None)], None, True
    )
    assert outcome.error == "RuntimeError: boom"


def test_server_mode_reads_the_turns_tool_started_events() -> None:
    turn = TurnResult(turn_id=2)
    turn.events = [
        {"type": "transcript", "turn_id": 2, "text": "Book it."},
        {
            "type": "tool.started",
            "turn_id": 2,
            "call_id": "c1",
            "name": "book_table",
            "arguments": {"name": "Smith"},
            "executor": "server",
        },
        {
            "type": "tool.finished",
            "turn_id": 2,
            "call_id": "c1",
            "name": "book_table",
            "status": "ok",
            "duration_ms": 12,
        },
        {
            "type": "tool.started",
            "turn_id": 2,
            "call_id": "c2",
            "name": "opening_hours",
            "arguments": "{}",
            "executor": "client",
        },
    ]
    assert server_mode.tools_started(turn) == [
        CalledTool("book_table", {"name": "Smith"}),
        CalledTool("opening_hours", {}),
    ]
