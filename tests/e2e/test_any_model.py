"""Chat GGUFs other than the default: each is prompted through its own chat template.

Qwen2.5-Coder-1.5B-Instruct (22 PyPI chunk packages, assembled and pinned like the 0.5B)
starts, answers in words and calls a tool. Gemma 3 270M, the base model, is another family
with no chat template in its GGUF: it is refused at load with an error naming its file,
and given Gemma's template (``llm.chat_template``) it talks, and calls a tool through the
generic JSON family's grammar. The 0.5B's prompt is the hand-written ChatML it had before
the template was rendered, token for token, so its KV reuse and its tuned figures hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.unit.fakes import FakeStt, FakeTts, FakeVad
from voxpipe.agent import Agent, tool
from voxpipe.config import Config
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    Engines,
    LlmOutput,
    LlmUsage,
    ToolCallRequest,
    ToolSpec,
)
from voxpipe.engines.llama_llm import LlamaLlm
from voxpipe.engines.llama_template import ChatTemplateError
from voxpipe.engines.loader import load_llm
from voxpipe.engines.model_files import ModelFileError, ensure_llm
from voxpipe.engines.tool_family import ToolsUnsupportedError
from voxpipe.server.app import create_app

pytestmark = pytest.mark.e2e

GEMMA_TEMPLATE = Path(__file__).parents[1] / "data" / "chat_templates" / "gemma3.jinja"
SYSTEM = ChatMessage(
    "system", "You are the phone assistant of the restaurant Chez Voxpipe. Answer briefly."
)
BOOK = ToolSpec(
    "book_table",
    "Book a table.",
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "party_size": {"type": "integer"}},
        "required": ["name", "party_size"],
    },
)
REQUEST = ChatMessage("user", "Book a table for two under the name Smith, please.")


def model(name: str) -> Path:
    try:
        return ensure_llm(Config().llm.cache_dir, name)
    except ModelFileError as exc:
        pytest.skip(f"{name} is not installed ({exc}); `make install` assembles it")


def reply(
    llm: LlamaLlm,
    messages: list[ChatMessage],
    tools: list[ToolSpec] | None = None,
    tool_choice: str = "auto",
) -> tuple[list[LlmOutput], LlmUsage]:
    usage = LlmUsage()
    stream: Iterator[LlmOutput] = llm.stream(
        "e2e-any", messages, CancelToken(), usage, tools=tools, tool_choice=tool_choice
    )
    return list(stream), usage


def words(items: list[LlmOutput]) -> str:
    assert all(isinstance(i, str) for i in items), items
    return "".join(i for i in items if isinstance(i, str)).strip()


@pytest.fixture(scope="module")
def qwen_1_5b() -> LlamaLlm:
    return LlamaLlm(model("qwen2.5-coder-1.5b"), threads=Config().llm.threads, n_ctx=2048)


def test_the_1_5b_answers_in_words(qwen_1_5b: LlamaLlm) -> None:
    assert qwen_1_5b.family is not None and qwen_1_5b.family.name == "qwen"
    items, usage = reply(qwen_1_5b, [SYSTEM, ChatMessage("user", "What food do you serve?")])
    assert len(words(items)) > 10 and usage.finish_reason in ("stop", "length")


def test_the_1_5b_calls_a_tool_with_the_callers_details(qwen_1_5b: LlamaLlm) -> None:
    items, usage = reply(qwen_1_5b, [SYSTEM, REQUEST], [BOOK])
    call = items[-1]
    assert isinstance(call, ToolCallRequest) and not call.error, items
    assert call.name == "book_table" and usage.finish_reason == "tool_calls"
    assert call.arguments == {"name": "Smith", "party_size": 2}
    assert usage.extra["tool_call_p"] >= 0.5


def test_the_1_5b_prompt_is_its_own_template(qwen_1_5b: LlamaLlm) -> None:
    """Its template differs from the 0.5B's (it writes ``{{"name": ...}}`` in the tools'
    instructions): the prompt carries its text, not the 0.5B's."""
    tokens, _ = qwen_1_5b.prompt.tokens([SYSTEM, REQUEST], tools=[BOOK])
    text = qwen_1_5b._llm.detokenize(tokens, special=True).decode()
    assert '<tool_call>\n{{"name": <function-name>' in text


def chatml(llm: LlamaLlm, messages: list[ChatMessage]) -> list[int]:
    """The prompt as the engine wrote it by hand before it rendered the template."""

    def special(text: str) -> list[int]:
        return llm._llm.tokenize(text.encode(), add_bos=False, special=True)

    out: list[int] = []
    for m in messages:
        body = llm.prompt.text(f"{m.role}\n{m.content}")
        out += [*special("<|im_start|>"), *body, *special("<|im_end|>"), *llm.prompt.text("\n")]
    return [*out, *special("<|im_start|>"), *llm.prompt.text("assistant\n")]


def test_the_0_5b_prompt_is_the_chatml_it_had_token_for_token() -> None:
    llm = LlamaLlm(model("qwen2.5-coder-0.5b"), n_ctx=2048)
    messages = [
        SYSTEM,
        ChatMessage("assistant", "Chez Voxpipe, good evening."),
        ChatMessage("user", "Hi <|im_end|> there, a table\n for two?"),
        ChatMessage("assistant", " Of course."),
        ChatMessage("user", "Thanks!"),
    ]
    tokens, dropped = llm.prompt.tokens(messages)
    assert dropped == 0 and tokens == chatml(llm, messages)
    # Each turn's prompt begins with the one before: the KV cache of a call is reused.
    shorter, _ = llm.prompt.tokens(messages[:3], add_header=False)
    assert tokens[: len(shorter)] == shorter


def test_a_gguf_without_a_chat_template_is_refused_naming_its_file() -> None:
    path = model("gemma-3-270m")
    with pytest.raises(ChatTemplateError, match=r"gemma-3-270m-q4_k_m\.gguf has no chat template"):
        LlamaLlm(path, n_ctx=1024)


@pytest.fixture(scope="module")
def gemma() -> LlamaLlm:
    return LlamaLlm(model("gemma-3-270m"), n_ctx=1024, chat_template=GEMMA_TEMPLATE)


def test_gemma_talks_through_its_template(gemma: LlamaLlm) -> None:
    assert gemma.family is not None and gemma.family.name == "json"
    tokens, _ = gemma.prompt.tokens([SYSTEM, ChatMessage("user", "Hello, are you open?")])
    text = gemma._llm.detokenize(tokens, special=True).decode()
    assert tokens[0] == gemma._llm.token_bos()
    assert text.endswith("Hello, are you open?<end_of_turn>\n<start_of_turn>model\n")
    items, _ = reply(gemma, [SYSTEM, ChatMessage("user", "Hello, are you open tonight?")])
    assert words(items)


def test_gemma_talks_after_the_agents_greeting(gemma: LlamaLlm) -> None:
    """Gemma's template refuses an assistant turn first; the engine joins the turns so it
    takes them, and the call's next turn still extends the prompt of the one before."""
    greeting = ChatMessage("assistant", "Chez Voxpipe, good evening. How can I help?")
    first = [SYSTEM, greeting, ChatMessage("user", "Are you open tonight?")]
    items, _ = reply(gemma, first)
    answer = words(items)
    assert answer
    then = [*first, ChatMessage("assistant", answer), ChatMessage("user", "Thank you.")]
    before, _ = gemma.prompt.tokens(first, add_header=False)
    after, _ = gemma.prompt.tokens(then)
    assert after[: len(before)] == before


def test_gemma_calls_through_the_generic_json_grammar(gemma: LlamaLlm) -> None:
    """A base model of 270M parameters knows no tool format; the grammar makes its call
    valid, and the caller's details come from the request."""
    items, _ = reply(gemma, [SYSTEM, REQUEST], [BOOK], tool_choice="required")
    call = items[-1]
    assert isinstance(call, ToolCallRequest) and not call.error, items
    assert call.name == "book_table" and set(call.arguments) == {"name", "party_size"}


def test_a_model_of_no_tool_family_refuses_tools_and_still_talks() -> None:
    llm = LlamaLlm(
        model("gemma-3-270m"), n_ctx=1024, chat_template=GEMMA_TEMPLATE, tool_family="none"
    )
    with pytest.raises(ToolsUnsupportedError, match=r"gemma-3-270m-q4_k_m\.gguf cannot call tools"):
        reply(llm, [SYSTEM, REQUEST], [BOOK])
    items, _ = reply(llm, [SYSTEM, ChatMessage("user", "Hello!")])
    assert words(items)


@tool(effect="read_only")
async def opening_hours(day: str) -> str:
    """When we are open."""
    return "noon to ten"


def test_an_agent_with_tools_on_a_model_that_refuses_them_fails_at_start_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server loads the real model, warms it, then the agent's tools are refused:
    /readyz says why, and the log has the message, no traceback."""
    model("gemma-3-270m")
    config = Config.load(
        server={"turn_log_path": None},
        store={"path": None},
        llm={"model": "gemma-3-270m", "chat_template": GEMMA_TEMPLATE, "tool_family": "none",
             "n_ctx": 1024},
    )  # fmt: skip

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("hello"), load_llm(config), FakeTts())

    app = create_app(config, engines, agent=Agent("Be brief.", tools=[opening_hours]))
    with caplog.at_level(logging.INFO, logger="voxpipe"), TestClient(app) as client:
        deadline = time.monotonic() + 300
        while (body := client.get("/readyz").json())["status"] == "loading":
            assert time.monotonic() < deadline, body
            time.sleep(0.1)
    assert body["status"] == "failed"
    assert "ToolsUnsupportedError: gemma-3-270m-q4_k_m.gguf cannot call tools" in body["error"]
    failures = [r for r in caplog.records if r.getMessage().startswith("model loading failed")]
    assert failures and all(r.exc_info is None for r in failures)
