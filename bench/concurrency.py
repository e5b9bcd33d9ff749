"""``python -m bench concurrency``: N independent phone callers at once, as an operator sees it.

One server (the bench caller's prompt, LLM greedy with 60 tokens at most, the filler off).
For each N in ``--callers`` (1, 2, 3, 4 by default), N Twilio callers (μ-law 8 kHz, 20 ms
frames at real-time pace) call at once, each starting ``--stagger-s`` after the one before,
each saying ``--turns`` sentences of real speech (long read sentences and short answers in
turn, each caller from another place in the lists) like a person (:class:`bench.person.Person`:
it talks into 1.5 s of quiet). Measured at the caller: first answer audio from the caller's
last sound, the filler apart (off here), answers talked over, turns never answered, and the
longest silence inside each answer where the next audio had not arrived yet. From the
server's turn records: each stage's queue wait apart from its compute, and, per turn, where
its wait went (the stage whose queue held it longest). Report: ``bench-results/
concurrency.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.caller_bench import (
    PROMPT,
    CallLog,
    Line,
    TurnLogFollower,
    bench_config,
    conversation,
    hold_call,
    load_average,
    speech_clips,
    turn_rows,
)
from bench.caller_report import caller_summary, stage_table
from bench.caller_turns import spread
from bench.person import Person
from voxpipe.config import Config

QUEUE_WORTH_NAMING_MS = 50.0  # a turn whose longest queue wait is shorter waited nowhere


async def hold_concurrent(
    port: int, turn_log: Path, callers: int, turns: int, stagger_s: float, gap_ms: int,
    pause_ms: int,
) -> tuple[list[CallLog], list[dict[str, Any]]]:  # fmt: skip
    long, short = speech_clips()
    follower = TurnLogFollower(turn_log)
    reader = asyncio.create_task(follower.run(), name="turn-log")

    async def one(k: int) -> CallLog:
        await asyncio.sleep(k * stagger_s)
        line = Line("twilio", port, PROMPT)
        clips = conversation(long, short, turns, k)
        return await hold_call(line, clips, follower, k, Person(gap_ms, pause_ms))

    try:
        done = await asyncio.gather(*(one(k) for k in range(callers)), return_exceptions=True)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    logs = [d for d in done if isinstance(d, CallLog)]
    failures = [
        {"call": k, "error": repr(d)} for k, d in enumerate(done) if isinstance(d, BaseException)
    ]
    return logs, failures


def waits(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Queue wait apart from compute, per stage; and per turn, the stage it waited on."""
    stages = sorted({k for r in rows for k in r["server"]["queue_ms"]})
    went: Counter[str] = Counter()
    for row in rows:
        queue = {k: v for k, v in row["server"]["queue_ms"].items() if v is not None}
        stage, ms = max(queue.items(), key=lambda kv: kv[1], default=("", 0.0))
        went[stage if ms >= QUEUE_WORTH_NAMING_MS else "nowhere"] += 1
    return {
        "queue_ms": {s: spread(r["server"]["queue_ms"].get(s) for r in rows) for s in stages},
        "compute_ms": stage_table(rows),
        "wait_went_to": dict(went),
    }


def render(levels: list[dict[str, Any]], header: str) -> str:
    lines = [header, "", "First answer audio at the caller, from its last sound (filler off):", "",
             "| callers | refused at connect | turns | answered | unanswered | talked over | p50 | "
             "p95 | p99 | max | longest stall in an answer p50 / p99 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for level in levels:
        s, a = level["summary"], level["summary"]["answer_ms"]
        st = s.get("stall_ms", {})
        unanswered = s["turns"] - s["answered"] - s["interrupted"]
        refused = len(level["failures"])
        lines.append(f"| {level['callers']} | {refused} | {s['turns']} | {s['answered']} | "
                     f"{unanswered} | "
                     f"{s['interrupted']} | {a.get('p50')} ms | {a.get('p95')} ms | "
                     f"{a.get('p99')} ms | {a.get('max')} ms | "
                     f"{st.get('p50')} / {st.get('p99')} ms |")  # fmt: skip
    lines += ["", "Queue wait (p50 / p99) apart from compute (p50 / p99), per stage, and where "
              "each turn waited longest (more than 50 ms):", "",
              "| callers | stage | queue p50 | queue p99 | compute p50 | compute p99 |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for level in levels:
        w = level["waits"]
        for stage, q in w["queue_ms"].items():
            key = {"llm": "llm_ttft", "tts": "tts_first"}.get(stage, stage)
            c = w["compute_ms"].get(key, {}).get("server_ms", {})
            lines.append(f"| {level['callers']} | {stage} | {q.get('p50')} | {q.get('p99')} | "
                         f"{c.get('p50')} | {c.get('p99')} |")  # fmt: skip
    lines += ["", "| callers | where the turns waited |", "|---|---|"]
    for level in levels:
        went = ", ".join(f"{k} {v}" for k, v in sorted(level["waits"]["wait_went_to"].items()))
        lines.append(f"| {level['callers']} | {went} |")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    from voxpipe.loadtest.server_process import ServerProcess

    counts = [int(c) for c in args.callers.split(",") if c.strip()]
    out: Path = args.out
    workdir = out.parent / "concurrency-server"
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = bench_config(args.config, workdir, no_filler=True)
    data = json.loads(config_path.read_text())
    data.setdefault("limits", {})["max_calls"] = args.max_calls or max(counts)
    config_path.write_text(json.dumps(data, indent=1))
    config = Config.load(config_path)
    (workdir / "turns.jsonl").unlink(missing_ok=True)
    load_before = load_average()
    server = ServerProcess.start(workdir, port=args.port, config=config_path)
    levels: list[dict[str, Any]] = []
    try:
        server.wait_ready()
        for n in counts:
            print(f"{n} concurrent caller(s), {args.turns} sentences each ...", flush=True)
            logs, failures = asyncio.run(
                hold_concurrent(server.port, server.turn_log, n, args.turns, args.stagger_s,
                                args.gap_ms, args.pause_ms)
            )  # fmt: skip
            rows, _ = turn_rows(logs)
            levels.append({
                "callers": n,
                "summary": caller_summary(rows, config.turn.silence_ms),
                "waits": waits(rows),
                "failures": failures,
                "rows": rows,
            })  # fmt: skip
    finally:
        server.stop()
    sequences = getattr(config.llm, "max_sequences", 1)  # 1: a build before the batch
    header = (
        f"bench concurrency: Twilio callers (μ-law 8 kHz, real-time pace), each starting "
        f"{args.stagger_s} s after the one before, {args.turns} sentences each (long read and "
        f"short in turn, rotated per caller); LLM temperature 0, max_tokens 60, prompt "
        f"{PROMPT!r}; end-of-turn silence {config.turn.silence_ms} ms; filler off; the caller "
        f"talks after {args.gap_ms} ms of quiet; llm.max_sequences {sequences}. Load average "
        f"{load_before} before, {load_average()} after."
    )
    text = render(levels, header)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"header": header, "levels": levels}, indent=1))
    out.with_suffix(".md").write_text(text)
    print("\n" + text)
    return 0
