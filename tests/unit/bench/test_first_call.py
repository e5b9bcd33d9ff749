"""The first call after a fresh start, paired with later calls of the same sentences."""

from __future__ import annotations

from typing import Any

from bench.first_call import first_call_summary, render_first_call


def row(
    start: int, order: int, conversation: int, sentence: int, answer: float, ttft: float
) -> dict[str, Any]:
    return {
        "transport": "twilio",
        "start": start,
        "order": order,
        "conversation": conversation,
        "sentence": sentence,
        "answer_ms": answer,
        "filler": False,
        "server": {"compute_ms": {"llm_ttft": ttft}},
    }


def test_each_first_call_turn_is_paired_with_the_same_sentence_said_later() -> None:
    rows = [
        # start 0: conversation 0 first (no later twin), conversation 1 later
        row(0, 0, 0, 0, 5000, 900),
        row(0, 1, 1, 0, 800, 200),
        row(0, 1, 1, 1, 600, 100),
        # start 1: conversation 1 first, a long first sentence, then 2 later
        row(1, 0, 1, 0, 1000, 300),
        row(1, 0, 1, 1, 600, 100),
        row(1, 1, 2, 0, 700, 150),
    ]
    summary = first_call_summary(rows)
    assert summary is not None
    assert summary["starts"] == 2
    assert summary["paired_turns"] == 2  # conversation 0 was never said as a later call
    assert summary["answer"] == {"n": 2, "first_ms": 800.0, "steady_ms": 700.0, "ratio": 1.14}
    assert summary["first_turn_answer"]["ratio"] == 1.25
    assert summary["first_turn_llm_ttft"]["ratio"] == 1.5
    assert summary["fillers_on_first_calls"] == 0
    text = "\n".join(render_first_call(summary))
    assert "| first answer audio (ms) | 2 | 800 | 700 | 1.14 |" in text


def test_without_a_twin_there_is_no_first_call_figure() -> None:
    assert first_call_summary([row(0, 0, 0, 0, 900, 200), row(0, 1, 1, 0, 800, 200)]) is None
    assert render_first_call(None) == []


def test_a_filler_on_a_first_call_is_counted() -> None:
    first = row(1, 0, 1, 0, 1000, 300) | {"filler": True}
    summary = first_call_summary([first, row(0, 1, 1, 0, 800, 200)])
    assert summary is not None and summary["fillers_on_first_calls"] == 1
