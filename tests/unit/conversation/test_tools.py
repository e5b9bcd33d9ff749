"""Tool calls inside a reply, on fake engines: run once, recorded before they run and before
the answer, what the caller hears meanwhile, barge-in, metrics and the turn's record."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from tests.unit.conversation.harness import RATE, Call, silence, speech
from tests.unit.conversation.test_tracing import attrs, named, otel
from tests.unit.conversation.tools_support import StateStore, called, running
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from voxpipe.agent import tool
from voxpipe.agent.tools import DEFAULT_TIMEOUT_PHRASE
from voxpipe.conversation.events import (
    AudioOut,
    ResponseTextDelta,
    ToolFinished,
    ToolStarted,
    TurnMetrics,
)
from voxpipe.conversation.services import Filler
from voxpipe.conversation.spoken import SAY_THE_RESULT
from voxpipe.conversation.tool_step import (
    AFTER_FILLER_S,
    FOLLOW_UPS,
    MAX_SILENCE_S,
    PHRASE_AFTER_S,
    PHRASE_QUIET_S,
    phrases_of,
)
from voxpipe.engines.base import ToolCallDelta


def metrics_of(call: Call, turn_id: int) -> dict[str, Any]:
    (metrics,) = [m for m in call.of(TurnMetrics) if m.turn_id == turn_id]
    return metrics.metrics


async def test_a_call_runs_once_and_its_result_is_in_the_history_before_the_answer(
    make_call: Callable[..., Call],
) -> None:
    seen: list[list[dict[str, Any]]] = []
    store = StateStore()

    @tool
    async def book_table(name: str, party_size: int) -> dict[str, Any]:
        """Book a table."""
        seen.append([m.to_dict() for m in call.session.history.turns])
        seen.append(store.states[-1]["messages"])
        return {"booked": True, "name": name}

    llm = FakeLlm([called("book_table", name="Smith", party_size=2)], ["Booked", " for Smith."])
    call = make_call(
        stt=FakeStt("book a table for two under Smith"),
        llm=llm,
        agent=running(book_table),
        store=store,
    )
    await call.say()
    await call.idle()

    # When it ran, the caller's words and the call were in the history and the saved state.
    history_then, saved_then = seen
    assert [m["role"] for m in history_then] == ["user", "assistant"]
    assert history_then[1]["tool_calls"][0]["call_id"] == "call_1"
    assert saved_then == history_then
    # The model was offered the tool, and saw the result on its second request, where it
    # could only confirm the booking (no tools: a booking is never a mistake away from two).
    assert [t.name for t in llm.tools[1]] == ["book_table"]  # the same prompt, its KV kept
    assert llm.tool_choices == ["auto", "none"]
    second = llm.calls[1]
    assert [m.role for m in second] == ["system", "user", "assistant", "tool"]
    assert second[0].content == "You book tables at Chez Test."  # the agent's instructions
    result, request = second[-1].content.split("\n")  # the result, and what to do with it
    assert json.loads(result) == {"booked": True, "name": "Smith"}
    assert request == SAY_THE_RESULT
    assert second[-1].tool_call_id == "call_1"
    history = call.session.history.turns
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[-1].content == "Booked for Smith."
    # Recorded in order: the call, then its result, before the answer.
    assert store.roles() == ["user", "tool_call", "tool", "assistant"]
    assert store.messages()[2][2] == "ok"
    assert [m["role"] for m in store.states[-1]["messages"]] == [m.role for m in history]

    (started,) = call.of(ToolStarted)
    assert started == ToolStarted(
        1, "call_1", "book_table", {"name": "Smith", "party_size": 2},
        '{"name": "Smith", "party_size": 2}', "server",
    )  # fmt: skip
    (finished,) = call.of(ToolFinished)
    assert (finished.turn_id, finished.call_id, finished.status) == (1, "call_1", "ok")
    assert json.loads(finished.output) == {"booked": True, "name": "Smith"}
    i = call.sent.index
    assert i(started) < i(finished) < i(call.of(ResponseTextDelta)[0])

    metrics = metrics_of(call, 1)
    (entry,) = metrics["tools"]
    assert entry["name"] == "book_table" and entry["status"] == "ok"
    assert entry["started_ms"] >= 0 and entry["duration_ms"] >= 0
    assert metrics["llm"]["requests"] == 2
    assert "tool" in metrics["compute_ms"]
    assert call.done(1) is not None and call.done(1).text == "Booked for Smith."  # type: ignore[union-attr]
    assert call.tts.clauses == ["Booked for Smith."]  # a quick tool: no phrase

    sample = call.metrics.registry.get_sample_value
    assert sample("voxpipe_tool_calls_total", {"tool": "book_table", "status": "ok"}) == 1
    assert sample("voxpipe_tool_seconds_count", {"tool": "book_table", "status": "ok"}) == 1
    assert sample("voxpipe_tool_calls_per_turn_sum", {}) == 1
    assert sample("voxpipe_tool_calls_per_turn_count", {}) == 1


async def test_a_call_made_again_in_the_same_turn_is_not_run_again(
    make_call: Callable[..., Call],
) -> None:
    looked_up: list[str] = []

    @tool(effect="read_only")
    async def opening_hours(day: str) -> str:
        """When the restaurant is open."""
        looked_up.append(day)
        return "noon to ten"

    again = called("opening_hours", "call_2", day="monday")
    llm = FakeLlm([called("opening_hours", day="monday")], [again], ["Noon to ten."])
    call = make_call(
        stt=FakeStt("when do you open on monday"), llm=llm, agent=running(opening_hours)
    )
    await call.say()
    await call.idle()
    assert looked_up == ["monday"]
    # A read-only result may lead to another call; the same call again is dropped, and the
    # model asked once more, without tools.
    assert llm.tool_choices == ["auto", "auto", "none"]
    assert [m.role for m in call.session.history.turns] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert len(call.of(ToolStarted)) == 1
    assert call.done(1).text == "Noon to ten."  # type: ignore[union-attr]


async def test_without_tools_a_reply_is_one_plain_request(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm([called("book_table"), "Hello."])  # a call it cannot make: never yielded
    call = make_call(llm=llm)
    await call.say()
    await call.idle()
    assert llm.tools == [[]] and len(llm.calls) == 1
    assert call.done(1) is not None and call.done(1).text == "Hello."  # type: ignore[union-attr]
    assert "tools" not in metrics_of(call, 1)


def gaps_s(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def time_sends(call: Call) -> list[float]:
    """When each frame of reply audio goes out, from now on."""
    sent_at: list[float] = []
    send = call.session.replies.ctx.send_audio

    async def timed(frame: AudioOut) -> None:
        sent_at.append(time.monotonic())
        await send(frame)

    call.session.replies.ctx.send_audio = timed
    return sent_at


async def test_a_slow_tool_gets_its_phrase_and_the_silence_stays_short(
    make_call: Callable[..., Call],
) -> None:
    @tool(phrase="Let me check the book.", effect="read_only")
    async def check_availability(party_size: int) -> str:
        """Is a table free?"""
        await asyncio.sleep(3.0)
        return "free"

    llm = FakeLlm([called("check_availability", party_size=2)], ["Yes", ", we have a table."])
    call = make_call(
        stt=FakeStt("a table for two"), llm=llm, agent=running(check_availability),
        deadlines={"filler": ""},
    )  # fmt: skip
    sent_at = time_sends(call)
    await call.say()
    await call.until(lambda: call.done(1) is not None, within_s=6)

    clauses = call.tts.clauses
    assert clauses[0] == "Let me check the book."
    assert "Still working on it." in clauses  # the silence would pass a second
    assert clauses[-2:] == ["Yes, we have", "a table."]  # the answer, a first phrase first
    started = call.sent.index(call.of(ToolStarted)[0])
    finished = call.sent.index(call.of(ToolFinished)[0])
    first = next(i for i, e in enumerate(call.sent) if isinstance(e, AudioOut))
    assert started < first < finished  # the phrase, while the tool ran
    stages = metrics_of(call, 1)["stages_ms"]
    assert stages["tool_phrase_sent"] < stages["first_audio_sent"]
    # Frames go out in real time (50 ms ahead): a gap between sends is a silence heard.
    assert max(gaps_s(sent_at)) < MAX_SILENCE_S
    # The phrase is not the answer: the caller heard, and the history keeps, the answer.
    assert call.done(1).text == "Yes, we have a table."  # type: ignore[union-attr]
    assert call.session.history.turns[-1].content == "Yes, we have a table."


async def test_after_the_filler_a_slow_answer_keeps_the_line_alive(
    make_call: Callable[..., Call],
) -> None:
    """No tools, and words coming 0.8 s apart: the filler, then a follow-up before the
    silence after it passes a second (the first word alone is no audio yet), and then the
    answer; the history keeps the answer only."""
    filler = Filler.synthesize("One moment.", FakeTts())
    llm = FakeLlm(["Yes,", " we", " are", " open."], delay_s=0.8)
    call = make_call(llm=llm, filler=filler, deadlines={"llm_first_token_ms": 100})
    sent_at = time_sends(call)
    await call.say()
    await call.until(lambda: call.done(1) is not None, within_s=8)
    clauses = call.tts.clauses  # the filler was made at start-up: not among them
    assert clauses[0] == FOLLOW_UPS[0] and "".join(clauses[1:]) != "", clauses
    stages = metrics_of(call, 1)["stages_ms"]
    assert stages["filler_sent"] < stages["tool_phrase_sent"] < stages["first_audio_sent"]
    assert max(gaps_s(sent_at)) < MAX_SILENCE_S
    assert call.done(1).text == "Yes, we are open."  # type: ignore[union-attr]
    assert call.session.history.turns[-1].content == "Yes, we are open."


async def test_a_phrase_made_at_start_up_is_said_without_the_tts(
    make_call: Callable[..., Call],
) -> None:
    """The TTS may be busy with another call just when a phrase is due: the server makes
    every phrase its tools can say once, at start-up, and sends those frames at once."""

    @tool(phrase="Let me check the book.", effect="read_only")
    async def check_availability(party_size: int) -> str:
        """Is a table free?"""
        await asyncio.sleep(0.6)
        return "free"

    agent = running(check_availability)
    phrases = Filler.synthesize_all(phrases_of(agent.toolbox), FakeTts())
    assert {"Let me check the book.", DEFAULT_TIMEOUT_PHRASE, "Almost there."} <= set(phrases)
    llm = FakeLlm([called("check_availability", party_size=2)], ["Yes", ", we have one."])
    call = make_call(
        stt=FakeStt("a table for two"), llm=llm, agent=agent, deadlines={"filler": ""},
        phrases=phrases,
    )  # fmt: skip
    await call.say()
    await call.idle()

    assert call.tts.clauses == ["Yes, we have", "one."]  # the phrase did not go to the TTS
    stages = metrics_of(call, 1)["stages_ms"]
    assert stages["tool_phrase_sent"] < stages["first_audio_sent"]
    phrase_frames = len(phrases["Let me check the book."].audio) // (RATE // 50)
    assert len(call.frames(1)) >= phrase_frames + FakeTts().samples_per_clause // (RATE // 50)


async def test_a_tool_past_its_timeout_says_its_timeout_phrase(
    make_call: Callable[..., Call],
) -> None:
    @tool(timeout_s=0.2, phrase="", timeout_phrase="The kitchen is not answering.")
    async def ask_kitchen() -> str:
        """Ask the kitchen."""
        await asyncio.sleep(5)
        return "never"

    llm = FakeLlm([called("ask_kitchen")], ["Sorry about that."])
    call = make_call(llm=llm, agent=running(ask_kitchen), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert call.tts.clauses == ["The kitchen is not answering.", "Sorry about that."]
    (finished,) = call.of(ToolFinished)
    assert finished.status == "timeout"
    result = llm.calls[1][-1]
    assert result.role == "tool" and "did not finish within 0.2 s" in result.content


async def test_the_phrase_follows_the_filler_after_a_beat_never_on_top_of_it(
    make_call: Callable[..., Call],
) -> None:
    @tool(phrase="Checking now.", effect="read_only")
    async def slow() -> str:
        """Slow."""
        await asyncio.sleep(1.5)
        return "done"

    llm = FakeLlm([called("slow")], ["Done."], delay_s=0.25)  # the call itself is late
    filler = Filler.synthesize("One moment.", FakeTts())
    call = make_call(llm=llm, agent=running(slow), filler=filler, deadlines={"filler_ms": 100})
    await call.say()
    await call.idle()
    stages = metrics_of(call, 1)["stages_ms"]
    assert "filler_sent" in stages and "tool_phrase_sent" in stages
    # The filler's 100 ms of audio, then a beat of quiet at least, before the phrase.
    assert stages["tool_phrase_sent"] - stages["filler_sent"] >= 100 + 1000 * AFTER_FILLER_S


async def test_barge_in_cancels_a_read_only_tool_and_the_model_sees_it(
    make_call: Callable[..., Call],
) -> None:
    cancelled: list[bool] = []

    @tool(effect="read_only")
    async def look_up(order: str) -> str:
        """Look an order up."""
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "shipped"

    llm = FakeLlm([called("look_up", order="42")], ["Sure."])
    call = make_call(
        stt=FakeStt("where is my order 42", "never mind"), llm=llm, agent=running(look_up)
    )
    await call.say()
    await call.until(lambda: call.of(ToolStarted))
    await call.push(speech(12))  # the caller speaks over the tool: a barge-in
    await call.push(silence(30))
    await call.idle()

    assert cancelled == [True]
    assert call.done(1).status == "interrupted"  # type: ignore[union-attr]
    (finished,) = call.of(ToolFinished)
    assert finished.status == "cancelled"
    history = call.session.history.turns
    assert [m.role for m in history[:3]] == ["user", "assistant", "tool"]
    assert "cancelled" in history[2].content
    # The next turn's request shows the model the cancelled call.
    assert [m.role for m in llm.calls[1]] == ["system", "user", "assistant", "tool", "user"]
    sample = call.metrics.registry.get_sample_value
    assert sample("voxpipe_tool_calls_total", {"tool": "look_up", "status": "cancelled"}) == 1


async def test_barge_in_lets_a_mutating_tool_finish_once_and_keeps_its_result(
    make_call: Callable[..., Call],
) -> None:
    bookings: list[str] = []
    store = StateStore()

    @tool
    async def book_table(name: str) -> str:
        """Book a table."""
        await asyncio.sleep(0.8)
        bookings.append(name)
        return "booked"

    llm = FakeLlm([called("book_table", name="Smith")], ["Anything else?"])
    stt = FakeStt("book for Smith", "wait")
    call = make_call(stt=stt, llm=llm, agent=running(book_table), store=store)
    await call.say()
    await call.until(lambda: call.of(ToolStarted))
    await call.push(speech(12))
    await call.push(silence(30))
    await call.until(lambda: call.of(ToolFinished), within_s=3)
    await call.idle()

    assert bookings == ["Smith"]
    assert call.done(1).status == "interrupted"  # type: ignore[union-attr]
    (finished,) = call.of(ToolFinished)  # told when it came, after the reply
    assert finished.status == "ok" and finished.turn_id == 1
    history = call.session.history.turns
    results = [m for m in history if m.role == "tool"]
    assert len(results) == 1 and results[0].content == '"booked"'
    assert history[2] is results[0]  # right after its call, whenever it came
    assert store.roles().count("tool") == 1
    # The next turn's request never showed the call unanswered: running, or its result.
    assert llm.calls[1][3].role == "tool"


async def test_closing_the_call_waits_for_a_mutating_tool(
    make_call: Callable[..., Call],
) -> None:
    bookings: list[str] = []

    @tool(timeout_s=2)
    async def book_table(name: str) -> str:
        """Book a table."""
        await asyncio.sleep(0.3)
        bookings.append(name)
        return "booked"

    store = StateStore()
    llm = FakeLlm([called("book_table", name="Smith")], ["Done."])
    call = make_call(
        stt=FakeStt("a table for Smith"), llm=llm, agent=running(book_table), store=store
    )
    await call.say()
    await call.until(lambda: call.of(ToolStarted))
    await call.session.close()
    assert bookings == ["Smith"]
    assert store.messages()[-1] == ("tool", '"booked"', "ok")
    assert call.session.history.turns[-1].role == "tool"


async def test_closing_the_call_gives_a_stuck_mutating_tool_an_unknown_outcome(
    make_call: Callable[..., Call],
) -> None:
    @tool(timeout_s=0.1)
    async def transfer() -> str:
        """Transfer the call."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(10)  # ignores its timeout's cancel
        return "never"

    store = StateStore()
    llm = FakeLlm([called("transfer")], ["Done."])
    call = make_call(llm=llm, agent=running(transfer), store=store)
    await call.say()
    await call.until(lambda: call.of(ToolStarted))
    started = time.monotonic()
    await call.session.close()
    assert time.monotonic() - started < 3
    role, _, status = store.messages()[-1]
    assert (role, status) == ("tool", "unknown_outcome")


async def test_the_greeting_is_said_first_and_kept_in_the_history(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm()
    call = make_call(llm=llm, agent=running(greeting="Chez Test, how can I help?"))
    assert call.session.greet() == 1
    await call.until(lambda: call.done(1) is not None)
    assert " ".join(call.tts.clauses) == "Chez Test, how can I help?"
    assert llm.calls == []  # said as it is, no LLM
    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("assistant", "Chez Test, how can I help?")
    ]
    assert call.session.greet() is None  # once


async def test_a_tool_call_is_a_span_of_its_turn(make_call: Callable[..., Call]) -> None:
    tracing, exporter = otel()

    @tool
    async def book_table(name: str) -> str:
        """Book a table."""
        return "booked"

    llm = FakeLlm([called("book_table", name="Smith")], ["Booked."])
    call = make_call(
        stt=FakeStt("a table for Smith"), llm=llm, agent=running(book_table), tracing=tracing
    )
    await call.say()
    await call.idle()
    await call.session.close()
    tracing.shutdown()
    spans = list(exporter.get_finished_spans())
    (turn,) = named(spans, "turn")
    (span,) = named(spans, "tool")
    assert span.parent is not None and turn.context is not None
    assert span.parent.span_id == turn.context.span_id
    assert attrs(span)["gen_ai.tool.name"] == "book_table"
    assert attrs(span)["gen_ai.tool.call.id"] == "call_1"
    assert attrs(span)["voxpipe.tool.status"] == "ok"
    assert len(named(spans, "llm")) == 2  # one request for the call, one for the answer


async def test_a_call_begun_late_gets_its_phrase_at_once(make_call: Callable[..., Call]) -> None:
    """Silence counts from the end of the caller's words: a call first written a second
    after them has no 300 ms to wait before its phrase."""

    @tool(phrase="Let me check the book.", effect="read_only")
    async def check_availability() -> str:
        """Is a table free?"""
        await asyncio.sleep(1.0)
        return "free"

    llm = FakeLlm([called("check_availability")], ["Yes."], delay_s=1.1)
    call = make_call(llm=llm, agent=running(check_availability), deadlines={"filler": ""})
    await call.say()
    await call.until(lambda: call.done(1) is not None, within_s=8)
    stages = metrics_of(call, 1)["stages_ms"]
    (entry,) = metrics_of(call, 1)["tools"]
    assert stages["tool_phrase_sent"] - entry["started_ms"] < 1000 * PHRASE_AFTER_S / 2
    assert stages["tool_phrase_sent"] < 1000 * (1.1 + PHRASE_AFTER_S / 2)  # the call's delay


async def test_a_call_still_being_written_gets_its_phrase_once_the_caller_has_waited(
    make_call: Callable[..., Call],
) -> None:
    """An embedded model names a call well after the caller's words and writes its
    arguments for most of a second more: the phrase goes with the name, not 300 ms later,
    and the call runs only once it is written."""

    @tool(phrase="Let me check the book.", effect="read_only")
    async def check_availability(party_size: int) -> str:
        """Is a table free?"""
        return "free"

    writing = [
        ToolCallDelta("call_1", "check_availability", ""),
        ToolCallDelta("call_1", "check_availability", '{"party_size": '),
        ToolCallDelta("call_1", "check_availability", "4}"),
        called("check_availability", party_size=4),
    ]
    llm = FakeLlm(writing, ["Yes."], delay_s=0.65)
    call = make_call(
        stt=FakeStt("is there a table for four"),
        llm=llm,
        agent=running(check_availability),
        deadlines={"filler": ""},
    )
    await call.say()
    await call.until(lambda: call.done(1) is not None, within_s=8)
    stages = metrics_of(call, 1)["stages_ms"]
    (entry,) = metrics_of(call, 1)["tools"]
    named_at = stages["tool_named"]  # the first delta: the name, 650 ms into the request
    assert stages["llm_request"] + 650 <= named_at < stages["llm_request"] + 800
    assert named_at >= 1000 * PHRASE_QUIET_S  # the caller has waited that long
    assert named_at <= stages["tool_phrase_sent"] < named_at + 1000 * PHRASE_AFTER_S / 2
    assert stages["tool_phrase_sent"] < entry["started_ms"]  # while the model still writes


async def test_a_result_that_says_its_answer_is_said_without_asking_the_model_again(
    make_call: Callable[..., Call],
) -> None:
    @tool(says="message")
    async def book_table(name: str) -> dict[str, str]:
        """Book."""
        return {"booking_id": "7", "message": f"Done: a table under the name {name}."}

    llm = FakeLlm([called("book_table", name="Smith")], ["Thank you for calling!"])
    call = make_call(
        stt=FakeStt("a table for Smith"),
        llm=llm,
        agent=running(book_table),
        deadlines={"filler": ""},
    )
    await call.say()
    await call.idle()
    assert len(llm.calls) == 1  # no second request: the tool's sentence is the answer
    assert " ".join(call.tts.clauses).endswith("Done: a table under the name Smith.")
    assert call.done(1).text == "Done: a table under the name Smith."  # type: ignore[union-attr]
    turns = call.session.history.turns
    assert turns[-2].role == "tool" and '"booking_id":"7"' in turns[-2].content
    assert turns[-1].role == "assistant"
    assert turns[-1].content == "Done: a table under the name Smith."


async def test_without_its_field_the_model_words_the_answer(
    make_call: Callable[..., Call],
) -> None:
    @tool(says="message", effect="read_only")
    async def lookup() -> dict[str, str]:
        """Look up."""
        return {"found": "nothing"}

    llm = FakeLlm([called("lookup")], ["Nothing ", "found."])
    call = make_call(llm=llm, agent=running(lookup), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert len(llm.calls) == 2
    assert call.done(1).text == "Nothing found."  # type: ignore[union-attr]
