"""Reconnecting on ``/v1/voice`` (``docs/protocol.md``, "Reconnecting"), on fake engines:
a dropped connection's call waits, keeps its slot, and is resumed with what the client missed,
replayed once and in order; an unknown id, an ended call and another principal's call all get
the same ``session_not_found``; a second connection replaces the first (4003)."""

from __future__ import annotations

import json

from tests.unit.transports.native_wire import CONNECTED, DETACHED, App, Line, serve, speech

KEYS = {"api_keys": {"alice": "alice-key-0001", "bob": "bob-key-0002"}}
ALICE, BOB = "alice-key-0001", "bob-key-0002"


def position(line: Line, kind: str, frame: int) -> tuple[int, int]:
    """A resume position inside what ``line`` got: the id of its first ``kind`` event, and
    the seq of its ``frame``-th reply frame."""
    event_id = next(e["event_id"] for e in line.events if e["type"] == kind)
    return event_id, line.frames()[frame - 1][0]


def missed(line: Line, last_event_id: int, last_audio_seq: int) -> list[str | bytes]:
    """What ``line`` got after that position, as it got it."""
    out: list[str | bytes] = []
    for message in line.received:
        if isinstance(message, bytes):
            if int.from_bytes(message[:4], "little") > last_audio_seq:
                out.append(message)
        elif json.loads(message)["event_id"] > last_event_id:
            out.append(message)
    return out


async def dropped_call(app: App, session_id: str, **query: str) -> Line:
    """A call with one answered turn whose connection then vanished."""
    async with app.connect(session_id=session_id, **query) as line:
        await line.start(session_id=session_id)
        await line.speak()
        line.drop()
    await app.until_metric(DETACHED, 1)
    assert await app.metric(CONNECTED) == 0
    return line


async def test_a_resume_replays_what_was_missed_once_and_in_order() -> None:
    async with serve(clause_samples=8000) as app:  # 0.5 s of reply: 25 frames
        first = await dropped_call(app, "call-1")
        last_event_id, last_audio_seq = position(first, "transcript", 5)
        async with app.connect(session_id="call-1") as line:
            since = {"last_event_id": last_event_id, "last_audio_seq": last_audio_seq}
            started = await line.start(session_id="call-1", resume=since)
            assert started["resumed"] is True and started["session_id"] == "call-1"
            assert started["input_samples"] == len(b"".join(speech())) // 2
            assert "event_id" not in started, "it belongs to this connection, not the stream"
            want = missed(first, last_event_id, last_audio_seq)
            assert started["replayed"] == len(want) > 20
            for _ in want:
                await line.message()
            assert line.received[1:] == want, "the missed messages, byte for byte, in order"
            assert await app.metric(DETACHED) == 0 and await app.metric(CONNECTED) == 1
            # The stream goes on where it was: the next event's id follows the last one sent.
            await line.send({"type": "ping"})
            pong = await line.expect("pong")
            assert pong["event_id"] == first.events[-1]["event_id"] + 1
            # And so does the call: a second turn, its frames numbered after the first's.
            await line.speak()
            seqs = [seq for seq, turn, _ in line.frames() if turn == 2]
            assert seqs[0] == first.frames()[-1][0] + 1


async def test_a_resume_past_the_replay_buffer_says_so_and_the_call_goes_on() -> None:
    async with serve(clause_samples=8000, limits={"replay_buffer_ms": 100}) as app:
        await dropped_call(app, "call-2")
        async with app.connect(session_id="call-2") as line:
            started = await line.start(session_id="call-2", resume={})
            assert started["resumed"] is True and 0 < started["replayed"] < 25
            error = await line.until("error")
            assert error["code"] == "resume_failed" and "replay buffer" in error["message"]
            await line.usable()


async def test_unknown_and_ended_sessions_are_not_found() -> None:
    async with serve() as app:
        async with app.connect() as line:
            await line.start(session_id="ended-call")
            await line.send({"type": "session.end"})
            assert (await line.closed())[0] == 1000
        async with app.connect() as line:
            resumes = {"last_event_id": 3}
            messages = []
            for session_id in ("no-such-call", "ended-call"):
                await line.send(
                    {"type": "session.start", "session_id": session_id, "resume": resumes}
                )
                error = await line.error("session_not_found")
                messages.append(error["message"].replace(session_id, "ID"))
            assert messages[0] == messages[1], "an ended call is told apart from no call"
            await line.start(session_id="ended-call")  # its id is free again


async def test_another_principal_can_neither_resume_nor_take_a_call() -> None:
    async with serve(auth=KEYS) as app:
        await dropped_call(app, "alice-call", api_key=ALICE)
        resume = {"last_event_id": 0, "last_audio_seq": 0}
        async with app.connect(session_id="alice-call", api_key=BOB) as bob:
            start = {"type": "session.start", "session_id": "alice-call", "resume": resume}
            await bob.send(start)
            refused = await bob.error("session_not_found")
            await bob.send({**start, "session_id": "ghost-call"})
            ghost = await bob.error("session_not_found")
            assert ghost["message"] == refused["message"].replace("alice-call", "ghost-call")
            await bob.send({"type": "history.get"})
            await bob.error("session_not_started")
            await bob.send({"type": "session.start", "session_id": "alice-call"})
            await bob.error("session_id_taken")
            assert not [m for m in bob.received if "Hello there" in str(m)], "nothing leaked"
        async with app.connect(session_id="alice-call", api_key=ALICE) as alice:
            started = await alice.start(session_id="alice-call", resume=resume)
            assert started["resumed"] is True and started["replayed"] > 0


async def test_a_waiting_call_keeps_its_slot_and_its_resume_takes_no_other() -> None:
    async with serve(limits={"max_calls": 1}) as app:
        await dropped_call(app, "only-call")
        async with app.connect() as stranger:  # the one slot is held by the waiting call
            error = await stranger.error("at_capacity")
            assert "1 calls" in error["message"]
            code, reason = await stranger.closed()
            assert code == 1013 and reason.startswith("at_capacity: "), reason
        async with app.connect(session_id="only-call") as line:
            started = await line.start(session_id="only-call", resume={})
            assert started["resumed"] is True


async def test_a_resume_on_a_second_connection_replaces_the_first() -> None:
    async with serve() as app, app.connect(session_id="twice") as first:
        await first.start(session_id="twice")
        async with app.connect(session_id="twice") as second:
            started = await second.start(session_id="twice", resume={"last_event_id": 1})
            assert started["resumed"] is True
            await first.error("session_replaced")
            code, reason = await first.closed()
            assert code == 4003 and reason.startswith("session_replaced: "), reason
            await second.usable()
            assert await app.metric(CONNECTED) == 1 and await app.metric(DETACHED) == 0
