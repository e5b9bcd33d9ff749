"""Append every finished turn's timeline to a JSON-lines file."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


class TurnLog:
    """Line-buffered appends under a lock; a line is one small write, so it lands whole."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line)
