"""A call's words warmed on the solo context (``SoloContext.warm``), on a fake ``Llama``:
chunk by chunk, and stopping when warming more would undo or block a request. The real
model's KV is checked in tests/e2e/test_tool_warming.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from voxpipe.engines.base import CancelToken
from voxpipe.engines.compute_turns import ComputeTurns
from voxpipe.engines.llama_solo import WARM_CHUNKS, SoloContext, look_key
from voxpipe.engines.llama_state import SavedState


class FakeKv:
    def kv_cache_seq_rm(self, seq: int, start: int, end: int) -> None:
        pass


class FakeLlama:
    """What the solo context reads and writes of a ``Llama``: its tokens and ``eval``."""

    def __init__(self) -> None:
        self._ctx = FakeKv()
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
    fake: FakeLlama = context._llm

    def copy_in(state: SavedState) -> bool:  # the fake's KV is its tokens
        fake.input_ids[: len(state.tokens)] = state.tokens
        fake.n_tokens = len(state.tokens)
        return True

    monkeypatch.setattr(context, "_copy_out", lambda: fake.input_ids[: fake.n_tokens].tobytes())
    monkeypatch.setattr(context, "_copy_in", copy_in)
    return context


def test_the_words_go_in_a_chunk_at_a_time_after_what_is_there(solo: SoloContext) -> None:
    fake: FakeLlama = solo._llm
    assert solo.warm("call", list(range(1, 21)), CancelToken(), chunk=8) == 20
    assert [len(e) for e in fake.evals] == [8, 8, 4]
    # one warm holds a runner's thread: it stops after a few chunks, the next goes on
    fake.evals.clear()
    assert solo.warm("call", list(range(1, 101)), CancelToken(), chunk=8) == 8 * WARM_CHUNKS
    assert solo.warm("call", list(range(1, 101)), CancelToken(), chunk=8) == 8 * WARM_CHUNKS
    fake.evals.clear()
    fake.evals.clear()
    # the next partial shares the first 20 tokens: only the rest is evaluated
    solo.warm("call", list(range(1, 21)), CancelToken(), chunk=8)
    fake.evals.clear()
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


SYSTEM = list(range(100, 120))  # the instructions, shared by the call and its looks
GREETING = [7, 7, 7]
CALL = [*SYSTEM, *GREETING, 1, 2, 3, 4]  # the conversation so far


def test_the_routers_looks_are_warmed_apart_and_the_call_kept(solo: SoloContext) -> None:
    fake: FakeLlama = solo._llm
    words = [50, 51, 52]
    looks = {"opening": [*SYSTEM, *GREETING, *words], "alone": [*SYSTEM, 9, *words]}
    solo.warm("call", [*CALL, *words], CancelToken(), chunk=16, looks=looks)
    assert list(fake.input_ids[: fake.n_tokens]) == [*CALL, *words]  # the call's own state
    for name, tokens in looks.items():
        assert list(solo.looks.tokens(look_key("call", name))) == tokens

    # the turn ends with one word more: each look evaluates only that word and the header
    fake.evals.clear()
    final = {name: [*tokens, 53, 0, 0] for name, tokens in looks.items()}
    for name, tokens in final.items():
        with solo.evaluated_apart(tokens, None, look=look_key("call", name)):
            assert list(fake.input_ids[: fake.n_tokens]) == tokens
        assert look_key("call", name) not in solo.looks  # used up
    assert fake.evals == [[53, 0, 0], [53, 0, 0]]
    assert list(fake.input_ids[: fake.n_tokens]) == [*CALL, *words]


def test_a_look_the_final_words_contradict_starts_from_the_shared_prefix(
    solo: SoloContext,
) -> None:
    fake: FakeLlama = solo._llm
    solo.warm("call", CALL, CancelToken(), chunk=8, looks={"alone": [*SYSTEM, 9, 50, 51]})
    fake.evals.clear()
    with solo.evaluated_apart([*SYSTEM, 9, 60, 61, 0], None, look=look_key("call", "alone")):
        pass
    assert fake.evals == [[60, 61, 0]]  # from where the warmed words part from the final ones


def test_forgetting_a_call_drops_its_looks(solo: SoloContext) -> None:
    solo.warm("call", CALL, CancelToken(), chunk=8, looks={"alone": [*SYSTEM, 9, 50]})
    assert look_key("call", "alone") in solo.looks
    solo.forget("call")
    assert len(solo.looks) == 0


def test_a_look_that_cannot_be_kept_is_not_evaluated_again_and_again(
    solo: SoloContext,
) -> None:
    """A look's progress is its saved state: with no room for it, a warm must still end."""
    fake: FakeLlama = solo._llm
    solo.warm("call", CALL, CancelToken(), chunk=64)
    fake.evals.clear()
    solo.looks.max_bytes = 0
    solo.warm("call", CALL, CancelToken(), chunk=4, looks={"alone": [*SYSTEM, 9, *range(50, 70)]})
    assert fake.evals == [[9, 50, 51, 52], [9, 50, 51, 52]]  # the second went no further: done
