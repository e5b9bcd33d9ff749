"""Beyond one machine: nginx + Redis + 2 workers on loopback, session affinity, and a
call that carries on after its worker is killed mid-reply."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.support import history_of, librivox_clips, metric_value
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.server.local_cluster import LocalCluster, free_port_run

pytestmark = pytest.mark.e2e

BRIEF = "You are a voice assistant. Answer every message with one short sentence."
WORKER_HEADER = "x-voxpipe-worker"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(
        tmp_path_factory.mktemp("cluster"),
        port=free_port_run(3),
        workers=2,
        redis_port=free_port_run(1),
        env={"VOXPIPE_SERVER__RESUME_GRACE_S": "60", "VOXPIPE_SERVER__LOG_LEVEL": "info"},
    )
    try:
        running.start()
        running.wait_ready()
        yield running
    finally:
        running.stop()


async def readiness(cluster: LocalCluster) -> list[list[int]]:
    """Each worker's /readyz status (0: not listening), polled until both are 200 (for up to
    two minutes: a killed worker's restart loads and warms its models); every poll."""

    async def statuses() -> list[int]:
        out = []
        async with httpx.AsyncClient(timeout=2) as http:
            for port in cluster.worker_ports:
                try:
                    out.append((await http.get(f"http://127.0.0.1:{port}/readyz")).status_code)
                except httpx.ConnectError:
                    out.append(0)
        return out

    seen: list[list[int]] = []
    for _ in range(600):
        seen.append(await statuses())
        if seen[-1] == [200, 200]:
            break
        await asyncio.sleep(0.2)
    return seen


@pytest.fixture(autouse=True)
async def both_workers_up(cluster: LocalCluster) -> None:
    """Every test starts on a whole cluster, whichever test killed a worker before it."""
    seen = await readiness(cluster)
    assert seen[-1] == [200, 200], seen[-5:]


async def restores(port: int) -> tuple[float, float]:
    """A worker's sessions restored from Redis, and LLM contexts it rebuilt, so far."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    restored = metric_value(text, 'voxpipe_session_restores_total{outcome="restored"}') or 0
    return restored, metric_value(text, "voxpipe_context_rebuild_seconds_count") or 0


def worker_of(client: NativeClient) -> str:
    """The worker that answered this client's latest handshake (through nginx)."""
    name: str = client._ws.response.headers[WORKER_HEADER]
    return name


def port_of(cluster: LocalCluster, worker: str) -> int:
    for port in cluster.worker_ports:
        if cluster.worker(port)["worker"] == worker:
            return port
    raise LookupError(worker)


def upstreams_of(cluster: LocalCluster, session_id: str) -> list[str]:
    """Which worker served each connection of ``session_id``, in order (the last of the
    workers nginx tried for it)."""
    lines = cluster.access_log.read_text().splitlines()
    found = (re.search(r'session=(\S+) upstream="([^"]*)"', line) for line in lines)
    return [m.group(2).split(", ")[-1] for m in found if m and m.group(1) == session_id]


def worries(cluster: LocalCluster) -> list[str]:
    """The workers' warnings and errors, for a failure's message."""
    log = (cluster.workdir / "workers.log").read_text(errors="replace").splitlines()
    return [line for line in log if " WARNING " in line or " ERROR " in line][-20:]


async def test_sessions_stay_on_one_worker_and_spread_across_workers(
    cluster: LocalCluster,
) -> None:
    seen: dict[str, set[str]] = {}
    # Eight sessions at least; more while all have hashed to one worker (8 random sessions
    # do so 1 time in 128 on a sound hash; 40 of them, about once in 10^12).
    while len(seen) < 8 or (len(set().union(*seen.values())) < 2 and len(seen) < 40):
        session_id = uuid.uuid4().hex
        client = NativeClient(cluster.ws)
        await client.connect(session_id=session_id, instructions=BRIEF)
        workers = {worker_of(client)}
        for _ in range(2):  # a dropped connection resumes where the session lives
            await client.drop()
            resumed = await client.reconnect(retry_s=10)
            assert resumed["resumed"] is True and resumed["restored"] is False, resumed
            workers.add(worker_of(client))
        await client.close()
        seen[session_id] = workers
    assert all(len(w) == 1 for w in seen.values()), seen
    assert len(set().union(*seen.values())) == 2, f"the hash sent every session to one {seen}"


async def test_a_call_carries_on_after_its_worker_is_killed(cluster: LocalCluster) -> None:
    """The call goes on on the other worker; the supervisor brings the killed one back, and
    it listens only once warm, so it answers /readyz 200 from its first reachable moment."""
    clips = librivox_clips()
    first, second, third, fourth = (read_wav(clips[i].path) for i in (1, 2, 3, 4))
    session_id = uuid.uuid4().hex
    client = NativeClient(cluster.ws)
    try:
        await client.connect(session_id=session_id, instructions=BRIEF)
        home = worker_of(client)
        home_port = port_of(cluster, home)
        other_port = next(p for p in cluster.worker_ports if p != home_port)
        restored_before, rebuilt_before = await restores(other_port)
        one = await client.speak(*first)
        two = await client.speak(*second)
        # Kill the worker while it speaks the reply to turn 3.
        client.say(*third)
        three = await client.wait_for(lambda: client.turns.get(3), 90)
        await client.wait_for(lambda: three.first_audio_ns, 90)
        heard_before = len(three.seqs)
        victim = cluster.worker(port_of(cluster, home))
        os.kill(int(str(victim["pid"])), signal.SIGKILL)
        await client.wait_for(lambda: client._ws.close_code is not None, 30)
        restored = await client.reconnect(retry_s=30)
        away = worker_of(client)
        assert restored["resumed"] is True and restored["restored"] is True, restored
        assert away != home
        # The new worker answers the unanswered utterance again, from the resent audio.
        three = await client.wait_for(lambda: client.completed_turn(3), 120)
        four = await client.speak(*fourth)
        history = await history_of(client)
    finally:
        await client.close()

    assert client.duplicate_frames == [] and client.duplicate_events == []
    assert sorted(client.turns) == [1, 2, 3, 4], "a turn was lost or split"
    statuses = [t.status for t in (one, two, three, four)]
    assert statuses == ["completed"] * 4, (statuses, client.errors, worries(cluster))
    assert len(three.seqs) > heard_before, "turn 3 was not answered after the failover"
    for turn in (one, two, four):
        seqs = turn.seqs
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "reply frames lost"
    # Every earlier turn is in the conversation the new worker holds, once.
    users = [m["content"] for m in history["messages"] if m["role"] == "user"]
    assert len(users) == 4, history
    for said, clip in zip(users, (clips[1], clips[2], clips[3], clips[4]), strict=True):
        expected = set(clip.text.lower().split())
        words = set(re.sub(r"[^\w\s']", " ", said.lower()).split())
        assert len(words & expected) >= len(expected) // 2, (said, clip.text)
    # nginx sent every connection of the call to its worker until that worker died.
    home_port, away_port = port_of_addr(cluster, home), port_of_addr(cluster, away)
    hops = upstreams_of(cluster, session_id)
    assert hops and hops[0].endswith(f":{home_port}"), hops
    after = [h for h in hops if not h.endswith(f":{home_port}")]
    assert after and all(h.endswith(f":{away_port}") for h in after), hops
    # The new worker restored the session from Redis and rebuilt its LLM context.
    assert away_port == other_port
    restored_now, rebuilt_now = await restores(away_port)
    assert restored_now == restored_before + 1 and rebuilt_now >= rebuilt_before + 1
    # The killed worker is restarted, and answers only once warm.
    seen = await readiness(cluster)
    assert seen[-1] == [200, 200], seen[-5:]
    assert all(code in (0, 200) for codes in seen for code in codes), "a cold worker answered"


def port_of_addr(cluster: LocalCluster, worker: str) -> int:
    """A worker's port from its name (``w0`` is the first port), even after it died."""
    return cluster.worker_ports[int(worker.removeprefix("w"))]


async def test_a_copy_left_behind_on_a_worker_gives_way_to_the_newer_state(
    cluster: LocalCluster,
) -> None:
    """A session that moved on elsewhere while its old worker still held it (waiting for a
    reconnect): coming back to the old worker must not resurrect the old conversation."""
    clips = librivox_clips()
    first, second = (read_wav(clips[i].path) for i in (0, 1))
    home, other = (f"ws://127.0.0.1:{p}/v1/voice" for p in cluster.worker_ports)
    client = NativeClient(home)  # straight to the workers: no hash to keep it home
    try:
        await client.connect(session_id=uuid.uuid4().hex, instructions=BRIEF)
        await client.speak(*first)
        await client.drop()  # home keeps its copy for resume_grace_s
        client.url = other
        moved = await client.reconnect(retry_s=10)
        assert moved["restored"] is True, moved
        await client.speak(*second)
        await client.drop()
        client.url = home
        back = await client.reconnect(retry_s=10)
        history = await history_of(client)
    finally:
        await client.close()
    assert back["restored"] is True, "the worker resumed its own, older copy"
    users = [m["content"] for m in history["messages"] if m["role"] == "user"]
    assert len(users) == 2, history
    assert client.duplicate_frames == [] and client.duplicate_events == []
