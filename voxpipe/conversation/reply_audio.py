"""A reply's voice: its clauses, the filler and tools' phrases, as paced frames to the client,
and what the caller has heard of them.

The LLM side of a reply (``reply.py``) queues clauses as it cuts them; :meth:`voice`
synthesizes each (TTS runner), resamples it to the client's rate and cuts 20 ms frames;
:meth:`play` sends them no more than ``playback_lead_ms`` ahead of real time. The filler
(said when the first token is late) and a tool's phrases (said while a tool runs) go the
same way, but are not the answer: the caller's heard text, the turn's stage marks and the
history count only the answer's words.

**What was heard** (:class:`PlaybackTracker`): the server knows which clause each sample
belongs to and when each frame was sent. The caller's playback position comes from the
client's ``playback.ack`` reports (the last frame it finished playing) or, without them,
from real-time pacing: a client plays frames back to back from the moment the first one
arrives. On barge-in the reply is cut to the words whose audio was played, proportionally
within the clause that was playing. The :class:`Pacer` keeps that real-time model of the
client's buffer for the whole call, and holds reply audio back so the buffer never runs
more than a little ahead.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voxpipe.audio.pcm import Pcm16Framer, StreamResampler, float_to_pcm16
from voxpipe.conversation.events import AudioOut, SendAudio
from voxpipe.conversation.services import Services
from voxpipe.engines.base import CancelToken, JobClock, Urgency
from voxpipe.observability.timeline import StageTimer

TTS_MARGIN_NS = 300_000_000  # a later clause is due this long before its audio is needed
NS_PER_SPOKEN_CHAR = 70_000_000  # Piper's voices speak about 14 characters a second
PACE_CHECK_S = 0.1  # how often a later clause waiting for its time looks again


class Sound(enum.Enum):
    """What a frame of reply audio is: the answer, the filler, or a tool's phrase."""

    ANSWER = "answer"
    FILLER = "filler"
    PHRASE = "phrase"


# Put on the frames queue so that play, waiting there, sees the frames a flush took back.
_WAKE: tuple[bytes, Sound] = (b"", Sound.ANSWER)


@dataclass(frozen=True)
class Phrase:
    """Words to say that are not the answer (a tool's phrase): synthesized like a clause."""

    text: str


class FrameNumbers:
    """The sequence numbers of a call's reply frames: one count across all its replies (the
    client acks and clears by them), which a restore carries on."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


class VoicedReply(Protocol):
    """What the audio writes back into its reply, for the session to read, and asks of it
    (:class:`~voxpipe.conversation.reply.Reply` is the one)."""

    @property
    def turn_id(self) -> int: ...

    first_seq: int | None
    last_seq: int | None
    answer_seq: int | None  # the first frame of the answer itself (no filler, no phrase)
    last_frame_ns: int  # when the latest frame was handed to the transport
    audio_ns: int  # reply audio sent

    async def until_sendable(self) -> None:
        """Until the reply may send: a held one is confirmed, a paused one resumed (a
        cancel ends the wait too)."""


class ReplyAudio:
    """The queues and the three tasks (:meth:`voice`, :meth:`play`, :meth:`fill_silence`)
    of one reply's audio. It sends only while its reply may (held or paused, it waits:
    :meth:`VoicedReply.until_sendable`)."""

    def __init__(
        self,
        reply: VoicedReply,
        services: Services,
        stages: StageTimer,
        cancel: CancelToken,
        tracker: PlaybackTracker,
        pacer: Pacer,
        send: tuple[SendAudio, FrameNumbers],  # the transport's send, the frames' numbers
        output_rate: int,
        urgency: Urgency,
    ) -> None:
        cfg = services.config
        self._reply, self._services, self._stages = reply, services, stages
        self._cancel, self._tracker, self._pacer = cancel, tracker, pacer
        self._send_audio, self._numbers = send
        self._rate = output_rate
        self._clauses: asyncio.Queue[str | Phrase | None] = asyncio.Queue(maxsize=64)
        self._frames: asyncio.Queue[tuple[bytes, Sound] | None] = asyncio.Queue(
            maxsize=max(1, cfg.audio.outbound_buffer_ms // cfg.audio.out_frame_ms)
        )
        # Cleared while the first clause is synthesized: the caller is waiting for that audio,
        # and the LLM (already ahead of speech) would otherwise take both cores from the TTS.
        self.llm_gate = threading.Event()
        self.llm_gate.set()
        cancel.on_cancel(self.llm_gate.set)
        self.spoken: list[str] = []
        self.first_words = asyncio.Event()  # set: no filler is due any more
        cancel.on_cancel(self.first_words.set)
        self.filler_queued = False
        self._synthesizing = False
        self._holding: tuple[bytes, Sound] | None = None  # taken from the queue, not yet sent
        # Frames sent lately, which a flush may have to send again: at most the client's
        # buffer (playback_lead_ms) and a second more.
        self._sent: deque[tuple[bytes, Sound]] = deque(
            maxlen=(cfg.audio.playback_lead_ms + 1000) // cfg.audio.out_frame_ms + 1
        )
        self._again: deque[tuple[bytes, Sound]] = deque()  # to send again, before the queue
        self._flushes = 0
        self._played_all = False  # play took the end of the queue: nothing is sent again
        self._urgency = urgency  # how far ahead of the caller's ear the reply is, for the LLM
        self._chars_waiting = 0  # answer text queued for the TTS
        self._lead_ns = cfg.audio.synthesis_lead_ms * 1_000_000

    # -- what the LLM side queues ---------------------------------------------

    async def clause(self, text: str) -> None:
        """A clause of the answer."""
        self._stages.clause(text)
        self._chars_waiting += len(text)
        self._mark_ahead()
        await self._clauses.put(text)

    def _mark_ahead(self) -> None:
        """When the caller will have heard everything generated so far: the audio queued,
        then the text still waiting for the TTS at speaking pace (the batched LLM pauses a
        reply far enough ahead: engines/batch_plan.py)."""
        text_ns = self._chars_waiting * NS_PER_SPOKEN_CHAR
        self._urgency.heard_by_ns = self._dry_at_ns(self._frames.qsize()) + text_ns

    async def _until_needed(self) -> None:
        """A later clause waits until the caller's audio would run out within
        ``audio.synthesis_lead_ms``: synthesized sooner, it only takes the cores from
        another caller's first words (and a barge-in may make it needless)."""
        while self._lead_ns and not self._cancel.cancelled:
            wait_ns = self._dry_at_ns(self._frames.qsize()) - self._lead_ns - time.monotonic_ns()
            if wait_ns <= 0:
                return
            await asyncio.sleep(min(wait_ns / 1e9, PACE_CHECK_S))

    async def phrase(self, text: str) -> None:
        """Words that are not the answer (a tool's phrase); no filler after them."""
        self.first_words.set()
        await self._clauses.put(Phrase(text))

    async def end(self) -> None:
        """Nothing more to say: the tasks finish once all of it is sent."""
        self.first_words.set()
        await self._clauses.put(None)

    def quiet_since_ns(self) -> int | None:
        """When the client will have played all it was sent; None while more is on its way."""
        queued = self._clauses.qsize() or self._frames.qsize()
        if queued or self._synthesizing or self._holding is not None or self._again:
            return None
        return self._pacer.ends_at_ns

    # -- the tasks ------------------------------------------------------------

    async def voice(self) -> None:
        services, cancel = self._services, self._cancel
        stages, tracker = self._stages, self._tracker
        resampler = StreamResampler(services.tts.sample_rate, self._rate)
        framer = Pcm16Framer(self._rate * services.config.audio.out_frame_ms // 1000)
        try:
            while (item := await self._clauses.get()) is not None:
                if cancel.cancelled:
                    continue
                self._synthesizing = True
                phrase = isinstance(item, Phrase)
                text = item.text if isinstance(item, Phrase) else item
                sound = Sound.PHRASE if phrase else Sound.ANSWER
                if self.spoken and not phrase:
                    await self._until_needed()
                if not phrase:
                    self._chars_waiting -= len(text)
                clock = JobClock()
                if not self.spoken and not phrase:
                    self.llm_gate.clear()
                due = self._dry_at_ns(self._frames.qsize()) if self.spoken else None
                ready = services.phrases.get(text) if phrase else None
                stream = (
                    _recorded(ready.audio)
                    if ready is not None
                    else services.tts.synthesize(text, cancel, clock, deadline_ns=due)
                )
                tracker.add_clause("" if phrase else text)
                with contextlib.nullcontext() if phrase else stages.tts(clock):
                    async with contextlib.aclosing(stream):
                        async for chunk in stream:
                            if not phrase:
                                stages.tts_chunk()
                                self.llm_gate.set()
                            audio = resampler.process(chunk.astype(np.float32) / 32768.0)
                            tracker.add_samples(audio.shape[0])
                            for frame in framer.push(float_to_pcm16(audio)):
                                await self._frames.put((frame, sound))
                            self._mark_ahead()
                if not phrase:
                    self.spoken.append(text)
                self._synthesizing = False
            if not cancel.cancelled:
                tail = float_to_pcm16(resampler.process(np.zeros(0, np.float32), last=True))
                for frame in [*framer.push(tail), *framer.flush()]:
                    await self._frames.put((frame, Sound.ANSWER))
        finally:
            self._synthesizing = False
            self.llm_gate.set()
            await self._frames.put(None)

    async def play(self) -> None:
        reply, pacer, cancel, stages = self._reply, self._pacer, self._cancel, self._stages
        ns_per_byte = 1e9 / (2 * self._rate)
        while (item := await self._next_frame()) is not None:
            frame, sound = item
            if cancel.cancelled:
                continue
            self._holding = item
            flushes = self._flushes
            await reply.until_sendable()
            delay = pacer.delay_s(time.monotonic_ns())
            if delay > 0:
                await asyncio.sleep(delay)
            await reply.until_sendable()
            self._holding = None
            if cancel.cancelled or self._flushes != flushes:
                continue  # cancelled, or flushed meanwhile: the frame waits in _again
            seq = self._numbers.next()
            # Before the send, which may wait: a barge-in meanwhile must clear this frame too,
            # and a flush must send it again.
            reply.first_seq = reply.first_seq or seq
            if sound is Sound.ANSWER and reply.answer_seq is None:
                reply.answer_seq = seq
            reply.last_seq = seq
            now = time.monotonic_ns()
            duration_ns = int(len(frame) * ns_per_byte)
            self._tracker.sent(seq, len(frame) // 2, pacer.sent(now, duration_ns))
            self._sent.append(item)
            await self._send_audio(AudioOut(seq, reply.turn_id, frame))
            now = time.monotonic_ns()
            if sound is Sound.PHRASE:
                stages.phrase_sent(now)
            else:
                stages.audio_sent(now, sound is Sound.FILLER)
            reply.last_frame_ns = now
            # The reply's audio sent, a frame sent again after a flush counted once.
            reply.audio_ns = max(reply.audio_ns, self._tracker.sent_samples * 10**9 // self._rate)

    async def _next_frame(self) -> tuple[bytes, Sound] | None:
        """The next frame to send: one a flush took back first, then the queue's."""
        while not self._again:
            item = await self._frames.get()
            if item is None:
                self._played_all = True
            if item is not _WAKE:
                return item
        return self._again.popleft()

    def flush(self, now_ns: int) -> bool:
        """Take back the audio the client has not played, to send it again once the reply
        is sendable, from the frame the caller was hearing (ahead of the frame held for
        the pause and of the queue); the caller tells the client to drop it
        (``PlaybackFlush``). False, and nothing taken back, when the client has nothing
        buffered, or once every frame is sent: no one would send them again, so the end of
        a reply plays out as it did."""
        if self._played_all or self._pacer.ends_at_ns <= now_ns:
            return False  # all sent, or the client has nothing left to play
        back = self._tracker.rewind(self._tracker.heard_samples(now_ns), len(self._sent))
        self._pacer.flushed(now_ns)
        again = list(self._sent)[len(self._sent) - back :] if back else []
        if self._holding is not None:
            again.append(self._holding)
        self._again.extendleft(reversed(again))
        self._flushes += 1
        if self._again and self._frames.empty():
            self._frames.put_nowait(_WAKE)  # play may be waiting on the queue
        return True

    async def fill_silence(self, after_filler: Callable[[], None], may_call: bool) -> None:
        """The filler if the model has written no words of the reply by ``filler_ms`` (one
        that ``may_call`` a tool; others by the first token's deadline), and then
        ``after_filler`` (what keeps the line alive); a miss if none by that deadline."""
        deadlines = self._services.config.deadlines
        miss_ms = deadlines.llm_first_token_ms
        filler_ms = deadlines.filler_ms if may_call else miss_ms
        for deadline_ms in sorted({filler_ms, miss_ms}):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.first_words.wait(), self._stages.wait_s(deadline_ms))
                return
            if deadline_ms == miss_ms:
                self._stages.missed("llm_first_token")
            if deadline_ms == filler_ms and await self._say_filler():
                after_filler()

    async def _say_filler(self) -> bool:
        stages, cfg = self._stages, self._services.config
        filler = self._services.filler
        if self._cancel.cancelled or filler is None or not cfg.deadlines.filler:
            return False
        stages.filler(cfg.deadlines.filler)
        resampler = StreamResampler(filler.rate, self._rate)
        audio = resampler.process(filler.audio, last=True)
        framer = Pcm16Framer(self._rate * cfg.audio.out_frame_ms // 1000)
        pcm = [*framer.push(float_to_pcm16(audio)), *framer.flush(pad=True)]
        self._tracker.add_clause("", sum(len(f) // 2 for f in pcm))
        self.filler_queued = True
        for frame in pcm:
            await self._frames.put((frame, Sound.FILLER))
        return True

    def _dry_at_ns(self, frames_waiting: int) -> int:
        """When the client will have played everything sent and queued: a later clause
        is due a little before that, so it can wait for a first clause of another call."""
        cfg = self._services.config.audio
        now = time.monotonic_ns()
        queued_ns = frames_waiting * cfg.out_frame_ms * 1_000_000
        return max(now, self._pacer.ends_at_ns) + queued_ns - TTS_MARGIN_NS


async def _recorded(audio: np.ndarray) -> AsyncGenerator[np.ndarray, None]:
    """A phrase synthesized at start-up (``Services.phrases``), as the TTS would stream it:
    said at once, never queued behind another call's synthesis."""
    yield (audio * 32768.0).astype(np.int16)


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
