"""``python -m bench sip-vs-twilio``: first answer audio over SIP against Twilio, same clips.

Issue 27 asks that a caller on SIP hear the answer no later than a caller on Twilio Media
Streams. One server with SIP on; calls alternate between the two transports, one at a time,
each round's pair saying the same sentences (long LibriVox read sentences and short card
names, :func:`bench.caller_bench.conversation`) at real-time pace, the order swapped every
round, so a busy machine (2 cores, other work on it) weighs on both alike. The LLM decodes
greedily on the same prompt (the server's: neither caller sends instructions).

- **Twilio**: :class:`~bench.transport_callers.TwilioCaller`, μ-law in 20 ms media messages
  over the WebSocket, the reply played as Twilio plays it.
- **SIP**: :class:`RtpPhone`, a caller written here: INVITE with a PCMU offer (the SDP our
  own outbound calls offer), ACK, and RTP both ways on loopback UDP, one μ-law packet every
  20 ms, silence between sentences as a phone sends. The server's line silence between
  replies (it never stops sending) is not reply audio (:func:`line_silence`). baresip would
  do the call too, but cannot say when each of its packets left or arrived.

Both are measured as ``python -m bench caller`` measures Twilio, at the caller's side and
by the same code (:func:`bench.caller_bench.hold_call`, :func:`bench.caller_bench.turn_rows`):
from when the packet holding the caller's last loud sample left, to when the first voiced
reply audio of the answer (the filler apart) arrived. The report is p50/p95/p99 per
transport, SIP over Twilio, and the server's own first-audio time beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import socket
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from bench.caller_bench import (
    CallLog,
    Clip,
    Line,
    TurnLogFollower,
    bench_config,
    conversation,
    hold_call,
    load_average,
    speech_clips,
    turn_rows,
)
from bench.caller_turns import ReplyFrame, spread
from bench.person import Person
from bench.transport_callers import TwilioCaller, cut_at_marks, voiced
from voxpipe.audio.pcm import float_to_pcm16, resample, ulaw_decode, ulaw_encode
from voxpipe.clients.line_playback import Playback
from voxpipe.config import Config
from voxpipe.transports.sip import rtp, sdp
from voxpipe.transports.sip.message import (
    Outgoing,
    SipRequest,
    SipResponse,
    new_branch,
    parse,
    response,
)

TRANSPORTS = ("twilio", "sip")
RATE = 8000
FRAME = 160  # samples in a 20 ms packet
FRAME_S = FRAME / RATE
SILENCE = ulaw_encode(bytes(2 * FRAME))
ULAW_ZERO = frozenset({0xFF, 0x7F})  # μ-law's +0 and -0
SIP_TIMEOUT_S = 10.0  # for the 200 to our INVITE, and the session's record
T1_S = 0.5  # our INVITE is sent again after this, then twice as long (UDP)
BYE_TIMEOUT_S = 4.0
MAX_LATE_S = 0.1  # a send clock this far behind restarts instead of bursting


def line_silence(payload: bytes) -> bool:
    """Whether a μ-law packet is all zero samples: the server's fill between replies, not
    reply audio (a reply frame that ends early is padded, but holds audio)."""
    return bool(payload) and set(payload) <= ULAW_ZERO


def newest_session(
    rows: Iterable[tuple[str, float]], since_s: float, known: Iterable[str]
) -> str | None:
    """The session of the call we placed: the newest record of the server's store (session
    id, start, wall-clock s) begun at ``since_s`` or later, not one of ``known``."""
    known = set(known)
    fresh = [(start, sid) for sid, start in rows if start >= since_s and sid not in known]
    return max(fresh)[1] if fresh else None


# -- the SIP caller -----------------------------------------------------------------------


class _Inbox(asyncio.DatagramProtocol):
    def __init__(self, on: Any) -> None:
        self.on = on

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.on(data)


@dataclass
class _Piece:
    """Caller speech queued on the line; ``sent`` is set once its last packet has left."""

    packets: list[bytes]
    sent: asyncio.Event = field(default_factory=asyncio.Event)


class RtpPhone:
    """A SIP phone on loopback: one call to ``sip:agent@host:port``, RTP at real-time pace
    both ways, every reply packet that holds audio kept with its arrival."""

    def __init__(self, server: tuple[str, int]) -> None:
        self.server = server
        self.call_id = f"{secrets.token_hex(8)}@bench"
        self.tag = secrets.token_hex(4)
        self.to_tag: str | None = None
        self.cseq = 1
        self.playback = Playback()  # the phone's speaker: reply audio plays in real time
        self.chunks: list[tuple[int, bytes]] = []  # reply audio (PCM16) and its arrival, ns
        self._responses: asyncio.Queue[SipResponse] = asyncio.Queue()
        self._queue: list[_Piece] = []
        self._remote: tuple[str, int] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._sip: asyncio.DatagramTransport | None = None
        self._rtp: asyncio.DatagramTransport | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        sip_end, _ = await loop.create_datagram_endpoint(
            lambda: _Inbox(self._on_sip), local_addr=("127.0.0.1", 0)
        )
        rtp_end, _ = await loop.create_datagram_endpoint(
            lambda: _Inbox(self._on_rtp), local_addr=("127.0.0.1", 0)
        )
        self._sip, self._rtp = cast(asyncio.DatagramTransport, sip_end), rtp_end
        self.port = self._sip.get_extra_info("sockname")[1]
        rtp_port = self._rtp.get_extra_info("sockname")[1]
        invite = self._request("INVITE", sdp.offer(["PCMU"], "127.0.0.1", rtp_port))
        ok = await self._final(invite)
        if ok.status != 200:
            raise RuntimeError(f"the INVITE was answered {ok.status}")
        self.to_tag = ok.to_tag
        answer = sdp.parse_offer(ok.body)
        self._remote = (answer.address, answer.port)
        self._send(self._request("ACK", cseq=self.cseq))
        self._tasks.append(loop.create_task(self._speak(), name="sip-phone-rtp"))

    def _request(self, method: str, body: bytes = b"", cseq: int | None = None) -> bytes:
        if cseq is None:
            self.cseq += 1
            cseq = self.cseq
        host, port = self.server
        to = f"<sip:agent@{host}>" + (f";tag={self.to_tag}" if self.to_tag else "")
        out = Outgoing(f"{method} sip:agent@{host}:{port} SIP/2.0", body=body)
        out.add("Via", f"SIP/2.0/UDP 127.0.0.1:{self.port};branch={new_branch()};rport")
        out.add("Max-Forwards", "70").add("From", f"<sip:bench@127.0.0.1>;tag={self.tag}")
        out.add("To", to).add("Call-ID", self.call_id).add("CSeq", f"{cseq} {method}")
        out.add("Contact", f"<sip:bench@127.0.0.1:{self.port}>")
        out.content_type = "application/sdp" if body else None
        return out.encode()

    def _send(self, data: bytes) -> None:
        assert self._sip is not None
        self._sip.sendto(data, self.server)

    async def _final(self, request: bytes) -> SipResponse:
        """The final answer to ``request``, sent again over UDP until anything answers."""
        wait, deadline = T1_S, time.monotonic() + SIP_TIMEOUT_S
        self._send(request)
        heard = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no final answer from the SIP server")
            try:
                response = await asyncio.wait_for(self._responses.get(), min(wait, left))
            except TimeoutError:
                if not heard:
                    self._send(request)
                    wait *= 2
                continue
            heard = True
            if response.status >= 200:
                return response

    def _on_sip(self, data: bytes) -> None:
        message = parse(data)
        if isinstance(message, SipResponse):
            self._responses.put_nowait(message)
        elif isinstance(message, SipRequest) and message.method != "ACK":
            self._answer(message)  # the server's BYE (the call's end): 200

    def _answer(self, request: SipRequest) -> None:
        self._send(response(request.headers, 200, server="voxpipe-bench").encode())

    def _on_rtp(self, data: bytes) -> None:
        try:
            packet = rtp.parse(data)
        except rtp.BadPacket:
            return
        if packet.payload_type != 0 or line_silence(packet.payload):
            return
        now = time.monotonic()
        self.chunks.append((round(now * 1e9), ulaw_decode(packet.payload)))
        self.playback.audio(now, len(packet.payload) / RATE)

    async def _speak(self) -> None:
        """One packet every 20 ms: the queued speech, else silence."""
        assert self._rtp is not None and self._remote is not None
        ssrc, seq, stamp = secrets.randbits(32), secrets.randbits(16), secrets.randbits(32)
        start, ticks = time.monotonic(), 0
        while True:
            piece = self._queue[0] if self._queue else None
            payload = piece.packets.pop(0) if piece is not None else SILENCE
            packet = rtp.RtpPacket(0, seq, stamp, ssrc, payload, ticks == 0)
            self._rtp.sendto(rtp.build(packet), self._remote)
            if piece is not None and not piece.packets:
                self._queue.pop(0)
                piece.sent.set()
            seq, stamp, ticks = (seq + 1) % 65536, (stamp + FRAME) % (1 << 32), ticks + 1
            due = start + ticks * FRAME_S
            now = time.monotonic()
            if now - due > MAX_LATE_S:
                start, ticks = now, 0
            elif due > now:
                await asyncio.sleep(due - now)

    async def say(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[int]:
        """Queue a clip; once the packets holding each of the ascending ``marks_s`` have
        left, return when each left (monotonic ns), as the Twilio caller does."""
        pieces = cut_at_marks(resample(audio, rate, RATE), RATE, marks_s, FRAME)
        queued: list[_Piece | None] = []
        for piece in pieces:
            if not piece.shape[0]:
                queued.append(None)
                continue
            wire = ulaw_encode(float_to_pcm16(piece))
            wire += SILENCE[: -len(wire) % FRAME]  # the last packet filled with silence
            piece_out = _Piece([wire[i : i + FRAME] for i in range(0, len(wire), FRAME)])
            self._queue.append(piece_out)
            queued.append(piece_out)
        sent, at = [], time.monotonic_ns()
        for said in queued[: len(marks_s)]:
            if said is not None:  # an empty piece: its mark is in the packet before
                await said.sent.wait()
                at = time.monotonic_ns()
            sent.append(at)
        return sent

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            if self._remote is not None:  # the call is up: hang up
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._final(self._request("BYE")), BYE_TIMEOUT_S)
        finally:
            for end in (self._sip, self._rtp):
                if end is not None:
                    end.close()


class SipLine(Line):
    """:class:`RtpPhone` as the person's ear and mouth in :func:`bench.caller_bench.hold_call`.
    Its session id is read from the server's store: the call's record that began after
    the INVITE (calls are held one at a time)."""

    def __init__(self, server: tuple[str, int], store: Path, known: set[str]) -> None:
        self.transport = "sip"
        self.phone = RtpPhone(server)
        self.store = store
        self.known = known
        self._session_id = ""

    @property
    def session_id(self) -> str:
        return self._session_id

    async def open(self) -> None:
        since = time.time() - 1.0  # the store's clock is the wall clock
        await self.phone.open()
        deadline = time.monotonic() + SIP_TIMEOUT_S
        while not self._session_id:
            found = newest_session(await asyncio.to_thread(_calls, self.store), since, self.known)
            if found is not None:
                self._session_id = found
            elif time.monotonic() > deadline:
                raise TimeoutError("the SIP call's session is not in the server's store")
            else:
                await asyncio.sleep(0.05)
        self.known.add(self._session_id)

    async def say(self, clip: Clip) -> tuple[int, int]:
        start, end = await self.phone.say(clip.audio, clip.rate, [clip.start_s, clip.end_s])
        return start, end

    def audio_mark(self) -> object:
        return self.phone.playback.received_s

    def playing_until_ns(self, now_ns: int) -> int:
        return now_ns + round(self.phone.playback.buffered_s * 1e9)

    def frames(self) -> list[ReplyFrame]:
        return [
            ReplyFrame(at, round(len(pcm) / 2 / RATE * 1e9), voiced(pcm, RATE))
            for at, pcm in self.phone.chunks
        ]

    async def close(self) -> None:
        await self.phone.close()


def _calls(store: Path) -> list[tuple[str, float]]:
    """(session id, start) of the store's latest calls, read without writing."""
    if not store.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        try:
            rows = db.execute(
                "SELECT session_id, started_at FROM calls ORDER BY started_at DESC LIMIT 20"
            ).fetchall()
        except sqlite3.OperationalError:  # the server is creating it
            return []
    return [(str(sid), float(start)) for sid, start in rows]


# -- the calls -----------------------------------------------------------------------------


def round_order(call: int) -> tuple[str, ...]:
    """Which transport calls first in round ``call``: swapped every round."""
    return TRANSPORTS if call % 2 == 0 else tuple(reversed(TRANSPORTS))


async def hold_alternating(
    port: int, sip: tuple[str, int], store: Path, turn_log: Path, args: argparse.Namespace
) -> tuple[list[CallLog], list[CallLog], list[dict[str, Any]]]:
    """A warm-up call per transport (not counted), then ``args.calls`` rounds: each
    transport says the round's sentences, one call at a time, the order swapped per round.
    Each call as its reply arrived, the same as it played (:func:`played`), the failures."""
    long, short = speech_clips()
    follower = TurnLogFollower(turn_log)
    reader = asyncio.create_task(follower.run(), name="turn-log")
    known: set[str] = set()
    logs: list[CallLog] = []
    heard: list[CallLog] = []
    failures: list[dict[str, Any]] = []

    def line(transport: str) -> Line:
        if transport == "sip":
            return SipLine(sip, store, known)
        return Line(transport, port, None)  # the server's prompt, as the SIP call has

    def clears_ns(line: Line) -> list[int]:
        """When the Twilio caller got each ``clear`` (the SIP server drops unsent audio
        itself: its caller sees none)."""
        if isinstance(line, SipLine) or not isinstance(line.caller, TwilioCaller):
            return []
        return [round(r.at * 1e9) for r in line.caller.line.of("clear")]

    try:
        for transport in TRANSPORTS if args.warmup_turns else ():
            clips = conversation(long, short, args.warmup_turns, args.calls + 1)
            print(f"  warm-up call over {transport}", flush=True)
            person = Person(args.gap_ms, args.pause_ms)
            await hold_call(line(transport), clips, follower, -1, person)
        for call in range(args.calls):
            for transport in round_order(call):
                clips = conversation(long, short, args.turns, call)
                person = Person(args.gap_ms, args.pause_ms)
                speaking = line(transport)
                try:
                    log = await hold_call(speaking, clips, follower, call, person)
                    log = replace(log, order=len(logs) + len(failures), conversation=call)
                    logs.append(log)
                    heard.append(replace(log, frames=played(log.frames, clears_ns(speaking))))
                except Exception as exc:  # one failed call is reported, the bench goes on
                    print(f"  {transport} call {call + 1} failed: {exc!r}", flush=True)
                    failures.append({"transport": transport, "call": call, "error": repr(exc)})
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return logs, heard, failures


# -- the report -----------------------------------------------------------------------------

PERCENTILES = ("p50", "p95", "p99")


def played(frames: Sequence[ReplyFrame], clears_ns: Sequence[int] = ()) -> list[ReplyFrame]:
    """The reply frames as the caller's speaker plays them: each when it arrives or once the
    frames before it have played, whichever is later. A clear (Twilio's, at its arrival)
    empties the speaker: frames that had not begun playing by then are never heard, and
    are left out. Over SIP the server paces its packets, so playing is arriving; over
    Twilio it sends ahead, and a reply that opens with silence is heard that much later
    than its first voiced frame arrives."""
    out: list[ReplyFrame] = []
    end = 0
    clears = sorted(clears_ns)
    for frame in frames:
        while clears and clears[0] <= frame.at_ns:
            cleared = clears.pop(0)
            while out and out[-1].at_ns >= cleared:
                out.pop()
            end = min(end, cleared)
        start = max(frame.at_ns, end)
        out.append(replace(frame, at_ns=start))
        end = start + frame.duration_ns
    return out


def _ratio(sip: Mapping[str, float], twilio: Mapping[str, float]) -> dict[str, float | None]:
    return {
        p: round(sip[p] / twilio[p], 3) if sip.get(p) and twilio.get(p) else None
        for p in PERCENTILES
    }


def paired_ms(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per sentence said over both transports in a round, both answered with no filler:
    SIP's caller-less-server figure minus Twilio's. What SIP's line adds over Twilio's on
    the same words, the models' time (which a busy machine moves) taken out of both."""
    share: dict[tuple[int, int], dict[str, float]] = {}
    for r in rows:
        if None in (r["answer_ms"], r["server_first_audio_ms"]) or r.get("filler"):
            continue
        key = (r["conversation"], r["sentence"])
        share.setdefault(key, {})[r["transport"]] = r["answer_ms"] - r["server_first_audio_ms"]
    return [round(s["sip"] - s["twilio"], 1) for s in share.values() if len(s) == 2]


def compare(
    rows: Sequence[Mapping[str, Any]], heard_rows: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Per transport: first answer audio at the caller, ms from its last sound, as it
    arrived (``answer_ms``, ``bench caller``'s measure) and as it played (``heard_ms``, from
    ``heard_rows``: the same turns through :func:`played`); the server's first audio sent,
    ms from the end of speech it placed; the caller's figure less the server's, turn by
    turn (what the transport and the line add, the models' time apart: a busy machine
    moves both alike); turns by outcome. And SIP over Twilio per percentile."""
    out: dict[str, Any] = {}
    for transport in TRANSPORTS:
        mine = [r for r in rows if r["transport"] == transport]
        outcomes: dict[str, int] = {}
        for r in mine:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        both = [r for r in mine if None not in (r["answer_ms"], r["server_first_audio_ms"])]
        out[transport] = {
            "turns": len(mine),
            "outcomes": outcomes,
            "answer_ms": spread(r["answer_ms"] for r in mine),
            "heard_ms": spread(r["answer_ms"] for r in heard_rows if r["transport"] == transport),
            "server_first_audio_ms": spread(r["server_first_audio_ms"] for r in mine),
            "caller_less_server_ms": spread(
                r["answer_ms"] - r["server_first_audio_ms"] for r in both
            ),
        }
    out["sip_over_twilio"] = _ratio(out["sip"]["answer_ms"], out["twilio"]["answer_ms"])
    out["sip_over_twilio_heard"] = _ratio(out["sip"]["heard_ms"], out["twilio"]["heard_ms"])
    out["sip_less_twilio_paired_ms"] = {
        "arrived": spread(paired_ms(rows)),
        "heard": spread(paired_ms(heard_rows)),
    }
    return out


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(summary: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table."""
    lines = [
        "| transport | turns answered | first answer audio arrived p50 | p95 | p99 "
        "| heard p50 | p95 | p99 | server's first audio sent p50 | caller less server p50 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for transport in TRANSPORTS:
        stats = summary[transport]
        arrived, heard = stats["answer_ms"], stats["heard_ms"]
        answered = f"{arrived.get('n', 0)} of {stats['turns']}"
        server = stats["server_first_audio_ms"].get("p50")
        share = stats["caller_less_server_ms"].get("p50")
        lines.append(
            f"| {transport} | {answered} | "
            + " | ".join(f"{_cell(arrived.get(p))} ms" for p in PERCENTILES)
            + " | "
            + " | ".join(f"{_cell(heard.get(p))} ms" for p in PERCENTILES)
            + f" | {_cell(server)} ms | {_cell(share)} ms |"
        )
    ratio, heard_ratio = summary["sip_over_twilio"], summary["sip_over_twilio_heard"]
    lines.append(
        "| SIP / Twilio | | "
        + " | ".join(_cell(ratio[p], 2) for p in PERCENTILES)
        + " | "
        + " | ".join(_cell(heard_ratio[p], 2) for p in PERCENTILES)
        + " | | |"
    )
    paired = summary["sip_less_twilio_paired_ms"]
    arrived, heard = paired["arrived"], paired["heard"]
    lines.append(
        f"\nThe same sentence both ways ({arrived.get('n', 0)} answered over both, no "
        f"filler): SIP's caller-less-server figure minus Twilio's, p50 "
        f"{_cell(arrived.get('p50'))} ms (max {_cell(arrived.get('max'))}) as the reply "
        f"arrived, {_cell(heard.get('p50'))} ms (max {_cell(heard.get('max'))}) as it played."
    )
    return "\n".join(lines)


# -- the command -------------------------------------------------------------------------------


def free_sip_port() -> int:
    """A port free for UDP and TCP on loopback (the server listens on both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, socket.socket() as tcp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with contextlib.suppress(OSError):
                tcp.bind(("127.0.0.1", port))
                return port
    raise OSError("no port free for both UDP and TCP")


def main(args: argparse.Namespace) -> int:
    from voxpipe.loadtest.server_process import ServerProcess

    out: Path = args.out
    workdir = out.parent / "sip-vs-twilio-server"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "turns.jsonl").unlink(missing_ok=True)
    config_path = bench_config(args.config, workdir, no_filler=False)
    config = Config.load(config_path)
    sip_port = free_sip_port()
    env = {
        "VOXPIPE_SIP__ENABLED": "true",
        "VOXPIPE_SIP__HOST": "127.0.0.1",
        "VOXPIPE_SIP__PORT": str(sip_port),
    }
    load_before = load_average()
    print(f"starting the server, SIP on udp 127.0.0.1:{sip_port} (load {load_before}) ...")
    server = ServerProcess.start(workdir, port=args.port, env=env, config=config_path)
    try:
        ready_s = server.wait_ready()
        print(f"ready after {ready_s:.1f} s; {args.calls} calls x {args.turns} turns per "
              "transport, alternating", flush=True)  # fmt: skip
        logs, heard, failures = asyncio.run(
            hold_alternating(
                server.port, ("127.0.0.1", sip_port), server.store_path, server.turn_log, args
            )
        )
    finally:
        server.stop()
    load_after = load_average()
    rows, split = turn_rows(logs)
    heard_rows, _ = turn_rows(heard)
    summary = compare(rows, heard_rows)
    header = (
        f"bench sip-vs-twilio: {args.calls} calls x {args.turns} turns per transport, "
        f"alternating call by call on one server; first answer audio at the caller, ms from "
        f"its last sound, as it arrived and as it played. LLM temperature 0, max_tokens 60; "
        f"load average {load_before} before, {load_after} after."
    )
    table = render_table(summary)
    print(f"\n{header}\n\n{table}")
    report = {
        "summary": summary,
        "filler_split": split,
        "turns": rows,
        "heard_turns": heard_rows,
        "failures": failures,
        "ready_after_s": round(ready_s, 1),
        "load_average": {"before": load_before, "after": load_after},
        "settings": {
            "calls": args.calls,
            "turns": args.turns,
            "warmup_turns": args.warmup_turns,
            "gap_ms": args.gap_ms,
            "pause_ms": args.pause_ms,
            "prompt": config.llm.system_prompt,
            "silence_ms": config.turn.silence_ms,
            "filler": config.deadlines.filler,
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")
    return 0 if not failures else 1
