"""Calls, transcripts, per-turn metrics and session state in SQLite, written as the call goes.

Writes are queued (never awaited) and applied in order by one thread that owns
the connection, so the event loop never waits on the disk. Each write commits
by itself in WAL mode: a crash loses at most what was still queued, which is
milliseconds of a call. The queue is bounded; when the disk stalls that long,
a write is dropped and counted rather than stalling calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voxpipe.config import StoreConfig
from voxpipe.conversation.services import CallStore

log = logging.getLogger("voxpipe.store")

MAX_PENDING = 1000  # writes; a healthy disk keeps this near zero

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    session_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    info TEXT NOT NULL DEFAULT '{}',
    counts TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    turn_id INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    status TEXT,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_call ON messages (session_id, id);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    turn_id INTEGER NOT NULL,
    status TEXT NOT NULL,
    voice_to_voice_ms REAL,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, turn_id)
);
CREATE TABLE IF NOT EXISTS state (
    session_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=2000")
    db.executescript(SCHEMA)
    return db


class SqliteStore:
    """The embedded :class:`~voxpipe.conversation.services.CallStore`."""

    shared = False  # one node's file: no other worker reads it

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = _connect(path)
        self._queue: queue.Queue[Callable[[sqlite3.Connection], object] | None] = queue.Queue(
            MAX_PENDING
        )
        self.dropped = 0
        self._thread = threading.Thread(target=self._write_loop, name="store", daemon=True)
        self._thread.start()

    # -- writing (non-blocking; applied in order) -------------------------------

    def _submit(self, write: Callable[[sqlite3.Connection], object]) -> None:
        try:
            self._queue.put_nowait(write)
        except queue.Full:
            self.dropped += 1
            log.error("store queue full (%d writes): a write was dropped", MAX_PENDING)

    def _write_loop(self) -> None:
        while (write := self._queue.get()) is not None:
            try:
                write(self._db)
            except sqlite3.Error:
                log.exception("store write failed")

    def call_started(self, session_id: str, info: dict[str, Any]) -> None:
        now = time.time()
        self._submit(
            lambda db: db.execute(
                "INSERT INTO calls (session_id, started_at, info) VALUES (?, ?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET ended_at = NULL, end_reason = NULL",
                (session_id, now, json.dumps(info)),
            )
        )

    def message(
        self, session_id: str, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None:
        now = time.time()
        self._submit(
            lambda db: db.execute(
                "INSERT INTO messages (session_id, turn_id, role, text, status, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, turn_id, role, text, status, now),
            )
        )

    def turn_finished(self, session_id: str, record: dict[str, Any]) -> None:
        row = (
            session_id,
            int(record["turn_id"]),
            str(record.get("status", "")),
            record.get("voice_to_voice_ms"),
            json.dumps(record, default=str),
        )
        self._submit(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO turns (session_id, turn_id, status, voice_to_voice_ms, "
                "record) VALUES (?, ?, ?, ?, ?)",
                row,
            )
        )

    def save_state(self, session_id: str, state: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(state)
        self._submit(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO state (session_id, state, updated_at) VALUES (?, ?, ?)",
                (session_id, body, now),
            )
        )

    def call_ended(self, session_id: str, reason: str, counts: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(counts)
        self._submit(
            lambda db: db.execute(
                "UPDATE calls SET ended_at = ?, end_reason = ?, counts = ? WHERE session_id = ?",
                (now, reason, body, session_id),
            )
        )

    def flush(self, timeout_s: float = 5.0) -> None:
        """Block until every queued write is applied (shutdown, tests)."""
        done = threading.Event()
        self._submit(lambda db: done.set())
        done.wait(timeout_s)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(5)
        self._db.close()

    # -- reading (the CLI, restore) ----------------------------------------------

    async def load_state(self, session_id: str) -> dict[str, Any] | None:
        rows = await asyncio.to_thread(
            self._read, "SELECT state FROM state WHERE session_id = ?", (session_id,)
        )
        return json.loads(rows[0][0]) if rows else None

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as db:  # its own connection: safe beside the writer
            return db.execute(sql, args).fetchall()


async def open_store(config: StoreConfig) -> CallStore | None:
    """The store the config names; None when the call record is off."""
    if config.backend == "redis":
        from voxpipe.server.redis_store import RedisStore

        return await RedisStore.open(config)
    if config.path is None:
        return None
    return await asyncio.to_thread(SqliteStore, config.path)


def list_calls(path: Path, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent calls first, with their turn counts and voice-to-voice median."""
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        rows = db.execute(
            "SELECT c.session_id, c.started_at, c.ended_at, c.end_reason, "
            "(SELECT COUNT(*) FROM turns t WHERE t.session_id = c.session_id) "
            "FROM calls c ORDER BY c.started_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
    return [
        {
            "session_id": r[0],
            "started_at": r[1],
            "duration_s": None if r[2] is None else round(r[2] - r[1], 1),
            "end_reason": r[3],
            "turns": r[4],
        }
        for r in rows
    ]


def show_call(path: Path, session_id: str) -> dict[str, Any] | None:
    """One call: its messages in order and each turn's outcome and latency."""
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        call = db.execute(
            "SELECT session_id, started_at, ended_at, end_reason, info, counts FROM calls "
            "WHERE session_id = ? OR session_id LIKE ? ORDER BY started_at DESC LIMIT 1",
            (session_id, f"{session_id}%"),
        ).fetchone()
        if call is None:
            return None
        sid = call[0]
        messages = db.execute(
            "SELECT turn_id, role, text, status FROM messages WHERE session_id = ? ORDER BY id",
            (sid,),
        ).fetchall()
        turns = db.execute(
            "SELECT turn_id, status, voice_to_voice_ms FROM turns WHERE session_id = ? "
            "ORDER BY turn_id",
            (sid,),
        ).fetchall()
    return {
        "session_id": sid,
        "started_at": call[1],
        "ended_at": call[2],
        "end_reason": call[3],
        "info": json.loads(call[4]),
        "counts": json.loads(call[5]),
        "messages": [
            {"turn_id": m[0], "role": m[1], "text": m[2], "status": m[3]} for m in messages
        ],
        "turns": [{"turn_id": t[0], "status": t[1], "voice_to_voice_ms": t[2]} for t in turns],
    }
