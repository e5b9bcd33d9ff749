"""``python -m bench conversation``: latency of a scripted spoken conversation, end to end.

A fresh server is started (so the first call really is the first after
start-up), then a client plays a 10-turn conversation of real human speech at
real-time pace, several times, each time as a new call. We report
percentiles of every stage and of voice-to-voice latency as the caller
measures it, the engines' isolated compute on the same inputs, and the
pipeline overhead: voice-to-voice minus the end-of-turn silence and the
computes on the critical path (STT, LLM up to the first clause, TTS of it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import turn_taking
from voxpipe.audio.pcm import read_wav, resample
from voxpipe.clients.native_client import NativeClient
from voxpipe.config import Config
from voxpipe.loadtest.server_process import ServerProcess
from voxpipe.loadtest.stats import summarize, table

SPEECH = Path("/usr/share/pocketsphinx/test/data")
SCRIPT = [
    *(SPEECH / "librivox" / f"sense_and_sensibility_01_austen_64kb-0{n}.wav"
      for n in (870, 880, 890, 920, 930)),
    *(SPEECH / "cards" / f"00{n}.wav" for n in range(1, 6)),
]  # fmt: skip
STAGES = ("eot", "stt_done", "llm_first_token", "first_clause", "tts_first_chunk",
          "first_audio_sent", "response_done")  # fmt: skip
COMPUTES = ("stt", "llm_ttft", "llm_first_clause", "tts_first")


def load_script() -> list[tuple[Path, np.ndarray, int]]:
    missing = [p for p in SCRIPT if not p.is_file()]
    if missing:
        raise SystemExit(f"missing speech clips {missing[0]}: install pocketsphinx-testdata")
    return [(p, *read_wav(p)) for p in SCRIPT]


async def run_calls(url: str, script: list[tuple[Path, np.ndarray, int]], reps: int) -> list[Any]:
    calls = []
    for rep in range(reps):
        turns = []
        async with NativeClient(url) as client:
            await client.connect()
            for path, audio, rate in script:
                turn = await client.speak(audio, rate)
                turns.append(
                    {
                        "call": rep,
                        "clip": path.name,
                        "client_v2v_ms": turn.voice_to_voice_ms,
                        "transcript": turn.transcript,
                        "reply": turn.reply,
                        "status": turn.status,
                        "server": turn.metrics,
                    }
                )
                v2v = turn.voice_to_voice_ms
                print(
                    f"  call {rep + 1} turn {len(turns):>2}: v2v "
                    f"{v2v if v2v is None else round(v2v)} ms  {turn.transcript!r} -> "
                    f"{turn.reply[:60]!r}",
                    flush=True,
                )
        calls.append(turns)
    return calls


def isolated_compute(config: Config, calls: list[Any]) -> dict[str, Any]:
    """Each engine alone, on the inputs the calls used (clips, prompts, first clauses)."""
    from voxpipe.conversation.spoken import ClauseChunker
    from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage
    from voxpipe.engines.loader import load_engines

    engines = load_engines(config)
    out: dict[str, list[float]] = {k: [] for k in ("vad_window", *COMPUTES)}
    per_turn: list[dict[str, float]] = []
    for call_index, turns in enumerate(calls):
        history = [ChatMessage("system", config.llm.system_prompt)]
        for turn in turns:
            audio, rate = read_wav(next(p for p in SCRIPT if p.name == turn["clip"]))
            audio16 = resample(audio, rate, 16000)
            vad = engines.vad.new_stream()
            t = time.perf_counter()
            windows = len(vad.process(audio16))
            out["vad_window"].append((time.perf_counter() - t) * 1000 / max(1, windows))
            t = time.perf_counter()
            engines.stt.transcribe(audio16)
            stt_ms = (time.perf_counter() - t) * 1000

            history.append(ChatMessage("user", turn["transcript"]))
            chunker, cancel, usage = ClauseChunker(config.chunker), CancelToken(), LlmUsage()
            t = time.perf_counter()
            ttft = first_clause_ms = None
            for delta in engines.llm.stream(f"iso-{call_index}", history, cancel, usage):
                ttft = ttft or (time.perf_counter() - t) * 1000
                if isinstance(delta, str) and chunker.push(delta):  # no tools: words only
                    first_clause_ms = (time.perf_counter() - t) * 1000
                    break
            first_clause_ms = first_clause_ms or (time.perf_counter() - t) * 1000
            history.append(ChatMessage("assistant", turn["reply"]))

            clause = turn["server"].get("first_clause") or turn["reply"] or "Okay."
            t = time.perf_counter()
            for _chunk in engines.tts.synthesize(clause, CancelToken()):
                break
            tts_ms = (time.perf_counter() - t) * 1000
            row = {
                "stt": stt_ms,
                "llm_ttft": ttft or first_clause_ms,
                "llm_first_clause": first_clause_ms,
                "tts_first": tts_ms,
            }
            for key, value in row.items():
                out[key].append(value)
            per_turn.append(row)
    return {"summary": {k: summarize(v) for k, v in out.items()}, "per_turn": per_turn}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def report(
    config: Config, calls: list[Any], isolated: dict[str, Any], ready_s: float
) -> dict[str, Any]:
    turns = [t for call in calls for t in call]
    ok = [t for t in turns if t["status"] == "completed" and t["client_v2v_ms"] is not None]
    silence = config.turn.silence_ms
    v2v = [t["client_v2v_ms"] for t in ok]
    stage = {s: summarize(t["server"]["stages_ms"].get(s) for t in ok) for s in STAGES}
    compute = {c: summarize(t["server"]["compute_ms"].get(c) for t in ok) for c in COMPUTES}
    queue = {q: summarize(t["server"]["queue_ms"].get(q) for t in ok) for q in ("stt", "llm")}

    preempt = config.turn.preempt_ms

    def critical_path(t: dict[str, Any], c: dict[str, float]) -> float:
        """The waits and computes the first reply audio cannot come before. Without
        preemption: the end-of-turn silence, then STT, LLM to the first clause, TTS of it.
        With it, the computes start after ``preempt_ms`` and overlap the rest of the silence."""
        computes = c["stt"] + c["llm_first_clause"] + c["tts_first"]
        if t["server"].get("preempted") and preempt is not None:
            return max(float(silence), preempt + computes)
        return silence + computes

    # Overhead is taken on the server's clock (its speech_end is where the VAD heard the last
    # speech window; the client's energy-based end of speech is a little later).
    def overhead(t: dict[str, Any]) -> float:
        v2v = t["server"]["voice_to_voice_ms"]
        return float(v2v - critical_path(t, t["server"]["compute_ms"]))

    iso_rows = isolated["per_turn"]
    iso_overhead = [
        t["server"]["voice_to_voice_ms"] - critical_path(t, r)
        for t, r in zip(turns, iso_rows, strict=True)
        if t in ok
    ]
    first_turn_of_first_call = calls[0][0]["client_v2v_ms"] if calls and calls[0] else None
    later_first_turns = [c[0]["client_v2v_ms"] for c in calls[1:] if c and c[0]["client_v2v_ms"]]
    first_call = [t["client_v2v_ms"] for t in ok if t["call"] == 0]
    later_calls = [t["client_v2v_ms"] for t in ok if t["call"] > 0]
    warm = {
        "first_turn_after_start_ms": first_turn_of_first_call,
        "first_turn_of_later_calls_median_ms": (
            statistics.median(later_first_turns) if later_first_turns else None
        ),
        "first_call_median_ms": statistics.median(first_call) if first_call else None,
        "later_calls_median_ms": statistics.median(later_calls) if later_calls else None,
    }
    warm["first_turn_ratio"] = _ratio(
        warm["first_turn_after_start_ms"], warm["first_turn_of_later_calls_median_ms"]
    )
    warm["first_call_ratio"] = _ratio(warm["first_call_median_ms"], warm["later_calls_median_ms"])
    turn_index_v2v = {
        f"turn_{i + 1}": summarize(c[i]["client_v2v_ms"] for c in calls if len(c) > i)
        for i in range(max(len(c) for c in calls))
    }
    return {
        "calls": len(calls),
        "turns": len(turns),
        "completed_turns": len(ok),
        "silence_ms": silence,
        "ready_after_start_s": round(ready_s, 1),
        "voice_to_voice_ms": summarize(v2v),
        "server_voice_to_voice_ms": summarize(t["server"]["voice_to_voice_ms"] for t in ok),
        "stages_ms": stage,
        "compute_ms": compute,
        "queue_ms": queue,
        "isolated_compute_ms": isolated["summary"],
        "overhead_ms": summarize(overhead(t) for t in ok),
        "overhead_vs_isolated_ms": summarize(iso_overhead),
        "warm_start": warm,
        "voice_to_voice_by_turn_ms": turn_index_v2v,
        "prefill_tokens": summarize(t["server"]["llm"]["prefill_tokens"] for t in ok),
        "prompt_tokens": summarize(t["server"]["llm"]["prompt_tokens"] for t in ok),
    }


def render(summary: dict[str, Any]) -> str:
    w = summary["warm_start"]
    sections = [
        f"bench conversation: {summary['calls']} calls x "
        f"{summary['turns'] // summary['calls']} turns of real speech, "
        f"{summary['completed_turns']} completed; end-of-turn silence "
        f"{summary['silence_ms']} ms; server ready {summary['ready_after_start_s']} s after start",
        "",
        table([("voice-to-voice (client)", summary["voice_to_voice_ms"]),
               ("voice-to-voice (server)", summary["server_voice_to_voice_ms"])]),
        "",
        "server stages, from the end of the caller's speech:",
        table([(s, summary["stages_ms"][s]) for s in STAGES]),
        "",
        "compute inside the server (per turn):",
        table([(c, summary["compute_ms"][c]) for c in COMPUTES]
              + [(f"queue {q}", summary["queue_ms"][q]) for q in ("stt", "llm")]),
        "",
        "isolated engine compute on the same inputs:",
        table([(k, v) for k, v in summary["isolated_compute_ms"].items()]),
        "",
        "pipeline overhead = server v2v - critical path (silence + stt + llm to first clause +"
        " tts first chunk; preempted turns: max(silence, preempt_ms + those computes)):",
        table([("overhead (server computes)", summary["overhead_ms"]),
               ("overhead (isolated computes)", summary["overhead_vs_isolated_ms"])]),
        "",
        f"prefill tokens per turn p50 {summary['prefill_tokens'].get('p50')} "
        f"(prompt p50 {summary['prompt_tokens'].get('p50')}, max "
        f"{summary['prompt_tokens'].get('max')})",
        f"first turn after start {w['first_turn_after_start_ms']:.0f} ms vs first turn of later "
        f"calls {w['first_turn_of_later_calls_median_ms'] or float('nan'):.0f} ms "
        f"(ratio {w['first_turn_ratio']}); first call median {w['first_call_median_ms']:.0f} ms "
        f"vs later calls {w['later_calls_median_ms'] or float('nan'):.0f} ms "
        f"(ratio {w['first_call_ratio']})",
    ]  # fmt: skip
    return "\n".join(sections)


def main(args: argparse.Namespace) -> int:
    config = Config.load(args.config)
    script = load_script()
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"starting a fresh server on port {args.port} ...", flush=True)
    server = ServerProcess.start(out.parent / "server", port=args.port, config=args.config)
    try:
        ready_s = server.wait_ready()
        print(f"ready after {ready_s:.1f} s; {args.reps} calls of {len(script)} turns", flush=True)
        calls = asyncio.run(run_calls(server.ws, script, args.reps))
        if args.interruptions:
            print(f"barge-in: {args.interruptions} interruptions ...", flush=True)
            barge = asyncio.run(turn_taking.barge_in(server.ws, script, args.interruptions))
            print("preemption on vs off ...", flush=True)
            preempt = asyncio.run(turn_taking.preemption(server.ws, script, args.preempt_reps))
    finally:
        server.stop()
    print("isolated engine compute on the same inputs ...", flush=True)
    isolated = isolated_compute(config, calls)
    summary = report(config, calls, isolated, ready_s)
    text = render(summary)
    if args.interruptions:
        print("LLM alone: 20-turn TTFT with reuse vs rebuild ...", flush=True)
        summary["turn_taking"] = {
            "barge_in": barge,
            "preemption": preempt,
            "long_call": turn_taking.long_call_ttft(config, calls),
        }
        text += "\n\n" + turn_taking.render(summary["turn_taking"])
    print("\n" + text)
    out.write_text(json.dumps({"summary": summary, "calls": calls}, indent=1))
    out.with_suffix(".txt").write_text(text + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.txt')}")
    return 0
