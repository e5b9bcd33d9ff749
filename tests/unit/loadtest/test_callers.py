"""How a caller tells a refusal at the door from a crash, and the speech it says."""

from __future__ import annotations

import pytest
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK
from websockets.frames import Close

from voxpipe.clients.native_client import NativeClient
from voxpipe.loadtest.callers import LIBRIVOX, librivox_clips, refusal_code

CLIENT = NativeClient("ws://127.0.0.1:1/v1/voice")


def closed(code: int) -> ConnectionClosedError:
    return ConnectionClosedError(Close(code, ""), Close(code, ""), True)


def test_refusals_are_recognised() -> None:
    event = {"type": "error", "code": "at_capacity", "message": "the server is at capacity"}
    assert refusal_code(RuntimeError(f"session.start refused: {event}"), CLIENT) == "at_capacity"
    assert refusal_code(closed(1013), CLIENT) == "try_again_later"


def test_other_failures_are_not_refusals() -> None:
    assert refusal_code(closed(1011), CLIENT) is None
    assert refusal_code(ConnectionClosedOK(None, None), CLIENT) is None
    assert refusal_code(RuntimeError("something else"), CLIENT) is None
    assert refusal_code(OSError("connection refused"), CLIENT) is None


@pytest.mark.skipif(not LIBRIVOX.is_dir(), reason="pocketsphinx-testdata: run `make sysdeps`")
def test_librivox_clips_have_audio_and_transcripts() -> None:
    clips = librivox_clips()
    assert len(clips) == 5
    assert all(c.text and 2 < c.seconds < 10 and c.rate == 16000 for c in clips)
    assert clips[1].text == "he was not an ill disposed young man"
