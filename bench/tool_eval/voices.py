"""Every utterance as 16 kHz PCM16 speech, voiced on demand and cached.

Most are voiced by Piper (en_US joe, the server's own voice: the words come out clearly, as
from a careful caller), a few by espeak-ng in other accents, for variety; the LibriVox
sentences are real recordings. A voiced file is named after its text and voice, so editing
a sentence voices it again, and the cache (``var/tool-eval-audio`` by default, not
committed) can be deleted at any time.

A request on the ``twilio`` channel is heard as a Twilio call's caller is: the voiced
speech down to 8 kHz, through μ-law and back (``voxpipe/audio/pcm.py``, what the Twilio
transport decodes), and up to 16 kHz again for STT. The cache keeps the clean speech; the
phone line is applied on reading.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.tool_eval.dataset import PIPER, TWILIO, Utterance
from voxpipe.audio.pcm import (
    float_to_pcm16,
    pcm16_to_float,
    read_wav,
    resample,
    ulaw_decode,
    ulaw_encode,
    write_wav,
)
from voxpipe.engines.base import STT_SAMPLE_RATE, CancelToken

if TYPE_CHECKING:
    from voxpipe.engines.piper_tts import PiperTts

DEFAULT_CACHE = Path("var/tool-eval-audio")
LEAD_SILENCE_S = 0.2
ESPEAK_WORDS_PER_MINUTE = 150
TWILIO_RATE = 8000  # Twilio Media Streams: μ-law, 8 kHz, mono


class Voices:
    """Makes (or finds in ``cache``) each utterance's speech; Piper loads on first use."""

    def __init__(self, cache: Path = DEFAULT_CACHE) -> None:
        self.cache = cache
        self._piper: PiperTts | None = None

    def path(self, utterance: Utterance) -> Path:
        if utterance.path is not None:
            return utterance.path
        voice = utterance.voice
        if voice.startswith("espeak:"):
            voice += f"@{ESPEAK_WORDS_PER_MINUTE}"
        digest = hashlib.sha1(f"{voice}\n{utterance.text}".encode()).hexdigest()[:10]
        return self.cache / f"{utterance.id}-{digest}.wav"

    def audio(self, utterance: Utterance) -> np.ndarray:
        """Mono float32 at 16 kHz."""
        path = self.path(utterance)
        if not path.is_file():
            self._voice(utterance, path)
        audio, rate = read_wav(path)
        if rate != STT_SAMPLE_RATE:
            audio = resample(audio, rate, STT_SAMPLE_RATE)
        return phone_line(audio) if utterance.channel == TWILIO else audio

    def prepare(self, utterances: Iterable[Utterance]) -> int:
        """Voice whatever is not cached yet; returns how many were made."""
        made = 0
        for utterance in utterances:
            path = self.path(utterance)
            if not path.is_file():
                self._voice(utterance, path)
                made += 1
        return made

    def _voice(self, utterance: Utterance, path: Path) -> None:
        if utterance.voice == PIPER:
            audio = self._piper_audio(utterance.text)
        elif utterance.voice.startswith("espeak:"):
            audio = espeak_audio(utterance.text, utterance.voice.removeprefix("espeak:"))
        else:
            raise ValueError(f"{utterance.id}: no voice {utterance.voice!r} and no recording")
        lead = np.zeros(round(LEAD_SILENCE_S * STT_SAMPLE_RATE), dtype=np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write_wav(partial, float_to_pcm16(np.concatenate([lead, audio])), STT_SAMPLE_RATE)
        partial.replace(path)

    def _piper_audio(self, text: str) -> np.ndarray:
        if self._piper is None:
            from voxpipe.engines.piper_tts import PiperTts

            self._piper = PiperTts(threads=1)
        tts = self._piper
        chunks = list(tts.synthesize(text, CancelToken()))
        pcm = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
        return resample(pcm16_to_float(pcm.tobytes()), tts.sample_rate, STT_SAMPLE_RATE)


def espeak_audio(text: str, voice: str) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``voice``, mono float32 at 16 kHz."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise SystemExit("espeak-ng is missing: run `make sysdeps`")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.wav"
        subprocess.run(
            [binary, "-v", voice, "-s", str(ESPEAK_WORDS_PER_MINUTE), "-w", str(out), text],
            check=True,
            capture_output=True,
        )
        audio, rate = read_wav(out)
    return resample(audio, rate, STT_SAMPLE_RATE)


def phone_line(audio: np.ndarray) -> np.ndarray:
    """16 kHz speech as a Twilio call carries it: 8 kHz μ-law, decoded and back at 16 kHz."""
    narrow = resample(audio, STT_SAMPLE_RATE, TWILIO_RATE)
    wire = ulaw_encode(float_to_pcm16(narrow))
    return resample(pcm16_to_float(ulaw_decode(wire)), TWILIO_RATE, STT_SAMPLE_RATE)
