"""Realtime function calling as clients use it, through the official ``openai`` SDK on the
real models, with client tools the server was never tuned on (a taxi firm's, a dental
clinic's): ``tool_choice`` ``none``, ``required`` and a named function are honoured, and
the answer after a ``function_call_output`` is spoken words, never the result read out
(the probe of issue 25 heard ``{"ok": true, "table": 12}``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from tests.realtime_client import RATE, Listener
from tests.support import RunningServer, assert_spoken
from voxpipe.audio.pcm import pcm16_to_float

pytestmark = pytest.mark.e2e

TURN_TIMEOUT_S = 90.0
TAXI = (
    "You are the phone assistant of City Cabs. Book taxis with book_taxi and cancel them "
    "with cancel_taxi. Answer in one short sentence."
)
DENTIST = (
    "You are the receptionist of Bright Smile Dental Clinic. Book check-ups with "
    "book_appointment. Answer in one short sentence."
)
BOOK_TAXI = {
    "type": "function",
    "name": "book_taxi",
    "description": "Book a taxi.",
    "parameters": {
        "type": "object",
        "properties": {
            "pickup": {"type": "string", "description": "where to pick the passenger up"},
            "destination": {"type": "string"},
            "passenger_name": {"type": "string"},
        },
        "required": ["pickup", "destination", "passenger_name"],
    },
}
CANCEL_TAXI = {
    "type": "function",
    "name": "cancel_taxi",
    "description": "Cancel a booked taxi.",
    "parameters": {
        "type": "object",
        "properties": {"booking_ref": {"type": "string"}},
        "required": ["booking_ref"],
    },
}
BOOK_APPOINTMENT = {
    "type": "function",
    "name": "book_appointment",
    "description": "Book a dental appointment.",
    "parameters": {
        "type": "object",
        "properties": {
            "patient_name": {"type": "string"},
            "day": {"type": "string", "enum": ["monday", "tuesday", "wednesday", "thursday"]},
            "reason": {"type": "string"},
        },
        "required": ["patient_name", "day", "reason"],
    },
}
TAXI_REQUEST = "Please book me a taxi from the central station to the airport. My name is Jones."
DENTIST_REQUEST = "Hi, I'd like a check-up on Tuesday please, my name is Maria Lopez."


@contextlib.asynccontextmanager
async def realtime(
    server: RunningServer, instructions: str, tools: list[dict[str, Any]], choice: Any
) -> AsyncIterator[Listener]:
    client = AsyncOpenAI(api_key="test", websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as connection:
        listener = Listener(connection)
        try:
            await listener.next("session.created", timeout_s=30)
            await connection.session.update(
                session={
                    "type": "realtime",
                    "instructions": instructions,
                    "tools": tools,
                    "tool_choice": choice,
                    "audio": {"input": {"turn_detection": None}},
                }
            )
            await listener.next("session.updated")
            yield listener
        finally:
            await listener.close()


async def _ask(rt: Listener, text: str) -> dict[str, Any]:
    """The caller's words as a user item, then ``response.create``: the response."""
    await rt.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    return await _respond(rt)


async def _respond(rt: Listener) -> dict[str, Any]:
    since = len(rt.events)
    await rt.connection.response.create()
    done = await rt.wait_for(lambda: rt.of("response.done", since) or None, TURN_TIMEOUT_S)
    response: dict[str, Any] = done[0]["response"]
    assert response["status"] == "completed", response
    return response


def _calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in response["output"] if o["type"] == "function_call"]


def _said(rt: Listener, response: dict[str, Any]) -> str:
    """The answer's transcript, checked against what was streamed and against its audio."""
    [message] = [o for o in response["output"] if o["type"] == "message"]
    transcript = str(message["content"][0]["transcript"])
    assert transcript.strip() == rt.transcript(response["id"]).strip(), "the deltas differ"
    samples = pcm16_to_float(rt.audio(response["id"]))
    assert samples.shape[0] / RATE > 0.3, f"no spoken answer: {transcript!r}"
    assert np.sqrt(np.mean(samples**2)) > 0.01, "the answer's audio is silent"
    assert_spoken(transcript)
    return transcript


async def _output(rt: Listener, call_id: str, output: object) -> None:
    since = len(rt.events)
    await rt.connection.conversation.item.create(
        item={"type": "function_call_output", "call_id": call_id, "output": json.dumps(output)}
    )
    await rt.next("conversation.item.added", since)


async def test_required_forces_a_call_and_the_result_is_said_in_words(
    server: RunningServer,
) -> None:
    """``required``: even a question no tool answers gets a call; the answer after the
    result the client sends back is a spoken sentence, not the record."""
    async with realtime(server, TAXI, [BOOK_TAXI, CANCEL_TAXI], "required") as rt:
        response = await _ask(rt, TAXI_REQUEST)
        [call] = _calls(response)
        assert call["name"] in ("book_taxi", "cancel_taxi"), call
        await _output(rt, call["call_id"], {"ok": True, "taxi_id": 12, "eta_minutes": 7})
        answer = await _respond(rt)
        assert not _calls(answer), "an answer to a result is words, not another call"
        _said(rt, answer)


async def test_a_named_function_is_the_one_called(server: RunningServer) -> None:
    """A booking request, with ``tool_choice`` naming ``cancel_taxi``: the call is
    ``cancel_taxi``, as the client asked."""
    named = {"type": "function", "name": "cancel_taxi"}
    async with realtime(server, TAXI, [BOOK_TAXI, CANCEL_TAXI], named) as rt:
        response = await _ask(rt, TAXI_REQUEST)
        assert [c["name"] for c in _calls(response)] == ["cancel_taxi"], response["output"]


async def test_a_response_s_own_tool_choice_applies_to_it_alone(server: RunningServer) -> None:
    """``response.create`` with its own ``tool_choice``: ``required`` forces a call though
    the session says ``none``; a name not among the tools is refused, the session goes on."""
    async with realtime(server, TAXI, [BOOK_TAXI, CANCEL_TAXI], "none") as rt:
        await rt.connection.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": TAXI_REQUEST}],
            }
        )
        since = len(rt.events)
        await rt.connection.response.create(
            response={"tool_choice": {"type": "function", "name": "order_pizza"}}
        )
        error = (await rt.next("error", since))["error"]
        assert (error["code"], error["param"]) == ("invalid_value", "response.tool_choice")
        assert not rt.of("response.created", since), "a refused response.create starts nothing"
        since = len(rt.events)
        await rt.connection.response.create(response={"tool_choice": "required"})
        done = await rt.wait_for(lambda: rt.of("response.done", since) or None, TURN_TIMEOUT_S)
        response = done[0]["response"]
        assert [c["name"] for c in _calls(response)] in (["book_taxi"], ["cancel_taxi"]), response


async def test_none_prevents_a_call_and_the_answer_is_words(server: RunningServer) -> None:
    async with realtime(server, TAXI, [BOOK_TAXI, CANCEL_TAXI], "none") as rt:
        response = await _ask(rt, TAXI_REQUEST)
        assert not _calls(response), response["output"]
        _said(rt, response)


async def test_a_dental_clinic_booking_is_confirmed_in_words(server: RunningServer) -> None:
    """``auto``, the clinic's own tool: the model calls it; the client's result (a nested
    record with snake_case fields) is answered in a sentence with none of them read out."""
    async with realtime(server, DENTIST, [BOOK_APPOINTMENT], "auto") as rt:
        response = await _ask(rt, DENTIST_REQUEST)
        calls = _calls(response)
        if not calls:  # the model answered in words: they are words too
            _said(rt, response)
            pytest.fail(f"no call of book_appointment: {response['output']}")
        [call] = calls
        assert call["name"] == "book_appointment", call
        result = {
            "status": "confirmed",
            "appointment": {"day": "tuesday", "time_slot": "09:30", "dentist": "Dr. Chen"},
            "confirmation_code": "BSD-4471",
        }
        await _output(rt, call["call_id"], result)
        _said(rt, await _respond(rt))


async def test_two_calls_answered_at_once_get_one_spoken_answer(server: RunningServer) -> None:
    """Parallel calls: a response the client made hold two calls (as a model that writes
    several would), both answered, then ``response.create``: one answer, in words."""
    async with realtime(server, TAXI, [BOOK_TAXI, CANCEL_TAXI], "auto") as rt:
        await rt.connection.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Cancel ref A1 and book a new one."}],
            }
        )
        calls = [
            ("call_cancel1", "cancel_taxi", {"booking_ref": "A1"}),
            ("call_book1", "book_taxi", {"pickup": "home", "destination": "airport",
                                         "passenger_name": "Jones"}),
        ]  # fmt: skip
        for call_id, name, arguments in calls:
            await rt.connection.conversation.item.create(
                item={
                    "type": "function_call",
                    "call_id": call_id,
                    "name": name,
                    "arguments": json.dumps(arguments),
                }
            )
        await _output(rt, "call_cancel1", {"cancelled": True})
        await _output(rt, "call_book1", {"ok": True, "booking_ref": "B7", "eta_minutes": 5})
        answer = await _respond(rt)
        assert not _calls(answer), answer["output"]
        _said(rt, answer)
