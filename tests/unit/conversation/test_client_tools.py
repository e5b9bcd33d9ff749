"""A client's own tools (Realtime ``session.tools``): the model may call them; the reply then
ends with the call recorded and announced, and the client's output is answered on request."""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm
from voxpipe.agent import tool
from voxpipe.conversation.events import ResponseDone, ToolArgumentsDelta, ToolStarted
from voxpipe.engines.base import ToolCallDelta, ToolSpec

LOOKUP = ToolSpec(
    "lookup",
    "Look a customer up.",
    {"type": "object", "properties": {"q": {"type": "string"}}},
)


@tool(effect="read_only")
async def opening_hours() -> str:
    """When the restaurant is open."""
    return "noon to ten"


async def test_a_client_tool_call_ends_the_reply_and_waits_for_its_output(
    make_call: Callable[..., Call],
) -> None:
    script = [
        ToolCallDelta("c1", "lookup", '{"q": '),
        ToolCallDelta("c1", "lookup", '"Smith"}'),
        called("lookup", "c1", q="Smith"),
    ]
    llm = FakeLlm(script, ["Found", " you, Mr Smith."])
    call = make_call(llm=llm, agent=running(opening_hours))
    call.session.commands.set_client_tools([LOOKUP])
    await call.say()
    await call.idle()

    assert [t.name for t in llm.tools[0]] == ["opening_hours", "lookup"]
    deltas = call.of(ToolArgumentsDelta)
    assert "".join(d.delta for d in deltas) == '{"q": "Smith"}'
    (started,) = call.of(ToolStarted)
    assert started.executor == "client" and started.arguments == {"q": "Smith"}
    assert call.sent.index(deltas[-1]) < call.sent.index(started)
    done = call.done(1)
    assert done is not None and done.status == "completed"
    assert call.sent.index(started) < call.sent.index(done)
    assert len(llm.calls) == 1  # no tool ran, no second request
    assert [m.role for m in call.session.history.turns] == ["user", "assistant"]

    assert call.session.commands.add_tool_output("c1", '{"name": "Smith"}') is True
    assert call.session.commands.add_tool_output("c1", "again") is False  # answered already
    assert call.session.commands.add_tool_output("nope", "{}") is False
    assert call.session.replies.respond() == 2
    await call.idle()
    assert [m.role for m in llm.calls[1]] == ["system", "user", "assistant", "tool"]
    # Asked for on the output, the reply answers it in words: the tools stay in the prompt
    # (its cached prefix holds) but the model may not call one again.
    assert llm.tool_choices == ["auto", "none"]
    assert call.of(ResponseDone)[-1].text == "Found you, Mr Smith."


async def test_a_client_writes_a_call_into_the_conversation(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(agent=running())
    assert call.session.commands.add_tool_call("c9", "lookup", '{"q": "Lee"}') is True
    assert call.session.commands.add_tool_call("c9", "lookup", "{}") is False  # the id is taken
    (message,) = call.session.history.turns
    assert message.tool_calls[0].arguments == {"q": "Lee"}
    assert call.session.commands.add_tool_output("c9", '"found"') is True
    assert call.session.history.turns[-1].tool_call_id == "c9"


async def test_tool_choice_goes_to_the_model_with_every_tool(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(["Hi."])
    call = make_call(llm=llm, agent=running(opening_hours))
    call.session.commands.set_client_tools([LOOKUP], tool_choice="none")
    call.session.replies.respond()
    await call.idle()
    call.session.commands.set_client_tools([LOOKUP], tool_choice="lookup")
    call.session.replies.respond()
    await call.idle()
    assert [[t.name for t in offered] for offered in llm.tools] == [["opening_hours", "lookup"]] * 2
    assert llm.tool_choices == ["none", "lookup"]
