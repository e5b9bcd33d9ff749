"""``python -m bench cluster``: what session affinity saves, and how long a worker's death costs.

Two measurements on :class:`~voxpipe.server.local_cluster.LocalCluster` (Redis, the
``--workers`` supervisor and nginx rendered from ``deploy/nginx.conf.template``):

1. **Affinity vs round-robin.** Two fresh clusters of 2 workers: the shipped config (nginx
   hashes ``?session_id=``) and the same config less its ``hash ... consistent;`` line (nginx
   round-robins; a baseline, not a deployment). In each, S sessions of T turns of real speech,
   every turn on a new connection (drop, then resume): a caller whose network drops between
   turns, or a client that connects per turn. With affinity every reconnect finds the worker
   that holds the warm LLM context; round-robin sends it to the other worker, which restores
   the session from Redis and rebuilds the context. Per mode: the server's time from the end
   of speech to the first LLM token (``turn.metrics`` ``stages_ms.llm_first_token``), the LLM
   prefill tokens of the turn, the client's voice-to-voice, how many reconnects were
   restored, the rebuild's own cost, and round_robin/affinity ratios. A session's first turn
   has no context to keep warm: it is reported apart. The system prompt is long
   (:data:`SYSTEM_PROMPT`, a few hundred tokens) so that a rebuild has something to rebuild.
   The worker that restores starts rebuilding as soon as the session is restored, while the
   caller is still speaking, so part (or all) of the rebuild hides behind the speech: the
   TTFT shows what is left of it, ``context_rebuild_ms`` what it cost the worker. Each
   worker first answers uncounted warm-up turns with the same system prompt, as a worker in
   service would have. The persona is also the workers' configured system prompt
   (``llm.system_prompt``), so a worker's warm-up, a restarted one's included, leaves its
   KV in the context, and a rebuild evaluates only the conversation after it.
2. **Failover gap.** On the affinity cluster: a session answers 2 turns; during the reply to
   a third the worker serving it is SIGKILLed. Measured from the kill: the client's
   reconnect (``session.started``, on the other worker, restored from Redis) and the first
   reply audio frame of the re-answered turn (a frame numbered past the last one the dead
   worker's connection delivered), with the context rebuild the new worker reports. Each
   kill starts from a full cluster: the supervisor restarts the worker and the next kill
   waits for both workers' ``/readyz``.

Results: ``bench-results/cluster.json`` (every turn and kill) and a printed table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voxpipe.clients.native_client import NativeClient, TurnResult
from voxpipe.loadtest.scrape import counter, histograms, scrape
from voxpipe.loadtest.stats import summarize
from voxpipe.server.local_cluster import Balance, LocalCluster, free_port_run

MODES: dict[str, Balance] = {"affinity": "session", "round_robin": "round_robin"}
WORKER_HEADER = "x-voxpipe-worker"
TURN_TIMEOUT_S = 90.0
RECONNECT_RETRY_S = 10.0
FAILOVER_RETRY_S = 30.0
CLOSE_TIMEOUT_S = 30.0
RESTART_TIMEOUT_S = 600.0
FRAME_POLL_S = 0.005  # how finely the first frame after a failover is timed
SHOWN = ("p50", "p95", "max")

# A realistic agent persona with policies: long enough (a few hundred tokens) that a worker
# that never saw the session has real context to rebuild.
SYSTEM_PROMPT = (
    "You are Ada, the voice assistant of Northwind Energy, a regional electricity and gas "
    "supplier. You answer customers who call the support line. You speak on a phone call, so "
    "every reply is one or two short spoken sentences, in plain words, with no lists, no "
    "markdown, no emoji, no web addresses spelled out and no reading of long numbers.\n"
    "What you can help with: explaining a bill and its tariff, taking a meter reading, "
    "changing the date of a direct debit, reporting a move to a new address, booking a smart "
    "meter installation, explaining the green tariff, and passing a complaint to the "
    "customer care team.\n"
    "Policies you always follow. First, before you discuss any account, ask for the "
    "customer's account number or the first line of the address and the postcode; never "
    "read personal data back in full, only confirm it. Second, you cannot take card "
    "payments on this line: offer the automated payment line or the app instead. Third, if "
    "the caller mentions a smell of gas, tell them at once to leave the building, not to use "
    "switches or flames, and to call the national gas emergency number; say nothing else "
    "until they confirm they are safe. Fourth, if the caller says they are struggling to "
    "pay, be kind, mention the hardship fund and the option of a payment plan, and offer to "
    "transfer them to a specialist adviser. Fifth, if a customer depends on medical "
    "equipment powered by electricity, offer to add them to the priority services register. "
    "Sixth, never promise a refund, a credit or a compensation amount; say that the team "
    "will review it and write within five working days. Seventh, if the caller asks for a "
    "human, offer the transfer straight away and say the wait is usually under ten minutes. "
    "Eighth, you do not give financial, legal or medical advice.\n"
    "Opening hours of the human team are eight in the morning to eight in the evening on "
    "weekdays and nine to five on Saturdays. Outages are shown on the network operator's "
    "map, not by Northwind. The standing charge and unit rates change on the first of "
    "January, April, July and October.\n"
    "If you did not understand the caller, say so briefly and ask them to repeat. If the "
    "caller talks about something unrelated to energy, answer politely in one sentence and "
    "steer back to how you can help with their account. Keep a warm, calm and efficient tone."
)


# -- ports, workers, metrics ------------------------------------------------------


def worker_of(client: NativeClient) -> str:
    """The worker that answered the client's latest handshake (through nginx)."""
    name: str = client._ws.response.headers[WORKER_HEADER]
    return name


def port_of(cluster: LocalCluster, worker: str) -> int:
    """A worker's port from its name (``w0`` is the first port), alive or not."""
    return cluster.worker_ports[int(worker.removeprefix("w"))]


def rebuild_metrics(text: str) -> dict[str, float]:
    """A worker's context rebuilds so far and the restores it made, from its ``/metrics``."""
    series = histograms(text, "voxpipe_context_rebuild_seconds", "").get("")
    return {
        "context_rebuild_count": series.count if series else 0.0,
        "context_rebuild_seconds_sum": round(series.sum, 3) if series else 0.0,
        "restores": counter(text, "voxpipe_session_restores_total", outcome="restored"),
    }


async def workers_metrics(cluster: LocalCluster) -> dict[str, dict[str, float]]:
    """:func:`rebuild_metrics` of every worker, by port (straight, not through nginx)."""
    return {
        str(port): rebuild_metrics(await scrape(f"http://127.0.0.1:{port}"))
        for port in cluster.worker_ports
    }


async def history_user_messages(client: NativeClient) -> int:
    """How many caller messages the conversation the server holds has."""
    before = len(client.events)
    await client.send_raw(json.dumps({"type": "history.get"}))

    def probe() -> dict[str, Any] | None:
        return next((e for e in client.events[before:] if e["type"] == "history"), None)

    history: dict[str, Any] = await client.wait_for(probe, 10)
    return sum(m.get("role") == "user" for m in history.get("messages", []))


def error_events(client: NativeClient) -> list[dict[str, Any]]:
    return [{"code": e.get("code"), "message": e.get("message")} for e in client.errors]


# -- clips ---------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    name: str
    audio: np.ndarray
    rate: int


def load_clips() -> list[Clip]:
    """The clips of ``python -m bench conversation`` (Debian's pocketsphinx test speech)."""
    from bench.conversation import load_script

    return [Clip(path.name, audio, rate) for path, audio, rate in load_script()]


# -- one turn, as a row -----------------------------------------------------------


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)


def turn_row(
    mode: str,
    session: int,
    turn: int,
    metrics: dict[str, Any],
    client_v2v_ms: float | None,
    worker: str,
    started: dict[str, Any] | None,
) -> dict[str, Any]:
    """One turn of part 1 from its ``turn.metrics`` event; ``started`` is the reconnect's
    ``session.started`` (None for a session's first turn, on its first connection)."""
    stages = metrics.get("stages_ms", {})
    llm = metrics.get("llm", {})
    counts = metrics.get("session_counts", {})
    restored = None if started is None else bool(started.get("restored"))
    return {
        "mode": mode,
        "session": session,
        "turn": turn,
        "server_turn_id": metrics.get("turn_id"),
        "worker": worker,
        "reconnected": started is not None,
        "restored": restored,
        "status": metrics.get("status"),
        "ttft_ms": _round(stages.get("llm_first_token")),
        "llm_ttft_compute_ms": _round(metrics.get("compute_ms", {}).get("llm_ttft")),
        "llm_queue_ms": _round(metrics.get("queue_ms", {}).get("llm")),
        "prompt_tokens": llm.get("prompt_tokens"),
        "prefill_tokens": llm.get("prefill_tokens"),
        "reused_tokens": llm.get("reused_tokens"),
        "state_restored": llm.get("state_restored"),
        "preempted": metrics.get("preempted"),
        "filler": metrics.get("filler"),
        "client_v2v_ms": _round(client_v2v_ms),
        "server_v2v_ms": _round(metrics.get("voice_to_voice_ms")),
        # The session's counts carry the latest rebuild; it is this reconnect's when restored.
        "context_rebuild_ms": counts.get("context_rebuild_ms") if restored else None,
        "context_rebuild_tokens": counts.get("context_rebuild_tokens") if restored else None,
        "transcript": metrics.get("transcript", ""),
        "reply": metrics.get("reply", ""),
    }


def integrity_problems(session: dict[str, Any]) -> list[str]:
    """What went wrong with a session's conversation, beyond latency: a failed session,
    error events, frames or events received twice, turns not numbered 1..T, a turn not
    completed, or a history that does not hold every answered utterance once."""
    problems = []
    if session.get("failed"):
        problems.append(f"failed: {session['failed']}")
    problems += [f"error event {e.get('code')}: {e.get('message')}" for e in session["errors"]]
    if session["duplicate_frames"]:
        problems.append(f"{session['duplicate_frames']} frames received twice")
    if session["duplicate_events"]:
        problems.append(f"{session['duplicate_events']} events received twice")
    ids = session["server_turn_ids"]
    if ids != list(range(1, len(ids) + 1)):
        problems.append(f"server turn ids {ids}")
    not_done = [s for s in session["statuses"] if s != "completed"]
    if not_done:
        problems.append(f"turn statuses {session['statuses']}")
    users = session.get("history_user_messages")
    if users is not None and users != len(ids):
        problems.append(f"history holds {users} caller messages for {len(ids)} turns")
    return problems


# -- part 1: sessions of reconnecting turns ------------------------------------------------


async def warm_up(cluster: LocalCluster, clip: Clip, turns: int) -> None:
    """``turns`` turns on each worker, straight to its port: not counted, so neither mode's
    first counted turn on a worker pays for that worker's first inference."""
    for port in cluster.worker_ports:
        async with NativeClient(f"ws://127.0.0.1:{port}/v1/voice") as client:
            await client.connect(instructions=SYSTEM_PROMPT)
            for _ in range(turns):
                await client.speak(clip.audio, clip.rate, timeout_s=TURN_TIMEOUT_S)


async def one_session(
    cluster: LocalCluster, mode: str, index: int, clips: Sequence[Clip], turns: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A session of ``turns`` turns, each on a new connection; its rows and its record."""
    client = NativeClient(cluster.ws)
    session_id = f"bench-{mode}-{index}-{uuid.uuid4().hex[:8]}"
    rows: list[dict[str, Any]] = []
    record: dict[str, Any] = {"mode": mode, "session": index, "session_id": session_id}
    try:
        await client.connect(session_id=session_id, instructions=SYSTEM_PROMPT)
        started: dict[str, Any] | None = None
        previous = ""
        for t in range(turns):
            if t:
                await client.drop()
                started = await client.reconnect(retry_s=RECONNECT_RETRY_S)
            worker = worker_of(client)
            clip = clips[(index + t) % len(clips)]
            turn = await client.speak(clip.audio, clip.rate, timeout_s=TURN_TIMEOUT_S)
            row = turn_row(
                mode, index, t + 1, turn.metrics, turn.voice_to_voice_ms, worker, started
            )
            row["moved"] = bool(previous) and worker != previous
            row["clip"] = clip.name
            previous = worker
            rows.append(row)
            print(_turn_line(row), flush=True)
        record["history_user_messages"] = await history_user_messages(client)
    except Exception as exc:  # reported with the session; the bench goes on
        record["failed"] = repr(exc)
        print(f"  {mode} session {index + 1} failed: {exc!r}", flush=True)
    finally:
        await client.close()
    record.update(
        server_turn_ids=[r["server_turn_id"] for r in rows],
        statuses=[r["status"] for r in rows],
        workers=[r["worker"] for r in rows],
        restored=[r["restored"] for r in rows],
        errors=error_events(client),
        duplicate_frames=len(client.duplicate_frames),
        duplicate_events=len(client.duplicate_events),
    )
    record["problems"] = integrity_problems(record)
    return rows, record


def _turn_line(row: dict[str, Any]) -> str:
    how = "first" if not row["reconnected"] else "restored" if row["restored"] else "resumed"
    said = f"{row['transcript']!r:.36} -> {row['reply']!r:.40}"
    return (
        f"  {row['mode']:<11} s{row['session'] + 1} t{row['turn']} {row['worker']:<3} "
        f"{how:<8} ttft {_num(row['ttft_ms']):>5} ms  prefill {_num(row['prefill_tokens']):>4}"
        f"  v2v {_num(row['client_v2v_ms']):>5} ms  {said}"
    )


def _num(value: float | None) -> str:
    return "--" if value is None else f"{value:.0f}"


async def run_mode(
    cluster: LocalCluster, mode: str, clips: Sequence[Clip], sessions: int, turns: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sessions one after another: each connection is the only one nginx routes then,
    so round-robin alternates the workers between a session's turns."""
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for index in range(sessions):
        session_rows, record = await one_session(cluster, mode, index, clips, turns)
        rows += session_rows
        records.append(record)
    return rows, records


# -- part 2: a worker killed mid-reply --------------------------------------------------


def _ms_since(since_ns: int, at_ns: int | None) -> float | None:
    return None if at_ns is None else round((at_ns - since_ns) / 1e6, 1)


def answer_audio_ms(first_audio_ms: float | None, stages: dict[str, float]) -> float | None:
    """From the kill to the re-answered turn's first frame of the answer itself: when the
    first frame heard was the filler ("One moment.", sent because the first LLM token was
    late), the answer came ``first_audio_sent - filler_sent`` later on the server's clock."""
    if first_audio_ms is None or "first_audio_sent" not in stages:
        return None
    filler = stages.get("filler_sent")
    if filler is None or filler > stages["first_audio_sent"]:
        return first_audio_ms
    return round(first_audio_ms + stages["first_audio_sent"] - filler, 1)


def _answered(client: NativeClient, after: int) -> TurnResult | None:
    return next(
        (t for tid, t in sorted(client.turns.items()) if tid > after and t.complete.is_set()),
        None,
    )


async def one_failover(cluster: LocalCluster, rep: int, clips: Sequence[Clip]) -> dict[str, Any]:
    """Two answered turns, a third said, its reply's audio begins: SIGKILL the worker."""
    first, second, third = (clips[(3 * rep + i) % len(clips)] for i in range(3))
    client = NativeClient(cluster.ws)
    session_id = f"bench-failover-{rep}-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {"rep": rep, "session_id": session_id}
    out["clips"] = [first.name, second.name, third.name]
    killed_ns = 0
    try:
        await client.connect(session_id=session_id, instructions=SYSTEM_PROMPT)
        home = out["home"] = worker_of(client)
        victim = await asyncio.to_thread(cluster.worker, port_of(cluster, home))
        for clip in (first, second):
            await client.speak(clip.audio, clip.rate, timeout_s=TURN_TIMEOUT_S)
        before = max(client.turns)
        others = [p for p in cluster.worker_ports if p != port_of(cluster, home)]
        metrics_before = {p: rebuild_metrics(await scrape(f"http://127.0.0.1:{p}")) for p in others}
        client.say(third.audio, third.rate)
        await client.wait_for(
            lambda: any(t.first_audio_ns for tid, t in client.turns.items() if tid > before),
            TURN_TIMEOUT_S,
        )
        out["seq_at_kill"] = client.last_audio_seq
        killed_ns = time.monotonic_ns()
        os.kill(int(str(victim["pid"])), signal.SIGKILL)
        out["killed_pid"] = victim["pid"]
        await asyncio.wait_for(client._ws.wait_closed(), CLOSE_TIMEOUT_S)
        out["kill_to_closed_ms"] = _ms_since(killed_ns, time.monotonic_ns())
        threshold = out["seq_at_close"] = client.last_audio_seq  # frames in flight included
        if _answered(client, before) is not None:
            raise RuntimeError("the reply was complete before the kill: nothing to re-answer")
        started = await client.reconnect(retry_s=FAILOVER_RETRY_S)
        out["kill_to_reconnected_ms"] = _ms_since(killed_ns, time.monotonic_ns())
        out["restored"] = bool(started.get("restored"))
        away = out["away"] = worker_of(client)
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while client.last_audio_seq <= threshold:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply audio {TURN_TIMEOUT_S:.0f} s after the reconnect")
            await asyncio.sleep(FRAME_POLL_S)
        out["kill_to_first_audio_ms"] = _ms_since(killed_ns, time.monotonic_ns())
        turn: TurnResult = await client.wait_for(lambda: _answered(client, before), TURN_TIMEOUT_S)
        await client.wait_playback_done()
        counts = turn.metrics.get("session_counts", {})
        llm = turn.metrics.get("llm", {})
        stages = turn.metrics.get("stages_ms", {})
        out.update(
            kill_to_answer_audio_ms=answer_audio_ms(out["kill_to_first_audio_ms"], stages),
            stages_ms=stages,
            status=turn.status,
            server_turn_id=turn.turn_id,
            ttft_ms=_round(stages.get("llm_first_token")),
            prefill_tokens=llm.get("prefill_tokens"),
            filler=turn.metrics.get("filler"),
            context_rebuild_ms=counts.get("context_rebuild_ms"),
            context_rebuild_tokens=counts.get("context_rebuild_tokens"),
        )
        away_port = port_of(cluster, away)
        after = rebuild_metrics(await scrape(f"http://127.0.0.1:{away_port}"))
        was = metrics_before.get(away_port, {})
        count = after["context_rebuild_count"] - was.get("context_rebuild_count", 0.0)
        seconds = after["context_rebuild_seconds_sum"] - was.get("context_rebuild_seconds_sum", 0)
        out["metrics_rebuilds"] = count
        out["metrics_rebuild_ms"] = round(seconds * 1000 / count, 1) if count else None
        out["errors"] = error_events(client)
        print(
            f"  failover {rep + 1}: {home} killed -> {away} restored={out['restored']}: "
            f"reconnected {_num(out['kill_to_reconnected_ms'])} ms, first audio "
            f"{_num(out['kill_to_first_audio_ms'])} ms, rebuild "
            f"{_num(out['context_rebuild_ms'])} ms ({_num(out['context_rebuild_tokens'])} tokens)",
            flush=True,
        )
    except Exception as exc:
        out["error"] = repr(exc)
        print(f"  failover {rep + 1} failed: {exc!r}", flush=True)
    finally:
        await client.close()
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while not await asyncio.to_thread(cluster.workers_ready):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the killed worker was not back in {RESTART_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.2)
    if killed_ns:
        out["worker_back_s"] = round((time.monotonic_ns() - killed_ns) / 1e9, 1)
    return out


# -- the report -----------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def summarize_mode(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One mode: the completed turns after the first of each session (each on a resumed or
    restored connection), and the first turns apart."""
    rows = list(rows)
    done = [r for r in rows if r["status"] == "completed"]
    later = [r for r in done if r["reconnected"]]
    first = [r for r in done if not r["reconnected"]]
    reconnects = [r for r in rows if r["reconnected"]]
    restored = sum(bool(r["restored"]) for r in reconnects)
    moved = sum(bool(r.get("moved")) for r in reconnects)
    return {
        "turns": len(rows),
        "completed": len(done),
        "reconnects": len(reconnects),
        "restored": restored,
        "restored_fraction": round(restored / len(reconnects), 3) if reconnects else None,
        "moved_fraction": round(moved / len(reconnects), 3) if reconnects else None,
        "ttft_ms": summarize(r["ttft_ms"] for r in later),
        "prefill_tokens": summarize(r["prefill_tokens"] for r in later),
        "client_v2v_ms": summarize(r["client_v2v_ms"] for r in later),
        "server_v2v_ms": summarize(r["server_v2v_ms"] for r in later),
        "context_rebuild_ms": summarize(r["context_rebuild_ms"] for r in later),
        "fillers": sum(bool(r.get("filler")) for r in later),
        "first_turn": {
            "turns": len(first),
            "ttft_ms": summarize(r["ttft_ms"] for r in first),
            "prefill_tokens": summarize(r["prefill_tokens"] for r in first),
            "client_v2v_ms": summarize(r["client_v2v_ms"] for r in first),
        },
    }


def compare(summary: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """round_robin / affinity of the later turns' TTFT (p50, p95), prefill and v2v (p50)."""
    rr, aff = summary.get("round_robin", {}), summary.get("affinity", {})

    def ratio(key: str, p: str) -> float | None:
        return _ratio(rr.get(key, {}).get(p), aff.get(key, {}).get(p))

    return {
        "ttft_p50": ratio("ttft_ms", "p50"),
        "ttft_p95": ratio("ttft_ms", "p95"),
        "prefill_tokens_p50": ratio("prefill_tokens", "p50"),
        "client_v2v_p50": ratio("client_v2v_ms", "p50"),
    }


FAILOVER_GAPS = (
    "kill_to_reconnected_ms",
    "kill_to_first_audio_ms",
    "kill_to_answer_audio_ms",
    "ttft_ms",
    "context_rebuild_ms",
    "metrics_rebuild_ms",
    "worker_back_s",
)


def summarize_failover(reps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """p50, max and every value of each gap over the kills that went through."""
    reps = list(reps)
    ok = [r for r in reps if not r.get("error")]
    out: dict[str, Any] = {
        "kills": len(reps),
        "failed": len(reps) - len(ok),
        "restored": sum(bool(r.get("restored")) for r in ok),
    }
    for key in FAILOVER_GAPS:
        values = [r.get(key) for r in ok]
        stats = summarize(values)
        out[key] = {"p50": stats.get("p50"), "max": stats.get("max"), "values": values}
    return out


def _cells(stats: dict[str, float], width: int = 6) -> str:
    return "".join(
        f"{'–' if stats.get(p) is None else format(stats[p], '.0f'):>{width}}" for p in SHOWN
    )


def render(report: dict[str, Any]) -> str:
    """The compact table ``python -m bench cluster`` prints."""
    summary, cmp, params = report["summary"], report["compare"], report["params"]
    lines = [
        f"bench cluster: {params['workers']} workers, {params['sessions']} sessions x "
        f"{params['turns']} turns per mode, a new connection every turn; first-turn prompt "
        f"{report.get('first_turn_prompt_tokens') or '?'} tokens (mostly the system prompt)",
        "",
        "turns after the first (p50 / p95 / max):",
        f"{'mode':<12}{'turns':>6}{'restored':>10}   {'TTFT ms':^18}  {'prefill tokens':^18}  "
        f"{'client v2v ms':^18}  {'rebuild ms':^18}",
    ]
    for mode, s in summary.items():
        restored = f"{s['restored']}/{s['reconnects']}"
        lines.append(
            f"{mode:<12}{s['completed'] - s['first_turn']['turns']:>6}{restored:>10}   "
            f"{_cells(s['ttft_ms'])}  {_cells(s['prefill_tokens'])}  "
            f"{_cells(s['client_v2v_ms'])}  {_cells(s['context_rebuild_ms'])}"
        )
    lines += [
        "",
        f"round_robin / affinity: TTFT p50 {_x(cmp['ttft_p50'])}, p95 {_x(cmp['ttft_p95'])}; "
        f"prefill p50 {_x(cmp['prefill_tokens_p50'])}; client v2v p50 {_x(cmp['client_v2v_p50'])}",
        "first turns (apart, no context yet): "
        + "; ".join(
            f"{mode} TTFT p50 {_num(s['first_turn']['ttft_ms'].get('p50'))} ms, prefill p50 "
            f"{_num(s['first_turn']['prefill_tokens'].get('p50'))}"
            for mode, s in summary.items()
        ),
    ]
    problems = [
        (r["mode"], r["session"], p) for r in report["sessions"] for p in integrity_problems(r)
    ]
    lines.append(f"conversation problems: {len(problems) or 'none'}")
    lines += [f"  {mode} session {s + 1}: {p}" for mode, s, p in problems]
    f = report.get("failover_summary")
    if f:
        lines += [
            "",
            f"failover: {f['kills']} kills mid-reply, {f['restored']} restored on the other "
            f"worker, {f['failed']} failed (p50 / max, then each)",
        ]
        for key in FAILOVER_GAPS:
            values = ", ".join(_num(v) for v in f[key]["values"])
            lines.append(
                f"  {key:<24}{_num(f[key]['p50']):>7}{_num(f[key]['max']):>7}   [{values}]"
            )
    lines += [
        "",
        "TTFT: server time from the end of speech to the first LLM token (turn.metrics "
        "stages_ms.llm_first_token). prefill: the turn's LLM prefill tokens. rebuild: the "
        "context rebuild of a restored session (started at the restore, while the caller "
        "speaks). failover gaps are from the SIGKILL; first audio: the first frame of the "
        "re-answered turn (the filler when its first token was late); answer audio: the first "
        "frame of the answer itself; ttft_ms: that turn's TTFT on the new worker; "
        "metrics_rebuild_ms: the new worker's /metrics rebuild mean.",
    ]
    return "\n".join(lines)


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


# -- main -------------------------------------------------------------------------


def _cluster(workdir: Path, args: argparse.Namespace, balance: Balance) -> LocalCluster:
    port = args.port or free_port_run(args.workers + 1)
    return LocalCluster(
        workdir,
        port=port,
        workers=args.workers,
        redis_port=args.redis_port or free_port_run(1),
        balance=balance,
        # The persona is the workers' configured prompt, as in a deployment: each worker's
        # warm-up (a restarted one's too) leaves its KV in the context, where calls start.
        env={"VOXPIPE_LLM__SYSTEM_PROMPT": SYSTEM_PROMPT},
    )


async def _run_cluster(
    cluster: LocalCluster, mode: str, args: argparse.Namespace, clips: Sequence[Clip]
) -> dict[str, Any]:
    if args.warmup_turns:
        await warm_up(cluster, clips[-1], args.warmup_turns)
    rows, records = await run_mode(cluster, mode, clips, args.sessions, args.turns)
    out: dict[str, Any] = {"rows": rows, "sessions": records}
    out["workers_metrics"] = await workers_metrics(cluster)
    if mode == "affinity" and args.failovers:
        print(f"failover: {args.failovers} kills on the affinity cluster", flush=True)
        out["failover"] = [await one_failover(cluster, rep, clips) for rep in range(args.failovers)]
    return out


def main(args: argparse.Namespace) -> int:
    clips = load_clips()
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    runs: dict[str, dict[str, Any]] = {}
    for mode, balance in MODES.items():
        workdir = (out.parent / "cluster-work" / mode).resolve()
        if (workdir / "turns.jsonl").exists():
            (workdir / "turns.jsonl").unlink()
        cluster = _cluster(workdir, args, balance)
        print(f"{mode}: starting a fresh cluster ({args.workers} workers, nginx {balance})...")
        try:
            cluster.start()
            ready_s = cluster.wait_ready()
            print(f"{mode}: ready after {ready_s:.0f} s", flush=True)
            runs[mode] = asyncio.run(_run_cluster(cluster, mode, args, clips))
            runs[mode]["ready_after_s"] = round(ready_s, 1)
        finally:
            cluster.stop()
    rows = [r for run in runs.values() for r in run["rows"]]
    sessions = [s for run in runs.values() for s in run["sessions"]]
    summary = {mode: summarize_mode(r for r in rows if r["mode"] == mode) for mode in runs}
    failover = runs.get("affinity", {}).get("failover", [])
    prompt_tokens = [r["prompt_tokens"] for r in rows if r["turn"] == 1 and r["prompt_tokens"]]
    report: dict[str, Any] = {
        "params": {
            "workers": args.workers,
            "sessions": args.sessions,
            "turns": args.turns,
            "failovers": args.failovers,
            "warmup_turns": args.warmup_turns,
        },
        "first_turn_prompt_tokens": min(prompt_tokens, default=None),
        "summary": summary,
        "compare": compare(summary),
        "failover_summary": summarize_failover(failover) if failover else None,
        "sessions": sessions,
        "turns": rows,
        "failover": failover,
        "workers_metrics": {mode: run["workers_metrics"] for mode, run in runs.items()},
        "ready_after_s": {mode: run["ready_after_s"] for mode, run in runs.items()},
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    text = render(report)
    print("\n" + text)
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")
    failed = [s for s in sessions if s.get("failed")] + [f for f in failover if f.get("error")]
    return 1 if failed else 0
