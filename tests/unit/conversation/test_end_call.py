"""``end_call``: the call ends once the goodbye has been heard, not when the tool runs; a
goodbye the caller talks over calls the end off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.agent.call_context import CallContext
from voxpipe.agent.call_control import end_call, end_call_saying
from voxpipe.agent.closing import closes_the_call, says_goodbye
from voxpipe.agent.tools import ToolFailed
from voxpipe.conversation.events import AudioOut, CallEnded


async def test_the_call_ends_after_the_goodbye_has_played(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm([called("end_call")], ["Never asked."])
    call = make_call(stt=FakeStt("thanks, bye"), llm=llm, agent=running(end_call))
    await call.say()
    await call.until(lambda: bool(call.of(CallEnded)), within_s=10)

    (ended,) = call.of(CallEnded)
    assert ended.reason == "the agent ended the call"
    done = call.done(1)
    assert done is not None and done.text == "Thank you for calling. Goodbye!"
    # The end came after every frame of the goodbye, and once they had had time to play.
    frames = [e for e in call.sent if isinstance(e, AudioOut)]
    assert frames and call.sent.index(ended) > call.sent.index(frames[-1])
    assert time.monotonic_ns() >= call.session.replies.ctx.pacer.ends_at_ns
    assert call.session.counts["ended_by_agent"] == 1


async def test_a_goodbye_talked_over_does_not_end_the_call(
    make_call: Callable[..., Call],
) -> None:
    goodbye = " ".join(f"Goodbye number {i}." for i in range(40))
    llm = FakeLlm([called("end_call")], ["Of course, go on."], delay_s=0.005)
    stt = FakeStt("bye", "wait, one more thing")
    call = make_call(stt=stt, llm=llm, agent=running(end_call_saying(goodbye)))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 8)
    await call.push(speech(15))  # the caller talks over the goodbye: a turn
    await call.push(silence(30))
    await call.idle()

    first = call.done(1)
    assert first is not None and first.status == "interrupted"
    assert call.done(2) is not None
    assert call.of(CallEnded) == []
    assert call.session.counts["ended_by_agent"] == 0


async def test_end_call_without_a_line_fails_clearly() -> None:
    context = CallContext("anonymous", "c1", "s1", "native")
    with pytest.raises(ToolFailed, match="cannot be ended"):
        await end_call.invoke(end_call.validate({}), context)


async def test_no_hang_up_unless_the_caller_closed_the_call(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm([called("end_call")], ["We open at noon."])
    call = make_call(stt=FakeStt("what time do you open"), llm=llm, agent=running(end_call))
    await call.say()
    await call.idle()
    assert call.of(CallEnded) == []
    done = call.done(1)
    assert done is not None and done.text == "We open at noon."  # the model answered
    assert llm.tool_choices == ["auto", "none"]  # the call dropped, asked again without tools
    assert [m.role for m in call.session.history.turns] == ["user", "assistant"]


def test_closing_words() -> None:
    for said in ["Thanks, bye!", "Goodbye.", "That's all, thank you.", "Please hang up.",
                 "Have a nice day.", "OK, see you."]:  # fmt: skip
        assert closes_the_call(said), said
    for said in ["What time do you open on Sunday?", "Thank you.", "Book a table.", ""]:
        assert not closes_the_call(said), said


async def test_a_goodbye_said_in_words_to_a_goodbye_ends_the_call(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(["Goodbye, have a nice day!"])  # the model forgot end_call
    call = make_call(stt=FakeStt("thank you, that's all, bye"), llm=llm, agent=running(end_call))
    await call.say()
    await call.until(lambda: bool(call.of(CallEnded)), within_s=10)

    done = call.done(1)
    assert done is not None and done.text == "Goodbye, have a nice day!"  # not a second goodbye
    frames = [e for e in call.sent if isinstance(e, AudioOut)]
    assert frames and call.sent.index(call.of(CallEnded)[0]) > call.sent.index(frames[-1])
    assert len(llm.calls) == 1  # the tool's result is not asked about
    # The call, its result, then the words as the answer.
    turns = call.session.history.turns
    assert [m.role for m in turns] == ["user", "assistant", "tool", "assistant"]
    assert [c.name for c in turns[1].tool_calls] == ["end_call"] and not turns[1].content
    assert turns[3].content == "Goodbye, have a nice day!"


async def _settled(call: Call) -> None:
    """Until the last reply has had time to play: an end comes only then."""
    await call.idle()
    left_s = (call.session.replies.ctx.pacer.ends_at_ns - time.monotonic_ns()) / 1e9
    await asyncio.sleep(max(0.0, left_s) + 0.3)


@pytest.mark.parametrize(
    ("heard", "said"),
    [
        ("what time do you open", "We open at noon. Goodbye!"),  # the caller did not close
        ("thanks, bye", "Is there anything else I can help with?"),
        ("ok thanks, bye", "Before you go, is there nothing else I can help you with?"),
        ("bye, oh wait, can you check my booking", "Of course, please don't hang up."),
        ("that's all I needed, can you book it for Friday",
         "Sure, I'll book that for you. Have a great day!"),  # nothing booked yet
    ],
)  # fmt: skip
async def test_words_alone_end_nothing_without_both_goodbyes(
    make_call: Callable[..., Call], heard: str, said: str
) -> None:
    call = make_call(stt=FakeStt(heard), llm=FakeLlm([said]), agent=running(end_call))
    await call.say()
    await _settled(call)
    assert call.of(CallEnded) == []
    assert call.session.counts["ended_by_agent"] == 0
    assert not any(m.tool_calls for m in call.session.history.turns)


async def test_an_implied_goodbye_talked_over_keeps_only_what_was_heard(
    make_call: Callable[..., Call],
) -> None:
    goodbye = " ".join(f"Goodbye number {i}." for i in range(40))
    llm = FakeLlm([goodbye], ["Of course, go on."], delay_s=0.005)
    stt = FakeStt("bye", "wait, one more thing")
    call = make_call(stt=stt, llm=llm, agent=running(end_call))
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 8)
    await call.push(speech(15))  # the caller talks over the goodbye: a turn
    await call.push(silence(30))
    await _settled(call)

    first = call.done(1)
    assert first is not None and first.status == "interrupted"
    assert call.of(CallEnded) == []
    kept = [m.content for m in call.session.history.turns if m.role == "assistant" and m.content]
    assert kept and len(kept[0]) < len(goodbye) / 2, kept  # as far as it was heard


def test_a_goodbye_of_the_agents_own() -> None:
    for said in ["Goodbye!", "You're welcome. Have a nice day!", "Thanks for calling, bye.",
                 "Take care."]:  # fmt: skip
        assert says_goodbye(said), said
    for said in ["We open at noon.", "Anything else? Goodbye!", "Let me check. Goodbye!",
                 "Goodbye! I'll book that now, one moment.", "Please don't hang up.",
                 "That's all I have on that.", ""]:  # fmt: skip
        assert not says_goodbye(said), said
