"""Mode ``--engines``: each utterance through Whisper, then the LLM, with no server.

What the model does with one caller turn, alone: the agent's instructions as the system
message, the transcript as the user's, the agent's tools offered (``stream(...,
tools=...)``, whose items are text or a ``ToolCallRequest``). Every utterance is a
conversation of its own, so one answer cannot colour the next. No tool is run: the first
generation is what is scored, as it is what decides the tool.

A reply in words that states what a tool owns with nothing behind it is stopped as the
server stops it (``llm.hold_claims``, ``conversation/claims.py``): the model is asked again
for a call, and that call is the outcome's, with the words said before the claim.

A call of a tool that acts with a value the model made up whole (a name the caller never
said) is asked about instead, as the server's tool round does (``tool_step.py``): the
outcome has no call, and the question is its reply.

An engine whose ``stream`` takes no ``tools`` yet is asked without them; the run then says
"tools not supported by this engine" and scores only the plain answers.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.tool_eval.dataset import Utterance
from bench.tool_eval.outcome import CalledTool, Outcome, arguments_of
from voxpipe.agent import Agent
from voxpipe.config import Config
from voxpipe.conversation.claims import ClaimGate, ClaimRules, forced_calls, known_words
from voxpipe.conversation.confirmation import (
    as_said,
    own_names,
    question_for,
    unheard_fields,
)
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    LlmEngine,
    LlmUsage,
    SttEngine,
    ToolCallRequest,
    ToolSpec,
)

TOOLS_UNSUPPORTED = "tools not supported by this engine"


def takes_tools(llm: LlmEngine) -> bool:
    """Whether the engine's ``stream`` has a ``tools`` parameter (the LLM side of tool calls)."""
    try:
        return "tools" in inspect.signature(llm.stream).parameters
    except (TypeError, ValueError):
        return False


def tools_argument(agent: Agent) -> list[ToolSpec]:
    """The agent's tools as the engine is given them."""
    return [tool.spec for tool in agent.python_tools]


class EngineRun:
    """The STT and LLM engines of ``config``, loaded once for the whole run."""

    def __init__(self, config: Config, with_stt: bool = True) -> None:
        from voxpipe.engines.loader import limit_numpy_threads, load_llm, load_stt

        limit_numpy_threads()
        self.stt: SttEngine | None = load_stt(config) if with_stt else None
        self.llm = load_llm(config)
        self.tools_supported = takes_tools(self.llm)
        self.hold_claims = config.llm.hold_claims

    def run(
        self,
        agent: Agent,
        utterances: Sequence[Utterance],
        audio_of: Callable[[Utterance], np.ndarray] | None,
        offer_tools: bool,
        progress: Callable[[Utterance, Outcome], None] = lambda u, o: None,
        greeting: str | None = None,
    ) -> list[Outcome]:
        """One outcome per utterance. ``audio_of`` None: the written text is the transcript.
        ``greeting``: said before each utterance, as a call's first turn has it."""
        tools = tools_argument(agent) if offer_tools and self.tools_supported else None
        outcomes = []
        for n, utterance in enumerate(utterances):
            started = time.monotonic()
            try:
                heard = utterance.text
                if audio_of is not None and self.stt is not None:
                    heard = self.stt.transcribe(audio_of(utterance)).text.strip()
                outcome = self._answer(
                    f"tool-eval-{n}", agent, utterance.id, heard, tools, greeting
                )
            except Exception as exc:  # one failed utterance is a row, not the end of the run
                outcome = Outcome(utterance.id, error=f"{type(exc).__name__}: {exc}")
            outcome.seconds = time.monotonic() - started
            outcomes.append(outcome)
            progress(utterance, outcome)
        return outcomes

    def _answer(
        self,
        session: str,
        agent: Agent,
        id_: str,
        heard: str,
        tools: list[ToolSpec] | None,
        greeting: str | None,
    ) -> Outcome:
        messages = [ChatMessage("system", agent.instructions)]
        if greeting:
            messages.append(ChatMessage("assistant", greeting))
        messages.append(ChatMessage("user", heard))
        extra: dict[str, Any] = {} if tools is None else {"tools": tools}
        outcome = Outcome(id_, heard=heard)
        usage = LlmUsage()
        try:
            outcome.reply = self._ask(session, messages, usage, outcome, extra).strip()
            outcome.router = {k: v for k, v in usage.extra.items() if k.startswith("tool_call_p")}
            if tools and self.hold_claims and not outcome.calls:
                gate = ClaimGate(ClaimRules(tools), known_words(messages))
                said = gate.push(outcome.reply) + gate.flush()
                if gate.stopped is not None:  # the server asks again, for a call
                    outcome.unbacked_claim = f"{gate.stopped.kind}: {gate.stopped.text}"
                    again = {**extra, "tool_choice": "required"}
                    self._ask(session, messages, LlmUsage(), outcome, again)
                    outcome.reply = said.strip()
                    self._ground(outcome, agent, heard)
            self._ask_for_made_up(outcome, agent, heard)
        finally:
            self.llm.forget(session)
        return outcome

    def _ground(self, outcome: Outcome, agent: Agent, heard: str) -> None:
        """As the server keeps the calls written after a claim (``claims.forced_calls``):
        the ones that run, or none and what is said instead."""
        calls = [ToolCallRequest("", c.name, dict(c.arguments), "") for c in outcome.calls]
        forced = forced_calls(calls, {t.name: t for t in agent.python_tools}, heard)
        outcome.calls = [CalledTool(c.name, dict(c.arguments)) for c in forced.run]
        if (instead := forced.instead) is not None:
            outcome.reply = f"{outcome.reply} {instead}".strip()

    @staticmethod
    def _ask_for_made_up(outcome: Outcome, agent: Agent, heard: str) -> None:
        """As the server's tool round: a time or weekday written other than the caller
        said it is put back as said; an optional value made up whole is left out; a call with a
        required one is not made, and the value is asked for."""
        tools = {t.name: t for t in agent.python_tools}
        own = own_names(agent.instructions)
        for i, call in enumerate(outcome.calls):
            tool = tools.get(call.name)
            if tool is None:
                continue
            written = ToolCallRequest("", call.name, dict(call.arguments), "")
            asked = unheard_fields(tool, call.arguments, heard, own, whole=not tool.policy.confirm)
            if (said := as_said(tool, written, heard, asked)) is not written:
                outcome.calls[i] = call = CalledTool(call.name, dict(said.arguments))
            if tool.policy.confirm:
                continue
            made_up = unheard_fields(tool, call.arguments, heard, own, whole=True)
            required = set(tool.spec.parameters.get("required") or ())
            if optional := [n for n in made_up if n not in required]:
                kept = {k: v for k, v in call.arguments.items() if k not in optional}
                outcome.calls[i] = CalledTool(call.name, kept)
            if made_up := [n for n in made_up if n in required]:
                outcome.calls, outcome.reply = [], question_for(made_up)
                return

    def _ask(
        self,
        session: str,
        messages: list[ChatMessage],
        usage: LlmUsage,
        outcome: Outcome,
        extra: dict[str, Any],
    ) -> str:
        """One request: its calls go into ``outcome``; returns its words."""
        text = []
        for item in self.llm.stream(session, messages, CancelToken(), usage, **extra):
            if isinstance(item, str):
                text.append(item)
            elif isinstance(item, ToolCallRequest):  # deltas only show it being written
                outcome.calls.append(CalledTool(item.name, arguments_of(item.arguments)))
        return "".join(text)
