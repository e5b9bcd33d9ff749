"""A caller for the native protocol that behaves like a phone line.

Used by ``voxpipe call``, the benchmarks and the end-to-end tests. Once
connected it sends a 20 ms frame every 20 ms for as long as the call lasts:
speech when something was said, silence otherwise, so the server's
end-pointing hears real pauses and a caller can talk over the agent. It also
plays the reply the way a client would: frames go into a playback buffer that
drains in real time, ``playback.clear`` empties it, and ``playback.ack``
reports (optional) tell the server what was heard.

Voice-to-voice latency is measured as the caller feels it: from the moment
the frame holding the last speech sample left until the first reply audio
byte arrived. The client also tells the server what it measured of each turn
(``client.turn``, ``docs/protocol.md``): from sending the frame that holds the
end of speech the server's VAD heard to the turn's first reply frame received
and to its first sample played. It names itself on connect (``?client=``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from voxpipe.audio.pcm import float_to_pcm16, resample
from voxpipe.clients.waiting import Listening

AUDIO_HEADER = struct.Struct("<II")


def _version() -> str:
    try:
        return importlib.metadata.version("voxpipe")
    except importlib.metadata.PackageNotFoundError:
        return "0"


CLIENT = f"voxpipe-python/{_version()}"  # ?client= on connect (observability/client_labels.py)


def with_client(url: str, client: str = CLIENT) -> str:
    """``url`` naming the client, unless it names one already."""
    if "client=" in url:
        return url
    return f"{url}{'&' if '?' in url else '?'}client={client}"


def speech_end_sample(audio: np.ndarray, rate: int, floor_db: float = 35.0) -> int:
    """The sample after the last 20 ms frame within ``floor_db`` of the loudest frame."""
    frame = max(1, rate // 50)
    n = audio.shape[0] // frame
    if n == 0:
        return audio.shape[0]
    rms = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1) + 1e-12)
    db = 20 * np.log10(rms)
    loud = np.nonzero(db > db.max() - floor_db)[0]
    return int((loud[-1] + 1) * frame) if loud.size else audio.shape[0]


def speech_start_sample(audio: np.ndarray, rate: int, floor_db: float = 35.0) -> int:
    """The first sample of the first 20 ms frame within ``floor_db`` of the loudest frame."""
    return audio.shape[0] - speech_end_sample(audio[::-1].copy(), rate, floor_db)


@dataclass
class TurnResult:
    turn_id: int = 0
    transcript: str = ""
    reply: str = ""
    status: str = ""
    audio: bytearray = field(default_factory=bytearray)
    seqs: list[int] = field(default_factory=list)
    arrived_ns: dict[int, int] = field(default_factory=dict)  # when each frame came, by seq
    metrics: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] = field(default_factory=dict)
    speech_end_sent_ns: int = 0
    first_audio_ns: int = 0
    last_audio_ns: int = 0
    vad_end_sent_ns: int = 0  # the frame holding where the server's VAD heard speech end left
    first_played_ns: int = 0  # the first reply sample began to play (this client's speaker)
    report: dict[str, Any] | None = None  # the client.turn sent for this turn
    complete: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def voice_to_voice_ms(self) -> float | None:
        """From the caller's last speech sent to the answer's first frame received: the
        filler and a tool's phrases are not the answer (``response.done``'s ``answer_seq``
        says where it starts; before it comes, or with no answer audio, the first frame)."""
        answer = self.done.get("answer_seq")
        first = self.arrived_ns.get(answer, self.first_audio_ns) if answer else self.first_audio_ns
        if first and self.speech_end_sent_ns:
            return (first - self.speech_end_sent_ns) / 1e6
        return None


@dataclass
class Utterance:
    """Speech queued on the line; ``speech_end_sent_ns`` is set when its last word has left."""

    frames: int
    speech_end_frame: int
    speech_start_frame: int = 0
    speech_start_sent_ns: int = 0
    speech_end_sent_ns: int = 0
    sent: asyncio.Event = field(default_factory=asyncio.Event)


class _Playback:
    """The client's speaker: a buffer of frames drained in real time."""

    def __init__(self) -> None:
        self.queue: deque[tuple[int, float]] = deque()  # (seq, duration_s)
        self.ends_at = 0.0  # monotonic time the last buffered frame finishes playing
        self.played_seq = 0

    def add(self, seq: int, duration_s: float) -> float:
        """Buffer a frame; returns when it begins to play (monotonic s)."""
        now = time.monotonic()
        starts = max(self.ends_at, now)
        self.ends_at = starts + duration_s
        self.queue.append((seq, self.ends_at))
        return starts

    def advance(self) -> int:
        now = time.monotonic()
        while self.queue and self.queue[0][1] <= now:
            self.played_seq = self.queue.popleft()[0]
        return self.played_seq

    def clear(self) -> None:
        self.advance()
        self.queue.clear()
        self.ends_at = time.monotonic()

    @property
    def buffered_s(self) -> float:
        return max(0.0, self.ends_at - time.monotonic())


RESEND_FRAMES = 1500  # 30 s of 20 ms frames kept for a resend after a reconnect


class NativeClient(Listening):
    def __init__(
        self,
        url: str,
        frame_ms: int = 20,
        input_rate: int = 16000,
        ack_ms: int | None = None,
        report: bool = True,
    ) -> None:
        super().__init__()
        self.url = url
        self.frame_ms = frame_ms
        self.input_rate = input_rate
        self.ack_ms = ack_ms  # send playback.ack this often; None = never (server estimates)
        self.report = report  # send client.turn for each turn heard
        self.output_rate = 0
        self.session_id = ""
        self.started: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.turns: dict[int, TurnResult] = {}
        self.playback = _Playback()
        self.audio_after_clear: list[int] = []  # seqs of a cleared turn that still arrived
        self.duplicate_frames: list[int] = []  # seqs received twice (must stay empty)
        self.duplicate_events: list[int] = []
        self._ws: Any = None
        self._line: deque[bytes] = deque()
        self._unsent: deque[Utterance] = deque()  # utterances whose last word is still queued
        self._last_speech_end_ns = 0
        self._frames_sent = 0
        self._cleared: dict[int, int] = {}  # turn_id -> last_seq at clear
        # Resume after a dropped connection: where the client is, and recent audio to resend.
        self.last_event_id = 0
        self.last_audio_seq = 0
        self.resumes: list[dict[str, Any]] = []
        self._sent_samples = 0
        self._recent: deque[tuple[int, bytes]] = deque(maxlen=RESEND_FRAMES)
        self._sent_at: deque[tuple[int, int]] = deque(maxlen=RESEND_FRAMES)  # (end sample, ns)
        self._resend: deque[bytes] = deque()

    # -- connection -----------------------------------------------------------

    def _url_for(self, session_id: str) -> str:
        """The session id in the query string too: a load balancer routes on it."""
        sep = "&" if "?" in self.url else "?"
        return f"{self.url}{sep}session_id={session_id}"

    async def connect(self, **start: Any) -> dict[str, Any]:
        """Start a session; pass ``session_id`` to choose its id (and, behind a load
        balancer with session affinity, its worker from the first connection)."""
        self._start = start
        url = self._url_for(start["session_id"]) if start.get("session_id") else self.url
        started = await self._open(url, start)
        self.started = started
        self.session_id = started["session_id"]
        self.output_rate = started["output_sample_rate"]
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._send_line())]
        return started

    async def _open(self, url: str, start: dict[str, Any]) -> dict[str, Any]:
        self._ws = await websockets.connect(with_client(url), max_size=4 << 20, open_timeout=30)
        await self._ws.send(
            json.dumps({"type": "session.start", "input_sample_rate": self.input_rate, **start})
        )
        started: dict[str, Any] = json.loads(await asyncio.wait_for(self._ws.recv(), 30))
        if started.get("type") != "session.started":
            raise RuntimeError(f"session.start refused: {started}")
        self.last_event_id = started.get("event_id", self.last_event_id)
        return started

    async def drop(self) -> None:
        """Lose the connection the way a network does: no close frame, no session.end."""
        await self._stop_tasks()
        self._ws.transport.abort()
        with contextlib.suppress(Exception):
            await self._ws.wait_closed()

    async def reconnect(self, retry_s: float = 0.0) -> dict[str, Any]:
        """Resume the same session on a new connection; missed events and frames come
        again, and the audio the server did not get is resent ahead of the live line.
        For ``retry_s`` a refused connection (no server on the port, an HTTP 502/503 from a
        load balancer or a worker that cannot take it yet) is tried again."""
        await self._stop_tasks()  # a connection that died by itself leaves them behind
        resume = {"last_event_id": self.last_event_id, "last_audio_seq": self.last_audio_seq}
        start = {**self._start, "session_id": self.session_id, "resume": resume}
        deadline = time.monotonic() + retry_s
        delay = 0.05
        while True:
            try:
                started = await self._open(self._url_for(self.session_id), start)
                break
            except (OSError, websockets.InvalidHandshake):
                if time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)
        self.resumes.append(started)
        have = started["input_samples"]
        self._resend.extend(pcm for offset, pcm in self._recent if offset >= have)
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._send_line())]
        return started

    def _turn(self, turn_id: int) -> TurnResult:
        if turn_id not in self.turns:
            self.turns[turn_id] = TurnResult(turn_id=turn_id)
        return self.turns[turn_id]

    async def _read(self) -> None:
        async for message in self._ws:
            if isinstance(message, bytes):
                seq, turn_id = AUDIO_HEADER.unpack_from(message)
                if seq <= self.last_audio_seq:
                    self.duplicate_frames.append(seq)
                    continue
                self.last_audio_seq = seq
                turn = self._turn(turn_id)
                if turn_id in self._cleared and seq > self._cleared[turn_id]:
                    self.audio_after_clear.append(seq)
                    continue
                first = not turn.first_audio_ns
                turn.last_audio_ns = time.monotonic_ns()
                turn.first_audio_ns = turn.first_audio_ns or turn.last_audio_ns
                turn.seqs.append(seq)
                turn.arrived_ns[seq] = turn.last_audio_ns
                pcm = message[AUDIO_HEADER.size :]
                turn.audio += pcm
                starts = self.playback.add(seq, len(pcm) / 2 / self.output_rate)
                if first:
                    turn.first_played_ns = max(turn.first_audio_ns, round(starts * 1e9))
                    await self._report(turn)
                continue
            event = json.loads(message)
            event_id = event.get("event_id", 0)
            if event_id and event_id <= self.last_event_id:
                self.duplicate_events.append(event_id)
                continue
            self.last_event_id = event_id or self.last_event_id
            self.events.append(event)
            kind = event["type"]
            if kind == "error":
                self.errors.append(event)
            turn_id = event.get("turn_id")
            if isinstance(turn_id, int) and turn_id > 0:
                turn = self._turn(turn_id)
                turn.events.append(event)
                if kind == "vad.speech_stopped":
                    turn.speech_end_sent_ns = self._last_speech_end_ns
                    turn.vad_end_sent_ns = self._sent_at_ms(event["audio_ms"])
                elif kind == "transcript":
                    turn.transcript = event["text"]
                elif kind == "playback.clear":
                    self._cleared[turn_id] = event["last_seq"] or 0
                    self.playback.clear()
                elif kind == "response.done":
                    turn.reply, turn.status, turn.done = event["text"], event["status"], event
                elif kind == "turn.metrics":
                    turn.metrics = event
                    turn.complete.set()
            self._changed.set()

    async def _send_line(self) -> None:
        """One frame per frame period, speech if queued, else silence; plus playback acks."""
        frame_s = self.frame_ms / 1000
        silence = bytes(self.input_rate * self.frame_ms // 1000 * 2)
        last_ack, acked = 0.0, 0
        while self._resend:  # catching up after a reconnect: as fast as the socket takes it
            await self._ws.send(self._resend.popleft())
        start = time.monotonic() - self._frames_sent * frame_s
        while True:
            await asyncio.sleep(max(0.0, start + self._frames_sent * frame_s - time.monotonic()))
            payload = self._line.popleft() if self._line else silence
            self._recent.append((self._sent_samples, payload))
            self._sent_samples += len(payload) // 2
            await self._ws.send(payload)
            self._sent_at.append((self._sent_samples, time.monotonic_ns()))
            self._frames_sent += 1
            for utt in self._unsent:
                if not utt.speech_start_sent_ns and utt.speech_start_frame <= self._frames_sent:
                    utt.speech_start_sent_ns = time.monotonic_ns()
            while self._unsent and self._unsent[0].speech_end_frame <= self._frames_sent:
                utt = self._unsent.popleft()
                utt.speech_end_sent_ns = self._last_speech_end_ns = time.monotonic_ns()
                utt.sent.set()
            played = self.playback.advance()
            if (
                self.ack_ms is not None
                and played > acked
                and time.monotonic() - last_ack > (self.ack_ms / 1000)
            ):
                await self._ws.send(json.dumps({"type": "playback.ack", "seq": played}))
                last_ack, acked = time.monotonic(), played

    def _sent_at_ms(self, audio_ms: float) -> int:
        """When the frame holding the last sample before ``audio_ms`` of the call's inbound
        audio left (0 if no longer known): the arrival the server timed as ``speech_end``."""
        sample = round(audio_ms * self.input_rate / 1000)
        return next((ns for end, ns in self._sent_at if end >= sample), 0)

    async def _report(self, turn: TurnResult) -> None:
        """``client.turn``: this turn's first reply audio, received and played, in ms after
        the server's end of speech left this client."""
        if not self.report or not turn.vad_end_sent_ns:
            return
        since = turn.vad_end_sent_ns
        turn.report = {
            "type": "client.turn",
            "turn_id": turn.turn_id,
            "first_audio_received_ms": round((turn.first_audio_ns - since) / 1e6, 1),
            "first_audio_played_ms": round((turn.first_played_ns - since) / 1e6, 1),
        }
        with contextlib.suppress(websockets.ConnectionClosed):  # the read loop sees it end
            await self._ws.send(json.dumps(turn.report))

    # -- speaking -----------------------------------------------------------

    def say(self, audio: np.ndarray, rate: int) -> Utterance:
        """Queue speech on the line (after whatever is queued) and return at once."""
        if rate != self.input_rate:
            audio = resample(audio, rate, self.input_rate)
        frame = self.input_rate * self.frame_ms // 1000
        pcm = float_to_pcm16(audio)
        chunks = [pcm[i : i + frame * 2] for i in range(0, len(pcm), frame * 2)]
        speech_end = speech_end_sample(audio, self.input_rate)
        speech_start = speech_start_sample(audio, self.input_rate)
        base = self._frames_sent + len(self._line)
        utt = Utterance(
            frames=len(chunks),
            speech_end_frame=base + -(-speech_end // frame),
            speech_start_frame=base + speech_start // frame + 1,
        )
        self._line.extend(chunks)
        self._unsent.append(utt)
        return utt

    async def speak(self, audio: np.ndarray, rate: int, timeout_s: float = 60.0) -> TurnResult:
        """Say one utterance and wait until the server has answered it completely."""
        before = max(self.turns, default=0)
        utt = self.say(audio, rate)
        turn = await self.wait_for(
            lambda: next(
                (
                    t
                    for tid, t in sorted(self.turns.items())
                    if tid > before and t.complete.is_set()
                ),
                None,
            ),
            timeout_s + utt.frames * self.frame_ms / 1000,
        )
        turn.speech_end_sent_ns = utt.speech_end_sent_ns or turn.speech_end_sent_ns
        await self.wait_playback_done()
        return turn

    def completed_turn(self, turn_id: int) -> TurnResult | None:
        """Turn ``turn_id`` once the server has finished it (for :meth:`wait_for`)."""
        turn = self.turns.get(turn_id)
        return turn if turn is not None and turn.complete.is_set() else None

    async def wait_playback_done(self, tail_s: float = 0.3) -> None:
        """Listen until the reply has finished playing, then a short pause, like a caller."""
        await asyncio.sleep(self.playback.buffered_s + tail_s)

    async def send_raw(self, message: str | bytes) -> None:
        await self._ws.send(message)

    async def close(self) -> None:
        await super().close()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.send(json.dumps({"type": "session.end"}))
            with contextlib.suppress(Exception):
                await self._ws.close()
