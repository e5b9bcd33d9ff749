"""A second look at a tool request: the caller's last words judged without the turns before.

A small model takes its cue from the turns before: after a greeting and an answer in words
it may answer "do you have a table for four tomorrow?" in words too, making up the answer,
where asked alone it calls (docs/agents.md). So a request the conversation makes unlikely to
be a call is judged again alone (``llm.tool_router``), and a call it turns out to be is
written alone too, as the tool evaluation measures it. Asked alone, though, a small model
may take almost anything for a request (read sentences, a goodbye), so the words are judged
alone only if, said right after the agent's greeting, they could be one
(``llm.tool_router_floor``).

Lookups (read-only tools) get one more chance when the floor rules the words out: judged
alone, the call is written, and kept only if it is to a lookup and the caller said every
argument it has (``call_grounding.py``, ``llm.lookup_router``). A question a lookup owns
("what time do you open on Sunday?", "where is my taxi, the name is Brown?") reads to a
small model after a greeting like small talk, and answered in words its facts are made
up; a read sentence or a goodbye that the look alone takes for a request names none of the
call's values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    LlmOutput,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
)
from voxpipe.engines.call_grounding import (
    arguments_said,
    said_so_far,
    said_words,
)
from voxpipe.engines.llama_prompt import LlamaPrompt
from voxpipe.engines.llama_solo import SoloContext, look_key
from voxpipe.engines.llama_tools import LlamaToolCalls

LOOKUP_TRIES = 2
"""Calls written for a lookup before the reply is left to words: each try leaves out the
tool the one before wrote with an argument the caller never said."""


class ToolRouter:
    """The second look, on the solo context (``solo``) that holds the call's state."""

    def __init__(self, prompt: LlamaPrompt, solo: SoloContext, calls: LlamaToolCalls) -> None:
        self.prompt = prompt
        self.solo = solo
        self.calls = calls

    def look_messages(self, messages: Sequence[ChatMessage]) -> dict[str, list[ChatMessage]]:
        """The messages of each look (:data:`~voxpipe.engines.llama_solo.LOOKS`) the call's
        ``messages`` allow: "alone", the instructions and the caller's last words, when
        there are turns between to leave out; "opening", the instructions, the agent's
        greeting and the caller's last words, when the call began with a greeting."""
        system = [m for m in messages if m.role == "system"]
        rest = [m for m in messages if m.role != "system"]
        if not messages or messages[-1].role != "user" or len(rest) < 2:
            return {}
        looks = {"alone": [*system, rest[-1]]}
        greeting = rest[0]
        if greeting.role == "assistant" and not greeting.tool_calls and greeting.content.strip():
            looks["opening"] = [*system, greeting, rest[-1]]
        return looks

    def alone_prompt(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...]
    ) -> list[int] | None:
        """The instructions and tools, then the caller's last words, without the turns
        between; None when there are none to leave out or the last words are not the
        caller's (:meth:`judged_alone`)."""
        alone = self.look_messages(messages).get("alone")
        return None if alone is None else self.prompt.tokens(alone, tools=tools)[0]

    def opening_allows(
        self,
        messages: Sequence[ChatMessage],
        tools: tuple[ToolSpec, ...],
        tokens: list[int],
        p_call: float,
        usage: LlmUsage,
        floor: float,
        session_id: str = "",
    ) -> bool:
        """Whether the caller's last words may be judged alone: they must not be out of
        the question right after the agent's greeting (P(call) at least ``floor``); True
        when the call has no greeting to judge them after, or the floor is 0.

        The probabilities measured, and the floor they set, are in docs/agents.md. The look
        shares the instructions and the greeting with the session's KV cache, so it costs
        the prefill of the caller's words (their last words, when a warm of
        ``session_id`` prepared the look)."""
        if floor <= 0.0:
            return True
        opening = self._opening_prompt(messages, tools)
        if opening is None:
            return True
        if opening == tokens:  # the call so far is the greeting and these words
            p_opening = p_call
        else:
            with self.judged_alone(opening, look_key(session_id, "opening"), usage):
                p_opening = self.calls.call_probability()
        usage.extra["tool_call_p_opening"] = p_opening
        return p_opening >= floor

    def _opening_prompt(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...]
    ) -> list[int] | None:
        """The instructions and tools, the agent's greeting, then the caller's last words;
        None when the call did not begin with a greeting (an assistant message in words
        before any of the caller's) or the last words are not the caller's."""
        opening = self.look_messages(messages).get("opening")
        return None if opening is None else self.prompt.tokens(opening, tools=tools)[0]

    def said_lookup(
        self,
        alone: list[int],
        messages: Sequence[ChatMessage],
        tools: tuple[ToolSpec, ...],
        cancel: CancelToken,
        usage: LlmUsage,
        threshold: float,
        session_id: str = "",
    ) -> list[LlmOutput] | None:
        """The call the look alone writes after the ``alone`` prompt (if its P(call)
        reaches ``threshold``), if it is to a read-only tool and the caller's last words
        hold every argument it wrote; None otherwise (the reply is then in words, as
        before). A call to a tool that acts is never made on this cue. A lookup written
        with an argument not said is written once more without that tool (a question about
        opening hours first written as an availability check with a made-up party). Costs
        the prefill of the caller's words, and, when the look calls, each call's tokens up
        to where it goes wrong."""
        if not any(t.read_only for t in tools):
            return None
        said = said_words(messages[-1].content)
        offered = tools
        with self.judged_alone(alone, look_key(session_id, "alone"), usage):
            usage.extra["tool_call_p_alone"] = p_alone = self.calls.call_probability()
            for _ in range(LOOKUP_TRIES):
                if p_alone < threshold or cancel.cancelled:
                    break
                items, tool = self._written_lookup(alone, offered, said, cancel, usage)
                if items is not None:
                    usage.extra["lookup_said"] = 1
                    return items
                if tool is None or not tool.read_only:
                    break
                usage.extra["lookup_unsaid"] = usage.extra.get("lookup_unsaid", 0) + 1
                offered = tuple(t for t in offered if t is not tool)
                if not any(t.read_only for t in offered):
                    break
        usage.extra.pop("tool_call_errors", None)  # the words' reply follows, as if unasked
        usage.finish_reason = "cancelled" if cancel.cancelled else ""
        return None

    def _written_lookup(
        self,
        alone: list[int],
        offered: tuple[ToolSpec, ...],
        said: frozenset[str],
        cancel: CancelToken,
        usage: LlmUsage,
    ) -> tuple[list[LlmOutput] | None, ToolSpec | None]:
        """One call written after ``alone``: its items if it is a lookup the caller said,
        else None; and the tool it was written for (None: no tool). The writing stops at the
        name of a tool that acts, or at the first finished part of a value that was not said
        (the year of a date nobody named: the rest of it is not written)."""
        by_name = {t.name: t for t in offered}
        items: list[LlmOutput] = []
        arguments = ""
        writing = self.calls.generate_call(alone, offered, cancel, usage)
        try:
            for item in writing:
                items.append(item)
                if isinstance(item, ToolCallDelta):
                    tool = by_name.get(item.name)
                    arguments += item.arguments_delta
                    if tool is None or not tool.read_only:
                        return None, tool
                    if not said_so_far(arguments, said):
                        return None, tool
        finally:
            writing.close()
        call = items[-1] if items and isinstance(items[-1], ToolCallRequest) else None
        tool = by_name.get(call.name) if call is not None else None
        if call is None or call.error or tool is None or not tool.read_only:
            return None, tool
        return (items if arguments_said(call.arguments, said) else None), tool

    @contextlib.contextmanager
    def judged_alone(
        self, alone: list[int], look: str | None = None, usage: LlmUsage | None = None
    ) -> Iterator[None]:
        """Inside: the context holds the ``alone`` prompt, evaluated; after: the session's
        state and its next token's logits, as they were. It costs the prefill of the
        caller's words (the instructions' KV is shared; only the last words when a warm
        saved the ``look``) and a copy of the session's KV state both ways."""
        with self.solo.evaluated_apart(alone, self.calls.logits, look=look) as warmed:
            if warmed and usage is not None:  # how many looks a warm prepared
                usage.extra["looks_warmed"] = usage.extra.get("looks_warmed", 0) + 1
            yield
