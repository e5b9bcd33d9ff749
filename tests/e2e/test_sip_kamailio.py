"""SIP scale-out through Kamailio (``deploy/kamailio/``): the dispatcher in front of two
workers spreads new calls over both, and once one worker is killed (SIGKILL: no drain, no
goodbye), every new call reaches the live one.

The workers are real servers with the real models; Kamailio runs the shipped configuration
with only its listening address and its dispatcher list changed; the calls are SIPp's
(``sip/calls.xml``: INVITE, ACK, BYE through Kamailio's Record-Route).
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_sip import (
    _errors,
    _metric,
    _sipp,
    _successful,
    _until_no_calls,
)
from tests.support import RunningServer, free_sip_port, start_server, stop_server, wait_ready

pytestmark = pytest.mark.e2e

CONFIG = Path(__file__).parents[2] / "deploy" / "kamailio" / "kamailio.cfg"
CALLS = 10


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[RunningServer, int]]]:
    """Two servers answering SIP on loopback, each on its own port."""
    started = []
    try:
        for name in ("a", "b"):
            port = free_sip_port()
            env = {
                "VOXPIPE_SIP__ENABLED": "true",
                "VOXPIPE_SIP__HOST": "127.0.0.1",
                "VOXPIPE_SIP__PORT": str(port),
                "VOXPIPE_LIMITS__MAX_CALLS": "8",  # as in test_sip.py: room for SIPp's 3
            }
            started.append((start_server(tmp_path_factory.mktemp(f"worker-{name}"), env), port))
        for server, _ in started:
            wait_ready(server)
        yield started
    finally:
        for server, _ in started:
            if server.alive():
                stop_server(server)


@pytest.fixture(scope="module")
def kamailio(
    workers: list[tuple[RunningServer, int]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    """Kamailio with the shipped configuration, dispatching to the workers; its port."""
    folder = tmp_path_factory.mktemp("kamailio")
    port = free_sip_port()
    targets = folder / "dispatcher.list"
    targets.write_text("".join(f"1 sip:127.0.0.1:{p}\n" for _, p in workers))
    config = folder / "kamailio.cfg"
    config.write_text(
        CONFIG.read_text()
        .replace("udp:0.0.0.0:5060", f"udp:127.0.0.1:{port}")
        .replace("tcp:0.0.0.0:5060", f"tcp:127.0.0.1:{port}")
        .replace("/etc/kamailio/dispatcher.list", str(targets))
    )
    log = (folder / "kamailio.log").open("wb")
    command = ["kamailio", "-f", str(config), "-DD", "-E", "-Y", str(folder)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        _until_answering(port)
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def _until_answering(port: int, timeout_s: float = 30) -> None:
    """Kamailio answers an OPTIONS to itself (it is listening and its script runs); UDP, so
    the probe is sent again until an answer comes or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(0.5)
        udp.bind(("127.0.0.1", 0))
        via = f"127.0.0.1:{udp.getsockname()[1]};branch=z9hG4bKk1;rport".encode()
        probe = (
            b"OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP " + via + b"\r\n"
            b"From: <sip:t@127.0.0.1>;tag=1\r\nTo: <sip:127.0.0.1>\r\nCall-ID: k1\r\n"
            b"CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        )
        while True:
            udp.sendto(probe, ("127.0.0.1", port))
            try:
                answer = udp.recv(65536)
            except OSError:  # no answer yet (or ICMP: nothing listening yet)
                assert time.monotonic() < deadline, "Kamailio answers"
                continue
            assert answer.startswith(b"SIP/2.0 200"), answer[:200]
            return


def _accepted(server: RunningServer) -> float:
    return _metric(server, "voxpipe_connections_total", transport="sip", outcome="accepted")


# Kamailio's UDP receivers are several processes, so a worker's 180 and 200, sent back to back,
# may reach the caller in the other order (a CI run: a 180 after the 200, during the pause
# after the ACK). A phone ignores a late provisional response; SIPp aborts the call on it
# unless told to go on. It goes on, and the test then checks that every message SIPp did not
# expect was such a provisional response and nothing else.
GO_ON = ("-default_behaviors", "all,-abortunexp")


def _unexpected(tmp: Path) -> list[str]:
    """The first line of each message SIPp received out of its scenario's order."""
    return re.findall(r"on unexpected message for Call-Id [^\n]*?received '([^\n]*)", _errors(tmp))


def _run_calls(tmp: Path, kamailio: int) -> None:
    """``CALLS`` calls through Kamailio, every one set up and torn down."""
    run = _sipp(tmp, kamailio, "calls.xml", CALLS, *GO_ON)
    assert run.returncode == 0 and _successful(run) == CALLS, (run.stdout[-2000:], _errors(tmp))
    stray = [line for line in _unexpected(tmp) if not re.match(r"SIP/2\.0 1\d\d ", line)]
    assert not stray, _errors(tmp)


def test_calls_are_spread_and_fail_over_when_a_worker_dies(
    workers: list[tuple[RunningServer, int]], kamailio: int, tmp_path: Path
) -> None:
    (a, _), (b, _) = workers
    _run_calls(tmp_path, kamailio)
    spread = [_accepted(a), _accepted(b)]
    assert sum(spread) == CALLS and min(spread) > 0, spread  # round robin: both took calls
    _until_no_calls(a)
    _until_no_calls(b)

    a.process.kill()  # no drain, no goodbye: the worker is gone
    a.process.wait(10)
    before = _accepted(b)
    _run_calls(tmp_path, kamailio)
    assert _accepted(b) - before == CALLS  # every new call reached the live worker
    _until_no_calls(b)
