"""The restaurant example's modules, imported as ``voxpipe serve --agent`` imports them
(its folder on ``sys.path``), with the book in a temporary file and a fixed today."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

RESTAURANT = Path(__file__).resolve().parents[3] / "examples" / "restaurant"
if str(RESTAURANT) not in sys.path:
    sys.path.insert(0, str(RESTAURANT))

TODAY = dt.date(2026, 3, 12)  # a Thursday
"""Every test's today: Monday the 16th is closed, Friday is the 13th."""


@pytest.fixture(autouse=True)
def restaurant_today(monkeypatch: pytest.MonkeyPatch) -> dt.date:
    import normalize

    monkeypatch.setattr(normalize, "today", lambda: TODAY)
    return TODAY


@pytest.fixture
def book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty book of its own: ``$RESTAURANT_DB`` in the test's folder."""
    path = tmp_path / "restaurant.sqlite3"
    monkeypatch.setenv("RESTAURANT_DB", str(path))
    yield path
