"""The embedded LLM judging whether the caller's words end their turn, on the real model.

Words that stop mid-sentence get a small probability, words that end one a large one;
the judgement is read from the call's own sequence and stays there, so the answer that
follows evaluates only the few tokens after the words; a call whose sequence holds nothing
yet is not judged (None), and no other call's sequence is touched."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmRequest, LlmUsage, Urgency
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e

SYSTEM = ChatMessage("system", Config().llm.system_prompt)
UNFINISHED = ["I'd like a table for", "The problem is that my laptop", "We need a room that is"]
FINISHED = ["My card was stolen yesterday", "Can you book it for me", "Thanks, goodbye"]


@pytest.fixture(scope="module")
def llm() -> Iterator[LlamaLlm]:
    config = Config.load()
    engine = LlamaLlm(
        llm_model_path(config), threads=config.llm.threads, n_ctx=2048, temperature=0.0,
        max_tokens=20, max_sequences=2,
    )  # fmt: skip
    engine.prefill(LlmRequest("judged", [SYSTEM], CancelToken(), LlmUsage()))
    yield engine
    engine.batch.close()


def _p(llm: LlamaLlm, words: str, session: str = "judged") -> float | None:
    return llm.turn_ends(session, [SYSTEM, ChatMessage("user", words)], CancelToken())


def test_unfinished_words_score_below_finished_ones(llm: LlamaLlm) -> None:
    unfinished = {w: _p(llm, w) for w in UNFINISHED}
    finished = {w: _p(llm, w) for w in FINISHED}
    assert all(p is not None for p in [*unfinished.values(), *finished.values()])
    assert max(unfinished.values()) < Config().turn.llm_turn_end_threshold, unfinished  # type: ignore[type-var]
    assert min(finished.values()) > Config().turn.llm_turn_end_threshold, finished  # type: ignore[type-var]


def test_the_answer_after_a_judgement_evaluates_only_the_rest(llm: LlamaLlm) -> None:
    words = "Can you book it for me"
    assert _p(llm, words) is not None
    usage = LlmUsage()
    messages = [SYSTEM, ChatMessage("user", words + "?")]
    reply = "".join(llm.stream("judged", messages, CancelToken(), usage, urgency=Urgency()))
    assert reply.strip()
    assert usage.prefill_tokens <= 8, usage  # "?", the end of the message, the reply's header


def test_a_first_turn_shares_the_instructions_another_sequence_holds(llm: LlamaLlm) -> None:
    """A new call's first words are judged from the instructions another call left in a
    sequence, as its first reply would share them; the other call keeps its sequence (the
    judgement takes an unowned one, never evicting a call's KV)."""
    slots = llm.batch.slots.all
    owners = [s.owner for s in slots]
    assert "judged" in owners and None in owners, owners
    assert _p(llm, "I'd like a table for", session="first-turn") is not None
    assert [s.owner for s in slots].count("judged") == 1
    assert "judged" not in llm.batch.slots.states


def test_no_free_unowned_sequence_means_no_judgement(llm: LlamaLlm) -> None:
    """Both sequences belong to calls now: a third call's words are not judged, since that
    would evict one of them."""
    assert {s.owner for s in llm.batch.slots.all} == {"judged", "first-turn"}
    assert _p(llm, "I'd like a table for", session="third") is None
    assert {s.owner for s in llm.batch.slots.all} == {"judged", "first-turn"}


def test_a_call_far_from_any_sequence_is_not_judged(llm: LlamaLlm) -> None:
    """Long instructions no sequence holds would be a costly prefill: not judged."""
    system = ChatMessage("system", "You are the front desk of a seaside hotel. " * 20)
    messages = [system, ChatMessage("user", "I'd like a room for")]
    assert llm.turn_ends("cold", messages, CancelToken()) is None
