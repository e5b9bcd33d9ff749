"""A reply is words wherever its text goes: the TTS, the client's transcript, the history.
The model here writes what the 0.5B model wrote after a client tool's result (issue 25)."""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm
from voxpipe.conversation.events import ResponseDone, ResponseTextDelta
from voxpipe.conversation.spoken import CANNOT_SAY, SAY_THE_RESULT
from voxpipe.engines.base import ToolSpec

BOOK_TAXI = ToolSpec(
    "book_taxi",
    "Book a taxi.",
    {"type": "object", "properties": {"pickup": {"type": "string"}}},
)
READ_OUT = [">{", '"ok', '": true', ', "taxi_id', '": 12', ', "eta_minutes": 7', "}"]


def spoken_everywhere(call: Call, turn_id: int) -> str:
    """The reply's words, the same in the deltas, the response, the history and the TTS."""
    said = "".join(d.delta for d in call.of(ResponseTextDelta) if d.turn_id == turn_id)
    done = call.done(turn_id)
    assert done is not None and done.text == said.strip() == done.generated_text
    assert call.session.history.turns[-1].content == done.text
    assert " ".join(call.tts.clauses).endswith(done.text)
    return done.text


async def test_a_result_read_out_as_json_is_said_in_words(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm([called("book_taxi", "c1", pickup="home")], READ_OUT)
    call = make_call(llm=llm, agent=running())
    call.session.commands.set_client_tools([BOOK_TAXI])
    await call.say()
    await call.idle()
    assert call.session.commands.add_tool_output(
        "c1", '{"ok": true, "taxi_id": 12, "eta_minutes": 7}'
    )
    call.session.replies.respond()
    await call.idle()

    assert llm.calls[1][-1].content.endswith("\n" + SAY_THE_RESULT)  # the model is asked
    assert spoken_everywhere(call, 2) == "Done: taxi id 12, eta minutes 7."
    assert call.session.history.turns[-2].content.startswith('{"ok": true')  # kept as sent


async def test_a_call_written_as_text_with_no_result_to_say_is_not_read_out(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(['<tool_call>\n{"name": "book_taxi", ', '"arguments": {}}\n</tool_call>'])
    call = make_call(llm=llm, agent=running())
    call.session.commands.set_client_tools([BOOK_TAXI], "none")
    await call.say()
    await call.idle()
    assert spoken_everywhere(call, 1) == CANNOT_SAY


async def test_a_reply_s_own_tool_choice_is_the_model_s(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(["Sure."])
    call = make_call(llm=llm, agent=running())
    call.session.commands.set_client_tools([BOOK_TAXI], "none")
    call.session.history.add_user("A taxi home, please.")
    call.session.replies.respond(tool_choice="required")
    await call.idle()
    call.session.replies.respond()
    await call.idle()
    assert llm.tool_choices == ["required", "none"]
    assert [d.status for d in call.of(ResponseDone)] == ["completed", "completed"]
