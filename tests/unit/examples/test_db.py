"""The book: created and seeded on first use, a table held for a sitting, safe under threads."""

from __future__ import annotations

import datetime as dt
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from db import DINING_ROOM, Database, NoTable, database

DAY = dt.date(2026, 3, 13)
SEVEN = dt.time(19, 0)


def test_created_and_seeded_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "var" / "book.sqlite3"
    db = Database(path)
    assert db.bookings() == []
    with sqlite3.connect(path) as conn:
        seats = [s for (s,) in conn.execute("SELECT seats FROM tables ORDER BY id")]
        columns = [c[1] for c in conn.execute("PRAGMA table_info(bookings)")]
    assert seats == list(DINING_ROOM)
    assert columns == [
        "id", "name", "date", "time", "party_size", "table_id", "created_at", "made_by",
        "reference",
    ]  # fmt: skip
    Database(path).bookings()  # a second start seeds nothing more
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM tables").fetchone()[0] == len(DINING_ROOM)


def test_the_path_comes_from_the_environment(book: Path) -> None:
    assert database().path == book
    assert database() is database()


def test_the_smallest_table_that_seats_the_party(book: Path) -> None:
    booking, existed = database().book("Smith", DAY, SEVEN, 3)
    assert not existed
    assert DINING_ROOM[booking.table_id - 1] == 4
    assert database().bookings(DAY) == [booking]
    with sqlite3.connect(book) as conn:
        created = conn.execute("SELECT created_at FROM bookings").fetchone()[0]
    assert dt.datetime.fromisoformat(created).tzinfo is not None


def test_a_table_is_held_for_a_sitting(book: Path) -> None:
    db = database()
    eights = [i + 1 for i, seats in enumerate(DINING_ROOM) if seats == 8]
    db.book("Big", DAY, SEVEN, 8)
    assert db.free_tables(DAY, dt.time(20, 30), 8) == []  # 1 h 30 later: still at the table
    assert db.free_tables(DAY, dt.time(21, 0), 8) == eights  # 2 h later: free
    assert db.free_tables(DAY, dt.time(17, 30), 8) == []
    assert db.free_tables(DAY + dt.timedelta(days=1), SEVEN, 8) == eights
    with pytest.raises(NoTable):
        db.book("Other", DAY, dt.time(19, 30), 7)


def test_the_same_booking_twice_is_written_once(book: Path) -> None:
    first, _ = database().book("Smith", DAY, SEVEN, 2)
    again, existed = database().book("smith", DAY, SEVEN, 2)
    assert existed and again == first
    assert len(database().bookings()) == 1


def test_a_cancel_needs_the_whole_name_and_the_same_caller_or_the_reference(
    book: Path,
) -> None:
    db = database()
    rossi, _ = db.book("Anna Rossi", DAY, SEVEN, 2, made_by="tel:+15550001")
    smith, _ = db.book("Smith", DAY, SEVEN, 2, made_by="key:one")
    assert db.cancel("Jones", DAY, "key:one") == []
    assert db.cancel("Rossi", DAY, "tel:+15550001") == []  # a part of a name is not a name
    assert db.cancel("Smith", DAY, "key:two") == []  # another caller's booking
    assert db.cancel("Smith", DAY, "key:two", "0000") == []  # with a wrong reference
    assert db.cancel("Smith", DAY, "", "") == []  # nobody is not everybody
    assert [b.name for b in db.bookings()] == ["Anna Rossi", "Smith"]
    removed = db.cancel("anna rossi", DAY, "tel:+15550001")
    assert [b.name for b in removed] == ["Anna Rossi"]
    removed = db.cancel("smith", DAY, "key:two", smith.reference)  # the reference opens it
    assert [b.id for b in removed] == [smith.id] and db.bookings() == []
    assert len(rossi.reference) == 4 and rossi.reference.isdigit()


def test_a_book_made_before_callers_were_recorded_gains_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE bookings (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, "
            "date TEXT NOT NULL, time TEXT NOT NULL, party_size INTEGER NOT NULL, "
            "table_id INTEGER NOT NULL, created_at TEXT NOT NULL)"
        )
        conn.execute("INSERT INTO bookings VALUES (1, 'Old', '2026-03-13', '19:00', 2, 1, 'x')")
    db = Database(path)
    [old] = db.bookings()
    assert (old.name, old.made_by, old.reference) == ("Old", "", "")
    assert db.cancel("Old", DAY, "") == []  # no caller and no reference: nobody's to cancel


def test_threads_never_double_book_a_table(book: Path) -> None:
    """Twice as many parties of eight as there are tables for eight, all at once."""
    db = database()
    tables_for_eight = sum(1 for seats in DINING_ROOM if seats >= 8)

    def attempt(i: int) -> bool:
        try:
            db.book(f"Party {i}", DAY, SEVEN, 8)
        except NoTable:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        booked = list(pool.map(attempt, range(2 * tables_for_eight + 6)))
    assert sum(booked) == tables_for_eight
    assert len({b.table_id for b in db.bookings()}) == tables_for_eight
