"""A client's claimed version becomes a label value only when well shaped, and only so many."""

from __future__ import annotations

import pytest

from voxpipe.observability.client_labels import (
    OTHER,
    UNKNOWN,
    ClientVersions,
    claimed_client,
    client_name,
)


@pytest.mark.parametrize(
    ("claimed", "label"),
    [
        ("web/1.4.2", "web/1.4.2"),
        (" voxpipe-py/0.1.0 ", "voxpipe-py/0.1.0"),
        ("app/2.0.0-rc.1+build.7", "app/2.0.0-rc.1+build.7"),
        (None, UNKNOWN),
        ("", UNKNOWN),
        ("web", OTHER),  # no version
        ("web/latest", OTHER),
        ("Mozilla/5.0 (X11; Linux x86_64)", OTHER),
        ('web/1"}\nfake_metric 1', OTHER),
        ("w" * 40 + "/1.0", OTHER),
    ],
)
def test_only_a_well_shaped_name_and_version_is_a_label(claimed: str | None, label: str) -> None:
    assert ClientVersions().label(claimed) == label


def test_past_the_limit_new_versions_are_other_and_known_ones_stay() -> None:
    versions = ClientVersions(limit=2)
    assert [versions.label(v) for v in ("a/1", "b/1", "c/1", "a/1")] == ["a/1", "b/1", OTHER, "a/1"]


def test_the_query_parameter_wins_over_the_header() -> None:
    assert claimed_client({"x-voxpipe-client": "py/1"}, {"client": "web/2"}) == "web/2"
    assert claimed_client({"x-voxpipe-client": "py/1"}, {}) == "py/1"
    assert claimed_client({}, {}) is None


def test_the_client_name_is_the_part_before_the_version() -> None:
    assert [client_name(v) for v in ("web/1.4.2", UNKNOWN, OTHER)] == ["web", UNKNOWN, OTHER]
