"""Continuous batching for the embedded llama.cpp model: every call's reply in one decode.

One llama.cpp context, with one KV sequence per slot (``llm.max_sequences``), serves every
call that is generating. A thread of its own runs the steps: each step the scheduler
(:mod:`voxpipe.engines.batch_plan`) picks which sequences decode one token and which
prompts advance by a chunk, and all of them go through one ``llama_decode``. Decode on a
CPU is bound by memory bandwidth, so four sequences in a step cost little more than one;
a new turn's prompt joins the running batch in chunks instead of waiting for the others'
replies to end. Each sequence samples from its own row of logits with its own random
state (:mod:`voxpipe.engines.token_sampler`) under its own :class:`ReplyRules`.

A call keeps its KV prefix in its own sequence, saved and restored when another call needs
the sequence (``llama_slots.py``), so a call's next turn evaluates only its new tokens, and
a prefix another sequence holds (at least the instructions) is shared. The KV cache is one
buffer (``kv_unified``: measured cheaper per step at four sequences than a stream per
sequence, and it lets a prefix be shared); every cell is tagged with its sequences and
attention is masked by them, so nothing of one call reaches another's.

Work that needs the whole model to itself (a tool call under a grammar, on the engine's
other context) takes the cores between two steps through ``ComputeTurns``
(``compute_turns.py``).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from voxpipe.engines.base import CancelToken, EngineError, LlmUsage, Urgency
from voxpipe.engines.batch_plan import BatchPolicy, Phase, SeqView, StepRecord, plan_step
from voxpipe.engines.batch_request import END, BatchRequest, Failure
from voxpipe.engines.compute_turns import ComputeTurns
from voxpipe.engines.llama_slots import SequenceSlots
from voxpipe.engines.llama_state import common_prefix
from voxpipe.engines.reply_rules import ReplyRules
from voxpipe.engines.token_sampler import SamplingSettings, TokenSampler

log = logging.getLogger("voxpipe.engines")

IDLE_WAIT_S = 0.005  # a step with nothing to run (every sequence gated) waits this long


@dataclass(frozen=True)
class _Entry:
    """One sequence's part of a step: where its KV stood, and the batch index of its last
    token (whose logits it samples from, when ``done``)."""

    request: BatchRequest
    kept: int
    row: int
    done: bool


class BatchedLlama:
    """The batched context, its sequences (``slots``) and the thread that runs its steps."""

    def __init__(
        self,
        llama: Any,  # llama_cpp.Llama: its model, vocabulary and context parameters
        *,
        max_sequences: int,
        n_ctx: int,
        n_batch: int,
        threads: int,
        policy: BatchPolicy,
        sampling: SamplingSettings,
        seed: int,
        is_end: Callable[[int], bool],
        state_cache_bytes: int,
        turns: ComputeTurns,
        on_step: Callable[[StepRecord], None] | None = None,
    ) -> None:
        import llama_cpp

        self._cpp = llama_cpp
        self._llama = llama
        self.policy = policy
        self.sampling = sampling
        self.seed = seed
        self._is_end = is_end
        self._turns = turns
        self.on_step = on_step
        self.threads = threads
        self._threads_now = threads
        # How many threads the other engines compute on now (the server wires the STT's and
        # the TTS's runners in): each step leaves them their cores.
        self.others_busy: Callable[[], int] = lambda: 0
        params = type(llama.context_params)()
        ctypes.memmove(
            ctypes.byref(params), ctypes.byref(llama.context_params), ctypes.sizeof(params)
        )
        params.n_ctx = n_ctx * max_sequences
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = max_sequences
        params.n_threads = threads
        params.n_threads_batch = threads
        params.kv_unified = True
        self._ctx = llama_cpp.llama_init_from_model(llama._model.model, params)
        if not self._ctx:
            raise EngineError("llama.cpp could not create the batched context")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._n_vocab = llama.n_vocab()
        self._incoming: list[BatchRequest] = []
        self._admitting: list[BatchRequest] = []  # taken from incoming, not yet active
        self._active: list[BatchRequest] = []
        self._cond = threading.Condition()
        self.slots = SequenceSlots(
            self._ctx, self._memory, max_sequences, state_cache_bytes, self._cond
        )
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="engine-llm-batch", daemon=True)
        self._thread.start()

    # -- the API, called from the runner's threads -------------------------------------------

    def stream(
        self,
        session_id: str,
        prompt: list[int],
        cancel: CancelToken,
        usage: LlmUsage,
        *,
        urgency: Urgency | None,
        max_tokens: int,
        rules: ReplyRules,
    ) -> Iterator[str]:
        """The reply's text deltas as the steps make them; stops once ``cancel`` is set."""
        request = BatchRequest(
            session_id, prompt, cancel, usage, urgency or Urgency(), max_tokens, rules,
            TokenSampler(self.sampling, self.seed),
        )  # fmt: skip
        return self._results(request)

    def prefill(
        self, session_id: str, prompt: list[int], cancel: CancelToken, usage: LlmUsage
    ) -> None:
        """Evaluate ``prompt`` into the session's sequence, so its next turn adds only its own
        tokens; runs as speculative work (after every confirmed turn)."""
        request = BatchRequest(session_id, prompt, cancel, usage, Urgency(held=True), 0, None, None)
        for _ in self._results(request):
            pass

    def warm(self, session_id: str, prompt: list[int], cancel: CancelToken) -> None:
        """Evaluate ``prompt`` (the conversation and the caller's words so far) into the
        session's sequence in the background; returns at once. It runs after all other
        work, a few tokens a step, and gives way to the session's next request."""
        request = BatchRequest(
            session_id, prompt, cancel, LlmUsage(), Urgency(held=True), 0, None, None,
            warming=True,
        )  # fmt: skip
        self._enqueue(request)

    def judge(
        self,
        session_id: str,
        prompt: list[int],
        targets: Sequence[int],
        cancel: CancelToken,
        usage: LlmUsage,
        *,
        max_prefill: int,
    ) -> float | None:
        """The probability that the token after ``prompt`` is one of ``targets``, read from
        the session's own sequence, where ``prompt`` stays (a reply that extends it then
        evaluates only the rest). A judgement is urgent but never costly: it is refused
        (None) when more than ``max_prefill`` of ``prompt`` is not already in a sequence."""
        request = BatchRequest(
            session_id, prompt, cancel, usage, Urgency(), 0, None, None, tuple(targets),
            max_prefill,
        )  # fmt: skip
        probability = None
        for item in self._results(request):
            probability = float(item)
        return probability

    def _enqueue(self, request: BatchRequest) -> bool:
        """Hand ``request`` to the loop; False once the LLM is closed."""
        with self._cond:
            if self._closed:
                return False
            self._incoming.append(request)
            self._cond.notify()
        return True

    def _results(self, request: BatchRequest) -> Iterator[str]:
        if not self._enqueue(request):
            raise EngineError("the LLM is closed")
        try:
            while True:
                item = request.out.get()
                if item is END:
                    return
                if isinstance(item, Failure):
                    raise item.error
                yield str(item)
        finally:
            request.abandoned = True  # the loop drops it at its next step, if still there

    def forget(self, session_id: str) -> None:
        """Drop what is kept for ``session_id``; a slot it holds keeps its tokens (a new
        call may reuse their prefix) but no longer belongs to it."""
        with self._cond:
            self.slots.forget(session_id)

    def clear(self) -> None:
        """Empty every sequence and the saved states (the benchmark's cold baseline)."""
        with self._turns.exclusive(), self._cond:
            self.slots.clear()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    @property
    def active(self) -> int:
        """Requests in the batch or waiting to join it."""
        with self._cond:
            return len(self._active) + len(self._incoming) + len(self._admitting)

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._incoming and not self._active:
                    self._cond.wait()
                if self._closed:
                    for request in [*self._incoming, *self._active]:
                        request.out.put(Failure(EngineError("the LLM is closing")))
                    return
            try:
                with self._turns.step():
                    ran = self._step()
            except Exception as error:  # a broken step fails its requests, not the loop
                log.exception("llm batch step failed")
                self._fail_all(error)
                continue
            if not ran:
                with self._cond:
                    self._cond.wait(IDLE_WAIT_S)

    def _step(self) -> bool:
        with self._cond:
            incoming, self._incoming = self._incoming, []
            self._admitting = incoming
        for request in incoming:
            if not self._supersede(request):
                continue
            try:
                self._admit(request)
            except Exception as refusal:  # its caller hears of it; the others go on
                log.exception("llm batch: a request could not be admitted")
                if request.slot is not None:
                    request.slot.busy = False
                request.out.put(Failure(refusal))
        self._admitting = []
        for request in list(self._active):
            if request.abandoned or request.cancel.cancelled:
                self._finish(request, "cancelled")
        now = time.monotonic_ns()
        views: dict[Hashable, tuple[BatchRequest, SeqView]] = {
            id(r): (r, r.view(now)) for r in self._active
        }
        plan = plan_step([view for _, view in views.values()], self.policy)
        for key in plan.waiting:
            waiting = views[key][0]
            if key in plan.resting:  # not held back by anyone: no claim to be let in
                waiting.left_out_since_ns = 0
            else:
                waiting.left_out_since_ns = waiting.left_out_since_ns or now
        if plan.empty:
            return False
        entries: list[_Entry] = []
        n = 0
        for key in plan.decode:
            request = views[key][0]
            entries.append(_Entry(request, request.evaluated, n, True))
            n = self._put(n, request, [request.next_token], logits=True)
        for key, count in plan.prefill:
            request = views[key][0]
            start = request.evaluated
            last = start + count == len(request.prompt)
            wants = last and (request.max_tokens > 0 or request.targets is not None)
            entries.append(_Entry(request, start, n + count - 1, last))
            n = self._put(n, request, request.prompt[start : start + count], logits=wants)
        self._batch.n_tokens = n
        self._fit_threads()
        started = time.perf_counter()
        rc = self._cpp.llama_decode(self._ctx, self._batch)
        seconds = time.perf_counter() - started
        if rc != 0:
            error = EngineError(f"llama_decode failed ({rc}) on {n} tokens")
            for entry in entries:
                self._undo(entry)
                self._finish(entry.request, "error", error)
            return True
        if self.on_step is not None:
            self.on_step(StepRecord(len(plan.decode), n - len(plan.decode), seconds))
        for entry in entries:
            request = entry.request
            if not entry.done:
                continue
            if request.phase is Phase.PREFILL:  # the prompt is in
                if request.max_tokens == 0:
                    if request.targets is not None:
                        request.out.put(self._probability(entry.row, request.targets))
                    self._finish(request, "stop")
                    continue
                request.phase = Phase.DECODE
            self._sample(request, entry.row)
        return True

    def _supersede(self, request: BatchRequest) -> bool:
        """A session's new request ends its own speculative prefills (the new prompt holds
        what they were evaluating, and the sequence is the session's one); a warming
        request gives way to any other of its session. False: ``request`` is dropped."""
        mine = [r for r in self._active if r.session_id == request.session_id]
        for older in mine:
            if older.speculative_prefill:
                self._finish(older, "superseded")
        if request.warming and any(r in self._active for r in mine):
            request.usage.finish_reason = "superseded"
            request.out.put(END)
            return False
        return True

    def _fit_threads(self) -> None:
        """Run the step on the cores the other engines leave free. llama.cpp's threads meet
        at a barrier after every operation, so one of them preempted by Piper or Whisper
        stalls the others: two llama threads beside a busy TTS thread on two cores are
        slower than one."""
        threads = max(1, self.threads - self.others_busy())
        if threads != self._threads_now:
            self._cpp.llama_set_n_threads(self._ctx, threads, threads)
            self._threads_now = threads

    def _put(self, n: int, request: BatchRequest, tokens: Sequence[int], logits: bool) -> int:
        """Append ``tokens`` of ``request``'s sequence to the batch at index ``n``."""
        batch, slot = self._batch, request.slot
        assert slot is not None
        request.left_out_since_ns = 0
        for i, token in enumerate(tokens):
            batch.token[n] = token
            batch.pos[n] = len(slot.tokens)
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = slot.seq_id
            batch.logits[n] = logits and i == len(tokens) - 1
            slot.tokens.append(token)
            n += 1
        if request.urgency.joined_ns == 0:
            self._joined(request)
        return n

    def _joined(self, request: BatchRequest) -> None:
        urgency, policy = request.urgency, self.policy
        urgency.joined_ns = time.monotonic_ns()
        waited = urgency.joined_ns - urgency.deadline_ns
        if request.max_tokens and not urgency.held and waited >= policy.late_after_ns:
            urgency.late = True
            request.max_tokens = min(request.max_tokens, policy.late_max_tokens)

    def _undo(self, entry: _Entry) -> None:
        """A failed decode: the entry's tokens are not in the KV cache."""
        slot = entry.request.slot
        if slot is not None:
            del slot.tokens[entry.kept :]
            self._cpp.llama_memory_seq_rm(self._memory, slot.seq_id, entry.kept, -1)

    def _sample(self, request: BatchRequest, row: int) -> None:
        pointer = self._cpp.llama_get_logits_ith(self._ctx, row)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).copy()
        assert request.rules is not None and request.sampler is not None
        logits = request.rules(np.asarray(request.generated, dtype=np.intc), logits)
        token = request.sampler.sample(logits, request.generated)
        self._take(request, token)

    def _probability(self, row: int, targets: tuple[int, ...]) -> float:
        pointer = self._cpp.llama_get_logits_ith(self._ctx, row)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).astype(np.float64)
        weights = np.exp(logits - logits.max())
        return float(weights[list(targets)].sum() / weights.sum())

    def _take(self, request: BatchRequest, token: int) -> None:
        usage = request.usage
        if request.cancel.cancelled or request.abandoned:
            self._finish(request, "cancelled")
            return
        if self._is_end(token):
            self._finish(request, "stop")
            return
        usage.completion_tokens += 1
        request.generated.append(token)
        request.next_token = token
        text = request.decoder.decode(self._llama.detokenize([token]))
        if text:
            assert request.rules is not None
            request.rules.said(text)
            request.out.put(text)
        if usage.completion_tokens >= request.max_tokens:
            self._finish(request, "length")

    def _finish(
        self, request: BatchRequest, reason: str, error: BaseException | None = None
    ) -> None:
        if request not in self._active:
            return
        self._active.remove(request)
        request.usage.finish_reason = reason
        if reason not in ("cancelled", "error") and request.max_tokens:
            if tail := request.decoder.decode(b"", final=True):
                request.out.put(tail)
        if request.slot is not None:
            request.slot.busy = False
            request.slot.last_used_ns = time.monotonic_ns()
        request.out.put(END if error is None else Failure(error))

    def _fail_all(self, error: BaseException) -> None:
        for request in list(self._active):
            self._finish(request, "error", error)

    # -- slots and the KV each keeps -----------------------------------------------------------

    def _admit(self, request: BatchRequest) -> None:
        """Give ``request`` a slot holding as much of its prompt as can be had."""
        warm_for = self.slots.warm_for
        if request.targets is not None and not warm_for(
            request.session_id, request.prompt, request.max_prefill
        ):
            request.usage.finish_reason = "cold"
            request.out.put(END)
            return
        try:
            judging = request.targets is not None
            slot, restored = self.slots.claim(request.session_id, request.prompt, judging)
        except EngineError as error:
            request.out.put(Failure(error))
            return
        slot.busy = True
        request.slot = slot  # from here a failure gives it back (_step)
        slot.owner = request.session_id
        reused = common_prefix(slot.tokens, request.prompt)
        if reused == len(request.prompt) and (request.max_tokens or request.targets is not None):
            reused -= 1  # replay the last token for fresh logits
        self._cpp.llama_memory_seq_rm(self._memory, slot.seq_id, reused, -1)
        del slot.tokens[reused:]
        usage = request.usage
        usage.state_restored = restored
        usage.prompt_tokens = len(request.prompt)
        usage.reused_tokens = reused
        usage.prefill_tokens = len(request.prompt) - reused
        usage.finish_reason = "length"
        self._active.append(request)
        if reused == len(request.prompt):  # a prefill or warm of what is already there
            self._finish(request, "stop")  # no step would ever take it
