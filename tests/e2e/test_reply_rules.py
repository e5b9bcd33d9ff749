"""The reply rules (``voxpipe/engines/reply_rules.py``) on the embedded model: sentences read
to it are answered, not said back, and its answers to questions are untouched.

The sentences are the written words of the tool evaluation's read set (Jane Austen, as
callers read them); ``python -m bench tool-eval --agent plain --set read`` measures the same
thing through speech and STT.
"""

from __future__ import annotations

import pytest

from bench.tool_eval.dataset import read_sentences
from bench.tool_eval.echo import is_echo
from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e

SENTENCES = [u.text for u in read_sentences()][:10]


@pytest.fixture(scope="module")
def llm() -> LlamaLlm:
    config = Config()
    return LlamaLlm(llm_model_path(config), threads=config.llm.threads, n_ctx=2048)


def reply(llm: LlamaLlm, text: str, echo_run: int, system: str | None = None) -> str:
    llm.echo_run = echo_run
    messages = [ChatMessage("system", system or Config().llm.system_prompt)]
    messages.append(ChatMessage("user", text))
    out = llm.stream("e2e-rules", messages, CancelToken(), LlmUsage())
    answer = "".join(x for x in out if isinstance(x, str)).strip()
    llm.forget("e2e-rules")
    return answer


def longest_copied_run(llm: LlamaLlm, caller: str, answer: str) -> int:
    """The most tokens of ``caller`` that ``answer`` holds in a row."""
    said = llm.prompt.text(caller)
    got = llm.prompt.text(answer)
    best = 0
    for i in range(len(got)):
        for j in range(len(said)):
            n = 0
            while i + n < len(got) and j + n < len(said) and got[i + n] == said[j + n]:
                n += 1
            best = max(best, n)
    return best


def test_read_sentences_are_answered_not_said_back(llm: LlamaLlm) -> None:
    run = Config().llm.echo_run
    unruled = [reply(llm, s, echo_run=0) for s in SENTENCES]
    ruled = [reply(llm, s, echo_run=run) for s in SENTENCES]
    for sentence, before, after in zip(SENTENCES, unruled, ruled, strict=True):
        print(f"\n  caller: {sentence}\n  before: {before}\n  after:  {after}")
    echoes_before = sum(bool(is_echo(s, r)) for s, r in zip(SENTENCES, unruled, strict=True))
    echoes_after = sum(bool(is_echo(s, r)) for s, r in zip(SENTENCES, ruled, strict=True))
    print(f"\n  echoes: {echoes_before}/{len(SENTENCES)} -> {echoes_after}/{len(SENTENCES)}")
    # The rule had work to do: without it the model copies long runs of the caller's words.
    copied = [longest_copied_run(llm, s, r) for s, r in zip(SENTENCES, unruled, strict=True)]
    assert max(copied) >= run
    for sentence, answer in zip(SENTENCES, ruled, strict=True):
        assert answer, f"no answer to {sentence!r}"
        assert longest_copied_run(llm, sentence, answer) < run, (sentence, answer)
    assert echoes_after < echoes_before


def test_answers_to_questions_keep_their_facts(llm: LlamaLlm) -> None:
    answer = reply(llm, "What is the capital of France?", echo_run=Config().llm.echo_run)
    assert "Paris" in answer, answer
