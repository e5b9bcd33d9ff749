"""The report of ``python -m bench caller``: per transport, what the caller heard and where
the time went, each engine's compute in the server beside the same engine alone.

Pure functions of the per-turn rows (:func:`bench.caller_turns.heard_turn`
plus ``transport``, ``server`` and ``isolated``), so the tables are tested on
recorded rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from bench.caller_turns import (
    AFTER_FILLER,
    ANSWERED,
    BEFORE_AUDIO,
    FAILED,
    INTERRUPTED,
    MID_ANSWER,
    spread,
)

# (key in compute_ms and in the isolated row, what the table calls it)
STAGES: tuple[tuple[str, str], ...] = (
    ("stt", "STT"),
    ("llm_ttft", "LLM first token"),
    ("llm_first_clause", "LLM first phrase"),
    ("tts_first", "TTS first chunk"),
)
INFLATION_TARGET = 1.2  # in-server / isolated at p50, per stage (issue 13)
PERCENTILES = ("p50", "p95", "p99", "max")
SPLIT_PARTS = ("transport", "inference", "application", "playback")  # latency_split.PARTS


def per_100(count: int, turns: int) -> float | None:
    return round(100 * count / turns, 1) if turns else None


def caller_summary(rows: Sequence[dict[str, Any]], silence_ms: int) -> dict[str, Any]:
    """One transport's turns from the caller's side. Latencies count from the caller's last
    loud sample leaving the client; "after silence" takes the end-of-turn silence off, as the
    targets are stated both ways. The filler is its own row: it never counts as an answer."""
    outcomes = Counter(r["outcome"] for r in rows)
    kinds = Counter(r["interrupted"] for r in rows if r["outcome"] == INTERRUPTED)
    answers = [r["answer_ms"] for r in rows if r["answer_ms"] is not None]
    fillers = sum(r["filler"] for r in rows)
    return {
        "turns": len(rows),
        "answered": outcomes[ANSWERED],
        "interrupted": outcomes[INTERRUPTED],
        "interrupted_by": {k: kinds[k] for k in (AFTER_FILLER, BEFORE_AUDIO, MID_ANSWER)},
        "failed": outcomes[FAILED],
        "failures": dict(Counter(r["failure"] for r in rows if r["outcome"] == FAILED)),
        "fillers": fillers,
        "fillers_per_100_turns": per_100(fillers, len(rows)),
        "answer_ms": spread(answers),
        "answer_after_silence_ms": spread(a - silence_ms for a in answers),
        "stall_ms": spread(r.get("stall_ms") for r in rows if r["outcome"] == ANSWERED),
        "filler_ms": spread(r["filler_ms"] for r in rows),
        "server_first_audio_ms": spread(
            r["server_first_audio_ms"] for r in rows if r["answer_ms"] is not None
        ),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def stage_table(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per stage: compute inside the server (the turn records' ``compute_ms``) and the same
    engine alone on the same input (``isolated``), over the turns that have both, and their
    ratio at p50 against the target. With no isolated run at all, the server's alone."""
    rows = list(rows)
    out: dict[str, dict[str, Any]] = {}
    for key, _ in STAGES:
        pairs = [
            (r["server"]["compute_ms"][key], (r.get("isolated") or {}).get(key))
            for r in rows
            if r.get("server", {}).get("compute_ms", {}).get(key) is not None
        ]
        if any(i is not None for _, i in pairs):
            pairs = [(s, i) for s, i in pairs if i is not None]
        server = spread(s for s, _ in pairs)
        isolated = spread(i for _, i in pairs)
        ratio = _ratio(server.get("p50"), isolated.get("p50"))
        out[key] = {
            "server_ms": server,
            "isolated_ms": isolated,
            "ratio_p50": ratio,
            "within_target": None if ratio is None else ratio <= INFLATION_TARGET,
        }
    return out


def split_table(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per part of the latency split (the turn records' ``split_ms``): its spread over the
    turns that know it; transport is known only where the client reported the turn."""
    rows = list(rows)
    return {
        part: spread(r.get("server", {}).get("split_ms", {}).get(part) for r in rows)
        for part in SPLIT_PARTS
    }


def summarize_all(
    rows: Sequence[dict[str, Any]], transports: Sequence[str], silence_ms: int
) -> dict[str, dict[str, Any]]:
    out = {}
    for transport in transports:
        mine = [r for r in rows if r["transport"] == transport]
        out[transport] = {
            "caller": caller_summary(mine, silence_ms),
            "stages": stage_table(mine),
            "split": split_table(mine),
            "prefill_tokens": {
                "server": spread(r.get("server", {}).get("prefill_tokens") for r in mine),
                "isolated": spread((r.get("isolated") or {}).get("prefill_tokens") for r in mine),
            },
            # LLM tokens the first phrase waited for (the first included); target p50 <= 7
            "first_phrase_tokens": spread(
                r.get("server", {}).get("first_clause_tokens") for r in mine
            ),
        }
    return out


# -- rendering --------------------------------------------------------------------------


def _cell(value: float | None, unit: str = "") -> str:
    return "–" if value is None else f"{value:.0f}{unit}"


def render_markdown(summary: dict[str, dict[str, Any]], header: str, silence_ms: int) -> str:
    lines = [header, "", "**What the caller heard** (per transport)", ""]
    lines += [
        "| transport | turns | answered | interrupted (after filler / before audio / mid "
        "answer) | failed | fillers per 100 turns |",
        "|---|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        c = s["caller"]
        by = c["interrupted_by"]
        failed = failed_cell(c)
        lines.append(
            f"| {transport} | {c['turns']} | {c['answered']} | {c['interrupted']} "
            f"({by[AFTER_FILLER]} / {by[BEFORE_AUDIO]} / {by[MID_ANSWER]}) | {failed} "
            f"| {_cell(c['fillers_per_100_turns'])} |"
        )
    lines += [
        "",
        "**First audio at the client** (ms after the caller's last loud sample left it)",
        "",
        "| transport | what | n | p50 | p95 | p99 | max | jitter p99−p50 | std |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        c = s["caller"]
        for name, key in (
            ("first answer audio", "answer_ms"),
            (f"… after the {silence_ms} ms silence", "answer_after_silence_ms"),
            ("filler (not an answer)", "filler_ms"),
            ("server: first answer frame sent", "server_first_audio_ms"),
        ):
            st = c[key]
            cells = [_cell(st.get(p)) for p in PERCENTILES]
            lines.append(
                f"| {transport} | {name} | {st.get('n', 0)} | {' | '.join(cells)} "
                f"| {_cell(st.get('jitter'))} | {_cell(st.get('std'))} |"
            )
    for transport, s in summary.items():
        split = s.get("filler_split")
        if split and split["filler_turns"]:
            how = (
                f"by count ({split['filler_frames']} frames, learned from the pauses after it; "
                f"the time method agrees on {split['time_agrees_with_count']} of "
                f"{split['filler_turns']})"
                if split["method"] == "count"
                else "by time (no pause after a filler showed its length)"
            )
            lines.append(f"\n{transport}: the filler was told from the answer {how}.")
    lines += [
        "",
        "**Where the wait went** (ms; the turn records' `split_ms`: the four parts add up to "
        "the caller's wait from the client's end of speech to its first reply sample played)",
        "",
        "| transport | part | n | p50 | p99 |",
        "|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        for part, st in s.get("split", {}).items():
            lines.append(
                f"| {transport} | {part} | {st.get('n', 0)} | {_cell(st.get('p50'))} "
                f"| {_cell(st.get('p99'))} |"
            )
    lines += [
        "",
        "**Stage compute: in the server vs the same engine alone on the same inputs** (ms; "
        f"target: ratio at p50 ≤ {INFLATION_TARGET})",
        "",
        "| transport | stage | n | server p50 | server p99 | alone p50 | alone p99 | ratio p50 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        for key, name in STAGES:
            st = s["stages"][key]
            server, alone = st["server_ms"], st["isolated_ms"]
            ratio = st["ratio_p50"]
            mark = "" if st["within_target"] in (None, True) else " ✗"
            lines.append(
                f"| {transport} | {name} | {server.get('n', 0)} | {_cell(server.get('p50'))} "
                f"| {_cell(server.get('p99'))} | {_cell(alone.get('p50'))} "
                f"| {_cell(alone.get('p99'))} | "
                f"{'–' if ratio is None else f'{ratio:.2f}'}{mark} |"
            )
        tokens = s["prefill_tokens"]
        lines.append(
            f"| {transport} | LLM prefill tokens | {tokens['server'].get('n', 0)} "
            f"| {_cell(tokens['server'].get('p50'))} | {_cell(tokens['server'].get('p99'))} "
            f"| {_cell(tokens['isolated'].get('p50'))} | {_cell(tokens['isolated'].get('p99'))} "
            "| |"
        )
        phrase = s.get("first_phrase_tokens") or {}
        lines.append(
            f"| {transport} | LLM tokens in the first phrase | {phrase.get('n', 0)} "
            f"| {_cell(phrase.get('p50'))} | {_cell(phrase.get('p99'))} | | | |"
        )
    lines += [
        "",
        "Answered: the answer played out before the caller spoke again. Interrupted: the "
        "caller's next sentence began before the answer had played out, because the line had "
        "been quiet for the caller's gap (after the filler, before any audio, or in a pause "
        "inside the answer). Failed: no answer audio at all (no turn record, an empty "
        "transcript, an error). First answer audio: the first voiced frame of the answer "
        "arriving at the client, the filler's frames told apart by the server's turn record; "
        "answers that came while the caller was talking count with their lateness. Server: "
        "the records' `first_audio_sent`, counted from where the server's VAD heard the speech "
        "end (before the last loud sample: it can read higher than the client's). Stage "
        "compute: the turn records' `compute_ms` (queue wait excluded) beside the same engine "
        "loaded in the bench process after the calls, run on the utterance as the server's "
        "turn detector cut it (μ-law and resampling for Twilio), the same message list with "
        "the call's KV prefix warm, and the same first phrase. Where the wait went: "
        "transport is the caller's last speech crossing to the server (half the round trip "
        "the native client reports; none over Twilio, which carries no client timing), "
        "inference the engines' compute on the way to the first reply audio, application "
        "the rest of the server's time (end-of-turn silence, queues), playback the first "
        "reply frame to its first sample played (the native client's report, Twilio's mark "
        "echo): docs/observability.md.",
    ]
    return "\n".join(lines)


def failed_cell(counts: dict[str, Any]) -> str:
    """How many turns failed, and why: "2 (turn_timeout: 1, no_answer: 1)"."""
    reasons = counts["failures"]
    if not reasons:
        return f"{counts['failed']}"
    return f"{counts['failed']} (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")"
