"""``python -m bench turn-model``: what Smart Turn costs and what it changes for a caller.

* cost: one check (features and inference, one thread) in a loop, p50/p99;
* end-pointing, offline: Piper sentences through the real Silero VAD, the real
  :class:`~voxpipe.conversation.turn_detector.TurnDetector` and the real model, as the
  session drives them (each verdict before the next window), once per setting.
  A *paused* clip is one sentence with a 0.8-1.1 s pause mid-sentence: cut if the turn
  ends in the pause. A *complete* clip is a whole sentence: how long after its last speech
  the turn ends.

The paused clips are made by cutting the whole sentence, as Piper says it, between the
first half's last word and the next (checked by Whisper hearing each half): synthesizing the
first half alone gives it the falling pitch of a finished sentence (Piper ends every input
so), which no caller pausing for a word has. Both kinds are reported (``--halves``). Piper
speaks without its random noise here, so a clip is the same audio on every run.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from voxpipe.config import TurnConfig
from voxpipe.loadtest.stats import summarize

RATE = 16000
QUIET_FRAME = 0.02  # energy of a 20 ms frame (peak-normalized) taken as a pause

# (first half, rest): the caller pauses between them.
PAUSED = [
    ("I'd like a table for", "four people tonight."),
    ("I want to book a room for", "two nights next week."),
    ("I was wondering if", "you have any vegetarian dishes."),
    ("Can you tell me when", "the restaurant opens on Sunday?"),
    ("My booking is under the name", "Harrison, for Friday."),
    ("Could you move my appointment to", "Thursday afternoon?"),
    ("I need a taxi from the station to", "the airport at six."),
    ("The problem is that my laptop", "will not connect to the network."),
    ("We would like to sit", "outside on the terrace."),
    ("Is it possible to", "bring a small dog with us?"),
    ("I ordered a book last week and", "it still has not arrived."),
    ("Can I pay for the room with", "a credit card on arrival?"),
]
PAUSES_S = (0.6, 0.9, 1.2)
COMPLETE = [
    "I'd like a table for four people tonight.",
    "Can you tell me when the restaurant opens on Sunday?",
    "My phone number is five five five, one two three four.",
    "I want to book a room for two nights next week.",
    "What time do you close today?",
    "Please cancel my booking for Friday.",
    "Do you have parking near the restaurant?",
    "I was wondering if you have any vegetarian dishes.",
    "That sounds perfect, thank you.",
    "Yes, seven o'clock works for me.",
    "No, I meant next Saturday.",
    "How much is a double room?",
    "Is breakfast included?",
    "I'll be arriving around nine in the evening.",
    "Can I change my reservation to five people?",
    "My name is Anna Rossi.",
    "Do you deliver to the city centre?",
    "What is the address of the hotel?",
    "I need a taxi to the airport tomorrow morning.",
    "Please send me a confirmation by email.",
    "The printer in our office is not working.",
    "I forgot my password.",
    "Can you check the status of my order?",
    "My order number is four four two seven.",
    "I would like to speak to a doctor.",
    "Is the clinic open on Saturdays?",
    "I have an appointment at ten thirty.",
    "Can I bring my own wine?",
    "We are celebrating a birthday.",
    "Do you have a table by the window?",
    "How long is the wait right now?",
    "I'd like to return a book I bought.",
    "Do you have the new novel in stock?",
    "What are your opening hours?",
    "Could you repeat that, please?",
    "Okay, that's all I needed.",
    "I'm allergic to nuts.",
    "Can you book it for me?",
    "Where can I park my car?",
    "Thanks, goodbye.",
]


def _spoken(text: str) -> np.ndarray:
    """``text`` in Piper's voice at 16 kHz, from its first loud sample to its last."""
    import soxr

    from voxpipe.engines.base import CancelToken
    from voxpipe.engines.piper_tts import PiperTts

    tts = PiperTts(None, threads=1, noise_scale=0.0, noise_w_scale=0.0)
    pcm = np.concatenate(list(tts.synthesize(text, CancelToken()))).astype(np.float32) / 32768
    audio = np.asarray(soxr.resample(pcm, tts.sample_rate, RATE), dtype=np.float32)
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0] : loud[-1] + 1]


@functools.lru_cache(maxsize=32)
def sentence_halves(first: str, rest: str, halves: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``first rest`` as Piper says it, cut between ``first``'s last word and the next one
    (or each said alone). The cut is the quietest 20 ms near the words' boundary at which
    Whisper hears ``first`` ending the head and ``rest`` starting the tail: a guess from
    length alone, or from Whisper's word times (late by a word's part), lands a word off
    on short words ("for four")."""
    if halves:
        return _spoken(first), _spoken(rest)
    whole = _spoken(f"{first} {rest}")
    stt = _whisper()
    words = _words(stt, whole)
    n = len(first.split())
    if len(words) <= n:
        raise RuntimeError(f"Whisper heard {len(words)} words in {first} {rest!r}")
    frame, step = 320, 80
    lo, hi = int(words[n - 1][1] * RATE), int(words[n][2] * RATE)
    energy = {
        i: float(np.sum(whole[i : i + frame] ** 2))
        for i in range(lo, min(hi, len(whole) - frame), step)
    }
    # quiet frames in time order: the first that splits the words right is where the
    # word's voiced end falls silent, not the middle of the next word's fricative; where
    # the words run together ("if you"), the least loud frames
    quiet = [i for i, e in energy.items() if e < QUIET_FRAME]
    starts = quiet + sorted(set(energy) - set(quiet), key=energy.__getitem__)
    pad, tried = np.zeros(int(0.3 * RATE), np.float32), list[int]()
    for start in starts:
        if any(abs(start - t) < RATE // 50 for t in tried):
            continue  # the same quiet stretch: Whisper would hear the same halves
        tried.append(start)
        cut = start + frame // 2
        head = _words(stt, np.concatenate([pad, whole[:cut], pad]))
        tail = _words(stt, np.concatenate([pad, whole[cut:], pad]))
        # word counts, not spellings, for the tail: tiny.en hears "four" as "for"
        if (
            len(head) == n
            and head[-1][0] == _plain(first.split()[-1])
            and (len(tail) == len(rest.split()))
        ):
            return whole[:cut], whole[cut:]
    raise RuntimeError(f"no cut of {first} {rest!r} is heard as its two halves")


def _plain(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


@functools.lru_cache(maxsize=1)
def _whisper() -> Any:
    from faster_whisper import WhisperModel

    from voxpipe.engines.whisper_stt import default_model_path

    return WhisperModel(
        str(default_model_path()),
        device="cpu",
        compute_type="int8",
        cpu_threads=1,
        local_files_only=True,
    )


def _words(stt: Any, audio: np.ndarray) -> list[tuple[str, float, float]]:
    """The words Whisper hears in ``audio``, each with its start and end (s)."""
    segments, _ = stt.transcribe(audio, language="en", beam_size=1, word_timestamps=True)
    return [
        (_plain(w.word), float(w.start), float(w.end))
        for seg in segments
        for w in seg.words or []
        if _plain(w.word)
    ]


def paused_sentence(first: str, rest: str, pause_s: float, halves: bool = False) -> np.ndarray:
    """``first rest`` said with ``pause_s`` of silence after ``first``, 0.3 s before and
    2.3 s after: long enough for any setting to end the turn."""
    head, tail = sentence_halves(first, rest, halves)
    pad = np.zeros(int(0.3 * RATE), np.float32)
    gap = np.zeros(int(pause_s * RATE), np.float32)
    return np.concatenate([pad, head, gap, tail, pad, np.zeros(2 * RATE, np.float32)])


def complete_sentence(text: str) -> np.ndarray:
    pad = np.zeros(int(0.3 * RATE), np.float32)
    return np.concatenate([pad, _spoken(text), pad, np.zeros(2 * RATE, np.float32)])


@dataclass
class Endpointing:
    """One clip through VAD, detector and model: the turns' end samples and the checks."""

    ends: list[int]
    last_speech: list[int]
    checks: list[float]


def endpoint(audio: np.ndarray, turn: TurnConfig, vad: Any, model: Any) -> Endpointing:
    from voxpipe.conversation.turn_detector import TurnDetector, TurnEventKind

    stream, window = vad.new_stream(), vad.window_samples
    detector = TurnDetector(turn, window, RATE)
    n = len(audio) // window
    probs = stream.process(audio[: n * window])
    out = Endpointing([], [], [])
    for i, prob in enumerate(probs):
        event = detector.push(audio[i * window : (i + 1) * window], prob)
        if event is None or event.kind is TurnEventKind.SPEECH_STARTED:
            continue
        if event.kind is TurnEventKind.END_CANDIDATE:
            assert event.audio is not None
            t = time.perf_counter()
            detector.judged(model.probability_complete(event.audio) >= turn.smart_turn_threshold)
            out.checks.append(time.perf_counter() - t)
            continue
        out.ends.append(detector.samples)
        out.last_speech.append(event.sample)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.tool_eval.voices import phone_line
    from voxpipe.config import Config
    from voxpipe.engines.model_files import SMART_TURN, ensure_wheel_member
    from voxpipe.engines.silero_vad import SileroVad
    from voxpipe.engines.smart_turn import SmartTurn

    config = Config()
    model = SmartTurn(ensure_wheel_member(config.llm.cache_dir, SMART_TURN), threads=1)
    vad = SileroVad(threads=1)
    model.warmup()
    rng = np.random.default_rng(0)
    costs = []
    for i in range(args.loops):
        audio = (0.1 * rng.standard_normal(RATE * (1 + i % 8))).astype(np.float32)
        t = time.perf_counter()
        model.probability_complete(audio)
        costs.append((time.perf_counter() - t) * 1000)
    report: dict[str, Any] = {"check_ms": summarize(costs)}
    settings = {
        "silence": config.turn,
        "smart_turn": config.turn.model_copy(update={"end_of_turn": "smart_turn"}),
    }
    line = phone_line if args.line == "twilio" else (lambda audio: audio)
    paused, uncut = [], []
    for a, b in PAUSED:
        try:
            clips = [(f"{a} / {b} ({p} s)", paused_sentence(a, b, p, args.halves))
                     for p in PAUSES_S]  # fmt: skip
        except RuntimeError as error:  # Whisper heard the words otherwise: no clip to trust
            uncut.append(str(error))
            continue
        paused += [(label, line(audio)) for label, audio in clips]
    complete = [(text, line(complete_sentence(text))) for text in COMPLETE]
    report["line"], report["paused_left_out"] = args.line, uncut
    for name, turn in settings.items():
        cut, delays, checks, rows = 0, [], [], []
        for label, audio in paused:
            result = endpoint(audio, turn, vad, model)
            cut += len(result.ends) > 1
            checks += result.checks
            rows.append({"clip": label, "turns": len(result.ends)})
        for label, audio in complete:
            result = endpoint(audio, turn, vad, model)
            checks += result.checks
            delay = (result.ends[0] - result.last_speech[0]) / 16 if result.ends else None
            delays.append(delay)
            rows.append({"clip": label, "eot_after_speech_ms": delay})
        ended = [d for d in delays if d is not None]
        report[name] = {
            "paused_cut": f"{cut}/{len(paused)} ({100 * cut / max(1, len(paused)):.0f} %)",
            "complete_within_250_ms": f"{sum(d <= 250 for d in ended)}/{len(complete)}",
            "eot_after_speech_ms": summarize(ended),
            "checks_ms": summarize([c * 1000 for c in checks]) if checks else None,
            "clips": rows,
        }
    return report


def main(args: argparse.Namespace) -> int:
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"line: {report['line']}; one check alone: {report['check_ms']}")
    for reason in report["paused_left_out"]:
        print(f"left out: {reason}")
    for name in ("silence", "smart_turn"):
        r = report[name]
        print(f"{name}: paused clips cut {r['paused_cut']}; complete sentences ended within "
              f"250 ms {r['complete_within_250_ms']}; end of turn after the last speech "
              f"of a complete sentence {r['eot_after_speech_ms']}")  # fmt: skip
        for row in r["clips"]:
            print(f"   {row}")
    return 0
