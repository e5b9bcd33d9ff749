"""The capacity search, driven by fake step results: a machine that holds exactly K calls."""

from __future__ import annotations

import pytest

from voxpipe.loadtest.capacity import CapacitySearch


def run_search(capacity: int, max_calls: int = 64) -> CapacitySearch:
    search = CapacitySearch(max_calls=max_calls)
    steps = 0
    while (calls := search.next_calls()) is not None:
        search.record(calls, calls <= capacity)
        steps += 1
        assert steps < 50, "the search does not terminate"
    return search


@pytest.mark.parametrize("capacity", [0, 1, 2, 3, 5, 7, 8, 12, 33, 63])
def test_finds_the_largest_passing_count(capacity: int) -> None:
    search = run_search(capacity)
    assert search.capacity == capacity
    assert not search.capped


def test_doubles_then_bisects() -> None:
    search = run_search(5)
    assert [n for n, _ in search.tried] == [1, 2, 4, 8, 6, 5]


def test_one_call_failing_ends_the_search_at_zero() -> None:
    search = run_search(0)
    assert search.tried == [(1, False)]


def test_stops_at_the_cap_when_nothing_fails() -> None:
    search = run_search(1000, max_calls=10)
    assert search.capacity == 10
    assert search.capped
    assert [n for n, _ in search.tried] == [1, 2, 4, 8, 10]


def test_a_noisy_failure_below_a_pass_lowers_the_bound() -> None:
    search = CapacitySearch()
    search.record(4, True)
    search.record(2, False)
    assert (search.lo, search.hi) == (1, 2)
    assert search.next_calls() is None
