"""Calls, transcripts, per-turn metrics and session state in SQLite, written as the call goes.

Writes are queued (never awaited) and applied in order by one thread that owns
the connection, so the event loop never waits on the disk. Each write commits
by itself in WAL mode: a crash loses at most what was still queued, which is
milliseconds of a call. The queue is bounded; when the disk stalls that long,
a write is dropped and counted rather than stalling calls.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from voxpipe.conversation.services import CallRecord, CallStore
from voxpipe.server.holders import HEARTBEAT_S, STALE_S, new_holder

log = logging.getLogger("voxpipe.store")

MAX_PENDING = 1000  # writes; a healthy disk keeps this near zero
CRASHED = "crashed"
SCHEMA_VERSION = 2  # 2: records keyed by call id, owners, holders, worker heartbeats

# A call's record is keyed by a server-issued call id: a session id may be chosen by the
# client and used again after the call ended, and must never merge two calls.
TABLES = """
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT 'anonymous',
    holder TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    info TEXT NOT NULL DEFAULT '{}',
    counts TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    call_id TEXT NOT NULL,
    turn_id INTEGER NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    status TEXT,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    call_id TEXT NOT NULL,
    turn_id INTEGER NOT NULL,
    status TEXT NOT NULL,
    voice_to_voice_ms REAL,
    record TEXT NOT NULL,
    PRIMARY KEY (call_id, turn_id)
);
CREATE TABLE IF NOT EXISTS state (
    session_id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    holder TEXT PRIMARY KEY,
    worker TEXT NOT NULL,
    seen_at REAL NOT NULL
);
"""
INDEXES = """
CREATE INDEX IF NOT EXISTS messages_by_call ON messages (call_id, id);
CREATE INDEX IF NOT EXISTS calls_by_session ON calls (session_id, started_at);
CREATE INDEX IF NOT EXISTS calls_live ON calls (holder) WHERE ended_at IS NULL;
"""
# Version 1 keyed everything by session id; its rows become calls whose id is their
# session id (unique then), and its live calls have no holder (the sweep marks them).
MIGRATE_V1 = """
ALTER TABLE calls RENAME TO calls_v1;
ALTER TABLE messages RENAME TO messages_v1;
ALTER TABLE turns RENAME TO turns_v1;
ALTER TABLE state RENAME TO state_v1;
{tables}
INSERT INTO calls (call_id, session_id, started_at, ended_at, end_reason, info, counts)
    SELECT session_id, session_id, started_at, ended_at, end_reason, info, counts FROM calls_v1;
INSERT INTO messages (id, call_id, turn_id, role, text, status, at)
    SELECT id, session_id, turn_id, role, text, status, at FROM messages_v1;
INSERT INTO turns SELECT session_id, turn_id, status, voice_to_voice_ms, record FROM turns_v1;
INSERT INTO state SELECT session_id, session_id, state, updated_at FROM state_v1;
DROP TABLE calls_v1;
DROP TABLE messages_v1;
DROP TABLE turns_v1;
DROP TABLE state_v1;
"""


def _schema(db: sqlite3.Connection) -> None:
    """Create the tables, or bring an older file up to this version, in one transaction
    (several workers may open one file at once: the version is read under the lock)."""
    if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            columns = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
            v1 = "session_id" in columns and "call_id" not in columns
            script = (MIGRATE_V1.format(tables=TABLES) if v1 else TABLES) + INDEXES
            for statement in script.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=2000")
    _schema(db)
    return db


class SqliteStore:
    """The embedded :class:`~voxpipe.conversation.services.CallStore`.

    Every call row names its *holder* (this process), and every worker sharing the file
    writes a heartbeat; each heartbeat also sweeps for calls still live whose holder is
    dead (silent for ``STALE_S``, or the same worker started again) and marks them
    ``crashed`` with the time they were found. A restore of such a call takes it back.
    """

    shared = False  # one node's file: no other worker reads it

    def __init__(self, path: Path, worker: str = "local") -> None:
        self.path = path
        self.worker = worker
        self.holder = new_holder(worker)
        self._db = _connect(path)
        self._queue: queue.Queue[Callable[[sqlite3.Connection], object] | None] = queue.Queue(
            MAX_PENDING
        )
        self.dropped = 0
        self._beat(self._db)  # before any call: calls of this worker's last life are dead now
        self._next_beat = time.monotonic() + HEARTBEAT_S
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
        while True:
            try:
                write = self._queue.get(timeout=max(0.0, self._next_beat - time.monotonic()))
            except queue.Empty:
                write = self._beat
            if write is None:
                return
            try:
                write(self._db)
            except sqlite3.Error:
                log.exception("store write failed")
            if time.monotonic() >= self._next_beat:
                self._next_beat = time.monotonic() + HEARTBEAT_S
                try:
                    self._beat(self._db)
                except sqlite3.Error:
                    log.exception("store heartbeat failed")

    def _beat(self, db: sqlite3.Connection) -> None:
        """Say this worker is alive, and mark the live calls of dead workers crashed."""
        now = time.time()
        db.execute(
            "INSERT OR REPLACE INTO workers (holder, worker, seen_at) VALUES (?, ?, ?)",
            (self.holder, self.worker, now),
        )
        found = db.execute(
            "UPDATE calls SET ended_at = :now, end_reason = :crashed "
            "WHERE ended_at IS NULL AND (holder IS NULL OR (holder != :me AND ("
            "  holder NOT IN (SELECT holder FROM workers WHERE seen_at > :now - :stale)"
            "  OR holder IN (SELECT holder FROM workers WHERE worker = :worker))))",
            {
                "now": now,
                "crashed": CRASHED,
                "me": self.holder,
                "stale": STALE_S,
                "worker": self.worker,
            },
        ).rowcount
        db.execute("DELETE FROM workers WHERE seen_at < ?", (now - 86400,))
        if found:
            log.warning("marked %d call(s) crashed: their worker died while they were live", found)

    def call_started(self, call: CallRecord, info: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(info)
        self._submit(
            lambda db: db.execute(
                "INSERT INTO calls (call_id, session_id, owner, holder, started_at, info) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(call_id) DO UPDATE SET ended_at = NULL, "
                "end_reason = NULL, holder = excluded.holder",  # a restore takes it back
                (call.call_id, call.session_id, call.owner, self.holder, now, body),
            )
        )

    def message(
        self, call: CallRecord, turn_id: int, role: str, text: str, status: str | None = None
    ) -> None:
        now = time.time()
        self._submit(
            lambda db: db.execute(
                "INSERT INTO messages (call_id, turn_id, role, text, status, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (call.call_id, turn_id, role, text, status, now),
            )
        )

    def turn_finished(self, call: CallRecord, record: dict[str, Any]) -> None:
        row = (
            call.call_id,
            int(record["turn_id"]),
            str(record.get("status", "")),
            record.get("voice_to_voice_ms"),
            json.dumps(record, default=str),
        )
        self._submit(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO turns (call_id, turn_id, status, voice_to_voice_ms, "
                "record) VALUES (?, ?, ?, ?, ?)",
                row,
            )
        )

    def save_state(self, call: CallRecord, state: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(state)
        self._submit(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO state (session_id, call_id, state, updated_at) "
                "VALUES (?, ?, ?, ?)",
                (call.session_id, call.call_id, body, now),
            )
        )

    def call_ended(self, call: CallRecord, reason: str, counts: dict[str, Any]) -> None:
        now, body = time.time(), json.dumps(counts)

        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE calls SET ended_at = ?, end_reason = ?, counts = ? WHERE call_id = ?",
                (now, reason, body, call.call_id),
            )
            # Ended: not resumable, and its session id is free for a new call.
            db.execute(
                "DELETE FROM state WHERE session_id = ? AND call_id = ?",
                (call.session_id, call.call_id),
            )

        self._submit(write)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Block until every queued write is applied (shutdown, tests)."""
        done = threading.Event()
        self._submit(lambda db: done.set())
        done.wait(timeout_s)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(5)
        # Gone on purpose: its calls have ended (drain), so nothing is left to mark.
        self._db.execute("DELETE FROM workers WHERE holder = ?", (self.holder,))
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


async def open_store(config: StoreConfig, worker: str = "local") -> CallStore | None:
    """The store the config names; None when the call record is off. ``worker`` names
    this process as the holder of its calls (crash detection)."""
    if config.backend == "redis":
        from voxpipe.server.redis_store import RedisStore

        return await RedisStore.open(config, worker)
    if config.path is None:
        return None
    return await asyncio.to_thread(SqliteStore, config.path, worker)


def _read_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    _schema(db)
    return db


def list_calls(path: Path, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent calls first, with their turn counts."""
    with contextlib.closing(_read_db(path)) as db:
        rows = db.execute(
            "SELECT c.call_id, c.session_id, c.owner, c.started_at, c.ended_at, c.end_reason, "
            "(SELECT COUNT(*) FROM turns t WHERE t.call_id = c.call_id) "
            "FROM calls c ORDER BY c.started_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
    return [
        {
            "call_id": r[0],
            "session_id": r[1],
            "owner": r[2],
            "started_at": r[3],
            "ended_at": r[4],
            "duration_s": None if r[4] is None else round(r[4] - r[3], 1),
            "end_reason": r[5],
            "turns": r[6],
        }
        for r in rows
    ]


def show_call(path: Path, call_or_session_id: str) -> dict[str, Any] | None:
    """One call, by call id or session id (or a prefix of either; the latest call of a
    session): its messages in order and each turn's outcome and latency."""
    with contextlib.closing(_read_db(path)) as db:
        call = db.execute(
            "SELECT call_id, session_id, owner, started_at, ended_at, end_reason, info, counts "
            "FROM calls WHERE call_id = ?1 OR session_id = ?1 OR call_id LIKE ?2 "
            "OR session_id LIKE ?2 ORDER BY (call_id = ?1) DESC, (session_id = ?1) DESC, "
            "started_at DESC LIMIT 1",
            (call_or_session_id, f"{call_or_session_id}%"),
        ).fetchone()
        if call is None:
            return None
        cid = call[0]
        messages = db.execute(
            "SELECT turn_id, role, text, status FROM messages WHERE call_id = ? ORDER BY id",
            (cid,),
        ).fetchall()
        turns = db.execute(
            "SELECT turn_id, status, voice_to_voice_ms FROM turns WHERE call_id = ? "
            "ORDER BY turn_id",
            (cid,),
        ).fetchall()
    return {
        "call_id": cid,
        "session_id": call[1],
        "owner": call[2],
        "started_at": call[3],
        "ended_at": call[4],
        "end_reason": call[5],
        "info": json.loads(call[6]),
        "counts": json.loads(call[7]),
        "messages": [
            {"turn_id": m[0], "role": m[1], "text": m[2], "status": m[3]} for m in messages
        ],
        "turns": [{"turn_id": t[0], "status": t[1], "voice_to_voice_ms": t[2]} for t in turns],
    }
