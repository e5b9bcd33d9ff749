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
from voxpipe.engines.base import CancelToken, ChatMessage, LlmRequest, LlmUsage, Urgency
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
    # Stopped within a few steps (the batch may decode on while the reader waits for a core),
    # not at the end of its story.
    assert 0 < usage.completion_tokens <= 12
    for session in others:
        answer, other_usage = out[session]  # type: ignore[misc]
        assert answer.strip()
        assert other_usage.finish_reason in ("stop", "length")
    assert llm.batch.active == 0, "a finished or cancelled request stayed in the batch"


def _settled(llm: LlamaLlm) -> None:
    for _ in range(600):
        if llm.batch.active == 0:
            return
        threading.Event().wait(0.01)
    raise AssertionError("a warm never left the batch")


def test_words_warmed_while_the_caller_speaks_leave_the_reply_only_the_rest(
    llm: LlamaLlm,
) -> None:
    """A partial transcript's words go into the call's KV ahead of the turn's end: the
    reply then evaluates only what the final words add, and answers as a cold one does."""

    def history(name: str) -> list[ChatMessage]:  # another name: no prefix shared past it
        return [SYSTEM, ChatMessage("user", f"Hi, this is {name} calling about the museum."),
                ChatMessage("assistant", f"Hello {name}, how can I help you today?")]  # fmt: skip

    final = "What time does the museum open on Sunday morning, and is there parking nearby?"
    partial = "What time does the museum open on Sunday morning."  # Whisper's stop at a pause
    out: dict[str, object] = {}
    _turn(llm, "cold-caller", [*history("Dana"), ChatMessage("user", final)], out)
    _settled(llm)

    warm_history = history("Erik")
    assert llm.warm("warm-caller", [*warm_history, ChatMessage("user", partial)], CancelToken())
    _settled(llm)
    _turn(llm, "warm-caller", [*warm_history, ChatMessage("user", final)], out)

    cold_text, cold = out["cold-caller"]  # type: ignore[misc]
    warm_text, warm = out["warm-caller"]  # type: ignore[misc]
    spoken = len(llm.prompt.tokens([*warm_history, ChatMessage("user", partial)])[0]) - 6
    assert warm.reused_tokens >= spoken, (warm.reused_tokens, spoken)
    assert warm.prefill_tokens <= 16 < cold.prefill_tokens, (warm, cold)
    assert warm_text.strip() and cold_text.strip()
    words = set(warm_text.lower().split()) & set(cold_text.lower().split())
    assert len(words) >= 3, (warm_text, cold_text)  # the same question answered


def test_a_reply_takes_over_its_own_warm_and_a_warm_gives_way(llm: LlamaLlm) -> None:
    """The reply that arrives while its call's warm is still going in ends the warm and
    keeps what it evaluated; a warm sent while the call's reply runs is dropped."""
    story = [STORY, ChatMessage("user", "Tell me a long story about a lighthouse keeper " * 6)]
    assert llm.warm("busy-caller", story, CancelToken())
    out: dict[str, object] = {}
    _turn(llm, "busy-caller", [*story[:1], ChatMessage("user", "Say hello.")], out)
    text, usage = out["busy-caller"]  # type: ignore[misc]
    assert text.strip() and usage.finish_reason in ("stop", "length")

    cancel = CancelToken()
    reply = threading.Thread(target=_turn, args=(llm, "busy-caller", story, out, cancel, 8))
    reply.start()
    for _ in range(500):
        if llm.batch.active:
            break
        threading.Event().wait(0.01)
    assert llm.warm("busy-caller", [SYSTEM, ChatMessage("user", "Something else.")], cancel)
    reply.join(120)
    _settled(llm)
    assert all(s.owner != "busy-caller" or not s.busy for s in llm.batch.slots.all)
    owned = [s for s in llm.batch.slots.all if s.owner == "busy-caller"]
    assert len(owned) == 1, "the warm took a second sequence beside its call's reply"


def test_a_prefill_or_warm_with_nothing_new_returns_at_once(llm: LlamaLlm) -> None:
    """The prompt already in the call's sequence (a history pre-filled twice, a warm of the
    same words so far): nothing is evaluated, and the request leaves the batch at once. It
    used to stay there unscheduled: a prefill's runner thread waited until the call's next
    request, a warm held its sequence busy."""
    messages = [SYSTEM, ChatMessage("user", "Hello, I would like to ask about my order.")]
    llm.prefill(LlmRequest("twice", messages, CancelToken(), LlmUsage()))
    again = LlmUsage()
    done = threading.Thread(
        target=llm.prefill, args=(LlmRequest("twice", messages, CancelToken(), again),)
    )
    done.start()
    done.join(10)
    assert not done.is_alive(), "a prefill of a prompt already in its sequence never returned"
    assert again.prefill_tokens == 0 and again.finish_reason == "stop"
    assert llm.batch.active == 0

    words = [*messages, ChatMessage("user", "Can you tell me where")]
    assert llm.warm("twice", words, CancelToken())
    _settled(llm)
    assert llm.warm("twice", words, CancelToken())  # the same words so far: nothing new
    _settled(llm)
    assert not any(s.busy for s in llm.batch.slots.all)
    llm.forget("twice")
