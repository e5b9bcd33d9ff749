"""Python tools: the schema the model sees comes from the signature, and the same model
validates and coerces every call's arguments."""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from voxpipe.agent import (
    InvalidArguments,
    PythonTool,
    Toolbox,
    ToolCall,
    ToolDefinitionError,
    ToolEffect,
    ToolStatus,
    tool,
)


class Seating(enum.Enum):
    INSIDE = "inside"
    TERRACE = "terrace"


class Guest(BaseModel):
    name: str
    phone: str | None = None


def test_a_bare_decorator_takes_the_safe_defaults() -> None:
    @tool
    async def ping() -> str:
        """Check the line."""
        return "pong"

    assert isinstance(ping, PythonTool)
    assert ping.name == "ping"
    assert ping.spec.description == "Check the line."
    assert ping.policy.effect is ToolEffect.MUTATING
    assert ping.policy.idempotent is False
    assert ping.spec.read_only is False
    assert ping.spec.parameters == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


def test_a_read_only_tool_is_a_lookup_to_the_model_router() -> None:
    @tool(effect="read_only")
    def hours(day: str) -> str:
        """When the shop is open on a day."""
        return "9 to 5"

    assert hours.spec.read_only is True  # llm.lookup_router may call it on a weaker cue
    assert "read_only" not in str(hours.spec.openai())  # the model is not shown it


def test_scalars_literals_enums_optionals_and_lists() -> None:
    @tool(effect="read_only", idempotent=True, phrase="Let me look.", timeout_s=2)
    async def availability(
        party: Annotated[int, Field(description="how many people", ge=1, le=12)],
        time: Annotated[str, Field(description="HH:MM, 24-hour")],
        meal: Literal["lunch", "dinner"] = "dinner",
        seating: Seating = Seating.INSIDE,
        child_seats: bool = False,
        budget: float | None = None,
        allergies: list[str] | None = None,
    ) -> list[str]:
        """Which tables are free.

        Use it before booking.
        """
        return []

    assert availability.policy.effect is ToolEffect.READ_ONLY
    assert availability.policy.phrase == "Let me look."
    assert availability.policy.timeout_s == 2
    assert availability.spec.description == "Which tables are free.\n\nUse it before booking."
    parameters = availability.spec.parameters
    assert parameters["required"] == ["party", "time"]
    assert parameters["additionalProperties"] is False
    props = parameters["properties"]
    assert props["party"] == {
        "description": "how many people",
        "maximum": 12,
        "minimum": 1,
        "type": "integer",
    }
    assert props["time"] == {"description": "HH:MM, 24-hour", "type": "string"}
    assert props["meal"] == {"default": "dinner", "enum": ["lunch", "dinner"], "type": "string"}
    assert props["seating"]["enum"] == ["inside", "terrace"]  # inlined, no $ref
    assert props["seating"]["default"] == "inside"
    assert props["child_seats"] == {"default": False, "type": "boolean"}
    assert props["budget"] == {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None}
    assert props["allergies"]["anyOf"][0] == {"items": {"type": "string"}, "type": "array"}
    assert "$defs" not in parameters and "title" not in parameters
    assert all("title" not in p for p in props.values())


def test_nested_models_are_inlined_and_arrive_as_models() -> None:
    seen: list[Guest] = []

    @tool
    def register(guest: Guest) -> str:
        """Register a guest."""
        seen.append(guest)
        return guest.name

    guest_schema = register.spec.parameters["properties"]["guest"]
    assert guest_schema["properties"]["name"] == {"type": "string"}
    assert register.validate({"guest": {"name": "Ada"}}) == {"guest": Guest(name="Ada")}


def test_openai_tool_entry() -> None:
    @tool(name="hours", description="Opening hours.")
    async def opening_hours(day: str) -> str:
        return day

    entry = opening_hours.spec.openai()
    assert entry == {
        "type": "function",
        "function": {
            "name": "hours",
            "description": "Opening hours.",
            "parameters": {
                "type": "object",
                "properties": {"day": {"type": "string"}},
                "required": ["day"],
                "additionalProperties": False,
            },
        },
    }


def test_arguments_are_coerced_by_the_same_model() -> None:
    @tool
    async def book(party: int, meal: Literal["lunch", "dinner"], seating: Seating) -> None:
        """Book."""

    assert book.validate({"party": "2", "meal": "lunch", "seating": "terrace"}) == {
        "party": 2,
        "meal": "lunch",
        "seating": Seating.TERRACE,
    }


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "party: Field required"),
        ({"party": "two"}, "party: Input should be a valid integer"),
        ({"party": 2, "meal": "breakfast"}, "meal: Input should be 'lunch' or 'dinner'"),
        ({"party": 2, "tip": 5}, "tip: Extra inputs are not permitted"),
    ],
)
def test_invalid_arguments_name_the_field(arguments: dict[str, object], problem: str) -> None:
    @tool
    async def book(party: int, meal: Literal["lunch", "dinner"] = "dinner") -> None:
        """Book."""

    with pytest.raises(InvalidArguments) as caught:
        book.validate(arguments)
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_bad_definitions_are_refused_at_definition() -> None:
    with pytest.raises(ToolDefinitionError, match="no type hint"):

        @tool
        async def untyped(x) -> None:  # type: ignore[no-untyped-def]
            """No type."""

    with pytest.raises(ToolDefinitionError, match=r"\*args"):

        @tool
        async def variadic(*names: str) -> None:
            """Variadic."""

    with pytest.raises(ToolDefinitionError, match="tool name"):

        @tool(name="book a table")
        async def spaced() -> None:
            """Spaces."""

    with pytest.raises(ToolDefinitionError, match="timeout_s"):
        tool(timeout_s=0)


class Opaque:
    """A class pydantic knows nothing about."""


def test_a_parameter_type_with_no_json_schema_is_named_in_one_line() -> None:
    with pytest.raises(ToolDefinitionError) as opaque:

        @tool
        async def inspect_thing(thing: Opaque) -> None:
            """Cannot be described."""

    with pytest.raises(ToolDefinitionError) as callable_:

        @tool
        async def then(city: str, callback: Callable[[str], str]) -> None:
            """Validates, but has no schema."""

    assert str(opaque.value) == (
        "tool inspect_thing: parameter thing: its type Opaque has no JSON schema "
        "(use str, int, float, bool, a Literal, an enum, a list or a pydantic model)"
    )
    assert str(callable_.value).startswith("tool then: parameter callback: its type Callable")


def test_the_decorated_function_can_still_be_called() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert add(2, 3) == 5


async def test_a_sync_tool_runs_off_the_event_loop() -> None:
    threads: list[str] = []

    @tool
    def lookup(order: int) -> dict[str, object]:
        """A blocking lookup."""
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return {"order": order, "state": "shipped"}

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    result = await Toolbox([lookup]).run(ToolCall("c1", "lookup", {"order": "7"}))
    ticker.cancel()
    assert result.status is ToolStatus.OK
    assert result.output == {"order": 7, "state": "shipped"}
    assert threads[0].startswith("voxpipe-tool")
    assert ticks >= 10  # the loop kept running while the tool slept


async def test_models_and_enums_in_the_output_become_json() -> None:
    @tool
    async def guest() -> Guest:
        """A guest."""
        return Guest(name="Ada")

    result = await Toolbox([guest]).run(ToolCall("c1", "guest", {}))
    assert result.output == {"name": "Ada", "phone": None}
    assert result.content() == '{"name":"Ada","phone":null}'
