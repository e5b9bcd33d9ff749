"""llama-cpp-python chat engine with per-session KV-cache reuse.

Replies in words from every call go through one batched context
(:mod:`voxpipe.engines.llama_batch`): each call is its own KV sequence, the calls that are
generating share each decode step, and a new turn's prompt joins the running batch. Each
turn's prompt is the whole conversation, but a call's sequence keeps the KV state of the
tokens already seen, and only the suffix that differs is evaluated: a 20-turn history costs
seconds to prefill cold and a fraction of a second warm.

A request with tools runs alone on a second context (the ``Llama`` object's own,
``llama_solo.py``), between two of the batch's steps: its router and grammar need the
logits to themselves. There one call holds the context at a time; when another takes it,
the previous owner's KV sequence is saved to a byte-bounded LRU and restored when it speaks
again.

Prompts are the GGUF's own chat template (``llama_prompt.py``), rendered as
llama-cpp-python renders it (``llama_template.py``): template text is tokenized with special
tokens parsed, message text never is, so a caller cannot inject ``<|im_start|>``. A model
with no template (a base model) is refused at load with a ``ChatTemplateError`` naming its
file.

With tools, the prompt and the calls follow the model's family (``tool_family.py``:
Qwen's ``<tool_call>``, Llama 3's JSON, or a generic JSON call), chosen from the GGUF's
metadata or ``llm.tool_family``; a model of no family refuses tools with a
``ToolsUnsupportedError``.
Whether to call is decided on the first token, from the probability the model gives to a
call-like start (the family's opening token, or the ``{``/fenced JSON small models prefer):
at or above ``tool_threshold`` the engine writes the call's opening itself and the rest is
sampled under the tools' grammar; below it those starts are masked and the answer
streams exactly as a plain one does. So a reply is either text or one valid call, and
a plain answer pays no grammar. A request the conversation makes unlikely to be a call may
be judged again on the caller's last words alone (``llama_router.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from voxpipe.engines.base import (
    CALLER_SENTENCE,
    CancelToken,
    ChatMessage,
    LlmEngine,
    LlmOutput,
    LlmRequest,
    LlmUsage,
    ToolSpec,
)
from voxpipe.engines.batch_plan import BatchPolicy, StepRecord
from voxpipe.engines.compute_turns import ComputeTurns
from voxpipe.engines.llama_batch import BatchedLlama
from voxpipe.engines.llama_prompt import LlamaPrompt
from voxpipe.engines.llama_router import ToolRouter
from voxpipe.engines.llama_solo import SoloContext, look_key
from voxpipe.engines.llama_tools import LlamaToolCalls
from voxpipe.engines.qwen_tools import MarkupFilter
from voxpipe.engines.reply_rules import DEFAULT_ECHO_RUN, ReplyRules
from voxpipe.engines.token_sampler import SamplingSettings
from voxpipe.engines.tool_family import ToolFamily

# A turn judgement evaluates at most this many tokens beyond the call's cached prefix (the
# caller's words, about 10 ms a token in a batch on 2 cores): more is not judged.
JUDGE_MAX_PREFILL = 48


class LlamaLlm(LlmEngine):
    """One GGUF model: its prompts (``prompt``), the batch every reply in words joins
    (``batch``), and the solo context a request with tools runs on (``solo``)."""

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
        lookup_router: bool = True,
        lookup_threshold: float = 0.3,
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
        self.n_ctx, self.n_batch, self.max_tokens = n_ctx, n_batch, max_tokens
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.echo_run = echo_run  # reply_rules: 0 lets a reply copy the caller at any length
        self.tool_router = tool_router  # ToolRouter.judged_alone
        self.tool_router_floor = tool_router_floor  # ToolRouter.opening_allows
        self.lookup_router, self.lookup_threshold = lookup_router, lookup_threshold  # said_lookup
        self._warmup_system_prompt = warmup_system_prompt
        self._warmup_tools = tuple(warmup_tools)
        self.prompt = LlamaPrompt(
            self._llm, model_path, n_ctx=n_ctx, max_tokens=max_tokens,
            chat_template=chat_template, tool_family=tool_family,
        )  # fmt: skip
        self.template = self.prompt.template
        self.family: ToolFamily | None = self.prompt.family
        self._tools = LlamaToolCalls(
            self._llm, self.family, tool_threshold, tool_temperature, top_p, max_tool_tokens
        )
        self._end_ids = np.array(
            [t for t in range(self._llm.n_vocab()) if self._is_end(t)], dtype=np.intc
        )
        turns = ComputeTurns()  # the cores: the batch's steps, or the solo context's request
        self.solo = SoloContext(self._llm, turns, state_cache_bytes, n_batch)
        self.router = ToolRouter(self.prompt, self.solo, self._tools)
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
            turns=turns,
        )

    def turn_ends(
        self, session_id: str, messages: Sequence[ChatMessage], cancel: CancelToken
    ) -> float | None:
        """:class:`~voxpipe.engines.base.TurnJudgingLlm`: the probability that what follows
        the caller's words is the end of their message or a sentence's final stop, read
        in the batch from the call's own sequence. The template closes the user's message
        with an end-of-turn token; the prompt stops just before it."""
        closed = self._before_close(messages)
        words = messages[-1].content.strip() if messages and messages[-1].role == "user" else ""
        if closed is None or not words:
            return None
        tokens, cut = closed
        before = self._llm.detokenize(tokens[max(0, cut - 16) : cut]).decode("utf-8", "replace")
        if not before.rstrip().endswith(words[-12:]):
            return None  # the template closes a user's message otherwise ([/INST]): no reading
        targets = (tokens[cut], *self._sentence_stops)
        return self.batch.judge(
            session_id, tokens[:cut], targets, cancel, LlmUsage(), max_prefill=JUDGE_MAX_PREFILL
        )

    def warm(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        tools: Sequence[ToolSpec] = (),
    ) -> bool:
        """:class:`~voxpipe.engines.base.WarmingLlm`: the conversation and the caller's words
        so far into the call's batch sequence, up to the words' last token (the message's
        close, and whatever the caller says next, are not known yet). A call offered
        ``tools`` is warmed on the solo context, where its requests run; that warm runs here,
        on the caller's thread, a chunk at a time (:meth:`SoloContext.warm`)."""
        closed = self._before_close(messages, tuple(tools))
        if closed is None:
            return False
        tokens, cut = closed
        if tools:
            self.prompt.refuse_tools()
            looks = self._looks_so_far(messages, tuple(tools)) if self.tool_router else {}
            self.solo.warm(session_id, tokens[:cut], cancel, self.batch.policy.warm_chunk, looks)
        else:
            self.batch.warm(session_id, tokens[:cut], cancel)
        return True

    def _looks_so_far(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...]
    ) -> dict[str, list[int]]:
        """The router's looks at the caller's words so far, up to their last token, as
        :meth:`warm` prepares them."""
        looks = {}
        for name, picked in self.router.look_messages(messages).items():
            closed = self._before_close(picked, tools)
            if closed is not None:
                looks[name] = closed[0][: closed[1]]
        return looks

    def _before_close(
        self, messages: Sequence[ChatMessage], tools: tuple[ToolSpec, ...] = ()
    ) -> tuple[list[int], int] | None:
        """The prompt of ``messages`` (no reply header) and where its last message's close
        begins: the template's last end-of-turn token. None: the template wrote none."""
        tokens, _ = self.prompt.tokens(messages, add_header=False, tools=tools)
        ends = np.flatnonzero(np.isin(np.asarray(tokens, dtype=np.intc), self._end_ids))
        return (tokens, int(ends[-1])) if len(ends) else None

    @functools.cached_property
    def _sentence_stops(self) -> tuple[int, ...]:
        """The tokens of ".", "?" and "!" alone (those the vocabulary has as one token)."""
        stops = (self.prompt.text(mark) for mark in (".", "?", "!"))
        return tuple(t[0] for t in stops if len(t) == 1)

    def _is_end(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._llm._model.vocab, token))

    def observe_steps(self, observer: Callable[[StepRecord], None]) -> None:
        self.batch.on_step = observer

    def share_cores(self, others_busy: Callable[[], int]) -> None:
        self.batch.others_busy = others_busy

    def forget(self, session_id: str) -> None:
        """Never waits for a generation in progress (the event loop calls this)."""
        self.solo.forget(session_id)
        self.batch.forget(session_id)

    def clear_context(self) -> None:
        """Empty the KV cache and the saved states: the next request prefills from scratch
        (what every turn would cost without reuse; the benchmark's baseline)."""
        with self.solo.turns.exclusive():
            self.solo.clear()
        self.batch.clear()

    def prefill(self, request: LlmRequest) -> None:
        """Evaluate the prompt of the request's messages now, so the next turn only adds its
        own tokens (in the batch's sequence of the session; with tools, in the tools' context)."""
        session_id, messages, cancel, usage = (
            request.session_id, request.messages, request.cancel, request.usage,
        )  # fmt: skip
        if not request.tools:
            tokens, _ = self.prompt.tokens(messages, add_header=False)
            self.batch.prefill(session_id, tokens, cancel, usage)
            return
        with self.solo.turns.exclusive():
            usage.state_restored = self.solo.take(session_id)
            tokens, _ = self.prompt.tokens(messages, add_header=False, tools=request.tools)
            self.solo.prefill(tokens, 0, cancel, usage)

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        """A reply in words goes into the batch with every other call's; one with tools
        offered runs alone on the tools' context (its grammar and router need the model's
        logits to themselves)."""
        return self._stream_tools(request) if request.tools else self._stream_text(request)

    def _stream_text(self, request: LlmRequest) -> Iterator[str]:
        messages, usage = request.messages, request.usage
        tokens, dropped = self.prompt.tokens(messages, usage=usage)
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
            return self.prompt.text(messages[-1].content)
        return []

    # -- tool calls -----------------------------------------------------------

    def _stream_tools(self, request: LlmRequest) -> Iterator[LlmOutput]:
        session_id, messages, cancel, usage = (
            request.session_id, request.messages, request.cancel, request.usage,
        )  # fmt: skip
        tools, tool_choice = request.tools, request.tool_choice
        self.prompt.refuse_tools()
        with self.solo.turns.exclusive():
            usage.state_restored = self.solo.take(session_id)
            tokens, dropped = self.prompt.tokens(messages, tools=tools, usage=usage)
            usage.extra["dropped_messages"] = dropped
            if not self.solo.prefill(tokens, 1, cancel, usage):
                usage.finish_reason = "cancelled"
                return
            self._llm.eval(tokens[-1:])  # the first token's logits, to decide on
            if cancel.cancelled:
                usage.finish_reason = "cancelled"
                return
            self._llm.set_seed(self.seed)
            if tool_choice == "auto":
                usage.extra["tool_call_p"] = p_call = self._tools.call_probability()
                router = self.router
                alone = router.alone_prompt(messages, tools) if self.tool_router else None
                if p_call < self._tools.threshold and alone is not None:
                    if router.opening_allows(
                        messages, tools, tokens, p_call, usage, self.tool_router_floor, session_id
                    ):
                        with router.judged_alone(alone, look_key(session_id, "alone"), usage):
                            usage.extra["tool_call_p_alone"] = p_alone = (
                                self._tools.call_probability()
                            )
                            if p_alone >= self._tools.threshold:
                                yield from self._tools.generate_call(alone, tools, cancel, usage)
                                return
                    elif self.lookup_router and (
                        lookup := router.said_lookup(
                            alone, messages, tools, cancel, usage, self.lookup_threshold, session_id
                        )
                    ):
                        yield from lookup
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
            rules = ReplyRules(
                len(tokens), self._end_ids, caller, self.echo_run, self._tools.call_starts()
            )
            sampling = (self.temperature, self.top_p, self.max_tokens)
            words = self.solo.generate_text(
                tokens, cancel, usage, rules, sampling, self._is_end, self._tools.call_open
            )
            for text in words:
                if text := markup.push(text):
                    yield text
            if tail := markup.flush():
                yield tail

    def warmup(self) -> None:
        """Run what a call runs, so the first call is a steady-state one: the chat template
        with the configured system prompt, a caller's sentence of typical length prefilled
        in one batch, a whole reply sampled, a second turn on the reused prefix, and another
        session taking the context and giving it back (the state save and restore). That
        pages the weights in and sizes every compute buffer; it leaves the system prompt's
        KV in the context, where every new call's prompt starts."""
        system = ChatMessage("system", self._warmup_system_prompt)
        first = [system, ChatMessage("user", CALLER_SENTENCE)]
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
