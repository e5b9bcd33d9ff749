"""The evaluation set: spoken requests with what each should do, and read sentences.

A request expects one tool (``tool``, with ``arguments`` as a caller means them) or none.
A booking may be checked first, so a call to ``check_availability`` on the way to
``book_table`` is not a wrong selection (:data:`ALSO_FINE`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).with_name("requests.yaml")
PIPER = "piper"

ALSO_FINE: Mapping[str, frozenset[str]] = {"book_table": frozenset({"check_availability"})}
"""Tools a request may call besides the one it expects without that being a wrong choice."""


@dataclass(frozen=True)
class Utterance:
    """Something a caller says: a request to the agent, or a sentence read aloud."""

    id: str
    text: str
    kind: str  # "request" or "read"
    voice: str = PIPER  # "piper", "espeak:<voice>", or "recording" (real speech, ``path``)
    path: Path | None = None
    tool: str | None = None  # the tool it should call; None: no tool
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def also_fine(self) -> frozenset[str]:
        return ALSO_FINE.get(self.tool or "", frozenset())


def requests(data: Path = DATA) -> list[Utterance]:
    raw = yaml.safe_load(data.read_text())
    out = []
    for item in raw["requests"]:
        out.append(
            Utterance(
                id=str(item["id"]),
                text=str(item["text"]),
                kind="request",
                voice=str(item.get("voice", PIPER)),
                tool=item.get("tool"),
                arguments=dict(item.get("arguments") or {}),
            )
        )
    ids = [u.id for u in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{data}: request ids repeat")
    return out


def read_sentences(
    data: Path = DATA, recordings: Sequence[tuple[str, str, Path]] = ()
) -> list[Utterance]:
    """The LibriVox ``recordings`` (key, transcript, wav) first, then the voiced sentences."""
    out = [Utterance(key, text, "read", "recording", path) for key, text, path in recordings]
    raw = yaml.safe_load(data.read_text())
    out += [Utterance(f"read-{i:02d}", str(text), "read") for i, text in enumerate(raw["read"], 1)]
    return out


def librivox_recordings(folder: Path) -> list[tuple[str, str, Path]]:
    """The LibriVox sentences of Debian's pocketsphinx-testdata; none if not installed."""
    index = folder / "transcription"
    if not index.is_file():
        return []
    out = []
    for line in index.read_text().splitlines():
        text, _, key = line.rpartition("(")
        key = key.strip(" )")
        out.append(
            (key, text.replace("<s>", "").replace("</s>", "").strip(), folder / f"{key}.wav")
        )
    return sorted(out)
