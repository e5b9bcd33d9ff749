"""History summarization: after a long prompt, off the critical path, and out of the caller's way.

The fake LLM counts one token per word, so a small ``summarize_after_tokens`` makes every
prompt "long"; its summary requests (``call-1#summary``) get a scripted summary.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.agent import tool
from voxpipe.conversation.history import INSTRUCTIONS, Summarizer
from voxpipe.engines.base import ChatMessage

SMALL = {"summarize_after_tokens": 10, "keep_recent_messages": 2}


def pairs(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages]


async def test_a_long_prompt_condenses_the_oldest_turns(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(["Hello", " there", "."], summary=["The caller", " said one."])
    call = make_call(stt=FakeStt("one", "two", "three"), llm=llm, llm_config=SMALL)
    history = call.session.history

    await call.say()
    await call.idle()
    assert llm.summary_calls == []  # two messages: nothing older than the recent ones

    await call.say()
    await call.idle()
    # The oldest exchange is now the summary; the last two messages stay word for word.
    (request,) = llm.summary_calls
    assert pairs(request) == [
        ("system", INSTRUCTIONS),
        ("user", "user: one\nassistant: Hello there."),
    ]
    assert history.summary == "The caller said one."
    assert pairs(history.turns) == [("user", "two"), ("assistant", "Hello there.")]
    assert history.summarized_messages == 2
    # The shorter prompt is pre-filled into the call's own cache; the summary's is dropped.
    assert llm.prefills == [("call-1", history.messages())]
    assert "call-1#summary" in llm.forgotten
    summarizer = call.session.summarizer
    assert summarizer.summaries == 1
    assert summarizer.last["summarized_messages"] == 2
    assert summarizer.last["prewarmed_tokens"] > 0

    await call.say()
    await call.idle()
    system, *rest = llm.calls[2]
    assert system.content.endswith("Summary of the call so far: The caller said one.")
    assert pairs(rest) == [("user", "two"), ("assistant", "Hello there."), ("user", "three")]
    # And the next summary folds the previous one in.
    assert llm.summary_calls[1][1].content.startswith("Earlier: The caller said one.\nuser: two")
    assert pairs(history.turns) == [("user", "three"), ("assistant", "Hello there.")]
    assert history.summarized_messages == 4


async def test_the_next_reply_pauses_the_summary(make_call: Callable[..., Call]) -> None:
    long_summary = ["word "] * 200
    llm = FakeLlm(summary=long_summary, summary_delay_s=0.01)  # two seconds of summary
    call = make_call(stt=FakeStt("one", "two", "three"), llm=llm, llm_config=SMALL)
    await call.say()
    await call.idle()
    await call.say()
    await call.until(lambda: llm.summary_yielded and llm.summary_yielded[0] >= 2)
    summarizer = call.session.summarizer
    assert summarizer.busy

    await call.push(speech(12))  # the caller speaks: the LLM is idle, the summary goes on
    assert summarizer.busy
    await call.push(silence(8))  # a pause: a (held) reply starts and will need the LLM
    await call.until(lambda: not summarizer.busy, within_s=0.3)
    # The summary's job leaves the LLM thread at its next token, whatever the machine's speed.
    await call.until(lambda: llm.running == 0, within_s=5.0)
    assert llm.summary_yielded[0] < len(long_summary)
    assert llm.prefills == []
    assert call.session.history.summary == ""
    assert len(call.session.history.turns) == 4

    llm.summary, llm.summary_delay_s = ["The caller", " counted."], 0.0
    await call.push(silence(30))
    await call.idle()  # after the reply, the summary is tried again
    assert len(llm.summary_calls) == 2
    assert call.session.history.summary == "The caller counted."
    assert pairs(call.session.history.turns) == [("user", "three"), ("assistant", "Hello there.")]


async def test_pause_cancels_a_summary(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(summary=["word "] * 200, summary_delay_s=0.01)
    call = make_call(llm=llm, llm_config=SMALL)
    history = call.session.history
    for text in ("one", "Sure.", "two", "Okay."):
        (history.add_user if text.islower() else history.add_assistant)(text)
    summarizer = Summarizer("call-1", call.services, history)

    summarizer.after_turn({"prompt_tokens": 10})
    assert summarizer.busy
    await call.until(lambda: llm.summary_yielded and llm.summary_yielded[0] >= 1)
    summarizer.pause()
    await call.until(lambda: not summarizer.busy, within_s=0.3)
    assert llm.summary_yielded[0] < 200 and llm.running == 0
    assert history.summary == "" and len(history.turns) == 4
    assert llm.prefills == [] and summarizer.summaries == 0
    assert llm.forgotten == ["call-1#summary"]


async def test_a_short_prompt_is_not_summarized(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm()
    call = make_call(llm=llm, llm_config={"summarize_after_tokens": 10_000})
    for _ in range(3):
        await call.say()
        await call.idle()
    assert llm.summary_calls == [] and call.session.history.summary == ""
    assert len(call.session.history.turns) == 6


async def test_no_summary_starts_while_the_caller_is_speaking(
    make_call: Callable[..., Call],
) -> None:
    story = [f"{' ' if i else ''}Number {i} is here." for i in range(30)]
    llm = FakeLlm(["Hi", "."], story, ["Okay", "."])
    call = make_call(stt=FakeStt("one", "two", "stop"), llm=llm, llm_config=SMALL)
    await call.say()
    await call.idle()
    await call.say()
    await call.until(lambda: len(call.frames(2)) >= 3)
    await call.push(speech(12))  # barge-in: reply 2 ends while the caller talks
    await call.until(lambda: call.done(2) is not None)
    # A summary now would hold the LLM that the caller's reply is about to need.
    assert llm.summary_calls == [] and not call.session.summarizer.busy

    await call.push(silence(30))
    await call.idle()
    assert len(llm.calls) == 3 and len(llm.summary_calls) == 1  # after reply 3, not before
    assert call.session.history.summary


async def test_a_tool_turns_history_is_prefilled_while_the_caller_listens(
    make_call: Callable[..., Call],
) -> None:
    """Its call, result and answer were never generated in the call's KV cache: the next
    prompt would prefill them on the critical path. A plain turn's reply is in the cache."""

    @tool
    async def opening_hours(day: str) -> str:
        """Opening hours."""
        return "noon to ten"

    llm = FakeLlm(["Hi", "."], [called("opening_hours", day="Sunday")], ["Noon", " to ten."])
    call = make_call(stt=FakeStt("hello", "hours on sunday"), llm=llm, agent=running(opening_hours))
    await call.say()
    await call.idle()
    assert llm.prefills == []

    await call.say()
    await call.idle()
    history = call.session.history
    assert [m.role for m in history.turns][-3:] == ["assistant", "tool", "assistant"]
    assert llm.prefills == [("call-1", history.messages())]
    assert [t.name for t in llm.prefill_tools[0]] == ["opening_hours"]  # as the next prompt
    assert call.session.summarizer.prefilled_tokens > 0


async def test_the_instructions_and_tools_do_not_count_toward_a_summary(
    make_call: Callable[..., Call],
) -> None:
    """No summary shortens them: counted, an agent whose tools alone pass the threshold
    would summarize after every turn and prefill its whole conversation again each time
    (``bench tool-turns``: 1000-token prefills, a filler on most plain turns)."""
    llm = FakeLlm(summary=["The caller", " counted."])
    call = make_call(llm=llm, llm_config=SMALL)
    history = call.session.history
    for text in ("one", "Sure.", "two", "Okay."):
        (history.add_user if text.islower() else history.add_assistant)(text)
    summarizer = Summarizer("call-1", call.services, history)

    summarizer.after_turn({"prompt_tokens": 1600, "instruction_tokens": 1595})
    assert not summarizer.busy
    summarizer.after_turn({"prompt_tokens": 1605, "instruction_tokens": 1595})
    assert summarizer.busy
    await summarizer.wait()
    assert summarizer.summaries == 1
