"""Summarization of a long call with the real LLM, off the critical path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import (
    CARDS,
    RunningServer,
    history_of,
    librivox_clips,
    start_server,
    stop_server,
    wait_ready,
)
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def small_context_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server that summarizes once the conversation (the prompt less its instructions)
    passes 250 tokens, keeping 2 messages."""
    env = {"VOXPIPE_LLM__SUMMARIZE_AFTER_TOKENS": "250", "VOXPIPE_LLM__KEEP_RECENT_MESSAGES": "2"}
    server = start_server(Path(tmp_path_factory.mktemp("long-call")), env=env)
    try:
        wait_ready(server)
        yield server
    finally:
        stop_server(server)


async def test_older_turns_are_summarized_and_the_next_turn_stays_warm(
    small_context_server: RunningServer,
) -> None:
    clips = [c.path for c in librivox_clips()] + sorted(CARDS.glob("00*.wav"))
    async with NativeClient(small_context_server.ws) as client:
        await client.connect(instructions="You are a voice assistant. Answer in one sentence.")
        turns = []
        history: dict[str, object] = {}
        for path in clips[:9]:
            turns.append(await client.speak(*read_wav(path)))
            llm = turns[-1].metrics["llm"]
            if llm["prompt_tokens"] - llm["instruction_tokens"] < 250:  # the conversation's
                continue
            # Past the threshold the summary runs between turns: a caller who pauses long
            # enough (here up to 60 s, for a machine twice as slow on 2 busy cores) lets it
            # finish.
            for _ in range(120):
                history = await history_of(client)
                if history["summarized_messages"]:
                    break
                await asyncio.sleep(0.5)
            break
        # One more turn after the summary: its prompt starts with the new, shorter history.
        after = await client.speak(*read_wav(clips[9]))
    assert history["summarized_messages"], "no summary after the prompt passed the threshold"
    summary = history["summary"]
    assert isinstance(summary, str) and len(summary.split()) >= 3
    messages = history["messages"]
    assert isinstance(messages, list) and len(messages) <= 4
    assert all(t.status == "completed" for t in [*turns, after])
    llm = after.metrics["llm"]
    # The summarized prompt was pre-filled between turns: this turn evaluates only its message.
    longest = max(t.metrics["llm"]["prompt_tokens"] for t in turns)
    assert llm["prompt_tokens"] < longest, "the summary did not shorten the prompt"
    assert llm["prefill_tokens"] * 3 < llm["prompt_tokens"], llm
