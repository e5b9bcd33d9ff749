"""The evaluation set: agents, the spoken requests to each with what they should do, and
read sentences.

Each agent is a data file in ``agents/`` (``<name>.yaml``) beside its tools
(``<name>.py``, or the example it names):

- ``agent``: what ``voxpipe serve --agent`` takes;
- ``held_out``: true for an agent nobody tunes prompting or schemas on; its per-request
  results go to the JSON file only, never to the terminal (``runner.py``);
- ``also_fine``: tools a request may call on the way to the one it expects ("check, then
  book") without that being a wrong selection;
- ``owned_facts`` and ``allowed``: what a reply may not state without a tool
  (``invented.py``);
- ``free_text``: arguments whose wording is the model's (a ticket's summary): a call
  matches on them when they are set, whatever they say;
- ``requests``: ``id``, ``text``, ``tool`` (None: it must answer without one),
  ``arguments`` as a caller means them, ``voice`` (``piper``, the default, or
  ``espeak:<voice>``) and ``channel`` (``twilio``: the speech goes through the phone line,
  μ-law at 8 kHz, before STT, as a Twilio call's does).

The read sentences (``read.yaml``) are for the echo rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.tool_eval.invented import FactChecker

HERE = Path(__file__).parent
AGENTS = HERE / "agents"
DATA = AGENTS / "restaurant.yaml"
READ = HERE / "read.yaml"
PIPER = "piper"
DIRECT = "direct"
TWILIO = "twilio"

ALSO_FINE: Mapping[str, frozenset[str]] = {"book_table": frozenset({"check_availability"})}
"""Luigi's: tools a request may call besides the one it expects (an utterance made without
its agent's data file, as the unit tests make them, gets these)."""


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
    channel: str = DIRECT  # "direct" (16 kHz) or "twilio" (μ-law 8 kHz)
    agent: str = "restaurant"
    allowed_too: frozenset[str] | None = None  # the agent's also_fine for ``tool``

    @property
    def also_fine(self) -> frozenset[str]:
        if self.allowed_too is not None:
            return self.allowed_too
        return ALSO_FINE.get(self.tool or "", frozenset())


@dataclass(frozen=True)
class EvalAgent:
    """One agent of the evaluation, as its data file declares it."""

    name: str
    ref: str
    held_out: bool
    requests: list[Utterance]
    facts: FactChecker
    free_text: frozenset[str] = frozenset()


def load_agent_data(path: Path) -> EvalAgent:
    raw = yaml.safe_load(path.read_text())
    name = path.stem
    also = {k: frozenset(v) for k, v in (raw.get("also_fine") or {}).items()}
    out = []
    for item in raw["requests"]:
        tool = item.get("tool")
        channel = str(item.get("channel", DIRECT))
        if channel not in (DIRECT, TWILIO):
            raise ValueError(f"{path}: {item['id']}: no channel {channel!r}")
        out.append(
            Utterance(
                id=str(item["id"]),
                text=str(item["text"]),
                kind="request",
                voice=str(item.get("voice", PIPER)),
                tool=tool,
                arguments=dict(item.get("arguments") or {}),
                channel=channel,
                agent=name,
                allowed_too=also.get(tool or "", frozenset()),
            )
        )
    ids = [u.id for u in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: request ids repeat")
    return EvalAgent(
        name=name,
        ref=str(raw["agent"]),
        held_out=bool(raw["held_out"]),
        requests=out,
        facts=FactChecker(raw.get("owned_facts") or [], raw.get("allowed") or []),
        free_text=frozenset(raw.get("free_text") or []),
    )


def agents(folder: Path = AGENTS) -> list[EvalAgent]:
    """Every agent, tuning ones first, each half by name."""
    found = [load_agent_data(path) for path in sorted(folder.glob("*.yaml"))]
    ids = [u.id for a in found for u in a.requests]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{folder}: request ids repeat across agents")
    return sorted(found, key=lambda a: (a.held_out, a.name))


def select(all_agents: Sequence[EvalAgent], which: str) -> list[EvalAgent]:
    """``which``: ``all``, ``tuning``, ``held-out`` or agent names separated by commas."""
    if which == "all":
        return list(all_agents)
    if which == "tuning":
        return [a for a in all_agents if not a.held_out]
    if which == "held-out":
        return [a for a in all_agents if a.held_out]
    names = [n.strip() for n in which.split(",") if n.strip()]
    known = {a.name: a for a in all_agents}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--agents: no agent {', '.join(unknown)}; there are {sorted(known)}")
    return [known[n] for n in names]


def requests(data: Path = DATA) -> list[Utterance]:
    """One agent's requests (by default Luigi's)."""
    return load_agent_data(data).requests


def read_sentences(
    data: Path = READ, recordings: Sequence[tuple[str, str, Path]] = ()
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
