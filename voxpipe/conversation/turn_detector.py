"""End-pointing: turn per-window speech probabilities into user turns.

Pure and clocked by samples, not by wall time, so it is deterministic and the
"end of speech" it reports is the exact sample where the caller stopped.

A turn ends after a fixed silence (``turn.silence_ms``), or, with ``end_of_turn:
smart_turn``, after a silence the turn model chooses: once the caller has been silent for
:data:`CHECK_AFTER_MS` the detector asks (an ``END_CANDIDATE`` event carrying the turn so
far) and whoever runs the model answers with :meth:`TurnDetector.judged` before the next
window. The verdict picks the silence that ends the turn (:class:`Verdict`): complete,
``smart_turn_complete_ms``; likely complete, ``silence_ms``; unfinished, or not judged,
``smart_turn_max_silence_ms``. The model itself never runs here: its verdict is just
another input, like the speech probability. A turn that interrupted a reply
(:attr:`TurnDetector.check_overlap`) is asked at its first silence in either mode: a
backchannel's words end it after ``backchannel_silence_ms``, so the reply goes on sooner.
While a reply speaks (:attr:`TurnDetector.over_reply`), speech opens at the lower
``barge_in_threshold``: the reply pauses on a caller's first word, which a phone line
often leaves weak.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

import numpy as np

from voxpipe.config import TurnConfig


class Verdict(Enum):
    """What the turn so far sounds and reads like, at a silence (``end_of_turn: smart_turn``,
    or speech over a reply)."""

    COMPLETE = "complete"  # ends after smart_turn_complete_ms
    LIKELY_COMPLETE = "likely_complete"  # the turn model doubted, the words did not: silence_ms
    UNFINISHED = "unfinished"  # ends after smart_turn_max_silence_ms
    NO_TURN = "no_turn"  # speech over a reply that is no turn: ends after backchannel_silence_ms


class TurnEventKind(Enum):
    SPEECH_STARTED = "speech_started"
    SPEECH_STOPPED = "speech_stopped"  # end of turn: the silence lasted long enough
    END_CANDIDATE = "end_candidate"  # smart_turn: silence began; judge the turn so far


# The turn's audio keeps this many windows of the silence that ended it: Whisper tiny hears
# the last word better with it ("table for four" was "for... for" with one window less).
TAIL_WINDOWS = 3

# Silero's probability fades after the last word rather than dropping: on clean 16 kHz speech
# it stays between the release level and the bar for up to a quarter second (LibriVox: 0-224
# ms, the sound itself gone 36 ms after the last window at the bar). Those windows count as
# silence, so silence_ms means the same wait after every word, however it faded; a longer run
# in the band is soft speech, and holds the turn as before.
FADE_WINDOWS = 8
# After the fade, read speech leaves single windows in the band (a breath, a click: "...to
# be ill-disposed." then 0.22 0.13 0.11 0.14 0.28 0.47 0.10): up to this many in a row count
# as silence too, as Silero's own end-pointing counts them; a third is a sound.
BLIP_WINDOWS = 2

# Smart Turn is asked after this much silence, not at the first quiet window: Silero dips
# between words, and each check costs a Whisper-encoder inference and a transcript of the
# turn so far (docs/benchmarks.md).
CHECK_AFTER_MS = 64


@dataclass(frozen=True)
class TurnEvent:
    kind: TurnEventKind
    sample: int  # sample index (16 kHz clock) where speech started / last speech ended
    audio: np.ndarray | None = None  # the turn's audio (float32, 16 kHz): STOPPED, CANDIDATE
    start: int = 0  # on SPEECH_STOPPED and END_CANDIDATE: where the turn's speech started

    @property
    def speech_ms(self) -> float:
        return max(0, self.sample - self.start) / 16.0


class TurnDetector:
    """A two-threshold state machine with prefix padding and a silence timer."""

    def __init__(self, config: TurnConfig, window_samples: int, sample_rate: int = 16000) -> None:
        self.cfg = config
        self.window = window_samples
        self._rate = sample_rate
        ms = sample_rate / 1000
        self._release = (
            config.release_threshold
            if config.release_threshold is not None
            else max(0.01, config.threshold - 0.15)
        )
        self._min_speech = max(1, round(config.min_speech_ms * ms / window_samples))
        self._barge_in_speech = max(1, round(config.barge_in_min_speech_ms * ms / window_samples))
        # The turn model picks the silence that ends a turn (``end_of_turn: smart_turn``).
        self.smart = config.by_model
        if self.smart:
            self._silence = max(1, round(config.smart_turn_max_silence_ms * ms / window_samples))
        else:
            self._silence = max(1, round(config.silence_ms * ms / window_samples))
        self._check = max(1, round(CHECK_AFTER_MS * ms / window_samples))
        self._verdict_silence = {
            Verdict.COMPLETE: max(1, round(config.smart_turn_complete_ms * ms / window_samples)),
            Verdict.LIKELY_COMPLETE: max(1, round(config.silence_ms * ms / window_samples)),
            Verdict.UNFINISHED: self._silence,
            Verdict.NO_TURN: max(1, round(config.backchannel_silence_ms * ms / window_samples)),
        }
        self._ends_at: int | None = None  # windows of silence this silence's verdict allows
        # This turn interrupted a reply: its first silence is checked too, whatever ends
        # turns (the words may show it was only a backchannel: the session's _judge).
        self.check_overlap = False
        # A reply is speaking and speech would interrupt it: speech opens sooner
        # (barge_in_threshold), so the reply pauses on the caller's first, weak word.
        self.over_reply = False
        # The bar this turn's speech opened at: no window at it counts as silence, so weak
        # speech that paused a reply holds the pause. Its voiced length (and so a barge-in's
        # min_interruption_ms) still counts only windows at the turn's threshold: measured
        # at the lower bar, a backchannel would cross min_interruption_ms and stop the reply,
        # to resume it after a second or more of silence, instead of pausing it.
        self._bar = config.threshold
        self._max_windows = int(config.max_turn_s * sample_rate / window_samples)
        pad = round(config.prefix_padding_ms * ms / window_samples)
        self._prefix: deque[np.ndarray] = deque(
            maxlen=pad + max(self._min_speech, self._barge_in_speech)
        )
        self._turn: list[np.ndarray] = []
        self._in_speech = False
        self._speech_run = 0
        # The silence that ends a turn runs from the last window at the turn's bar (speech),
        # through the fade and the blips in the band between the release level and the bar
        # (FADE_WINDOWS, BLIP_WINDOWS): the turn cannot end on a window in the band, and its
        # audio keeps them (``_quiet_run``), but they do not restart the silence.
        self._silence_run = 0  # windows since the last one at the bar (or in a long band)
        self._quiet_run = 0  # windows below the release level since the speech (and its fade)
        self._band_run = 0  # windows in a row in the band
        self._may_fade = False  # only speech, not a sound in the band, fades
        self._asked = False  # this silence's END_CANDIDATE has been sent
        self._start_sample = 0
        self._last_speech_end = 0
        self.samples = 0  # windows seen x window size: the detector's clock

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def pending_audio_s(self) -> float:
        return len(self._turn) * self.window / self._rate

    def push(self, window: np.ndarray, prob: float) -> TurnEvent | None:
        """Feed one window and its speech probability; maybe return an event."""
        start = self.samples
        self.samples += self.window
        if not self._in_speech:
            self._prefix.append(window)
            opens, needs = self._opening()
            if prob >= opens:
                self._speech_run += 1
                if self._speech_run >= needs:
                    self._in_speech = True
                    self._bar = opens
                    self._silence_run = self._quiet_run = self._band_run = 0
                    self._asked, self._may_fade = False, True
                    self._turn = list(self._prefix)
                    self._prefix.clear()
                    self._start_sample = start - (self._speech_run - 1) * self.window
                    self._last_speech_end = self.samples
                    return TurnEvent(TurnEventKind.SPEECH_STARTED, self._start_sample)
            else:
                self._speech_run = 0
            return None

        self._turn.append(window)
        in_band = self._release <= prob < self._bar
        self._band_run = self._band_run + 1 if in_band else 0
        # The band straight after speech is the word fading (up to FADE_WINDOWS); after a
        # quiet window, a window or two is a breath or a click (up to BLIP_WINDOWS); a longer
        # run is a sound: it holds the turn, restarts the silence, and so discards a held
        # reply that did not hear it.
        fading = in_band and self._band_run <= (FADE_WINDOWS if self._may_fade else BLIP_WINDOWS)
        if prob >= self._bar or (in_band and not fading):
            self._may_fade = prob >= self._bar
            self._silence_run = self._quiet_run = 0
            self._ends_at = None  # speech again: a verdict on the last silence is moot
            self._asked = False
            if prob >= self.cfg.threshold:
                self._last_speech_end = self.samples
        elif fading:
            self._silence_run += 1
        else:
            self._may_fade = False
            self._silence_run += 1
            self._quiet_run += 1
        quiet = self._quiet_run > 0
        ends_at = self._ends_at or self._silence
        if (quiet and self._silence_run >= ends_at) or len(self._turn) >= self._max_windows:
            return self._end_turn()
        if (
            (self.smart or self.check_overlap)
            and quiet
            and not self._asked
            and (self._silence_run >= self._check)
        ):
            self._asked = True
            return TurnEvent(
                TurnEventKind.END_CANDIDATE,
                self._last_speech_end,
                self.turn_audio(),
                self._start_sample,
            )
        return None

    def _opening(self) -> tuple[float, int]:
        """The probability that opens speech, and for how many windows in a row."""
        if self.over_reply:
            return min(self.cfg.barge_in_threshold, self.cfg.threshold), self._barge_in_speech
        return self.cfg.threshold, self._min_speech

    def judged(self, verdict: Verdict) -> None:
        """The verdict on the turn of the last ``END_CANDIDATE``: it holds until speech
        resumes. Ignored outside speech (the turn ended meanwhile)."""
        if self._in_speech and self._silence_run > 0:
            self._ends_at = self._verdict_silence[verdict]

    def turn_audio(self) -> np.ndarray:
        """The current turn's audio so far: up to the last speech plus a short tail."""
        tail = max(0, self._quiet_run - TAIL_WINDOWS)
        windows = self._turn[: len(self._turn) - tail] if tail else self._turn
        return np.concatenate(windows) if windows else np.zeros(0, np.float32)

    def _end_turn(self) -> TurnEvent:
        event = TurnEvent(
            TurnEventKind.SPEECH_STOPPED,
            self._last_speech_end,
            self.turn_audio(),
            self._start_sample,
        )
        self._in_speech = False
        self._speech_run = 0
        self._silence_run = self._quiet_run = self._band_run = 0
        self._asked = False
        self._ends_at = None
        self._turn = []
        self.check_overlap = False
        return event

    def as_ended(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` of an ``END_CANDIDATE`` as the turn's end would give it: with the full
        tail of silence, zeros where it is not yet heard, so a transcript made at the check
        is the one the end of the turn would make."""
        missing = max(0, TAIL_WINDOWS - self._quiet_run) if self._in_speech else 0
        return np.concatenate([audio, np.zeros(missing * self.window, audio.dtype)])

    @property
    def speech_span(self) -> tuple[int, int]:
        """Where the current turn's speech started and where it last ended (samples)."""
        return self._start_sample, self._last_speech_end

    def speech_ms(self) -> float:
        """Voiced length of the current turn: its start to its last speech (0 outside speech)."""
        if not self._in_speech:
            return 0.0
        return (self._last_speech_end - self._start_sample) * 1000 / self._rate

    def silence_ms(self) -> float:
        """How long since the current turn's last speech (0 outside speech)."""
        return self._silence_run * self.window * 1000 / self._rate if self._in_speech else 0.0
