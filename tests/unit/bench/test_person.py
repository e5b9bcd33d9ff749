"""The bench caller's turn-taking, driven through recorded timelines (ms on the caller's clock)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.person import Person, Phase, Speak, Why

MS = 1_000_000


def run(person: Person, events: list[tuple[int, str, int]], until_ms: int) -> Speak | None:
    """Replay ``(at_ms, what, playing_until_ms)`` events ("audio": reply audio arrived and
    plays until then, "clear": playback cut, "done": the agent's turn is over), checking the
    person every 10 ms like the bench's driver; the first time it talks."""
    pending = sorted(events)
    playing_until = 0
    for now_ms in range(0, until_ms + 1, 10):
        new_audio = False
        while pending and pending[0][0] <= now_ms:
            _, what, until = pending.pop(0)
            if what == "audio":
                new_audio, playing_until = True, max(playing_until, until)
            elif what == "clear":
                playing_until = until
            elif what == "done":
                person.reply_done()
        person.hear(now_ms * MS, max(playing_until, now_ms) * MS, new_audio)
        speak = person.due(now_ms * MS)
        if speak is not None:
            return speak
    return None


def said(end_ms: int = 0) -> Person:
    person = Person(gap_ms=1500, pause_ms=300)
    person.speaking()
    person.spoke(end_ms * MS)
    return person


def test_an_answer_is_heard_out_then_a_short_pause() -> None:
    person = said()
    speak = run(person, [(900, "audio", 3000), (2700, "done", 0)], 10_000)
    assert speak == Speak(3300 * MS, Why.ANSWERED, True)
    assert person.phase is Phase.LISTENING


def test_quiet_after_its_own_words_it_talks_at_the_gap() -> None:
    speak = run(said(), [], 10_000)
    assert speak == Speak(1500 * MS, Why.QUIET, False)


def test_after_the_filler_and_silence_it_talks_over_the_late_answer() -> None:
    """The issue's case: "One moment." at 1.4 s, 0.8 s long, then 1.5 s of nothing."""
    speak = run(said(), [(1400, "audio", 2200), (4500, "audio", 6000), (5800, "done", 0)], 10_000)
    assert speak == Speak(3700 * MS, Why.QUIET, True)


def test_an_answer_that_follows_the_filler_in_time_is_listened_to() -> None:
    events = [(1400, "audio", 2200), (3000, "audio", 5000), (4800, "done", 0)]
    assert run(said(), events, 10_000) == Speak(5300 * MS, Why.ANSWERED, True)


def test_a_short_pause_inside_an_answer_is_not_its_end() -> None:
    """Between clauses the line is quiet for 1 s; the answer is not done, so it waits."""
    events = [(800, "audio", 2000), (3000, "audio", 4000), (3900, "done", 0)]
    assert run(said(), events, 10_000) == Speak(4300 * MS, Why.ANSWERED, True)


def test_a_long_pause_inside_an_answer_gets_talked_into() -> None:
    events = [(800, "audio", 2000), (3600, "audio", 4500), (4400, "done", 0)]
    assert run(said(), events, 10_000) == Speak(3500 * MS, Why.QUIET, True)


def test_a_finished_turn_with_nothing_said_waits_out_the_gap() -> None:
    """An empty transcript or a failed turn: the agent is done but said nothing."""
    assert run(said(), [(700, "done", 0)], 10_000) == Speak(1500 * MS, Why.QUIET, False)


def test_a_cleared_speaker_counts_quiet_from_the_clear() -> None:
    events = [(900, "audio", 5000), (1500, "clear", 1500)]
    assert run(said(), events, 10_000) == Speak(3000 * MS, Why.QUIET, True)


def test_while_speaking_it_neither_listens_nor_talks() -> None:
    person = Person()
    person.speaking()
    person.hear(100 * MS, 900 * MS, True)
    person.reply_done()
    assert person.due(10_000 * MS) is None
    person.spoke(10_000 * MS)
    assert person.phase is Phase.WAITING
    assert person.due(11_000 * MS) is None, "nothing heard before it spoke carries over"
    assert person.due(11_500 * MS) == Speak(11_500 * MS, Why.QUIET, False)


def test_on_recorded_turns_it_decides_as_it_did_in_the_run() -> None:
    """Four turns recorded by `python -m bench caller` (tests/unit/bench/data): replaying what
    arrived and when the server's record was seen, the person takes the same decision, a
    little before its next words left (the clip's quiet start and the 20 ms frame clock)."""
    turns = json.loads((Path(__file__).parent / "data" / "caller_turns.json").read_text())
    for turn in turns:
        person = said()
        frames = sorted(turn["frames"])
        events = [(round(at), "audio", round(played)) for at, played in _played(frames)]
        events.append((round(turn["records"][-1]["seen_ms"]), "done", 0))
        speak = run(person, events, 20_000)
        assert speak is not None and speak.why.value == turn["why_next"], turn["clip"]
        assert 0 <= turn["next_start_ms"] - speak.at_ns / MS <= 250, turn["clip"]


def _played(frames: list[list[float]]) -> list[tuple[float, float]]:
    """(arrival, when the speaker will have played everything so far) per recorded frame."""
    out, until = [], 0.0
    for at, duration, _ in frames:
        until = max(until, at) + duration
        out.append((at, until))
    return out
