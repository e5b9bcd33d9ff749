"""Which sequences run in the next step of a batched LLM: the scheduler, with no model in it.

A batching engine (``engines/llama_batch.py``) asks this module, before every decode, what
goes into the step. The rules, in order:

1. **A sequence whose gate is closed sits out.** Its reply's first clause is being spoken
   by the TTS; the cores go to that (the gate opens by itself after ``max_hold``). So does a
   reply past its first phrase that is more than ``speech_lead_ns`` ahead of its caller's ear
   (``ahead_ns``: audio queued, and text waiting for the TTS at speaking pace): its words
   are not needed yet, and another caller's may be.
2. **Speculative work never delays a confirmed turn.** A request made during the caller's
   pause (a held reply, ``Urgency.held``) runs only while no confirmed request is waiting
   for its prompt or still writing its first phrase.
3. **First phrases first, earliest first.** While a confirmed reply has not yet written its
   first phrase (its prompt is still going in, or it has fewer than
   ``first_phrase_tokens``), the others' later words wait, each for at most
   ``rest_hold_ns`` in a row: a caller already hearing a reply has its buffered audio to
   listen to, while the caller waiting for a first word hears silence. And only the
   ``first_phrase_width`` earliest of the first phrases run (0: all of them together).
   Where a decode step's cost grows in proportion to its sequences, as on two cores at this
   model size (``python -m bench batch``), sharing steps among first phrases buys no
   throughput and makes every one of them late; serving the earliest first is what keeps
   the latest one's wait smallest (earliest deadline first minimizes the worst lateness).
   With nobody waiting for a first word, every generating sequence decodes one token in
   the same step (one pass over the weights for all).
   Decodes are listed first phrase first, then by deadline, so a step budget smaller
   than the batch cuts the rest, never a caller still waiting for its first words.
4. **Prompts are evaluated by deadline, in chunks.** The earliest confirmed prompt first,
   speculative ones last, and a call's words warmed while the caller still speaks
   (``warming``: nobody waits for it) after those. While other sequences are generating, a
   prompt takes at most ``prefill_chunk`` tokens a step, so its prefill joins the running
   batch without stalling the others for its whole length (continuous batching); with
   nothing generating it takes the whole step budget. A warming prompt always takes at
   most ``warm_chunk``: a step cannot be stopped once started, and a confirmed turn that
   arrives during one waits for it to end.

Beyond what the machine holds, a confirmed request that joins its first step more than
``late_after_ns`` after it was made is *late*: its reply is capped at ``late_max_tokens``
and its first phrase is cut short (``Urgency.late``), so the overload sheds work instead of
growing every caller's silence.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Phase(Enum):
    PREFILL = "prefill"  # prompt tokens still to evaluate
    DECODE = "decode"  # generating, one token a step


@dataclass(frozen=True)
class SeqView:
    """What the scheduler needs to know of one sequence, at one step."""

    key: Hashable
    phase: Phase
    deadline_ns: int  # earliest first: when its request came (or its turn ended)
    speculative: bool = False  # the turn may not have ended (a held reply)
    gated: bool = False  # its own first clause is in the TTS: sit out
    prompt_left: int = 0  # PREFILL: tokens still to evaluate
    generated: int = 0  # DECODE: tokens sampled so far
    left_out_ns: int = 0  # how long it has been left out of the steps, in a row
    ahead_ns: int = 0  # how long the caller will take to hear what it has generated
    warming: bool = False  # the caller's words so far, evaluated ahead: nobody waits for it


@dataclass(frozen=True)
class StepPlan:
    decode: tuple[Hashable, ...] = ()
    prefill: tuple[tuple[Hashable, int], ...] = ()  # (key, tokens this step)
    waiting: tuple[Hashable, ...] = field(default=())  # left out this step
    resting: tuple[Hashable, ...] = field(default=())  # of those: gated, or far enough ahead

    @property
    def tokens(self) -> int:
        return len(self.decode) + sum(n for _, n in self.prefill)

    @property
    def empty(self) -> bool:
        return not self.decode and not self.prefill


@dataclass(frozen=True)
class StepRecord:
    """One step as it ran: how many sequences decoded, how many prompt tokens went in, and
    how long the model took (what the metrics and ``python -m bench batch`` report)."""

    decode: int
    prefill_tokens: int
    seconds: float


@dataclass(frozen=True)
class BatchPolicy:
    step_tokens: int = 256  # most tokens in one llama_decode (the context's n_batch)
    prefill_chunk: int = 64  # most prompt tokens a step while others generate
    first_phrase_tokens: int = 12  # a reply's first phrase: about its first five words
    first_phrase_width: int = 1  # confirmed first phrases run together, earliest first; 0: all
    rest_hold_ns: int = 400_000_000  # longest a reply past its first phrase waits in a row
    speech_lead_ns: int = 4_000_000_000  # a reply this far ahead of the caller's ear pauses
    late_after_ns: int = 600_000_000  # a confirmed request joining this late is late
    late_max_tokens: int = 30  # a late reply's token cap
    warm_chunk: int = 16  # most tokens of a warming prompt in one step


def _in_first_phrase(seq: SeqView, policy: BatchPolicy) -> bool:
    return seq.phase is Phase.PREFILL or seq.generated < policy.first_phrase_tokens


def plan_step(seqs: Sequence[SeqView], policy: BatchPolicy) -> StepPlan:
    """The next step's decodes and prompt chunks (see the module docstring)."""
    ahead = [
        s
        for s in seqs
        if policy.speech_lead_ns
        and s.ahead_ns > policy.speech_lead_ns
        and not _in_first_phrase(s, policy)
    ]
    ready = [s for s in seqs if not s.gated and s not in ahead]
    urgent_confirmed = any(not s.speculative and _in_first_phrase(s, policy) for s in ready)
    resting = tuple(s.key for s in seqs if s.gated or s in ahead)
    left_out = list(resting)
    if urgent_confirmed:
        first = sorted(
            (s for s in ready if not s.speculative and _in_first_phrase(s, policy)),
            key=lambda s: s.deadline_ns,
        )
        later = first[policy.first_phrase_width :] if policy.first_phrase_width > 0 else []
        waits = [
            s
            for s in ready
            if s.speculative
            or s in later
            or (not _in_first_phrase(s, policy) and s.left_out_ns < policy.rest_hold_ns)
        ]
        left_out += [s.key for s in waits]
        ready = [s for s in ready if s not in waits]

    budget = policy.step_tokens
    decoding = sorted(
        (s for s in ready if s.phase is Phase.DECODE),
        key=lambda s: (not _in_first_phrase(s, policy), s.speculative, s.deadline_ns),
    )
    decode: list[Hashable] = []
    for seq in decoding:
        if budget <= 0:
            left_out.append(seq.key)
            continue
        decode.append(seq.key)
        budget -= 1

    chunk = policy.prefill_chunk if decode else policy.step_tokens
    prefill: list[tuple[Hashable, int]] = []
    prompts = sorted(
        (s for s in ready if s.phase is Phase.PREFILL and s.prompt_left > 0),
        key=lambda s: (s.warming, s.speculative, s.deadline_ns),
    )
    for seq in prompts:
        take = min(seq.prompt_left, policy.warm_chunk if seq.warming else chunk, budget)
        if take <= 0:
            left_out.append(seq.key)
            continue
        prefill.append((seq.key, take))
        budget -= take
    return StepPlan(tuple(decode), tuple(prefill), tuple(left_out), resting)
