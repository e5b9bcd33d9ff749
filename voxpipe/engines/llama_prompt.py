"""The embedded model's prompt, in the GGUF's own chat template.

Rendered as llama-cpp-python renders it (``llama_template.py``): template text is tokenized
with special tokens parsed, message text never is, so a caller cannot inject
``<|im_start|>``. With tools, the messages and the tools are put as the model's tool family
wants them (``tool_family.py``), chosen here from the template and the GGUF's metadata, as
the family decides how a prompt with tools reads. When a prompt and a full reply would
overflow the context, the oldest turns go first, never the instructions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voxpipe.engines.base import ChatMessage, LlmUsage, PromptTooLong, ToolSpec
from voxpipe.engines.llama_template import (
    ChatTemplate,
    ChatTemplateError,
    Segment,
    alternating,
    model_template,
)
from voxpipe.engines.llama_tools import choose_family, single_token
from voxpipe.engines.tool_family import ToolFamily, ToolsUnsupportedError, native_chat

# Segment texts tokenized, kept to spare re-tokenizing a call's history every turn.
_TOKENS_KEPT = 4096


class LlamaPrompt:
    """The prompts of one loaded model (``llm``: its ``llama_cpp.Llama``)."""

    def __init__(
        self,
        llm: Any,
        model_path: Path,
        *,
        n_ctx: int,
        max_tokens: int,
        chat_template: Path | None = None,
        tool_family: str = "auto",
    ) -> None:
        import llama_cpp

        self._llm = llm
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.max_tokens = max_tokens  # room kept for the reply
        model = llm._model

        def text(token: int) -> str:
            return model.token_get_text(token) if token >= 0 else ""

        self._bos = llm.token_bos()
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(model.vocab))
        self.template: ChatTemplate = model_template(
            llm.metadata, text(self._bos), text(llm.token_eos()), model_path, chat_template
        )
        self.family: ToolFamily | None = choose_family(
            self.template.source,
            str(llm.metadata.get("general.architecture", "")),
            lambda text: single_token(llm, text) is not None,
            tool_family,
        )
        self._tokens: dict[tuple[str, bool], list[int]] = {}
        self._alternate = False  # set once the template refuses turns out of alternation

    def text(self, text: str) -> list[int]:
        """Plain words' tokens (special tokens not parsed)."""
        return self._llm.tokenize(text.encode(), add_bos=False, special=False)

    def refuse_tools(self) -> None:
        """Raise :class:`ToolsUnsupportedError` if the model has no tool family."""
        if self.family is None:
            raise ToolsUnsupportedError(
                f"{self.model_path.name} cannot call tools (llm.tool_family is none). Fix: "
                "give the agent no tools, or set llm.tool_family to auto or json."
            )

    def tokens(
        self,
        messages: Sequence[ChatMessage],
        add_header: bool = True,
        tools: Sequence[ToolSpec] = (),
        usage: LlmUsage | None = None,
    ) -> tuple[list[int], int]:
        """The prompt's tokens in the model's chat template, the generation prompt last
        (``add_header``); drops the oldest turns (never the system prompt) when the prompt
        and a full reply would overflow the context. Returns the tokens and the number of
        turns dropped. ``tools`` go where the model's family puts them. ``usage`` gets the
        instructions' length (the summarizer's threshold leaves it out)."""
        system = [m for m in messages if m.role == "system"]
        rest = [m for m in messages if m.role != "system"]
        dropped = 0
        while True:
            head, pieces, header = self._render([*system, *rest], tools)
            if not add_header:
                header = []
            budget = self.n_ctx - self.max_tokens - len(head) - len(header)
            if sum(map(len, pieces)) <= budget:
                break
            if not rest:
                raise PromptTooLong(
                    f"the instructions and tools take {len(head)} tokens: with a reply's "
                    f"{self.max_tokens} they do not fit in the context window of {self.n_ctx}"
                )
            rest = _without_first_turn(rest)
            dropped += 1
        if usage is not None:
            usage.instruction_tokens = len(head)
        return [*head, *(t for p in pieces for t in p), *header], dropped

    def _segments_tokens(self, segments: Sequence[Segment]) -> list[int]:
        """Template text with special tokens parsed; message text as plain words."""
        out: list[int] = []
        for segment in segments:
            key = (segment.text, segment.literal)
            tokens = self._tokens.get(key)
            if tokens is None:
                tokens = self._llm.tokenize(
                    segment.text.encode(), add_bos=False, special=not segment.literal
                )
                if len(self._tokens) >= _TOKENS_KEPT:
                    self._tokens.clear()
                self._tokens[key] = tokens
            out += tokens
        return out

    def _render(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], list[list[int]], list[int]]:
        """The instructions' tokens, one token list per later turn (a run of tool results
        is one turn), and the generation prompt's tokens, from the model's template."""
        if tools:
            self.refuse_tools()
        convert = self.family.chat if tools and self.family else native_chat
        chat, template_tools = convert(messages, tools, self.template.supports_tools)
        if self._alternate:
            chat = alternating(chat)
        try:
            pieces, generation, n_system = self._turn_texts(chat, template_tools)
        except ChatTemplateError:
            if self._alternate:
                raise
            self._alternate = True  # a template that wants user and assistant in turn
            pieces, generation, n_system = self._turn_texts(alternating(chat), template_tools)
        head: list[int] = []
        rest: list[list[int]] = []
        for end, segments in pieces:
            tokens = self._segments_tokens(segments)
            if end <= n_system:
                head += tokens
            else:
                rest.append(tokens)
        if self._add_bos and self._bos >= 0:
            first = head or (rest[0] if rest else [])
            if first[:1] != [self._bos]:
                head = [self._bos, *head]
        return head, rest, self._segments_tokens(generation)

    def _turn_texts(
        self, chat: list[dict[str, Any]], template_tools: list[dict[str, Any]] | None
    ) -> tuple[list[tuple[int, list[Segment]]], list[Segment], int]:
        """The template's turns of ``chat`` (a run of tool results is one turn), its
        generation prompt, and how many system messages lead it."""
        n_system = 0
        while n_system < len(chat) and chat[n_system]["role"] == "system":
            n_system += 1
        turns = [n_system] if n_system else []
        turns += [
            i for i in range(n_system + 1, len(chat))
            if not (chat[i]["role"] == "tool" and chat[i - 1]["role"] == "tool")
        ]  # fmt: skip
        if len(chat) > n_system:
            turns.append(len(chat))
        pieces, generation = self.template.turn_texts(chat, turns, template_tools)
        return pieces, generation, n_system


def _without_first_turn(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` (no system ones) without their first turn: a message, or a run of
    tool results."""
    end = 1
    while end < len(messages) and messages[0].role == messages[end].role == "tool":
        end += 1
    return messages[end:]
