"""``python -m bench llm-speed --llm NAME``: one embedded model's speed on a typical turn.

The restaurant agent's instructions (their KV cached, as the server's warm-up leaves them)
and a caller's sentence of typical length, in a new call each time: time to the first
token (the prefill of the caller's words and the first decode step), and decode time per
token after it. Then the same turn with nothing cached (the whole prompt prefilled), the
cost of a first call on a cold context. ``--llm`` picks a pinned model
(``engines/model_files.py``), so two models are compared on the same prompts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage

RESTAURANT = Path(__file__).resolve().parent.parent / "examples/restaurant/agent.py"
SENTENCES = (
    "Hi, I would like to book a table for four people tomorrow evening at seven.",
    "Do you have anything free on Saturday around eight for two of us?",
    "Could you tell me whether you have vegetarian dishes on the menu?",
    "We are a group of six, is there a table on Friday at half past seven?",
    "Hello, what time do you close on Sundays, and can I bring my dog?",
)


def _turn(llm: Any, session: str, messages: list[ChatMessage]) -> dict[str, float]:
    usage = LlmUsage()
    started = time.perf_counter()
    stamps: list[float] = []
    for _ in llm.stream(session, messages, CancelToken(), usage):
        stamps.append(time.perf_counter())
    llm.forget(session)
    first = stamps[0] - started
    per_token = (stamps[-1] - stamps[0]) / max(1, usage.completion_tokens - 1)
    return {
        "ttft_ms": first * 1000,
        "decode_ms_per_token": per_token * 1000,
        "tokens": usage.completion_tokens,
        "prefill_tokens": usage.prefill_tokens,
    }


def _summary(rows: list[dict[str, float]]) -> dict[str, float]:
    """Medians, and the best turn's times: on a machine shared with other work the best is
    the closest to the model's own speed (the load average is printed beside them)."""
    keys = ("ttft_ms", "decode_ms_per_token", "tokens", "prefill_tokens")
    summary = {key: round(statistics.median(r[key] for r in rows), 1) for key in keys}
    summary["best_ttft_ms"] = round(min(r["ttft_ms"] for r in rows), 1)
    summary["best_decode_ms_per_token"] = round(min(r["decode_ms_per_token"] for r in rows), 1)
    return summary


def main(args: argparse.Namespace) -> int:
    from voxpipe.agent.loader import load_agent
    from voxpipe.engines.llama_llm import LlamaLlm
    from voxpipe.engines.loader import llm_model_path

    agent = load_agent(f"{RESTAURANT}:agent")
    config = Config.load(args.config)
    config = config.model_copy(
        update={"llm": config.llm.model_copy(update={"model": args.llm, "model_path": None})}
    )
    path = llm_model_path(config)
    loaded = time.perf_counter()
    llm = LlamaLlm(
        path, threads=config.llm.threads, n_ctx=config.llm.n_ctx, n_batch=config.llm.n_batch,
        max_tokens=config.llm.max_tokens, temperature=0.0,
        warmup_system_prompt=agent.instructions,
    )  # fmt: skip
    load_s = time.perf_counter() - loaded
    llm.warmup()
    system = ChatMessage("system", agent.instructions)
    warm = [
        _turn(llm, f"warm-{i}", [system, ChatMessage("user", s)]) for i, s in enumerate(SENTENCES)
    ]
    cold = []
    for i, sentence in enumerate(SENTENCES[: args.cold]):
        llm.clear_context()
        cold.append(_turn(llm, f"cold-{i}", [system, ChatMessage("user", sentence)]))
    result = {
        "llm": args.llm,
        "file": path.name,
        "threads": config.llm.threads,
        "load_s": round(load_s, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "warm": _summary(warm),
        "cold": _summary(cold) if cold else None,
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0
