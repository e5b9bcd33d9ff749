"""Turn-taking figures for ``make bench``: barge-in, preemption, long-call TTFT.

* barge-in: a caller asks a storyteller for a story and, 0.8-2.0 s into each
  reply, asks the next question over it; stop latency from the first frame
  of the interrupting speech, measured in the server (pause, decide, last
  frame sent, cancel complete) and at the client (last reply audio received);
* preemption: the same 10-turn conversation with ``preempt_ms`` on and off,
  interleaved call by call, voice-to-voice compared;
* long calls: the LLM engine alone, turn-1 and turn-20 time to first token
  with the KV cache reused versus rebuilt from scratch every turn.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from voxpipe.clients.native_client import NativeClient, TurnResult
from voxpipe.config import Config
from voxpipe.loadtest.stats import summarize, table

STORYTELLER = (
    "You are a storyteller on a phone call. Whatever the caller says, answer with a long story "
    "of at least six full sentences."
)


Script = list[tuple[Path, np.ndarray, int]]


async def _complete_turn(client: NativeClient, turn_id: int, timeout_s: float) -> TurnResult:
    def probe() -> TurnResult | None:
        turn = client.turns.get(turn_id)
        return turn if turn is not None and turn.complete.is_set() else None

    result: TurnResult = await client.wait_for(probe, timeout_s)
    return result


async def _audible_turn(client: NativeClient, turn_id: int) -> TurnResult:
    """Wait until turn ``turn_id`` exists and its reply is playing (or already over)."""

    def probe() -> TurnResult | None:
        turn = client.turns.get(turn_id)
        ok = turn is not None and (turn.first_audio_ns or turn.complete.is_set())
        return turn if ok else None

    result: TurnResult = await client.wait_for(probe, 90)
    return result


async def barge_in(url: str, script: Script, count: int) -> dict[str, Any]:
    """``count`` calls: ask for a story, listen 0.8-2.0 s, talk over it with the next question.

    A fresh call each time, so every reply is a long one (a 0.5B model's stories get shorter
    as its context fills with interruptions)."""
    rng = random.Random(7)
    phases = ("pause_ms", "decide_ms", "stop_ms", "cancel_ms")
    server: dict[str, list[float]] = {k: [] for k in phases}
    client_stop: list[float] = []
    attempts = 0
    while len(client_stop) < count and attempts < 2 * count:
        attempts += 1
        async with NativeClient(url) as client:
            await client.connect(instructions=STORYTELLER)
            client.say(*script[attempts % len(script)][1:])
            turn = await _audible_turn(client, 1)
            if turn.complete.is_set():
                continue  # the reply was over before it could be interrupted
            await asyncio.sleep(rng.uniform(0.8, 2.0))
            utterance = client.say(*script[(attempts + 1) % len(script)][1:])
            await _complete_turn(client, 1, 60)
            if turn.status == "interrupted":
                # From the first frame of speech (not the clip's leading silence) to the last
                # reply audio that reached the caller.
                spoke = utterance.speech_start_sent_ns
                client_stop.append(max(0.0, (turn.last_audio_ns - spoke) / 1e6))
                for key, value in turn.metrics.get("barge_in", {}).items():
                    if value is not None:
                        server[key].append(value)
            # Hang up without waiting for the answer to the interruption (a cancel too).
    return {
        "interruptions": len(client_stop),
        "attempts": attempts,
        "server_ms": {k: summarize(v) for k, v in server.items()},
        "client_last_audio_ms": summarize(client_stop),
    }


async def preemption(
    url: str, script: list[tuple[Path, np.ndarray, int]], reps: int
) -> dict[str, Any]:
    v2v: dict[str, list[float]] = {"on": [], "off": []}
    counts: dict[str, dict[str, int]] = {}
    for _ in range(reps):
        for mode in ("on", "off"):
            async with NativeClient(url) as client:
                await client.connect(turn={"preempt_ms": 200 if mode == "on" else 0})
                last: dict[str, Any] = {}
                for _, audio, rate in script:
                    turn = await client.speak(audio, rate)
                    if turn.status == "completed" and turn.voice_to_voice_ms is not None:
                        v2v[mode].append(turn.voice_to_voice_ms)
                    last = turn.metrics.get("session_counts", {})
                for key, value in last.items():
                    counts.setdefault(mode, {}).setdefault(key, 0)
                    counts[mode][key] += value
    on, off = summarize(v2v["on"]), summarize(v2v["off"])
    return {
        "on": on,
        "off": off,
        "p50_ratio_on_off": round(on["p50"] / off["p50"], 3) if on["n"] and off["n"] else None,
        "p99_ratio_on_off": round(on["p99"] / off["p99"], 3) if on["n"] and off["n"] else None,
        "counts": counts,
    }


def long_call_ttft(config: Config, calls: list[Any], turns: int = 20) -> dict[str, Any]:
    """TTFT at turns 1 and ``turns`` with the KV cache reused vs rebuilt (the LLM alone)."""
    from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage
    from voxpipe.engines.llama_llm import LlamaLlm
    from voxpipe.engines.loader import llm_model_path

    cfg = config.llm
    llm = LlamaLlm(
        llm_model_path(config), threads=cfg.threads, n_ctx=cfg.n_ctx, n_batch=cfg.n_batch,
        max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed,
        warmup_system_prompt=cfg.system_prompt,
    )  # fmt: skip
    llm.warmup()
    recorded = [(t["transcript"], t["reply"]) for call in calls for t in call if t["reply"]]
    exchanges = [recorded[i % len(recorded)] for i in range(turns)]
    results: dict[str, dict[str, Any]] = {}
    for mode in ("reuse", "rebuild"):
        history = [ChatMessage("system", cfg.system_prompt)]
        ttft, prefill = [], []
        if mode == "rebuild":
            llm.clear_context()
        for user, reply in exchanges:
            history.append(ChatMessage("user", user))
            if mode == "rebuild":
                llm.clear_context()
            usage = LlmUsage()
            t = time.perf_counter()
            for _ in llm.stream(f"bench-{mode}", history, CancelToken(), usage):
                ttft.append((time.perf_counter() - t) * 1000)
                break
            prefill.append(usage.prefill_tokens)
            history.append(ChatMessage("assistant", reply))
        results[mode] = {
            "turn1_ttft_ms": round(ttft[0], 1),
            f"turn{turns}_ttft_ms": round(ttft[-1], 1),
            f"turn{turns}_prefill_tokens": prefill[-1],
            f"turn{turns}_prompt_tokens": usage.prompt_tokens,
        }
    reuse, rebuild = results["reuse"], results["rebuild"]
    key = f"turn{turns}_ttft_ms"
    return {
        **results,
        f"turn{turns}_rebuild_over_reuse": round(rebuild[key] / reuse[key], 2),
        f"reuse_turn{turns}_over_turn1": round(reuse[key] / reuse["turn1_ttft_ms"], 2),
    }


def render(summary: dict[str, Any]) -> str:
    b, p, t = summary["barge_in"], summary["preemption"], summary["long_call"]
    rows = [(f"server {k.removesuffix('_ms')}", v) for k, v in b["server_ms"].items()]
    rows.append(("client: last reply audio received", b["client_last_audio_ms"]))
    turns = next(k for k in t if k.startswith("turn") and k.endswith("_over_reuse"))
    n = turns.removeprefix("turn").split("_")[0]
    return "\n".join(
        [
            f"barge-in over {b['interruptions']} interruptions, from the first frame of the "
            "caller's interrupting speech:",
            table(rows),
            "",
            "voice-to-voice with preemption on vs off (same conversation, interleaved calls):",
            table([("preempt on", p["on"]), ("preempt off", p["off"])]),
            f"ratio on/off: p50 {p['p50_ratio_on_off']}, p99 {p['p99_ratio_on_off']}; "
            f"counts {p['counts']}",
            "",
            f"LLM alone, TTFT turn 1 vs turn {n}: reuse {t['reuse']['turn1_ttft_ms']} -> "
            f"{t['reuse'][f'turn{n}_ttft_ms']} ms (prefill {t['reuse'][f'turn{n}_prefill_tokens']}"
            f" of {t['reuse'][f'turn{n}_prompt_tokens']} tokens); rebuild "
            f"{t['rebuild']['turn1_ttft_ms']} -> {t['rebuild'][f'turn{n}_ttft_ms']} ms; turn {n} "
            f"rebuild/reuse = {t[turns]}",
        ]
    )
