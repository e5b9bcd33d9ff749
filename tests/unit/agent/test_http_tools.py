"""Webhook tools against a real Starlette app, in process (httpx's ASGI transport)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from voxpipe.agent import (
    CallContext,
    HttpTool,
    HttpToolConfig,
    Toolbox,
    ToolCall,
    ToolEffect,
    ToolStatus,
)
from voxpipe.agent.http_tools import MAX_RESPONSE_BYTES

BOOKING_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "party": {"type": "integer", "minimum": 1}},
    "required": ["name", "party"],
}


async def book(request: Request) -> Response:
    body = await request.json()
    if request.headers.get("authorization") != "Bearer s3cret":
        return JSONResponse({"detail": "who are you?"}, status_code=401)
    return JSONResponse({"booked": body, "id": 7})


async def whoami(request: Request) -> Response:
    return JSONResponse({k: v for k, v in request.headers.items() if k.startswith("x-voxpipe")})


async def hours(request: Request) -> Response:
    return PlainTextResponse("noon to ten")


async def empty(request: Request) -> Response:
    return Response(status_code=204)


async def huge(request: Request) -> Response:
    return PlainTextResponse("x" * (MAX_RESPONSE_BYTES + 1))


async def slow(request: Request) -> Response:
    await asyncio.sleep(5)
    return PlainTextResponse("late")


APP = Starlette(
    routes=[
        Route(f"/{route.__name__}", route, methods=["POST"])
        for route in (book, whoami, hours, empty, huge, slow)
    ]
)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=APP), base_url="http://tools.test"
    ) as client:
        yield client


def webhook(path: str, **fields: object) -> HttpToolConfig:
    return HttpToolConfig.model_validate(
        {"name": path, "description": f"the {path} hook", "url": f"http://tools.test/{path}"}
        | fields
    )


async def test_a_webhook_posts_the_arguments_and_returns_the_json(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOOKING_TOKEN", "s3cret")
    config = webhook(
        "book",
        parameters=BOOKING_SCHEMA,
        headers={"Authorization": "Bearer ${BOOKING_TOKEN}"},
        effect="mutating",
        phrase="Booking that now.",
    )
    tool = HttpTool(config, client)
    assert tool.policy.effect is ToolEffect.MUTATING and tool.policy.phrase == "Booking that now."
    assert tool.spec.openai()["function"]["parameters"] == BOOKING_SCHEMA
    result = await Toolbox([tool]).run(ToolCall("c1", "book", {"name": "Smith", "party": 2}))
    assert result.status is ToolStatus.OK
    assert result.output == {"booked": {"name": "Smith", "party": 2}, "id": 7}


async def test_a_webhook_is_told_who_calls_and_a_header_of_its_own_cannot_say_otherwise(
    client: httpx.AsyncClient,
) -> None:
    tool = HttpTool(webhook("whoami", headers={"X-Voxpipe-Principal": "key:forged"}), client)
    context = CallContext("key:one", "c0ffee", "MZ1", "twilio", "+15550142")
    result = await Toolbox([tool]).run(ToolCall("c1", "whoami", {}), context)
    assert result.output == {
        "x-voxpipe-principal": "key:one",
        "x-voxpipe-call-id": "c0ffee",
        "x-voxpipe-session-id": "MZ1",
        "x-voxpipe-transport": "twilio",
        "x-voxpipe-caller": "+15550142",
    }


async def test_a_non_2xx_response_is_an_error_with_its_status(client: httpx.AsyncClient) -> None:
    tool = HttpTool(webhook("book", parameters=BOOKING_SCHEMA), client)
    result = await Toolbox([tool]).run(ToolCall("c1", "book", {"name": "Smith", "party": 2}))
    assert result.status is ToolStatus.ERROR
    assert result.output == {"error": 'HTTP 401: {"detail":"who are you?"}'}


@pytest.mark.parametrize(
    ("path", "status", "output"),
    [
        ("hours", ToolStatus.OK, "noon to ten"),
        ("empty", ToolStatus.OK, None),
        (
            "huge",
            ToolStatus.ERROR,
            {"error": f"the response is larger than {MAX_RESPONSE_BYTES} bytes"},
        ),
        ("nowhere", ToolStatus.ERROR, {"error": "HTTP 404: Not Found"}),
    ],
)
async def test_what_a_response_becomes(
    client: httpx.AsyncClient, path: str, status: ToolStatus, output: object
) -> None:
    result = await Toolbox([HttpTool(webhook(path), client)]).run(ToolCall("c1", path, {}))
    assert (result.status, result.output) == (status, output)


async def test_a_slow_webhook_times_out(client: httpx.AsyncClient) -> None:
    tool = HttpTool(webhook("slow", timeout_s=0.2), client)
    result = await Toolbox([tool]).run(ToolCall("c1", "slow", {}))
    assert result.status is ToolStatus.TIMEOUT


async def test_arguments_are_checked_against_the_declared_schema(
    client: httpx.AsyncClient,
) -> None:
    tool = HttpTool(webhook("book", parameters=BOOKING_SCHEMA), client)
    result = await Toolbox([tool]).run(ToolCall("c1", "book", {"name": "Smith", "party": 0}))
    assert result.status is ToolStatus.ERROR
    assert result.output == {
        "error": "invalid arguments for book: party: 0 is less than the minimum of 1"
    }


async def test_an_unreachable_webhook_is_an_error() -> None:
    async with httpx.AsyncClient() as client:
        tool = HttpTool(webhook("book", url="http://127.0.0.1:9/book"), client)
        result = await Toolbox([tool]).run(ToolCall("c1", "book", {}))
    assert result.status is ToolStatus.ERROR
    assert str(result.output).startswith("{'error': 'book: ConnectError")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"url": "ftp://x/y"}, "url\n  Value error, an http:// or https:// URL"),
        ({"headers": {"X-Key": "${NOT_SET_ANYWHERE}"}}, "environment variable NOT_SET_ANYWHERE"),
        ({"name": "book a table"}, "name\n  String should match pattern"),
        ({"parameters": {"type": "array"}}, "its parameters must be a JSON object schema"),
        ({"parameters": {"type": "object", "properties": 3}}, "invalid parameters schema"),
        ({"timeout_s": 0}, "timeout_s\n  Input should be greater than 0"),
        ({"effect": "harmless"}, "effect\n  Input should be 'read_only' or 'mutating'"),
        ({"retries": 3}, "retries\n  Extra inputs are not permitted"),
    ],
)
def test_bad_declarations_are_refused(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        webhook("book", **fields)
    assert problem in str(caught.value)
