"""Call control over SIP, end to end with the real models, and bad RTP that leaks nothing.

The caller is :class:`bench.sip_vs_twilio.RtpPhone` (INVITE with a PCMU offer, ACK, RTP both
ways at real-time pace on loopback), here also answering the server's in-dialog requests:

- ``end_call``: the caller says goodbye (Piper); the agent (tests/e2e/end_call_agent.py) says
  its own, and the server's BYE comes once that goodbye has been sent: no reply audio after
  the BYE, at least 0.3 s of it before. Calls go back to 0.
- ``transfer_call``: the caller asks for a person; the agent (tests/e2e/transfer_agent.py)
  says it is putting them through, then the server sends REFER with
  ``Refer-To: <sip:+15550199@127.0.0.1>`` (the number at the host the call came from). The
  phone answers 202 and a NOTIFY whose sipfrag says the new call was answered; the server
  then hangs up (BYE). The announcement was heard before the REFER.
- bad input: SIPp's malformed-message run and a burst of garbage RTP (random bytes, RTP
  version 0 and 1, headers cut short, an unknown payload type) at an open call's media port,
  twice: the call stays up, calls go back to 0 after, no traceback, and the server's
  resident memory after the second round is within 5 MiB of after the first (the first may
  raise allocator high-water marks; a leak would grow with each round).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from bench.sip_vs_twilio import RtpPhone
from tests.e2e.test_sip import (
    _errors,
    _metric,
    _sipp,
    _successful,
    _turn_where,
    _until_no_calls,
)
from tests.support import RunningServer, free_sip_port, serving, tracebacks, voiced
from voxpipe.transports.sip.message import (
    Outgoing,
    SipRequest,
    SipResponse,
    new_branch,
    parse,
    response,
)

pytestmark = pytest.mark.e2e

RATE = 8000
REPLY_WAIT_S = 90  # the longest the caller waits for the server's BYE or REFER
MIB = 2**20


def _sip_env(agent: str) -> dict[str, str]:
    return {
        "VOXPIPE_AGENT": agent,
        "VOXPIPE_SIP__ENABLED": "true",
        "VOXPIPE_SIP__HOST": "127.0.0.1",
        "VOXPIPE_SIP__PORT": str(free_sip_port()),
    }


def _port(server: RunningServer, env: dict[str, str]) -> tuple[RunningServer, int]:
    return server, int(env["VOXPIPE_SIP__PORT"])


@pytest.fixture(scope="module")
def ending(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, int]]:
    env = _sip_env("tests.e2e.end_call_agent:agent")
    for server in serving(tmp_path_factory.mktemp("sip-end-call"), env):
        yield _port(server, env)


@pytest.fixture(scope="module")
def transferring(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, int]]:
    env = _sip_env("tests.e2e.transfer_agent:agent")
    for server in serving(tmp_path_factory.mktemp("sip-transfer"), env):
        yield _port(server, env)


class Phone(RtpPhone):
    """The caller, which also keeps the server's requests (with when each came), answers a
    REFER with 202 and then a NOTIFY that the new call was answered, and a BYE with 200."""

    def __init__(self, server: tuple[str, int]) -> None:
        super().__init__(server)
        self.requests: list[tuple[int, SipRequest]] = []  # monotonic ns of arrival
        self.notified: asyncio.Task[SipResponse] | None = None

    def _on_sip(self, data: bytes) -> None:
        message = parse(data)
        if isinstance(message, SipRequest) and message.method != "ACK":
            self.requests.append((time.monotonic_ns(), message))
        if isinstance(message, SipRequest) and message.method == "REFER":
            self._send(response(message.headers, 202, server="voxpipe-test").encode())
            if self.notified is None:  # not again for the REFER sent again
                loop = asyncio.get_running_loop()
                self.notified = loop.create_task(self._final(self._notify()))
            return
        super()._on_sip(data)

    def _notify(self) -> bytes:
        """RFC 3515's NOTIFY: the call the REFER asked for was answered."""
        self.cseq += 1
        host, port = self.server
        out = Outgoing(f"NOTIFY sip:agent@{host}:{port} SIP/2.0", body=b"SIP/2.0 200 OK\r\n")
        out.add("Via", f"SIP/2.0/UDP 127.0.0.1:{self.port};branch={new_branch()};rport")
        out.add("Max-Forwards", "70").add("From", f"<sip:bench@127.0.0.1>;tag={self.tag}")
        out.add("To", f"<sip:agent@{host}>;tag={self.to_tag}").add("Call-ID", self.call_id)
        out.add("CSeq", f"{self.cseq} NOTIFY").add("Event", "refer")
        out.add("Subscription-State", "terminated;reason=noresource")
        out.add("Contact", f"<sip:bench@127.0.0.1:{self.port}>")
        out.content_type = "message/sipfrag;version=2.0"
        return out.encode()

    def first(self, method: str) -> tuple[int, SipRequest] | None:
        return next(((at, r) for at, r in self.requests if r.method == method), None)

    async def until(self, probe: Callable[[], object], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.05)

    def voiced_s(self, before_ns: int | None = None) -> float:
        """Seconds of reply audio (the server's line silence apart) that came before."""
        return sum(
            len(pcm) / 2 / RATE for at, pcm in self.chunks if before_ns is None or at < before_ns
        )

    async def close(self) -> None:
        if self.first("BYE") is not None:  # the server hung up: nothing to end
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks.clear()
            self._remote = None
        if self.notified is not None:
            self.notified.cancel()
            await asyncio.gather(self.notified, return_exceptions=True)
        await super().close()


async def _say(phone: Phone, text: str) -> None:
    audio, rate = voiced(text)
    await asyncio.wait_for(phone.say(audio, rate, [audio.shape[0] / rate]), 30)


async def test_goodbye_over_sip_ends_with_our_bye_after_it_played(
    ending: tuple[RunningServer, int],
) -> None:
    server, port = ending
    phone = Phone(("127.0.0.1", port))
    try:
        await asyncio.wait_for(phone.open(), 20)
        await _say(phone, "Thank you, that's all. Goodbye.")
        await phone.until(lambda: phone.first("BYE"), REPLY_WAIT_S, "the server's BYE")
        bye = phone.first("BYE")
        assert bye is not None
        bye_at = bye[0]
        await asyncio.sleep(1)  # any reply audio after the BYE would arrive meanwhile
    finally:
        await phone.close()
    _until_no_calls(server)

    assert phone.voiced_s(bye_at) > 0.3, "no goodbye was heard before the BYE"
    assert phone.voiced_s() == phone.voiced_s(bye_at), "reply audio came after the BYE"
    assert [r.method for _, r in phone.requests] == ["BYE"], phone.requests
    turn = await _turn_where(server, lambda t: bool(t.get("tools")), "the goodbye's turn")
    assert [t["name"] for t in turn["tools"]] == ["end_call"], turn["tools"]
    last = max(at for at, _ in phone.chunks)
    print(
        f"sip end_call: {phone.voiced_s():.2f} s of goodbye, "
        f"BYE {(bye_at - last) / 1e9:.2f} s after its last packet"
    )
    assert not tracebacks(server.log_path.read_text())


async def test_asking_for_a_person_over_sip_sends_refer(
    transferring: tuple[RunningServer, int],
) -> None:
    server, port = transferring
    phone = Phone(("127.0.0.1", port))
    try:
        await asyncio.wait_for(phone.open(), 20)
        await _say(phone, "Can I speak to a person, please?")
        await phone.until(lambda: phone.first("REFER"), REPLY_WAIT_S, "the server's REFER")
        # The phone says the new call was answered (202, then NOTIFY): the server hangs up.
        await phone.until(lambda: phone.first("BYE"), 20, "the BYE after the transfer")
        assert phone.notified is not None
        notify_answer = await asyncio.wait_for(phone.notified, 10)
    finally:
        await phone.close()
    _until_no_calls(server)

    refer = phone.first("REFER")
    assert refer is not None
    refer_at, request = refer
    assert request.headers.get("refer-to") == "<sip:+15550199@127.0.0.1>", request.headers
    assert notify_answer.status == 200
    assert phone.voiced_s(refer_at) > 0.5, "the announcement was not heard before the REFER"
    assert [r.method for _, r in phone.requests] == ["REFER", "BYE"], phone.requests
    turn = await _turn_where(server, lambda t: bool(t.get("tools")), "the transfer's turn")
    assert [t["name"] for t in turn["tools"]] == ["transfer_call"], turn["tools"]
    assert "put you through" in turn["reply"], turn["reply"]
    last = max(at for at, _ in phone.chunks if at < refer_at)
    print(
        f"sip transfer: {phone.voiced_s(refer_at):.2f} s of announcement, REFER "
        f"{(refer_at - last) / 1e9:.2f} s after its last packet"
    )
    assert not tracebacks(server.log_path.read_text())


def _rss(server: RunningServer) -> float:
    """The server process's resident memory now, as the kernel counts it."""
    return float(psutil.Process(server.process.pid).memory_info().rss)


def _healthy(server: RunningServer) -> bool:
    return httpx.get(f"{server.http}/healthz", timeout=10).status_code == 200


def _garbage(rng: random.Random, ssrc: int) -> list[bytes]:
    """Bad RTP of every kind: random bytes, versions 0 and 1, cut-short headers, an unknown
    payload type (a well-formed header of ours, payload type 77)."""
    packets: list[bytes] = []
    for i in range(400):
        size = rng.randrange(1, 400)
        packets.append(rng.randbytes(size))  # random
        body = rng.randbytes(rng.randrange(12, 200))
        packets.append(bytes([rng.choice((0x00, 0x40)) | (body[0] & 0x3F)]) + body[1:])  # v0, v1
        packets.append(bytes([0x80, 0x00]) + rng.randbytes(rng.randrange(0, 10)))  # < 12 bytes
        header = bytes([0x80, 77]) + (i % 65536).to_bytes(2, "big") + (i * 160).to_bytes(4, "big")
        packets.append(header + ssrc.to_bytes(4, "big") + rng.randbytes(160))  # unknown PT
        # CSRC count or extension saying more header than the packet has
        packets.append(bytes([0x8F, 0x00]) + rng.randbytes(14))
        packets.append(bytes([0x90, 0x00]) + rng.randbytes(10) + b"\xff\xff\xff\xff")
    return packets


async def test_bad_sip_and_rtp_leak_no_call_and_no_memory(
    ending: tuple[RunningServer, int], tmp_path: Path
) -> None:
    server, port = ending
    rng = random.Random(27)
    phone = Phone(("127.0.0.1", port))
    rss: list[float] = []
    dropped = _metric(server, "voxpipe_rtp_dropped_total")
    try:
        await asyncio.wait_for(phone.open(), 20)
        await asyncio.sleep(1)
        rss.append(_rss(server))
        for round_ in range(2):
            bad = await asyncio.to_thread(_sipp, tmp_path, port, "malformed.xml", 1)
            assert bad.returncode == 0 and _successful(bad) == 1, (
                bad.stdout[-2000:],
                _errors(tmp_path),
            )
            assert phone._rtp is not None and phone._remote is not None
            packets = _garbage(rng, rng.getrandbits(32))
            for start in range(0, len(packets), 50):  # from the call's own RTP address
                for packet in packets[start : start + 50]:
                    phone._rtp.sendto(packet, phone._remote)
                await asyncio.sleep(0.005)
            await asyncio.sleep(2)
            assert not phone.requests, f"round {round_}: the call ended: {phone.requests}"
            rss.append(_rss(server))
        sent_bad = 2 * len(packets)
    finally:
        await phone.close()
    _until_no_calls(server)
    # Loopback may drop some of a burst: most of it reached the call, and was refused.
    counted = _metric(server, "voxpipe_rtp_dropped_total") - dropped
    assert counted >= sent_bad // 2, (counted, sent_bad)
    assert _healthy(server)
    assert not tracebacks(server.log_path.read_text())
    print(f"sip bad input: RSS {' -> '.join(f'{r / MIB:.1f}' for r in rss)} MiB")
    assert rss[1] - rss[0] <= 20 * MIB, rss
    assert rss[2] - rss[1] <= 5 * MIB, rss
    # the next call still works, and ends
    after = await asyncio.to_thread(_sipp, tmp_path, port, "calls.xml", 1)
    assert after.returncode == 0, (after.stdout[-2000:], _errors(tmp_path))
    _until_no_calls(server)
