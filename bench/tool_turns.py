"""``python -m bench tool-turns``: first answer audio on tool turns against plain turns.

One server, started here with the restaurant agent (``examples/restaurant``; its book in a
fresh temporary folder), and calls over Twilio Media Streams (μ-law 8 kHz, 20 ms frames
at real-time pace) and the native protocol, in turn. Each call is a conversation that
alternates a plain turn (a request the agent answers without a tool, or a sentence read
aloud) with a tool request (availability, a booking, its cancellation, the hours), from
the spoken tool evaluation's set (``bench/tool_eval/requests.yaml``, voiced and cached by
:mod:`bench.tool_eval.voices`). So tool turns and plain turns share the server, the load
and the calls, and their figures compare.

The caller is ``python -m bench caller``'s: a :class:`~bench.person.Person` that hears the
greeting out, listens to each answer to the end and talks into 1.5 s of silence, measured
at the client, the server's turn log telling the filler and the tool's phrase from the
answer. The rows and the report: :mod:`bench.tool_turns_report`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from itertools import chain, zip_longest
from pathlib import Path
from typing import Any

from bench.caller_bench import (
    TICK_S,
    TRANSPORTS,
    CallLog,
    Clip,
    Line,
    TurnLogFollower,
    call_log_from_json,
    hold_call,
    load_average,
    timeline_json,
)
from bench.person import Person
from bench.tool_eval import dataset
from bench.tool_eval.dataset import Utterance
from bench.tool_turns_report import NO_TOOL, render_markdown, summarize, tool_turn_rows
from voxpipe.clients.native_client import speech_end_sample, speech_start_sample
from voxpipe.config import Config
from voxpipe.engines.base import STT_SAMPLE_RATE

AGENT = Path(__file__).resolve().parent.parent / "examples/restaurant/agent.py"
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
TOOL_ORDER = ("check_availability", "book_table", "opening_hours", "cancel_booking")
GREETING_TIMEOUT_S = 20.0  # the longest the caller waits for the greeting to play out
GREETING_QUIET_S = 0.3  # quiet after the greeting before the caller speaks
READY_TIMEOUT_S = 600.0  # loading and warming the models; the time it took is reported


# -- the conversations -------------------------------------------------------------------------


def _interleave(*lists: Sequence[Utterance]) -> list[Utterance]:
    return [u for u in chain.from_iterable(zip_longest(*lists)) if u is not None]


def tool_requests(requests: Sequence[Utterance]) -> list[Utterance]:
    """The requests that need a tool, one of each tool in turn; a name's cancellation
    comes after its booking (the set lists both in the same order of names)."""
    by_tool = [[u for u in requests if u.tool == name] for name in TOOL_ORDER]
    return _interleave(*by_tool)


def plain_sentences(requests: Sequence[Utterance], read: Sequence[Utterance]) -> list[Utterance]:
    """The requests answered without a tool and the read sentences, in turn."""
    return _interleave([u for u in requests if u.tool is None], read)


def conversation(
    tools: Sequence[Utterance], plain: Sequence[Utterance], turns: int, call: int
) -> list[Utterance]:
    """``turns`` sentences, plain and tool in turn (plain first: "Hello, is this
    Luigi's?"); call ``call`` goes on where call ``call - 1`` stopped, round the lists."""
    per_kind = (turns + 1) // 2
    return [
        plain[(call * per_kind + i // 2) % len(plain)]
        if i % 2 == 0
        else tools[(call * per_kind + i // 2) % len(tools)]
        for i in range(turns)
    ]


def expected_tools(utterances: Sequence[Utterance]) -> dict[str, str | None]:
    """Each clip's intended tool: its name, :data:`NO_TOOL` for a request that needs none,
    None for a sentence read aloud."""
    return {u.id: (u.tool or NO_TOOL) if u.kind == "request" else None for u in utterances}


def clip_of(utterance: Utterance, audio: Any) -> Clip:
    rate = STT_SAMPLE_RATE
    start, end = speech_start_sample(audio, rate), speech_end_sample(audio, rate)
    return Clip(utterance.id, audio, rate, start / rate, end / rate)


# -- the line, greeted -------------------------------------------------------------------------


class GreetedLine(Line):
    """A line whose caller hears the agent's greeting out before saying anything: otherwise
    the greeting would be talked over and its tail taken for the first answer."""

    async def open(self) -> None:
        await super().open()
        deadline = time.monotonic() + GREETING_TIMEOUT_S
        mark, heard_ns = self.audio_mark(), None
        while time.monotonic() < deadline:
            await asyncio.sleep(TICK_S)
            now = time.monotonic_ns()
            if (new := self.audio_mark()) != mark:
                mark, heard_ns = new, now
            if heard_ns is None or self.playing_until_ns(now) > now:
                continue
            if now - heard_ns >= GREETING_QUIET_S * 1e9:
                return


# -- the calls ---------------------------------------------------------------------------------


async def hold_calls(
    port: int,
    turn_log: Path,
    transports: Sequence[str],
    scripts: Sequence[Sequence[Clip]],
    gap_ms: int,
    pause_ms: int,
) -> tuple[list[CallLog], list[dict[str, Any]]]:
    """Each script said once per transport, the transports' order alternating per call."""
    follower = TurnLogFollower(turn_log)
    reader = asyncio.create_task(follower.run(), name="turn-log")
    logs: list[CallLog] = []
    failures: list[dict[str, Any]] = []
    try:
        for call, clips in enumerate(scripts):
            for transport in transports if call % 2 == 0 else list(reversed(transports)):
                line = GreetedLine(transport, port, None)
                try:
                    log = await hold_call(line, clips, follower, call, Person(gap_ms, pause_ms))
                    logs.append(dataclasses.replace(log, order=len(logs), conversation=call))
                except Exception as exc:  # one failed call is reported, the bench goes on
                    print(f"  {transport} call {call + 1} failed: {exc!r}", flush=True)
                    failures.append({"transport": transport, "call": call, "error": repr(exc)})
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return logs, failures


def server_config(base: Path | None, workdir: Path) -> Path:
    """The user's config at temperature 0: the same words each run, so runs compare."""
    data: dict[str, Any] = json.loads(base.read_text()) if base else {}
    data.setdefault("llm", {})["temperature"] = 0.0
    path = workdir / "config.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def hold_on_a_restaurant_server(
    args: argparse.Namespace,
    config_path: Path,
    workdir: Path,
    transports: Sequence[str],
    scripts: Sequence[Sequence[Clip]],
) -> tuple[list[CallLog], list[dict[str, Any]], float]:
    from voxpipe.loadtest.server_process import ServerProcess

    (workdir / "turns.jsonl").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="tool-turns-") as book:
        env = {"VOXPIPE_AGENT": f"{AGENT}:agent", "RESTAURANT_DB": f"{book}/restaurant.sqlite3"}
        print(f"starting the restaurant server (load average {load_average()}) ...", flush=True)
        server = ServerProcess.start(workdir, port=args.port, env=env, config=config_path)
        try:
            ready_s = server.wait_ready(READY_TIMEOUT_S)
            print(f"ready after {ready_s:.1f} s; {len(scripts)} calls x {args.turns} turns "
                  f"through {', '.join(transports)}, interleaved", flush=True)  # fmt: skip
            logs, failures = asyncio.run(
                hold_calls(
                    server.port, server.turn_log, transports, scripts, args.gap_ms, args.pause_ms
                )
            )
        finally:
            server.stop()
    return logs, failures, ready_s


# -- the command -------------------------------------------------------------------------------


def the_sentences(
    audio_dir: Path,
) -> tuple[list[Utterance], list[Utterance], Mapping[str, str | None], Any]:
    from bench.tool_eval.voices import Voices

    requests = dataset.requests()
    read = dataset.read_sentences(recordings=dataset.librivox_recordings(LIBRIVOX))
    voices = Voices(audio_dir)
    made = voices.prepare([*requests, *read])
    print(f"speech: {len(requests) + len(read)} utterances, {made} voiced now, in {audio_dir}")
    tools, plain = tool_requests(requests), plain_sentences(requests, read)
    return tools, plain, expected_tools([*requests, *read]), voices.audio


def main(args: argparse.Namespace) -> int:
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if args.turns < 2 or args.calls < 1:
        raise SystemExit("tool-turns needs --calls 1 or more and --turns 2 or more")
    if not transports or set(transports) - set(TRANSPORTS):
        raise SystemExit(f"tool-turns speaks {', '.join(TRANSPORTS)}, not {args.transports!r}")
    out: Path = args.out
    if out.is_dir():  # checked now: found at the end, it cost a 30-minute run its timelines
        out = out / "tool-turns.json"
    workdir = out.parent / "tool-turns-server"
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = server_config(args.config, workdir)
    config = Config.load(config_path)
    tools, plain, expected, audio_of = the_sentences(args.audio_dir)
    scripts = [
        [clip_of(u, audio_of(u)) for u in conversation(tools, plain, args.turns, call)]
        for call in range(0 if args.timelines else args.calls)
    ]
    load_before = load_average()
    ready_s: float | None = None
    if args.timelines is not None:  # calls recorded by an earlier run, analysed again
        logs = [call_log_from_json(c) for c in json.loads(args.timelines.read_text())]
        transports = [t for t in transports if any(log.transport == t for log in logs)]
        failures: list[dict[str, Any]] = []
    else:
        logs, failures, ready_s = hold_on_a_restaurant_server(
            args, config_path, workdir, transports, scripts
        )
    load_after = load_average()
    rows, filler_frames = tool_turn_rows(logs, expected)
    silence = config.turn.silence_ms
    summary = summarize(rows, transports, silence, args.gap_ms)
    filler = repr(config.deadlines.filler) if config.deadlines.filler else "off"
    header = (
        f"bench tool-turns: {len(logs)} calls of {len(rows)} sentences in all "
        f"({', '.join(transports)} in turn), one server of the restaurant agent "
        f"({AGENT.name}); plain and tool turns alternate in each call; LLM temperature 0; "
        f"end-of-turn silence {silence} ms; filler {filler} when no words are on their way "
        f"{config.deadlines.filler_ms} ms after the caller's; the caller talks after "
        f"{args.gap_ms} ms of quiet. Load average {load_before} before, {load_after} after "
        f"the calls{'; ' + str(len(failures)) + ' calls failed' if failures else ''}."
    )
    text = render_markdown(summary, header, args.gap_ms)
    print("\n" + text)
    report = {
        "summary": summary,
        "turns": rows,
        "failures": failures,
        "filler_frames": filler_frames,
        "ready_after_s": None if ready_s is None else round(ready_s, 1),
        "load_average": {"before": load_before, "after_calls": load_after},
        "settings": {
            "calls": args.calls,
            "turns": args.turns,
            "transports": transports,
            "agent": f"{AGENT}:agent",
            "gap_ms": args.gap_ms,
            "pause_ms": args.pause_ms,
            "silence_ms": silence,
            "filler": config.deadlines.filler,
            "filler_ms": config.deadlines.filler_ms,
            "llm_first_token_deadline_ms": config.deadlines.llm_first_token_ms,
            "cpus": os.cpu_count(),
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(text + "\n")
    written = [out, out.with_suffix(".md")]
    if args.timelines is None:
        written.append(out.with_name(f"{out.stem}-timelines.json"))
        written[-1].write_text(json.dumps([timeline_json(log) for log in logs]))
    print(f"\nwrote {', '.join(map(str, written))}")
    return 0 if not failures else 1
