"""``python -m bench batch``: what batching buys each engine on this machine.

- **LLM**: N calls generating at once through the embedded model's batched context
  (``engines/llama_batch.py``), N = 1, 2, 4, 8: tokens per second for all calls together,
  and the cost of one decode step holding N sequences against N steps of one (only steps
  where all N decode and no prompt goes in are counted).
- **STT**: the same utterances transcribed one by one, and in batches of 2 and 4
  (``WhisperStt.transcribe_batch``): transcripts per second, short card names and long
  read sentences apart.

The engines are loaded here, warmed, and run alone on the machine: these are the floors
the concurrent-callers benchmark (``bench caller --concurrency``) is read against.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from voxpipe.audio.pcm import read_wav
from voxpipe.config import Config
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage
from voxpipe.engines.batch_plan import StepRecord

SPEECH = Path("/usr/share/pocketsphinx/test/data")
STORY = "You are a storyteller. Whatever you are asked, tell a long story."
LLM_SEQUENCES = (1, 2, 4, 8)
STT_BATCHES = (1, 2, 4)
TOKENS = 96


def llm_figures(config: Config) -> dict[str, Any]:
    from voxpipe.engines.llama_llm import LlamaLlm
    from voxpipe.engines.loader import llm_model_path

    llm = LlamaLlm(
        llm_model_path(config), threads=config.llm.threads, n_ctx=2048, temperature=0.0,
        max_tokens=TOKENS, max_sequences=max(LLM_SEQUENCES), echo_run=0,
    )  # fmt: skip
    steps: list[StepRecord] = []
    llm.observe_steps(steps.append)
    system = ChatMessage("system", STORY)

    def one(session: str, topic: int) -> None:
        asked = [system, ChatMessage("user", f"Tell me a story about dragon number {topic}.")]
        for _ in llm.stream(session, asked, CancelToken(), LlmUsage()):
            pass

    def run(n: int, tag: str) -> tuple[float, int]:
        jobs = [threading.Thread(target=one, args=(f"{tag}-{i}", i)) for i in range(n)]
        started = time.perf_counter()
        for job in jobs:
            job.start()
        for job in jobs:
            job.join()
        return time.perf_counter() - started, sum(s.decode for s in steps)

    run(2, "warm")
    rows = []
    single_step_s = 0.0
    for n in LLM_SEQUENCES:
        steps.clear()
        seconds, tokens = run(n, f"n{n}")
        full = [s.seconds for s in steps if s.decode == n and s.prefill_tokens == 0]
        step_s = statistics.median(full) if full else float("nan")
        if n == 1:
            single_step_s = step_s
        rows.append({
            "sequences": n,
            "tokens": tokens,
            "wall_s": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1),
            "decode_step_ms": round(step_s * 1000, 1),
            "decode_tokens_per_s": round(n / step_s, 1),
            "step_vs_n_single_steps": round(step_s / (n * single_step_s), 3),
        })  # fmt: skip
    base = rows[0]["decode_tokens_per_s"]
    for row in rows:
        row["speedup_vs_one"] = round(row["decode_tokens_per_s"] / base, 2)
    llm.batch.close()
    return {"model": llm.name, "threads": config.llm.threads, "rows": rows}


def stt_figures(config: Config) -> dict[str, Any]:
    from voxpipe.engines.loader import load_stt
    from voxpipe.engines.whisper_stt import WhisperStt

    stt = load_stt(config)
    assert isinstance(stt, WhisperStt), "bench batch measures the embedded Whisper"
    stt.warmup()
    sets = {
        "cards": sorted((SPEECH / "cards").glob("*.wav"))[:4],
        "librivox": sorted((SPEECH / "librivox").glob("*.wav"))[:4],
    }
    out: dict[str, Any] = {}
    for name, paths in sets.items():
        audios = [read_wav(p)[0] for p in paths]
        rows = []
        for size in STT_BATCHES:
            started = time.perf_counter()
            done = 0
            for _ in range(3):
                for i in range(0, len(audios), size):
                    chunk = audios[i : i + size]
                    if size == 1:
                        done += len([stt.transcribe(a) for a in chunk])
                    else:
                        done += len(stt.transcribe_batch(chunk))
            seconds = time.perf_counter() - started
            rows.append({"batch": size, "transcripts_per_s": round(done / seconds, 2)})
        for row in rows:
            row["speedup_vs_one"] = round(
                row["transcripts_per_s"] / rows[0]["transcripts_per_s"], 2
            )
        out[name] = {"seconds_of_audio": [round(len(a) / 16000, 1) for a in audios], "rows": rows}
    return out


def render(result: dict[str, Any]) -> str:
    lines = [f"LLM {result['llm']['model']} ({result['llm']['threads']} threads), greedy, "
             f"{TOKENS} tokens a reply", "",
             "| sequences | tokens/s (all calls) | decode step | tokens/s in decode | "
             "vs one | step vs N steps of one |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in result["llm"]["rows"]:
        lines.append(f"| {r['sequences']} | {r['tokens_per_s']} | {r['decode_step_ms']} ms | "
                     f"{r['decode_tokens_per_s']} | {r['speedup_vs_one']}x | "
                     f"{r['step_vs_n_single_steps']} |")  # fmt: skip
    lines += ["", "| Whisper clips | batch | transcripts/s | vs one |", "|---|---|---|---|"]
    for name, data in result["stt"].items():
        for r in data["rows"]:
            lines.append(f"| {name} | {r['batch']} | {r['transcripts_per_s']} | "
                         f"{r['speedup_vs_one']}x |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    config = Config.load(args.config) if args.config else Config.load()
    result = {"llm": llm_figures(config), "stt": stt_figures(config)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    table = render(result)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0
