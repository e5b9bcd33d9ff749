"""The Realtime transport's function tools, piece by piece on a fake session: the tools a
client declares (``session.update``), the model's calls as ``function_call`` items of a
response (client and server tools, GA and beta names), and the client's
``function_call_output`` and ``function_call`` items. Every event sent must parse as the
official SDK's type for its dialect."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import RealtimeServerEvent as GaServerEvent
from pydantic import TypeAdapter

from voxpipe.conversation.events import (
    ResponseDone,
    ResponseTextDelta,
    ToolArgumentsDelta,
    ToolFinished,
    ToolStarted,
)
from voxpipe.observability.metrics import Metrics
from voxpipe.transports.realtime_item_edits import ItemEdits
from voxpipe.transports.realtime_items import Items
from voxpipe.transports.realtime_responses import Responses
from voxpipe.transports.realtime_session import SessionSettings, VadSettings
from voxpipe.transports.realtime_wire import Dialect, RealtimeError, ServerEvents

BOOK = {
    "type": "function",
    "name": "book_table",
    "description": "Book a table.",
    "parameters": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "party_size": {"type": "integer"}},
        "required": ["name", "party_size"],
    },
}
ARGS = '{"name": "Smith", "party_size": 2}'
PARSERS = {Dialect.GA: TypeAdapter(GaServerEvent), Dialect.BETA: TypeAdapter(BetaServerEvent)}


class Sink:
    """A send buffer that keeps what was sent, as JSON."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put(self, text: str, audio_ms: float) -> None:
        self.events.append(json.loads(text))


class FakeSession:
    """The session's side of the contract: calls recorded, outputs awaited by call id."""

    responding = False

    def __init__(self) -> None:
        self.awaiting: set[str] = set()  # calls without an output
        self.answered: set[str] = set()
        self.outputs: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str, str]] = []
        self.turns = 0
        self.tool_choices: list[str | None] = []  # each response's own; None: the session's
        self.commands = self  # Session.commands: add_tool_output, add_tool_call
        self.replies = self  # Session.replies: respond, responding

    def add_tool_output(self, call_id: str, output: str) -> bool:
        if call_id not in self.awaiting:
            return False
        self.awaiting.discard(call_id)
        self.answered.add(call_id)
        self.outputs.append((call_id, output))
        return True

    def add_tool_call(self, call_id: str, name: str, arguments_json: str) -> bool:
        if call_id in self.awaiting | self.answered:
            return False
        self.awaiting.add(call_id)
        self.calls.append((call_id, name, arguments_json))
        return True

    def respond(self, say: str | None = None, tool_choice: str | None = None) -> int:
        self.turns += 1
        self.tool_choices.append(tool_choice)
        return self.turns


class Wire:
    """Responses and item edits of one connection, on a fake session."""

    def __init__(self, dialect: Dialect) -> None:
        self.sink = Sink()
        self.out = ServerEvents(self.sink, Metrics(), dialect)  # type: ignore[arg-type]
        self.items = Items(64)
        self.session = FakeSession()
        self.settings = settings()
        self.responses = Responses(self.out, self.items, self.session, lambda: self.settings)  # type: ignore[arg-type]
        self.edits = ItemEdits(self.out, self.items, self.responses, self.session)  # type: ignore[arg-type]

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.sink.events

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def parsed(self) -> None:
        """Every event sent parses as the SDK's server event of the dialect."""
        for event in self.events:
            PARSERS[self.out.dialect].validate_python(event)


def settings(**session: Any) -> SessionSettings:
    base = SessionSettings(
        id="sess_1",
        model="gpt-realtime",
        instructions="",
        voice="piper",
        max_output_tokens=256,
        vad_defaults=VadSettings(0.5, 300, 500),
        turn_detection=None,
    )
    return base.updated(session, Dialect.GA) if session else base


def done(turn_id: int, status: str = "completed", text: str = "") -> ResponseDone:
    return ResponseDone(turn_id, status, text, 0.0, None, None)


def started(executor: str, call_id: str = "call_1", turn_id: int = 1) -> ToolStarted:
    arguments = json.loads(ARGS)
    return ToolStarted(turn_id, call_id, "book_table", arguments, ARGS, executor)


# -- session.tools and tool_choice --------------------------------------------------


def test_declared_tools_are_reported_in_both_dialects() -> None:
    named = settings(tools=[BOOK], tool_choice={"type": "function", "name": "book_table"})
    assert [s.name for s in named.tools.specs] == ["book_table"]
    for dialect in Dialect:
        wire = named.wire(dialect)
        assert wire["tools"] == [BOOK]
        assert wire["tool_choice"] == {"type": "function", "name": "book_table"}
    assert settings().wire(Dialect.GA)["tools"] == [] and settings().tools.choice == "auto"
    required = named.updated({"tool_choice": "required"}, Dialect.BETA)
    assert required.tools.choice == "required" and required.tools.specs == named.tools.specs
    bare = named.updated({"tool_choice": "book_table"}, Dialect.BETA)  # a beta client's form
    assert bare.tools.choice == "book_table"
    no_parameters = settings(tools=[{"type": "function", "name": "hours"}])
    assert no_parameters.tools.specs[0].parameters == {"type": "object", "properties": {}}


BAD_TOOLS: list[tuple[dict[str, Any], str, str]] = [
    ({"tools": [{**BOOK, "type": "mcp"}]}, "invalid_value", "session.tools.0.type"),
    ({"tools": [{**BOOK, "name": "book table"}]}, "invalid_value", "session.tools.0.name"),
    ({"tools": [{"type": "function"}]}, "missing_required_parameter", "session.tools.0.name"),
    ({"tools": [{**BOOK, "strict": True}]}, "unknown_parameter", "session.tools.0.strict"),
    ({"tools": [BOOK, BOOK]}, "invalid_value", "session.tools.1.name"),
    ({"tools": [{**BOOK, "parameters": {"type": "array"}}]}, "invalid_value",
     "session.tools.0.parameters"),
    ({"tools": [{**BOOK, "parameters": {"type": "object", "properties": 3}}]}, "invalid_value",
     "session.tools.0.parameters"),
    ({"tools": [BOOK], "tool_choice": "book_tables"}, "invalid_value", "session.tool_choice"),
    ({"tools": [BOOK], "tool_choice": {"type": "mcp", "server_label": "x"}}, "invalid_value",
     "session.tool_choice"),
    ({"tool_choice": 3}, "invalid_value", "session.tool_choice"),
    ({"tools": "book_table"}, "invalid_type", "session.tools"),
]  # fmt: skip


@pytest.mark.parametrize(("session", "code", "param"), BAD_TOOLS)
def test_a_bad_tool_is_refused_with_its_param(
    session: dict[str, Any], code: str, param: str
) -> None:
    with pytest.raises(RealtimeError) as refused:
        settings(**session)
    assert (refused.value.code, refused.value.param) == (code, param), refused.value.message


# -- the model's calls ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", list(Dialect))
def test_a_client_tool_call_ends_the_response_with_a_function_call_item(dialect: Dialect) -> None:
    wire = Wire(dialect)
    for delta in ('{"name": "Smith",', ' "party_size": 2}'):
        wire.responses.tool_arguments_delta(ToolArgumentsDelta(1, "call_1", "book_table", delta))
    wire.responses.tool_started(started("client"))
    wire.responses.tool_finished(ToolFinished(1, "call_1", "book_table", "ok", 1.0, ""))
    wire.responses.done(done(1))
    wire.parsed()
    added = "conversation.item.added" if dialect is Dialect.GA else "conversation.item.created"
    order = [
        "response.created",
        "rate_limits.updated",
        "response.output_item.added",
        added,
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        *(["conversation.item.done"] if dialect is Dialect.GA else []),
        "response.done",
    ]
    assert wire.kinds() == order, "a client tool's ToolFinished adds no output item"
    response_id = wire.of("response.created")[0]["response"]["id"]
    opened = wire.of("response.output_item.added")[0]
    item_id = opened["item"]["id"]
    assert opened["output_index"] == 0 and opened["response_id"] == response_id
    assert opened["item"] == {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_1",
        "name": "book_table",
        "arguments": "",
    }
    deltas = wire.of("response.function_call_arguments.delta")
    assert "".join(d["delta"] for d in deltas) == '{"name": "Smith", "party_size": 2}'
    assert {(d["item_id"], d["call_id"], d["output_index"]) for d in deltas} == {
        (item_id, "call_1", 0)
    }
    [args_done] = wire.of("response.function_call_arguments.done")
    assert args_done["arguments"] == ARGS and args_done["call_id"] == "call_1"
    assert ("name" in args_done) is (dialect is Dialect.GA)  # the beta event has no name
    item = wire.of("response.output_item.done")[0]["item"]
    assert (item["status"], item["arguments"]) == ("completed", ARGS)
    response = wire.of("response.done")[0]["response"]
    assert response["status"] == "completed" and response["output"] == [item]


@pytest.mark.parametrize("dialect", list(Dialect))
def test_words_before_a_call_are_the_first_output_item(dialect: Dialect) -> None:
    wire = Wire(dialect)
    wire.responses.text_delta(ResponseTextDelta(1, "Let me book that."))
    wire.responses.tool_started(started("client"))
    wire.responses.done(done(1, text="Let me book that."))
    wire.parsed()
    added = wire.of("response.output_item.added")
    assert [(a["output_index"], a["item"]["type"]) for a in added] == [
        (0, "message"),
        (1, "function_call"),
    ]
    output = wire.of("response.done")[0]["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call"]
    assert output[1]["arguments"] == ARGS
    assert wire.of("response.function_call_arguments.done")[0]["output_index"] == 1


@pytest.mark.parametrize("dialect", list(Dialect))
def test_a_server_tool_shows_its_call_then_the_servers_output_item(dialect: Dialect) -> None:
    wire = Wire(dialect)
    wire.responses.tool_started(started("server"))
    wire.responses.tool_finished(
        ToolFinished(1, "call_1", "book_table", "ok", 42.0, '{"booked": true}')
    )
    wire.responses.text_delta(ResponseTextDelta(1, "Booked."))
    wire.responses.done(done(1, text="Booked."))
    wire.parsed()
    [delta] = wire.of("response.function_call_arguments.delta")
    assert delta["delta"] == ARGS, "no deltas from the session: the arguments in one"
    added = "conversation.item.added" if dialect is Dialect.GA else "conversation.item.created"
    result = [e["item"] for e in wire.of(added) if e["item"]["type"] == "function_call_output"]
    assert len(result) == 1 and result[0]["call_id"] == "call_1"
    assert result[0]["output"] == '{"booked": true}' and result[0]["status"] == "completed"
    call_done = wire.kinds().index("response.output_item.done")
    assert call_done < wire.kinds().index(added, wire.kinds().index(added) + 1), "call, then result"
    output = wire.of("response.done")[0]["response"]["output"]
    assert [o["type"] for o in output] == ["function_call", "message"], "the result is no output"
    assert output[1]["content"][0]["transcript"] == "Booked."
    assert wire.items.get(result[0]["id"]) is not None, "retrievable like any item"


@pytest.mark.parametrize("dialect", list(Dialect))
def test_a_call_cut_off_by_barge_in_ends_incomplete(dialect: Dialect) -> None:
    wire = Wire(dialect)
    wire.responses.tool_arguments_delta(ToolArgumentsDelta(1, "call_1", "book_table", '{"na'))
    wire.responses.done(done(1, status="interrupted"))
    wire.parsed()
    [args_done] = wire.of("response.function_call_arguments.done")
    assert args_done["arguments"] == '{"na'
    response = wire.of("response.done")[0]["response"]
    assert response["status"] == "cancelled"
    assert response["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert [(o["type"], o["status"]) for o in response["output"]] == [
        ("function_call", "incomplete")
    ]


# -- the client's function items ------------------------------------------------------


def create(**item: Any) -> dict[str, Any]:
    return {"type": "conversation.item.create", "item": item}


@pytest.mark.parametrize("dialect", list(Dialect))
async def test_the_client_answers_a_call_with_its_output(dialect: Dialect) -> None:
    wire = Wire(dialect)
    wire.session.awaiting.add("call_1")
    output = {"type": "function_call_output", "call_id": "call_1", "output": '{"ok": true}'}
    await wire.edits.create(create(**output))
    wire.parsed()
    assert wire.session.outputs == [("call_1", '{"ok": true}')]
    added = "conversation.item.added" if dialect is Dialect.GA else "conversation.item.created"
    item = wire.of(added)[0]["item"]
    assert {k: item[k] for k in output} == output and item["id"].startswith("item_")
    with pytest.raises(RealtimeError) as again:  # answered already: the session says no
        await wire.edits.create(create(**output))
    assert (again.value.code, again.value.param) == ("invalid_value", "item.call_id")
    with pytest.raises(RealtimeError) as gone:
        await wire.edits.delete({"type": "conversation.item.delete", "item_id": item["id"]})
    assert gone.value.param == "item_id"


async def test_the_client_writes_a_call_into_the_conversation() -> None:
    wire = Wire(Dialect.GA)
    call = {"type": "function_call", "call_id": "call_9", "name": "book_table", "arguments": ARGS}
    await wire.edits.create(create(**call))
    assert wire.session.calls == [("call_9", "book_table", ARGS)]
    item = wire.of("conversation.item.added")[0]["item"]
    assert {k: item[k] for k in call} == call
    await wire.edits.create(create(type="function_call", name="hours", arguments="{}"))
    assert wire.session.calls[1][0].startswith("call_"), "a call id is made when none is given"
    wire.parsed()


BAD_ITEMS: list[tuple[dict[str, Any], str, str]] = [
    ({"type": "function_call_output", "call_id": "call_nope", "output": "x"}, "invalid_value",
     "item.call_id"),
    ({"type": "function_call_output", "call_id": "call_1"}, "missing_required_parameter",
     "item.output"),
    ({"type": "function_call_output", "output": "x"}, "missing_required_parameter",
     "item.call_id"),
    ({"type": "function_call_output", "call_id": "call_1", "output": "x", "role": "user"},
     "invalid_value", "item.role"),
    ({"type": "function_call", "arguments": "{}"}, "missing_required_parameter", "item.name"),
    ({"type": "function_call", "name": "book_table"}, "missing_required_parameter",
     "item.arguments"),
    ({"type": "function_call", "name": "book table", "arguments": "{}"}, "invalid_value",
     "item.name"),
    ({"type": "function_call", "name": "book_table", "arguments": "[1]"}, "invalid_value",
     "item.arguments"),
    ({"type": "function_call", "name": "book_table", "arguments": "{", "call_id": "c"},
     "invalid_value", "item.arguments"),
]  # fmt: skip


@pytest.mark.parametrize(("item", "code", "param"), BAD_ITEMS)
async def test_a_bad_function_item_is_refused(item: dict[str, Any], code: str, param: str) -> None:
    wire = Wire(Dialect.GA)
    wire.session.awaiting.add("call_1")
    with pytest.raises(RealtimeError) as refused:
        await wire.edits.create(create(**item))
    assert (refused.value.code, refused.value.param) == (code, param), refused.value.message
    assert not wire.events and wire.session.awaiting == {"call_1"}


# -- a response's own tool_choice ------------------------------------------------------


async def test_a_response_s_own_tool_choice_is_its_reply_s() -> None:
    wire = Wire(Dialect.GA)
    wire.settings = settings(tools=[BOOK], tool_choice="none")
    await wire.responses.create({"type": "response.create"})
    wire.responses.done(done(1))
    await wire.responses.create(
        {"type": "response.create", "response": {"tool_choice": "required"}}
    )
    wire.responses.done(done(2))
    named = {"type": "function", "name": "book_table"}
    await wire.responses.create({"type": "response.create", "response": {"tool_choice": named}})
    assert wire.session.tool_choices == [None, "required", "book_table"]


@pytest.mark.parametrize("choice", [{"type": "function", "name": "order_pizza"}, 3, ""])
async def test_a_bad_response_tool_choice_is_refused_and_starts_nothing(choice: Any) -> None:
    wire = Wire(Dialect.GA)
    wire.settings = settings(tools=[BOOK])
    with pytest.raises(RealtimeError) as refused:
        await wire.responses.create(
            {"type": "response.create", "response": {"tool_choice": choice}}
        )
    assert (refused.value.code, refused.value.param) == ("invalid_value", "response.tool_choice")
    assert wire.session.turns == 0 and not wire.of("response.created")
