"""Which KV sequence of the batched context a call's request runs in, and what each keeps.

A call keeps its KV prefix: a slot remembers whose conversation it holds, so a call's next
turn evaluates only its new tokens. When a call needs a slot that another (idle) call
holds, the holder's KV is saved to a byte-bounded LRU and restored when it speaks again;
a call with nothing saved takes the idle slot whose tokens share the longest prefix with
its prompt, and a prefix another sequence holds (at least the instructions) is shared
with it. The batch's loop (``llama_batch.py``) claims slots on its own thread; ``forget``
and ``clear`` come from the runner's threads, under the batch's lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voxpipe.engines.base import EngineError
from voxpipe.engines.llama_state import (
    SavedState,
    StateCache,
    common_prefix,
    load_sequence_kv,
    sequence_kv,
)


@dataclass
class Slot:
    """One KV sequence: whose conversation it holds, and its tokens in the KV, in order."""

    seq_id: int
    owner: str | None = None
    tokens: list[int] = field(default_factory=list)
    busy: bool = False
    last_used_ns: int = 0


class SequenceSlots:
    """The batched context's sequences (``ctx``, its ``memory``) and the states saved from
    them; ``lock`` is the batch's, which guards ``states`` across threads."""

    def __init__(
        self,
        ctx: Any,
        memory: Any,
        max_sequences: int,
        state_cache_bytes: int,
        lock: threading.Condition,
    ) -> None:
        import llama_cpp

        self._cpp = llama_cpp
        self._ctx = ctx
        self._memory = memory
        self._lock = lock
        self.all = [Slot(i) for i in range(max_sequences)]
        self.states = StateCache(state_cache_bytes)

    def forget(self, session_id: str) -> None:
        """Drop what is kept for ``session_id``; a slot it holds keeps its tokens (a new
        call may reuse their prefix) but no longer belongs to it. Under the lock."""
        self.states.pop(session_id)
        for slot in self.all:
            if slot.owner == session_id and not slot.busy:
                slot.owner = None

    def clear(self) -> None:
        """Empty every idle sequence and the saved states. Under the lock."""
        self.states = StateCache(self.states.max_bytes)
        for slot in self.all:
            if not slot.busy:
                self._cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
                slot.tokens, slot.owner = [], None

    def warm_for(self, session_id: str, prompt: list[int], max_prefill: int) -> bool:
        """A judgement runs only where all but ``max_prefill`` of its prompt is already in:
        the session's own free sequence, its saved state, or (a call with neither, on its
        first turn) an unowned free sequence given the prefix any sequence holds, as its
        first reply would share it. Another call's sequence is never taken for it."""
        sid = session_id
        with self._lock:
            saved = self.states.tokens(sid)
        free = [s for s in self.all if not s.busy]
        own = [s for s in free if s.owner == sid]
        if own:
            held = max(common_prefix(s.tokens, prompt) for s in own)
        elif saved is not None:
            held = common_prefix(saved, prompt)
        elif any(s.owner is None for s in free) and not any(s.owner == sid for s in self.all):
            held = max(common_prefix(s.tokens, prompt) for s in self.all)  # shared in
        else:
            return False  # its sequence is busy (a reply of the call): never a second one
        return len(prompt) - held <= max_prefill

    def claim(self, session_id: str, prompt: list[int], judging: bool = False) -> tuple[Slot, bool]:
        """A free slot for ``session_id``: its own, its saved state restored, or the one
        sharing most of ``prompt``; and whether a saved state was restored. A judgement
        never takes another call's slot: only an unowned one (:meth:`warm_for` made sure
        there is one)."""
        free = [s for s in self.all if not s.busy]
        if (
            judging
            and not any(s.owner == session_id for s in free)
            and session_id not in self.states
        ):
            free = [s for s in free if s.owner is None]
        if not free:  # the runner's workers are as many as the slots: never while they hold
            raise EngineError("every LLM sequence is busy")
        for slot in free:
            if slot.owner == session_id:
                return slot, False
        with self._lock:
            saved = self.states.pop(session_id)
        if saved is not None:
            slot = min(free, key=lambda s: (s.owner is not None, s.last_used_ns))
            self._evict(slot)
            if self._restore(slot, saved):
                return slot, True
            return slot, False
        slot = max(
            free,
            key=lambda s: (common_prefix(s.tokens, prompt), s.owner is None, -s.last_used_ns),
        )
        self._evict(slot)
        self._share_prefix(slot, prompt)
        return slot, False

    def _share_prefix(self, slot: Slot, prompt: list[int]) -> None:
        """Give ``slot`` the longest prefix of ``prompt`` that any sequence holds (the
        instructions, at least, once one call has run): the cells are shared, not copied,
        and attention keeps each sequence to its own."""
        best = max(self.all, key=lambda s: common_prefix(s.tokens, prompt))
        shared = common_prefix(best.tokens, prompt)
        if best is slot or shared <= common_prefix(slot.tokens, prompt):
            return
        self._cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        self._cpp.llama_memory_seq_cp(self._memory, best.seq_id, slot.seq_id, 0, shared)
        slot.tokens = best.tokens[:shared]

    def _evict(self, slot: Slot) -> None:
        """Save the slot's owner's KV (its next turn restores it); the tokens stay."""
        if slot.owner is None or not slot.tokens:
            slot.owner = None
            return
        kv = sequence_kv(self._ctx, slot.seq_id)
        state = SavedState(np.asarray(slot.tokens, dtype=np.intc), kv)
        with self._lock:
            self.states.put(slot.owner, state)
        slot.owner = None

    def _restore(self, slot: Slot, state: SavedState) -> bool:
        self._cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        slot.tokens = []
        if not load_sequence_kv(self._ctx, slot.seq_id, state.kv):
            self._cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            return False
        slot.tokens = [int(t) for t in state.tokens]
        return True
