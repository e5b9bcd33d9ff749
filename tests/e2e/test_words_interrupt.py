"""Speech over the reply too short to interrupt it by duration, on a phone line (Twilio
μ-law, real time), with the real models: its words are read at its first silence, and
"Wait, stop." interrupts the reply and is a turn (``turn.interruption_phrases``).

The server here needs 3 s of speech to interrupt by duration (``min_interruption_ms``), so
every overlap is short by duration and only its words can stop the agent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_backchannel import _over_the_reply
from tests.support import RunningServer, serving

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {"VOXPIPE_TURN__MIN_INTERRUPTION_MS": "3000"}
    yield from serving(tmp_path_factory.mktemp("words-interrupt"), env)


async def test_wait_stop_interrupts_by_its_words(patient: RunningServer) -> None:
    (first, second), _ = await _over_the_reply(patient, "Wait, stop.")
    assert first["status"] == "interrupted", first["status"]
    assert "false_interruption" not in second
    heard = second["transcript"].lower()
    assert "wait" in heard or "stop" in heard, second["transcript"]
    assert second["session_counts"]["overlaps_interrupted_by_words"] == 1
    # No check that nothing passed as a backchannel: the comma's pause can make "Wait," and
    # "stop." two overlaps, and when Whisper does not hear "Wait" alone (it depends on where
    # the 32 ms windows fall), the first passes as a backchannel and "stop" takes the floor.
    assert second["llm"]["prompt_tokens"] > 0  # answered as a turn
