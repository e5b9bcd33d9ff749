"""What the caller of ``python -m bench tool-turns`` heard, tool turns beside plain turns.

A turn that calls a tool sends up to three kinds of audio, in this order: the filler
("One moment.", when the first token is late), the tool's phrase ("Booking that for
you.", when the tool runs past about 300 ms), and the answer. Only the answer answers:
the filler and the phrase are reported on rows of their own, and the wait for the answer
counts through them. The server's turn record says when it sent each
(``filler_sent``, ``tool_phrase_sent``, ``first_audio_sent``); on the client's frames the
answer is found as :mod:`bench.caller_turns` finds it after a filler, the filler and the
phrase together being "what came before the answer".

Besides the first answer audio, a tool turn is judged by the longest stretch the caller
heard nothing (before the answer: the silence a caller takes for a dropped line), and by
the tool's own duration from the record's ``tools``. A turn is a tool turn when the server
ran a tool in it, and a plain turn when the model answered in words without one, whatever
the request was meant to do (the mismatches are counted apart); a turn that ended before
the model had chosen (the caller talked into a long silence) is what it was meant to be:
its failure belongs to its kind.

Pure functions of recorded timelines and rows: tested without a server or a model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bench.caller_report import PERCENTILES, caller_summary, failed_cell
from bench.caller_turns import (
    AFTER_FILLER,
    BEFORE_AUDIO,
    MID_ANSWER,
    ReplyFrame,
    Sentence,
    answer_start,
    filler_frames_of,
    first_voiced_ns,
    heard_turn,
    sentence_turns,
    spread,
)

if TYPE_CHECKING:
    from bench.caller_bench import CallLog

TOOL, PLAIN = "tool", "plain"
KINDS = (TOOL, PLAIN)
NO_TOOL = "none"  # what a request that should answer without a tool expects


# -- one turn --------------------------------------------------------------------------------


def turn_kind(record: Mapping[str, Any], expected: str | None) -> tuple[str, str]:
    """(kind, why): "ran" a tool; "answered" in words without one; else as "meant"
    (``expected``: the intended tool, :data:`NO_TOOL` or None)."""
    if record.get("tools"):
        return TOOL, "ran"
    if "llm_first_token" in record.get("stages_ms", {}) or record.get("reply"):
        return PLAIN, "answered"
    return (PLAIN if expected in (None, NO_TOOL) else TOOL), "meant"


def _ms(later_ns: int | None, earlier_ns: int) -> float | None:
    return None if later_ns is None else round((later_ns - earlier_ns) / 1e6, 1)


def phrase_start(frames: Sequence[ReplyFrame], stages: Mapping[str, float]) -> int | None:
    """Index of the tool phrase's first frame among a turn's frames; None: no phrase. After
    a filler it is found the way an answer is found after one (by the send times)."""
    phrase = stages.get("tool_phrase_sent")
    if phrase is None or not frames:
        return None
    return answer_start(frames, stages.get("filler_sent"), phrase)


def longest_silence_ns(
    frames: Sequence[ReplyFrame], from_ns: int, first_answer: int | None, until_ns: int | None
) -> int | None:
    """The longest stretch with no voiced audio playing, from ``from_ns`` (the caller's end
    of speech) to the answer's first voiced frame (index ``first_answer``) beginning to play,
    on a speaker that plays each frame on arrival or after the one before; or to
    ``until_ns`` (the caller's next sentence), if that came first: then the caller stopped
    waiting. None when neither is known."""
    quiet_since = cursor = from_ns
    longest = 0
    for i, frame in enumerate(frames):
        start = max(cursor, frame.at_ns)
        if until_ns is not None and start >= until_ns:
            break
        if frame.voiced:
            longest = max(longest, start - quiet_since)
            if first_answer is not None and i >= first_answer:
                return longest
            quiet_since = max(quiet_since, start + frame.duration_ns)
        cursor = start + frame.duration_ns
    if until_ns is None:
        return None
    return max(longest, until_ns - quiet_since)


def heard_tool_turn(
    sentence: Sentence,
    frames: Sequence[ReplyFrame],
    records: Sequence[dict[str, Any]],
    filler_frames: int | None = None,
) -> dict[str, Any]:
    """:func:`bench.caller_turns.heard_turn` for a turn that may have run a tool: the
    filler and the tool's phrase both come before the answer; their first audio, the
    longest silence before the answer, and the tools' durations on the row too."""
    record = records[-1] if records else {}
    stages: dict[str, float] = dict(record.get("stages_ms", {}))
    tools = list(record.get("tools") or [])
    before_answer = [stages[k] for k in ("filler_sent", "tool_phrase_sent") if k in stages]
    by_time = "tool_phrase_sent" in stages  # a phrase's length varies: no frame count holds
    count = None if by_time else filler_frames
    if by_time:  # the filler and the phrase, together, are what came before the answer
        said = {**stages, "filler_sent": min(before_answer)}
        record = {**record, "filler": True, "stages_ms": said}
    row = heard_turn(sentence, frames, [*records[:-1], record] if records else [], count)
    said = record.get("stages_ms", {})
    start = answer_start(frames, said.get("filler_sent"), said.get("first_audio_sent"), count)
    first_answer = None
    if start is not None:
        first_answer = next((i for i in range(start, len(frames)) if frames[i].voiced), None)
    phrase = phrase_start(frames, stages)
    filler_end = phrase if phrase is not None else start
    filler = frames[:filler_end] if "filler_sent" in stages else []
    silence = longest_silence_ns(frames, sentence.end_ns, first_answer, sentence.next_start_ns)
    tool_end = max((t["started_ms"] + t["duration_ms"] for t in tools), default=None)
    answer_sent = stages.get("first_audio_sent")
    row.update(
        kind=TOOL if tools else PLAIN,
        tools=[t.get("name") for t in tools],
        tool_status=[t.get("status") for t in tools],
        tool_started_ms=min((t["started_ms"] for t in tools), default=None),
        tool_ms=round(sum(t["duration_ms"] for t in tools), 1) if tools else None,
        filler_ms=_ms(first_voiced_ns(filler), sentence.end_ns),
        phrase_ms=(
            None if phrase is None else _ms(first_voiced_ns(frames[phrase:start]), sentence.end_ns)
        ),
        server_filler_sent_ms=stages.get("filler_sent"),
        server_tool_named_ms=stages.get("tool_named"),
        server_tool_phrase_sent_ms=stages.get("tool_phrase_sent"),
        longest_silence_ms=None if silence is None else round(silence / 1e6, 1),
        # words of the answer said before the tool had returned ("Sure, let me see")
        answer_before_tool=bool(
            tool_end is not None and answer_sent is not None and answer_sent < tool_end
        ),
    )
    return row


# -- the calls, as rows ----------------------------------------------------------------------


def tool_turn_rows(
    logs: Sequence[CallLog], expected: Mapping[str, str | None]
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """One row per sentence said (``expected``: each clip's intended tool, None for a read
    sentence, :data:`NO_TOOL` for a request that needs none), and per transport the
    filler's length in frames, learned from the turns without a tool phrase."""
    prepared = sentence_turns(logs)
    filler_frames: dict[str, int | None] = {}
    for transport in dict.fromkeys(log.transport for log in logs):
        filler_frames[transport] = filler_frames_of(
            (frames, records[-1])
            for log, _, frames, records in prepared
            if log.transport == transport
            and records
            and "tool_phrase_sent" not in records[-1].get("stages_ms", {})
        )
    rows = []
    for log, sentence, frames, records in prepared:
        row = heard_tool_turn(sentence, frames, records, filler_frames[log.transport])
        meant = expected.get(sentence.clip)
        kind, why = turn_kind(records[-1] if records else {}, meant)
        row.update(
            transport=log.transport,
            call=log.call,
            session_id=log.session_id,
            expected_tool=meant,
            kind=kind,
            kind_by=why,
        )
        rows.append(row)
    return rows, filler_frames


# -- the summary -----------------------------------------------------------------------------


def kind_summary(rows: Sequence[dict[str, Any]], silence_ms: int, gap_ms: int) -> dict[str, Any]:
    """One transport's tool turns or plain turns: what :func:`caller_summary` says of any
    turns, and the filler, phrase, silence and tool figures."""
    out = caller_summary(rows, silence_ms)
    silences = [r["longest_silence_ms"] for r in rows if r["longest_silence_ms"] is not None]
    out.update(
        filler_ms=spread(r["filler_ms"] for r in rows),
        phrase_ms=spread(r["phrase_ms"] for r in rows),
        phrases=sum(r["phrase_ms"] is not None for r in rows),
        longest_silence_ms=spread(silences),
        silences_over_gap=sum(s >= gap_ms for s in silences),
        tool_ms=spread(r["tool_ms"] for r in rows),
        tool_started_ms=spread(r["tool_started_ms"] for r in rows),
        tool_named_ms=spread(r.get("server_tool_named_ms") for r in rows),
        phrase_after_name_ms=spread(
            r["server_tool_phrase_sent_ms"] - r["server_tool_named_ms"]
            for r in rows
            if r.get("server_tool_named_ms") is not None
            and r.get("server_tool_phrase_sent_ms") is not None
        ),
        answer_before_tool=sum(r["answer_before_tool"] for r in rows),
        tools=dict(Counter(name for r in rows for name in r["tools"])),
    )
    return out


def mismatches(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Requests whose turn went the other way than meant: the kind is what happened."""
    rows = [r for r in rows if r.get("kind_by") != "meant"]
    return {
        "tool_meant_none_ran": sum(
            r["expected_tool"] not in (None, NO_TOOL) and r["kind"] == PLAIN for r in rows
        ),
        "no_tool_meant_one_ran": sum(
            r["expected_tool"] in (None, NO_TOOL) and r["kind"] == TOOL for r in rows
        ),
    }


def per_tool(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """First answer audio and duration per tool, over the turns that ran one tool."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if len(r["tools"]) == 1:
            by.setdefault(r["tools"][0], []).append(r)
    return {
        name: {
            "answer_ms": spread(r["answer_ms"] for r in mine),
            "tool_ms": spread(r["tool_ms"] for r in mine),
        }
        for name, mine in sorted(by.items())
    }


def summarize(
    rows: Sequence[dict[str, Any]], transports: Sequence[str], silence_ms: int, gap_ms: int
) -> dict[str, dict[str, Any]]:
    """Per transport: tool turns and plain turns apart, the mismatches, and per tool."""
    out = {}
    for transport in transports:
        mine = [r for r in rows if r["transport"] == transport]
        kinds = {k: [r for r in mine if r["kind"] == k] for k in KINDS}
        out[transport] = {
            **{k: kind_summary(turns, silence_ms, gap_ms) for k, turns in kinds.items()},
            "mismatches": mismatches(mine),
            "per_tool": per_tool(kinds[TOOL]),
        }
    return out


# -- rendering -------------------------------------------------------------------------------


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _spread_row(label: str, st: Mapping[str, float]) -> str:
    cells = " | ".join(_cell(st.get(p)) for p in PERCENTILES)
    return f"| {label} | {int(st.get('n', 0))} | {cells} |"


def render_markdown(summary: Mapping[str, Mapping[str, Any]], header: str, gap_ms: int) -> str:
    lines = [header, "", "**Turns** (per transport, tool turns and plain turns)", ""]
    lines += [
        "| transport | turns | n | answered | interrupted (after filler or phrase / before "
        f"audio / mid answer) | failed | silence ≥ {gap_ms} ms before the answer | answer "
        "began before the tool returned |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        for kind in KINDS:
            c = s[kind]
            by = c["interrupted_by"]
            failed = failed_cell(c)
            lines.append(
                f"| {transport} | {kind} | {c['turns']} | {c['answered']} | {c['interrupted']} "
                f"({by[AFTER_FILLER]} / {by[BEFORE_AUDIO]} / {by[MID_ANSWER]}) | {failed} "
                f"| {c['silences_over_gap']} | {c['answer_before_tool'] if kind == TOOL else '–'} |"
            )
    lines += [
        "",
        "**First audio at the caller** (ms after the caller's last loud sample left it)",
        "",
        "| transport · turns · what | n | p50 | p95 | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for transport, s in summary.items():
        for kind in KINDS:
            c = s[kind]
            what = [
                ("first answer audio", c["answer_ms"]),
                ("filler (not an answer)", c["filler_ms"]),
                ("tool phrase (not an answer)", c["phrase_ms"]),
                ("longest silence before the answer", c["longest_silence_ms"]),
                ("server: first answer frame sent", c["server_first_audio_ms"]),
            ]
            if kind == TOOL:
                what += [
                    ("tool named (server)", c["tool_named_ms"]),
                    ("tool phrase sent after the name (server)", c["phrase_after_name_ms"]),
                    ("tool started (server)", c["tool_started_ms"]),
                    ("tool duration (server)", c["tool_ms"]),
                ]
            lines += [_spread_row(f"{transport} · {kind} · {name}", st) for name, st in what]
    lines += ["", "**Per tool** (turns that ran one tool)", ""]
    lines += ["| transport · tool | n | answer p50 | answer p99 | tool p50 | tool max |"]
    lines += ["|---|---|---|---|---|---|"]
    for transport, s in summary.items():
        for name, t in s["per_tool"].items():
            a, d = t["answer_ms"], t["tool_ms"]
            lines.append(
                f"| {transport} · {name} | {a.get('n', 0)} | {_cell(a.get('p50'))} "
                f"| {_cell(a.get('p99'))} | {_cell(d.get('p50'))} | {_cell(d.get('max'))} |"
            )
    for transport, s in summary.items():
        m = s["mismatches"]
        lines.append(
            f"\n{transport}: {m['tool_meant_none_ran']} tool requests ran no tool (counted as "
            f"plain), {m['no_tool_meant_one_ran']} other sentences ran one (counted as tool)."
        )
    lines += [
        "",
        "A tool turn ran a tool (the turn record's `tools`), a plain turn answered without "
        "one; a turn cut short before the model chose counts as what it was meant to be. "
        "First answer audio: the first "
        "voiced frame of the answer arriving at the caller, the filler's and the tool "
        "phrase's frames told apart by the record's send times; answers that came while the "
        "caller was talking count with their lateness. Longest silence: the longest stretch "
        "without voiced audio playing at the caller between its end of speech and the "
        f"answer (to its next sentence when none came); the caller talks into {gap_ms} ms of "
        "it, which interrupts the answer. Tool duration: the record's, on the server.",
    ]
    return "\n".join(lines)
