"""The batched LLM on the real model: calls generating at once, each in its own KV sequence.

Three callers talk at once. Each tells its name, then asks for it back: an answer holding
another caller's name would mean KV crossed between sequences. One reply is cancelled in
the middle (a barge-in) and only that one stops. The steps show the batch was real: three
sequences decoded in one ``llama_decode``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage, Urgency
from voxpipe.engines.batch_plan import BatchPolicy, StepRecord
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e

SYSTEM = ChatMessage("system", "You are a helpful phone assistant. Answer in one short sentence.")
NAMES = ("Alice", "Bernard", "Charlotte")
STORY = ChatMessage("system", "You are a storyteller. Tell a long story of many sentences.")


@pytest.fixture(scope="module")
def llm() -> Iterator[LlamaLlm]:
    config = Config.load()
    # Every first phrase shares the step (first_phrase_width 0): this is the test of the
    # batch itself; the scheduler's choices have their own (tests/unit/engines).
    engine = LlamaLlm(
        llm_model_path(config), threads=config.llm.threads, n_ctx=2048, temperature=0.0,
        max_tokens=40, max_sequences=4, policy=BatchPolicy(first_phrase_width=0),
    )  # fmt: skip
    yield engine
    engine.batch.close()


def _turn(llm: LlamaLlm, session: str, messages: list[ChatMessage], out: dict[str, object],
          cancel: CancelToken | None = None, after: int = 0) -> None:  # fmt: skip
    usage, text, cancel = LlmUsage(), "", cancel or CancelToken()
    for i, delta in enumerate(llm.stream(session, messages, cancel, usage, urgency=Urgency())):
        text += delta
        if after and i + 1 == after:
            cancel.cancel()
    out[session] = (text, usage)


def _at_once(jobs: list[threading.Thread]) -> None:
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(120)
    assert not any(job.is_alive() for job in jobs)


def test_three_calls_at_once_each_keep_their_own_conversation(llm: LlamaLlm) -> None:
    steps: list[StepRecord] = []
    llm.observe_steps(steps.append)
    firsts = {
        name: [SYSTEM, ChatMessage("user", f"Hello, my name is {name}. Please remember it.")]
        for name in NAMES
    }
    out: dict[str, object] = {}
    _at_once([threading.Thread(target=_turn, args=(llm, n, m, out)) for n, m in firsts.items()])
    assert max(s.decode for s in steps) == 3, "the three replies never shared a step"

    seconds: dict[str, list[ChatMessage]] = {}
    for name, messages in firsts.items():
        said, _ = out[name]  # type: ignore[misc]
        assert said.strip()
        seconds[name] = [*messages, ChatMessage("assistant", said),
                         ChatMessage("user", "What is my name?")]  # fmt: skip
    out.clear()
    _at_once([threading.Thread(target=_turn, args=(llm, n, m, out)) for n, m in seconds.items()])
    for name in NAMES:
        answer, usage = out[name]  # type: ignore[misc]
        assert name in answer, (name, answer)
        assert not any(other in answer for other in NAMES if other != name), (name, answer)
        # the call's own KV was kept between its turns: only the new question went in
        assert usage.reused_tokens >= len(llm.prompt.tokens(firsts[name])[0]) - 2
        assert usage.finish_reason in ("stop", "length")


def test_a_cancel_stops_only_its_own_sequence(llm: LlamaLlm) -> None:
    cancel = CancelToken()
    out: dict[str, object] = {}
    story = [STORY, ChatMessage("user", "Tell me about a dragon.")]
    others = {f"other-{i}": [SYSTEM, ChatMessage("user", q)]
              for i, q in enumerate(("What colour is the sky?", "Name a fruit."))}  # fmt: skip
    jobs = [threading.Thread(target=_turn, args=(llm, "story", story, out, cancel, 5))]
    jobs += [threading.Thread(target=_turn, args=(llm, s, m, out)) for s, m in others.items()]
    _at_once(jobs)
    _, usage = out["story"]  # type: ignore[misc]
    assert usage.finish_reason == "cancelled"
    assert 0 < usage.completion_tokens <= 7  # stopped at once, not at the end of its story
    for session in others:
        answer, other_usage = out[session]  # type: ignore[misc]
        assert answer.strip()
        assert other_usage.finish_reason in ("stop", "length")
    assert llm.batch.active == 0, "a finished or cancelled request stayed in the batch"
