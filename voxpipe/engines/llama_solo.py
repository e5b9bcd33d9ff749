"""The embedded model's second context, where a request with tools runs alone.

Replies in words share the batch (``llama_batch.py``); a request with tools needs the
model's logits to itself (its router and grammar), so it runs on the ``Llama`` object's own
context, between two of the batch's steps (``ComputeTurns``). There one call holds the
context at a time; when another takes it, the previous owner's KV sequence is saved to a
byte-bounded LRU and restored when it speaks again, so each call still prefills only its
new words. While a call's caller speaks, its conversation and words so far are warmed here
(:meth:`SoloContext.warm`), as the batch warms a call without tools.
"""

from __future__ import annotations

import codecs
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from voxpipe.engines.base import CancelToken, EngineError, LlmUsage
from voxpipe.engines.compute_turns import ComputeTurns
from voxpipe.engines.llama_state import (
    SavedState,
    StateCache,
    common_prefix,
    load_sequence_kv,
    sequence_kv,
)
from voxpipe.engines.reply_rules import ReplyRules


class SoloContext:
    """The ``Llama`` object's own context (``llm``), held by one call at a time."""

    def __init__(self, llm: Any, turns: ComputeTurns, state_cache_bytes: int, n_batch: int) -> None:
        self._llm = llm
        self.turns = turns  # the cores: the batch's steps, or this context for a request
        self.states = StateCache(state_cache_bytes)
        self.looks = StateCache(state_cache_bytes)  # apart: a look never evicts a call's state
        self.n_batch = n_batch
        self._owner: str | None = None
        self._asked: dict[str, int] = {}  # requests per call: a warm stops at the call's next
        self._state_lock = threading.Lock()  # states and owner: short critical sections only

    # -- who holds it ---------------------------------------------------------

    def take(self, session_id: str) -> bool:
        """Make the context hold ``session_id``'s state for a request (the caller holds the
        cores); True if a saved state was restored. A warm of the call in progress stops."""
        with self._state_lock:
            self._asked[session_id] = self._asked.get(session_id, 0) + 1
        return self._hold(session_id)

    def _hold(self, session_id: str) -> bool:
        with self._state_lock:
            if self._owner == session_id:
                return False
            self._save_current()
            restored = self._restore(session_id)
            # With nothing saved, keep what is there: it shares at least the system prompt.
            self._owner = session_id
            return restored

    def forget(self, session_id: str) -> None:
        """Drop ``session_id``'s saved state; never waits for a request in progress."""
        with self._state_lock:
            self.states.pop(session_id)
            for name in LOOKS:
                self.looks.pop(look_key(session_id, name))
            self._asked.pop(session_id, None)
            if self._owner == session_id:
                self._owner = None

    def clear(self) -> None:
        """Empty the context and the saved states (the caller holds the cores)."""
        with self._state_lock:
            self.states = StateCache(self.states.max_bytes)
            self.looks = StateCache(self.looks.max_bytes)
            self._owner = None
            self._llm.reset()
            self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)

    def _save_current(self) -> None:
        if self._owner is None or self._llm.n_tokens == 0:
            return
        tokens = self._llm.input_ids[: self._llm.n_tokens].copy()
        self.states.put(self._owner, SavedState(tokens, self._copy_out()))

    def _restore(self, session_id: str) -> bool:
        state = self.states.pop(session_id)
        if state is None:
            return False
        if not self._copy_in(state):
            self._llm.reset()
            return False
        return True

    # -- what runs on it ------------------------------------------------------

    def warm(
        self,
        session_id: str,
        tokens: list[int],
        cancel: CancelToken,
        chunk: int,
        looks: Mapping[str, list[int]] | None = None,
    ) -> int:
        """Evaluate ``tokens`` (a call's conversation and the caller's words so far) into the
        context for ``session_id``, so the request that follows the turn evaluates only what
        the final words add; then each of the router's ``looks`` (a name in :data:`LOOKS`,
        and its prompt so far), evaluated apart and saved, so that the router's look at the
        turn's end evaluates only the last words too (:meth:`evaluated_apart`). Speculative:
        each chunk waits for the requests already waiting for the cores, the warm stops when
        cancelled, when the call's own request has come, or when another call has taken the
        context meanwhile, and it evaluates at most :data:`WARM_CHUNKS` chunks of each (it
        holds the caller's thread, a runner's; the next partial goes on). Returns the tokens
        evaluated."""
        asked = self._asked.get(session_id, 0)
        jobs = [("", tokens), *((look_key(session_id, n), t) for n, t in (looks or {}).items())]
        done = 0
        for look, target in jobs:
            reached = 0
            for _ in range(WARM_CHUNKS):
                if cancel.cancelled:
                    return done
                with self.turns.step():
                    if self._asked.get(session_id, 0) != asked:
                        return done  # the request has the final words: warming more undoes it
                    if self._owner != session_id:
                        if done:
                            return done  # another call needed the context
                        self._hold(session_id)
                    start, end = (
                        self._warm_look(look, target, chunk)
                        if look
                        else self._warm_own(target, chunk)
                    )
                done += end - start
                if end <= reached or end >= len(target):
                    break  # done, or no further than before (a look's state not kept)
                reached = end
        return done

    def _warm_own(self, tokens: list[int], chunk: int) -> tuple[int, int]:
        """Where the chunk evaluated began and ended (the same: nothing left)."""
        llm = self._llm
        reused = common_prefix(llm.input_ids[: llm.n_tokens], tokens)
        if reused >= len(tokens):
            return reused, reused
        end = min(len(tokens), reused + chunk)
        llm.n_tokens = reused
        llm.eval(tokens[reused:end])
        return reused, end

    def _warm_look(self, look: str, tokens: list[int], chunk: int) -> tuple[int, int]:
        llm = self._llm
        with self._state_lock:
            saved = self.looks.tokens(look)
        reused = common_prefix(llm.input_ids[: llm.n_tokens], tokens)
        if saved is not None:
            reused = max(reused, common_prefix(saved, tokens))
        if reused >= len(tokens):
            return reused, reused
        end = min(len(tokens), reused + chunk)
        with self.evaluated_apart(tokens[:end], None, look=look, keep=True):
            pass
        return reused, end

    def prefill(
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

    def generate_text(
        self,
        tokens: list[int],
        cancel: CancelToken,
        usage: LlmUsage,
        rules: ReplyRules,
        sampling: tuple[float, float, int],
        is_end: Callable[[int], bool],
        stop: int | None = None,
    ) -> Iterator[str]:
        """Sample the reply after ``tokens`` (prefilled), as text deltas, under ``rules``
        (a word before the end; no long copy of the caller; nothing that begins a call),
        with ``sampling`` (temperature, top_p, the most tokens); ``stop`` ends it like an
        end-of-turn token."""
        from llama_cpp import LogitsProcessorList

        temperature, top_p, max_tokens = sampling
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        gen = self._llm.generate(
            tokens,
            temp=temperature,
            top_p=top_p,
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
                if is_end(token) or token == stop:
                    usage.finish_reason = "stop"
                    break
                usage.completion_tokens += 1
                text = decoder.decode(self._llm.detokenize([token]))
                if text:
                    rules.said(text)
                    yield text
                if usage.completion_tokens >= max_tokens:
                    break
        finally:
            gen.close()
        tail = decoder.decode(b"", final=True)
        if tail and usage.finish_reason != "cancelled":
            yield tail

    @contextlib.contextmanager
    def evaluated_apart(
        self,
        prompt: list[int],
        logits: Callable[[], np.ndarray] | None,
        look: str | None = None,
        keep: bool = False,
    ) -> Iterator[bool]:
        """Inside: the context holds ``prompt``, evaluated; after: the owner's state and its
        next token's logits (``logits()``: the floats the sampler reads), as they were. It
        costs the prefill of what ``prompt`` does not share with the owner's tokens, and a
        copy of the owner's KV state both ways. A ``look`` (:func:`look_key`) saved by a warm
        starts it from that state instead when it shares more of ``prompt`` (the caller's
        words so far), and is used up; ``keep`` saves the state it leaves under ``look``.
        Yields whether it started from a warmed look."""
        llm = self._llm
        ids = llm.input_ids[: llm.n_tokens].copy()
        kept_logits = None if logits is None else logits().copy()
        owner = self._copy_out()
        start = min(common_prefix(ids, prompt), len(prompt) - 1)
        with self._state_lock:
            saved = self.looks.pop(look) if look is not None else None
        try:
            reach = 0 if saved is None else common_prefix(saved.tokens, prompt)
            reach = min(reach, len(prompt) - 1)
            warmed = False
            if saved is not None and reach > start:
                if self._copy_in(saved):
                    start, warmed = reach, True
                elif not self._copy_in(SavedState(ids, owner)):  # the owner's prefix back
                    raise EngineError("the session's state could not be put back for the router")
            if start < llm.n_tokens:
                llm._ctx.kv_cache_seq_rm(-1, start, -1)
            llm.n_tokens = start
            llm.eval(prompt[start:])
            yield warmed
            if keep and look is not None:
                state = SavedState(llm.input_ids[: llm.n_tokens].copy(), self._copy_out())
                with self._state_lock:
                    self.looks.put(look, state)
        finally:
            if not self._copy_in(SavedState(ids, owner)):
                llm.reset()  # the next request prefills from scratch
                raise EngineError("the session's state could not be put back after the router")
            if kept_logits is not None and logits is not None:
                logits()[:] = kept_logits

    def _copy_out(self) -> bytes:
        """The KV state of the context's sequence, as bytes."""
        return sequence_kv(self._llm._ctx.ctx, 0)

    def _copy_in(self, state: SavedState) -> bool:
        """The context holds ``state`` (False: llama.cpp refused it, and holds nothing)."""
        llm = self._llm
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        if not load_sequence_kv(llm._ctx.ctx, 0, state.kv):
            llm.n_tokens = 0
            return False
        n = len(state.tokens)
        llm.input_ids[:n] = state.tokens
        llm.n_tokens = n
        return True


WARM_CHUNKS = 3
"""Chunks of each of a warm's jobs (the call's prompt, each look) at most, in one warm."""

LOOKS = ("opening", "alone")
"""The router's looks a warm may prepare (``llama_router.py``): the caller's words after the
agent's greeting alone, and the caller's words alone."""


def look_key(session_id: str, look: str) -> str:
    """Where a call's warmed look is saved among the states."""
    return f"{session_id}\x1f{look}"
