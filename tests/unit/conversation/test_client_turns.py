"""Turns a client drives itself (the OpenAI Realtime transport's needs), on fake engines:
manual commits, replies on request, cancel, truncation to what was played, item edits."""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.conversation.harness import Call, silence, speech
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts
from voxpipe.conversation.events import ResponseDone, SpeechStarted, Transcript
from voxpipe.engines.base import ChatMessage

TWO_CLAUSES = ["Hello", " there", ", nice", " to meet", " you", "."]


def history(call: Call) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in call.session.history.turns]


async def test_manual_commit_is_transcribed_and_answered_only_on_request(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(stt=FakeStt("hello there"))
    session = call.session
    session.commands.set_turn_taking(server_vad=False, auto_respond=True)
    await call.push(speech(12))
    await call.push(silence(30))
    assert not call.of(SpeechStarted), "no VAD in manual mode"
    turn = await session.commands.commit_input()
    assert turn == 1
    await call.idle()
    assert call.of(Transcript) == [Transcript(1, "hello there")]
    assert [d.status for d in call.of(ResponseDone)] == ["committed"]
    assert history(call) == [("user", "hello there")]
    assert await session.commands.commit_input() is None, "nothing new to commit"

    assert session.replies.respond() == 2
    assert session.replies.responding
    await call.idle()
    done = call.done(2)
    assert done is not None and done.status == "completed"
    assert history(call) == [("user", "hello there"), ("assistant", "Hello there.")]
    # The LLM saw the history as it was: no empty user message was appended.
    assert call.llm.calls[-1][-1] == ChatMessage("user", "hello there")


async def test_server_vad_without_auto_response(make_call: Callable[..., Call]) -> None:
    call = make_call(stt=FakeStt("hello there"))
    call.session.commands.set_turn_taking(server_vad=True, auto_respond=False)
    await call.say()
    await call.idle()
    assert [d.status for d in call.of(ResponseDone)] == ["committed"]
    assert not call.llm.calls and not call.frames()
    assert history(call) == [("user", "hello there")]


async def test_clear_input_forgets_speech_in_progress(make_call: Callable[..., Call]) -> None:
    call = make_call()
    await call.push(speech(12))
    call.session.commands.clear_input()
    await call.push(silence(30))
    await call.idle()
    assert not call.of(ResponseDone) and not call.session.history.turns


async def test_truncate_keeps_the_words_played_and_can_grow_back(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(llm=FakeLlm(TWO_CLAUSES), tts=FakeTts(samples_per_clause=1600))
    session = call.session
    await call.say()
    await call.idle()
    full = [("user", "hello there"), ("assistant", "Hello there, nice to meet you.")]
    assert history(call) == full
    # Each clause is 100 ms of audio: 150 ms is the first clause and half of the second.
    assert await session.commands.truncate_reply(1, 150) == "Hello there, nice to"
    assert history(call)[1] == ("assistant", "Hello there, nice to")
    assert await session.commands.truncate_reply(1, 0) == ""
    assert history(call) == full[:1], "nothing heard: no assistant message"
    assert await session.commands.truncate_reply(1, 100) == "Hello there,"
    assert history(call) == [full[0], ("assistant", "Hello there,")]
    assert await session.commands.truncate_reply(7, 100) is None


async def test_cancel_and_truncate_a_reply_in_flight(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(TWO_CLAUSES, delay_s=0.05)
    call = make_call(llm=llm, tts=FakeTts(samples_per_clause=16000))
    session = call.session
    await call.say()
    await call.until(lambda: call.frames(1))
    assert await session.commands.cancel_response()
    await call.idle()
    done = call.done(1)
    assert done is not None and done.status == "cancelled"
    assert not await session.commands.cancel_response(), "nothing in flight"

    turn = session.replies.respond()
    await call.until(lambda: call.frames(turn))
    assert await session.commands.truncate_reply(turn, 0) == ""
    done = call.done(turn)
    assert done is not None and done.status == "interrupted" and done.text == ""
    assert session.counts["truncations"] == 1


async def test_client_items_are_added_and_deleted(make_call: Callable[..., Call]) -> None:
    call = make_call()
    session = call.session
    first = session.commands.add_message("user", "same")
    second = session.commands.add_message("user", "same")
    assert session.commands.delete_message(second)
    assert session.history.turns == [first] and session.history.turns[0] is first
    assert not session.commands.delete_message(second)
    session.commands.set_system_prompt("Be terse.")
    assert session.history.messages()[0] == ChatMessage("system", "Be terse.")
