"""The remote LLM engine against a real OpenAI-compatible server on loopback:
llama-cpp-python's server on the embedded model."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import librivox_clips, start_server, stop_server, wait_ready
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.config import Config, LlmConfig, RemoteLlmConfig
from voxpipe.engines.base import CancelToken, ChatMessage, LlmRequest, LlmUsage
from voxpipe.engines.loader import llm_model_path
from voxpipe.engines.openai_llm import OpenAiCompatibleLlm
from voxpipe.loadtest.server_process import free_port

pytestmark = pytest.mark.e2e

STORY = [
    ChatMessage("system", "You are a storyteller. Tell long stories."),
    ChatMessage("user", "Tell me a long story about a lighthouse keeper."),
]
# llama.cpp prints one of these when a generation runs to its end, none when it is stopped.
FINISHED = "llama_perf_context_print:        eval time"


@dataclass
class LlamaServer:
    url: str
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    port, log = free_port(), tmp_path_factory.mktemp("llama") / "server.log"
    model = str(llm_model_path(Config()))
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
           # requests wait their turn, as at a real server, instead of cutting the one running
           "--interrupt_requests", "false"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield LlamaServer(url, log)
    finally:
        process.terminate()
        process.wait(20)


def engine(server: LlamaServer, max_tokens: int = 300) -> OpenAiCompatibleLlm:
    return OpenAiCompatibleLlm(
        RemoteLlmConfig(base_url=server.url), LlmConfig(max_tokens=max_tokens)
    )


def test_a_reply_streams_from_the_server(llama_server: LlamaServer) -> None:
    usage = LlmUsage()
    text = "".join(
        engine(llama_server, 40).stream(
            "s1", [ChatMessage("user", "What is the capital of France?")], CancelToken(), usage
        )
    )
    assert "paris" in text.lower(), text
    assert usage.finish_reason in ("stop", "length") and 0 < usage.completion_tokens <= 40


def test_a_cancel_mid_stream_stops_the_generation_upstream(llama_server: LlamaServer) -> None:
    llm = engine(llama_server, max_tokens=400)
    finished_before = llama_server.text().count(FINISHED)
    cancel, usage, got = CancelToken(), LlmUsage(), []
    for delta in llm.stream("s2", STORY, cancel, usage):
        got.append(delta)
        if len(got) == 4:
            threading.Thread(target=cancel.cancel).start()  # a barge-in, from the loop
    assert usage.finish_reason == "cancelled" and len(got) < 40, (len(got), usage)
    # The server serves one generation at a time: the next request is answered only once the
    # cancelled one has stopped, and it is the only one that runs to its end.
    after = LlmUsage()
    reply = "".join(llm.stream("s2", [ChatMessage("user", "Say OK.")], CancelToken(), after))
    assert reply and after.finish_reason in ("stop", "length")
    log = llama_server.text()
    assert "Disconnected from client" in log, "the server never saw the stream close"
    assert log.count(FINISHED) == finished_before + 1, "the cancelled generation ran to its end"


async def test_a_voice_turn_runs_on_the_remote_engine(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    server = start_server(
        tmp_path,
        env={
            "VOXPIPE_LLM__ENGINE": "openai",
            "VOXPIPE_REMOTE_LLM__BASE_URL": llama_server.url,
            "VOXPIPE_LLM__MAX_TOKENS": "40",
        },
    )
    try:
        wait_ready(server)
        clip = librivox_clips()[1]
        async with NativeClient(server.ws) as client:
            started = await client.connect(instructions="Answer in one short sentence.")
            turn = await client.speak(*read_wav(clip.path))
    finally:
        stop_server(server)
    assert started["models"]["llm"].startswith("openai-compatible"), started["models"]
    assert turn.status == "completed", turn.events
    assert turn.reply.strip() and len(turn.audio) > 0
    assert turn.metrics["llm"]["completion_tokens"] > 0, turn.metrics


async def test_several_calls_at_once_each_have_their_own_stream_and_cancel(
    llama_server: LlamaServer,
) -> None:
    """The remote engine behind the same facade as the batched one: the LLM's runner has a
    thread per connection, each call streams on its own, and a barge-in on one call closes
    only that call's stream."""
    import asyncio
    import contextlib

    from voxpipe.engines.queued import QueuedLlm
    from voxpipe.engines.runner import EngineRunner

    llm = QueuedLlm(engine(llama_server, max_tokens=30), EngineRunner("llm", workers=3))
    questions = {"paris": "What is the capital of France?", "blue": "What colour is the sky?"}
    barged = CancelToken()

    async def ask(session: str, messages: list[ChatMessage], cancel: CancelToken) -> tuple:
        usage, parts = LlmUsage(), []
        stream = llm.stream(LlmRequest(session, messages, cancel, usage))
        async with contextlib.aclosing(stream):
            async for delta in stream:
                parts.append(delta)
                if cancel is barged and len(parts) == 3:
                    cancel.cancel()
        return "".join(str(p) for p in parts), usage

    try:
        (story, story_usage), *answers = await asyncio.gather(
            ask("story", STORY, barged),
            *(ask(key, [ChatMessage("user", q)], CancelToken()) for key, q in questions.items()),
        )
    finally:
        llm.runner.close()
    assert story_usage.finish_reason == "cancelled" and len(story) < 200, (story, story_usage)
    for key, (text, usage) in zip(questions, answers, strict=True):
        assert key in text.lower(), (key, text)
        assert usage.finish_reason in ("stop", "length")
