"""Greedy sampling under a grammar, the model's best token tried first.

llama.cpp's grammar sampler checks every token of the vocabulary against the grammar before
the greedy pick (151,936 for Qwen2.5: about 11 ms a token on two cores, a third of a call's
value token). The grammar only masks tokens out, so when the model's best token is allowed
it is also the greedy pick under the grammar: that one token is checked, and the whole
vocabulary only when it is refused (as llama.cpp's own ``common_sampler`` does). The tokens
chosen are the same as the chain's; a call's values cost the decode step alone.
"""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llama_cpp import LlamaGrammar

TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.float32), ("p", np.float32)], align=True)


class GreedyGrammarSampler:
    """One grammar's greedy sampler on a context's last logits; :meth:`close` frees it."""

    def __init__(self, vocab: Any, n_vocab: int, grammar: LlamaGrammar) -> None:
        import llama_cpp

        self._cpp = llama_cpp
        self._n_vocab = n_vocab
        self._sampler = llama_cpp.llama_sampler_init_grammar(
            vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not self._sampler:
            raise ValueError("llama.cpp refused the grammar")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._all: ctypes.Array[Any] | None = None  # the whole vocabulary, when it is needed
        self.refused = 0  # tokens the model preferred and the grammar refused

    def sample(self, ctx: Any) -> int:
        """The greedy token under the grammar after the context's last evaluated token,
        accepted into the grammar's state."""
        cpp = self._cpp
        logits = np.ctypeslib.as_array(cpp.llama_get_logits_ith(ctx, -1), shape=(self._n_vocab,))
        best = int(np.argmax(logits))
        one = np.frombuffer(memoryview(self._one), dtype=TOKEN_DATA)
        one["id"], one["logit"], one["p"] = best, logits[best], 0.0
        if not self._allowed(self._one, 1):
            self.refused += 1
            best = self._best_allowed(logits)
        cpp.llama_sampler_accept(self._sampler, best)
        return best

    def close(self) -> None:
        if self._sampler:
            self._cpp.llama_sampler_free(self._sampler)
            self._sampler = None

    def _allowed(self, data: ctypes.Array[Any], size: int) -> bool:
        """Apply the grammar to ``data``'s first ``size`` tokens; True when the first one
        is still allowed."""
        candidates = self._cpp.llama_token_data_array(
            data=data, size=size, selected=-1, sorted=False
        )
        self._cpp.llama_sampler_apply(self._sampler, ctypes.byref(candidates))
        return not math.isinf(data[0].logit)

    def _best_allowed(self, logits: np.ndarray) -> int:
        if self._all is None:
            self._all = (self._cpp.llama_token_data * self._n_vocab)()
        table = np.frombuffer(memoryview(self._all), dtype=TOKEN_DATA)
        table["id"] = np.arange(self._n_vocab, dtype=np.intc)
        table["logit"] = logits
        table["p"] = 0.0
        self._allowed(self._all, self._n_vocab)
        return int(table["id"][int(np.argmax(table["logit"]))])
