"""``python -m bench batch``: what batching buys each engine on this machine.

- **LLM**: N calls generating at once through the embedded model's batched context
  (``engines/llama_batch.py``), N = 1, 2, 4, 8: tokens per second for all calls together,
  and the cost of one decode step holding N sequences against N steps of one (only steps
  where all N decode and no prompt goes in are counted).
- **STT**: the same utterances transcribed one by one, and in batches of 2 and 4
  (``WhisperStt.transcribe_batch``): transcripts per second, short card names and long
  read sentences apart.
- **TTS**: Piper on four first phrases, one by one and padded into runs of 2 and 4.
- **VAD**: one window's cost, and what a batch could save at four calls.

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
from voxpipe.engines.batch_plan import BatchPolicy, StepRecord

SPEECH = Path("/usr/share/pocketsphinx/test/data")
STORY = "You are a storyteller. Whatever you are asked, tell a long story."
LLM_SEQUENCES = (1, 2, 4, 8)
STT_BATCHES = (1, 2, 4)
TOKENS = 96


def llm_figures(config: Config) -> dict[str, Any]:
    from voxpipe.engines.llama_llm import LlamaLlm
    from voxpipe.engines.loader import llm_model_path

    # Every sequence in every step (first_phrase_width 0): what the batch itself can do.
    llm = LlamaLlm(
        llm_model_path(config), threads=config.llm.threads, n_ctx=2048, temperature=0.0,
        max_tokens=TOKENS, max_sequences=max(LLM_SEQUENCES), echo_run=0,
        policy=BatchPolicy(first_phrase_width=0),
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
    return {"model": llm.name, "threads": config.llm.threads, "build": _llama_build(), "rows": rows}


def _llama_build() -> str:
    """The instruction sets llama.cpp was built for (`make install` picks AVX2 or AVX-512):
    the same model runs at different speeds on the two, so a figure names its build."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    return " ".join(f for f in ("AVX2", "AVX512", "AVX512_VNNI") if f"{f} = 1" in info)


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


PHRASES = ("Of course, we are open", "Sure, a table for four", "Yes, we have vegetarian",
           "Let me check that for")  # fmt: skip


def tts_figures() -> dict[str, Any]:
    """Piper on four first phrases: one by one, and padded into one run of 2 and of 4
    (VITS takes a batch with ``input_lengths``; the cost is what is measured here)."""
    import numpy as np

    from voxpipe.engines.piper_tts import PiperTts

    tts = PiperTts(None, threads=1)
    tts.warmup()
    voice = tts._voice  # the runtime's own session, as the engine runs it
    ids = [voice.phonemes_to_ids(voice.phonemize(p)[0]) for p in PHRASES]
    cfg = voice.config
    scales = np.array([cfg.noise_scale, cfg.length_scale, cfg.noise_w_scale], dtype=np.float32)

    def run(batch: list[list[int]]) -> None:
        width = max(map(len, batch))
        padded = np.zeros((len(batch), width), dtype=np.int64)
        for i, row in enumerate(batch):
            padded[i, : len(row)] = row
        lengths = np.array([len(r) for r in batch], dtype=np.int64)
        voice.session.run(None, {"input": padded, "input_lengths": lengths, "scales": scales})

    rows = []
    for size in (1, 2, 4):
        started = time.perf_counter()
        for _ in range(3):
            for i in range(0, len(ids), size):
                run(ids[i : i + size])
        seconds = (time.perf_counter() - started) / 3
        rows.append({"batch": size, "phrases_per_s": round(len(ids) / seconds, 2)})
    for row in rows:
        row["speedup_vs_one"] = round(row["phrases_per_s"] / rows[0]["phrases_per_s"], 2)
    return {"phrases": list(PHRASES), "rows": rows}


def vad_figures() -> dict[str, Any]:
    """Silero on one 32 ms window of one call: the cost a batch could save. The ONNX file
    that ships with faster-whisper fixes its state's batch at 1, so a batch is not even
    possible without another model file."""
    import numpy as np

    from voxpipe.engines.silero_vad import CONTEXT, WINDOW, SileroVad

    session = SileroVad()._session
    x = np.zeros((1, WINDOW + CONTEXT), np.float32)
    state = np.zeros((1, 1, 128), np.float32)
    for _ in range(50):
        session.run(None, {"input": x, "h": state, "c": state})
    runs = 500
    started = time.perf_counter()
    for _ in range(runs):
        session.run(None, {"input": x, "h": state, "c": state})
    per_window_us = (time.perf_counter() - started) / runs * 1e6
    calls = 4
    return {
        "per_window_us": round(per_window_us, 1),
        "core_share_at_4_calls": round(calls * (16000 / WINDOW) * per_window_us / 1e6, 4),
        "batch_input_accepted": False,
    }


def render(result: dict[str, Any]) -> str:
    lines = [f"LLM {result['llm']['model']} ({result['llm']['threads']} threads, "
             f"llama.cpp built for {result['llm'].get('build', '?')}), greedy, "
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
    lines += ["", "| Piper first phrases | batch | phrases/s | vs one |", "|---|---|---|---|"]
    for r in result["tts"]["rows"]:
        lines.append(
            f"| 4 phrases | {r['batch']} | {r['phrases_per_s']} | {r['speedup_vs_one']}x |"
        )
    vad = result["vad"]
    lines += ["", f"Silero VAD: {vad['per_window_us']} us per 32 ms window of one call, "
              f"{vad['core_share_at_4_calls'] * 100:.1f} % of one core for 4 calls; the bundled "
              "ONNX file takes a batch of 1 only."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    config = Config.load(args.config) if args.config else Config.load()
    result = {
        "llm": llm_figures(config),
        "stt": stt_figures(config),
        "tts": tts_figures(),
        "vad": vad_figures(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    table = render(result)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0
