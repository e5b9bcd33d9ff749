"""The embedded model's tool calls: deciding to call, and writing the call under a grammar.

The decision is made on the reply's first token, from the logits llama.cpp holds after the
prompt: the probability of a call-like start (:meth:`LlamaToolCalls.call_probability`). A
call is then written as Qwen's template writes one (``qwen_tools.py``): ``<tool_call>`` and
the fixed start of the JSON are put in by us, the name and the arguments are sampled under
the tools' grammar, and sampling stops once the call's JSON object closes. A text reply
instead has those starts masked out of the same logits, so it cannot open a call.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from voxpipe.engines.base import (
    CancelToken,
    LlmOutput,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
    new_call_id,
)
from voxpipe.engines.qwen_tools import (
    CALL_CLOSE,
    CALL_OPEN,
    CALL_PREFIX,
    ArgumentsScanner,
    ToolCallParseError,
    call_grammar,
    parse_call,
)

if TYPE_CHECKING:
    from llama_cpp import Llama, LlamaGrammar


def call_probability(logits: np.ndarray, starts: np.ndarray) -> float:
    """The probability, under ``logits``, that the next token is one of ``starts``."""
    weights = np.exp(logits.astype(np.float64) - float(logits.max()))
    return float(weights[starts].sum() / weights.sum())


def call_start_ids(pieces: Iterator[bytes], call_open: int) -> np.ndarray:
    """Of the vocabulary's token texts (``pieces``, in id order), the ids that begin a call
    rather than words: ``<tool_call>``, and any token whose text starts with ``{`` or a
    backtick (JSON, or a fenced block of it), which this small model writes more readily
    than the tag when it means to call."""
    ids = [token for token, piece in enumerate(pieces) if piece.lstrip()[:1] in (b"{", b"`")]
    return np.array([call_open, *ids], dtype=np.intp)


class LlamaToolCalls:
    """Tool calls on one llama.cpp context; used under the engine's lock only."""

    def __init__(
        self, llm: Llama, threshold: float, temperature: float, top_p: float, max_tokens: int
    ) -> None:
        import llama_cpp

        self._llm = llm
        self._cpp = llama_cpp
        self.threshold = threshold  # P(a call-like first token) at which the model calls
        self.temperature = temperature  # for the call's name and arguments
        self.top_p = top_p
        self.max_tokens = max_tokens
        (self.call_open,) = llm.tokenize(CALL_OPEN.encode(), add_bos=False, special=True)
        (self.call_close,) = llm.tokenize(CALL_CLOSE.encode(), add_bos=False, special=True)
        self._prefix = llm.tokenize(CALL_PREFIX.encode(), add_bos=False, special=False)
        self._starts: np.ndarray | None = None
        self._grammars: dict[str, LlamaGrammar] = {}

    def call_starts(self) -> np.ndarray:
        """Found once, from the vocabulary (about a second on one core)."""
        if self._starts is None:
            model = self._llm._model
            pieces = (model.token_to_piece(t, special=True) for t in range(model.n_vocab()))
            self._starts = call_start_ids(pieces, self.call_open)
        return self._starts

    def logits(self) -> np.ndarray:
        """The next token's logits from the last evaluation (writable: the sampler reads
        these same floats)."""
        pointer = self._cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self._llm.n_vocab(),))

    def call_probability(self) -> float:
        return call_probability(self.logits(), self.call_starts())

    def mask_call_starts(self) -> None:
        """The next token sampled cannot begin a call."""
        self.logits()[self.call_starts()] = -np.inf

    def grammar(self, tools: tuple[ToolSpec, ...]) -> LlamaGrammar:
        from llama_cpp import LlamaGrammar

        key = json.dumps([tool.openai() for tool in tools], sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_string(call_grammar(tools), verbose=False)
        return self._grammars[key]

    def generate_call(
        self, tokens: list[int], tools: tuple[ToolSpec, ...], cancel: CancelToken, usage: LlmUsage
    ) -> Iterator[LlmOutput]:
        """After the prompt ``tokens``: write the call's fixed start, sample the rest under the
        tools' grammar until its JSON closes, yielding the name once written (an empty
        delta: the reply says the tool's phrase while the arguments are written), the
        arguments as they come, and then the call."""
        call_id = new_call_id()
        scanner = ArgumentsScanner()
        scanner.push(CALL_PREFIX)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        gen = self._llm.generate(
            [*tokens, self.call_open, *self._prefix],
            temp=self.temperature,
            top_p=self.top_p,
            top_k=40,
            repeat_penalty=1.0,  # JSON repeats quotes and braces by design
            reset=True,
            grammar=self.grammar(tools),
        )
        usage.finish_reason = "length"
        named = False  # the name went out, ahead of the arguments: the phrase can start
        try:
            for token in gen:
                if cancel.cancelled:
                    usage.finish_reason = "cancelled"
                    return
                if self._cpp.llama_vocab_is_eog(self._llm._model.vocab, token):
                    break
                usage.completion_tokens += 1
                delta = scanner.push(decoder.decode(self._llm.detokenize([token], special=True)))
                if delta or (scanner.name and not named):
                    named = True
                    yield ToolCallDelta(call_id, scanner.name, delta)
                if scanner.complete:
                    usage.finish_reason = "tool_calls"
                    break
                if usage.completion_tokens >= self.max_tokens:
                    break
        finally:
            gen.close()
        try:
            yield parse_call(scanner.text, tools, call_id)
        except ToolCallParseError as exc:  # cut off at max_tokens
            usage.extra["tool_call_errors"] = 1
            yield ToolCallRequest(call_id, scanner.name, {}, scanner.arguments_json, str(exc))
