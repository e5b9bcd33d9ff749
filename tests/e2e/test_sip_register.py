"""Registration with a real registrar: Kamailio (``sip/registrar.cfg``: usrloc in memory,
digest authentication with a plaintext password through ``pv_www_authenticate``).

- The server (real models) registers as ``agent`` with its password: Kamailio challenges
  (401, qop=auth), the digest answer is accepted and the binding saved; a call to
  ``sip:agent@<kamailio>`` (SIPp's ``sip/calls.xml``) is routed by Kamailio to the server,
  which answers it; the binding is renewed before it expires; at shutdown the server
  removes it (``Expires: 0``), and the next call to ``agent`` gets Kamailio's 404 at once,
  long before the binding would have run out.
- A user agent with the wrong password is refused (Kamailio never saves a binding) and
  says so, without ending anything.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_sip import _errors, _sipp, _successful, _until_no_calls
from tests.e2e.test_sip_kamailio import _until_answering
from tests.support import free_sip_port, serving, tracebacks
from voxpipe.config import SipConfig
from voxpipe.observability.metrics import Metrics
from voxpipe.transports.call import CallEnd
from voxpipe.transports.sip.user_agent import SipUserAgent

pytestmark = pytest.mark.e2e

CONFIG = Path(__file__).parent / "sip" / "registrar.cfg"
USER, PASSWORD = "agent", "s3cret-Pa55"
EXPIRES_S = 6  # renewed after 4.8 s; removed at shutdown


@pytest.fixture(scope="module")
def registrar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """Kamailio as a registrar on loopback; its port and its log."""
    folder = tmp_path_factory.mktemp("registrar")
    port = free_sip_port()
    config = folder / "registrar.cfg"
    config.write_text(
        CONFIG.read_text()
        .replace("LISTEN", f"127.0.0.1:{port}")
        .replace("USERNAME", USER)
        .replace("PASSWORD", PASSWORD)
    )
    log_path = folder / "kamailio.log"
    with log_path.open("wb") as log:
        command = ["kamailio", "-f", str(config), "-DD", "-E", "-Y", str(folder)]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _until_answering(port)
            yield port, log_path
        finally:
            process.terminate()
            process.wait(10)


def _saved(log: Path, expires: int) -> int:
    return len(re.findall(rf"saved sip:{USER}@127\.0\.0\.1 expires={expires}\b", log.read_text()))


def _until(probe: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _invite_status(port: int) -> bytes:
    """A bare INVITE for ``agent`` sent to Kamailio; the first line of its final answer."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.settimeout(5)
        udp.bind(("127.0.0.1", 0))
        via = f"127.0.0.1:{udp.getsockname()[1]};branch=z9hG4bKr{time.monotonic_ns()};rport"
        invite = (
            f"INVITE sip:{USER}@127.0.0.1:{port} SIP/2.0\r\nVia: SIP/2.0/UDP {via}\r\n"
            f"From: <sip:t@127.0.0.1>;tag=1\r\nTo: <sip:{USER}@127.0.0.1>\r\nCall-ID: r1\r\n"
            "CSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        )
        udp.sendto(invite.encode(), ("127.0.0.1", port))
        while True:
            answer = udp.recv(65536)
            if not answer.startswith(b"SIP/2.0 1"):
                return answer.split(b"\r\n", 1)[0]


def test_the_server_registers_gets_calls_renews_and_unregisters(
    registrar: tuple[int, Path], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    port, log = registrar
    env = {
        "VOXPIPE_SIP__ENABLED": "true",
        "VOXPIPE_SIP__HOST": "127.0.0.1",
        "VOXPIPE_SIP__PORT": str(free_sip_port()),
        "VOXPIPE_SIP__REGISTRAR": f"sip:127.0.0.1:{port}",
        "VOXPIPE_SIP__USERNAME": USER,
        "VOXPIPE_SIP__PASSWORD": PASSWORD,
        "VOXPIPE_SIP__REGISTER_EXPIRES_S": str(EXPIRES_S),
    }
    for server in serving(tmp_path_factory.mktemp("registered"), env):
        _until(lambda: _saved(log, EXPIRES_S) >= 1, 30, "registered")
        assert "registrar: challenge" in log.read_text()  # the digest answered a challenge

        run = _sipp(tmp_path, port, "calls.xml", 3)  # INVITE sip:agent@<kamailio>
        assert run.returncode == 0 and _successful(run) == 3, (
            run.stdout[-2000:],
            _errors(tmp_path),
        )
        _until_no_calls(server)

        renewed = _saved(log, EXPIRES_S)
        _until(lambda n=renewed: _saved(log, EXPIRES_S) >= n + 2, 3 * EXPIRES_S, "renewed")
        server_log = server.log_path
    # The server has stopped (SIGTERM): its binding was removed as it went.
    assert _invite_status(port).startswith(b"SIP/2.0 404"), "no binding left"
    assert _saved(log, 0) == 1
    assert not tracebacks(server_log.read_text())


class _Door:
    def refusing(self) -> CallEnd | None:
        return None


async def test_wrong_credentials_are_refused_and_said(
    registrar: tuple[int, Path], caplog: pytest.LogCaptureFixture
) -> None:
    port, log = registrar
    saved = _saved(log, EXPIRES_S)
    config = SipConfig(
        enabled=True,
        host="127.0.0.1",
        port=0,
        registrar=f"sip:127.0.0.1:{port}",
        username=USER,
        password="not-the-password",  # type: ignore[arg-type]
        register_expires_s=EXPIRES_S,
        register_retry_s=60,
    )
    agent = SipUserAgent(config, _Door(), Metrics())  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, "voxpipe.sip"):
        await agent.start()
        try:
            async with asyncio.timeout(10):
                while "registration of" not in caplog.text:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:
            await agent.close()
    assert "401: the credentials were refused" in caplog.text
    assert agent.registration is not None and agent.registration.registrations == 0
    assert _saved(log, EXPIRES_S) == saved  # Kamailio kept no binding
