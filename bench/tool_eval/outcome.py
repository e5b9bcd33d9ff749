"""What came back for one utterance, in either mode: what was heard, the tools called, the
reply. ``error`` is set when no answer came (a timeout, an engine's exception)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class CalledTool:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    id: str
    heard: str = ""
    reply: str = ""
    calls: list[CalledTool] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    router: dict[str, float] = field(default_factory=dict)  # engines mode: P(call) per look
    unbacked_claim: str | None = None  # the claim its words stated first (then asked again)

    @property
    def tools(self) -> set[str]:
        return {c.name for c in self.calls}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arguments_of(value: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict, whether they came as one or as JSON text; text
    that is not a JSON object is kept under ``_raw`` (it then matches nothing)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str | bytes):
        try:
            parsed = json.loads(value or "{}")
        except json.JSONDecodeError:
            return {"_raw": value if isinstance(value, str) else value.decode(errors="replace")}
        return dict(parsed) if isinstance(parsed, dict) else {"_raw": value}
    return {} if value is None else {"_raw": repr(value)}
