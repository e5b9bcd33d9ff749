"""Where calls are recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from voxpipe.config.section import Section


class StoreConfig(Section):
    """Where calls, transcripts, per-turn metrics and session state are kept."""

    backend: Literal["sqlite", "redis"] = "sqlite"
    """sqlite: one node, a local file. redis: state shared by every worker, so a call whose worker
    died carries on on another (docs/deploy.md)."""

    path: Path | None = Path("var/voxpipe.sqlite3")
    """SQLite database file (backend sqlite); None = keep nothing."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis server (backend redis), redis:// or rediss://."""

    key_prefix: str = "voxpipe:"
    """Prefix of every Redis key voxpipe writes."""

    ttl_s: int = Field(7 * 86400, ge=60)
    """Redis keys of a call expire this long after its last write."""
