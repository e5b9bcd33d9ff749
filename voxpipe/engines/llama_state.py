"""A llama.cpp sequence's KV state kept for a session between its turns, and the bound on them.

Both of the embedded engine's contexts (the batch of replies, and the context that writes
tool calls) keep each call's KV prefix: a call's next turn evaluates only its own words.
A sequence another call needs is saved here first, and restored when its call speaks again.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SavedState:
    tokens: np.ndarray  # the token ids whose KV is in ``kv``
    kv: bytes

    @property
    def nbytes(self) -> int:
        return len(self.kv) + self.tokens.nbytes


class StateCache:
    """Least-recently-used KV states per session, bounded by total bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, SavedState] = OrderedDict()
        self.nbytes = 0

    def put(self, key: str, state: SavedState) -> None:
        self.pop(key)
        if state.nbytes > self.max_bytes:
            return
        self._items[key] = state
        self.nbytes += state.nbytes
        while self.nbytes > self.max_bytes:
            _, evicted = self._items.popitem(last=False)
            self.nbytes -= evicted.nbytes

    def pop(self, key: str) -> SavedState | None:
        state = self._items.pop(key, None)
        if state is not None:
            self.nbytes -= state.nbytes
        return state

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def tokens(self, key: str) -> np.ndarray | None:
        """The tokens of ``key``'s saved state, if any, leaving it in place."""
        state = self._items.get(key)
        return None if state is None else state.tokens

    def __len__(self) -> int:
        return len(self._items)


def sequence_kv(ctx: Any, seq: int) -> bytes:
    """The KV state of sequence ``seq`` of the llama.cpp context ``ctx``, in one copy."""
    import llama_cpp

    size = llama_cpp.llama_state_seq_get_size(ctx, seq)
    buf = (ctypes.c_uint8 * size)()
    return ctypes.string_at(buf, llama_cpp.llama_state_seq_get_data(ctx, buf, size, seq))


def load_sequence_kv(ctx: Any, seq: int, kv: bytes) -> bool:
    """Put ``kv`` (from :func:`sequence_kv`) into the empty sequence ``seq``; False: llama.cpp
    refused it."""
    import llama_cpp

    buf = (ctypes.c_uint8 * len(kv)).from_buffer_copy(kv)
    return bool(llama_cpp.llama_state_seq_set_data(ctx, buf, len(kv), seq))


def common_prefix(a: np.ndarray | Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` (a context's) and ``b`` (a prompt's) share from the start."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    head = np.asarray(a[:n], dtype=np.intc)
    diff = np.nonzero(head != np.asarray(b[:n], dtype=np.intc))[0]
    return int(diff[0]) if diff.size else n
