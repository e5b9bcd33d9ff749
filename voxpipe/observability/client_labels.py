"""The client a connection says it is, as a bounded Prometheus label value.

A client names itself (``?client=web/1.4.2`` or the ``x-voxpipe-client`` header, as
``NAME/VERSION``), so the value is untrusted: every distinct value would be a new time
series, and a caller could make as many as it likes. Only well-shaped values become
labels, and only the first :data:`MAX_VERSIONS` of them in a process; the rest are
``other``. A connection that names nothing is ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_VERSIONS = 32
UNKNOWN = "unknown"
OTHER = "other"
QUERY_PARAM = "client"
HEADER = "x-voxpipe-client"
_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,31}/[0-9][0-9A-Za-z.+-]{0,23}")


def claimed_client(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """What the connection says it is: the query parameter (a browser cannot set a
    WebSocket header) or else the header."""
    return query.get(QUERY_PARAM) or headers.get(HEADER)


def client_name(version_label: str) -> str:
    """``web`` of ``web/1.4.2``; ``unknown`` and ``other`` stay as they are."""
    return version_label.split("/", 1)[0]


class ClientVersions:
    """Turns a claimed ``NAME/VERSION`` into a label value, with a bound on how many."""

    def __init__(self, limit: int = MAX_VERSIONS) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def label(self, claimed: str | None) -> str:
        if not claimed:
            return UNKNOWN
        value = claimed.strip()
        if _SHAPE.fullmatch(value) is None:
            return OTHER
        if value not in self._seen:
            if len(self._seen) >= self.limit:
                return OTHER
            self._seen.add(value)
        return value
