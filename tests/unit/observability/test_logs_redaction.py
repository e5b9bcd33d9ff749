"""The log redaction: credentials out, the rest of the line kept, uvicorn's formatters intact."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest
from uvicorn.logging import AccessFormatter

from voxpipe.observability.logs import REDACTED, Redactor, RedactSecrets, install

KEY = "k1-0123456789abcdef"
TOKEN = "vxt1.eyJzdWIiOiJrZXk6MCIsImV4cCI6MTcwMDAwMDAwMH0.c2lnbmF0dXJl-_="


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        (f'127.0.0.1:5 - "WebSocket /v1/voice?api_key={KEY}&session_id=call-7" [accepted]',
         '"WebSocket /v1/voice?api_key=[redacted]&session_id=call-7" [accepted]'),
        (f'"GET /?token={TOKEN} HTTP/1.1" 200', '"GET /?token=[redacted] HTTP/1.1" 200'),
        (f"/v1/realtime?model=gpt&access_token={KEY}", "?model=gpt&access_token=[redacted]"),
        (f"/x?auth={KEY};password={KEY}&X-Amz-Signature=ab12", "?auth=[redacted];password="),
        (f"/x?client_secret={KEY}&key={KEY}", "?client_secret=[redacted]&key=[redacted]"),
        (f"< Authorization: Bearer {KEY}", "< Authorization: Bearer [redacted]"),
        (f"< sec-websocket-protocol: realtime, openai-insecure-api-key.{KEY}, x",
         "realtime, openai-insecure-api-key.[redacted], x"),
        (f"a token {TOKEN} in a sentence", "a token vxt1.[redacted] in a sentence"),
        (f'{{"api_key": "{KEY}", "session_id": "s1"}}',
         '{"api_key": "[redacted]", "session_id": "s1"}'),
        (f"{{'token': '{TOKEN}'}}", "{'token': '[redacted]'}"),
        ("remote key sk-abcdefghijklmnop1234", "remote key sk-[redacted]"),
    ],
)  # fmt: skip
def test_credentials_are_redacted_and_the_rest_is_kept(line: str, kept: str) -> None:
    redact = Redactor()
    out = redact(line)
    assert KEY not in out and TOKEN.split(".", 1)[1] not in out, out
    assert kept in out, out
    assert redact(out) == out, "redacting twice changes nothing"


def test_configured_secrets_are_redacted_wherever_they_appear() -> None:
    redact = Redactor([KEY, "short"])
    assert redact(f"the key {KEY}, again:{KEY}") == f"the key {REDACTED}, again:{REDACTED}"
    assert redact("short words stay") == "short words stay", "too short to match safely"


def test_ordinary_lines_are_untouched() -> None:
    redact = Redactor()
    for line in [
        '127.0.0.1:5 - "GET /readyz HTTP/1.1" 200',
        "session abc detached; waiting 30 s for a reconnect",
        "twilio stream MZ1 started: call CA1, Twilio SIDs, tracks inbound",
        "llm: prompt_tokens=118 max_tokens=96 signal=15",
    ]:
        assert redact(line) == line


def record(msg: str, *args: object, name: str = "voxpipe.test") -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)


def test_uvicorn_access_lines_keep_their_fields() -> None:
    """uvicorn's access formatter unpacks record.args: redaction keeps the tuple."""
    access = record('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", f"/?token={TOKEN}", "1.1", 200)
    assert RedactSecrets().filter(access)
    line = AccessFormatter("%(message)s", use_colors=False).format(access)
    assert line == '127.0.0.1:5 - "GET /?token=[redacted] HTTP/1.1" 200'


def test_messages_arguments_and_tracebacks_are_redacted() -> None:
    try:
        raise ValueError(f"refused /v1/voice?api_key={KEY}")
    except ValueError:
        failed = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "call with %s failed", (f"Bearer {KEY}",),
            sys.exc_info(),
        )  # fmt: skip
    assert RedactSecrets().filter(failed)
    text = logging.Formatter().format(failed)
    assert KEY not in text and "Traceback" in text and "api_key=[redacted]" in text
    assert failed.getMessage() == "call with Bearer [redacted] failed"


def test_a_placeholder_after_a_secret_name_is_formatted_then_redacted() -> None:
    """``?api_key=%s`` in the format string: redacting the format alone would replace the
    placeholder, and formatting would then fail ("not all arguments converted")."""
    query = record("connecting to /v1/voice?api_key=%s&session_id=%s", KEY, "call-7")
    assert RedactSecrets().filter(query)
    assert query.getMessage() == "connecting to /v1/voice?api_key=[redacted]&session_id=call-7"
    mapped = record("upstream %(url)s?token=%(token)s", {"url": "/v1", "token": "plain-value"})
    assert RedactSecrets().filter(mapped)
    assert mapped.getMessage() == "upstream /v1?token=[redacted]"
    numbered = record("turn %d of %s took %.1f ms", 3, "call-7", 2950.0)  # nothing to redact
    assert RedactSecrets().filter(numbered)
    assert numbered.args == (3, "call-7", 2950.0)
    assert numbered.getMessage() == "turn 3 of call-7 took 2950.0 ms"


def test_a_bad_format_is_still_redacted_for_logging_s_error_report() -> None:
    broken = record("key is %s and %s", f"Bearer {KEY}")  # a call site's bug: one argument short
    assert RedactSecrets().filter(broken)
    assert KEY not in str(broken.msg) + str(broken.args)


@pytest.fixture
def uvicorn_logging() -> Iterator[io.StringIO]:
    """uvicorn's own logging config with its handlers writing to one buffer; undone after."""
    import uvicorn

    saved = {
        name: (logger.handlers[:], logger.propagate, logger.level)
        for name, logger in [(n, logging.getLogger(n)) for n in ("", "uvicorn", "uvicorn.access")]
    }
    uvicorn.Config(app=lambda *a: None, log_level="info")  # runs uvicorn's dictConfig
    out = io.StringIO()
    for name in ("uvicorn", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            assert isinstance(handler, logging.StreamHandler)
            handler.setStream(out)
    try:
        yield out
    finally:
        for name, (handlers, propagate, level) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate, logger.level = handlers, propagate, level


def test_install_covers_uvicorn_handlers(uvicorn_logging: io.StringIO) -> None:
    install([KEY])
    install([KEY])  # again, as `voxpipe serve` does after uvicorn's config: one filter each
    for name in ("uvicorn", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            assert sum(isinstance(f, RedactSecrets) for f in handler.filters) == 1
    logging.getLogger("uvicorn.error").info(
        '%s - "WebSocket %s" [accepted]', "127.0.0.1:5", f"/v1/voice?api_key={KEY}"
    )
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", f"/?token={TOKEN}", "1.1", 200
    )
    text = uvicorn_logging.getvalue()
    assert KEY not in text and TOKEN not in text, text
    assert "/v1/voice?api_key=[redacted]" in text and "/?token=[redacted]" in text, text


def test_a_client_s_string_in_an_argument_stays_on_its_line_and_out_of_the_terminal(
    uvicorn_logging: io.StringIO,
) -> None:
    """A path, an id or a message a client chose (uvicorn decodes ``%1b`` and ``%0a`` in a
    path) is written escaped: no forged line, no escape code reaches the operator's terminal
    (issue 29, finding 7). The format string's own text is the code's and stays as it is."""
    install([KEY])
    hostile = "/v1/voice\x1b[2J\nINFO forged line\r\u202e"
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", hostile, "1.1", 404
    )
    logging.getLogger("uvicorn.error").warning("call %s: %s", "c1", ValueError(hostile))
    lines = uvicorn_logging.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert not any(c in "".join(lines) for c in "\x1b\r\u202e"), lines
    assert '"GET /v1/voice\\x1b[2J\\nINFO forged line\\r\\u202e HTTP/1.1" 404' in lines[0], lines
    assert lines[1].endswith("call c1: /v1/voice\\x1b[2J\\nINFO forged line\\r\\u202e"), lines[1]
    numbered = record("turn %d took %.1f ms", 3, 2950.0)
    assert RedactSecrets().filter(numbered) and numbered.args == (3, 2950.0)
