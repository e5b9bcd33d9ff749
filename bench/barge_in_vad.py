"""How soon the VAD hears a caller start talking over the agent, offline and sample-clocked.

The overlap benchmark (``bench overlap``) times Twilio's ``clear`` on the wall clock, so its
figures mix what the VAD needs with what a loaded server adds. This one isolates the first:
the same 30 interruptions and 30 backchannels, in the same two voices, are sent through the
phone line's codec (16 kHz -> 8 kHz μ-law -> 16 kHz, as a Twilio call reaches the VAD) and
the real Silero VAD, at four phases of its 32 ms windows (where the windows fall decides a
word at the edge). For each opening rule (a probability, for so many windows in a row) it
prints when speech opens after the clip's first sample of speech: the floor under the clear.

Each clip is heard twice over: by a fresh stream, and by the stream of a call whose caller
asked the question of ``bench overlap`` and then listened for ``--quiet`` seconds to the
reply, the line silent meanwhile (a recurrent VAD's state after speech and a long quiet is
not a fresh one's: ``silero_vad.py``, ``QUIET_RESET_WINDOWS``).

Stationary line noise (white at -50/-35/-25 dBFS, brown at -30 dBFS, a minute each) checks
the other side: a lower bar must not open on a quiet line.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from bench.overlap import ASK, BACKCHANNELS, INTERRUPTIONS, LEAD_S, VOICES, _voice
from voxpipe.audio.pcm import read_wav, resample, ulaw_decode, ulaw_encode
from voxpipe.config import TurnConfig
from voxpipe.conversation.turn_detector import TurnDetector, TurnEventKind

RATE = 16000
WINDOW = 512
PHASES = (0, 128, 256, 384)  # samples of silence before the clip: where the windows fall
RULES = ((0.5, 3), (0.5, 2), (0.35, 2), (0.3, 2), (0.25, 2))  # (probability, windows)
MISSED_MS = 10_000.0  # a clip the rule never opens on counts as this late


def over_the_line(audio: np.ndarray) -> np.ndarray:
    """``audio`` as the VAD gets it from a Twilio call: 8 kHz μ-law and back."""
    narrow = resample(audio, RATE, 8000)
    pcm = (np.clip(narrow, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    decoded = np.frombuffer(ulaw_decode(ulaw_encode(pcm)), "<i2").astype(np.float32) / 32768
    return resample(decoded, 8000, RATE)


def opens_at(probs: list[float], threshold: float, windows: int) -> int | None:
    """The window at which the session's own turn detector, over a speaking reply with this
    opening rule, opens speech on ``probs``."""
    config = TurnConfig(  # a barge-in bar above the turn's opens at the turn's: raise both
        threshold=max(TurnConfig().threshold, threshold),
        barge_in_threshold=threshold,
        barge_in_min_speech_ms=windows * 32,
    )
    detector = TurnDetector(config, WINDOW, RATE)
    detector.over_reply = True
    silent = np.zeros(WINDOW, np.float32)
    for i, prob in enumerate(probs):
        event = detector.push(silent, prob)
        if event is not None and event.kind is TurnEventKind.SPEECH_STARTED:
            return i
    return None


def _probs(vad: Any, audio: np.ndarray, before: np.ndarray | None = None) -> list[float]:
    """The VAD's probabilities over ``audio``, heard after ``before`` (whole windows) if
    given."""
    stream = vad.new_stream()
    if before is not None:
        stream.process(before)
    n = audio.shape[0] // WINDOW
    probs: list[float] = stream.process(audio[: n * WINDOW])
    return probs


def question_then_quiet(quiet_s: float) -> np.ndarray:
    """The caller's question over the line, then ``quiet_s`` of the line's silence, in whole
    windows: what a call's VAD has heard when the caller talks over the reply."""
    audio, rate = read_wav(ASK)
    heard = np.concatenate(
        [over_the_line(resample(audio, rate, RATE)), np.zeros(int(quiet_s * RATE), np.float32)]
    )
    return heard[: heard.shape[0] // WINDOW * WINDOW]


def _summary(delays: list[float]) -> dict[str, Any]:
    ms = np.array(delays)
    return {
        "n": len(delays),
        "missed": int((ms >= MISSED_MS).sum()),
        "p50_ms": round(float(np.percentile(ms, 50))),
        "p95_ms": round(float(np.percentile(ms, 95))),
        "p99_ms": round(float(np.percentile(ms, 99))),
        "over_300_ms": int((ms > 300).sum()),
    }


def run(each: int, quiet_s: list[float]) -> dict[str, Any]:
    from voxpipe.engines.silero_vad import SileroVad

    vad = SileroVad(threads=1)
    kinds = {"interruption": INTERRUPTIONS[:each], "backchannel": BACKCHANNELS[:each]}
    starts: dict[str, np.ndarray | None] = {"fresh": None}
    starts.update({f"asked+{q:g}s": question_then_quiet(q) for q in quiet_s})
    delays: dict[str, dict[str, dict[str, list[float]]]] = {
        start: {k: {} for k in kinds} for start in starts
    }
    clips = [  # synthesized once, heard by every start
        (kind, over_the_line(_voice(words, voice)))
        for kind, phrases in kinds.items()
        for voice in VOICES
        for words in phrases
    ]
    for start, before in starts.items():
        for kind, clip in clips:
            for phase in PHASES:
                audio = np.concatenate([np.zeros(phase, np.float32), clip])
                probs = _probs(vad, audio, before)
                speech_at = phase + LEAD_S * RATE
                for threshold, windows in RULES:
                    i = opens_at(probs, threshold, windows)
                    ms = MISSED_MS if i is None else ((i + 1) * WINDOW - speech_at) / 16
                    delays[start][kind].setdefault(f"{threshold}x{windows}", []).append(ms)
    rng = np.random.default_rng(1)
    minute = RATE * 60
    brown = np.cumsum(rng.normal(0, 1, minute))
    brown -= np.convolve(brown, np.ones(400) / 400, "same")
    noises = {
        "white -50 dBFS": rng.normal(0, 10 ** (-50 / 20), minute),
        "white -35 dBFS": rng.normal(0, 10 ** (-35 / 20), minute),
        "white -25 dBFS": rng.normal(0, 10 ** (-25 / 20), minute),
        "brown -30 dBFS": brown / np.abs(brown).max() * 10 ** (-30 / 20),
    }
    false_opens: dict[str, dict[str, int]] = {}
    for name, noise in noises.items():
        probs = _probs(vad, over_the_line(noise.astype(np.float32)))
        false_opens[name] = {f"{t}x{w}": _opens(probs, t, w) for t, w in RULES}
    return {
        "speech": {
            start: {k: {r: _summary(d) for r, d in rules.items()} for k, rules in by_kind.items()}
            for start, by_kind in delays.items()
        },
        "noise_opens_per_minute": false_opens,
    }


def _opens(probs: list[float], threshold: float, windows: int) -> int:
    """How many times speech would open on ``probs`` (closing after each window below)."""
    count, run = 0, 0
    for prob in probs:
        run = run + 1 if prob >= threshold else 0
        count += run == windows
    return count


def main(args: argparse.Namespace) -> int:
    result = run(args.each, args.quiet)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print("speech opens after the first sample of speech, over μ-law (4 window phases)")
    print(
        f"{'stream':10} {'kind':13} {'rule':8} {'n':>4} {'missed':>6} {'p50':>5} {'p95':>5} "
        f"{'p99':>6} >300"
    )
    for start, by_kind in result["speech"].items():
        for kind, rules in by_kind.items():
            for rule, s in rules.items():
                print(
                    f"{start:10} {kind:13} {rule:8} {s['n']:>4} {s['missed']:>6} "
                    f"{s['p50_ms']:>5} {s['p95_ms']:>5} {s['p99_ms']:>6} {s['over_300_ms']:>4}"
                )
    print("opens on a minute of line noise:")
    for name, opens in result["noise_opens_per_minute"].items():
        print(f"  {name}: {opens}")
    return 0
