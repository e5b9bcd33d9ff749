"""The caller's words so far warm the call's LLM prompt while the caller speaks (orchestration
on fakes; the real model's KV is checked in tests/e2e/test_llm_batch.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.conversation.tools_support import running
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.agent import tool
from voxpipe.conversation.events import TranscriptPartial
from voxpipe.engines.base import CancelToken, ChatMessage, ToolSpec


class WarmingFakeLlm(FakeLlm):
    """A FakeLlm that can warm a call's prompt (:class:`WarmingLlm`), and records each."""

    def __init__(self) -> None:
        super().__init__()
        self.warms: list[tuple[str, list[ChatMessage]]] = []
        self.tools: list[tuple[str, ...]] = []

    def warm(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        tools: Sequence[ToolSpec] = (),
    ) -> bool:
        self.warms.append((session_id, list(messages)))
        self.tools.append(tuple(t.name for t in tools))
        return True


async def test_each_partial_warms_the_conversation_and_the_words_so_far(
    make_call: Callable[..., Call],
) -> None:
    llm = WarmingFakeLlm()
    stt = FakeStt("Book a.", "Book a table.", "Book a table for two.")
    call = make_call(llm=llm, stt=stt, stt_config={"partial_interval_ms": 300})
    await call.push(speech(50))
    await call.until(lambda: len(call.of(TranscriptPartial)) >= 2)
    await call.push(silence(30))
    await call.until(lambda: call.done(1))

    assert len(llm.warms) >= 2
    session, messages = llm.warms[0]
    assert session == call.session.id
    assert messages[0].role == "system"
    # the words as the final transcript goes on past them: Whisper's closing stop dropped
    assert [m.content for m in messages[1:]] == ["Book a"]
    assert llm.warms[1][1][-1].content == "Book a table"
    # the reply's own prompt starts with what was warmed
    assert llm.calls[0][: len(messages) - 1] == messages[:-1]
    assert llm.calls[0][-1].content.startswith("Book a table")


async def test_nothing_is_warmed_when_off(make_call: Callable[..., Call]) -> None:
    llm = WarmingFakeLlm()
    off = make_call(
        llm=llm, stt=FakeStt("Book a.", "Book a table."),
        stt_config={"partial_interval_ms": 300}, llm_config={"warm_while_speaking": False},
    )  # fmt: skip
    await off.push(speech(40))
    await off.until(lambda: len(off.of(TranscriptPartial)) >= 2)
    assert llm.warms == []


async def test_a_call_with_tools_is_warmed_with_its_tools(make_call: Callable[..., Call]) -> None:
    """The tools are part of the prompt its requests run on (the solo context's)."""

    @tool(effect="read_only")
    async def opening_hours(day: str) -> str:
        """When the restaurant opens on a day."""
        return "nine"

    llm = WarmingFakeLlm()
    call = make_call(
        llm=llm, stt=FakeStt("Book a.", "Book a table."), agent=running(opening_hours),
        stt_config={"partial_interval_ms": 300},
    )  # fmt: skip
    await call.push(speech(40))
    await call.until(lambda: len(call.of(TranscriptPartial)) >= 2)
    assert llm.warms
    assert set(llm.tools) == {("opening_hours",)}
    assert llm.warms[-1][1][-1].content in ("Book a", "Book a table")
