"""``voxpipe bench-transports``: the bench conversation through every transport.

One fresh server; the same scripted spoken conversation as ``voxpipe bench``
(real human speech, real-time pace, each turn answered and heard out before
the next) is held through the native protocol, OpenAI Realtime (the official
SDK), Twilio Media Streams and WebRTC, N calls of M turns each, the calls of
the transports interleaved so a noisy minute of a shared machine hurts them
alike. Per turn we take voice-to-voice latency twice:

- client: the last loud sample of the caller's speech leaving the client, to
  the first voiced reply audio arriving (:mod:`voxpipe.bench.transport_callers`);
- server: the turn log's ``voice_to_voice_ms`` (last speech sample in, first
  reply frame out),

so ``client - server`` is what the transport (encoding, framing, sockets,
jitter buffers) and the two ends' clocks of "speech ended" add. The report
gives p50/p95/p99/max per transport, the ratio to native, and that overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from voxpipe.bench.stats import summarize
from voxpipe.config import Config

TURN_TIMEOUT_S = 90.0
FIRST_VOICE_GRACE_S = 3.0  # after the server's turn record, for voiced audio still in flight
PERCENTILES = ("p50", "p95", "p99", "max")


# -- the server's side ----------------------------------------------------------


def turns_of(turn_log_text: str, session_id: str) -> list[dict[str, Any]]:
    """The session's turn records (turn id > 0), in turn order, from turn-log JSON lines."""
    records = []
    for line in turn_log_text.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("session_id") == session_id and record.get("turn_id", 0) > 0:
            records.append(record)
    return sorted(records, key=lambda r: r["turn_id"])


async def server_turns(turn_log: Path, session_id: str) -> list[dict[str, Any]]:
    def read() -> str:
        return turn_log.read_text(encoding="utf-8") if turn_log.exists() else ""

    return turns_of(await asyncio.to_thread(read), session_id)


async def wait_server_turns(
    turn_log: Path, session_id: str, count: int, timeout_s: float
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while len(records := await server_turns(turn_log, session_id)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{session_id}: no turn {count} in the turn log in {timeout_s} s")
        await asyncio.sleep(0.1)
    return records


# -- one call -------------------------------------------------------------------


async def one_call(
    caller: Any, clips: Sequence[tuple[Path, np.ndarray, int]], turn_log: Path, call: int
) -> list[dict[str, Any]]:
    """Speak ``clips`` one turn each on ``caller`` (a :class:`~.transport_callers.Caller`)."""
    rows: list[dict[str, Any]] = []
    await asyncio.wait_for(caller.open(), 60)
    try:
        for index, (path, audio, rate) in enumerate(clips):
            before = len(await server_turns(turn_log, caller.session_id))
            speech_end = await asyncio.wait_for(caller.say(audio, rate), TURN_TIMEOUT_S)
            records = await wait_server_turns(
                turn_log, caller.session_id, before + 1, TURN_TIMEOUT_S
            )
            record = records[before]
            first = caller.first_voiced_after(speech_end)
            grace = time.monotonic() + FIRST_VOICE_GRACE_S
            while first is None and record.get("reply") and time.monotonic() < grace:
                await asyncio.sleep(0.05)
                first = caller.first_voiced_after(speech_end)
            await caller.played_out()
            client_ms = None if first is None else round((first - speech_end) / 1e6, 1)
            rows.append(
                {
                    "transport": caller.transport,
                    "call": call,
                    "turn": index + 1,
                    "clip": path.name,
                    "session_id": caller.session_id,
                    "server_turn_id": record["turn_id"],
                    "status": record.get("status"),
                    "client_v2v_ms": client_ms,
                    "server_v2v_ms": record.get("voice_to_voice_ms"),
                    "transcript": record.get("transcript", ""),
                    "reply": record.get("reply", ""),
                }
            )
            server_ms = record.get("voice_to_voice_ms")
            print(
                f"  {caller.transport:<16} call {call + 1} turn {index + 1:>2}: client "
                f"{_ms(client_ms)} server {_ms(server_ms)}  {record.get('transcript', '')!r:.50}"
                f" -> {record.get('reply', '')!r:.50}",
                flush=True,
            )
    finally:
        await caller.close()
    return rows


def _ms(value: float | None) -> str:
    return "   -- ms" if value is None else f"{value:>5.0f} ms"


async def run_all(
    port: int,
    turn_log: Path,
    transports: Sequence[str],
    clips: Sequence[tuple[Path, np.ndarray, int]],
    calls: int,
    warmup_turns: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every transport's calls, interleaved; returns (turn rows, failed calls)."""
    from voxpipe.bench.transport_callers import make_caller

    if warmup_turns:
        print(f"warm-up: {warmup_turns} native turn(s), not counted", flush=True)
        await one_call(make_caller("native", port), clips[:warmup_turns], turn_log, -1)
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for call in range(calls):
        for transport in transports:
            try:
                rows += await one_call(make_caller(transport, port), clips, turn_log, call)
            except Exception as exc:  # one failed call is reported, the bench goes on
                print(f"  {transport} call {call + 1} failed: {exc!r}", flush=True)
                failures.append({"transport": transport, "call": call, "error": repr(exc)})
    return rows, failures


# -- the report -----------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def aggregate(
    rows: Iterable[dict[str, Any]],
    failures: Iterable[dict[str, Any]] = (),
    transports: Sequence[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per transport: client and server voice-to-voice, their per-turn difference, vs native.

    Only completed turns with both a voiced reply and a server timing count.
    """
    rows, failures = list(rows), list(failures)
    order = list(transports or dict.fromkeys(r["transport"] for r in rows))
    out: dict[str, dict[str, Any]] = {}
    for transport in order:
        mine = [r for r in rows if r["transport"] == transport]
        ok = [
            r
            for r in mine
            if r["status"] == "completed"
            and r["client_v2v_ms"] is not None
            and r["server_v2v_ms"] is not None
        ]
        out[transport] = {
            "turns": len(mine),
            "counted": len(ok),
            "failed_calls": sum(f["transport"] == transport for f in failures),
            "client_v2v_ms": summarize(r["client_v2v_ms"] for r in ok),
            "server_v2v_ms": summarize(r["server_v2v_ms"] for r in ok),
            "overhead_ms": summarize(r["client_v2v_ms"] - r["server_v2v_ms"] for r in ok),
        }
    native = out.get("native", {}).get("client_v2v_ms", {})
    for stats in out.values():
        stats["vs_native"] = {
            p: _ratio(stats["client_v2v_ms"].get(p), native.get(p)) for p in PERCENTILES
        }
    return out


def _cell(value: float | None, ratio: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}×" if ratio else f"{value:.0f}"


def render_markdown(summary: dict[str, dict[str, Any]], header: str = "") -> str:
    lines = [header, ""] if header else []
    lines += [
        "| transport | turns | client v2v p50 | p95 | p99 | max | ×native p50 | ×native p99 "
        "| server v2v p50 | server p99 | overhead p50 | overhead p99 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        client, server, over, vs = (
            s["client_v2v_ms"],
            s["server_v2v_ms"],
            s["overhead_ms"],
            s["vs_native"],
        )
        turns = f"{s['counted']}/{s['turns']}" + (
            f" ({s['failed_calls']} calls failed)" if s["failed_calls"] else ""
        )
        cells = [
            transport,
            turns,
            *(_cell(client.get(p)) for p in PERCENTILES),
            _cell(vs["p50"], ratio=True),
            _cell(vs["p99"], ratio=True),
            _cell(server.get("p50")),
            _cell(server.get("p99")),
            _cell(over.get("p50")),
            _cell(over.get("p99")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "All times in ms. client v2v: the last loud sample of the caller's speech leaving the "
        "client to the first voiced reply audio arriving. server v2v: the turn log's "
        "`voice_to_voice_ms` (last speech sample in, first reply frame out). overhead: client − "
        "server per turn: what the transport adds (codec, framing, sockets, jitter buffers), "
        'plus the ends\' different notions of "speech ended" (energy at the client, VAD at the '
        "server) and any silence that opens the reply.",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from voxpipe.bench.conversation import load_script
    from voxpipe.bench.server_process import ServerProcess

    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    script = load_script()
    clips = [script[i % len(script)] for i in range(args.turns)]
    config = Config.load(args.config)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    workdir = out.parent / "transports-server"
    (workdir / "turns.jsonl").unlink(missing_ok=True)
    print("starting a fresh server ...", flush=True)
    server = ServerProcess.start(workdir, port=args.port, config=args.config)
    try:
        ready_s = server.wait_ready()
        print(
            f"ready after {ready_s:.1f} s; {args.calls} calls x {args.turns} turns through "
            f"{', '.join(transports)}",
            flush=True,
        )
        rows, failures = asyncio.run(
            run_all(server.port, server.turn_log, transports, clips, args.calls, args.warmup_turns)
        )
    finally:
        server.stop()
    summary = aggregate(rows, failures, transports)
    header = (
        f"voxpipe bench-transports: {args.calls} calls x {args.turns} turns of real speech per "
        f"transport, one server, end-of-turn silence {config.turn.silence_ms} ms"
    )
    text = render_markdown(summary, header)
    print("\n" + text)
    report = {"summary": summary, "turns": rows, "failures": failures, "ready_after_s": ready_s}
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(text + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.md')}")
    return 0 if not failures else 1
