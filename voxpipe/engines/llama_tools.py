"""The embedded model's tool calls: deciding to call, and writing the call under a grammar.

The decision is made on the reply's first token, from the logits llama.cpp holds after the
prompt: the probability of a call-like start (:meth:`LlamaToolCalls.call_probability`). A
call is then written as the model's family writes one (``tool_family.py``; Qwen's
``<tool_call>``, Llama 3's JSON, or the generic JSON): the opening token, if the family has
one, and the fixed start of the JSON are put in by us, the name is sampled until only one tool's
fits, and the arguments follow :func:`~voxpipe.engines.qwen_tools.call_steps`: what the
schema fixes (keys, quotes, commas) goes into the context in one batch, and only the values
are sampled, each under its own grammar. On two cores a sampled token costs a decode step
(about 26 ms after the restaurant agent's prompt), ten tokens in one batch about 120 ms, so
a booking's call takes about a third less time than one sampled whole
(``docs/benchmarks.md``). Greedy values (the default ``llm.tool_temperature`` 0) check the
model's best token against the grammar first (``grammar_sampler.py``: 0.2 ms a token, where
the grammar over the whole vocabulary took 11). A text reply instead has
the call's starts masked out of the same logits, so it cannot open a call.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from voxpipe.engines import json_tools, llama3_tools, qwen_tools
from voxpipe.engines.base import (
    CancelToken,
    LlmOutput,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
    new_tool_call_id,
)
from voxpipe.engines.grammar_sampler import GreedyGrammarSampler
from voxpipe.engines.llama_state import common_prefix
from voxpipe.engines.qwen_tools import (
    ArgumentsScanner,
    CallStep,
    ToolCallParseError,
    call_steps,
    name_grammar,
    parse_call,
)
from voxpipe.engines.tool_family import ToolFamily, ToolsUnsupportedError

if TYPE_CHECKING:
    from llama_cpp import Llama, LlamaGrammar


# Every family by its ``llm.tool_family`` name.
FAMILIES = {
    family.name: family for family in (qwen_tools.QWEN, llama3_tools.LLAMA3, json_tools.GENERIC)
}


def choose_family(
    source: str, architecture: str, is_single_token: Callable[[str], bool], override: str = "auto"
) -> ToolFamily | None:
    """The family of a model with chat template ``source``; None for ``override='none'``.
    Qwen's when the template writes ``<tool_call>`` and the vocabulary has it as one token;
    Llama 3's when the template writes its JSON calls (``"parameters"``) between
    ``<|start_header_id|>`` headers; otherwise the generic JSON family."""
    if override == "none":
        return None
    if override != "auto":
        family = FAMILIES[override]
    elif qwen_tools.CALL_OPEN in source and is_single_token(qwen_tools.CALL_OPEN):
        family = qwen_tools.QWEN
    elif llama3_tools.matches(source, architecture):
        family = llama3_tools.LLAMA3
    else:
        family = json_tools.GENERIC
    if family.call_open and not is_single_token(family.call_open):
        raise ToolsUnsupportedError(
            f"llm.tool_family={family.name}: this model's vocabulary has no single "
            f"{family.call_open} token. Fix: set llm.tool_family to auto or json."
        )
    return family


def call_probability(logits: np.ndarray, starts: np.ndarray) -> float:
    """The probability, under ``logits``, that the next token is one of ``starts``."""
    weights = np.exp(logits.astype(np.float64) - float(logits.max()))
    return float(weights[starts].sum() / weights.sum())


def call_start_ids(pieces: Iterator[bytes], specials: Sequence[int] = ()) -> np.ndarray:
    """Of the vocabulary's token texts (``pieces``, in id order), the ids that begin a call
    rather than words: the family's special tokens (``specials``: Qwen's ``<tool_call>``),
    and any token whose text starts with ``{`` or a backtick (JSON, or a fenced block of
    it), which a small model writes more readily than the tag when it means to call."""
    ids = [token for token, piece in enumerate(pieces) if piece.lstrip()[:1] in (b"{", b"`")]
    return np.array([*specials, *ids], dtype=np.intp)


def single_token(llm: Llama, text: str) -> int | None:
    """The id of ``text`` when the vocabulary has it as one special token."""
    ids = llm.tokenize(text.encode(), add_bos=False, special=True)
    return ids[0] if len(ids) == 1 else None


class LlamaToolCalls:
    """Tool calls on one llama.cpp context; used under the engine's lock only. With no
    ``family`` (a model that calls no tools) it only finds the tokens that would begin a
    call, which no spoken reply may say."""

    def __init__(
        self,
        llm: Llama,
        family: ToolFamily | None,
        threshold: float,
        temperature: float,
        top_p: float,
        max_tokens: int,
    ) -> None:
        import llama_cpp

        self._llm = llm
        self.family = family
        self._cpp = llama_cpp
        self.threshold = threshold  # P(a call-like first token) at which the model calls
        self.temperature = temperature  # for the call's name and arguments
        self.top_p = top_p
        self.max_tokens = max_tokens
        opener = single_token(llm, family.call_open) if family and family.call_open else None
        self.call_open = opener  # the token that opens a call, if the family has one
        specials = [single_token(llm, text) for text in (family.starts if family else ())]
        self._specials = [t for t in specials if t is not None]
        prefix = family.call_prefix.encode() if family else b""
        self._prefix = llm.tokenize(prefix, add_bos=False, special=False) if prefix else []
        self._starts: np.ndarray | None = None
        self._grammars: dict[str, LlamaGrammar] = {}  # by their text
        self._plans: dict[str, tuple[CallStep, ...]] = {}  # by the tool's definition

    def call_starts(self) -> np.ndarray:
        """Found once, from the vocabulary (about a second on one core)."""
        if self._starts is None:
            model = self._llm._model
            pieces = (model.token_to_piece(t, special=True) for t in range(model.n_vocab()))
            self._starts = call_start_ids(pieces, self._specials)
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

    def _grammar(self, text: str) -> LlamaGrammar:
        from llama_cpp import LlamaGrammar

        if text not in self._grammars:
            self._grammars[text] = LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[text]

    def _steps(self, family: ToolFamily, tool: ToolSpec) -> tuple[CallStep, ...]:
        key = json.dumps(tool.openai(), sort_keys=True)
        if key not in self._plans:
            self._plans[key] = call_steps(tool, family.name_to_arguments)
        return self._plans[key]

    def generate_call(
        self, tokens: list[int], tools: tuple[ToolSpec, ...], cancel: CancelToken, usage: LlmUsage
    ) -> Generator[LlmOutput, None, None]:
        """After the prompt ``tokens``: write the call's fixed start, sample the tool's name
        (the rest of it is written once only one tool's name fits), then the arguments as
        :func:`~voxpipe.engines.qwen_tools.call_steps` lays them out: the fixed text between
        the values evaluated in one batch, each value sampled under its own grammar. Yields
        the name once written (an empty delta: the reply says the tool's phrase while the
        arguments are written), the arguments as they come, and then the call."""
        family = self.family
        if family is None:
            raise ValueError("a model with no tool family was asked to call")
        call_id = new_tool_call_id()
        scanner = ArgumentsScanner(family.call_prefix, family.arguments_marker)
        scanner.push(family.call_prefix)
        writer = _Writer(self, scanner, cancel, usage)
        llm = self._llm
        held = common_prefix(llm.input_ids[: llm.n_tokens], tokens)  # all of them, usually
        llm.n_tokens = held
        opener = [] if self.call_open is None else [self.call_open]
        writer.fixed([*tokens[held:], *opener, *self._prefix])
        tool, rest = writer.name(tools, self._grammar(name_grammar(tools)))
        if tool is not None:
            yield ToolCallDelta(call_id, tool.name, "")
            for i, step in enumerate(self._steps(family, tool)):
                # The first step's text opens with the name's closing quote: ``rest`` has it.
                yield from writer.text(call_id, rest + step.fixed[1:] if i == 0 else step.fixed)
                if step.grammar is not None and not writer.stopped:
                    grammar = self._grammar(step.grammar)
                    yield from writer.value(call_id, grammar, step.delimiter)
                if writer.stopped:
                    break
            if scanner.complete:
                usage.finish_reason = "tool_calls"
        try:
            yield parse_call(scanner.text, tools, call_id, family)
        except ToolCallParseError as exc:  # cut off at max_tokens
            usage.extra["tool_call_errors"] = 1
            yield ToolCallRequest(call_id, scanner.name, {}, scanner.arguments_json, str(exc))


class _Writer:
    """One call being written into the context: text fixed by the schema goes into the
    context in one batch with the token sampled before it; values are sampled token by
    token. ``stopped``: cancelled, or out of tokens (the call is then cut off, and reported
    as an error)."""

    def __init__(
        self, calls: LlamaToolCalls, scanner: ArgumentsScanner, cancel: CancelToken, usage: LlmUsage
    ) -> None:
        self._calls, self._llm = calls, calls._llm
        self._scanner, self._cancel, self._usage = scanner, cancel, usage
        self._pending: list[int] = []  # sampled, not yet in the context
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stopped = False
        usage.finish_reason = "length"

    def fixed(self, tokens: list[int]) -> None:
        """Into the context with what was sampled last: one evaluation."""
        self._llm.eval([*self._pending, *tokens])
        self._pending = []

    def text(self, call_id: str, text: str) -> Iterator[ToolCallDelta]:
        """Text the schema fixes: written, not sampled."""
        if not text:
            return
        tokens = self._llm.tokenize(text.encode(), add_bos=False, special=False)
        self._usage.completion_tokens += len(tokens)
        delta = self._scanner.push(text)
        if self._usage.completion_tokens >= self._calls.max_tokens:
            self.stopped = True
            return
        if not self._scanner.complete:  # after the call's closing brace nothing is sampled
            self.fixed(tokens)
        if delta:
            yield ToolCallDelta(call_id, self._scanner.name, delta)

    def _sample(self, grammar: LlamaGrammar) -> Iterator[str]:
        """Tokens' text under ``grammar``, until the caller stops asking or it is done."""
        calls, llm = self._calls, self._llm
        greedy: GreedyGrammarSampler | None = None
        chain: Any = None
        if calls.temperature == 0.0:  # the model's best token checked first
            greedy = GreedyGrammarSampler(llm._model.vocab, llm.n_vocab(), grammar)
        else:
            chain = llm._init_sampler(
                top_k=40, top_p=calls.top_p, temp=calls.temperature, repeat_penalty=1.0,
                grammar=grammar,
            )  # fmt: skip
        try:
            while True:
                if self._pending:
                    self.fixed([])
                if self._cancel.cancelled:
                    self._usage.finish_reason = "cancelled"
                    self.stopped = True
                    return
                token = greedy.sample(llm._ctx.ctx) if greedy else chain.sample(llm._ctx, -1)
                if calls._cpp.llama_vocab_is_eog(llm._model.vocab, token):
                    return  # the grammar is complete
                self._pending = [token]
                self._usage.completion_tokens += 1
                if self._usage.completion_tokens >= calls.max_tokens:
                    self.stopped = True
                    return
                yield self._decoder.decode(llm.detokenize([token], special=True))
        finally:
            if greedy is not None:
                greedy.close()

    def name(
        self, tools: tuple[ToolSpec, ...], grammar: LlamaGrammar
    ) -> tuple[ToolSpec | None, str]:
        """Sample until only one tool's name fits what was written: that tool, and the text
        still to write up to the name's closing quote, included (None if stopped first)."""
        written = ""
        for piece in self._sample(grammar):
            written += piece
            fits = [t for t in tools if (t.name + '"').startswith(written)]
            if len(fits) == 1:
                self._scanner.push(written)
                return fits[0], (fits[0].name + '"')[len(written) :]
        return None, ""

    def value(self, call_id: str, grammar: LlamaGrammar, delimiter: str) -> Iterator[ToolCallDelta]:
        for piece in self._sample(grammar):
            delta = self._scanner.push(piece)
            if delta:
                yield ToolCallDelta(call_id, self._scanner.name, delta)
            if self._scanner.value_ended(delimiter):
                return
