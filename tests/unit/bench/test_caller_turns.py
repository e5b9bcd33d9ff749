"""What the bench caller heard: the filler told from the answer, interrupted answers, failed
turns, on timelines built from recorded turn records (times in ms on the caller's clock)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from bench.caller_turns import (
    AFTER_FILLER,
    ANSWERED,
    BEFORE_AUDIO,
    FAILED,
    GAP_NS,
    INTERRUPTED,
    MID_ANSWER,
    ReplyFrame,
    Sentence,
    answer_start,
    assign_records,
    filler_frames_of,
    frames_between,
    heard_turn,
    played_until_ns,
    spread,
)

MS = 1_000_000
FRAME_MS = 20
LEAD_FRAMES = 20  # the server sends the first 400 ms of a reply at once (audio.playback_lead_ms)
FILLER_FRAMES = 40  # "One moment.": 0.8 s

# A turn of the issue's kind, from a server's turn log: the first token was late, the filler
# went out at 1.4 s and the answer 1.8 s after it (stages in ms after the end of speech).
RECORDED = {
    "turn_id": 1,
    "stages_ms": {"speech_end": 0.0, "eot": 14.6, "stt_done": 1187.2, "llm_first_token": 2491.8,
                  "first_clause": 3140.9, "tts_first_chunk": 3194.8, "first_audio_sent": 3199.9,
                  "response_done": 11434.3, "filler_sent": 1412.8},
    "compute_ms": {"stt": 1182.0, "llm_first_clause": 1948.2, "tts_first": 52.8,
                   "llm_ttft": 1298.8},
    "filler": "One moment.",
    "status": "completed",
    "transcript": "And Mr. John Dashwood had then leisure to consider how much there might be "
                  "prudently in his power to do for them.",
    "reply": "Mr. John Dashwood's leisure time was a valuable opportunity.",
    "generated": "Mr. John Dashwood's leisure time was a valuable opportunity.",
}  # fmt: skip


def paced(first_ms: float, count: int, transit_ms: float = 2.0, voiced: bool = True) -> list[float]:
    """Arrivals of ``count`` frames sent by the server's pacer from ``first_ms``: the first
    :data:`LEAD_FRAMES` at once, then one per frame period."""
    return [first_ms + transit_ms + max(0, i - LEAD_FRAMES + 1) * FRAME_MS for i in range(count)]


def frames(arrivals_ms: list[float], voiced: bool = True) -> list[ReplyFrame]:
    return [ReplyFrame(round(a * MS), FRAME_MS * MS, voiced) for a in arrivals_ms]


def filler_then_answer(filler_at: float, answer_at: float, answer_frames: int = 100) -> list:
    """The filler's frames, then the answer's, each paced from when the server sent its first
    (an answer ready before the filler has gone out follows it frame by frame)."""
    filler = paced(filler_at, FILLER_FRAMES)
    answer_first = max(answer_at, filler[-1] - 2.0 + FRAME_MS)
    answer = [answer_first + 2.0 + i * FRAME_MS for i in range(answer_frames)]
    return frames(filler) + frames(answer)


def record(filler_sent: float | None, first_audio_sent: float | None, **extra: Any) -> dict:
    stages = {"speech_end": 0.0, "response_done": 9000.0}
    if filler_sent is not None:
        stages["filler_sent"] = filler_sent
    if first_audio_sent is not None:
        stages["first_audio_sent"] = first_audio_sent
    filler = "One moment." if filler_sent else None
    return {"turn_id": 1, "stages_ms": stages, "status": "completed", "reply": "Yes.",
            "generated": "Yes.", "filler": filler, **extra}  # fmt: skip


# -- the filler and the answer ---------------------------------------------------------


def test_without_a_filler_the_first_frame_is_the_answer() -> None:
    assert answer_start(frames(paced(900, 30)), None, 880.0) == 0


def test_the_recorded_turn_answer_after_the_filler_and_a_silence() -> None:
    stages = RECORDED["stages_ms"]
    turn = filler_then_answer(stages["filler_sent"] + 5, stages["first_audio_sent"] + 5)
    start = answer_start(turn, stages["filler_sent"], stages["first_audio_sent"])
    assert start == FILLER_FRAMES
    assert turn[start].at_ns - turn[start - 1].at_ns > 1000 * MS


def test_an_answer_ready_while_the_filler_plays_follows_it_frame_by_frame() -> None:
    """No pause to see: the answer's first frame is the one that arrived as long after the
    filler's first as the server sent it."""
    turn = filler_then_answer(1400, 1500)
    sent_gap = (turn[FILLER_FRAMES].at_ns - turn[0].at_ns) / MS
    assert answer_start(turn, 1400.0, 1400.0 + sent_gap) == FILLER_FRAMES
    assert all(b.at_ns - a.at_ns <= FRAME_MS * MS for a, b in itertools.pairwise(turn))


def test_client_jitter_moves_the_time_method_by_a_frame_at_most() -> None:
    turn = filler_then_answer(1400, 1500)
    sent_gap = (turn[FILLER_FRAMES].at_ns - turn[0].at_ns) / MS
    late = [ReplyFrame(f.at_ns + (7 * MS if i % 2 else 0), f.duration_ns, f.voiced)
            for i, f in enumerate(turn)]  # fmt: skip
    assert abs(answer_start(late, 1400.0, 1400.0 + sent_gap) - FILLER_FRAMES) <= 1


def test_a_stalled_client_is_why_the_count_wins_when_known() -> None:
    """The client's loop stalled for 300 ms and read the filler's tail with the answer's
    head: by time, filler frames look like the answer; by count they are not."""
    turn = filler_then_answer(1400, 1500)
    sent_gap = (turn[FILLER_FRAMES].at_ns - turn[0].at_ns) / MS
    stall = turn[FILLER_FRAMES + 5].at_ns
    stalled = [ReplyFrame(max(f.at_ns, stall) if i >= 25 else f.at_ns, f.duration_ns, f.voiced)
               for i, f in enumerate(turn)]  # fmt: skip
    by_time = answer_start(stalled, 1400.0, 1400.0 + sent_gap)
    assert by_time is not None and by_time < FILLER_FRAMES
    assert answer_start(stalled, 1400.0, 1400.0 + sent_gap, FILLER_FRAMES) == FILLER_FRAMES


def test_a_filler_and_no_answer() -> None:
    assert answer_start(frames(paced(1400, FILLER_FRAMES)), 1400.0, None) is None
    assert answer_start(frames(paced(1400, FILLER_FRAMES)), 1400.0, 9000.0, FILLER_FRAMES) is None
    assert answer_start([], None, 900.0) is None


def test_the_filler_length_is_learned_from_turns_with_a_pause_after_it() -> None:
    paused = [(filler_then_answer(1400, 2600 + 100 * i), record(1400.0, 2600.0 + 100 * i))
              for i in range(3)]  # fmt: skip
    contiguous = filler_then_answer(1400, 1500)
    gap = (contiguous[FILLER_FRAMES].at_ns - contiguous[0].at_ns) / MS
    turns = [*paused, (contiguous, record(1400.0, 1400.0 + gap)), (frames(paced(900, 30)),
             record(None, 900.0))]  # fmt: skip
    assert filler_frames_of(turns) == FILLER_FRAMES
    assert filler_frames_of(turns[:1]) is None, "one turn is not enough to trust"
    assert filler_frames_of(turns[3:]) is None


# -- which record, which frames ---------------------------------------------------------


def test_records_go_to_the_sentence_whose_speech_they_end() -> None:
    starts = [0, 10_000 * MS, 20_000 * MS]

    def seen(at_ms: float, done_ms: float, turn_id: int) -> tuple[int, dict]:
        return round(at_ms * MS), {"turn_id": turn_id, "stages_ms": {"response_done": done_ms}}

    groups = assign_records(
        starts,
        [
            seen(8000, 4000, 1),  # speech ended at 4 s: sentence 0
            seen(12_600, 500, 2),  # a first half, answered and cut at 12.1 s
            seen(19_000, 5000, 3),  # speech ended at 14 s: still sentence 1
            seen(26_000, 2000, 4),
        ],
    )
    assert [[r["turn_id"] for r in g] for g in groups] == [[1], [2, 3], [4]]
    assert assign_records(starts, [seen(500, 1000, 1)]) == [[], [], []]


def test_frames_of_a_sentence_run_to_the_next_sentence_end() -> None:
    got = frames([100, 500, 900, 1300])
    assert [f.at_ns // MS for f in frames_between(got, 400 * MS, 1300 * MS)] == [500, 900]
    assert [f.at_ns // MS for f in frames_between(got, 400 * MS, None)] == [500, 900, 1300]


def test_played_until_plays_each_frame_after_the_one_before() -> None:
    assert played_until_ns(frames([0, 0, 0, 100])) == 120 * MS
    assert played_until_ns([], from_ns=5) == 5


# -- one turn, as the caller lived it ------------------------------------------------------


def sentence(next_start_ms: float | None, why: str | None = "answered") -> Sentence:
    return Sentence(0, "clip.wav", -3000 * MS, 0, why, None if next_start_ms is None
                    else round(next_start_ms * MS))  # fmt: skip


def test_an_answer_heard_out() -> None:
    row = heard_turn(sentence(4000), frames(paced(1200, 100)), [record(None, 1190.0)])
    assert (row["outcome"], row["answer_ms"], row["filler_ms"]) == (ANSWERED, 1202.0, None)
    assert row["server_first_audio_ms"] == 1190.0


def test_the_issue_case_an_answer_after_the_filler_talked_over() -> None:
    """Filler at 1.4 s, then 1.5 s of quiet: the caller spoke at 3.7 s; the answer came at
    4.5 s, over the caller's words. Its lateness still counts; the filler is no answer."""
    turn = filler_then_answer(1400, 4500)
    row = heard_turn(sentence(3700, "quiet"), turn, [record(1400.0, 4500.0)])
    assert (row["outcome"], row["interrupted"]) == (INTERRUPTED, AFTER_FILLER)
    assert (row["filler_ms"], row["answer_ms"], row["filler"]) == (1402.0, 4502.0, True)


def test_an_answer_cancelled_before_any_audio() -> None:
    rec = record(None, None, status="interrupted", reply="", generated="")
    row = heard_turn(sentence(1500, "quiet"), [], [rec])
    assert (row["outcome"], row["interrupted"], row["answer_ms"]) == (
        INTERRUPTED,
        BEFORE_AUDIO,
        None,
    )


def test_an_answer_talked_into_at_a_pause() -> None:
    turn = frames(paced(900, 50)) + frames(paced(3500, 50))
    row = heard_turn(sentence(3400, "quiet"), turn, [record(None, 890.0)])
    assert (row["outcome"], row["interrupted"], row["answer_ms"]) == (
        INTERRUPTED,
        MID_ANSWER,
        902.0,
    )


def test_the_last_sentence_cannot_be_interrupted() -> None:
    row = heard_turn(sentence(None, None), frames(paced(1200, 100)), [record(None, 1190.0)])
    assert row["outcome"] == ANSWERED


def test_failed_turns() -> None:
    assert heard_turn(sentence(1500, "quiet"), [], [])["failure"] == "no turn record"
    empty = record(None, None, status="empty", reply="", generated="")
    row = heard_turn(sentence(1500, "quiet"), [], [empty])
    assert (row["outcome"], row["failure"]) == (FAILED, "empty")
    silent = heard_turn(sentence(None, None), [], [record(None, 1000.0)])
    assert (silent["outcome"], silent["failure"]) == (FAILED, "no answer audio")


def test_a_split_sentence_is_answered_by_its_last_turn() -> None:
    first = record(None, None, turn_id=1, status="interrupted", reply="", generated="")
    row = heard_turn(sentence(4000), frames(paced(1200, 100)), [first, record(None, 1190.0)])
    assert (row["outcome"], row["server_turns"]) == (ANSWERED, 2)


def test_spread_has_both_jitters() -> None:
    stats = spread([1000.0, 1100.0, 1200.0, None, 3000.0])
    assert stats["n"] == 4 and stats["p50"] == 1150.0
    assert stats["jitter"] == round(stats["p99"] - stats["p50"], 1)
    assert stats["std"] == 825.8  # population: the turns measured are all there are
    assert spread([]) == {"n": 0}


def test_an_answer_that_came_as_the_caller_chose_to_talk_was_not_heard_first() -> None:
    """The person decided at 1.5 s in silence; the answer came at 1.56 s, during the quiet
    start of its next clip, before its words at 1.7 s: talked over before any audio."""
    quiet = Sentence(0, "clip.wav", -3000 * MS, 0, "quiet", 1700 * MS, 1500 * MS)
    row = heard_turn(quiet, frames(paced(1560, 60)), [record(None, 1550.0, status="interrupted")])
    assert (row["outcome"], row["interrupted"], row["answer_ms"]) == (
        INTERRUPTED,
        BEFORE_AUDIO,
        1562.0,
    )


# -- turns recorded by a run of `python -m bench caller` (times relative to the sentence's end) --

RECORDED_TURNS = json.loads((Path(__file__).parent / "data" / "caller_turns.json").read_text())


def recorded(turn: dict[str, Any]) -> tuple[Sentence, list[ReplyFrame], list[dict[str, Any]]]:
    frames = [ReplyFrame(round(at * MS), round(d * MS), bool(v)) for at, d, v in turn["frames"]]
    nxt = turn["next_start_ms"]
    said = Sentence(0, turn["clip"], round(turn["start_ms"] * MS), 0, turn["why_next"],
                    None if nxt is None else round(nxt * MS))  # fmt: skip
    records = [{k: v for k, v in r.items() if k != "seen_ms"} for r in turn["records"]]
    return said, frames, records


def test_recorded_turns_as_the_caller_heard_them() -> None:
    got = []
    for turn in RECORDED_TURNS:
        said, frames, records = recorded(turn)
        row = heard_turn(said, frames, records, filler_frames=41)
        got.append((turn["transport"], row["outcome"], row["interrupted"], row["answer_ms"],
                    row["filler_ms"]))  # fmt: skip
    assert got == [
        ("native", ANSWERED, None, 819.3, None),  # its first frame was silent: 802.8 ms
        ("native", INTERRUPTED, BEFORE_AUDIO, None, None),  # cancelled before any audio
        ("twilio", ANSWERED, None, 2821.2, 1120.6),  # filler, 1.3 s of quiet, the answer
        ("twilio", INTERRUPTED, MID_ANSWER, 2060.6, 1180.4),  # the answer stalled 1.5 s
    ]


def test_recorded_fillers_split_the_same_by_count_and_by_time() -> None:
    """On these turns the server's filler was 41 frames; the pause after it shows that,
    and the time method finds the same frame."""
    filler_turns = [recorded(t) for t in RECORDED_TURNS if t["records"][-1].get("filler")]
    assert filler_turns
    for _, frames, records in filler_turns:
        stages = records[-1]["stages_ms"]
        by_time = answer_start(frames, stages["filler_sent"], stages["first_audio_sent"])
        assert by_time == 41
        assert frames[41].at_ns - frames[40].at_ns > GAP_NS
        assert not any(f.voiced for f in frames[35:41]), "the filler ends in its padding"
    learned = filler_frames_of([(f, r[-1]) for _, f, r in filler_turns])
    assert learned == 41


def test_the_longest_stall_is_silence_the_audio_did_not_hold() -> None:
    from bench.caller_turns import ReplyFrame, longest_stall_ms

    ms = 1_000_000
    burst = [ReplyFrame(0, 20 * ms, True) for _ in range(10)]  # 200 ms sent ahead at once
    on_time = [ReplyFrame((200 + 20 * i) * ms, 20 * ms, True) for i in range(5)]
    late = [ReplyFrame(550 * ms, 20 * ms, True)]  # 250 ms after the audio ran out at 300
    assert longest_stall_ms(burst + on_time) == 0
    assert longest_stall_ms(burst + on_time + late) == 250.0
    assert longest_stall_ms([]) == 0
