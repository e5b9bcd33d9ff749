"""What the caller heard in each turn, from the audio's arrival at the client.

``python -m bench caller`` records, per sentence the caller said, when its last
loud sample left the client, when its next sentence began, and every reply
frame with its arrival time. The server's turn record says what the turn was
(transcript, reply, status) and whether a filler went first. This module joins
the two and decides, per sentence:

- which arriving frames are the filler and which the answer (:func:`answer_start`);
- the first answer audio and the first filler audio, after the caller's end of speech;
- whether the answer was heard out, interrupted by the caller's next sentence
  (the caller took the silence for the end: the failure this benchmark exists
  to count), or never came (a failed turn).

Everything here is pure: tested on recorded timelines, no server, no models.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

GAP_NS = 60_000_000  # a pause in arrivals this long: the server had nothing to send
SNAP_NS = 150_000_000  # such a pause this close to where the answer is due is its start
LATE_NS = 10_000_000  # a frame may arrive this much before its due time (client jitter)


@dataclass(frozen=True)
class ReplyFrame:
    """One frame of reply audio as the client received it."""

    at_ns: int  # arrival (monotonic ns, the client's clock)
    duration_ns: int
    voiced: bool  # holds a window louder than silence


@dataclass(frozen=True)
class Sentence:
    """One sentence the caller said, with what followed it."""

    index: int
    clip: str
    start_ns: int  # its first loud frame left the client
    end_ns: int  # its last loud frame left the client
    why_next: str | None  # why the person spoke again (person.Why), None after the last
    next_start_ns: int | None  # the next sentence's first loud frame left, None after the last
    next_decided_ns: int | None = None  # when the person decided to say it (default: began)


# -- which record answers which sentence ------------------------------------------


def estimated_speech_end_ns(seen_ns: int, record: dict[str, Any]) -> int | None:
    """Where, on the client's clock, the server placed the end of this turn's speech: the
    record was seen ``seen_ns`` (written at its ``response_done``), its stages count from
    the end of speech. Good to a poll interval, plenty to tell sentences apart."""
    done = record.get("stages_ms", {}).get("response_done")
    return None if done is None else seen_ns - round(done * 1e6)


class HeardCall(Protocol):
    """What the per-turn rows read of a call (``caller_bench.CallLog``)."""

    @property
    def sentences(self) -> Sequence[Sentence]: ...
    @property
    def frames(self) -> Sequence[ReplyFrame]: ...
    @property
    def seen(self) -> Sequence[tuple[int, dict[str, Any]]]: ...


Call = TypeVar("Call", bound=HeardCall)


def assign_records(
    starts_ns: Sequence[int], seen: Iterable[tuple[int, dict[str, Any]]]
) -> list[list[dict[str, Any]]]:
    """The server's records of one call grouped by the caller's sentence they belong to:
    the last sentence that had begun when the server heard its speech end. A sentence with
    a long inner pause is two turns on the server (both land on it, in order); a sentence
    the server never heard gets none; a record with no ``response_done`` is left out."""
    groups: list[list[dict[str, Any]]] = [[] for _ in starts_ns]
    for seen_ns, record in sorted(seen, key=lambda s: s[1].get("turn_id", 0)):
        end = estimated_speech_end_ns(seen_ns, record)
        began = [i for i, start in enumerate(starts_ns) if end is not None and start <= end]
        if began:
            groups[began[-1]].append(record)
    return groups


def frames_between(
    frames: Sequence[ReplyFrame], after_ns: int, before_ns: int | None
) -> list[ReplyFrame]:
    """The frames that arrived from ``after_ns`` (a sentence's end) up to ``before_ns`` (the
    next sentence's end): a reply the next sentence talked over still belongs to this one."""
    return [f for f in frames if f.at_ns >= after_ns and (before_ns is None or f.at_ns < before_ns)]


def sentence_turns(
    logs: Sequence[Call],
) -> list[tuple[Call, Sentence, list[ReplyFrame], list[dict[str, Any]]]]:
    """Every sentence the caller said, with the reply frames that followed it and the
    server's records of it: what both benches' per-turn rows are made from."""
    turns = []
    for log in logs:
        groups = assign_records([s.start_ns for s in log.sentences], log.seen)
        for i, sentence in enumerate(log.sentences):
            after = log.sentences[i + 1].end_ns if i + 1 < len(log.sentences) else None
            frames = frames_between(log.frames, sentence.end_ns, after)
            turns.append((log, sentence, frames, groups[i]))
    return turns


# -- the filler and the answer --------------------------------------------------------


def answer_start(
    frames: Sequence[ReplyFrame],
    filler_sent_ms: float | None,
    first_audio_sent_ms: float | None,
    filler_frames: int | None = None,
) -> int | None:
    """Index of the answer's first frame among one turn's frames; None: no answer came.

    The filler, when one was said, is the turn's first frames: the server queues it
    before any answer audio exists, and frames leave in order. Where the answer starts:

    - by count, when the filler's length in frames is known (it is synthesized once per
      server: :func:`filler_frames_of` learns it from turns where a pause followed it);
    - else by time: the server sent the answer's first frame ``first_audio_sent -
      filler_sent`` after the filler's first; on the client that is the frame that arrived
      that long after the filler's first, or the end of a pause in arrivals close to it
      (the answer came after the filler had gone out: the caller heard silence).
    """
    if not frames or first_audio_sent_ms is None:
        return None
    if filler_sent_ms is None or filler_sent_ms > first_audio_sent_ms:
        return 0
    if filler_frames is not None:
        return filler_frames if filler_frames < len(frames) else None
    due = frames[0].at_ns + round((first_audio_sent_ms - filler_sent_ms) * 1e6)
    pauses = [
        i
        for i in range(1, len(frames))
        if frames[i].at_ns - frames[i - 1].at_ns >= GAP_NS and abs(frames[i].at_ns - due) <= SNAP_NS
    ]
    if pauses:
        return min(pauses, key=lambda i: abs(frames[i].at_ns - due))
    return next((i for i, f in enumerate(frames) if f.at_ns >= due - LATE_NS), None)


def filler_frames_of(turns: Iterable[tuple[Sequence[ReplyFrame], dict[str, Any]]]) -> int | None:
    """The filler's length in frames, learned from the turns where the answer came after a
    pause in arrivals: the frames before that pause are the filler. The most common count,
    if at least two turns agree on it; None when no turn shows it (use time)."""
    counts: Counter[int] = Counter()
    for frames, record in turns:
        stages = record.get("stages_ms", {})
        if stages.get("filler_sent") is None or stages.get("first_audio_sent") is None:
            continue
        start = answer_start(frames, stages["filler_sent"], stages["first_audio_sent"])
        if start and frames[start].at_ns - frames[start - 1].at_ns >= GAP_NS:
            counts[start] += 1
    if not counts:
        return None
    count, seen = counts.most_common(1)[0]
    return count if seen >= 2 else None


def played_until_ns(frames: Iterable[ReplyFrame], from_ns: int = 0) -> int:
    """When a speaker that plays each frame on arrival (or after the one before) finishes."""
    end = from_ns
    for f in frames:
        end = max(end, f.at_ns) + f.duration_ns
    return end


def longest_stall_ms(frames: Sequence[ReplyFrame]) -> float:
    """The longest silence a caller playing ``frames`` as they come heard inside them
    because the next frame had not arrived yet (the server had nothing to send): a reply
    broken up, not a pause the voice made."""
    longest, end = 0, frames[0].at_ns if frames else 0
    for f in frames:
        longest = max(longest, f.at_ns - end)
        end = max(end, f.at_ns) + f.duration_ns
    return round(longest / 1e6, 1)


def first_voiced_ns(frames: Iterable[ReplyFrame]) -> int | None:
    return next((f.at_ns for f in frames if f.voiced), None)


# -- one turn, as the caller lived it ---------------------------------------------------

ANSWERED, INTERRUPTED, FAILED = "answered", "interrupted", "failed"
# Why an answer was interrupted: the caller talked into the silence ...
AFTER_FILLER = "after_filler"  # ... that followed the filler
BEFORE_AUDIO = "before_audio"  # ... before any reply audio came
MID_ANSWER = "mid_answer"  # ... in a pause inside the answer


def _ms(later_ns: int | None, earlier_ns: int) -> float | None:
    return None if later_ns is None else round((later_ns - earlier_ns) / 1e6, 1)


def heard_turn(
    sentence: Sentence,
    frames: Sequence[ReplyFrame],
    records: Sequence[dict[str, Any]],
    filler_frames: int | None = None,
) -> dict[str, Any]:
    """One sentence's outcome from the caller's side. ``frames`` are the reply frames that
    arrived after its end (:func:`frames_between`), ``records`` the server's turns it made
    (:func:`assign_records`); the last of them is the one that answers it."""
    record = records[-1] if records else None
    row: dict[str, Any] = {
        "sentence": sentence.index,
        "clip": sentence.clip,
        "why_next": sentence.why_next,
        "server_turns": len(records),
        "server_turn_id": None if record is None else record.get("turn_id"),
        "status": None if record is None else record.get("status"),
        "transcript": "" if record is None else record.get("transcript", ""),
        "reply": "" if record is None else record.get("reply", ""),
        "filler": bool(record and record.get("filler")),
        "answer_ms": None,
        "stall_ms": None,
        "filler_ms": None,
        "server_first_audio_ms": None,
        "outcome": FAILED,
        "interrupted": None,
        "failure": None,
    }
    if record is None:
        row["failure"] = "no turn record"
        return row
    stages = record.get("stages_ms", {})
    row["server_first_audio_ms"] = stages.get("first_audio_sent")
    start = answer_start(
        frames, stages.get("filler_sent"), stages.get("first_audio_sent"), filler_frames
    )
    filler = frames[: len(frames) if start is None else start] if row["filler"] else []
    answer = [] if start is None else list(frames[start:])
    first_answer = first_voiced_ns(answer)
    first_filler = first_voiced_ns(filler)
    talked = sentence.next_start_ns
    row["answer_ms"] = _ms(first_answer, sentence.end_ns)
    row["filler_ms"] = _ms(first_filler, sentence.end_ns)
    if answer:
        heard = answer if talked is None else [f for f in answer if f.at_ns < talked]
        row["stall_ms"] = longest_stall_ms(heard)
    expected = bool(record.get("generated") or record.get("reply")) or record.get("status") in (
        "interrupted",
        "cancelled",
    )
    heard_out = bool(answer) and (talked is None or played_until_ns(frames) <= talked)
    if talked is not None and expected and not heard_out:
        row["outcome"] = INTERRUPTED
        # What the caller had heard when it chose to talk (its words begin a little later).
        decided = talked if sentence.next_decided_ns is None else sentence.next_decided_ns
        if first_answer is not None and first_answer < decided:
            row["interrupted"] = MID_ANSWER
        elif first_filler is not None and first_filler < decided:
            row["interrupted"] = AFTER_FILLER
        else:
            row["interrupted"] = BEFORE_AUDIO
    elif first_answer is not None:
        row["outcome"] = ANSWERED
    else:
        reason = record.get("status") if record.get("status") != "completed" else "no answer audio"
        row["failure"] = reason or "no answer audio"
    return row


# -- statistics ---------------------------------------------------------------------------


def spread(values: Iterable[float | None]) -> dict[str, float]:
    """Percentiles with both measures of jitter the targets use: p99 - p50 and the standard
    deviation."""
    from voxpipe.loadtest.stats import summarize

    data = [v for v in values if v is not None]
    out = summarize(data)
    if data:
        out["std"] = round(statistics.pstdev(data), 1)
    return out
