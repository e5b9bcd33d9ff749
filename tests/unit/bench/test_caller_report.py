"""``python -m bench caller``'s report: counts and percentiles per transport, and the in-server vs
isolated table, on recorded-style rows."""

from __future__ import annotations

from typing import Any

from bench.caller_report import (
    caller_summary,
    render_markdown,
    split_table,
    stage_table,
    summarize_all,
)
from bench.caller_turns import AFTER_FILLER, ANSWERED, BEFORE_AUDIO, FAILED, INTERRUPTED


def row(
    outcome: str = ANSWERED,
    answer_ms: float | None = 1000.0,
    filler_ms: float | None = None,
    interrupted: str | None = None,
    failure: str | None = None,
    compute: dict[str, float] | None = None,
    isolated: dict[str, float] | None = None,
    transport: str = "twilio",
) -> dict[str, Any]:
    return {
        "transport": transport,
        "outcome": outcome,
        "answer_ms": answer_ms,
        "filler_ms": filler_ms,
        "filler": filler_ms is not None,
        "interrupted": interrupted,
        "failure": failure,
        "server_first_audio_ms": None if answer_ms is None else answer_ms - 40,
        "server": {"compute_ms": compute or {}, "prefill_tokens": 20},
        "isolated": isolated,
    }


ROWS = [
    row(answer_ms=900.0),
    row(answer_ms=1100.0),
    row(answer_ms=1300.0),
    row(INTERRUPTED, 4500.0, 1400.0, AFTER_FILLER),
    row(INTERRUPTED, None, None, BEFORE_AUDIO),
    row(FAILED, None, failure="empty"),
]


def test_the_caller_summary_counts_outcomes_and_keeps_the_filler_apart() -> None:
    s = caller_summary(ROWS, silence_ms=500)
    assert (s["turns"], s["answered"], s["interrupted"], s["failed"]) == (6, 3, 2, 1)
    assert s["interrupted_by"] == {"after_filler": 1, "before_audio": 1, "mid_answer": 0}
    assert s["failures"] == {"empty": 1}
    assert (s["fillers"], s["fillers_per_100_turns"]) == (1, 16.7)
    assert s["answer_ms"]["n"] == 4 and s["answer_ms"]["p50"] == 1200.0
    assert s["answer_after_silence_ms"]["p50"] == 700.0
    assert s["filler_ms"] == {**s["filler_ms"], "n": 1, "p50": 1400.0}
    assert "std" in s["answer_ms"] and s["answer_ms"]["jitter"] > 0


def test_the_stage_table_pairs_turns_and_flags_inflation() -> None:
    rows = [
        row(compute={"stt": 600.0, "llm_ttft": 300.0}, isolated={"stt": 500.0, "llm_ttft": 150.0}),
        row(compute={"stt": 700.0, "llm_ttft": 320.0}, isolated={"stt": 550.0, "llm_ttft": 160.0}),
        row(compute={"stt": 9999.0}, isolated=None),  # no isolated run: left out of both
    ]
    table = stage_table(rows)
    assert table["stt"]["server_ms"]["n"] == 2
    assert table["stt"]["ratio_p50"] == round(650 / 525, 2)
    assert table["stt"]["within_target"] is False  # 1.24 > 1.2
    assert table["llm_ttft"]["ratio_p50"] == 2.0
    assert table["tts_first"]["ratio_p50"] is None and table["tts_first"]["within_target"] is None
    alone = stage_table([row(compute={"stt": 600.0}), row(compute={"stt": 700.0})])
    assert alone["stt"]["server_ms"]["n"] == 2 and alone["stt"]["ratio_p50"] is None


def test_the_markdown_has_a_row_per_transport_and_stage() -> None:
    rows = [*ROWS, *(dict(r, transport="native") for r in ROWS[:3])]
    summary = summarize_all(rows, ["twilio", "native"], 500)
    text = render_markdown(summary, "header", 500)
    assert text.startswith("header")
    assert "| twilio | 6 | 3 | 2 (1 / 1 / 0) | 1 (empty: 1) | 17 |" in text
    assert "| native | 3 | 3 | 0 (0 / 0 / 0) | 0 | 0 |" in text
    assert "| twilio | filler (not an answer) | 1 | 1400 |" in text
    assert text.count("| LLM first phrase |") == 2
    summary["twilio"]["filler_split"] = {
        "filler_frames": 41,
        "method": "count",
        "filler_turns": 2,
        "time_agrees_with_count": 2,
    }
    text = render_markdown(summary, "header", 500)
    assert "twilio: the filler was told from the answer by count (41 frames" in text
    assert "agrees on 2 of 2" in text


def test_the_split_table_spreads_each_part_over_the_turns_that_know_it() -> None:
    def with_split(**parts: float | None) -> dict[str, Any]:
        r = row()
        r["server"]["split_ms"] = parts
        return r

    rows = [
        with_split(transport=None, inference=600.0, application=500.0, playback=40.0),
        with_split(transport=None, inference=700.0, application=300.0, playback=60.0),
        with_split(transport=12.0, inference=800.0, application=400.0, playback=None),
        row(),  # a turn with no reply audio: no split
    ]
    table = split_table(rows)
    assert list(table) == ["transport", "inference", "application", "playback"]
    assert (table["transport"]["n"], table["inference"]["n"], table["playback"]["n"]) == (1, 3, 2)
    assert table["inference"]["p50"] == 700.0
    text = render_markdown(summarize_all(rows, ["twilio"], 500), "header", 500)
    assert "| twilio | inference | 3 | 700 |" in text and "| twilio | transport | 1 | 12 |" in text
