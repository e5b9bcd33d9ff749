"""A second look at a tool request: the caller's last words judged without the turns before.

A small model takes its cue from the turns before: after a greeting and an answer in words
it may answer "do you have a table for four tomorrow?" in words too, making up the answer,
where asked alone it calls (docs/agents.md). So a request the conversation makes unlikely to
be a call is judged again alone (``llm.tool_router``), and a call it turns out to be is
written alone too, as the tool evaluation measures it. Asked alone, though, a small model
may take almost anything for a request (read sentences, a goodbye), so the words are judged
alone only if, said right after the agent's greeting, they could be one
(``llm.tool_router_floor``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from voxpipe.engines.base import ChatMessage, LlmUsage, ToolSpec
from voxpipe.engines.llama_prompt import LlamaPrompt
from voxpipe.engines.llama_solo import SoloContext
from voxpipe.engines.llama_tools import LlamaToolCalls


class ToolRouter:
    """The second look, on the solo context (``solo``) that holds the call's state."""

    def __init__(self, prompt: LlamaPrompt, solo: SoloContext, calls: LlamaToolCalls) -> None:
        self.prompt = prompt
        self.solo = solo
        self.calls = calls

    def alone_prompt(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...]
    ) -> list[int] | None:
        """The instructions and tools, then the caller's last words, without the turns
        between; None when there are none to leave out or the last words are not the
        caller's (:meth:`judged_alone`)."""
        system = [m for m in messages if m.role == "system"]
        if not messages or messages[-1].role != "user" or len(messages) <= len(system) + 1:
            return None
        return self.prompt.tokens([*system, messages[-1]], tools=tools)[0]

    def opening_allows(
        self,
        messages: Sequence[ChatMessage],
        tools: tuple[ToolSpec, ...],
        tokens: list[int],
        p_call: float,
        usage: LlmUsage,
        floor: float,
    ) -> bool:
        """Whether the caller's last words may be judged alone: they must not be out of
        the question right after the agent's greeting (P(call) at least ``floor``); True
        when the call has no greeting to judge them after, or the floor is 0.

        The probabilities measured, and the floor they set, are in docs/agents.md. The look
        shares the instructions and the greeting with the session's KV cache, so it costs
        the prefill of the caller's words."""
        if floor <= 0.0:
            return True
        opening = self._opening_prompt(messages, tools)
        if opening is None:
            return True
        if opening == tokens:  # the call so far is the greeting and these words
            p_opening = p_call
        else:
            with self.judged_alone(opening):
                p_opening = self.calls.call_probability()
        usage.extra["tool_call_p_opening"] = p_opening
        return p_opening >= floor

    def _opening_prompt(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...]
    ) -> list[int] | None:
        """The instructions and tools, the agent's greeting, then the caller's last words;
        None when the call did not begin with a greeting (an assistant message in words
        before any of the caller's) or the last words are not the caller's."""
        system = [m for m in messages if m.role == "system"]
        rest = [m for m in messages if m.role != "system"]
        if len(rest) < 2 or rest[-1].role != "user":
            return None
        greeting = rest[0]
        if greeting.role != "assistant" or greeting.tool_calls or not greeting.content.strip():
            return None
        return self.prompt.tokens([*system, greeting, rest[-1]], tools=tools)[0]

    @contextlib.contextmanager
    def judged_alone(self, alone: list[int]) -> Iterator[None]:
        """Inside: the context holds the ``alone`` prompt, evaluated; after: the session's
        state and its next token's logits, as they were. It costs the prefill of the
        caller's words (the instructions' KV is shared) and a copy of the session's KV state
        both ways."""
        with self.solo.evaluated_apart(alone, self.calls.logits):
            yield
