"""``python -m bench cluster``'s pure parts: the round-robin nginx config, turn rows, the
aggregates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.cluster import (
    answer_audio_ms,
    compare,
    integrity_problems,
    rebuild_metrics,
    render,
    summarize_failover,
    summarize_mode,
    turn_row,
)
from voxpipe.server.local_cluster import LocalCluster, render_nginx, without_affinity

WORKERS = ["127.0.0.1:9001", "127.0.0.1:9002"]


def test_round_robin_config_is_the_shipped_one_less_its_hash_line(tmp_path: Path) -> None:
    shipped = render_nginx("127.0.0.1:9000", WORKERS, tmp_path).splitlines()
    rr = render_nginx("127.0.0.1:9000", WORKERS, tmp_path, "round_robin").splitlines()
    dropped = [line for line in shipped if line not in rr]
    assert [line.strip() for line in dropped] == ["hash $voxpipe_session consistent;"]
    at = shipped.index(dropped[0])
    assert rr == shipped[:at] + shipped[at + 1 :]
    assert not any(line.strip().startswith("hash ") for line in rr)


def test_a_config_without_a_hash_line_is_refused() -> None:
    with pytest.raises(ValueError, match="hash"):
        without_affinity("upstream voxpipe {\n    server a:1;\n}\n")


def test_the_cluster_keeps_affinity_unless_told_otherwise(tmp_path: Path) -> None:
    assert LocalCluster(tmp_path).balance == "session"


def test_the_cluster_gives_its_workers_one_token_secret_unless_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VOXPIPE_AUTH__TOKEN_SECRET", raising=False)
    cluster = LocalCluster(tmp_path)
    secret = cluster.worker_env()["VOXPIPE_AUTH__TOKEN_SECRET"]
    assert len(secret) >= 32  # what auth.token_secret requires
    given = LocalCluster(tmp_path, env={"VOXPIPE_AUTH__TOKEN_SECRET": "mine" * 8})
    assert given.worker_env()["VOXPIPE_AUTH__TOKEN_SECRET"] == "mine" * 8
    monkeypatch.setenv("VOXPIPE_AUTH__TOKEN_SECRET", "env" * 11)
    assert cluster.worker_env()["VOXPIPE_AUTH__TOKEN_SECRET"] == "env" * 11


def metrics(ttft: float, prefill: int, rebuild_ms: int | None = None) -> dict[str, Any]:
    counts = {"restores": 1, "context_rebuild_ms": rebuild_ms} if rebuild_ms else {}
    return {
        "type": "turn.metrics",
        "turn_id": 2,
        "status": "completed",
        "stages_ms": {"speech_end": 0.0, "llm_first_token": ttft},
        "compute_ms": {"llm_ttft": 40.0},
        "queue_ms": {"llm": 1.0},
        "voice_to_voice_ms": ttft + 300,
        "llm": {"prompt_tokens": 420, "prefill_tokens": prefill, "reused_tokens": 420 - prefill},
        "session_counts": counts,
        "transcript": "hello",
        "reply": "hi",
    }


def rows(mode: str, ttfts: list[float], prefill: int, restored: bool) -> list[dict[str, Any]]:
    """One session: a first turn on the first connection, then one turn per reconnect."""
    out = [turn_row(mode, 0, 1, metrics(900.0, 400), 1500.0, "w0", None)]
    for i, ttft in enumerate(ttfts):
        started = {"resumed": True, "restored": restored}
        rebuild = 700 if restored else None
        row = turn_row(mode, 0, i + 2, metrics(ttft, prefill, rebuild), ttft + 500, "w1", started)
        row["moved"] = restored
        out.append(row)
    return out


def test_turn_row_reads_the_turn_metrics_and_the_reconnect() -> None:
    first = turn_row("affinity", 0, 1, metrics(900.0, 400, 700), 1500.0, "w0", None)
    assert first["reconnected"] is False and first["restored"] is None
    assert first["context_rebuild_ms"] is None  # no reconnect: not this turn's rebuild
    later = turn_row("round_robin", 0, 2, metrics(250.0, 30, 700), 800.0, "w1", {"restored": True})
    assert later["ttft_ms"] == 250.0 and later["prefill_tokens"] == 30
    assert later["prompt_tokens"] == 420 and later["restored"] is True
    assert later["context_rebuild_ms"] == 700 and later["client_v2v_ms"] == 800.0
    resumed = turn_row("affinity", 0, 2, metrics(200.0, 20), 700.0, "w0", {"restored": False})
    assert resumed["restored"] is False and resumed["context_rebuild_ms"] is None


def test_summaries_leave_the_first_turn_apart_and_count_restores() -> None:
    aff = summarize_mode(rows("affinity", [100.0, 200.0, 300.0], 20, restored=False))
    rr = summarize_mode(rows("round_robin", [200.0, 400.0, 600.0], 30, restored=True))
    assert aff["reconnects"] == 3 and aff["restored"] == 0 and aff["restored_fraction"] == 0.0
    assert rr["restored"] == 3 and rr["restored_fraction"] == 1.0 and rr["moved_fraction"] == 1.0
    assert aff["ttft_ms"]["n"] == 3 and aff["ttft_ms"]["p50"] == 200.0
    assert aff["ttft_ms"]["max"] == 300.0
    assert aff["first_turn"]["turns"] == 1 and aff["first_turn"]["ttft_ms"]["p50"] == 900.0
    assert aff["prefill_tokens"]["p50"] == 20 and aff["context_rebuild_ms"] == {"n": 0}
    assert rr["context_rebuild_ms"]["p50"] == 700.0
    ratios = compare({"affinity": aff, "round_robin": rr})
    assert ratios["ttft_p50"] == 2.0 and ratios["ttft_p95"] == 2.0
    assert ratios["prefill_tokens_p50"] == 1.5
    assert ratios["client_v2v_p50"] == round(900 / 700, 2)


def test_unfinished_turns_do_not_count_and_a_missing_mode_has_no_ratio() -> None:
    mine = rows("affinity", [100.0, 5000.0], 20, restored=False)
    mine[2]["status"] = "failed"
    summary = summarize_mode(mine)
    assert summary["ttft_ms"]["n"] == 1 and summary["completed"] == 2
    assert compare({"affinity": summary})["ttft_p50"] is None


def session(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "mode": "round_robin",
        "session": 0,
        "server_turn_ids": [1, 2, 3],
        "statuses": ["completed"] * 3,
        "errors": [],
        "duplicate_frames": 0,
        "duplicate_events": 0,
        "history_user_messages": 3,
    }
    return {**record, **changes}


def test_integrity_problems_name_what_went_wrong() -> None:
    assert integrity_problems(session()) == []
    found = integrity_problems(
        session(
            server_turn_ids=[1, 2, 2],
            history_user_messages=2,
            errors=[{"code": "resume_failed", "message": "no session"}],
            duplicate_frames=4,
        )
    )
    assert any("turn ids [1, 2, 2]" in p for p in found)
    assert any("2 caller messages for 3 turns" in p for p in found)
    assert any("resume_failed" in p for p in found)
    assert any("4 frames" in p for p in found)
    assert integrity_problems(session(failed="TimeoutError()"))[0].startswith("failed")


def test_failover_summary_keeps_every_value_and_skips_failed_kills() -> None:
    reps = [
        {"kill_to_reconnected_ms": 300.0, "kill_to_first_audio_ms": 2000.0, "restored": True},
        {"kill_to_reconnected_ms": 500.0, "kill_to_first_audio_ms": 3000.0, "restored": True},
        {"error": "TimeoutError()", "kill_to_reconnected_ms": 9999.0},
    ]
    summary = summarize_failover(reps)
    assert summary["kills"] == 3 and summary["failed"] == 1 and summary["restored"] == 2
    gap = summary["kill_to_reconnected_ms"]
    assert gap == {"p50": 400.0, "max": 500.0, "values": [300.0, 500.0]}
    assert summary["context_rebuild_ms"]["p50"] is None


def test_the_answer_after_a_filler_is_timed_from_the_servers_gap() -> None:
    filler = {"speech_end": 0.0, "filler_sent": 800.0, "first_audio_sent": 5800.0}
    assert answer_audio_ms(1500.0, filler) == 6500.0
    assert answer_audio_ms(1500.0, {"first_audio_sent": 900.0}) == 1500.0
    assert answer_audio_ms(1500.0, {"filler_sent": 800.0}) is None  # the answer never came
    assert answer_audio_ms(None, filler) is None


def test_rebuild_metrics_reads_a_workers_metrics_page() -> None:
    text = (
        "# TYPE voxpipe_context_rebuild_seconds histogram\n"
        'voxpipe_context_rebuild_seconds_bucket{le="1.0"} 2.0\n'
        'voxpipe_context_rebuild_seconds_bucket{le="+Inf"} 3.0\n'
        "voxpipe_context_rebuild_seconds_count 3.0\n"
        "voxpipe_context_rebuild_seconds_sum 2.25\n"
        "# TYPE voxpipe_session_restores counter\n"
        'voxpipe_session_restores_total{outcome="restored"} 3.0\n'
        'voxpipe_session_restores_total{outcome="not_found"} 1.0\n'
    )
    assert rebuild_metrics(text) == {
        "context_rebuild_count": 3.0,
        "context_rebuild_seconds_sum": 2.25,
        "restores": 3.0,
    }
    assert rebuild_metrics("")["context_rebuild_count"] == 0.0


def test_render_shows_both_modes_the_ratio_and_the_failover() -> None:
    aff = summarize_mode(rows("affinity", [100.0, 200.0], 20, restored=False))
    rr = summarize_mode(rows("round_robin", [300.0, 400.0], 30, restored=True))
    summary = {"affinity": aff, "round_robin": rr}
    text = render(
        {
            "params": {"workers": 2, "sessions": 1, "turns": 3},
            "first_turn_prompt_tokens": 420,
            "summary": summary,
            "compare": compare(summary),
            "sessions": [session(history_user_messages=2)],
            "failover_summary": summarize_failover([{"kill_to_reconnected_ms": 300.0}]),
        }
    )
    assert "affinity" in text and "round_robin" in text and "420 tokens" in text
    assert "TTFT p50 2.33x" in text
    assert "2 caller messages for 3 turns" in text
    assert "kill_to_reconnected_ms" in text and "[300]" in text
