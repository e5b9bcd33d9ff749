"""The GGUF's own chat template, rendered as llama-cpp-python renders it, into token ids.

Every chat GGUF carries its prompt format as a Jinja template (``tokenizer.chat_template``
in its metadata). We render it with the environment llama-cpp-python's
``Jinja2ChatFormatter`` uses (sandboxed, ``trim_blocks``/``lstrip_blocks``, Transformers'
``tojson``, ``raise_exception``, ``strftime_now``), so a model of any family is prompted
as it was trained.

Two properties the engine needs beyond a string:

* **No injection.** The template's own text is tokenized with special tokens parsed; what a
  message says never is, so a caller who says ``<|im_end|>`` is heard as words. Each
  message's content goes into the template as a sentinel, and the rendered text is split
  at the sentinels (:meth:`ChatTemplate.render`).
* **A stable prefix.** The KV cache of a call is reused only if the prompt of the next
  turn begins with the tokens of this one. So the prompt is cut into turns, each rendered
  as the difference between the conversation up to it and up to the turn before
  (:meth:`ChatTemplate.turn_texts`); a template that rewrites earlier turns (one that drops
  old reasoning) still renders, in fewer, larger pieces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxpipe.engines.base import EngineError

# Private-use code points: no template writes them, and no model output holds them.
_SENTINEL = "\ue000{}\ue001"
_SENTINEL_RE = re.compile("\ue000([0-9]+)\ue001")
_PROBE = "voxpipe-probe-words"


class ChatTemplateError(EngineError):
    """The model's chat template is missing or does not render; says which model file."""

    code = "chat_template"


@dataclass(frozen=True)
class Segment:
    """Rendered text: the template's own (``literal`` False: special tokens are parsed) or
    a message's content (``literal``: tokenized as plain text)."""

    text: str
    literal: bool


class ChatTemplate:
    """One model's compiled template; rendering is pure (no model needed), so it is tested
    on real templates' text alone."""

    def __init__(self, source: str, bos_token: str, eos_token: str, model_file: str) -> None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.source = source
        self.model_file = model_file
        self.bos_token = bos_token
        self.eos_token = eos_token
        environment = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[Jinja2ChatFormatter.IgnoreGenerationTags, jinja2.ext.loopcontrols],
        )
        environment.filters["tojson"] = Jinja2ChatFormatter.tojson
        try:
            self._template = environment.from_string(source)
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(
                f"{model_file}: its chat template does not parse ({exc}). Fix: set "
                "llm.chat_template to a file holding a working one."
            ) from None
        self.supports_tools = "tools" in source
        self.trims = False
        probe = self._text([{"role": "user", "content": f"  {_PROBE}  "}], None, True)
        if _PROBE not in probe:
            raise ChatTemplateError(
                f"{model_file}: its chat template leaves out the user's words. Fix: set "
                "llm.chat_template to a file holding a working one."
            )
        self.trims = f"  {_PROBE}  " not in probe

    def _text(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None, generation: bool
    ) -> str:
        def raise_exception(message: str) -> None:
            raise ValueError(message)

        try:
            return self._template.render(
                messages=list(messages),
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=generation,
                raise_exception=raise_exception,
                strftime_now=_strftime_now,
                tools=list(tools) if tools else None,
            )
        except Exception as exc:  # a template's own raise_exception, or a Jinja error
            raise ChatTemplateError(
                f"{self.model_file}: its chat template refused the conversation: {exc}"
            ) from None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        generation: bool = False,
    ) -> list[Segment]:
        """``messages`` (OpenAI-style dicts) as segments; contents stay literal."""
        contents: list[str] = []
        marked = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str) and content:
                marked.append({**message, "content": _SENTINEL.format(len(contents))})
                contents.append(content.strip() if self.trims else content)
            else:
                marked.append(dict(message))
        text = self._text(marked, tools, generation)
        segments: list[Segment] = []
        start = 0
        for match in _SENTINEL_RE.finditer(text):
            if match.start() > start:
                segments.append(Segment(text[start : match.start()], False))
            segments.append(Segment(contents[int(match.group(1))], True))
            start = match.end()
        if start < len(text):
            segments.append(Segment(text[start:], False))
        return segments

    def turn_texts(
        self,
        messages: Sequence[Mapping[str, Any]],
        turns: Sequence[int],
        tools: Sequence[Any] | None = None,
    ) -> tuple[list[tuple[int, list[Segment]]], list[Segment]]:
        """The conversation cut at the message indices ``turns`` (ascending; the last is
        ``len(messages)``): each turn's end index and segments, that turn's part of the
        whole rendering, and the generation prompt. A cut where the rendering so far is
        not a prefix of the rendering with the next turn, or does not render alone (a
        template that wants a user turn first), is left out: its turn joins the next."""
        pieces: list[tuple[int, list[Segment]]] = []
        done: list[Segment] = []
        for end in turns:
            try:
                upto = self.render(messages[:end], tools)
            except ChatTemplateError:
                if end == len(messages):
                    raise
                continue
            if not _starts_with(upto, done):
                if end < len(messages):
                    continue
                pieces, done = [], []  # it rewrites earlier turns: the whole is one piece
            pieces.append((end, _after(upto, done)))
            done = upto
        whole = self.render(messages, tools, generation=True)
        if not _starts_with(whole, done):
            raise ChatTemplateError(
                f"{self.model_file}: its chat template's generation prompt rewrites the "
                "conversation before it"
            )
        return pieces, _after(whole, done)


def alternating(chat: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``chat`` as templates that insist on user and assistant turns in turn take it
    (Gemma's, Mistral's): consecutive turns of one role joined, and an empty user turn
    before an assistant that speaks first (an agent's greeting). Tool turns count as the
    user's. Only used when the template refused ``chat`` as it was."""
    out: list[dict[str, Any]] = []
    for message in chat:
        item = dict(message)
        if item["role"] == "tool":
            item = {"role": "user", "content": str(item.get("content") or "")}
        previous = out[-1] if out else None
        if previous is not None and previous["role"] == item["role"] != "system":
            joined = [str(previous.get("content") or ""), str(item.get("content") or "")]
            previous["content"] = "\n".join(part for part in joined if part)
            continue
        if item["role"] == "assistant" and (previous is None or previous["role"] == "system"):
            out.append({"role": "user", "content": ""})
        out.append(item)
    return out


def _flat(segments: Sequence[Segment]) -> list[tuple[str, bool]]:
    """Segments merged where adjacent ones are of one kind (comparison form)."""
    out: list[tuple[str, bool]] = []
    for s in segments:
        if out and out[-1][1] == s.literal:
            out[-1] = (out[-1][0] + s.text, s.literal)
        else:
            out.append((s.text, s.literal))
    return out


def _starts_with(whole: Sequence[Segment], head: Sequence[Segment]) -> bool:
    w, h = _flat(whole), _flat(head)
    if not h:
        return True
    if len(h) > len(w) or w[: len(h) - 1] != h[:-1]:
        return False
    last, piece = h[-1], w[len(h) - 1]
    return piece[1] == last[1] and piece[0].startswith(last[0])


def _after(whole: Sequence[Segment], head: Sequence[Segment]) -> list[Segment]:
    """The segments of ``whole`` past its prefix ``head`` (``_starts_with`` holds)."""
    w, h = _flat(whole), _flat(head)
    if not h:
        return [Segment(t, lit) for t, lit in w]
    rest = w[len(h) - 1 :]
    first_text = rest[0][0][len(h[-1][0]) :]
    out = [Segment(first_text, rest[0][1])] if first_text else []
    return out + [Segment(t, lit) for t, lit in rest[1:]]


def _strftime_now(fmt: str) -> str:
    from datetime import datetime

    return datetime.now().strftime(fmt)


def read_template(path: Path, model_file: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ChatTemplateError(
            f"{model_file}: the chat template file {path} cannot be read ({exc})"
        ) from None


def model_template(
    metadata: Mapping[str, str], bos_token: str, eos_token: str, model_path: Path,
    override: Path | None = None,
) -> ChatTemplate:  # fmt: skip
    """The template of the model at ``model_path``: ``override`` (``llm.chat_template``) if
    set, else the GGUF's ``tokenizer.chat_template``."""
    name = model_path.name
    if override is not None:
        source = read_template(override, name)
    else:
        source = metadata.get("tokenizer.chat_template", "")
    if not source.strip():
        raise ChatTemplateError(
            f"{name} has no chat template (tokenizer.chat_template is missing from its GGUF "
            "metadata): it is a base model, or was converted without one. Fix: use a chat "
            "(instruct) model, or set llm.chat_template to a file holding its template."
        )
    return ChatTemplate(source, bos_token, eos_token, name)
