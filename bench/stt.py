"""``python -m bench stt``: the fitted Whisper window against the full 30 s window.

Every clip of real speech with a known transcript that Debian ships is
transcribed both ways on one model: the LibriVox sentences and card names of
pocketsphinx-testdata, its ``goforward.raw`` (the sentence of its
``goforward.gram``), and alsa-utils' channel announcements (their transcript is
their name). alsa-utils' ``Noise.wav`` is transcribed too, outside the word
error rate, to show what each path makes of no speech.

The two methods alternate clip by clip, the one that goes first alternating
too, so a burst of load from another process on a shared machine hurts both
alike; the report gives ratios (fitted / full) as well as times, and the load
average before and after. Word error rate is over the whole corpus (total
edits / total reference words) after a light normalisation (case, punctuation,
"10" -> "ten", "Mr" -> "mister"), so it counts words, not Whisper's choice of
casing or numerals.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from voxpipe.audio.pcm import (
    float_to_pcm16,
    pcm16_to_float,
    read_wav,
    resample,
    ulaw_decode,
    ulaw_encode,
)
from voxpipe.config import Config
from voxpipe.engines.base import STT_SAMPLE_RATE
from voxpipe.loadtest.callers import librivox_clips

POCKETSPHINX = Path("/usr/share/pocketsphinx/test/data")
ALSA = Path("/usr/share/sounds/alsa")
METHODS = ("fitted", "full")
BANDS = ("<=2 s", "2-5 s", ">5 s")
TELEPHONE_RATE = 8000
PAIR_GAP_S = 0.3
WER_RATIO_LIMIT = 1.05  # the fitted window may add at most 5 % more word errors

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()  # fmt: skip
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SPOKEN = {"mr": "mister", "mrs": "missus", "dr": "doctor"}


@dataclass(frozen=True)
class SpeechClip:
    name: str
    corpus: str
    text: str | None  # None: not speech (kept out of the word error rate)
    audio: np.ndarray  # float32 at 16 kHz

    @property
    def seconds(self) -> float:
        return float(self.audio.shape[0] / STT_SAMPLE_RATE)


# -- the corpus -----------------------------------------------------------------------------


def _transcripts(index: Path) -> dict[str, str]:
    """pocketsphinx's ``<s> words </s> (key)`` lines."""
    out = {}
    for line in index.read_text().splitlines():
        text, _, key = line.rpartition("(")
        out[key.strip(" )")] = text.replace("<s>", "").replace("</s>", "").strip()
    return out


def _wav16(path: Path) -> np.ndarray:
    audio, rate = read_wav(path)
    return resample(audio, rate, STT_SAMPLE_RATE)


def telephone(audio: np.ndarray) -> np.ndarray:
    """What a phone caller's audio becomes on the way in: 8 kHz, G.711 mu-law, back to 16 kHz."""
    narrow = resample(audio, STT_SAMPLE_RATE, TELEPHONE_RATE)
    heard = pcm16_to_float(ulaw_decode(ulaw_encode(float_to_pcm16(narrow))))
    return resample(heard, TELEPHONE_RATE, STT_SAMPLE_RATE)


def speech_corpus(pocketsphinx: Path = POCKETSPHINX, alsa: Path = ALSA) -> list[SpeechClip]:
    """All the clips, in a fixed order; exits with a hint when the Debian packages are missing."""
    cards = pocketsphinx / "cards"
    if not (cards / "cards.transcription").is_file() or not alsa.is_dir():
        raise SystemExit("missing speech: install pocketsphinx-testdata and alsa-utils")
    clips = [
        SpeechClip(c.name, "librivox", c.text, resample(c.audio, c.rate, STT_SAMPLE_RATE))
        for c in librivox_clips(pocketsphinx / "librivox")
    ]
    for key, text in sorted(_transcripts(cards / "cards.transcription").items()):
        clips.append(SpeechClip(key, "cards", text, _wav16(cards / f"{key}.wav")))
    goforward = pocketsphinx / "goforward.raw"  # 16 kHz PCM16, the grammar's one sentence
    if goforward.is_file():
        audio = np.fromfile(goforward, dtype="<i2").astype(np.float32) / 32768.0
        clips.append(SpeechClip("goforward", "pocketsphinx", "go forward ten meters", audio))
    for path in sorted(alsa.glob("*.wav")):
        said = None if path.stem == "Noise" else path.stem.replace("_", " ")
        clips.append(SpeechClip(path.stem, "alsa", said, _wav16(path)))
    return clips


def paired_clips(clips: Sequence[SpeechClip], gap_s: float = PAIR_GAP_S) -> list[SpeechClip]:
    """Longer turns: every ordered pair of LibriVox sentences and every pair of card clips,
    joined by a short pause, as a caller reading on or listing cards would speak them."""
    gap = np.zeros(round(gap_s * STT_SAMPLE_RATE), dtype=np.float32)
    librivox = [c for c in clips if c.corpus == "librivox" and c.text]
    cards = [c for c in clips if c.corpus == "cards" and c.text]
    pairs = list(itertools.permutations(librivox, 2)) + list(itertools.combinations(cards, 2))
    return [
        SpeechClip(
            f"{a.name.rsplit('-', 1)[-1]}+{b.name.rsplit('-', 1)[-1]}",
            f"{a.corpus} pairs",
            f"{a.text} {b.text}",
            np.concatenate([a.audio, gap, b.audio]),
        )
        for a, b in pairs
    ]


# -- scoring --------------------------------------------------------------------------------


def number_words(n: int) -> str:
    """English words for 0-9999; larger numbers are left as digits."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {number_words(rest)}" if rest else "")
    if n < 10000:
        thousands, rest = divmod(n, 1000)
        return f"{_ONES[thousands]} thousand" + (f" {number_words(rest)}" if rest else "")
    return str(n)


def normalize(text: str) -> list[str]:
    """Words to score: lower case, no punctuation, hyphens split, numerals and titles spoken."""
    out: list[str] = []
    for word in re.findall(r"[a-z0-9']+", text.lower().replace("-", " ")):
        word = word.strip("'")
        if word.isdigit():
            out.extend(number_words(int(word)).split())
        elif word:
            out.append(_SPOKEN.get(word, word))
    return out


def word_edits(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Levenshtein distance in words (substitutions + deletions + insertions)."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1]


def corpus_wer(pairs: Sequence[tuple[str, str]]) -> float:
    """Total word edits over total reference words, for (reference, hypothesis) pairs."""
    edits = words = 0
    for reference, hypothesis in pairs:
        ref = normalize(reference)
        edits += word_edits(ref, normalize(hypothesis))
        words += len(ref)
    return edits / words if words else 0.0


def band_of(seconds: float) -> str:
    return BANDS[0] if seconds <= 2.0 else BANDS[1] if seconds <= 5.0 else BANDS[2]


def _p50(values: Sequence[float]) -> float | None:
    return round(float(np.median(values)), 1) if values else None


def summarize_runs(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """WER per method, p50 compute per length band and method with their ratio, the median of
    the per-clip paired ratios, and how many fitted decodes were retried.

    ``rows``: one per clip, repetition and method, with ``clip``, ``seconds``, ``method``,
    ``ms``, ``text``, ``reference`` (None for non-speech) and ``retried``.
    """
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        first.setdefault((row["clip"], row["method"]), row)
    wer = {
        method: round(
            corpus_wer(
                [(r["reference"], r["text"]) for (_, m), r in first.items()
                 if m == method and r["reference"] is not None]
            ),
            4,
        )
        for method in METHODS
    }  # fmt: skip
    by_corpus: dict[str, dict[str, float]] = {}
    for corpus in sorted({r["corpus"] for r in first.values() if r["reference"] is not None}):
        pairs = {
            m: [(r["reference"], r["text"]) for (_, mm), r in first.items()
                if mm == m and r["corpus"] == corpus and r["reference"] is not None]
            for m in METHODS
        }  # fmt: skip
        by_corpus[corpus] = {m: round(corpus_wer(pairs[m]), 4) for m in METHODS}
        by_corpus[corpus]["words"] = sum(len(normalize(ref)) for ref, _ in pairs["full"])
    bands: dict[str, Any] = {}
    for band in BANDS:
        times = {
            m: [r["ms"] for r in rows if r["method"] == m and band_of(r["seconds"]) == band]
            for m in METHODS
        }
        fitted, full = _p50(times["fitted"]), _p50(times["full"])
        clips = {r["clip"] for r in rows if band_of(r["seconds"]) == band}
        bands[band] = {
            "clips": len(clips),
            "runs": len(times["fitted"]),
            "fitted_p50_ms": fitted,
            "full_p50_ms": full,
            "ratio": round(fitted / full, 3) if fitted and full else None,
        }
    paired: dict[tuple[str, int], dict[str, float]] = {}
    for row in rows:
        paired.setdefault((row["clip"], row["rep"]), {})[row["method"]] = row["ms"]
    ratios = [p["fitted"] / p["full"] for p in paired.values() if len(p) == 2 and p["full"] > 0]
    differ = sorted(
        clip for clip in {c for c, _ in first}
        if normalize(first[(clip, "fitted")]["text"]) != normalize(first[(clip, "full")]["text"])
    )  # fmt: skip
    return {
        "wer": wer,
        "wer_ratio": round(wer["fitted"] / wer["full"], 3) if wer["full"] else None,
        "wer_ratio_ok": wer["fitted"] <= wer["full"] * WER_RATIO_LIMIT,
        "wer_by_corpus": by_corpus,
        "bands": bands,
        "paired_ratio_p50": round(float(np.median(ratios)), 3) if ratios else None,
        "retried": sum(1 for r in rows if r["method"] == "fitted" and r.get("retried")),
        "fitted_runs": sum(1 for r in rows if r["method"] == "fitted"),
        "transcripts_differ": differ,
    }


def render(summary: dict[str, Any], first: Sequence[dict[str, Any]], header: str) -> str:
    lines = [header, ""]
    lines.append(f"{'clip':<46}{'s':>6}  {'fitted ms':>9}  {'full ms':>8}  transcripts")
    for row in first:
        same = "=" if normalize(row["fitted_text"]) == normalize(row["full_text"]) else "!="
        lines.append(
            f"{row['clip']:<46}{row['seconds']:>6.2f}  {row['fitted_ms']:>9.0f}  "
            f"{row['full_ms']:>8.0f}  {row['fitted_text']!r} {same} {row['full_text']!r}"
        )
    wer = summary["wer"]
    lines += [
        "",
        f"WER  fitted {wer['fitted']:.2%}  full {wer['full']:.2%}  ratio "
        f"{summary['wer_ratio']}  (limit {WER_RATIO_LIMIT}: "
        f"{'ok' if summary['wer_ratio_ok'] else 'EXCEEDED'})",
        *(
            f"     {corpus:<16} fitted {w['fitted']:.2%}  full {w['full']:.2%}  "
            f"({w['words']:.0f} words)"
            for corpus, w in summary["wer_by_corpus"].items()
        ),
        "",
        f"{'length':<8}{'clips':>6}{'runs':>6}{'fitted p50':>12}{'full p50':>10}{'ratio':>8}",
    ]
    for band, b in summary["bands"].items():
        if not b["clips"]:
            continue
        lines.append(
            f"{band:<8}{b['clips']:>6}{b['runs']:>6}{b['fitted_p50_ms']:>10.0f}ms"
            f"{b['full_p50_ms']:>8.0f}ms{b['ratio']:>8.2f}"
        )
    lines.append(
        f"per-clip paired ratio fitted/full, p50: {summary['paired_ratio_p50']}; fitted decodes "
        f"retried in a longer window: {summary['retried']} of {summary['fitted_runs']}"
    )
    return "\n".join(lines)


# -- running --------------------------------------------------------------------------------


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def run_interleaved(stt: Any, clips: Sequence[SpeechClip], reps: int) -> list[dict[str, Any]]:
    """Each clip both ways, alternately first, ``reps`` times; one row per decode."""
    rows = []
    for rep in range(reps):
        for index, clip in enumerate(clips):
            order = METHODS if (rep + index) % 2 == 0 else METHODS[::-1]
            for method in order:
                start = time.perf_counter()
                trace = stt.transcribe_traced(clip.audio, window=method)
                ms = (time.perf_counter() - start) * 1000
                rows.append({
                    "clip": clip.name, "corpus": clip.corpus, "seconds": round(clip.seconds, 3),
                    "rep": rep, "method": method, "ms": round(ms, 1),
                    "text": trace.transcription.text, "reference": clip.text,
                    "windows": [p.window_s for p in trace.passes],
                    "retried": len(trace.passes) > 1,
                })  # fmt: skip
    return rows


def first_runs(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per clip: the first repetition of both methods side by side."""
    by_clip: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["rep"] != 0:
            continue
        entry = by_clip.setdefault(row["clip"], {"clip": row["clip"], "seconds": row["seconds"]})
        entry[f"{row['method']}_ms"] = row["ms"]
        entry[f"{row['method']}_text"] = row["text"]
    return list(by_clip.values())


def main(args: argparse.Namespace) -> int:
    from voxpipe.engines.whisper_stt import WhisperStt
    from voxpipe.engines.whisper_window import WINDOW_BUCKETS_S

    config = Config.load(args.config)
    clips = speech_corpus()
    if args.pairs:
        clips += paired_clips(clips)
    if args.telephone:
        clips = [replace(c, audio=telephone(c.audio)) for c in clips]
    buckets = tuple(float(b) for b in args.buckets.split(",")) if args.buckets else WINDOW_BUCKETS_S
    print(f"loading {config.stt.model_path or 'tiny.en'} ({config.stt.threads} threads) ...")
    stt = WhisperStt(
        config.stt.model_path,
        compute_type=config.stt.compute_type,
        threads=config.stt.threads,
        language=config.stt.language,
        beam_size=config.stt.beam_size,
        buckets=buckets,
    )
    stt.warmup()  # every fitted bucket
    stt.transcribe_traced(clips[0].audio, window="full")
    load_before = loadavg()
    print(f"load average before: {load_before}  ({os.cpu_count()} CPUs); "
          f"{len(clips)} clips x {args.reps} reps x 2 methods ...", flush=True)  # fmt: skip
    rows = run_interleaved(stt, clips, args.reps)
    load_after = loadavg()
    summary = summarize_runs(rows)
    header = (
        f"bench stt: {stt.name}, {config.stt.threads} threads, "
        f"beam {config.stt.beam_size}, {'telephone (8 kHz mu-law) ' if args.telephone else ''}"
        f"buckets {'/'.join(f'{b:g}' for b in stt.buckets)} s vs 30 s; {args.reps} reps, "
        f"methods interleaved; load average {load_before} -> {load_after}"
    )
    text = render(summary, first_runs(rows), header)
    print("\n" + text)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "summary": summary,
        "buckets_s": list(stt.buckets),
        "telephone": args.telephone,
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
        "runs": rows,
    }
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out}")
    return 0 if summary["wer_ratio_ok"] else 1
