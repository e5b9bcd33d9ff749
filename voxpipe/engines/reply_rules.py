"""Three rules the embedded model's spoken replies keep, applied to its logits as it samples.

**No empty answer.** A reply whose first token is end-of-turn leaves the caller with
silence, or with only a tool's "One moment." (seen after a failover, answering a restored
tool result). End-of-turn is barred until the reply holds a letter or a digit.

**No parroting.** Read a sentence, a small model may say it back: "He was not an
ill-disposed young man." can come back word for word. Prompt wording did not cure it (the
variants and their counts are in docs/benchmarks.md), and llama.cpp's repeat penalty counts
only the tokens the model has sampled, never the prompt's, so it cannot see the caller's
words. So a token that would make the reply's last :attr:`ReplyRules.echo_run` tokens a run
of the caller's last utterance is barred: at most ``echo_run - 1`` tokens in a row are
copied. Only a reply to the caller's own words is held to it; an answer after a tool result
may restate the request ("a table for two at seven under Smith").

**No call written as words.** Asked for words after a tool's result, the model began
``>{"name": "check_availability", ...}``, which the caller would hear read out. Tokens that
begin a call (``<tool_call>``, ``{``, a backtick: ``llama_tools.call_start_ids``) are barred
from a spoken reply, everywhere in it, not just as its first token.

The rules are a llama-cpp-python logits processor: called with the context's token ids
(prompt, then the reply so far) and the next token's logits, in token id order, which it
changes in place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

# A reply to the caller's words may copy at most this many tokens minus one in a row.
DEFAULT_ECHO_RUN = 5


def continuations(source: Sequence[int], run: int) -> dict[tuple[int, ...], frozenset[int]]:
    """For each ``run - 1`` tokens of ``source`` in a row: the tokens that follow them."""
    following: defaultdict[tuple[int, ...], set[int]] = defaultdict(set)
    head = run - 1
    for start in range(len(source) - head):
        following[tuple(source[start : start + head])].add(source[start + head])
    return {key: frozenset(tokens) for key, tokens in following.items()}


class ReplyRules:
    """One reply's rules; :meth:`said` tells them when the reply has a word."""

    def __init__(
        self,
        prompt_len: int,
        end_ids: np.ndarray,
        caller: Sequence[int] = (),
        echo_run: int = DEFAULT_ECHO_RUN,
        never: np.ndarray | None = None,
    ) -> None:
        self.prompt_len = prompt_len
        self.end_ids = end_ids
        self.never = never  # tokens no spoken reply may hold
        self.echo_run = echo_run
        self.has_word = False
        self._next = continuations(caller, echo_run) if echo_run >= 2 else {}

    def said(self, text: str) -> None:
        if not self.has_word and any(ch.isalnum() for ch in text):
            self.has_word = True

    def barred(self, reply: Sequence[int]) -> frozenset[int]:
        """Tokens that would copy ``echo_run`` of the caller's tokens in a row."""
        head = self.echo_run - 1
        if not self._next or len(reply) < head:
            return frozenset()
        return self._next.get(tuple(reply[len(reply) - head :]), frozenset())

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if not self.has_word:
            scores[self.end_ids] = -np.inf
        if self.never is not None:
            scores[self.never] = -np.inf
        if barred := self.barred(input_ids[self.prompt_len :].tolist()):
            scores[list(barred)] = -np.inf
        return scores
