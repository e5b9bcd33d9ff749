"""Facts a tool owns, on the real models (``conversation/claims.py``, ``llm.hold_claims``).

Luigi's agent (``examples/restaurant``) on the embedded Qwen2.5 0.5B, asked questions whose
answers are its tools': left to itself the model answers some of them in words and makes
the answer up ("I have room for six", "open from 10:00 AM"). With the gate, no such words
are said: the model is asked again for a call, and the call it writes is to the tool that
knows. Then the same over a live server, spoken in Piper's voice: the answer is the tool's,
or, when the call the model was made to write guessed a value the caller never said ("today"
for "Saturday"), a question for it; never the made-up words.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support import RunningServer, serving, voiced
from voxpipe.agent import load_agent
from voxpipe.clients.native_client import NativeClient
from voxpipe.config import Config
from voxpipe.conversation.claims import TO_CHECK, ClaimGate, ClaimRules, known_words
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage, ToolCallRequest
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.loader import llm_model_path

pytestmark = pytest.mark.e2e

AGENT_REF = "examples/restaurant/agent.py:agent"
AGENT = load_agent(AGENT_REF)
TOOLS = [tool.spec for tool in AGENT.python_tools]
RULES = ClaimRules(TOOLS)
# Questions only a tool can answer. With the default settings the model answers the first
# two in words, made up (bench/tool_eval, text mode); the rest it may call for at once.
ASKED = {
    "Have you got room for six on Saturday at one in the afternoon?": "check_availability",
    "What are your opening hours?": "opening_hours",
    "Do you have a table for two tonight at eight?": "check_availability",
    "Are you open on Sunday?": "opening_hours",
}


@pytest.fixture(scope="module")
def llm() -> LlamaLlm:
    config = Config()
    return LlamaLlm(llm_model_path(config), threads=config.llm.threads, n_ctx=4096)


def conversation(text: str) -> list[ChatMessage]:
    return [
        ChatMessage("system", AGENT.instructions),
        ChatMessage("assistant", AGENT.greeting or ""),
        ChatMessage("user", text),
    ]


def ask(llm: LlamaLlm, messages: list[ChatMessage], tool_choice: str) -> tuple[str, list[str]]:
    """(the words, the tools called) of one request."""
    words, calls = [], []
    items = llm.stream(
        "e2e-claims", messages, CancelToken(), LlmUsage(), tools=TOOLS, tool_choice=tool_choice
    )
    for item in items:
        if isinstance(item, str):
            words.append(item)
        elif isinstance(item, ToolCallRequest):
            calls.append(item.name)
    llm.forget("e2e-claims")
    return "".join(words).strip(), calls


def test_an_answer_made_up_in_words_becomes_the_call_that_knows(llm: LlamaLlm) -> None:
    gated = []
    for text, tool in ASKED.items():
        messages = conversation(text)
        words, calls = ask(llm, messages, "auto")
        gate = ClaimGate(RULES, known_words(messages))
        said = gate.push(words) + gate.flush()
        print(f"\n  {text!r}: calls {calls}, words {words!r}, claim {gate.stopped}")
        if calls:
            assert calls == [tool], (text, calls)
            continue
        if gate.stopped is None:
            assert said == words  # words that state no owned fact are said whole
            continue
        gated.append(text)
        assert gate.stopped.text not in said
        _, forced = ask(llm, messages, "required")
        print(f"    asked again for a call: {forced}")
        assert forced == [tool], (text, forced)
    assert gated, "the model made up no answer: nothing here shows the gate at work"


@pytest.fixture(scope="module")
def restaurant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("claims")
    env = {"VOXPIPE_AGENT": AGENT_REF, "RESTAURANT_DB": str(tmp / "restaurant.sqlite3")}
    yield from serving(tmp, env=env)


@pytest.mark.parametrize("text", list(ASKED)[:2])
async def test_a_spoken_question_gets_the_tools_answer_not_a_guess(
    restaurant: RunningServer, text: str
) -> None:
    async with NativeClient(restaurant.ws) as client:
        await client.connect()
        await client.wait_for(lambda: client.completed_turn(1), 60)  # Luigi's greets first
        await client.wait_playback_done()
        turn = await client.speak(*voiced(text), timeout_s=90)
    record = turn.metrics
    tools = [t["name"] for t in record.get("tools", [])]
    print(f"\n  heard {turn.transcript!r}: tools {tools}, reply {turn.reply!r}, "
          f"claim {record.get('unbacked_claim')}")  # fmt: skip
    assert turn.status == "completed" and turn.reply.strip(), turn.done
    claim = record.get("unbacked_claim")
    if tools:
        assert tools == [ASKED[text]], json.dumps(record)  # the answer is the tool's
    else:  # the call the model was made to write guessed a value: asked for, not guessed
        assert claim is not None and turn.reply.startswith(TO_CHECK), json.dumps(record)
    if claim is not None:  # the model's made-up words were stopped: none reached the caller
        assert claim["text"] not in turn.reply, (claim, turn.reply)
