"""The SQLite store: records keyed by call id, crash marking, and the v1 file migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from voxpipe.conversation.services import CallRecord
from voxpipe.server import store as store_module
from voxpipe.server.store import SqliteStore, list_calls, show_call


def test_a_reused_session_id_gets_a_record_of_its_own(tmp_path: Path) -> None:
    db = tmp_path / "calls.sqlite3"
    store = SqliteStore(db, "w1")
    first, second = CallRecord("c1", "shared-id", "key:a"), CallRecord("c2", "shared-id", "key:b")
    store.call_started(first, {})
    store.message(first, 1, "user", "book a table for two")
    store.turn_finished(first, {"turn_id": 1, "status": "completed", "voice_to_voice_ms": 800})
    store.save_state(first, {"call_id": "c1", "owner": "key:a"})
    store.call_ended(first, "hangup", {"turns": 1})
    store.flush()
    assert _load(store, "shared-id") is None  # ended: nothing to resume, the id is free
    store.call_started(second, {})
    store.message(second, 1, "user", "cancel everything")
    store.turn_finished(second, {"turn_id": 1, "status": "interrupted"})
    store.close()

    old, new = show_call(db, "c1"), show_call(db, "c2")
    assert old is not None and new is not None
    assert [m["text"] for m in old["messages"]] == ["book a table for two"]
    assert old["turns"][0]["status"] == "completed" and old["end_reason"] == "hangup"
    assert old["counts"] == {"turns": 1} and old["owner"] == "key:a"
    assert [m["text"] for m in new["messages"]] == ["cancel everything"]
    assert new["owner"] == "key:b"
    assert show_call(db, "shared-id")["call_id"] == "c2"  # type: ignore[index]  # the latest
    assert {c["call_id"] for c in list_calls(db)} == {"c1", "c2"}


def test_calls_of_a_dead_worker_are_marked_crashed_and_a_restore_takes_them_back(
    tmp_path: Path,
) -> None:
    db = tmp_path / "calls.sqlite3"
    dead = SqliteStore(db, "w1")
    call = CallRecord("c1", "s1", "key:a")
    dead.call_started(call, {})
    dead.message(call, 1, "user", "hello")
    dead.turn_finished(call, {"turn_id": 1, "status": "completed"})
    dead.save_state(call, {"call_id": "c1", "owner": "key:a", "turns": 1})
    dead.flush()  # then SIGKILL: no close, no call_ended

    other = SqliteStore(db, "w2")  # another worker: w1's beat is fresh, so w1 is alive
    other.flush()
    assert show_call(db, "c1")["end_reason"] is None  # type: ignore[index]
    restarted = SqliteStore(db, "w1")  # w1 again: its last life is over
    restarted.flush()
    shown = show_call(db, "c1")
    assert shown is not None and shown["end_reason"] == "crashed" and shown["ended_at"]
    assert [m["text"] for m in shown["messages"]] == ["hello"]  # completed turns kept
    assert _load(restarted, "s1") is not None  # its owner may resume it

    restarted.call_started(CallRecord("c1", "s1", "key:a", 1), {})  # the restore
    restarted.flush()
    assert show_call(db, "c1")["end_reason"] is None  # type: ignore[index]  # live again

    # A worker silent for STALE_S is dead too, whatever its name.
    lost = CallRecord("c2", "s2", "key:a")
    other.call_started(lost, {})
    other.flush()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE workers SET seen_at = seen_at - ?", (store_module.STALE_S + 1,))
    restarted._submit(restarted._beat)
    restarted.flush()
    assert show_call(db, "c2")["end_reason"] == "crashed"  # type: ignore[index]
    # ... but not restarted's own call, whose beat was just written.
    assert show_call(db, "c1")["end_reason"] is None  # type: ignore[index]
    for store in (dead, other, restarted):
        store._queue.put(None)


def test_a_version_1_file_is_migrated_without_losing_a_turn(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute("INSERT INTO calls VALUES ('s-old', 1.0, 2.0, 'hangup', '{}', '{}')")
        conn.execute("INSERT INTO calls VALUES ('s-live', 1.0, NULL, NULL, '{}', '{}')")
        conn.execute("INSERT INTO messages VALUES (1, 's-old', 1, 'user', 'hi', NULL, 1.5)")
        conn.execute("INSERT INTO turns VALUES ('s-old', 1, 'completed', 700.0, '{}')")
        conn.execute("INSERT INTO state VALUES ('s-live', '{\"turns\": 3}', 1.0)")
    store = SqliteStore(db, "w1")
    store.flush()
    old = show_call(db, "s-old")
    assert old is not None and old["call_id"] == "s-old" and old["end_reason"] == "hangup"
    assert [m["text"] for m in old["messages"]] == ["hi"] and old["turns"][0]["turn_id"] == 1
    # Live under the old version, held by no one now: it crashed.
    assert show_call(db, "s-live")["end_reason"] == "crashed"  # type: ignore[index]
    assert _load(store, "s-live") == {"turns": 3}
    store.close()
    SqliteStore(db, "w1").close()  # opening a current file again changes nothing


def _load(store: SqliteStore, session_id: str) -> dict[str, object] | None:
    import asyncio

    return asyncio.run(store.load_state(session_id))


V1_SCHEMA = """
CREATE TABLE calls (session_id TEXT PRIMARY KEY, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, info TEXT NOT NULL DEFAULT '{}', counts TEXT NOT NULL DEFAULT '{}');
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
    turn_id INTEGER NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL, status TEXT,
    at REAL NOT NULL);
CREATE INDEX messages_by_call ON messages (session_id, id);
CREATE TABLE turns (session_id TEXT NOT NULL, turn_id INTEGER NOT NULL, status TEXT NOT NULL,
    voice_to_voice_ms REAL, record TEXT NOT NULL, PRIMARY KEY (session_id, turn_id));
CREATE TABLE state (session_id TEXT PRIMARY KEY, state TEXT NOT NULL, updated_at REAL NOT NULL);
"""
