"""A native session's outbound stream, numbered and kept for a replay across reconnects.

Every event gets the next ``event_id`` and every reply frame carries its ``seq``; the
most recent messages stay in a ring bounded by audio time (``limits.replay_buffer_ms``)
and by count (:data:`REPLAY_MAX_EVENTS`), so a client that reconnects says where it is
and gets what it missed, or learns that some of it is gone.
"""

from __future__ import annotations

import json
import struct
from collections import deque
from dataclasses import dataclass

from voxpipe.conversation.events import AudioOut, Event
from voxpipe.transports.base import SendBuffer
from voxpipe.transports.native_protocol import ResumeFrom

AUDIO_HEADER = struct.Struct("<II")  # seq, turn_id; then PCM16LE mono
REPLAY_MAX_EVENTS = 4096


@dataclass
class Sent:
    """One message of the stream, as it went to the wire."""

    event_id: int  # 0 for audio
    audio_seq: int  # 0 for events
    message: str | bytes
    audio_ms: float


class Outbound:
    """A session's outbound stream, across reconnects: numbers every event, keeps the
    recent messages for a replay, and hands each to the connection of the moment."""

    def __init__(self, rate: int, replay_ms: int) -> None:
        self.rate = rate
        self.replay_ms = replay_ms
        self.last_event_id = 0
        self.last_audio_seq = 0
        self._ring: deque[Sent] = deque()
        self._ring_audio_ms = 0.0
        self.forgotten_event_id = 0  # replay cannot go back past these
        self.forgotten_audio_seq = 0
        self.sink: SendBuffer | None = None
        self.input_samples = 0  # caller audio received, at the session's input rate

    @classmethod
    def continuing(cls, rate: int, replay_ms: int, since: ResumeFrom) -> Outbound:
        """The stream of a session restored here: numbering goes on from where the client
        is, and nothing before it can be replayed."""
        outbound = cls(rate, replay_ms)
        outbound.last_event_id = outbound.forgotten_event_id = since.last_event_id
        outbound.last_audio_seq = outbound.forgotten_audio_seq = since.last_audio_seq
        return outbound

    def event(self, event: Event) -> Sent:
        self.last_event_id += 1
        body = {**event.to_dict(), "event_id": self.last_event_id}
        sent = Sent(self.last_event_id, 0, json.dumps(body, separators=(",", ":")), 0.0)
        self._keep(sent)
        return sent

    def audio(self, frame: AudioOut) -> None:
        self.last_audio_seq = frame.seq
        ms = len(frame.pcm) / 2 * 1000 / self.rate
        self._keep(Sent(0, frame.seq, AUDIO_HEADER.pack(frame.seq, frame.turn_id) + frame.pcm, ms))

    def _keep(self, sent: Sent) -> None:
        self._ring.append(sent)
        self._ring_audio_ms += sent.audio_ms
        while self._ring and (
            self._ring_audio_ms > self.replay_ms or len(self._ring) > REPLAY_MAX_EVENTS
        ):
            old = self._ring.popleft()
            self._ring_audio_ms -= old.audio_ms
            self.forgotten_event_id = max(self.forgotten_event_id, old.event_id)
            self.forgotten_audio_seq = max(self.forgotten_audio_seq, old.audio_seq)
        if self.sink is not None:
            self.sink.put(sent.message, sent.audio_ms)

    def missed(self, since: ResumeFrom) -> tuple[list[Sent], bool]:
        """What a client at ``since`` has not received; False if some of it is gone."""
        complete = (
            since.last_event_id >= self.forgotten_event_id
            and since.last_audio_seq >= self.forgotten_audio_seq
        )
        missed = [
            s
            for s in self._ring
            if (s.event_id and s.event_id > since.last_event_id)
            or (s.audio_seq and s.audio_seq > since.last_audio_seq)
        ]
        return missed, complete
