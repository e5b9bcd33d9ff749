"""What an operator's terminal may be sent: client-chosen ids are printable tokens, and
anything else a client or a store supplies is escaped on its way out.

Ids a client chooses (a native or WebRTC session id, a token's ``session_id``, a Twilio
stream's sids, a Realtime item's id) end up in log lines, in ``voxpipe calls`` and in
traces. A newline in one forges a log or table line; an ANSI escape clears or rewrites the
operator's screen. So every door takes such an id only if :func:`check_id` does (one rule,
here; each transport answers a refusal with its own typed error), and every operator output
(the CLI's tables, the text log's arguments) goes through :func:`escape`, because a store
written by an older version, a transcript or a provider's message may still hold anything.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

MAX_ID_CHARS = 128
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def check_id(value: str, max_chars: int = MAX_ID_CHARS) -> str:
    """``value`` if it is 1 to ``max_chars`` printable characters with no whitespace;
    raises ``ValueError`` (a pydantic validation error in a model) saying what an id is.

    "Printable" is Python's: it leaves out every control character (C0, DEL, C1 such as the
    8-bit CSI), the format characters (bidirectional overrides that reverse the text shown)
    and every separator, so an id shows as the characters it holds and nothing else."""
    if not 0 < len(value) <= max_chars:
        raise ValueError(f"an id is 1 to {max_chars} characters; got {len(value)}")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError(
            "an id is printable characters without spaces (no control or format characters)"
        )
    return value


PrintableId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(check_id)]
"""A client-chosen id in a pydantic model: the field's own refusal names it."""


def escape(text: str, lines: bool = False) -> str:
    """``text`` as one line of visible characters: each character that is not printable
    (a newline, an escape code, a bidirectional override) is written as its Python escape
    (``\\n``, ``\\x1b``, ``\\u202e``), so the operator sees it rather than the terminal
    obeying it. Printable text, spaces included, is left as it is. With ``lines``, newlines
    stay (a traceback is many lines) and everything else is escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or (lines and c == "\n") else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
