"""The caller's wait for a reply, split in four parts that add up to it.

A turn's voice-to-voice, as the caller lives it, runs from the client sending the frame that
holds the last sample of speech (``C0``, client clock) to the client playing the first reply
sample (``C3``, client clock). The server sees it from the arrival of that frame
(``speech_end``, ``S1``) to handing the first reply frame to the transport (``S2``: the
filler's, when one was said first, else ``first_audio_sent``). So::

    caller's wait  = transport + inference + application + playback
    transport      = S1 - C0   the caller's last speech crossing the network (uplink)
    inference      = STT + LLM to its first phrase + TTS to its first chunk: engine compute
                     on the way to the first reply audio, queue waits excluded (at most S2 - S1)
    application    = (S2 - S1) - inference: the rest of the server's time (the end-of-turn
                     silence the turn detector waits for, queue waits, scheduling, the pacer)
    playback       = C3 - S2   the first reply frame crossing the network (downlink), and the
                     client's buffer and device until it is heard

The two clocks are never compared. A client reports two durations on its own clock from its
end of speech (:class:`ClientTiming`): to the first reply frame received (``R - C0``) and to
its first sample played (``C3 - C0``). Their round trip less the server's part is the two
network legs; as NTP does, the split takes them as equal: ``transport = (R - C0 - (S2 - S1)) /
2``, and ``playback`` is the rest of the client's figure. Without a report (Twilio, a client
that does not report) ``transport`` is unknown and ``playback`` is the server's own
measure from the transport's playback signal (``playback.ack``, Twilio's mark echo, the WebRTC
track's playout): from sending the first frame to when that signal says it began to play,
which counts the signal's own trip back too, so it reads a little long.

A part is clamped at zero (a client whose end of speech is a frame off the server's can make
a leg come out a few ms below it); otherwise the four add up to the client's figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

PARTS: tuple[str, ...] = ("transport", "inference", "application", "playback")

# compute_ms keys on the way to the first reply audio (``StageTimer``, ``timeline.py``)
INFERENCE_COMPUTE: tuple[str, ...] = ("stt", "llm_first_clause", "tts_first")


@dataclass(frozen=True)
class ClientTiming:
    """What a client measured of one turn (``client.turn``), in ms after its end of speech:
    when it sent the frame holding the last sample the server's VAD heard as speech."""

    client: str  # its bounded label (``client_labels.py``), e.g. ``voxpipe-web/0.1.0``
    first_audio_received_ms: float
    first_audio_played_ms: float  # the caller's voice-to-voice

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LatencySplit:
    """One turn's four parts in ms; None where unknown."""

    transport: float | None
    inference: float
    application: float
    playback: float | None

    @property
    def server_ms(self) -> float:
        """End of speech to the first reply frame sent, as the server measured it."""
        return self.inference + self.application

    def as_dict(self) -> dict[str, float | None]:
        return {k: None if v is None else round(v, 1) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, parts: Mapping[str, float | None]) -> LatencySplit:
        return cls(
            parts.get("transport"),
            float(parts.get("inference") or 0.0),
            float(parts.get("application") or 0.0),
            parts.get("playback"),
        )

    def reported(self, client: ClientTiming) -> LatencySplit:
        """The same turn once its client reported: the network legs and playback from it."""
        return split(self.server_ms, self.inference, self.playback, client)


def inference_ms(compute_ms: Mapping[str, float]) -> float:
    """The engines' compute on the way to the first reply audio, from a turn's ``compute_ms``."""
    return sum(compute_ms.get(k, 0.0) for k in INFERENCE_COMPUTE)


def split(
    server_ms: float,
    inference: float,
    playback: float | None = None,
    client: ClientTiming | None = None,
) -> LatencySplit:
    """The four parts of a turn whose server part (end of speech to first reply frame sent)
    took ``server_ms`` with ``inference`` ms of engine compute in it. ``playback`` is the
    server's own measure from the transport's playback signal; a ``client`` report, when
    there is one, measures the network legs and the playback instead."""
    server_ms = max(0.0, server_ms)
    inference = min(max(0.0, inference), server_ms)
    transport = None
    if client is not None:
        round_trip = client.first_audio_received_ms - server_ms
        transport = max(0.0, round_trip / 2)
        playback = client.first_audio_played_ms - server_ms - transport
    return LatencySplit(
        transport,
        inference,
        server_ms - inference,
        None if playback is None else max(0.0, playback),
    )
