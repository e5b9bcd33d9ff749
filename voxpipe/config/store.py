"""Where calls are recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class StoreConfig(BaseModel):
    """Where calls, transcripts, per-turn metrics and session state are kept."""

    backend: Literal["sqlite", "redis"] = Field(
        "sqlite",
        description="sqlite: one node, a local file. redis: state shared by every worker, so a "
        "call whose worker died carries on on another (docs/deploy.md).",
    )
    path: Path | None = Field(
        Path("var/voxpipe.sqlite3"),
        description="SQLite database file (backend sqlite); None = keep nothing.",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis server (backend redis), redis:// or rediss://.",
    )
    key_prefix: str = Field("voxpipe:", description="Prefix of every Redis key voxpipe writes.")
    ttl_s: int = Field(
        7 * 86400,
        ge=60,
        description="Redis keys of a call expire this long after its last write.",
    )
