"""``python -m bench transports``: the bench conversation through every transport.

One fresh server; the same scripted spoken conversation as ``python -m bench conversation``
(real human speech, real-time pace, each turn answered and heard out before
the next) is held through the native protocol, OpenAI Realtime (the official
SDK), Twilio Media Streams and WebRTC, N calls of M turns each, the calls of
the transports interleaved so a noisy minute of a shared machine hurts them
alike. Per turn we take voice-to-voice latency twice:

- client: the last loud sample of the caller's speech leaving the client, to
  the first voiced reply audio arriving (:mod:`bench.transport_callers`);
- server: the turn log's ``voice_to_voice_ms``, from the arrival of the last
  speech sample the server's VAD heard to the first reply frame leaving.

The two ends disagree on where speech ends (the VAD stops hearing speech a
few hundred ms before the last loud sample of a fading word), so the transport
overhead is taken from one instant: the clip is run through the same VAD and
turn detector beforehand, the client notes when the frame holding the VAD's
end of speech left, and overhead = client latency from there - server latency.
It is what the transport adds both ways: codec, resampling, framing, sockets,
jitter buffers, real-time pacing. The report gives p50/p95/p99/max per
transport, the ratio to native, and that overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voxpipe.clients.native_client import speech_end_sample
from voxpipe.config import Config, TurnConfig
from voxpipe.conversation.turn_detector import TurnDetector, TurnEventKind
from voxpipe.loadtest.stats import summarize

TURN_TIMEOUT_S = 90.0
FIRST_VOICE_GRACE_S = 3.0  # after the server's turn record, for voiced audio still in flight
PERCENTILES = ("p50", "p95", "p99", "max")
VAD_LEAD_S = 1.0  # silence before a clip when finding where the VAD ends its speech


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


# -- the clips ------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    path: Path
    audio: np.ndarray
    rate: int
    speech_end_s: float  # its last loud 20 ms frame: where the caller's speech ends
    vad_end_s: dict[str, float | None]  # per transport: where the server's VAD places it


def vad_speech_end_s(
    probabilities: Callable[[np.ndarray], list[float]],
    audio16: np.ndarray,
    turn: TurnConfig,
    window: int,
    offset: int = 0,
) -> float | None:
    """The last end of speech the server's turn detector finds in a 16 kHz clip.

    The clip is framed as on a call (silence before and after, starting ``offset`` samples
    into a VAD window) and run through the same detector the session uses, with the VAD's
    ``probabilities`` (a fresh stream).
    """
    lead = np.zeros(window * round(VAD_LEAD_S * 16000 / window) + offset, np.float32)
    tail = np.zeros(round((turn.silence_ms / 1000 + 1.0) * 16000), np.float32)
    audio = np.concatenate([lead, audio16.astype(np.float32, copy=False), tail])
    detector = TurnDetector(turn, window)
    end = None
    for i, prob in enumerate(probabilities(audio)):
        event = detector.push(audio[i * window : (i + 1) * window], prob)
        if event is not None and event.kind is TurnEventKind.SPEECH_STOPPED:
            end = event.sample
    return None if end is None else (end - lead.shape[0]) / 16000


def prepare_clips(turns: int, config: Config, transports: Sequence[str]) -> list[Clip]:
    """The bench's conversation, ``turns`` long, each clip with its ends of speech.

    The VAD's end is found per transport on the clip as the server receives it (a fading
    word's last windows can sit on the threshold, so 16-bit rounding, μ-law and
    resampling move it), at every place a 20 ms frame grid can put the clip against the
    VAD's windows; the median.
    """
    from bench.conversation import load_script
    from bench.transport_callers import as_the_server_hears
    from voxpipe.engines.silero_vad import SileroVad

    vad = SileroVad()
    window = vad.window_samples
    offsets = range(0, window, math.gcd(window, 320))  # 320: a 20 ms frame at 16 kHz

    def vad_end(audio16: np.ndarray) -> float | None:
        ends = [
            vad_speech_end_s(vad.new_stream().process, audio16, config.turn, window, offset)
            for offset in offsets
        ]
        found = [e for e in ends if e is not None]
        return float(np.median(found)) if found else None

    script = load_script()
    clips = []
    for path, audio, rate in (script[i % len(script)] for i in range(turns)):
        ends = {t: vad_end(as_the_server_hears(t, audio, rate)) for t in transports}
        clips.append(Clip(path, audio, rate, speech_end_sample(audio, rate) / rate, ends))
    return clips


# -- one call -------------------------------------------------------------------


def _since(first_ns: int | None, at_ns: int | None) -> float | None:
    return None if first_ns is None or at_ns is None else round((first_ns - at_ns) / 1e6, 1)


async def one_turn(caller: Any, clip: Clip, turn_log: Path) -> dict[str, Any]:
    """Say ``clip``, wait for the server's record of the turn and for the reply to play out."""
    before = len(await server_turns(turn_log, caller.session_id))
    vad_end = clip.vad_end_s.get(caller.transport)
    ends = {"speech": clip.speech_end_s, "vad": vad_end}
    marks = sorted((s, name) for name, s in ends.items() if s is not None)
    sent = await asyncio.wait_for(
        caller.say(clip.audio, clip.rate, [s for s, _ in marks]), TURN_TIMEOUT_S
    )
    at = {name: ns for (_, name), ns in zip(marks, sent, strict=True)}
    records = await wait_server_turns(turn_log, caller.session_id, before + 1, TURN_TIMEOUT_S)
    record = records[before]
    first = caller.first_voiced_after(at["speech"])
    grace = time.monotonic() + FIRST_VOICE_GRACE_S
    while first is None and record.get("reply") and time.monotonic() < grace:
        await asyncio.sleep(0.05)
        first = caller.first_voiced_after(at["speech"])
    await caller.played_out()
    gap = None if vad_end is None else (clip.speech_end_s - vad_end) * 1000
    stages = record.get("stages_ms", {})
    out = [stages[s] for s in ("first_audio_sent", "filler_sent") if stages.get(s) is not None]
    return {
        "transport": caller.transport,
        "clip": clip.path.name,
        "session_id": caller.session_id,
        "server_turn_id": record["turn_id"],
        "status": record.get("status"),
        "client_v2v_ms": _since(first, at["speech"]),
        "client_v2v_from_vad_end_ms": _since(first, at.get("vad")),
        "server_v2v_ms": record.get("voice_to_voice_ms"),
        "server_first_audio_ms": min(out, default=None),  # a filler's, when one went first
        "filler": record.get("filler"),
        "speech_end_after_vad_end_ms": None if gap is None else round(gap, 1),
        "transcript": record.get("transcript", ""),
        "reply": record.get("reply", ""),
    }


async def one_call(
    caller: Any, clips: Sequence[Clip], turn_log: Path, call: int
) -> list[dict[str, Any]]:
    """Speak ``clips`` one turn each on ``caller`` (a :class:`~.transport_callers.Caller`)."""
    rows: list[dict[str, Any]] = []
    await asyncio.wait_for(caller.open(), 60)
    try:
        for index, clip in enumerate(clips):
            row = {"call": call, "turn": index + 1, **await one_turn(caller, clip, turn_log)}
            rows.append(row)
            client, vad = _ms(row["client_v2v_ms"]), _ms(row["client_v2v_from_vad_end_ms"])
            said = f"{row['transcript']!r:.40} -> {row['reply']!r:.40}"
            print(
                f"  {caller.transport:<16} call {call + 1} turn {index + 1:>2}: client {client}"
                f" (from VAD end {vad}) server {_ms(row['server_v2v_ms'])}  {said}",
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
    clips: Sequence[Clip],
    calls: int,
    warmup_turns: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every transport's calls, interleaved; returns (turn rows, failed calls)."""
    from bench.transport_callers import make_caller

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
    """Per transport: client and server voice-to-voice, the client's ratio to native, and
    the transport overhead: per turn, the client's latency from the VAD's end of speech
    minus the server's to its first audio out (both then start at the same instant of the
    clip and end on the same audio: the filler's, when the reply was late and one went first).

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
            "overhead_ms": summarize(
                r["client_v2v_from_vad_end_ms"]
                - (r.get("server_first_audio_ms") or r["server_v2v_ms"])
                for r in ok
                if r.get("client_v2v_from_vad_end_ms") is not None
            ),
            "fillers": sum(bool(r.get("filler")) for r in ok),
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
        "| transport | turns | fillers | client v2v p50 | p95 | p99 | max | ×native p50 "
        "| ×native p99 | server v2v p50 | server p99 | overhead p50 | overhead p99 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
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
            str(s["fillers"]),
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
        "All times in ms; turns: counted/held. client v2v: the last loud sample of the "
        "caller's speech leaving the client to the first voiced reply audio arriving (a "
        'filler, "One moment.", when the reply was late: fillers counts those turns). '
        "×native: its ratio to native's. server v2v: the turn log's `voice_to_voice_ms` (the "
        "server's VAD end of speech arriving to the first reply frame leaving; fillers "
        "excluded). overhead: per turn, the client's latency counted from that same VAD end "
        "of speech (the frame holding it leaving the client) minus the server's to its first "
        "audio out (filler included): what the transport adds both ways (codec, resampling, "
        "framing, sockets, jitter buffers, real-time pacing), plus any quiet that opens the "
        "reply.",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from voxpipe.loadtest.server_process import ServerProcess

    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    config = Config.load(args.config)
    clips = prepare_clips(args.turns, config, transports)
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
        f"bench transports: {args.calls} calls x {args.turns} turns of real speech per "
        f"transport, one server, end-of-turn silence {config.turn.silence_ms} ms"
    )
    text = render_markdown(summary, header)
    print("\n" + text)
    report = {"summary": summary, "turns": rows, "failures": failures, "ready_after_s": ready_s}
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(text + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.md')}")
    return 0 if not failures else 1
