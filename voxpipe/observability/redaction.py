"""Secrets never reach a log line, and a client's text never reaches the terminal raw.

Credentials travel where a log is likely to copy them: in the query string
(``?api_key=`` for Twilio's proxy, ``?token=`` for the browser), which uvicorn
writes into every access line, and in headers (``Authorization: Bearer``, the
``openai-insecure-api-key.KEY`` subprotocol) that a debug log of the handshake
prints. Rather than trust every ``log.info`` call site, one filter on the log
handlers rewrites each record before it is written: the value of any parameter
whose name says it is a credential, anything shaped like one, and the
configured secrets themselves are replaced by ``[redacted]``. The rest of the
line (path, client, status) stays, so a request can still be traced.

The same filter escapes what the code did not write: every argument of a record (a path,
an id, a provider's message; uvicorn decodes ``%0a`` and ``%1b`` in a path) is written with
its control and format characters escaped (``observability/printable.py``), so a client
cannot forge a log line or send the operator's terminal an escape code. The format string
is the code's own and is left as it is; a traceback keeps its newlines.

:func:`install` attaches the filter to every handler configured at the time;
``voxpipe serve`` calls it after uvicorn has set up its own handlers, in the
supervisor and in each worker alike.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from voxpipe.observability.printable import escape

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
