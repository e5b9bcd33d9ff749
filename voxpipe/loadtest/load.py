"""``voxpipe load``: many concurrent callers, and the most calls a machine can hold.

A step runs N simulated callers (``voxpipe.loadtest.callers``: real speech at
real-time pace, then listening) against one server for ``--duration`` seconds,
and reports the voice-to-voice latency the callers felt (p50/p95/p99/max),
the server's queue waits and buffer ages, calls refused at the door, turns
completed and failed, and the server's memory.

By default each step gets a fresh server, started here on a free port with
``--max-calls`` as its admission limit (large by default, so a step finds the
machine's limit, not the configured one); ``--url`` points the callers at a
running server instead. ``--find-capacity`` searches for the largest N whose
p99 stays under ``--slo-ms`` (``voxpipe.loadtest.capacity``), then runs 2× that
to show what overload looks like. Results go to ``load.json`` and a
self-contained ``load.html`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxpipe.loadtest.aggregate import Memory, StepResult, summarize_step
from voxpipe.loadtest.callers import CallerPlan, Clip, librivox_clips, run_callers
from voxpipe.loadtest.capacity import CapacitySearch
from voxpipe.loadtest.report import render
from voxpipe.loadtest.scrape import MemorySampler, histograms, http_base, scrape
from voxpipe.loadtest.server_process import ServerProcess
from voxpipe.loadtest.stats import table

DEFAULT_MAX_CALLS = 1000  # admission far above what one machine holds
SETTLE_S = 2.0  # between steps on a reused server: let the last calls' cleanup finish


@dataclass
class StepServer:
    """The server a step's callers dial."""

    url: str
    base: str  # http://host:port, for /metrics
    pid: int | None  # known when this process started the server


class Servers:
    """Starts (and stops) the servers the steps run against, or hands out ``--url``."""

    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.url: str | None = args.url
        self.fresh = not args.reuse_server
        self.config: Path | None = args.config
        self.max_calls: int = args.max_calls or DEFAULT_MAX_CALLS
        self.out = out
        self.current: ServerProcess | None = None
        self.started = 0

    def describe(self) -> str:
        if self.url:
            return f"running server at {self.url}"
        kind = "a fresh server per step" if self.fresh else "one server for all steps"
        return f"{kind}, started by voxpipe load, max_calls={self.max_calls}"

    def for_step(self) -> StepServer:
        if self.url:
            return StepServer(self.url, http_base(self.url), None)
        if self.current is not None and (self.fresh or not self.current.alive()):
            self.stop()
        if self.current is None:
            self.started += 1
            workdir = self.out / "servers" / f"{self.started:02d}"
            env = {"VOXPIPE_LIMITS__MAX_CALLS": str(self.max_calls)}
            self.current = ServerProcess.start(workdir, env=env, config=self.config)
            print(f"  starting a server on port {self.current.port} (log: {workdir})", flush=True)
            self.current.wait_ready()
        else:
            time.sleep(SETTLE_S)
        return StepServer(self.current.ws, self.current.http, self.current.process.pid)

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


async def run_step(
    server: StepServer,
    calls: int,
    duration_s: float,
    clips: list[Clip],
    plan: CallerPlan,
    seed: int,
    role: str,
) -> StepResult:
    """One step: ``calls`` callers for ``duration_s``, with the server watched meanwhile."""
    before = await scrape(server.base)
    started = time.monotonic()
    async with MemorySampler(server.pid, server.base) as memory:
        callers = await run_callers(server.url, calls, duration_s, clips, plan, seed)
    elapsed = time.monotonic() - started
    after = await scrape(server.base)
    return StepResult(
        calls=calls,
        duration_s=duration_s,
        elapsed_s=elapsed,
        callers=callers,
        memory=Memory(memory.source, memory.baseline, memory.peak, memory.samples),
        buffer_age_ms=buffer_ages(before, after),
        role=role,
    )


def buffer_ages(before: str, after: str) -> dict[str, dict[str, float]]:
    """The step's share of ``voxpipe_buffer_age_seconds``, per direction, in ms."""
    name = "voxpipe_buffer_age_seconds"
    old = histograms(before, name, "direction") if before else {}
    new = histograms(after, name, "direction") if after else {}
    return {d: h.minus(old.get(d)).summary_ms() for d, h in sorted(new.items())}


def _line(step: dict[str, Any]) -> str:
    v2v, o, t = step["voice_to_voice_ms"], step["outcomes"], step["turns"]
    memory = step.get("memory") or {}
    peak, per_call = memory.get("peak_bytes"), memory.get("per_call_bytes")
    mem = f"; peak RSS {peak / 2**20:.0f} MiB" if peak else ""
    mem += f" (+{per_call / 2**20:.1f} MiB/call)" if per_call else ""
    slo = ""
    if "meets_slo" in step:
        slo = "  [meets SLO]" if step["meets_slo"] else "  [misses SLO]"
    return (
        f"  {step['calls']} call(s): v2v p50 {v2v.get('p50', '-')} p95 {v2v.get('p95', '-')} "
        f"p99 {v2v.get('p99', '-')} max {v2v.get('max', '-')} ms over {v2v.get('n', 0)} turns; "
        f"{t['failed']} failed; {o['rejected']} rejected, {o['crashed']} crashed{mem}{slo}"
    )


class LoadRun:
    """The steps of one ``voxpipe load`` invocation, written out after each step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.servers = Servers(args, self.out)
        self.clips = librivox_clips()
        self.plan = CallerPlan()
        self.slo_ms: float = args.slo_ms
        self.steps: list[dict[str, Any]] = []
        self.capacity: dict[str, Any] | None = None
        self.command = shlex.join(["voxpipe", *sys.argv[1:]])

    def measure(self, calls: int, role: str) -> dict[str, Any]:
        print(f"step {len(self.steps) + 1}: {calls} call(s), {role}", flush=True)
        server = self.servers.for_step()
        seed = self.args.seed + 1000 * len(self.steps)
        result = asyncio.run(
            run_step(server, calls, self.args.duration, self.clips, self.plan, seed, role)
        )
        step = summarize_step(result, self.slo_ms)
        self.steps.append(step)
        print(_line(step), flush=True)
        self.write()
        return step

    def find_capacity(self) -> None:
        search = CapacitySearch(max_calls=self.args.max_search_calls)
        searched: list[dict[str, Any]] = []
        self.capacity = {"slo_ms": self.slo_ms, "searched": searched, "capacity": 0}
        while (calls := search.next_calls()) is not None:
            step = self.measure(calls, "search")
            search.record(calls, step["meets_slo"])
            searched.append(
                {
                    "calls": calls,
                    "p99_ms": step["voice_to_voice_ms"].get("p99"),
                    "meets_slo": step["meets_slo"],
                }
            )
            self.capacity.update(capacity=search.capacity, capped=search.capped)
        print(f"capacity at p99 < {self.slo_ms:g} ms: {search.capacity} call(s)", flush=True)
        if search.capacity:
            step = self.measure(2 * search.capacity, "overload")
            self.capacity["overload"] = {
                "calls": step["calls"],
                "p99_ms": step["voice_to_voice_ms"].get("p99"),
                "meets_slo": step["meets_slo"],
                "rejected": step["outcomes"]["rejected"],
                "crashed": step["outcomes"]["crashed"],
                "failed_turns": step["turns"]["failed"],
            }
        self.write()

    def document(self) -> dict[str, Any]:
        lo, hi = self.plan.think_s
        return {
            "command": self.command,
            "server": self.servers.describe(),
            "think": f"{lo:g}–{hi:g} s",
            "duration_s": self.args.duration,
            "slo_ms": self.slo_ms,
            "capacity": self.capacity,
            "steps": self.steps,
        }

    def write(self) -> None:
        doc = self.document()
        (self.out / "load.json").write_text(json.dumps(doc, indent=2) + "\n")
        (self.out / "load.html").write_text(render(doc))


def main(args: argparse.Namespace) -> int:
    if args.url and args.max_calls:
        print("voxpipe load: --max-calls applies only to servers it starts; ignored", flush=True)
    run = LoadRun(args)
    print(f"voxpipe load: {run.servers.describe()}; results in {run.out}", flush=True)
    try:
        if args.find_capacity:
            run.find_capacity()
        else:
            run.measure(args.calls, "load")
    finally:
        run.servers.stop()
    rows = [(f"{s['calls']} calls ({s['role']})", s["voice_to_voice_ms"]) for s in run.steps]
    print("\nvoice-to-voice latency, caller side")
    print(table(rows))
    print(f"\nwrote {run.out / 'load.json'} and {run.out / 'load.html'}")
    crashed = sum(s["outcomes"]["crashed"] for s in run.steps)
    return 1 if crashed else 0
