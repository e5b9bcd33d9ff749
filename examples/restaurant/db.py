"""Luigi's book: a SQLite file of tables and bookings.

The file is ``$RESTAURANT_DB`` (default ``var/restaurant.sqlite3``, under the folder the
server runs in); it is created and its dining room seeded on first use. Tools that are a
plain ``def`` run on the toolbox's thread pool, and ``voxpipe serve --workers N`` runs N
processes, so every operation opens its own connection and a booking is one
``BEGIN IMMEDIATE`` transaction: the check for a free table and the insert cannot be split
by another caller's booking of the same table.

A booking holds its table for :data:`hours.SITTING`; a table is free at a time when no
booking on that day starts less than a sitting before or after it.

A booking records who made it (``made_by``: the caller's number, else the API principal,
as the server told the tool) and gets a four-digit ``reference``. Only the same caller, or
someone who says the reference, can cancel it; a name matches the whole name, never a part
of it, so "Rossi" does not reach "Anna Rossi"'s booking, and a search that finds nothing
the caller may cancel says the same whether or not someone else's booking is there.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hours import SITTING

DEFAULT_PATH = Path("var/restaurant.sqlite3")
BUSY_TIMEOUT_S = 5.0
DINING_ROOM = (2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 8)
"""Seats at each table, in table id order: eleven tables, the largest for eight."""
LARGEST_TABLE = max(DINING_ROOM)

SCHEMA = """
CREATE TABLE IF NOT EXISTS tables (
    id INTEGER PRIMARY KEY,
    seats INTEGER NOT NULL CHECK (seats > 0)
);
CREATE TABLE IF NOT EXISTS bookings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    date TEXT NOT NULL,          -- ISO date
    time TEXT NOT NULL,          -- HH:MM, 24-hour clock
    party_size INTEGER NOT NULL CHECK (party_size > 0),
    table_id INTEGER NOT NULL REFERENCES tables(id),
    created_at TEXT NOT NULL,    -- UTC, ISO 8601
    made_by TEXT NOT NULL DEFAULT '',   -- tel:<number> or the principal (CallContext.identity)
    reference TEXT NOT NULL DEFAULT ''  -- four digits, said to the caller
);
CREATE INDEX IF NOT EXISTS bookings_by_date ON bookings(date);
"""
ADDED_COLUMNS = {"made_by": "TEXT NOT NULL DEFAULT ''", "reference": "TEXT NOT NULL DEFAULT ''"}
"""Columns a book made by an earlier version lacks (its bookings: cancelled by reference
only, and they have none, so by nobody over the phone)."""
_FIELDS = "id, name, date, time, party_size, table_id, made_by, reference"


@dataclass(frozen=True)
class Booking:
    id: int
    name: str
    date: dt.date
    time: dt.time
    party_size: int
    table_id: int
    made_by: str = ""
    reference: str = ""


class NoTable(Exception):
    """Every table big enough is taken at that time."""


class Database:
    """One SQLite file; safe to share between threads and processes (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ready = False
        self._init_lock = threading.Lock()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self._ensure_ready()
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def _ensure_ready(self) -> None:
        with self._init_lock:
            if self._ready:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(SCHEMA)
                have = {row[1] for row in conn.execute("PRAGMA table_info(bookings)")}
                for column, kind in ADDED_COLUMNS.items():
                    if column not in have:
                        conn.execute(f"ALTER TABLE bookings ADD COLUMN {column} {kind}")
                conn.execute("BEGIN IMMEDIATE")
                if conn.execute("SELECT COUNT(*) FROM tables").fetchone()[0] == 0:
                    conn.executemany(
                        "INSERT INTO tables (id, seats) VALUES (?, ?)",
                        enumerate(DINING_ROOM, start=1),
                    )
                conn.execute("COMMIT")
            finally:
                conn.close()
            self._ready = True

    # -- reading -----------------------------------------------------------------------------

    def free_tables(self, day: dt.date, at: dt.time, party_size: int) -> list[int]:
        """Tables that seat the party and are free for a sitting at ``at``, smallest first."""
        with self._connect() as conn:
            return _free_tables(conn, day, at, party_size)

    def bookings(self, day: dt.date | None = None) -> list[Booking]:
        query = f"SELECT {_FIELDS} FROM bookings"
        with self._connect() as conn:
            if day is None:
                rows = conn.execute(query + " ORDER BY id").fetchall()
            else:
                rows = conn.execute(
                    query + " WHERE date = ? ORDER BY time, id", (day.isoformat(),)
                ).fetchall()
        return [_booking(row) for row in rows]

    # -- writing -----------------------------------------------------------------------------

    def book(
        self, name: str, day: dt.date, at: dt.time, party_size: int, made_by: str = ""
    ) -> tuple[Booking, bool]:
        """Book the smallest free table that seats the party for ``made_by``; ``(booking,
        True)`` if this caller already has that booking (nothing new is written), NoTable if
        no table is free."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                existing = conn.execute(
                    f"SELECT {_FIELDS} FROM bookings WHERE lower(name) = lower(?) AND date = ? "
                    "AND time = ? AND party_size = ? AND made_by = ?",
                    (name, day.isoformat(), _hhmm(at), party_size, made_by),
                ).fetchone()
                if existing is not None:
                    conn.execute("ROLLBACK")
                    return _booking(existing), True
                free = _free_tables(conn, day, at, party_size)
                if not free:
                    raise NoTable
                created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                reference = f"{1000 + secrets.randbelow(9000)}"
                cursor = conn.execute(
                    "INSERT INTO bookings (name, date, time, party_size, table_id, created_at, "
                    "made_by, reference) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name, day.isoformat(), _hhmm(at), party_size, free[0], created,
                        made_by, reference,
                    ),
                )  # fmt: skip
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        assert cursor.lastrowid is not None
        booking = Booking(cursor.lastrowid, name, day, at, party_size, free[0], made_by, reference)
        return booking, False

    def cancel(
        self, name: str, day: dt.date, made_by: str, reference: str | None = None
    ) -> list[Booking]:
        """Remove the bookings under exactly ``name`` on ``day`` that ``made_by`` made, or
        whose reference is ``reference``; returns what was removed (module docstring)."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(
                    f"SELECT {_FIELDS} FROM bookings WHERE date = ? AND lower(name) = lower(?) "
                    "AND ((made_by = ? AND made_by != '') OR (reference = ? AND reference != ''))",
                    (day.isoformat(), name, made_by, reference or ""),
                ).fetchall()
                conn.executemany("DELETE FROM bookings WHERE id = ?", [(r[0],) for r in rows])
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return [_booking(row) for row in rows]


def _free_tables(conn: sqlite3.Connection, day: dt.date, at: dt.time, party: int) -> list[int]:
    start = dt.datetime.combine(day, at)
    taken = {
        table_id
        for table_id, time in conn.execute(
            "SELECT table_id, time FROM bookings WHERE date = ?", (day.isoformat(),)
        )
        if abs(dt.datetime.combine(day, dt.time.fromisoformat(time)) - start) < SITTING
    }
    tables = conn.execute(
        "SELECT id FROM tables WHERE seats >= ? ORDER BY seats, id", (party,)
    ).fetchall()
    return [table_id for (table_id,) in tables if table_id not in taken]


def _booking(row: tuple[int, str, str, str, int, int, str, str]) -> Booking:
    id_, name, day, time, party, table_id, made_by, reference = row
    return Booking(
        id_,
        name,
        dt.date.fromisoformat(day),
        dt.time.fromisoformat(time),
        party,
        table_id,
        made_by,
        reference,
    )


def _hhmm(at: dt.time) -> str:
    return f"{at.hour:02d}:{at.minute:02d}"


_databases: dict[Path, Database] = {}
_databases_lock = threading.Lock()


def database() -> Database:
    """The book at ``$RESTAURANT_DB`` (read on every call, so a test can point it elsewhere)."""
    path = Path(os.environ.get("RESTAURANT_DB") or DEFAULT_PATH)
    with _databases_lock:
        if path not in _databases:
            _databases[path] = Database(path)
        return _databases[path]
