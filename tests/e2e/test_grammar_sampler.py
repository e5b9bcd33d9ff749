"""Greedy sampling under a grammar with the model's best token tried first
(``grammar_sampler.py``) picks exactly the tokens llama.cpp's own chain picks (the grammar
over the whole vocabulary, then greedy), with the real model: where the model's favourite
is allowed, and where the grammar refuses it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from voxpipe.config import Config
from voxpipe.engines.grammar_sampler import GreedyGrammarSampler
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e

PROMPT = "A booking for Friday at seven in the evening, as JSON: "
TIME = 'root ::= "{\\"time\\": \\"" [0-9][0-9] ":" [0-9][0-9] "\\"}"'
PEOPLE = 'root ::= [0-9]+ " people"'  # the model would rather write words here
NAMES = 'root ::= ("book_table" | "cancel_booking" | "opening_hours")'


@pytest.fixture(scope="module")
def llm() -> LlamaLlm:
    config = Config()
    return LlamaLlm(llm_model_path(config), threads=config.llm.threads, n_ctx=512)


def written(llm: LlamaLlm, pick: Callable[[], int]) -> list[int]:
    """The tokens picked after the prompt (at most 16), each evaluated before the next."""
    import llama_cpp

    model = llm._llm
    model.reset()
    model.eval(model.tokenize(PROMPT.encode(), add_bos=False))
    tokens: list[int] = []
    for _ in range(16):
        token = pick()
        if llama_cpp.llama_vocab_is_eog(model._model.vocab, token):
            break
        tokens.append(token)
        model.eval([token])
    return tokens


@pytest.mark.parametrize("grammar", [TIME, PEOPLE, NAMES], ids=["time", "people", "names"])
def test_the_same_tokens_as_the_whole_vocabulary_checked(llm: LlamaLlm, grammar: str) -> None:
    from llama_cpp import LlamaGrammar

    model = llm._llm
    chain = model._init_sampler(
        temp=0.0, repeat_penalty=1.0, grammar=LlamaGrammar.from_string(grammar)
    )
    expected = written(llm, lambda: chain.sample(model._ctx, -1))
    fast = GreedyGrammarSampler(
        model._model.vocab, model.n_vocab(), LlamaGrammar.from_string(grammar)
    )
    try:
        got = written(llm, lambda: fast.sample(model._ctx.ctx))
    finally:
        fast.close()
    assert got and got == expected, (model.detokenize(got), model.detokenize(expected))
    # both ways are taken: the best token allowed at once, and refused
    if grammar == TIME:
        assert fast.refused < len(got), (fast.refused, len(got))
    if grammar == PEOPLE:
        assert fast.refused > 0
