"""The llama.cpp engine's pure parts: the saved-state LRU and the prompt prefix match.

The model itself is never loaded here; tests/e2e runs it.
"""

from __future__ import annotations

import numpy as np
import pytest

from voxpipe.engines.llama_state import SavedState, StateCache, common_prefix


def state(kv_bytes: int, n_tokens: int = 4) -> SavedState:
    return SavedState(np.arange(n_tokens, dtype=np.int32), b"\0" * kv_bytes)


def test_saved_state_size_counts_kv_and_tokens() -> None:
    assert state(100, n_tokens=4).nbytes == 100 + 4 * 4


def test_cache_keeps_a_byte_bound_and_evicts_the_oldest() -> None:
    cache = StateCache(max_bytes=350)
    for key in "abc":
        cache.put(key, state(84))  # 100 bytes each
    assert len(cache) == 3 and cache.nbytes == 300
    cache.put("d", state(84))
    assert "a" not in cache and all(k in cache for k in "bcd")
    assert cache.nbytes == 300 <= cache.max_bytes

    cache.put("e", state(234))  # 250 bytes: two more must go
    assert [k for k in "bcde" if k in cache] == ["d", "e"]
    assert cache.nbytes == 350


def test_putting_again_refreshes_recency_and_replaces_the_size() -> None:
    cache = StateCache(max_bytes=300)
    for key in "abc":
        cache.put(key, state(84))
    cache.put("a", state(34))  # "a" is now the newest, and 50 bytes
    assert cache.nbytes == 250
    cache.put("d", state(84))
    assert "b" not in cache and all(k in cache for k in "acd")
    assert cache.nbytes == 250


def test_pop_removes_and_returns() -> None:
    cache = StateCache(max_bytes=1000)
    saved = state(10)
    cache.put("a", saved)
    assert cache.pop("a") is saved
    assert cache.pop("a") is None
    assert len(cache) == 0 and cache.nbytes == 0


def test_a_state_larger_than_the_bound_is_not_kept() -> None:
    cache = StateCache(max_bytes=100)
    cache.put("a", state(50))
    cache.put("big", state(200))
    assert "big" not in cache and "a" in cache and cache.nbytes == 66
    # A session whose new state no longer fits loses its old one: it is stale anyway.
    cache.put("a", state(200))
    assert "a" not in cache and cache.nbytes == 0


def test_zero_bound_keeps_nothing() -> None:
    cache = StateCache(max_bytes=0)
    cache.put("a", state(1))
    assert len(cache) == 0 and cache.nbytes == 0


@pytest.mark.parametrize(
    ("cached", "prompt", "expected"),
    [
        ([], [1, 2, 3], 0),
        ([1, 2, 3], [], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2, 3, 4, 5], 3),
        ([1, 2, 3, 4, 5], [1, 2, 3], 3),
        ([1, 2, 9, 4], [1, 2, 3, 4], 2),
        ([7, 2, 3], [1, 2, 3], 0),
    ],
)
def test_common_prefix(cached: list[int], prompt: list[int], expected: int) -> None:
    assert common_prefix(np.asarray(cached, dtype=np.intc), prompt) == expected


def test_common_prefix_on_a_long_prompt() -> None:
    cached = np.arange(5000, dtype=np.intc)
    prompt = list(range(5000))
    prompt[4321] = -1
    assert common_prefix(cached, prompt) == 4321
