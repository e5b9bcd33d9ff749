"""Getting the server ready, and closing it down.

Models load in the background after the process starts, so ``/healthz`` (liveness) answers
at once while ``/readyz`` stays 503 until every engine has loaded *and* run a warm-up
inference (:func:`get_ready`). Calls that arrive before that are told ``server_not_ready``:
no caller ever meets a cold model.

Each engine warms up on its runner's thread, the one that serves its calls. An OpenMP
runtime (llama.cpp's, CTranslate2's) keeps a pool of workers for every thread that ever
ran a parallel region; a second live pool makes it throttle its spinning barriers (more
workers than cores), which cost llama.cpp about 35 % of its speed on 2 cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

from voxpipe.agent import Agent, RunningAgent
from voxpipe.config import Config
from voxpipe.config.engine_registry import ENGINES
from voxpipe.conversation.services import Filler
from voxpipe.conversation.tool_step import phrases_of
from voxpipe.engines.base import (
    CALLER_SENTENCE,
    CancelToken,
    ChatMessage,
    EngineError,
    Engines,
    LlmRequest,
    LlmUsage,
)
from voxpipe.engines.loader import load_engines, warm_one
from voxpipe.engines.model_files import ModelFileError
from voxpipe.engines.queued import QueuedEngines, QueuedLlm, Runners
from voxpipe.server.sip_calls import SipCalls
from voxpipe.server.state import ServerState
from voxpipe.server.store import open_store
from voxpipe.server.webrtc_offers import WebRTCOffers

log = logging.getLogger("voxpipe.server")

EnginesLoader = Callable[[Config], Engines]
"""Loads the engines without running them: the server warms each one on its runner."""


async def warm_up(engines: QueuedEngines) -> None:
    """One warm-up inference per engine, in turn, each on the thread that will serve it."""
    for queued in engines.all():
        await queued.run(warm_one)


async def warm_agent(config: Config, llm: QueuedLlm, agent: RunningAgent) -> None:
    """With tools, every call's prompt starts with the agent's instructions and its tools (a
    chat template may put them in the system message), and its first reply takes the tool
    path (the decision on the first token, its scan of the vocabulary, the grammar). For an
    engine that keeps its prompts' KV in this process (``keeps_prompt_cache``), run that once
    now, on the LLM's thread, and leave the prompt's KV in the context."""
    tools = agent.toolbox.specs()
    if not tools or not ENGINES.get("llm", config.llm.engine).keeps_prompt_cache:
        return
    system = ChatMessage("system", agent.agent.instructions)
    session, cancel = "__warmup_tools__", CancelToken()
    messages = [system, ChatMessage("user", CALLER_SENTENCE)]
    stream = llm.stream(LlmRequest(session, messages, cancel, LlmUsage(), tuple(tools)))
    async with contextlib.aclosing(stream):
        async for _ in stream:
            pass
    await llm.prefill(session, [system], cancel, tools=tools)
    llm.forget(session)


def load_cold_engines(config: Config, state: ServerState | None = None) -> Engines:
    """The engines, not yet warm; a remote LLM's refusals go to the server's metrics."""
    on_refusal = None if state is None else functools.partial(state.metrics.upstream_refused, "llm")
    return load_engines(config, warm=False, on_refusal=on_refusal)


async def get_ready(state: ServerState, load: EnginesLoader, agent: Agent) -> None:
    """Load and warm the engines, synthesize the filler and the tools' phrases, start the
    agent and open the store; then the server is ready. A failure is reported on
    ``/readyz`` and in the log, and the process stays alive."""
    config = state.config
    runners: Runners | None = None
    try:
        engines = await asyncio.to_thread(load, config)
        runners = state.start_runners(engines)
        queued = QueuedEngines.of(engines, runners)
        await warm_up(queued)
        filler = await queued.tts.run(functools.partial(Filler.synthesize, config.deadlines.filler))
        state.agent = await RunningAgent.start(agent)  # MCP servers' tools found here
        await warm_agent(config, queued.llm, state.agent)
        phrases = await queued.tts.run(
            functools.partial(Filler.synthesize_all, phrases_of(state.agent.toolbox))
        )
        store = await open_store(config.store, state.worker)
    except Exception as exc:  # reported on /readyz and in the log; the process stays alive
        if isinstance(exc, EngineError | ModelFileError):  # a model refused: no bug
            log.error("model loading failed: %s", exc)
        else:
            log.exception("model loading failed")
        state.load_error = f"{type(exc).__name__}: {exc}"
        if runners is not None:
            runners.close()
        return
    state.install(engines, runners, filler, store, phrases)


async def shut_down(state: ServerState, webrtc: WebRTCOffers, sip: SipCalls | None) -> None:
    """Close what lives outside any HTTP request, then the agent, the engines' threads and
    the store, and send the spans still buffered."""
    await webrtc.close()  # its peer connections live outside any HTTP request
    if sip is not None:
        await sip.close()  # so do SIP calls: each ends with a BYE
    await state.auth.aclose()
    if state.agent is not None:
        await state.agent.aclose()
    if state.services is not None:
        state.services.runners.close()
        if state.services.store is not None:
            await state.services.store.aclose()
    await asyncio.to_thread(state.tracing.shutdown)  # the spans still buffered go out
