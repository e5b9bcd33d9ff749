"""A call's words warmed on the solo context (``SoloContext.warm``), on a fake ``Llama``:
chunk by chunk, and stopping when warming more would undo or block a request. The real
model's KV is checked in tests/e2e/test_tool_warming.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from voxpipe.engines.base import CancelToken
from voxpipe.engines.compute_turns import ComputeTurns
from voxpipe.engines.llama_solo import SoloContext


class FakeLlama:
    """What the solo context reads and writes of a ``Llama``: its tokens and ``eval``."""

    def __init__(self) -> None:
        self.input_ids = np.zeros(512, dtype=np.intc)
        self.n_tokens = 0
        self.evals: list[list[int]] = []
        self.during_eval: Callable[[], None] = lambda: None

    def eval(self, tokens: list[int]) -> None:
        self.input_ids[self.n_tokens : self.n_tokens + len(tokens)] = tokens
        self.n_tokens += len(tokens)
        self.evals.append(list(tokens))
        self.during_eval()


@pytest.fixture
def solo(monkeypatch: pytest.MonkeyPatch) -> SoloContext:
    context = SoloContext(FakeLlama(), ComputeTurns(), 1 << 20, 64)
    monkeypatch.setattr(context, "_save_current", lambda: None)  # no KV to copy in a fake
    return context


def test_the_words_go_in_a_chunk_at_a_time_after_what_is_there(solo: SoloContext) -> None:
    fake: FakeLlama = solo._llm
    assert solo.warm("call", list(range(1, 21)), CancelToken(), chunk=8) == 20
    assert [len(e) for e in fake.evals] == [8, 8, 4]
    fake.evals.clear()
    # the next partial shares the first 20 tokens: only the rest is evaluated
    assert solo.warm("call", [*range(1, 21), 99, 98], CancelToken(), chunk=8) == 2
    assert fake.evals == [[99, 98]]
    # a partial that differs after token 10 evaluates from there
    fake.evals.clear()
    assert solo.warm("call", [*range(1, 11), 50, 51], CancelToken(), chunk=8) == 2
    assert fake.evals == [[50, 51]] and fake.n_tokens == 12


def test_the_calls_own_request_ends_its_warm(solo: SoloContext) -> None:
    fake: FakeLlama = solo._llm
    fake.during_eval = lambda: solo.take("call")  # the turn ended: the reply takes over
    assert solo.warm("call", list(range(1, 41)), CancelToken(), chunk=8) == 8


def test_a_warm_gives_the_context_up_to_another_call(solo: SoloContext) -> None:
    fake: FakeLlama = solo._llm
    fake.during_eval = lambda: solo.take("other")
    assert solo.warm("call", list(range(1, 41)), CancelToken(), chunk=8) == 8


def test_a_cancelled_warm_evaluates_nothing(solo: SoloContext) -> None:
    cancel = CancelToken()
    cancel.cancel()
    assert solo.warm("call", list(range(1, 41)), cancel, chunk=8) == 0
    assert solo._llm.evals == []
