"""``voxpipe calls`` prints what a store holds, escaped: an id, an owner or a transcript that an
older version stored with a newline or an escape code reaches the operator's terminal as
visible text, never as a forged line or a command to the terminal (issue 29, finding 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxpipe.cli import main
from voxpipe.conversation.services import CallRecord
from voxpipe.server.store import SqliteStore

FORGED = "\nc0ffee           forged-session  2026-01-01 00:00:00     1.0 s     1  hangup"
CLEAR = "\x1b[2J\x1b[H"
SESSION = f"old{CLEAR}{FORGED}"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "calls.sqlite3"
    store = SqliteStore(path, "w1")
    call = CallRecord("c1", SESSION, f"key:web/{CLEAR}eve\r")
    store.call_started(call, {})
    store.message(call, 1, "user", f"book a table{CLEAR}\nwhat the agent said: \x07\u202e")
    store.turn_finished(call, {"turn_id": 1, "status": "completed", "voice_to_voice_ms": 800})
    store.call_ended(call, f"hangup{CLEAR}", {"turns": 1})
    store.close()
    return path


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["calls", *argv]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\r\x07\u202e"), repr(out)
    return out.splitlines()


def test_the_call_list_escapes_what_the_store_holds(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, *rows = printed(capsys, "--db", str(db))
    assert header.startswith("call") and len(rows) == 1, rows  # no forged second row
    assert "old\\x1b[2J\\x1b[H\\nc0ffee" in rows[0] and rows[0].endswith("hangup\\x1b[2J\\x1b[H")


def test_one_call_s_transcript_is_escaped(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = printed(capsys, "--db", str(db), "c1")
    assert len(lines) == 2, lines  # the call's line and its one message
    assert "owner key:web/\\x1b[2J\\x1b[Heve\\r" in lines[0], lines[0]
    assert lines[1].endswith("book a table\\x1b[2J\\x1b[H\\nwhat the agent said: \\x07\\u202e")


def test_json_output_is_escaped_by_json_itself(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed(capsys, "--db", str(db), "--json")
    printed(capsys, "--db", str(db), "--json", "c1")
