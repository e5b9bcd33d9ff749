"""``end_call`` over a phone line, with the real models: the caller says goodbye, the agent
says its own and calls ``end_call``, and the server closes the Twilio stream (1000) once
the goodbye has played: the caller heard it out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_twilio import _voiced_s, say_on_a_line
from tests.support import RunningServer, serving

pytestmark = pytest.mark.e2e

AGENT = "tests.e2e.end_call_agent:agent"


@pytest.fixture(scope="module")
def ending_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from serving(tmp_path_factory.mktemp("end-call"), {"VOXPIPE_AGENT": AGENT})


async def test_goodbye_ends_the_call_after_it_has_played(ending_server: RunningServer) -> None:
    bye = "Thank you, that's all. Goodbye."
    line, turn, unplayed_s, closed = await say_on_a_line(
        ending_server, bye, lambda ln: ln.closed_code
    )

    assert [t["name"] for t in turn.get("tools", [])] == ["end_call"], turn.get("tools")
    assert closed == 1000
    assert _voiced_s([r.message for r in line.of("media")]) > 0.3, "no goodbye was said"
    assert unplayed_s < 0.25, f"the stream closed with {unplayed_s:.2f} s of goodbye unplayed"
    assert turn["status"] == "completed" and turn["reply"].strip(), turn["reply"]


async def test_a_question_does_not_end_the_call(ending_server: RunningServer) -> None:
    ask = "What time do you open on Sunday?"
    _, turn, _, closed = await say_on_a_line(ending_server, ask, lambda ln: ln.played_out())

    assert not turn.get("tools"), turn.get("tools")  # a call made was dropped, not run
    assert closed is None, "the call ended on a question"
    assert turn["reply"].strip() and "goodbye" not in turn["reply"].lower(), turn["reply"]
