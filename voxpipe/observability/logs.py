"""Structured (JSON) logs: one object per line, keyed by the call and the turn.

A line of text is enough for a person at a terminal; a log pipeline (Loki, Elasticsearch,
CloudWatch) wants fields it can filter on, so that every line of one call, or of one slow
turn, comes back in one query. ``server.log_format: json`` switches ``voxpipe serve`` to
:class:`JsonLogFormatter` (``docs/observability.md``).

The call and the turn a line belongs to are not passed to every ``log.info``: code that
starts a call or a turn enters :func:`log_context`, a :mod:`contextvars` scope, and every
line logged inside it (in that task, and in tasks it creates, which copy the context)
carries those ids. A task that serves one call, and only such a task, may instead
:func:`bind_log_context` for the rest of its life.

Two guarantees hold whatever a call site logs:

- **No secrets.** :class:`~voxpipe.observability.redaction.RedactSecrets`, a filter on the
  same handlers, rewrites the message, its arguments and the traceback before this formatter
  runs; this formatter prints that redacted traceback rather than formatting the exception
  afresh, and passes every other string field through the same redactor.
- **No audio.** A field holding bytes or an array (PCM a careless ``extra=`` passed) is
  written as its size, never its content.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import logging
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from voxpipe.observability.redaction import configured_handlers

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
    uvicorn's); call it again for handlers made since, as ``redaction.install`` is."""
    for handler in configured_handlers():
        if not isinstance(handler.formatter, JsonLogFormatter):
            handler.setFormatter(JsonLogFormatter(redact))
