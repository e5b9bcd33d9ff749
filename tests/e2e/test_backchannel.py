"""Speech over the reply on a phone line (Twilio μ-law, real time), with the real models:
an acknowledgement stops the agent for a moment and the reply goes on from where the
caller stopped hearing it, no LLM request and no turn in the history; a real interruption
("hold on, wait a second") is a turn."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.turn_model import complete_sentence
from tests.e2e.test_twilio import STORYTELLER, _turns, _url, _voiced_s
from tests.support import RunningServer, librivox_clips
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.twilio_client import TwilioLine
from voxpipe.conversation.overlap_words import unheard

pytestmark = pytest.mark.e2e


async def _over_the_reply(server: RunningServer, words: str) -> tuple[list[dict[str, Any]], float]:
    """Ask for a story, then say ``words`` (Piper's voice) once a second of it has played;
    the call's turn records, and the seconds of voiced audio sent after the clear."""
    overlap = complete_sentence(words)
    overlap = overlap[: len(overlap) - 32000]  # the clip less its 2 s of trailing silence
    async with TwilioLine(_url(server), {"instructions": STORYTELLER}) as line:
        await line.connect()
        line.say(*read_wav(librivox_clips()[1].path))
        await line.wait_for(lambda: line.of("media"), 90)
        await line.wait_for(lambda: line.played_s >= 1.0, 90)
        line.say(overlap, 16000)
        (clear,) = await line.wait_for(lambda: line.of("clear"), 30)
        turns = await _turns(server, line.stream_sid, 2)
        await line.wait_for(lambda: line.buffered_s == 0, 90)
        after = _voiced_s([r.message for r in line.of("media", since=clear.at)])
        await line.hang_up()
    return turns, after


async def test_okay_i_see_over_the_reply_is_no_turn_and_the_reply_goes_on(
    server: RunningServer,
) -> None:
    (first, second), after = await _over_the_reply(server, "Okay, I see.")
    assert first["status"] == "interrupted"
    rest = unheard(first["generated"], first["reply"])
    assert rest, "the interruption came after the last word: nothing to test"
    assert second["false_interruption"] == {"heard": second["transcript"], "rest": rest}
    assert second["status"] == "completed" and second["reply"] == rest
    # said as written, not asked of the model again
    assert second.get("llm", {}).get("prompt_tokens", 0) == 0, second.get("llm")
    assert after > 0.5, "the rest of the reply was not spoken"
    assert second["session_counts"]["false_interruptions"] == 1


async def test_hold_on_over_the_reply_is_a_turn(server: RunningServer) -> None:
    (first, second), _ = await _over_the_reply(server, "Hold on, wait a second.")
    assert first["status"] == "interrupted"
    assert "false_interruption" not in second
    assert "wait" in second["transcript"].lower(), second["transcript"]
    assert second["llm"]["prompt_tokens"] > 0
    assert np.isfinite(second["voice_to_voice_ms"])
