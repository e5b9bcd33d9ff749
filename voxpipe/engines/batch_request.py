"""One request to the batched LLM (``llama_batch.py``) as its loop keeps it: the prompt,
what the call's sequence holds of it, what has been generated, and what the scheduler sees
of it each step."""

from __future__ import annotations

import codecs
import queue
from dataclasses import dataclass, field
from typing import Any

from voxpipe.engines.base import CancelToken, LlmUsage, Urgency
from voxpipe.engines.batch_plan import Phase, SeqView
from voxpipe.engines.llama_slots import Slot
from voxpipe.engines.reply_rules import ReplyRules
from voxpipe.engines.token_sampler import TokenSampler

END = object()  # a request's output is complete


class Failure:
    """What a request's reader raises: the step or admission that failed it."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


@dataclass(eq=False)
class BatchRequest:
    session_id: str
    prompt: list[int]
    cancel: CancelToken
    usage: LlmUsage
    urgency: Urgency
    max_tokens: int  # 0: evaluate the prompt only (a prefill)
    rules: ReplyRules | None
    sampler: TokenSampler | None
    # A judgement (:meth:`BatchedLlama.judge`): the tokens whose probability, after the
    # prompt, is the answer; and the most prompt it may evaluate beyond its cached prefix.
    targets: tuple[int, ...] | None = None
    max_prefill: int = 0
    warming: bool = False  # :meth:`BatchedLlama.warm`: nobody waits for it
    out: queue.SimpleQueue[object] = field(default_factory=queue.SimpleQueue)
    slot: Slot | None = None
    phase: Phase = Phase.PREFILL
    generated: list[int] = field(default_factory=list)
    next_token: int = -1  # sampled, not yet in the KV
    gated_since_ns: int = 0
    left_out_since_ns: int = 0
    abandoned: bool = False
    decoder: Any = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )

    @property
    def evaluated(self) -> int:
        return len(self.slot.tokens) if self.slot else 0

    @property
    def speculative_prefill(self) -> bool:
        """A prompt evaluated ahead of need (a warm, a rebuilt context): nobody waits for
        its answer, and its session's next request holds what it was evaluating."""
        return self.max_tokens == 0 and self.targets is None and self.urgency.held

    def view(self, now_ns: int) -> SeqView:
        """What the scheduler sees of this request now."""
        urgency = self.urgency
        gate = urgency.gate
        gated = gate is not None and not gate.is_set()
        if gated:
            self.gated_since_ns = self.gated_since_ns or now_ns
            gated = now_ns - self.gated_since_ns < urgency.max_hold_ns
        else:
            self.gated_since_ns = 0
        return SeqView(
            id(self),
            self.phase,
            urgency.deadline_ns,
            urgency.held,
            gated,
            len(self.prompt) - self.evaluated,
            len(self.generated),
            now_ns - self.left_out_since_ns if self.left_out_since_ns else 0,
            max(0, urgency.heard_by_ns - now_ns),
            self.warming,
        )
