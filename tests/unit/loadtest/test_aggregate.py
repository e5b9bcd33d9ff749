"""Step aggregation: outcomes, turn statuses, latency percentiles and the SLO verdict."""

from __future__ import annotations

from voxpipe.loadtest.aggregate import Memory, StepResult, meets_slo, summarize_step
from voxpipe.loadtest.callers import CallerPlan, CallerResult, CallerTurn


def turn(call: int, v2v: float | None, status: str = "completed") -> CallerTurn:
    return CallerTurn(
        call=call,
        clip="clip",
        status=status,
        started_s=0.0,
        v2v_ms=v2v,
        server_v2v_ms=None if v2v is None else v2v + 10,
        queue_ms={"stt": 1.0, "llm": 2.0 * call},
    )


def step(callers: list[CallerResult], calls: int = 3) -> StepResult:
    return StepResult(
        calls=calls,
        duration_s=20,
        elapsed_s=25.04,
        callers=callers,
        memory=Memory("psutil", baseline=1000.0, peak=1600.0),
        buffer_age_ms={"inbound": {"n": 5, "p50": 2.5}},
    )


def test_counts_outcomes_and_turns() -> None:
    callers = [
        CallerResult(
            0, "completed", turns=[turn(0, 100.0), turn(0, 200.0)], errors=["engine_busy"]
        ),
        CallerResult(1, "completed", turns=[turn(1, 300.0), turn(1, None, "timeout")]),
        CallerResult(2, "rejected", reason="at_capacity"),
        CallerResult(3, "crashed", reason="ConnectionError: gone"),
    ]
    summary = summarize_step(step(callers, calls=4))
    assert summary["outcomes"] == {
        "admitted": 3,
        "completed": 2,
        "rejected": 1,
        "crashed": 1,
        "rejected_by_code": {"at_capacity": 1},
        "crashes": ["call 3: ConnectionError: gone"],
    }
    assert summary["turns"] == {
        "total": 4,
        "completed": 3,
        "failed": 1,
        "by_status": {"completed": 3, "timeout": 1},
    }
    assert summary["errors"] == {"engine_busy": 1}
    assert summary["voice_to_voice_values"] == [100.0, 200.0, 300.0]
    v2v = summary["voice_to_voice_ms"]
    assert (v2v["n"], v2v["p50"], v2v["max"]) == (3, 200.0, 300.0)
    assert summary["server"]["voice_to_voice_ms"]["p50"] == 210.0
    assert summary["server"]["queue_ms"]["llm"]["max"] == 2.0
    assert summary["server"]["buffer_age_ms"] == {"inbound": {"n": 5, "p50": 2.5}}
    assert summary["memory"]["per_call_bytes"] == 200  # (1600 - 1000) / 3 admitted
    assert len(summary["turn_records"]) == 4
    assert "meets_slo" not in summary


def test_interrupted_and_empty_turns_are_not_failures() -> None:
    callers = [
        CallerResult(0, "completed", turns=[turn(0, 100.0, "interrupted"), turn(0, None, "empty")])
    ]
    summary = summarize_step(step(callers, calls=1), slo_ms=1500)
    assert summary["turns"]["failed"] == 0
    assert summary["meets_slo"] is True


def test_slo_needs_low_p99_and_no_refusal_crash_or_failure() -> None:
    fast = [CallerResult(i, "completed", turns=[turn(i, 100.0 * (i + 1))]) for i in range(3)]
    assert summarize_step(step(fast), slo_ms=1500)["meets_slo"]
    assert not summarize_step(step(fast), slo_ms=250)["meets_slo"]  # p99 ~ 298 ms
    for spoiler in (
        CallerResult(9, "rejected", reason="at_capacity"),
        CallerResult(9, "crashed", reason="boom"),
        CallerResult(9, "completed", turns=[turn(9, None, "failed")]),
    ):
        assert not summarize_step(step([*fast, spoiler]), slo_ms=1500)["meets_slo"]


def test_no_turns_never_meets_the_slo() -> None:
    summary = summarize_step(step([CallerResult(0, "completed")], calls=1))
    assert summary["voice_to_voice_ms"] == {"n": 0}
    assert not meets_slo(summary, 1500)


def test_callers_start_staggered_within_the_first_half() -> None:
    plan = CallerPlan(stagger_s=1.5)
    assert plan.start_offsets(3, 60) == [0.0, 1.5, 3.0]
    offsets = plan.start_offsets(40, 20)
    assert offsets[0] == 0 and max(offsets) < 10
    assert len(set(offsets)) == 40
