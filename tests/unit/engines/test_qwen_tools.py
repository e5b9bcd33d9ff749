"""Qwen's tool-call format without the model: the prompt text against the GGUF's own chat
template, the grammar's shape, the parser on good, partial and malformed output, and the
arguments streamed as they are written."""

from __future__ import annotations

import json

import jinja2
import numpy as np
import pytest

from voxpipe.engines.base import ChatMessage, ToolCallRequest, ToolSpec
from voxpipe.engines.llama_tools import call_probability, call_start_ids
from voxpipe.engines.qwen_tools import (
    CALL_PREFIX,
    ArgumentsScanner,
    MarkupFilter,
    ToolCallParseError,
    call_body,
    call_steps,
    name_grammar,
    parse_call,
    system_with_tools,
    tool_response,
)

BOOK = ToolSpec(
    "book_table",
    "Book a table.",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
            "party_size": {"type": "integer"},
        },
        "required": ["name", "time", "party_size"],
    },
)
HOURS = ToolSpec(
    "opening_hours",
    "Opening hours on a day.",
    {"type": "object", "properties": {"day": {"type": "string", "enum": ["monday", "sunday"]}}},
)

# The tools part of the GGUF's tokenizer.chat_template (qwen2.5-coder-0.5b-instruct), verbatim.
TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You "
    "are a helpful assistant.' }}{%- endif %}{{- \"\\n\\n# Tools\\n\\nYou may call one or more "
    "functions to assist with the user query.\\n\\nYou are provided with function signatures "
    'within <tools></tools> XML tags:\\n<tools>" }}{%- for tool in tools %}{{- "\\n" }}'
    '{{- tool | tojson }}{%- endfor %}{{- "\\n</tools>\\n\\nFor each function call, return a '
    "json object with function name and arguments within <tool_call></tool_call> XML tags:"
    '\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n'
    '</tool_call><|im_end|>\\n" }}{%- endif %}'
    '{%- for message in messages %}{%- if message.role == "assistant" and message.tool_calls %}'
    "{{- '<|im_start|>' + message.role }}{%- if message.content %}{{- '\\n' + message.content }}"
    "{%- endif %}{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    '{%- set tool_call = tool_call.function %}{%- endif %}{{- \'\\n<tool_call>\\n{"name": "\' }}'
    '{{- tool_call.name }}{{- \'", "arguments": \' }}{{- tool_call.arguments | tojson }}'
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    '{%- elif message.role == "tool" %}{%- if (loop.index0 == 0) or '
    "(messages[loop.index0 - 1].role != \"tool\") %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    '{%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}'
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endif %}{%- endfor %}"
)


def render(messages: list[dict[str, object]], tools: list[ToolSpec]) -> str:
    env = jinja2.Environment()
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)  # as HF does
    return env.from_string(TEMPLATE).render(messages=messages, tools=[t.openai() for t in tools])


def test_the_tools_block_is_the_templates_to_the_character() -> None:
    expected = render([{"role": "system", "content": "Be brief."}], [BOOK, HOURS])
    ours = f"<|im_start|>system\n{system_with_tools('Be brief.', [BOOK, HOURS])}<|im_end|>\n"
    assert ours == expected
    default = render([{"role": "user", "content": "hi"}], [HOURS])
    assert default == f"<|im_start|>system\n{system_with_tools(None, [HOURS])}<|im_end|>\n"


def test_a_call_and_its_results_are_written_as_the_template_writes_them() -> None:
    call = ToolCallRequest("c1", "book_table", {"name": "Smith", "party_size": 2}, "{}")
    messages: list[dict[str, object]] = [
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": call.name, "arguments": dict(call.arguments)}}]},
        {"role": "tool", "content": '{"booked": true}'},
        {"role": "tool", "content": "second"},
    ]  # fmt: skip
    expected = render(messages, [])
    results = tool_response('{"booked": true}') + tool_response("second")
    ours = (
        f"<|im_start|>assistant\n<tool_call>{call_body(call)}</tool_call><|im_end|>\n"
        f"<|im_start|>user{results}<|im_end|>\n"
    )
    assert ours == expected


def test_a_call_is_fixed_text_between_the_values_the_model_samples() -> None:
    """Keys, quotes and commas come from the schema (evaluated in one batch, not sampled);
    each value's grammar ends on the character after it, so the model says where it ends."""
    steps = call_steps(BOOK)
    assert [s.fixed for s in steps] == [
        '", "arguments": {"name":',
        ' "time":',
        ' "party_size":',
        "}",
    ]
    assert [s.delimiter for s in steps] == [",", ",", "}", ""]
    assert steps[-1].grammar is None
    assert all(s.grammar.splitlines()[-1].startswith('root ::= " "? ') for s in steps[:-1])
    # Written as the engine writes it: the name, then fixed text and sampled values in turn.
    scanner = ArgumentsScanner()
    scanner.push(CALL_PREFIX + "book_table")
    sampled = [' "Smith, J",', ' "19:00",', " 2}"]
    for step, value in zip(steps, [*sampled, ""], strict=True):
        scanner.push(step.fixed)
        for i, ch in enumerate(value):  # a comma inside a string does not end the value
            scanner.push(ch)
            assert scanner.value_ended(step.delimiter) == (i == len(value) - 1)
    assert scanner.complete
    call = parse_call(scanner.text, [BOOK, HOURS])
    assert call.arguments == {"name": "Smith, J", "time": "19:00", "party_size": 2}


def test_optional_arguments_are_sampled_as_one_object() -> None:
    sampled, end = call_steps(HOURS)
    assert sampled.fixed == '", "arguments":' and sampled.delimiter == "}"
    assert end.fixed == "}" and end.grammar is None
    assert "day-kv )?" in str(sampled.grammar)
    scanner = ArgumentsScanner()
    scanner.push(CALL_PREFIX + "opening_hours" + sampled.fixed + ' {"day": "sunday"}')
    assert scanner.value_ended("}") and not scanner.complete
    scanner.push(end.fixed)
    assert parse_call(scanner.text, [HOURS]).arguments == {"day": "sunday"}


def test_a_tool_without_arguments_is_written_whole() -> None:
    (step,) = call_steps(ToolSpec("transfer", "To a person.", {"type": "object"}))
    assert step.fixed == '", "arguments": {}}' and step.grammar is None


def test_the_grammars_are_ones_llama_cpp_accepts() -> None:
    """The whole call's, the name's and each step's."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from voxpipe.config import Config
    from voxpipe.engines.model_files import QWEN_FILE

    path = Config().llm.cache_dir / QWEN_FILE
    if not path.is_file():
        pytest.skip("the embedded model is not assembled")
    vocab = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)._model.vocab
    grammars = [name_grammar([BOOK, HOURS])]
    grammars += [s.grammar for t in (BOOK, HOURS) for s in call_steps(t) if s.grammar]
    for grammar in grammars:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        assert sampler, grammar
        llama_cpp.llama_sampler_free(sampler)


WRITTEN = (
    CALL_PREFIX
    + 'book_table", "arguments": {"name": "Sm\\"ith }", "time": "19:00", "party_size": 2}}'
    + "\n</tool_call>"
)


def test_a_complete_call_parses_with_its_arguments_as_written() -> None:
    call = parse_call(WRITTEN, [BOOK, HOURS], "call_1")
    assert call.call_id == "call_1" and call.name == "book_table" and not call.error
    assert call.arguments == {"name": 'Sm"ith }', "time": "19:00", "party_size": 2}
    assert call.arguments_json == '{"name": "Sm\\"ith }", "time": "19:00", "party_size": 2}'
    tagged = parse_call("<tool_call>" + WRITTEN, [BOOK])
    assert tagged.arguments == call.arguments and tagged.call_id.startswith("call_")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (WRITTEN[:40], "not JSON"),  # cut off mid-call
        ("", "not JSON"),
        ("\n{name: book_table}", "not JSON"),
        ('\n{"name": "book_table", "arguments": {}} and more', "text follows"),
        ('\n["book_table"]', "object with a"),
        ('\n{"name": "drop_tables", "arguments": {}}', "drop_tables"),
        ('\n{"name": "book_table", "arguments": "Smith"}', "JSON object"),
        ('\n{"name": "book_table", "arguments": {"name": "Smith"}}', "time, party_size"),
    ],
)
def test_malformed_or_partial_output_is_a_parse_error(text: str, why: str) -> None:
    with pytest.raises(ToolCallParseError, match=why):
        parse_call(text, [BOOK, HOURS])


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_the_scanner_streams_exactly_the_arguments_and_sees_the_end(size: int) -> None:
    scanner, deltas = ArgumentsScanner(), []
    for i in range(0, len(WRITTEN), size):
        deltas.append(scanner.push(WRITTEN[i : i + size]))
        if scanner.complete:
            break
    assert scanner.complete and scanner.name == "book_table"
    if size == 1:  # seen the moment the call's object closes, before the closing tag
        assert scanner.text.endswith("}}")
    expected = parse_call(WRITTEN, [BOOK]).arguments_json
    assert "".join(deltas) == scanner.arguments_json == expected


def test_an_unfinished_call_is_not_complete_and_has_no_name_yet() -> None:
    scanner = ArgumentsScanner()
    scanner.push(CALL_PREFIX + "book_ta")
    assert scanner.name == "" and not scanner.complete and scanner.arguments_json == ""


def test_the_decision_counts_the_mass_on_call_like_starts() -> None:
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32))
    assert call_probability(logits, np.array([1, 3])) == pytest.approx(0.6)
    pieces = [b"Hello", b"{", b' {"', b"`", b"```json", b"Sure", b" ok"]
    assert call_start_ids(iter(pieces), [99]).tolist() == [99, 1, 2, 3, 4]


def test_chat_messages_with_tool_turns_round_trip() -> None:
    call = ToolCallRequest("call_9", "book_table", {"name": "Smith"}, '{"name":"Smith"}')
    broken = ToolCallRequest("call_8", "book_table", {}, "{", "arguments are not JSON")
    messages = [
        ChatMessage("system", "Be brief."),
        ChatMessage("assistant", "One moment.", (call, broken)),
        ChatMessage("tool", '{"booked": true}', tool_call_id="call_9"),
        ChatMessage("user", "thanks"),
    ]
    stored = json.loads(json.dumps([m.to_dict() for m in messages]))
    assert [ChatMessage.from_dict(d) for d in stored] == messages
    assert stored[3] == {"role": "user", "content": "thanks"}  # plain turns as they were


def test_a_tool_spec_refuses_what_no_engine_can_send() -> None:
    with pytest.raises(ValueError, match="name"):
        ToolSpec("book table", "spaces are not allowed")
    with pytest.raises(ValueError, match="object"):
        ToolSpec("x", "", {"type": "string"})
    assert ToolSpec("x", "d").openai() == {
        "type": "function",
        "function": {"name": "x", "description": "d",
                     "parameters": {"type": "object", "properties": {}}},
    }  # fmt: skip


def test_tool_markup_is_taken_out_of_a_text_reply_as_it_streams() -> None:
    markup = MarkupFilter()
    pieces = ["<", "tool", "_response>\n", '"Booked for', ' Smith."\n</tool_', "response>", "<"]
    said = "".join(markup.push(p) for p in pieces) + markup.flush()
    assert said == '\n"Booked for Smith."\n<'  # a lone "<" at the end is kept: no tag
    assert MarkupFilter().push("2 < 3 people") == "2 < 3 people"
