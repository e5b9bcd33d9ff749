"""What the caller has actually heard of a reply.

The server knows which clause each sample of reply audio belongs to and when
each frame was sent. The caller's playback position comes from the client's
``playback.ack`` reports (the last frame it finished playing) or, without
them, from real-time pacing: a client plays frames back to back from the
moment the first one arrives. On barge-in the reply is cut to the words whose
audio was played, proportionally within the clause that was playing.

The :class:`Pacer` keeps that real-time model of the client's buffer for the whole call,
and holds reply audio back so the buffer never runs more than a little ahead.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from dataclasses import dataclass


@dataclass(frozen=True)
class _Clause:
    text: str
    start: int  # first sample of this clause in the reply audio
    end: int


@dataclass(frozen=True)
class _Frame:
    seq: int
    end: int  # reply-audio sample just after this frame
    play_start_ns: int  # when the client starts playing it, by real-time pacing
    samples: int


class PlaybackTracker:
    def __init__(self, sample_rate: int) -> None:
        self.rate = sample_rate
        self._clauses: list[_Clause] = []
        self._frames: list[_Frame] = []
        self._frame_seqs: list[int] = []
        self._synth_samples = 0
        self._sent_samples = 0
        self._acked_samples: int | None = None
        self._first_ack: tuple[int, int] | None = None  # (samples it covers, arrival ns)

    # -- producing ----------------------------------------------------------

    def add_clause(self, text: str, samples: int = 0) -> None:
        """The next ``samples`` of reply audio speak ``text`` (more may follow: add_samples)."""
        start = self._synth_samples
        self._synth_samples += samples
        self._clauses.append(_Clause(text, start, self._synth_samples))

    def add_samples(self, samples: int) -> None:
        """The clause being synthesized has ``samples`` more audio."""
        last = self._clauses[-1]
        self._synth_samples += samples
        self._clauses[-1] = _Clause(last.text, last.start, self._synth_samples)

    def sent(self, seq: int, samples: int, play_start_ns: int) -> None:
        self._sent_samples += samples
        self._frames.append(_Frame(seq, self._sent_samples, play_start_ns, samples))
        self._frame_seqs.append(seq)

    def rewind(self, heard: int, most: int) -> int:
        """The client dropped what it had not played (a flush): the frames after the one
        playing at ``heard`` samples, ``most`` of them at most (those the sender still
        holds), count as never sent. Returns how many frames that is; they are sent
        again, from the start of the frame the caller was hearing."""
        kept, floor = len(self._frames), max(0, len(self._frames) - most)
        while kept > floor and self._frames[kept - 1].end > heard:
            kept -= 1
        dropped = len(self._frames) - kept
        del self._frames[kept:], self._frame_seqs[kept:]
        self._sent_samples = self._frames[-1].end if self._frames else 0
        if self._acked_samples is not None:
            self._acked_samples = min(self._acked_samples, self._sent_samples)
        return dropped

    # -- client reports -----------------------------------------------------

    def ack(self, seq: int) -> bool:
        """The client finished playing every frame up to ``seq``; False if not one of ours."""
        i = bisect_right(self._frame_seqs, seq)
        if i == 0 or self._frame_seqs[i - 1] != seq:
            return False
        samples = self._frames[i - 1].end
        if self._first_ack is None:
            self._first_ack = (samples, time.monotonic_ns())
        self._acked_samples = max(self._acked_samples or 0, samples)
        return True

    def ack_ms(self, played_ms: float) -> None:
        """The client has played ``played_ms`` of this reply."""
        samples = min(self._sent_samples, int(played_ms * self.rate / 1000))
        self._acked_samples = max(self._acked_samples or 0, samples)

    # -- reading ------------------------------------------------------------

    @property
    def sent_samples(self) -> int:
        return self._sent_samples

    @property
    def last_seq(self) -> int | None:
        return self._frame_seqs[-1] if self._frame_seqs else None

    def started_playing_ns(self) -> int | None:
        """When the first frame began to play, by the first ack: its arrival less the audio
        up to the end of the frame it names, played back to back. None before any ack."""
        if self._first_ack is None:
            return None
        samples, at_ns = self._first_ack
        return at_ns - samples * 1_000_000_000 // self.rate

    def heard_samples(self, now_ns: int) -> int:
        if self._acked_samples is not None:
            return self._acked_samples
        heard = 0
        for frame in self._frames:
            if frame.play_start_ns >= now_ns:
                break
            played = (now_ns - frame.play_start_ns) * self.rate // 1_000_000_000
            heard = frame.end - frame.samples + min(frame.samples, int(played))
        return heard

    def heard_text(self, now_ns: int) -> str:
        return self.text_until(self.heard_samples(now_ns))

    def text_until(self, samples: int) -> str:
        words: list[str] = []
        for clause in self._clauses:
            if samples >= clause.end:
                words += clause.text.split()
                continue
            if samples > clause.start:
                clause_words = clause.text.split()
                fraction = (samples - clause.start) / max(1, clause.end - clause.start)
                words += clause_words[: int(len(clause_words) * fraction)]
            break
        return " ".join(words)


class Pacer:
    """Models the client's playback buffer, so audio goes out at most ``lead`` ahead of real
    time: the client needs only that much buffer, and what is not sent can still be cancelled."""

    def __init__(self, lead_ms: int) -> None:
        self.lead_ns = lead_ms * 1_000_000
        self.ends_at_ns = 0  # when the client will have played everything sent so far

    def delay_s(self, now_ns: int) -> float:
        return max(0.0, (self.ends_at_ns - now_ns - self.lead_ns) / 1e9)

    def sent(self, now_ns: int, duration_ns: int) -> int:
        """Account for a frame sent now; returns when the client starts playing it."""
        starts = max(self.ends_at_ns, now_ns)
        self.ends_at_ns = starts + duration_ns
        return starts

    def flushed(self, now_ns: int) -> None:
        """The client dropped its buffer (barge-in)."""
        self.ends_at_ns = now_ns
