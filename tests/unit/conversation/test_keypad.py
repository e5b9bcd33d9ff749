"""Keypad digits become the caller's turn: on '#', after the idle time (on the call's audio
clock), or at the bound; a reply speaking stops first."""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.conversation.harness import Call, silence
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.conversation.keypad import Keypad


def test_hash_ends_the_digits_at_once() -> None:
    pad = Keypad(idle_ms=2000, max_digits=32)
    assert [pad.press(d, 0) for d in "12#"] == [None, None, "12"]
    assert pad.press("#", 10) is None  # nothing typed: no turn


def test_digits_end_after_the_idle_time() -> None:
    pad = Keypad(idle_ms=1000, max_digits=32)
    pad.press("4", 0)
    pad.press("2", 8000)
    assert pad.due(8000 + 15999) is None
    assert pad.due(8000 + 16000) == "42"
    assert pad.due(100000) is None


def test_the_bound_ends_the_digits() -> None:
    pad = Keypad(idle_ms=1000, max_digits=3)
    assert [pad.press(d, 0) for d in "1234"] == [None, None, "123", None]
    assert pad.due(16000) == "4"


async def test_keys_are_a_turn_the_agent_answers(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(["Thanks, account 1234 found."])
    call = make_call(stt=FakeStt("hello"), llm=llm, turn={"keypad_idle_ms": 500})
    for digit in "1234":
        await call.session.keypad.pressed(digit)
    assert llm.calls == []  # the caller may still be typing
    await call.push(silence(20))  # 640 ms of the line's audio: past the idle time
    await call.idle()

    done = call.done(1)
    assert done is not None and done.text == "Thanks, account 1234 found."
    assert llm.calls[0][-1].content == "Keypad: 1234"
    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "Keypad: 1234"),
        ("assistant", "Thanks, account 1234 found."),
    ]
    assert call.session.counts["dtmf"] == 4 and call.session.counts["keypad_turns"] == 1


async def test_a_key_over_the_reply_stops_it(make_call: Callable[..., Call]) -> None:
    reply = [f"{' ' if i else ''}Option {i} is here." for i in range(60)]
    llm = FakeLlm(reply, ["You chose two."], delay_s=0.005)
    call = make_call(stt=FakeStt("menu please"), llm=llm)
    await call.say()
    await call.until(lambda: len(call.frames(1)) >= 6)
    await call.session.keypad.pressed("2")
    await call.session.keypad.pressed("#")
    await call.idle()

    first, second = call.done(1), call.done(2)
    assert first is not None and first.status == "interrupted"
    assert second is not None and second.text == "You chose two."
    roles = [(m.role, m.content) for m in call.session.history.turns]
    assert roles[-2:] == [("user", "Keypad: 2"), ("assistant", "You chose two.")]
