"""What a call writes for its operator: log lines keyed by the call and the turn, with no
secret, no audio and no raw client text in them.

**Fields.** A line of text is enough for a person at a terminal; a log pipeline (Loki,
Elasticsearch, CloudWatch) wants fields it can filter on, so that every line of one call, or
of one slow turn, comes back in one query. ``server.log_format: json`` switches ``voxpipe
serve`` to :class:`JsonLogFormatter` (``docs/observability.md``).

**The call and the turn** a line belongs to are not passed to every ``log.info``: code that
starts a call or a turn enters :func:`log_context`, a :mod:`contextvars` scope, and every
line logged inside it (in that task, and in tasks it creates, which copy the context)
carries those ids. A task that serves one call, and only such a task, may instead
:func:`bind_log_context` for the rest of its life.

**No secrets.** Credentials travel where a log is likely to copy them: in the query string
(``?api_key=`` for Twilio's proxy, ``?token=`` for the browser), which uvicorn writes into
every access line, and in headers (``Authorization: Bearer``, the
``openai-insecure-api-key.KEY`` subprotocol) that a debug log of the handshake prints.
Rather than trust every call site, one filter on the handlers (:class:`RedactSecrets`,
attached by :func:`install`, which ``voxpipe serve`` calls after uvicorn has set up its own
handlers, in the supervisor and in each worker alike) rewrites each record before it is
written: the value of any parameter whose name says it is a credential, anything shaped like
one, and the configured secrets themselves become ``[redacted]``. The JSON formatter prints
that redacted traceback rather than formatting the exception afresh.

**No raw client text.** Ids a client chooses (a native or WebRTC session id, a token's
``session_id``, a Twilio stream's sids, a Realtime item's id) end up in log lines, in
``voxpipe calls`` and in traces. A newline in one forges a log or table line; an ANSI escape
clears or rewrites the operator's screen. So every door takes such an id only if
:func:`check_id` does (one rule; each transport answers a refusal with its own typed error),
and every operator output (the CLI's tables, each argument of a log record) goes through
:func:`escape`, because a store written by an older version, a transcript or a provider's
message may still hold anything. A record's format string is the code's own and stays as it
is; a traceback keeps its newlines.

**No audio.** A field holding bytes or an array (PCM a careless ``extra=`` passed) is
written as its size, never its content.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

CONTEXT_FIELDS = ("call_id", "session_id", "turn_id", "connection_id", "transport")
_FIELDS = ("levelname", "name", "message")
_RENAMED = {"levelname": "level", "name": "logger"}
# Record attributes that are not the application's: uvicorn's ANSI copy of the message,
# and the redaction filter's own mark.
_NOT_FIELDS = ("color_message", "_voxpipe_redacted")

_context: contextvars.ContextVar[Mapping[str, str | int]] = contextvars.ContextVar(
    "voxpipe_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**fields: str | int | None) -> Iterator[None]:
    """Every line logged inside carries these ids (``None`` leaves a field as it was).

    Scopes nest: a turn's scope inside its call's keeps the call id. Only the names in
    :data:`CONTEXT_FIELDS` are taken, so the context stays a small set of ids.
    """
    token = _context.set(_merged(fields))
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**fields: str | int | None) -> None:
    """Every line logged from here on in the current task, and in the tasks it creates from
    now on, carries these ids (``None`` leaves a field as it was).

    There is no scope to leave: this is for the task that serves one call, whose context
    ends with it (a session attached to a connection mid-way, as a reconnect does). Anywhere
    else, use :func:`log_context`.
    """
    _context.set(_merged(fields))


def _merged(fields: Mapping[str, str | int | None]) -> Mapping[str, str | int]:
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"not a log context field: {sorted(unknown)}")
    return {**_context.get(), **{k: v for k, v in fields.items() if v is not None}}


def current_context() -> dict[str, str | int]:
    """The ids :func:`log_context` has set here (a copy)."""
    return dict(_context.get())


class JsonLogFormatter(JsonFormatter):
    """``{"timestamp", "level", "logger", "message", <context ids>, <extra fields>}``."""

    def __init__(self, redact: Callable[[str], str] | None = None) -> None:
        super().__init__(
            " ".join(f"%({name})s" for name in _FIELDS),
            rename_fields=_RENAMED,
            reserved_attrs=[*RESERVED_ATTRS, *_NOT_FIELDS],
            timestamp=True,
        )
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and record.exc_text:
            # The redaction filter left the redacted traceback in exc_text; the base class
            # would format the exception again from exc_info, secrets and all.
            record = copy.copy(record)
            record.exc_info = None
        return super().format(record)

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_data, record, message_dict)
        for name, value in _context.get().items():
            log_data.setdefault(name, value)  # an explicit extra= wins

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {key: self._safe(value) for key, value in log_data.items()}

    def _safe(self, value: Any) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return f"[{len(value)} bytes not logged]"
        if hasattr(value, "nbytes") and hasattr(value, "shape"):  # a numpy array
            return f"[array of {value.nbytes} bytes not logged]"
        if isinstance(value, str):
            return self.redact(value) if self.redact is not None else value
        if isinstance(value, Mapping):
            return {k: self._safe(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._safe(v) for v in value]
        return value


def install_json(redact: Callable[[str], str] | None = None) -> None:
    """Put a :class:`JsonLogFormatter` on every handler configured now (the root's and
    uvicorn's); call it again for handlers made since, as :func:`install` is."""
    for handler in configured_handlers():
        if not isinstance(handler.formatter, JsonLogFormatter):
            handler.setFormatter(JsonLogFormatter(redact))


REDACTED = "[redacted]"
_DONE = re.escape(REDACTED)  # so that redacting twice changes nothing
MIN_LITERAL_CHARS = 8  # a configured secret shorter than this is matched only by its shape

# A parameter or field whose name ends in one of these words carries a credential:
# api_key, key, token, access_token, auth, authorization, password, client_secret,
# X-Amz-Signature, sig, credential(s).
_SECRET_NAME = (
    r"[\w.-]*(?:key|token|auth|authorization|password|passwd|pwd|secret|signature|sig"
    r"|credentials?)"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # name=value in a query string, a form body or a log line: ?api_key=…, &token=…
    (
        re.compile(
            rf"(?<![\w.-])({_SECRET_NAME})(=|%3[dD])(?!{_DONE})[^&\s\"'#;,)\]}}]+", re.IGNORECASE
        ),
        rf"\1\2{REDACTED}",
    ),
    # "name": "value" in JSON or a dict's repr
    (
        re.compile(rf"([\"'])({_SECRET_NAME})\1(\s*:\s*)([\"'])(?:(?!\4).)*\4", re.IGNORECASE),
        rf"\1\2\1\3\4{REDACTED}\4",
    ),
    # an Authorization header's value, wherever it is printed
    (re.compile(r"\b(Bearer|Basic)(\s+)[^\s\"',;]+", re.IGNORECASE), rf"\1\2{REDACTED}"),
    # the API key as a WebSocket subprotocol (OpenAI's browser convention)
    (re.compile(r"(openai-insecure-api-key\.)[^\s\"',;]+"), rf"\1{REDACTED}"),
    # voxpipe's own tokens (vxt1.…, and any later version), JWTs, OpenAI-style keys
    (re.compile(r"\b(vxt\d+\.)[\w.=-]+"), rf"\1{REDACTED}"),
    (re.compile(r"\beyJ[\w-]+\.[\w-]+\.[\w-]+"), REDACTED),
    (re.compile(r"\b(sk-)[\w-]{16,}"), rf"\1{REDACTED}"),
)


class Redactor:
    """Rewrites text so that no credential it recognises is left in it."""

    def __init__(self, literals: Iterable[str] = ()) -> None:
        kept = sorted({s for s in literals if len(s) >= MIN_LITERAL_CHARS}, key=len, reverse=True)
        self._literals = re.compile("|".join(map(re.escape, kept))) if kept else None

    def __call__(self, text: str) -> str:
        if self._literals is not None:
            text = self._literals.sub(REDACTED, text)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text


class RedactSecrets(logging.Filter):
    """A handler filter: redacts a record's message, its arguments and its traceback.

    Arguments are redacted one by one rather than merged into the message, because some
    formatters (uvicorn's access log) read ``record.args`` as a tuple of fields. The message
    is then redacted as it will be written, formatted: a format string such as
    ``"?api_key=%s"`` redacted alone would lose its placeholder. Only when that finds more
    (a secret made of the format string and an argument together, or in the format string
    itself) does the record carry the redacted text in place of its format and arguments.
    """

    def __init__(self, literals: Iterable[str] = ()) -> None:
        super().__init__()
        self.redact = Redactor(literals)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_voxpipe_redacted", False):  # one record, several handlers
            return True
        record._voxpipe_redacted = True
        if isinstance(record.args, Mapping):
            record.args = {k: self._arg(v) for k, v in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(self._arg(a) for a in record.args)
        self._redact_message(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = escape(self.redact(record.exc_text), lines=True)
        if record.stack_info:
            record.stack_info = escape(self.redact(record.stack_info), lines=True)
        return True

    def _redact_message(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # a call site's bad format: logging reports it
            record.msg = self._arg(record.msg)
            return
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
            record.__dict__.pop("color_message", None)  # uvicorn's coloured copy of the format

    def _arg(self, value: Any) -> Any:
        if isinstance(value, (int, float)) or value is None:
            return value  # keeps %d and %.1f working
        text = value if isinstance(value, str) else str(value)
        redacted = escape(self.redact(text))
        return value if redacted == text else redacted


def install(literals: Iterable[str] = ()) -> RedactSecrets:
    """Attach one :class:`RedactSecrets` to every handler of every logger configured now
    (the root's and uvicorn's); calling it again adds it to handlers made since."""
    found = next(
        (f for h in configured_handlers() for f in h.filters if isinstance(f, RedactSecrets)), None
    )
    redact = found or RedactSecrets(literals)
    for handler in configured_handlers():
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(redact)
    return redact


def configured_handlers() -> list[logging.Handler]:
    """Every handler of every logger configured now: the root's, uvicorn's, ours."""
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    return [handler for logger in loggers for handler in logger.handlers]


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
