"""llama-cpp-python chat engine with per-session KV-cache reuse.

Replies in words from every call go through one batched context
(:mod:`voxpipe.engines.llama_batch`): each call is its own KV sequence, the calls that are
generating share each decode step, and a new turn's prompt joins the running batch. Each
turn's prompt is the whole conversation, but a call's sequence keeps the KV state of the
tokens already seen, and only the suffix that differs is evaluated: a 20-turn history costs
seconds to prefill cold and a fraction of a second warm.

A request with tools runs alone on a second context (the ``Llama`` object's own), between
two of the batch's steps: its router and grammar need the logits to themselves. There one
call holds the context at a time; when another takes it, the previous owner's KV sequence
is saved to a byte-bounded LRU and restored when it speaks again.

Prompts are the GGUF's own chat template, rendered as llama-cpp-python renders it
(``llama_template.py``): template text is tokenized with special tokens parsed, message text
never is, so a caller cannot inject ``<|im_start|>``. A model with no template (a base
model) is refused at load with a :class:`ChatTemplateError` naming its file.

With tools, the prompt and the calls follow the model's family (``tool_family.py``:
Qwen's ``<tool_call>``, Llama 3's JSON, or a generic JSON call), chosen from the GGUF's
metadata or ``llm.tool_family``; a model of no family refuses tools with a
:class:`ToolsUnsupportedError`.
Whether to call is decided on the first token, from the probability the model gives to a
call-like start (the family's opening token, or the ``{``/fenced JSON small models prefer):
at or above ``tool_threshold`` the engine writes the call's opening itself and the rest is
sampled under the tools' grammar; below it those starts are masked and the answer
streams exactly as a plain one does. So a reply is either text or one valid call, and
a plain answer pays no grammar.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    LlmEngine,
    LlmOutput,
    LlmRequest,
    LlmUsage,
    PromptTooLong,
    ToolSpec,
)
from voxpipe.engines.batch_plan import BatchPolicy, StepRecord
from voxpipe.engines.llama_batch import BatchedLlama, ComputeTurns
from voxpipe.engines.llama_state import SavedState, StateCache, common_prefix
from voxpipe.engines.llama_template import (
    ChatTemplate,
    ChatTemplateError,
    Segment,
    alternating,
    model_template,
)
from voxpipe.engines.llama_tools import LlamaToolCalls, choose_family, single_token
from voxpipe.engines.qwen_tools import MarkupFilter
from voxpipe.engines.reply_rules import DEFAULT_ECHO_RUN, ReplyRules
from voxpipe.engines.token_sampler import SamplingSettings
from voxpipe.engines.tool_family import (
    ToolFamily,
    ToolsUnsupportedError,
    native_chat,
)

# Segment texts tokenized, kept to spare re-tokenizing a call's history every turn.
_TOKENS_KEPT = 4096
# A turn judgement evaluates at most this many tokens beyond the call's cached prefix (the
# caller's words, about 10 ms a token in a batch on 2 cores): more is not judged.
JUDGE_MAX_PREFILL = 48

# A caller's sentence of typical length (about 25 tokens), for the warm-up.
WARMUP_SENTENCE = (
    "Hi, I would like to book a table for four people tomorrow evening at seven, "
    "and one of us is vegetarian."
)


class LlamaLlm(LlmEngine):
    def __init__(
        self,
        model_path: Path,
        threads: int = 2,
        n_ctx: int = 4096,
        n_batch: int = 256,
        max_tokens: int = 80,
        temperature: float = 0.3,
        top_p: float = 0.9,
        seed: int = 7,
        state_cache_bytes: int = 256 << 20,
        warmup_system_prompt: str = "You are a helpful assistant.",
        name: str | None = None,
        tool_threshold: float = 0.5,
        tool_temperature: float = 0.0,
        max_tool_tokens: int = 256,
        warmup_tools: Sequence[ToolSpec] = (),
        echo_run: int = DEFAULT_ECHO_RUN,
        tool_router: bool = True,
        tool_router_floor: float = 0.01,
        max_sequences: int = 4,
        policy: BatchPolicy | None = None,
        chat_template: Path | None = None,
        tool_family: str = "auto",
    ) -> None:
        from llama_cpp import Llama

        self.model_path = model_path
        self.name = name or f"llama.cpp:{model_path.name}"
        self._llm = Llama(
            model_path=str(model_path),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=threads,
            n_threads_batch=threads,
            seed=seed,
            verbose=False,
        )
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.echo_run = echo_run  # reply_rules: 0 lets a reply copy the caller at any length
        self.tool_router = tool_router  # _judged_alone
        self.tool_router_floor = tool_router_floor  # _opening_allows
        self._warmup_system_prompt = warmup_system_prompt
        self._warmup_tools = tuple(warmup_tools)
        self.states = StateCache(state_cache_bytes)
        self._owner: str | None = None
        # The cores: the batch's steps, or a tool request on this context for its length.
        self._turns = ComputeTurns()
        self._state_lock = threading.Lock()  # states and owner: short critical sections only
        self.template = self._template(model_path, chat_template)
        self._tokens: dict[tuple[str, bool], list[int]] = {}
        self._alternate = False  # set once the template refuses turns out of alternation
        self.family: ToolFamily | None = choose_family(
            self.template.source,
            str(self._llm.metadata.get("general.architecture", "")),
            lambda text: single_token(self._llm, text) is not None,
            tool_family,
        )
        self._tools = LlamaToolCalls(
            self._llm, self.family, tool_threshold, tool_temperature, top_p, max_tool_tokens
        )
        self._end_ids = np.array(
            [t for t in range(self._llm.n_vocab()) if self._is_end(t)], dtype=np.intc
        )
        self.max_sequences = max_sequences
        self.batch = BatchedLlama(
            self._llm,
            max_sequences=max_sequences,
            n_ctx=n_ctx,
            n_batch=n_batch,
            threads=threads,
            policy=policy or BatchPolicy(step_tokens=n_batch),
            sampling=SamplingSettings(temperature=temperature, top_p=top_p),
            seed=seed,
            is_end=self._is_end,
            state_cache_bytes=state_cache_bytes,
            turns=self._turns,
        )

    def turn_ends(
        self, session_id: str, messages: Sequence[ChatMessage], cancel: CancelToken
    ) -> float | None:
        """:class:`~voxpipe.engines.base.TurnJudgingLlm`: the probability that what follows
        the caller's words is the end of their message or a sentence's final stop, read
        in the batch from the call's own sequence. The template closes the user's message
        with an end-of-turn token; the prompt stops just before it."""
        tokens, _ = self.prompt_tokens(messages, add_header=False)
        ends = np.flatnonzero(np.isin(np.asarray(tokens, dtype=np.intc), self._end_ids))
        words = messages[-1].content.strip() if messages and messages[-1].role == "user" else ""
        if not len(ends) or not words:
            return None
        cut = int(ends[-1])
        before = self._llm.detokenize(tokens[max(0, cut - 16) : cut]).decode("utf-8", "replace")
        if not before.rstrip().endswith(words[-12:]):
            return None  # the template closes a user's message otherwise ([/INST]): no reading
        targets = (tokens[cut], *self._sentence_stops)
        return self.batch.judge(
            session_id, tokens[:cut], targets, cancel, LlmUsage(), max_prefill=JUDGE_MAX_PREFILL
        )

    @functools.cached_property
    def _sentence_stops(self) -> tuple[int, ...]:
        """The tokens of ".", "?" and "!" alone (those the vocabulary has as one token)."""
        stops = (self._text(mark) for mark in (".", "?", "!"))
        return tuple(t[0] for t in stops if len(t) == 1)

    def _template(self, model_path: Path, override: Path | None) -> ChatTemplate:
        model = self._llm._model

        def text(token: int) -> str:
            return model.token_get_text(token) if token >= 0 else ""

        self._bos = self._llm.token_bos()
        self._add_bos = bool(self._llm_cpp.llama_vocab_get_add_bos(model.vocab))
        return model_template(
            self._llm.metadata, text(self._bos), text(self._llm.token_eos()), model_path, override
        )

    def _is_end(self, token: int) -> bool:
        return bool(self._llm_cpp.llama_vocab_is_eog(self._llm._model.vocab, token))

    # -- prompt -------------------------------------------------------------

    def _text(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode(), add_bos=False, special=False)

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

    def _refuse_tools(self) -> None:
        if self.family is None:
            raise ToolsUnsupportedError(
                f"{self.model_path.name} cannot call tools (llm.tool_family is none). Fix: "
                "give the agent no tools, or set llm.tool_family to auto or json."
            )

    def _render(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> tuple[list[int], list[list[int]], list[int]]:
        """The instructions' tokens, one token list per later turn (a run of tool results
        is one turn), and the generation prompt's tokens, from the model's template."""
        if tools:
            self._refuse_tools()
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

    def prompt_tokens(
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

    # -- per-session KV state -----------------------------------------------

    def _save_current(self) -> None:
        if self._owner is None or self._llm.n_tokens == 0:
            return
        ctx = self._llm._ctx.ctx
        size = self._llm_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        written = self._llm_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
        tokens = self._llm.input_ids[: self._llm.n_tokens].copy()
        self.states.put(self._owner, SavedState(tokens, bytes(buf[:written])))

    def _restore(self, session_id: str) -> bool:
        state = self.states.pop(session_id)
        if state is None:
            return False
        ctx = self._llm._ctx.ctx
        self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        buf = (ctypes.c_uint8 * len(state.kv)).from_buffer_copy(state.kv)
        if self._llm_cpp.llama_state_seq_set_data(ctx, buf, len(state.kv), 0) == 0:
            self._llm.reset()
            return False
        n = len(state.tokens)
        self._llm.input_ids[:n] = state.tokens
        self._llm.n_tokens = n
        return True

    @property
    def _llm_cpp(self):  # type: ignore[no-untyped-def]
        import llama_cpp

        return llama_cpp

    def _take_context(self, session_id: str) -> bool:
        """Make the context hold ``session_id``'s state; True if a saved state was restored."""
        with self._state_lock:
            if self._owner == session_id:
                return False
            self._save_current()
            restored = self._restore(session_id)
            # With nothing saved, keep what is there: it shares at least the system prompt.
            self._owner = session_id
            return restored

    def observe_steps(self, observer: Callable[[StepRecord], None]) -> None:
        self.batch.on_step = observer

    def share_cores(self, others_busy: Callable[[], int]) -> None:
        self.batch.others_busy = others_busy

    def forget(self, session_id: str) -> None:
        """Never waits for a generation in progress (the event loop calls this)."""
        with self._state_lock:
            self.states.pop(session_id)
            if self._owner == session_id:
                self._owner = None
        self.batch.forget(session_id)

    def clear_context(self) -> None:
        """Empty the KV cache and the saved states: the next request prefills from scratch
        (what every turn would cost without reuse; the benchmark's baseline)."""
        with self._turns.exclusive(), self._state_lock:
            self.states = StateCache(self.states.max_bytes)
            self._owner = None
            self._llm.reset()
            self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        self.batch.clear()

    # -- generation ---------------------------------------------------------

    def _prefill(
        self, tokens: list[int], keep_last: int, cancel: CancelToken, usage: LlmUsage
    ) -> bool:
        """Evaluate ``tokens`` except the last ``keep_last`` beyond the cached prefix, in
        batches, checking ``cancel`` between them (a long prefill must not block a barge-in).
        Returns False if cancelled."""
        llm = self._llm
        reused = common_prefix(llm.input_ids[: llm.n_tokens], tokens)
        if reused == len(tokens) and keep_last:
            reused -= 1  # llama.cpp replays one token to get fresh logits
        usage.prompt_tokens = len(tokens)
        usage.reused_tokens = reused
        usage.prefill_tokens = len(tokens) - reused
        llm.n_tokens = reused
        end = len(tokens) - keep_last
        for start in range(reused, end, self.n_batch):
            if cancel.cancelled:
                return False
            llm.eval(tokens[start : min(end, start + self.n_batch)])
        return not cancel.cancelled

    def prefill(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        *,
        tools: Sequence[ToolSpec] | None = None,
    ) -> LlmUsage:
        """Evaluate the prompt of ``messages`` now, so the next turn only adds its own tokens
        (in the batch's sequence of the session; with tools, in the tools' context)."""
        usage = LlmUsage()
        if not tools:
            tokens, _ = self.prompt_tokens(messages, add_header=False)
            self.batch.prefill(session_id, tokens, cancel, usage)
            return usage
        with self._turns.exclusive():
            usage.state_restored = self._take_context(session_id)
            tokens, _ = self.prompt_tokens(messages, add_header=False, tools=tools or ())
            self._prefill(tokens, 0, cancel, usage)
        return usage

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        """A reply in words goes into the batch with every other call's; one with tools
        offered runs alone on the tools' context (its grammar and router need the model's
        logits to themselves)."""
        return self._stream_tools(request) if request.tools else self._stream_text(request)

    def _stream_text(self, request: LlmRequest) -> Iterator[str]:
        messages, usage = request.messages, request.usage
        tokens, dropped = self.prompt_tokens(messages, usage=usage)
        usage.extra["dropped_messages"] = dropped
        rules = ReplyRules(
            0, self._end_ids, self._caller_words(messages), self.echo_run,
            self._tools.call_starts(),
        )  # fmt: skip
        yield from self.batch.stream(
            request.session_id, tokens, request.cancel, usage, urgency=request.urgency,
            max_tokens=self.max_tokens, rules=rules,
        )  # fmt: skip

    def _caller_words(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The caller's last utterance, when the reply answers it directly (reply_rules)."""
        if messages and messages[-1].role == "user":
            return self._text(messages[-1].content)
        return []

    def _generate_text(
        self,
        tokens: list[int],
        cancel: CancelToken,
        usage: LlmUsage,
        caller: Sequence[int] = (),
        stop: int | None = None,
    ) -> Iterator[str]:
        """Sample the reply after ``tokens`` (prefilled), as text deltas, under
        :class:`ReplyRules` (a word before the end; no long copy of ``caller``; nothing that
        begins a call); ``stop``
        ends it like an end-of-turn token."""
        from llama_cpp import LogitsProcessorList

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        rules = ReplyRules(
            len(tokens), self._end_ids, caller, self.echo_run, self._tools.call_starts()
        )
        gen = self._llm.generate(
            tokens,
            temp=self.temperature,
            top_p=self.top_p,
            top_k=40,
            repeat_penalty=1.1,
            reset=True,
            logits_processor=LogitsProcessorList([rules]),
        )
        usage.finish_reason = "length"
        try:
            for token in gen:
                if cancel.cancelled:
                    usage.finish_reason = "cancelled"
                    break
                if self._is_end(token) or token == stop:
                    usage.finish_reason = "stop"
                    break
                usage.completion_tokens += 1
                text = decoder.decode(self._llm.detokenize([token]))
                if text:
                    rules.said(text)
                    yield text
                if usage.completion_tokens >= self.max_tokens:
                    break
        finally:
            gen.close()
        tail = decoder.decode(b"", final=True)
        if tail and usage.finish_reason != "cancelled":
            yield tail

    # -- tool calls -----------------------------------------------------------

    def _stream_tools(self, request: LlmRequest) -> Iterator[LlmOutput]:
        session_id, messages, cancel, usage = (
            request.session_id, request.messages, request.cancel, request.usage,
        )  # fmt: skip
        tools, tool_choice = request.tools, request.tool_choice
        self._refuse_tools()
        with self._turns.exclusive():
            usage.state_restored = self._take_context(session_id)
            tokens, dropped = self.prompt_tokens(messages, tools=tools, usage=usage)
            usage.extra["dropped_messages"] = dropped
            if not self._prefill(tokens, 1, cancel, usage):
                usage.finish_reason = "cancelled"
                return
            self._llm.eval(tokens[-1:])  # the first token's logits, to decide on
            if cancel.cancelled:
                usage.finish_reason = "cancelled"
                return
            self._llm.set_seed(self.seed)
            if tool_choice == "auto":
                usage.extra["tool_call_p"] = p_call = self._tools.call_probability()
                alone = self._alone_prompt(messages, tools) if self.tool_router else None
                if (
                    p_call < self._tools.threshold
                    and alone is not None
                    and self._opening_allows(messages, tools, tokens, p_call, usage)
                ):
                    with self._judged_alone(alone):
                        usage.extra["tool_call_p_alone"] = p_alone = self._tools.call_probability()
                        if p_alone >= self._tools.threshold:
                            yield from self._tools.generate_call(alone, tools, cancel, usage)
                            return
                call = p_call >= self._tools.threshold
            else:  # "none": words; "required" or a tool's name: a call
                call = tool_choice != "none"
            if call:
                named = tuple(t for t in tools if t.name == tool_choice) or tools
                yield from self._tools.generate_call(tokens, named, cancel, usage)
                return
            self._tools.mask_call_starts()
            markup = MarkupFilter(self.family.markup if self.family else ())
            caller = self._caller_words(messages)
            for text in self._generate_text(tokens, cancel, usage, caller, self._tools.call_open):
                if text := markup.push(text):
                    yield text
            if tail := markup.flush():
                yield tail

    def _alone_prompt(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...]
    ) -> list[int] | None:
        """The instructions and tools, then the caller's last words, without the turns
        between; None when there are none to leave out or the last words are not the
        caller's (:meth:`_judged_alone`)."""
        system = [m for m in messages if m.role == "system"]
        if not messages or messages[-1].role != "user" or len(messages) <= len(system) + 1:
            return None
        return self.prompt_tokens([*system, messages[-1]], tools=tools)[0]

    def _opening_allows(
        self,
        messages: Sequence[ChatMessage],
        tools: tuple[ToolSpec, ...],
        tokens: list[int],
        p_call: float,
        usage: LlmUsage,
    ) -> bool:
        """Whether the caller's last words may be judged alone: they must not be out of
        the question right after the agent's greeting (P(call) at least
        ``tool_router_floor``); True when the call has no greeting to judge them after, or
        the floor is 0.

        Asked alone, a small model may take almost anything for a request (read sentences,
        a goodbye); right after the greeting it still tells them apart (the probabilities
        measured, and the floor they set, are in docs/agents.md). The look shares the
        instructions and the greeting with the session's KV cache, so it costs the prefill
        of the caller's words."""
        if self.tool_router_floor <= 0.0:
            return True
        opening = self._opening_prompt(messages, tools)
        if opening is None:
            return True
        if opening == tokens:  # the call so far is the greeting and these words
            p_opening = p_call
        else:
            with self._judged_alone(opening):
                p_opening = self._tools.call_probability()
        usage.extra["tool_call_p_opening"] = p_opening
        return p_opening >= self.tool_router_floor

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
        return self.prompt_tokens([*system, greeting, rest[-1]], tools=tools)[0]

    @contextlib.contextmanager
    def _judged_alone(self, alone: list[int]) -> Iterator[None]:
        """Inside: the context holds the ``alone`` prompt, evaluated; after: the session's
        state and its next token's logits, as they were.

        A small model takes its cue from the turns before: after a greeting and an answer
        in words it may answer "do you have a table for four tomorrow?" in words too, making
        up the answer, where asked alone it calls (docs/agents.md). So a request the conversation
        makes unlikely to be a call is judged again alone, and a call it turns out to be is
        written alone too, as the tool evaluation measures it. It costs the prefill of the
        caller's words (the instructions' KV is shared) and a copy of the session's KV
        state both ways.
        """
        llm, cpp = self._llm, self._llm_cpp
        ctx = llm._ctx.ctx
        n = llm.n_tokens
        ids = llm.input_ids[:n].copy()
        logits = self._tools.logits().copy()
        size = cpp.llama_state_seq_get_size(ctx, 0)
        kv = (ctypes.c_uint8 * size)()
        written = cpp.llama_state_seq_get_data(ctx, kv, size, 0)
        shared = min(common_prefix(ids, alone), len(alone) - 1)
        try:
            llm._ctx.kv_cache_seq_rm(-1, shared, -1)
            llm.n_tokens = shared
            llm.eval(alone[shared:])
            yield
        finally:
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            if cpp.llama_state_seq_set_data(ctx, kv, written, 0) == 0:
                llm.reset()  # the next request prefills from scratch
                raise EngineError("the session's state could not be put back after the router")
            llm.input_ids[:n] = ids
            llm.n_tokens = n
            self._tools.logits()[:] = logits

    def warmup(self) -> None:
        """Run what a call runs, so the first call is a steady-state one: the chat template
        with the configured system prompt, a caller's sentence of typical length prefilled
        in one batch, a whole reply sampled, a second turn on the reused prefix, and another
        session taking the context and giving it back (the state save and restore). That
        pages the weights in and sizes every compute buffer; it leaves the system prompt's
        KV in the context, where every new call's prompt starts."""
        system = ChatMessage("system", self._warmup_system_prompt)
        first = [system, ChatMessage("user", WARMUP_SENTENCE)]
        tools = self._warmup_tools or None  # the agent's: its calls start from this prompt

        def reply(session_id: str, messages: list[ChatMessage]) -> str:
            deltas = self.stream(session_id, messages, CancelToken(), LlmUsage(), tools=tools)
            return "".join(d for d in deltas if isinstance(d, str))

        answer = reply("__warmup__", first)
        reply("__warmup_other__", [system, ChatMessage("user", "Hello.")])  # saves __warmup__
        second = [*first, ChatMessage("assistant", answer), ChatMessage("user", "Thank you.")]
        reply("__warmup__", second)  # restores it, then prefills only the new turn
        self.forget("__warmup_other__")
        self.forget("__warmup__")


def _without_first_turn(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` (no system ones) without their first turn: a message, or a run of
    tool results."""
    end = 1
    while end < len(messages) and messages[0].role == messages[end].role == "tool":
        end += 1
    return messages[end:]
