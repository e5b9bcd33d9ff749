"""``python -m bench claim-delay``: what the claim gate costs a reply that states no claim.

The gate (``conversation/claims.py``) holds the last two words of a sentence being written,
and a whole sentence once it may state a claim, so the first phrase the TTS gets can come
some tokens later than without it. This replays the replies of a tool evaluation run
(``python -m bench tool-eval --text --out RUN``) token by token, as the embedded model wrote
them (its own tokenizer), through the server's clause chunker alone and through the gate
then the chunker, and counts the tokens written before the first phrase is cut each way. A
token costs one decode step (about 20 ms with one caller on the project's 2-core machine:
``python -m bench batch``), so the extra tokens are the delay. No model is run; the figures
are the same on any machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.tool_eval import dataset
from voxpipe.agent import load_agent
from voxpipe.config import Config
from voxpipe.conversation.claims import ClaimGate, ClaimRules, known_words
from voxpipe.conversation.spoken import ClauseChunker
from voxpipe.engines.base import ChatMessage
from voxpipe.engines.loader import llm_model_path


def _tokens(vocab: object, text: str) -> list[str]:
    """``text`` as the model's token pieces."""
    ids = vocab.tokenize(text.encode(), add_bos=False, special=False)  # type: ignore[attr-defined]
    pieces, done = [], b""
    for n in range(1, len(ids) + 1):
        so_far = vocab.detokenize(ids[:n])  # type: ignore[attr-defined]
        pieces.append(so_far[len(done) :].decode(errors="ignore"))
        done = so_far
    return pieces


def _first_phrase_at(pieces: Sequence[str], gate: ClaimGate | None) -> int | None:
    """How many pieces were written when the chunker cut the first phrase (None: never).
    Every piece goes through ``gate``, so it has judged the whole reply."""
    chunker, first = ClauseChunker(Config().chunker), None
    for n, piece in enumerate(pieces, 1):
        text = gate.push(piece) if gate is not None else piece
        if chunker.push(text) and first is None:
            first = n
    text = gate.flush() if gate is not None else ""
    if (chunker.push(text) or chunker.flush()) and first is None:
        first = len(pieces)
    return first


def main(args: argparse.Namespace) -> int:
    from llama_cpp import Llama

    run = json.loads(Path(args.run).read_text())
    vocab = Llama(str(llm_model_path(Config())), vocab_only=True, verbose=False)
    agents = {a.name: a for a in dataset.agents()}
    extra, held, gated_out = [], 0, 0
    for outcome in run["outcomes"]:
        eval_agent = agents.get(outcome.get("agent", ""))
        if eval_agent is None or outcome["calls"] or not outcome["reply"] or outcome["error"]:
            continue
        agent = load_agent(eval_agent.ref)
        rules = ClaimRules([tool.spec for tool in agent.python_tools])
        messages = [
            ChatMessage("system", agent.instructions),
            ChatMessage("user", outcome["heard"]),
        ]
        pieces = _tokens(vocab, outcome["reply"])
        plain = _first_phrase_at(pieces, None)
        gate = ClaimGate(rules, known_words(messages))
        gated = _first_phrase_at(pieces, gate)
        if gate.stopped is not None:
            gated_out += 1
            continue
        if plain is None or gated is None:
            continue
        extra.append(gated - plain)
        held += gated > plain
    if not extra:
        print("no plain replies in the run")
        return 1
    ordered = sorted(extra)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    print(f"{args.run}: {len(extra)} replies in words, no tool called")
    print(
        f"  tokens written before the first phrase, gate minus none: "
        f"mean {statistics.mean(extra):.2f}, p50 {statistics.median(extra):g}, "
        f"p95 {p95}, max {ordered[-1]}"
    )
    print(f"  replies whose first phrase came later: {held} of {len(extra)}")
    print(f"  replies the gate stopped (a claim; not counted above): {gated_out}")
    step = args.step_ms
    print(f"  at {step:g} ms a decode step: p50 {statistics.median(extra) * step:.0f} ms, "
          f"p95 {p95 * step:.0f} ms, max {ordered[-1] * step:.0f} ms")  # fmt: skip
    return 0
