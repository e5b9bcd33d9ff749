"""The evaluation's agents, their scoring per agent and half, and the invented-fact
checker, without a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.tool_eval import dataset, report, runner, scoring
from bench.tool_eval.dataset import EvalAgent, Utterance
from bench.tool_eval.invented import OWNED, FactChecker
from bench.tool_eval.outcome import CalledTool, Outcome
from bench.tool_eval.voices import phone_line
from voxpipe.agent import load_agent
from voxpipe.engines.base import STT_SAMPLE_RATE

AGENTS = dataset.agents()


# -- the set -----------------------------------------------------------------------------------


def test_the_set_is_what_issue_25_asks() -> None:
    requests = [u for a in AGENTS for u in a.requests]
    assert len(AGENTS) >= 7 and len({a.ref for a in AGENTS}) == len(AGENTS)
    assert len(requests) >= 180
    assert sum(u.tool is None for u in requests) >= 50
    assert {u.voice.split(":")[0] for u in requests} == {"piper", "espeak"}
    held_out = [a for a in AGENTS if a.held_out]
    new = [a for a in AGENTS if a.name != "restaurant"]
    assert len(held_out) * 2 == len(new)  # half of the new agents are held out
    assert not next(a for a in AGENTS if a.name == "restaurant").held_out
    for agent in new:
        assert any(u.channel == dataset.TWILIO for u in agent.requests), agent.name
        assert any(u.voice.startswith("espeak") for u in agent.requests), agent.name
        assert sum(u.tool is None for u in agent.requests) >= 7, agent.name
    assert len({u.id for u in requests}) == len(requests)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda a: a.name)
def test_every_expected_call_is_one_its_tools_accept(agent: EvalAgent) -> None:
    """Each expected call is valid for the agent's own tools, and every tool is asked for,
    so a right answer can match and no tool goes unmeasured."""
    tools = {t.name: t for t in load_agent(agent.ref).python_tools}
    normalize = scoring.normalizer_for(agent, load_agent(agent.ref))
    expected = {u.tool for u in agent.requests if u.tool}
    assert expected == set(tools)
    for request in agent.requests:
        if request.tool is not None:
            tools[request.tool].validate(request.arguments)
            assert "_invalid" not in normalize(request.tool, request.arguments)
        assert request.also_fine <= set(tools)


def test_select() -> None:
    assert [a.name for a in dataset.select(AGENTS, "all")] == [a.name for a in AGENTS]
    assert all(not a.held_out for a in dataset.select(AGENTS, "tuning"))
    assert all(a.held_out for a in dataset.select(AGENTS, "held-out"))
    assert [a.name for a in dataset.select(AGENTS, "taxi, clinic")] == ["taxi", "clinic"]
    with pytest.raises(SystemExit, match="no agent nobody"):
        dataset.select(AGENTS, "taxi,nobody")


def test_a_twilio_request_is_heard_through_the_phone_line() -> None:
    t = np.arange(STT_SAMPLE_RATE) / STT_SAMPLE_RATE
    low = 0.3 * np.sin(2 * np.pi * 440 * t).astype(np.float32)
    high = 0.3 * np.sin(2 * np.pi * 6000 * t).astype(np.float32)
    heard = phone_line(low + high)
    assert heard.shape[0] == pytest.approx(STT_SAMPLE_RATE, abs=4)
    spectrum = np.abs(np.fft.rfft(heard[:STT_SAMPLE_RATE]))
    assert spectrum[6000] < 0.05 * spectrum[440]  # 8 kHz keeps nothing above 4 kHz
    middle = slice(1000, 15000)
    assert np.corrcoef(heard[middle], low[middle])[0, 1] > 0.98  # μ-law keeps the voice


# -- the invented-fact checker -----------------------------------------------------------------


LUIGIS = FactChecker(
    ["clock_time", "availability", "done", "opening_state"],
    [r"(free )?after (6|six) ?(pm|p\.m\.)", "555 0142"],
)


@pytest.mark.parametrize(
    "reply",
    [
        "We have a table for free on Friday at 7:42 PM.",  # the issue's examples
        "We clone on Sunday at 12:00 PM.",
        "Doctor Patel is free on Monday.",
        "Yes, you can see someone today.",
        "Yes, the clinic has an appointment on Wednesday.",
        "Your booking is confirmed.",
        "We are closed on Mondays.",
        "Sorry, we're fully booked tonight.",
        "Come at seven o'clock.",
        "Yes, I have room for six on Saturday at one in the afternoon.",
    ],
)
def test_stated_owned_facts_are_invented(reply: str) -> None:
    assert LUIGIS.find(reply)


@pytest.mark.parametrize(
    "reply",
    [
        "Yes, we serve vegetarian dishes.",
        "Parking is on the street and free after 6 pm.",  # allowed: the instructions say it
        "Call us on 555 0142.",
        "Let me check whether a table is free on Friday.",  # asked, not stated
        "Could you tell me if you'd like a table at 8 pm?",
        "Dogs are welcome on the terrace.",
        "Which day and time would you like?",
    ],
)
def test_what_no_tool_owns_is_not_invented(reply: str) -> None:
    assert LUIGIS.find(reply) == []


def test_what_the_caller_said_is_not_invented() -> None:
    hotel = FactChecker(["room_number"])
    assert hotel.find("Of course, room 312.", heard="I'm Baker, in room 312.") == []
    assert [i.text for i in hotel.find("Room 214 is yours.", heard="in room 312")] == ["Room 214"]
    # a number inside another one is not what the caller said
    assert FactChecker(["clock_time"]).find("At 2 pm.", heard="at 12 pm")
    # a number heard in groups is the number said back
    helpdesk = FactChecker(["ticket_number"])
    assert helpdesk.find("No news on your ticket number 14002.", heard="ticket 1,400,2?") == []
    assert helpdesk.find("No news on your ticket number 14003.", heard="ticket 1,400,2?")


@pytest.mark.parametrize(
    ("fact", "stated", "not_stated"),
    [
        ("minutes_away", "The car is 8 minutes away.", "We drive day and night."),
        ("money", "That ride is about 24 dollars.", "Every car takes cards and cash."),
        ("money", "It costs $30.", "Delivery is free."),
        ("on_the_way", "A car is on its way.", "Where are you going?"),
        ("ticket_number", "Your ticket number is 5821.", "I can open a ticket for you."),
        ("ticket_state", "Ticket 1402 is resolved.", "What is the ticket's number?"),
        ("ticket_state", 'Ticket 3,3877 is in the ticket status of "open".', "Open a ticket."),
        ("room_number", "You are in room 214.", "Every room has a view."),
        ("order_state", "Your order has shipped.", "What is your order number?"),
        ("arrival", "It will arrive on Friday.", "Returns are accepted within 30 days."),
        ("stock", "Yes, it's in stock.", "We sell new books and audiobooks."),
        ("card_state", "Your card is frozen now.", "We never ask for your PIN."),
        ("done", "I've cancelled your appointment.", "I can cancel it for you."),
        (
            "appointment_when",
            "Your next appointment is on Thursday.",
            "When would you like to come?",
        ),
        ("opening_state", "We're open today until late.", "We serve Italian food."),
    ],
)
def test_each_owned_fact(fact: str, stated: str, not_stated: str) -> None:
    checker = FactChecker([fact])
    assert [i.fact for i in checker.find(stated)] == [fact]
    assert checker.find(not_stated) == []


def test_every_agent_names_known_facts() -> None:
    assert all(a.facts.owned for a in AGENTS)
    assert set(OWNED) >= {name for a in AGENTS for name in a.facts.owned}
    with pytest.raises(ValueError, match="unknown owned facts"):
        FactChecker(["clock_time", "weather"])


# -- scoring -----------------------------------------------------------------------------------


def _agent(name: str) -> EvalAgent:
    return next(a for a in AGENTS if a.name == name)


def _outcome(id_: str, *calls: tuple[str, dict[str, Any]], reply: str = "") -> Outcome:
    return Outcome(id_, heard=id_, reply=reply, calls=[CalledTool(n, a) for n, a in calls])


def test_arguments_match_after_the_tools_own_validation() -> None:
    clinic, taxi, helpdesk = _agent("clinic"), _agent("taxi"), _agent("helpdesk")
    norm = scoring.normalizer_for(clinic, load_agent(clinic.ref))
    expected = norm("book_appointment", {"name": "Lee", "day": "tuesday", "time": "10 am"})
    for time in ("10 am", "10:00 AM", "10:00 a.m.", "10am", "10 00 AM"):
        assert norm("book_appointment", {"name": "lee", "day": "tuesday", "time": time}) == expected
    assert norm("book_appointment", {"name": "Lee", "day": "tuesday", "time": "10 pm"}) != expected
    assert norm("book_appointment", {"name": "Lee", "day": "Tuesday", "time": "10 am"}) == {
        "_invalid": True,
        "name": "Lee",
        "day": "Tuesday",
        "time": "10 am",
    }  # the schema's days are lower case: the server would refuse this call too
    assert norm("free_slots", {"day": "monday"}) == norm(
        "free_slots", {"day": "monday", "doctor": None}
    )
    norm = scoring.normalizer_for(taxi, load_agent(taxi.ref))
    assert norm("fare_estimate", {"pickup": "The Grand Hotel.", "destination": "airport"}) == norm(
        "fare_estimate", {"pickup": "grand hotel", "destination": "Airport"}
    )
    norm = scoring.normalizer_for(helpdesk, load_agent(helpdesk.ref))
    said = norm("open_ticket", {"summary": "printer broken", "priority": "normal"})
    assert said == norm("open_ticket", {"summary": "the printer on floor two is broken"})
    assert said != norm("open_ticket", {"summary": "", "priority": "normal"})
    assert scoring.plain_value("4 8 1 5") == "4815" and scoring.plain_value("noon") == "12:00"


def test_score_requests_counts_invented_facts_on_replies_without_a_tool() -> None:
    taxi = _agent("taxi")
    normalize = scoring.normalizer_for(taxi, load_agent(taxi.ref))
    pairs = [
        (
            Utterance("w", "w", "request", tool="where_is_my_taxi", arguments={"name": "Brown"}),
            _outcome("w", reply="Your driver is 5 minutes away."),
        ),
        (
            Utterance("c", "c", "request", tool="cancel_taxi", arguments={"name": "Brown"}),
            _outcome("c", ("cancel_taxi", {"name": "brown"}), reply="It is cancelled."),
        ),
        (Utterance("h", "h", "request"), _outcome("h", reply="Hello, City Cabs here.")),
        (Utterance("e", "e", "request"), Outcome("e", error="TimeoutError: slow")),
    ]
    score = scoring.score_requests(pairs, normalize, taxi.facts)
    assert [r["invented"] for r in score["rows"]] == [
        ["minutes_away: 5 minutes", "on_the_way: Your driver is"],
        None,  # a call: its reply is the tool's to make
        [],
        None,  # no answer
    ]
    assert score["invented_facts"] == {"replies": 1, "checked": 2, "rate": 0.5}
    assert score["exact_arguments"] == 1 / 2


def _scores(tp: int, fp: int, fn: int, no_tool: float | None, invented: int) -> dict[str, Any]:
    counts = scoring.Counts(tp, fp, fn)
    return {
        "requests": 20,
        "tool_requests": tp + fn,
        "overall": counts.to_dict(),
        "exact_arguments": 0.5,
        "no_tool_accuracy": no_tool,
        "invented_facts": {"replies": invented, "checked": 10, "rate": invented / 10},
        "errors": 0,
    }


def test_summary_per_agent_and_per_half() -> None:
    tuning_a, tuning_b, held = _agent("clinic"), _agent("taxi"), _agent("bank")
    summary = scoring.summary(
        [
            (tuning_a, _scores(10, 0, 0, 1.0, 0)),
            (tuning_b, _scores(8, 2, 2, 0.8, 3)),
            (held, _scores(0, 0, 10, 1.0, 1)),
        ]
    )
    rows = summary["agents"]
    assert rows["clinic"]["missed_targets"] == []
    assert rows["taxi"]["missed_targets"] == ["precision", "recall", "no_tool_accuracy"]
    assert rows["bank"]["precision"] is None and rows["bank"]["missed_targets"] == ["recall"]
    tuning = summary["halves"]["tuning"]
    assert tuning["precision"] == pytest.approx(0.9) and tuning["recall"] == pytest.approx(0.9)
    assert tuning["invented"] == 3 and tuning["invented_checked"] == 20
    assert tuning["agents_meeting_targets"] == 1
    assert summary["halves"]["held_out"]["recall"] == 0.0


def test_a_held_out_agents_requests_never_reach_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = _outcome("bank-secret", reply="secret words")
    runner.progress_printer("request", held_out=True, quiet=False)(
        Utterance("bank-secret", "x", "request"), outcome
    )
    runner.progress_printer("request", held_out=False, quiet=False)(
        Utterance("clinic-open", "x", "request"), _outcome("clinic-open")
    )
    printed = capsys.readouterr().out
    assert "bank-secret" not in printed and "secret words" not in printed
    assert "clinic-open" in printed
    scores = {
        **_scores(1, 0, 0, 1.0, 0),
        "per_tool": {"freeze_card": scoring.Counts(1).to_dict()},
        "no_tool_requests": 1,
        "echo": {"echoes": 0, "measured": 0, "rate": None},
        "rows": [{"id": "bank-secret", "expected": "freeze_card", "right_tool": True}],
    }
    results = {
        "mode": "engines",
        "speech": True,
        "today": "2026-12-05",
        "tools_supported": True,
        "agents": {"bank": {"held_out": True, **scores}},
        "summary": scoring.summary([(_agent("bank"), scores)]),
    }
    shown = report.render(results)
    assert "bank-secret" not in shown and "freeze_card" not in shown
    assert "bank " in shown and "mean held-out" in shown


def test_rescore_scores_a_runs_answers_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run's JSON scored again without a model gives the same figures, for the agents it
    ran, and a held-out agent's requests stay off the terminal."""
    bank = _agent("bank")
    answers = [
        _outcome(u.id, *([(u.tool, dict(u.arguments))] if u.tool else []), reply="Hello.")
        for u in bank.requests
    ]
    answers[0].reply = "Your card is frozen."  # the first request needs no tool
    run = tmp_path / "run.json"
    run.write_text(
        json.dumps(
            {
                "mode": "engines",
                "speech": True,
                "today": "2026-12-05",
                "tools_supported": True,
                "agents": {"bank": {"held_out": True, "agent": bank.ref}},
                "outcomes": [{"kind": "request", "agent": "bank", **o.to_dict()} for o in answers],
            }
        )
    )
    out = tmp_path / "again.json"
    assert runner.rescore(run, out) == 0
    again = json.loads(out.read_text())
    row = again["summary"]["agents"]["bank"]
    assert row["precision"] == 1.0 and row["recall"] == 1.0 and row["exact_arguments"] == 1.0
    assert row["no_tool_accuracy"] == 1.0 and row["invented"] == 1
    assert again["agents"]["bank"]["invented_facts"]["checked"] == 8
    printed = capsys.readouterr().out
    assert "bank" in printed and bank.requests[0].id not in printed
