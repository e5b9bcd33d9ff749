"""``python -m bench confirm-cost``: what asking before acting costs a caller of Luigi's.

The restaurant's booking and cancelling read the call back and act on the caller's yes
(``RESTAURANT_CONFIRM``, on by default; ``docs/agents.md#asking-before-acting``). This runs
the spoken booking and cancellation requests of the tool evaluation's restaurant set
(Piper's voice) through a server with it off, then one with it on, one call per request
over the native protocol at real-time pace, the caller answering a readback with "Yes,
please." It reports, per mode, how many requests ended in an action, the turns an action
took, when the first words of each turn came after the caller stopped (the server's turn
log: ``first_audio_sent``), and the seconds a confirmed action adds to the call: the
readback's audio, the caller's yes and the wait for the answer after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.tool_eval import dataset
from voxpipe.clients.native_client import NativeClient, TurnResult
from voxpipe.engines.base import CancelToken
from voxpipe.engines.piper_tts import PiperTts
from voxpipe.loadtest.server_process import ServerProcess

AGENT = Path(__file__).resolve().parent.parent / "examples/restaurant/agent.py"
TOOLS = ("book_table", "cancel_booking")
YES = "Yes, please."
READY_TIMEOUT_S = 600.0
TURN_TIMEOUT_S = 90.0


def _voice(tts: PiperTts, text: str) -> tuple[np.ndarray, int]:
    pcm = np.concatenate(list(tts.synthesize(text, CancelToken())))
    pad = np.zeros(tts.sample_rate * 3 // 10, np.float32)
    return np.concatenate([pad, pcm.astype(np.float32) / 32768.0, pad]), tts.sample_rate


def _first_audio_ms(turn: TurnResult) -> float | None:
    value = (turn.metrics.get("stages_ms") or {}).get("first_audio_sent")
    return float(value) if value is not None else None


def _acted(turn: TurnResult) -> bool:
    return any(t.get("name") in TOOLS for t in turn.metrics.get("tools") or [])


async def _one_call(
    server: ServerProcess, request: tuple[np.ndarray, int], yes: tuple[np.ndarray, int]
) -> dict[str, Any]:
    async with NativeClient(f"ws://127.0.0.1:{server.port}/v1/voice") as client:
        await client.connect()
        await client.wait_for(lambda: client.completed_turn(1), 60)  # the greeting
        await client.wait_playback_done()
        turn = await client.speak(*request, timeout_s=TURN_TIMEOUT_S)
        row: dict[str, Any] = {
            "reply": turn.reply,
            "first_audio_ms": _first_audio_ms(turn),
            "turns": 1,
            "acted": _acted(turn),
        }
        if not row["acted"] and "?" in turn.reply and "Shall I" in turn.reply:
            row["readback_s"] = len(turn.audio) / 2 / client.output_rate
            row["yes_s"] = len(yes[0]) / yes[1]
            answer = await client.speak(*yes, timeout_s=TURN_TIMEOUT_S)
            row.update(
                turns=2,
                acted=_acted(answer),
                yes_first_audio_ms=_first_audio_ms(answer),
                answer=answer.reply,
            )
        return row


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    firsts = [r["first_audio_ms"] for r in rows if r["first_audio_ms"] is not None]
    yes = [r["yes_first_audio_ms"] for r in rows if r.get("yes_first_audio_ms") is not None]
    acted = [r for r in rows if r["acted"]]
    extra = [
        r["readback_s"] + r["yes_s"] + r["yes_first_audio_ms"] / 1000
        for r in acted
        if r.get("yes_first_audio_ms") is not None
    ]
    return {
        "requests": len(rows),
        "acted": len(acted),
        "turns_per_action": statistics.fmean(r["turns"] for r in acted) if acted else None,
        "first_audio_p50_ms": _pct(firsts, 0.5),
        "first_audio_p99_ms": _pct(firsts, 0.99),
        "yes_first_audio_p50_ms": _pct(yes, 0.5),
        "yes_first_audio_p99_ms": _pct(yes, 0.99),
        "extra_s_per_action_p50": _pct(extra, 0.5),
        "extra_s_per_action_p99": _pct(extra, 0.99),
    }


def _run_mode(confirm: bool, utterances: list[dataset.Utterance], tts: PiperTts) -> dict[str, Any]:
    yes = _voice(tts, YES)
    with tempfile.TemporaryDirectory(prefix="voxpipe-confirm-") as tmp:
        env = {
            "VOXPIPE_AGENT": f"{AGENT}:agent",
            "RESTAURANT_DB": str(Path(tmp) / "book.sqlite3"),
            "RESTAURANT_CONFIRM": "1" if confirm else "0",
        }
        server = ServerProcess.start(Path(tmp), env=env)
        try:
            server.wait_ready(READY_TIMEOUT_S)
            rows = []
            for utt in utterances:
                row = asyncio.run(_one_call(server, _voice(tts, utt.text), yes))
                row.update(id=utt.id, tool=utt.tool, text=utt.text)
                rows.append(row)
                print(f"  {'on ' if confirm else 'off'} {utt.id}: {json.dumps(row)[:300]}")
        finally:
            server.stop()
    return {"confirm": confirm, "summary": _summary(rows), "rows": rows}


def main(args: argparse.Namespace) -> int:
    utterances = [u for u in dataset.requests() if u.tool in TOOLS and u.voice == dataset.PIPER][
        : args.requests
    ]
    tts = PiperTts(None, threads=1)
    started = time.monotonic()
    modes = [_run_mode(False, utterances, tts), _run_mode(True, utterances, tts)]
    print(
        "\nmode | requests | acted | turns/action | first audio p50/p99 ms | "
        "after yes p50/p99 ms | extra s per action p50/p99"
    )
    for mode in modes:
        s = mode["summary"]
        print(
            f"{'confirm' if mode['confirm'] else 'direct '} | {s['requests']} | {s['acted']} | "
            f"{s['turns_per_action']} | {s['first_audio_p50_ms']}/{s['first_audio_p99_ms']} | "
            f"{s['yes_first_audio_p50_ms']}/{s['yes_first_audio_p99_ms']} | "
            f"{s['extra_s_per_action_p50']}/{s['extra_s_per_action_p99']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"modes": modes, "wall_s": time.monotonic() - started}
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}")
    return 0
