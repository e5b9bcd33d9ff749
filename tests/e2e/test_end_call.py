"""``end_call`` over a phone line, with the real models: the caller says goodbye, the agent
says its own and calls ``end_call``, and the server closes the Twilio stream (1000) once
the goodbye has played: the caller heard it out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.turn_model import complete_sentence
from tests.e2e.test_twilio import _turns, _url, _voiced_s
from tests.support import RunningServer, start_server, stop_server, wait_ready
from voxpipe.clients.twilio_client import TwilioLine

pytestmark = pytest.mark.e2e

AGENT = "tests.e2e.end_call_agent:agent"


@pytest.fixture(scope="module")
def ending_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("end-call"), env={"VOXPIPE_AGENT": AGENT})
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)


async def test_goodbye_ends_the_call_after_it_has_played(ending_server: RunningServer) -> None:
    bye = complete_sentence("Thank you, that's all. Goodbye.")
    async with TwilioLine(_url(ending_server)) as line:
        await line.connect()
        line.say(bye, 16000)
        (turn,) = await _turns(ending_server, line.stream_sid, 1)
        closed = await line.wait_for(lambda: line.closed_code, 60)
        unplayed_s = line.buffered_s

    assert [t["name"] for t in turn.get("tools", [])] == ["end_call"], turn.get("tools")
    assert closed == 1000
    assert _voiced_s([r.message for r in line.of("media")]) > 0.3, "no goodbye was said"
    assert unplayed_s < 0.25, f"the stream closed with {unplayed_s:.2f} s of goodbye unplayed"
    assert turn["status"] == "completed" and turn["reply"].strip(), turn["reply"]


async def test_a_question_does_not_end_the_call(ending_server: RunningServer) -> None:
    ask = complete_sentence("What time do you open on Sunday?")
    async with TwilioLine(_url(ending_server)) as line:
        await line.connect()
        line.say(ask, 16000)
        (turn,) = await _turns(ending_server, line.stream_sid, 1)
        await line.wait_for(line.played_out, 60)
        still_open = line.closed_code is None
        await line.hang_up()

    assert not turn.get("tools"), turn.get("tools")  # a call made was dropped, not run
    assert still_open, "the call ended on a question"
    assert turn["reply"].strip() and "goodbye" not in turn["reply"].lower(), turn["reply"]
