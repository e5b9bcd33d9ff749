"""A tool that changes something runs exactly once when the line or the worker fails under
it, end to end on the real models (nginx + Redis + 2 workers, ``LocalCluster``).

The caller asks, in Piper's voice, to book a table; the embedded model calls the slow
``book_table`` of ``slow_booking_agent.py`` (mutating, not idempotent: about 6 s, each
execution counted in a SQLite file the test reads), and then:

- **the caller talks over the tool while it runs** (a barge-in): the booking is not
  cancelled, it runs once, its result is in the history right after its call, and the
  caller's new words are answered;
- **the connection drops while the tool runs** and the client resumes within the grace
  period: the tool ran once, its result is in the history once, and the answer after it
  is heard on the resumed connection, every frame once;
- **the worker is killed after the tool's result is in Redis but before the answer is
  done**: the other worker restores the call, does not run the tool again, has its result
  in the restored history, and gives the answer the dead worker never finished;
- **the worker is killed while the tool runs**: the other worker does not run it again;
  its result is an unknown outcome, and the caller hears so in plain words.

Each test prints its figures (``-s``): when the tool started and ended, when the line
dropped or the worker was killed, and which worker answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis

from tests.e2e.slow_booking_agent import connect
from tests.e2e.test_cluster import port_of, worker_of
from tests.support import assert_spoken, history_of, voiced
from voxpipe.clients.native_client import NativeClient, TurnResult
from voxpipe.conversation.tool_ledger import UNKNOWN_SAID
from voxpipe.server.local_cluster import LocalCluster, free_port_run

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).with_name("slow_booking_agent.py")
REQUEST = "Book a table for two at seven tonight under the name Smith."
OVER_IT = "Thank you, that is all I needed."  # said over the running tool: no new request
TOOL_S = 6.0  # how long each booking takes (SLOW_BOOKING_S)
ANSWER_S = 600  # the call, the tool and the answer: minutes when the CPUs are shared
READY_S = 1500  # a cold start of two workers on a crowded machine (their LLM warm-up)
UNKNOWN = "outcome of this call is unknown"  # what the model reads of a run that died


@pytest.fixture(scope="module")
def spoken() -> tuple[np.ndarray, int]:
    """The request in Piper's voice, with a little silence around it."""
    return voiced(REQUEST)


@pytest.fixture(scope="module")
def spoken_over() -> tuple[np.ndarray, int]:
    return voiced(OVER_IT)


@pytest.fixture(scope="module")
def booking_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, Path]]:
    """Two workers of the slow booking agent behind nginx, one Redis, one bookings file."""
    tmp = tmp_path_factory.mktemp("exactly-once")
    db = tmp / "bookings.sqlite3"
    running = LocalCluster(
        tmp,
        port=free_port_run(3),
        workers=2,
        redis_port=free_port_run(1),
        env={
            "VOXPIPE_AGENT": f"{AGENT}:agent",
            "SLOW_BOOKING_DB": str(db),
            "SLOW_BOOKING_S": str(TOOL_S),
            "VOXPIPE_SERVER__RESUME_GRACE_S": "60",
            "VOXPIPE_DEADLINES__TURN_S": str(ANSWER_S),  # a crowded machine writes slowly
            "VOXPIPE_SERVER__LOG_LEVEL": "info",
        },
    )
    try:
        running.start()
        running.wait_ready(READY_S)
        yield running, db
    finally:
        running.stop()


@pytest.fixture(autouse=True)
async def both_workers_up(booking_cluster: tuple[LocalCluster, Path]) -> None:
    """Every test starts on a whole cluster, whichever test killed a worker before it (the
    supervisor restarts it; it listens once warm)."""
    cluster = booking_cluster[0]
    await asyncio.to_thread(cluster.wait_ready, READY_S)


@pytest.fixture
async def store(booking_cluster: tuple[LocalCluster, Path]) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(booking_cluster[0].redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


def executions(db: Path) -> tuple[int, int]:
    """(runs begun, bookings made) of ``book_table`` so far, across every worker."""
    with contextlib.closing(connect(str(db))) as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        booked = conn.execute("SELECT count(*) FROM bookings").fetchone()[0]
    return int(runs), int(booked)


async def saved_messages(store: aioredis.Redis, session_id: str) -> list[dict[str, Any]]:
    """The session's history as its saved state in Redis holds it (tool call ids too)."""
    body = await store.get(f"voxpipe:{{{session_id}}}:state")
    messages: list[dict[str, Any]] = json.loads(body)["messages"] if body else []
    return messages


def calls_in(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for m in messages for call in m.get("tool_calls", ())]


def results_in(messages: list[dict[str, Any]], call_id: str) -> list[str]:
    return [m["content"] for m in messages if m.get("tool_call_id") == call_id]


async def until_saved(
    store: aioredis.Redis,
    session_id: str,
    probe: Callable[[list[dict[str, Any]]], bool],
    timeout_s: float,
) -> None:
    """Poll the saved state closely (a kill must land in a short window) until ``probe``."""
    deadline = time.monotonic() + timeout_s
    while not probe(await saved_messages(store, session_id)):
        assert time.monotonic() < deadline, f"the saved state never got there in {timeout_s} s"
        await asyncio.sleep(0.005)


def events_of(client: NativeClient, kind: str, since: int = 0) -> list[dict[str, Any]]:
    return [e for e in client.events[since:] if e["type"] == kind]


async def tool_started(client: NativeClient) -> dict[str, Any]:
    """The booking's ``tool.started``: the model called the tool (generous: the 0.5B model
    writes the call under a grammar, slowly on a busy machine)."""
    started: dict[str, Any] = await client.wait_for(
        lambda: next(iter(events_of(client, "tool.started")), None), 300
    )
    assert started["name"] == "book_table", started
    return started


async def answer_after(client: NativeClient, turn_id: int) -> TurnResult:
    """The first completed turn after ``turn_id``: a restored session's answer."""
    turn: TurnResult = await client.wait_for(
        lambda: next(
            (t for tid, t in sorted(client.turns.items()) if tid > turn_id and t.complete.is_set()),
            None,
        ),
        ANSWER_S,
    )
    return turn


def finished_of(client: NativeClient, call_id: str) -> dict[str, Any] | None:
    """The ``tool.finished`` of one call, once it came."""
    return next((e for e in events_of(client, "tool.finished") if e["call_id"] == call_id), None)


def contiguous(seqs: list[int]) -> bool:
    return bool(seqs) and seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def ends_on_answer(history: dict[str, Any], reply: str) -> bool:
    """The history ends on the assistant's words of ``reply`` (less any it said before a
    call, which the call's message keeps)."""
    last = history["messages"][-1]
    answer = str(last["content"]).strip()
    return last["role"] == "assistant" and bool(answer) and reply.strip().endswith(answer)


def tool_messages(history: dict[str, Any]) -> list[str]:
    return [m["content"] for m in history["messages"] if m["role"] == "tool"]


async def test_a_barge_in_while_the_tool_runs_lets_it_finish_once(
    booking_cluster: tuple[LocalCluster, Path],
    store: aioredis.Redis,
    spoken: tuple[np.ndarray, int],
    spoken_over: tuple[np.ndarray, int],
) -> None:
    cluster, db = booking_cluster
    runs_before, booked_before = executions(db)
    session_id = uuid.uuid4().hex
    client = NativeClient(cluster.ws)
    try:
        started = (await _booking_under_way(cluster, client, session_id, spoken))[2]
        t0 = time.monotonic()
        call_id, turn_id = started["call_id"], started["turn_id"]
        await client.wait_for(lambda: executions(db)[0] > runs_before, 30)
        client.say(*spoken_over)  # about 2 s of speech, well inside the 6 s booking
        said_s = time.monotonic() - t0
        booking = await client.wait_for(lambda: client.completed_turn(turn_id), ANSWER_S)
        at_barge_in = executions(db)
        answer = await answer_after(client, turn_id)
        # The booking goes on past the turn it was called in; its end is told when it comes.
        await client.wait_for(lambda: finished_of(client, call_id), ANSWER_S)
        history = await history_of(client)
        messages = await saved_messages(store, session_id)
    finally:
        await client.close()

    # The scenario: the caller spoke while the booking ran, and that ended its turn.
    assert booking.status == "interrupted", booking.done
    assert at_barge_in[1] == booked_before, f"the tool ended before the barge-in {at_barge_in}"
    # Not cancelled, not repeated: one run, one booking, and the tool said so.
    tools_said = events_of(client, "tool.started") + events_of(client, "tool.finished")
    assert executions(db) == (runs_before + 1, booked_before + 1), (executions(db), tools_said)
    bookings = [e for e in events_of(client, "tool.started") if e["name"] == "book_table"]
    assert len(bookings) == 1, tools_said
    finished = finished_of(client, call_id)
    assert finished is not None and finished["status"] == "ok", finished
    # Its result is in the history once, right after its call and before the new words.
    (call,) = [c for c in calls_in(messages) if c["name"] == "book_table"]
    assert call["call_id"] == call_id
    (result,) = results_in(messages, call_id)
    assert "booked" in result, result
    roles = [m["role"] for m in history["messages"] if m["role"] != "system"]
    assert roles[:3] == ["user", "assistant", "tool"] and roles[3] == "user", roles
    assert tool_messages(history).count(result) == 1, history
    # The caller's words over the tool were heard and answered.
    assert answer.status == "completed" and answer.reply.strip(), answer.done
    assert_spoken(answer.reply)
    assert client.duplicate_frames == [] and client.duplicate_events == []
    assert not client.errors, client.errors
    print(
        "\nbarge-in during the tool:",
        json.dumps(
            {
                "said_over_it_s_after_tool_started": round(said_s, 2),
                "tool_ms": finished["duration_ms"],
                "heard": answer.transcript,
                "tools_after": [e["name"] for e in events_of(client, "tool.started")[1:]],
                "reply": answer.reply,
            }
        ),
    )


async def test_a_reconnect_while_the_tool_runs_neither_repeats_nor_loses_it(
    booking_cluster: tuple[LocalCluster, Path],
    store: aioredis.Redis,
    spoken: tuple[np.ndarray, int],
) -> None:
    cluster, db = booking_cluster
    runs_before, booked_before = executions(db)
    session_id = uuid.uuid4().hex
    client = NativeClient(cluster.ws)
    try:
        await client.connect(session_id=session_id)
        home = worker_of(client)
        client.say(*spoken)
        started = await tool_started(client)
        t0 = time.monotonic()
        await client.drop()
        await asyncio.sleep(1.0)
        resumed = await client.reconnect(retry_s=10)
        reconnected_s = time.monotonic() - t0
        at_reconnect = executions(db)
        since = len(client.events)
        frames_before = len(client.turns[started["turn_id"]].seqs)
        turn = await client.wait_for(lambda: client.completed_turn(started["turn_id"]), ANSWER_S)
        history = await history_of(client)
        messages = await saved_messages(store, session_id)
    finally:
        await client.close()

    assert resumed["resumed"] is True and resumed["restored"] is False, resumed
    assert worker_of(client) == home, "the session moved worker on a plain reconnect"
    # The scenario: the line came back while the booking still ran.
    assert at_reconnect[1] == booked_before, f"the tool ended before the reconnect {at_reconnect}"
    # It ran once, and booked once.
    assert executions(db) == (runs_before + 1, booked_before + 1), executions(db)
    (finished,) = events_of(client, "tool.finished")
    assert len(events_of(client, "tool.started")) == 1
    assert finished["call_id"] == started["call_id"] and finished["status"] == "ok", finished
    # Its result is in the history once, and in the saved state under its call.
    (call,) = calls_in(messages)
    assert call["call_id"] == started["call_id"] and call["name"] == "book_table"
    assert len(results_in(messages, call["call_id"])) == 1, messages
    (result,) = tool_messages(history)
    assert "booked" in result, history
    # The answer came after the result, on the resumed connection, every frame once.
    answer_words = [
        e for e in events_of(client, "response.text.delta", since) if e["turn_id"] == turn.turn_id
    ]
    assert events_of(client, "tool.finished", since), "the result did not reach the new line"
    assert answer_words, "no words of the answer after the reconnect"
    assert turn.status == "completed" and turn.reply.strip(), turn.done
    assert_spoken(turn.reply)
    assert ends_on_answer(history, turn.reply), history
    assert len(turn.seqs) > frames_before and contiguous(turn.seqs), "answer audio lost"
    assert client.duplicate_frames == [] and client.duplicate_events == []
    assert not client.errors, client.errors
    print(
        "\nreconnect:",
        json.dumps(
            {
                "reconnected_s_after_tool_started": round(reconnected_s, 2),
                "tool_ms": finished["duration_ms"],
                "frames_before_reconnect": frames_before,
                "frames_after": len(turn.seqs) - frames_before,
                "worker": home,
                "reply": turn.reply,
            }
        ),
    )


async def _booking_under_way(
    cluster: LocalCluster, client: NativeClient, session_id: str, spoken: tuple[np.ndarray, int]
) -> tuple[str, int, dict[str, Any]]:
    """Connect ``client``, say the request, wait for its call to start: the worker it is on,
    that worker's pid, and the ``tool.started`` event."""
    await client.connect(session_id=session_id)
    home = worker_of(client)
    victim = int(str(cluster.worker(port_of(cluster, home))["pid"]))
    client.say(*spoken)
    return home, victim, await tool_started(client)


async def _failed_over(
    client: NativeClient, turn_id: int
) -> tuple[dict[str, Any], str, TurnResult]:
    """After the kill: the line drops, the client resumes (through nginx, on the other
    worker): the resume's answer, the worker now, and turn ``turn_id``'s
    answer."""
    await client.wait_for(lambda: client._ws.close_code is not None, 30)
    restored = await client.reconnect(retry_s=30)
    return restored, worker_of(client), await answer_after(client, turn_id)


async def test_a_tool_done_before_its_worker_dies_is_answered_by_the_other_worker(
    booking_cluster: tuple[LocalCluster, Path],
    store: aioredis.Redis,
    spoken: tuple[np.ndarray, int],
) -> None:
    cluster, db = booking_cluster
    runs_before, booked_before = executions(db)
    session_id = uuid.uuid4().hex
    client = NativeClient(cluster.ws)
    try:
        home, victim, started = await _booking_under_way(cluster, client, session_id, spoken)
        t0 = time.monotonic()
        call_id, turn_id = started["call_id"], started["turn_id"]
        await until_saved(store, session_id, lambda m: bool(results_in(m, call_id)), 60)
        os.kill(victim, signal.SIGKILL)
        killed_s = time.monotonic() - t0
        answered_before_kill = client.completed_turn(turn_id) is not None
        words_before_kill = "".join(
            e["delta"] for e in events_of(client, "response.text.delta") if e["turn_id"] == turn_id
        )
        at_kill = executions(db)
        restored, away, answer = await _failed_over(client, turn_id)
        answered_s = time.monotonic() - t0
        history = await history_of(client)
        messages = await saved_messages(store, session_id)
    finally:
        await client.close()

    # The scenario: the result was saved, the answer not yet given, when the worker died.
    assert at_kill == (runs_before + 1, booked_before + 1), at_kill
    assert not answered_before_kill, "the dead worker finished the answer before the kill"
    assert restored["resumed"] is True and restored["restored"] is True, restored
    assert away != home
    # The other worker did not run the tool again.
    assert executions(db) == (runs_before + 1, booked_before + 1), executions(db)
    (call,) = calls_in(messages)
    assert call["call_id"] == call_id
    (result,) = results_in(messages, call_id)
    assert "booked" in result and UNKNOWN not in result, result
    (shown,) = tool_messages(history)
    assert shown == result, history
    # ... and gave the answer the dead one never finished, after the result.
    assert answer.status == "completed" and answer.reply.strip(), answer.done
    assert_spoken(answer.reply)
    assert len(answer.audio) / 2 / client.output_rate > 0.3, "the answer was not spoken"
    assert ends_on_answer(history, answer.reply), history
    roles = [m["role"] for m in history["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"], history
    assert client.duplicate_frames == [] and client.duplicate_events == []
    print(
        "\nfailover after the tool:",
        json.dumps(
            {
                "tool_ms": _duration_ms(client, call_id),
                "killed_s_after_tool_started": round(killed_s, 2),
                "answer_words_before_kill": words_before_kill,
                "answered_s_after_tool_started": round(answered_s, 2),
                "home": home,
                "answered_by": away,
                "reply": answer.reply,
            }
        ),
    )


def _duration_ms(client: NativeClient, call_id: str) -> float:
    """The tool's duration as its ``tool.finished`` said, if the client got it (-1: not)."""
    done = finished_of(client, call_id)
    return float(done["duration_ms"]) if done is not None else -1.0


async def test_a_tool_whose_worker_dies_while_it_runs_is_not_run_again(
    booking_cluster: tuple[LocalCluster, Path],
    store: aioredis.Redis,
    spoken: tuple[np.ndarray, int],
) -> None:
    cluster, db = booking_cluster
    runs_before, booked_before = executions(db)
    session_id = uuid.uuid4().hex
    client = NativeClient(cluster.ws)
    try:
        home, victim, started = await _booking_under_way(cluster, client, session_id, spoken)
        t0 = time.monotonic()
        call_id, turn_id = started["call_id"], started["turn_id"]
        await until_saved(store, session_id, lambda m: any(calls_in(m)), 30)
        await client.wait_for(lambda: executions(db)[0] > runs_before, 30)
        os.kill(victim, signal.SIGKILL)
        killed_s = time.monotonic() - t0
        at_kill = executions(db)
        restored, away, answer = await _failed_over(client, turn_id)
        history = await history_of(client)
        messages = await saved_messages(store, session_id)
    finally:
        await client.close()

    # The scenario: the booking had begun, and not ended, when its worker died.
    assert at_kill == (runs_before + 1, booked_before), at_kill
    assert restored["restored"] is True and away != home, (restored, home, away)
    # Not run again: one run, begun on the dead worker; no booking.
    assert executions(db) == (runs_before + 1, booked_before), executions(db)
    (call,) = calls_in(messages)
    assert call["call_id"] == call_id
    (result,) = results_in(messages, call_id)
    assert UNKNOWN in result, result
    assert tool_messages(history) == [result], history
    assert answer.status == "completed" and answer.reply.strip() == UNKNOWN_SAID, answer.done
    assert ends_on_answer(history, answer.reply), history
    print(
        "\nfailover during the tool:",
        json.dumps(
            {
                "killed_s_after_tool_started": round(killed_s, 2),
                "home": home,
                "answered_by": away,
                "result": result,
                "reply": answer.reply,
            }
        ),
    )
