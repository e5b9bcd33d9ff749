"""The reply's text as the caller hears it: only words, cut into phrases for the TTS.

**Only words.** A TTS reads whatever it is given. Shown a tool's result, a small model may
write it back (``{"ok": true, "table": 12}`` read aloud), or write the call itself as JSON;
any model may write markdown, code, ``<tool_call>`` tags or field names. The engine's
sampling rules bar a reply's ``{`` and backtick tokens (``engines/reply_rules.py``), but not
a quote that opens ``"ok": true``, and a remote model has no such rules. So every reply's
text passes through one :class:`SpeechFilter`, between the LLM and everything else (the
TTS's clauses, the transcript a client is sent, the history), and what passes has no
braces, brackets, quotes, backticks, underscores, tags or markdown signs:

- a JSON object or array (or its ``"key": value`` pairs) becomes a sentence of its values
  (:func:`said_of`): ``{"ok": true, "table": 12}`` is "Done: table 12." A tool call
  written as JSON (``name`` and ``arguments``) says nothing;
- ``<tool_call>…</tool_call>`` and code blocks go; other tags go, their text stays;
- inline code, quotes and markdown links keep their text; ``snake_case`` reads as words.

It streams: plain text passes at once; what may be markup is held until it is known, at
most :data:`MAX_HELD_CHARS`. The model's side is :func:`result_for_model`: a tool's result
asks the model to tell its outcome in words; a reply the filter left empty says the results
in :func:`said_of`'s words (:func:`results_said`).

**Phrases.** :class:`ClauseChunker` cuts the words into the TTS's clauses. The caller waits
for the first, so it is a *phrase*: released at the first comma-like boundary once a few
characters long, before a word that starts a new phrase (a conjunction or preposition) once
a few words are complete, or after a few words at most; a long sentence with no comma does
not hold the first audio back. The second is cut by the same rules with a larger bound
(``second_phrase_max_words``): it is written and synthesized while the first plays. Later
chunks are clauses and prefer sentence ends, which sound better.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence

from voxpipe.config import ChunkerConfig
from voxpipe.engines.base import ChatMessage

# After a result, a model may read it out (``>{"ok": true, "taxi_id": 12}``) or talk about it
# ("This response indicates..."); this asks it to tell the caller. It names no words to say:
# a model given the words of :func:`said_of` copies them.
SAY_THE_RESULT = (
    "Tell the caller the outcome, speaking to them directly, in one short spoken sentence "
    "of plain words, with no JSON or field names."
)
# A reply all markup, answering no result (a call it may not make now, or code).
CANNOT_SAY = "Sorry, I can't do that right now."
MAX_HELD_CHARS = 2000  # markup held longer than this is judged as it stands
MAX_DETAILS = 4  # a result's sentence names at most this many of its values
SIGNS = '{[<`"('
_PLAIN_DROP = re.compile(r"[*#|~\\{}\[\]<>`\"]+")
_TAG = re.compile(r"</?([A-Za-z_][\w:-]*)[^<>]*>")
_TAG_PREFIX = re.compile(r"</?[A-Za-z_]?[\w:-]*[^<>]*\Z")
_PAIR = re.compile(r'"([^"\\]+)"\s*:\s*("(?:[^"\\]|\\.)*"|true|false|null|-?\d+(?:\.\d+)?)')
# Tags whose content is a call or code, not words (a model may write a call as XML).
_DROPPED_TAGS = frozenset(
    "tool_call tool_calls function_call function functions tools tool arguments parameters "
    "invoke code script".split()
)
_CALL_TEXT = re.compile(r'"name"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"\s*:')
# Keys whose true value means "it worked", and keys whose string value is the sentence.
_VERDICTS = frozenset({"ok", "success", "succeeded", "done", "result_ok"})
_STATUS = frozenset({"status", "state", "result", "outcome"})
_SENTENCES = ("message", "say", "says", "text", "answer", "summary", "speech", "reply")
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "function", "tool", "type", "id"})


class SpeechFilter:
    """One reply's text, as the caller may hear it (module docstring). ``push`` each piece
    the model writes; ``flush`` at the end of a request, or before a tool call."""

    def __init__(self) -> None:
        self._held = ""

    def push(self, text: str) -> str:
        said, self._held = _split(self._held + text, final=False)
        return said

    def flush(self) -> str:
        said, self._held = _split(self._held, final=True)
        return said


def spoken(text: str) -> str:
    """``text`` (all of it, not a stream) as the caller may hear it."""
    return _split(text, final=True)[0]


def said_of(value: object) -> str:
    """A sentence made of a JSON value's contents, for a result with no words of its own:
    ``{"booked": true, "table": 4}`` is "Booked: table 4."; a call written as JSON is ""."""
    if isinstance(value, Mapping):
        return _said_of_object(value)
    if isinstance(value, list):
        parts = [said_of(v).rstrip(".") for v in value]
        return _sentence(_listed([p for p in parts if p]))
    if isinstance(value, bool) or value is None:
        return "Done." if value else ""
    return _sentence(_words(str(value)))


def result_for_model(content: str) -> str:
    """A tool result as the model is shown it: the result, then a request to tell the caller
    its outcome in words (module docstring)."""
    return f"{content}\n{SAY_THE_RESULT}"


# -- the streaming split ------------------------------------------------------------


def _split(buf: str, final: bool) -> tuple[str, str]:
    """(what may be said now, what is held): markup regions turned into words."""
    out: list[str] = []
    i = 0
    while i < len(buf):
        j = _next_sign(buf, i)
        if j is None:
            cut = len(buf) if final else _last_word_start(buf, i)
            out.append(_plain(buf[i:cut]))
            return "".join(out), buf[cut:]
        start = _call_start(buf, i, j)
        out.append(_plain(buf[i:start]))
        region = _region(buf, start, j, final or len(buf) - start > MAX_HELD_CHARS)
        if region is None:
            return "".join(out), buf[start:]
        end, words = region
        out.append(words)
        i = end
    return "".join(out), ""


def _next_sign(buf: str, i: int) -> int | None:
    found = [k for k in (buf.find(sign, i) for sign in SIGNS) if k >= 0]
    return min(found) if found else None


def _last_word_start(buf: str, i: int) -> int:
    """Where a last word that may be a name in code (``book_`` then ``taxi(``) begins: it
    waits for the next piece. Any other text passes as it came."""
    k = max(buf.rfind(" ", i), buf.rfind("\n", i)) + 1
    k = max(k, i)
    return k if "_" in buf[k:] else len(buf)


def _call_start(buf: str, i: int, j: int) -> int:
    """An opening parenthesis right after a word: the word may be a function's name."""
    if buf[j] != "(":
        return j
    k = j
    while k > i and (buf[k - 1].isalnum() or buf[k - 1] in "_."):
        k -= 1
    return k


def _region(buf: str, start: int, j: int, final: bool) -> tuple[int, str] | None:
    """The markup at ``j`` (``start``: where a called name begins): (its end, its words),
    or None while it is not complete."""
    sign = buf[j]
    if sign == "{":
        return _json_region(buf, j, _closing(buf, j, "{", "}"), final)
    if sign == "[":
        return _bracket_region(buf, j, final)
    if sign == "<":
        return _tag_region(buf, j, final)
    if sign == "`":
        return _code_region(buf, j, final)
    if sign == '"':
        return _quote_region(buf, j, final)
    end = _closing(buf, j, "(", ")")
    if end is None:
        return (len(buf), _plain(buf[start:])) if final else None
    name, inner = buf[start:j], buf[j + 1 : end - 1]
    if "_" in name or any(c in inner for c in '="{'):
        return end, ""  # a call written as code: nothing to say
    return end, " ".join(p for p in (_plain(name), _split(inner, True)[0]) if p.strip())


def _outside_strings(buf: str, j: int) -> Iterator[tuple[int, str]]:
    """Each character of ``buf`` from ``j`` that is not inside a JSON string, with its
    index (the quotes themselves are not given)."""
    in_string, escaped = False, False
    for k in range(j, len(buf)):
        c = buf[k]
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        else:
            yield k, c


def _closing(buf: str, j: int, opening: str, closing: str) -> int | None:
    """The end (exclusive) of the balanced ``opening``…``closing`` at ``j``, strings
    skipped; None if it is not closed yet."""
    depth = 0
    for k, c in _outside_strings(buf, j):
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return k + 1
    return None


def _json_region(buf: str, j: int, end: int | None, final: bool) -> tuple[int, str] | None:
    if end is None:
        return (len(buf), _spaced(_fragment_words(buf[j:]))) if final else None
    try:
        value = json.loads(buf[j:end])
    except ValueError:
        return end, _spaced(_fragment_words(buf[j:end]))
    return end, _spaced(said_of(value))


def _bracket_region(buf: str, j: int, final: bool) -> tuple[int, str] | None:
    end = _closing(buf, j, "[", "]")
    if end is None:
        return (len(buf), _split(buf[j + 1 :], True)[0]) if final else None
    inner = buf[j + 1 : end - 1]
    if end < len(buf) and buf[end] == "(":  # a markdown link: its text, not its address
        link_end = _closing(buf, end, "(", ")")
        if link_end is None:
            return (len(buf), _plain(inner)) if final else None
        return link_end, _plain(inner)
    if end == len(buf) and not final:
        return None  # a link's address may follow
    try:
        return end, _spaced(said_of(json.loads(buf[j:end])))
    except ValueError:
        return end, _split(inner, True)[0]


def _tag_region(buf: str, j: int, final: bool) -> tuple[int, str] | None:
    tag = _TAG.match(buf, j)
    if tag is None:
        if not final and _TAG_PREFIX.match(buf, j) and len(buf) - j < 64:
            return None  # a tag may be coming
        return j + 1, " "  # a lone "<" is no word
    name = tag.group(1).lower()
    if name in _DROPPED_TAGS and not tag.group().startswith("</"):
        if tag.group().endswith("/>"):
            return tag.end(), " "
        close = buf.find(f"</{tag.group(1)}>", tag.end())
        if close < 0:
            return (len(buf), " ") if final else None
        return close + len(tag.group(1)) + 3, " "
    return tag.end(), " "


def _code_region(buf: str, j: int, final: bool) -> tuple[int, str] | None:
    if buf.startswith("```", j) or (not final and "```".startswith(buf[j:])):
        if not buf.startswith("```", j):
            return None
        close = buf.find("```", j + 3)
        if close < 0:
            return (len(buf), _fenced(buf[j + 3 :])) if final else None
        return close + 3, _fenced(buf[j + 3 : close])
    close = buf.find("`", j + 1)
    if close < 0:
        return (len(buf), _plain(buf[j + 1 :])) if final else None
    return close + 1, _plain(buf[j + 1 : close])


def _fenced(block: str) -> str:
    """A fenced block: JSON is said as words, code is not said."""
    body = block.split("\n", 1)[1] if "\n" in block else block
    try:
        return _spaced(said_of(json.loads(body)))
    except ValueError:
        return " "


def _quote_region(buf: str, j: int, final: bool) -> tuple[int, str] | None:
    close = j + 1
    while close < len(buf) and buf[close] != '"':
        close += 2 if buf[close] == "\\" else 1
    if close >= len(buf):
        return (len(buf), _plain(buf[j + 1 :])) if final else None
    after = buf[close + 1 :].lstrip()
    if not after and not final:
        return None  # a ":" after it would make it a key
    if not after.startswith(":"):
        return close + 1, _plain(buf[j + 1 : close])
    end = _pairs_end(buf, j)
    if end is None:
        return (len(buf), _spaced(_fragment_words(buf[j:]))) if final else None
    return end, _spaced(_fragment_words(buf[j:end]))


def _pairs_end(buf: str, j: int) -> int | None:
    """The end of ``"key": value, …`` written without its braces: a line's end, or a
    closing brace the opening of which was never written; None while it may go on."""
    depth = 0
    for k, c in _outside_strings(buf, j):
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth < 0:
                return k + 1
        elif c == "\n" and depth == 0:
            return k
    return None


def _fragment_words(text: str) -> str:
    """Words of JSON that does not parse as written: cut off, or without its braces."""
    if _CALL_TEXT.search(text):
        return ""  # a call written as text, even as broken JSON
    body = text.strip().strip(",").strip()
    for attempt in (body, "{" + body.strip("{}").strip().strip(",") + "}"):
        try:
            return said_of(json.loads(attempt))
        except ValueError:
            continue
    pairs = {key: json.loads(value) for key, value in _PAIR.findall(text)}
    return said_of(pairs) if pairs else ""


# -- words from JSON values ------------------------------------------------------------


def _said_of_object(value: Mapping[str, object]) -> str:
    if "name" in value and ("arguments" in value or "parameters" in value):
        if set(value) <= _CALL_KEYS:
            return ""  # a call written as text: it says nothing to the caller
    error = value.get("error")
    if error:
        detail = _words(error) if isinstance(error, str) else said_of(error).rstrip(".")
        return f"Sorry, that did not work: {detail}." if detail else "Sorry, that did not work."
    for key in _SENTENCES:
        said = value.get(key)
        if isinstance(said, str) and said.strip():
            return _sentence(_plain(said))
    verdict, details = _parts(value)
    shown = details[:MAX_DETAILS]
    if not shown:
        return _sentence(verdict or "Done")
    return _sentence(f"{verdict}: {', '.join(shown)}" if verdict else ", ".join(shown))


def _parts(value: Mapping[str, object]) -> tuple[str, list[str]]:
    """(whether it worked, in words; its values, each "key value"), nested objects'
    values among them."""
    verdict, details = "", []
    for key, item in value.items():
        lowered = key.lower()
        if isinstance(item, bool) and lowered in _VERDICTS:
            verdict = verdict or ("Done" if item else "Sorry, that did not work")
        elif isinstance(item, bool):
            details.append(_words(key) if item else f"not {_words(key)}")
        elif isinstance(item, str) and lowered in _STATUS and not verdict:
            verdict = _words(item).capitalize()
        elif isinstance(item, Mapping):
            inner_verdict, inner = _parts(item)
            verdict = verdict or inner_verdict
            details += inner
        elif isinstance(item, list):
            listed = _listed([said_of(v).rstrip(".") for v in item if v is not None])
            details.append(f"{_words(key)} {listed}" if listed else "")
        elif item is not None and str(item).strip():
            details.append(f"{_words(key)} {_words(str(item))}")
    return verdict, [d for d in details if d]


def _listed(parts: list[str]) -> str:
    parts = [p for p in parts if p]
    return parts[0] if len(parts) < 2 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _words(text: str) -> str:
    return _plain(text.replace("_", " ")).strip()


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else f"{text}."


def _spaced(words: str) -> str:
    return f" {words} " if words else " "


def _plain(text: str) -> str:
    """Text outside any markup: markdown signs and stray closers go, ``a_b`` reads as a b."""
    return _PLAIN_DROP.sub("", text.replace("_", " "))


def results_said(messages: Sequence[ChatMessage]) -> str:
    """The results the conversation ends on, as words: what a reply says when the model,
    shown them, wrote only markup (the filter left nothing to say)."""
    contents = [m.content for m in itertools.takewhile(lambda m: m.role == "tool", messages[::-1])]
    parts = []
    for content in reversed(contents):
        try:
            parts.append(said_of(json.loads(content)))
        except (ValueError, RecursionError):  # a client's result may nest past any parser
            parts.append(" ".join(spoken(content).split()))
    return " ".join(p for p in parts if p)


def instead_of_markup(messages: Sequence[ChatMessage]) -> str:
    """What a reply says when the filter left nothing of what the model wrote."""
    return results_said(messages) or CANNOT_SAY


_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)")
_CLAUSE_END = re.compile(r"[,;:—–]+(?=\s)")
_MARKUP = re.compile(r"[*_`#>|~]+|\[(.*?)\]\(.*?\)")
_WORD = re.compile(r"\S+(?=\s)")  # a complete word: the next token has begun
# Words a spoken phrase starts with: a pause before them sounds deliberate.
PHRASE_STARTS = frozenset(
    "and but or because although while when where which who whose that if unless "
    "until after before since with without for from about at on in into to of by "
    "between during through".split()
)


def clean_for_speech(text: str) -> str:
    """Remove markdown the model may emit; keep link text."""
    return re.sub(r"\s+", " ", _MARKUP.sub(lambda m: m.group(1) or "", text)).strip()


class ClauseChunker:
    def __init__(self, config: ChunkerConfig) -> None:
        self.cfg = config
        self._buffer = ""
        self._emitted = 0
        self._first_phrase_words = config.first_phrase_max_words

    def hurry(self) -> None:
        """The reply is late: its first phrase ends after ``late_first_phrase_words``."""
        late = self.cfg.late_first_phrase_words
        self._first_phrase_words = min(self._first_phrase_words or late, late)

    def push(self, delta: str) -> list[str]:
        """Add a text delta; return the clauses that are now complete."""
        self._buffer += delta
        out: list[str] = []
        while clause := self._next_clause():
            out.append(clause)
        return out

    def flush(self) -> list[str]:
        """End of the reply: whatever is left is the last clause."""
        rest, self._buffer = clean_for_speech(self._buffer), ""
        return [rest] if _speakable(rest) else []

    def _next_clause(self) -> str | None:
        """Cut at the earliest eligible boundary, so the clauses do not depend on how the
        text arrived (token by token or in one piece)."""
        buf = self._buffer
        limit = self.cfg.max_chars
        phrase_words = self._phrase_words()
        min_clause = self.cfg.min_first_chars if phrase_words else self.cfg.min_chars
        ends = [m.end() for m in _SENTENCE_END.finditer(buf) if m.end() >= self.cfg.min_first_chars]
        ends += [m.end() for m in _CLAUSE_END.finditer(buf) if m.end() >= min_clause]
        ends = [e for e in ends if e <= limit]
        if phrase_words and (phrase := self._phrase_end(buf, phrase_words)) is not None:
            ends.append(phrase)
        cut = min(ends) if ends else None
        if cut is None and len(buf) > limit:
            space = buf.rfind(" ", 0, limit)
            cut = space if space > 0 else limit
        if cut is None:
            return None
        clause, self._buffer = clean_for_speech(buf[:cut]), buf[cut:].lstrip()
        if not _speakable(clause):
            return self._next_clause() if self._buffer else None
        self._emitted += 1
        return clause

    def _phrase_words(self) -> int:
        """The most words of the next chunk, if it is a phrase (the first two); 0: a clause."""
        if self._emitted == 0:
            return self._first_phrase_words
        return self.cfg.second_phrase_max_words if self._emitted == 1 else 0

    def _phrase_end(self, buf: str, most: int) -> int | None:
        """Where a phrase may end: before a phrase-starting word once ``first_phrase_min_words``
        words precede it, or after ``most`` complete words; None while neither happened."""
        least = self.cfg.first_phrase_min_words
        for i, word in enumerate(_WORD.finditer(buf)):
            bare = word.group().strip("\"'()[],.;:!?…").lower()
            if i >= least and bare in PHRASE_STARTS:
                return len(buf[: word.start()].rstrip()) or None
            if i + 1 >= most:
                return word.end()
        return None


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)
