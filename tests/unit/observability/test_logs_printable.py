"""The one id rule and the one escape for operator output (``observability/logs.py``)."""

from __future__ import annotations

import pytest

from voxpipe.observability.logs import MAX_ID_CHARS, check_id, escape


@pytest.mark.parametrize(
    "good",
    ["call-1", "MZ" + "a" * 32, "0f8fad5b-d9cb-469f-a165-70867728950e", "acct:1/x@y", "Zürich",
     "x" * MAX_ID_CHARS],
)  # fmt: skip
def test_printable_tokens_are_ids(good: str) -> None:
    assert check_id(good) == good


@pytest.mark.parametrize(
    "bad",
    ["", "x" * (MAX_ID_CHARS + 1), "a b", "a\nb", "a\x1b[2Jb", "a\x7fb", "a\x9bb", "a\u202eb",
     "a\u00a0b", "a\u2028b", "a\u200bb"],
    ids=repr,
)  # fmt: skip
def test_anything_else_is_not(bad: str) -> None:
    with pytest.raises(ValueError, match="an id is"):
        check_id(bad)


def test_escape_makes_one_visible_line_and_leaves_printable_text_alone() -> None:
    assert escape("book a table for two, at 8 (Zürich) \\ ok") == (
        "book a table for two, at 8 (Zürich) \\ ok"
    )
    assert escape("a\nb\r\tc\x1b[2J\x00\x7f\x9b\u202e\U000e0001") == (
        "a\\nb\\r\\tc\\x1b[2J\\x00\\x7f\\x9b\\u202e\\U000e0001"
    )
    assert escape("Traceback\n  line\x1b[31m", lines=True) == "Traceback\n  line\\x1b[31m"
