"""``python -m bench stt``'s scoring and report, on recorded runs (no model)."""

from __future__ import annotations

from typing import Any

import jiwer
import numpy as np
import pytest

from bench.stt import (
    SpeechClip,
    band_of,
    corpus_wer,
    first_runs,
    normalize,
    number_words,
    paired_clips,
    render,
    summarize_runs,
    telephone,
    word_edits,
)


def test_numbers_are_spoken() -> None:
    assert [number_words(n) for n in (0, 7, 10, 13, 20, 42, 100, 305, 1999)] == [
        "zero", "seven", "ten", "thirteen", "twenty", "forty two", "one hundred",
        "three hundred five", "one thousand nine hundred ninety nine",
    ]  # fmt: skip
    assert number_words(29340) == "29340"


def test_normalize_scores_words_not_casing_punctuation_or_numerals() -> None:
    assert normalize("10 of clubs.") == ["ten", "of", "clubs"]
    assert normalize("And Mr. John Dashwood") == ["and", "mister", "john", "dashwood"]
    assert normalize("cold-hearted, rather; selfish!") == ["cold", "hearted", "rather", "selfish"]
    assert normalize("We're Right.") == ["we're", "right"]
    assert normalize("'quoted'") == ["quoted"]
    assert normalize("") == []


@pytest.mark.parametrize(
    ("reference", "hypothesis"),
    [
        ("ten of clubs", "ten of clubs"),
        ("ten of clubs", "ten of close"),
        ("four queen of clubs", "for queen of clothes"),
        ("five five", "five"),
        ("front center", "front center please now"),
        ("he was not an ill disposed young man", "he was not an old sposed young man"),
        ("a b c", ""),
    ],
)
def test_word_edits_agree_with_jiwer(reference: str, hypothesis: str) -> None:
    edits = word_edits(reference.split(), hypothesis.split())
    assert edits / len(reference.split()) == pytest.approx(jiwer.wer(reference, hypothesis))


def test_corpus_wer_is_total_edits_over_total_reference_words() -> None:
    pairs = [("ten of clubs", "10 of close."), ("five five", "5 5"), ("front left", "")]
    assert corpus_wer(pairs) == pytest.approx((1 + 0 + 2) / 7)
    assert corpus_wer([]) == 0.0


def test_length_bands() -> None:
    assert [band_of(s) for s in (0.5, 2.0, 2.01, 5.0, 5.01, 30.0)] == [
        "<=2 s", "<=2 s", "2-5 s", "2-5 s", ">5 s", ">5 s",
    ]  # fmt: skip


def row(
    clip: str,
    seconds: float,
    rep: int,
    method: str,
    ms: float,
    text: str,
    reference: str | None,
    corpus: str = "cards",
    retried: bool = False,
) -> dict[str, Any]:
    return {"clip": clip, "corpus": corpus, "seconds": seconds, "rep": rep, "method": method,
            "ms": ms, "text": text, "reference": reference, "retried": retried}  # fmt: skip


RECORDED = [
    # a short clip: the fitted window is right and fast; the full one misses a word
    row("001", 1.1, 0, "fitted", 100, "10 of clubs", "ten of clubs"),
    row("001", 1.1, 0, "full", 400, "10 of close.", "ten of clubs"),
    row("001", 1.1, 1, "full", 420, "10 of close.", "ten of clubs"),
    row("001", 1.1, 1, "fitted", 140, "10 of clubs", "ten of clubs", retried=True),
    # a mid-length clip, the same words both ways
    row("005", 3.5, 0, "full", 350, "8 of spades.", "eight of spades"),
    row("005", 3.5, 0, "fitted", 70, "Eight of spades", "eight of spades"),
    # a long sentence the fitted window gets a word wrong in
    row("0870", 7.1, 0, "fitted", 180, "he was not an old man", "he was not an ill man", "lv"),
    row("0870", 7.1, 0, "full", 450, "he was not an ill man", "he was not an ill man", "lv"),
    # noise: out of the word error rate whatever it says
    row("Noise", 1.4, 0, "fitted", 60, "you", None, "alsa"),
    row("Noise", 1.4, 0, "full", 380, "", None, "alsa"),
]


def test_summary_of_recorded_runs() -> None:
    summary = summarize_runs(RECORDED)
    # fitted: 1 error ("old") in 12 words; full: 1 ("close") in 12
    assert summary["wer"] == {"fitted": round(1 / 12, 4), "full": round(1 / 12, 4)}
    assert summary["wer_ratio"] == 1.0 and summary["wer_ratio_ok"]
    assert summary["wer_by_corpus"]["cards"] == {"fitted": 0.0, "full": round(1 / 6, 4), "words": 6}
    assert summary["wer_by_corpus"]["lv"]["fitted"] == round(1 / 6, 4)
    bands = summary["bands"]
    assert bands["<=2 s"] == {"clips": 2, "runs": 3, "fitted_p50_ms": 100.0,
                              "full_p50_ms": 400.0, "ratio": 0.25}  # fmt: skip
    assert bands["2-5 s"]["ratio"] == 0.2 and bands[">5 s"]["ratio"] == 0.4
    # paired per clip and rep: 100/400, 140/420, 70/350, 180/450, 60/380
    assert summary["paired_ratio_p50"] == 0.25  # the middle of 0.16, 0.2, 0.25, 0.33, 0.4
    assert summary["retried"] == 1 and summary["fitted_runs"] == 5
    assert summary["transcripts_differ"] == ["001", "0870", "Noise"]


def test_the_wer_gate_allows_five_percent_more_errors_and_no_more() -> None:
    ref = " ".join(f"w{i}" for i in range(100))
    full_text = " ".join(f"w{i}" for i in range(80)) + " x" * 20  # 20 errors
    worse = " ".join(f"w{i}" for i in range(79)) + " x" * 21  # 21 errors: 1.05x
    worst = " ".join(f"w{i}" for i in range(78)) + " x" * 22  # 22 errors
    for text, ok in ((full_text, True), (worse, True), (worst, False)):
        rows = [row("a", 9, 0, "full", 1, full_text, ref), row("a", 9, 0, "fitted", 1, text, ref)]
        assert summarize_runs(rows)["wer_ratio_ok"] is ok


def test_report_lists_each_clip_once_with_both_transcripts() -> None:
    first = first_runs(RECORDED)
    assert [f["clip"] for f in first] == ["001", "005", "0870", "Noise"]
    assert first[0]["fitted_text"] == "10 of clubs" and first[0]["full_ms"] == 400
    text = render(summarize_runs(RECORDED), first, "header")
    assert text.startswith("header")
    assert "'10 of clubs' != '10 of close.'" in text
    assert "'Eight of spades' = '8 of spades.'" in text
    assert "ratio 1.0" in text and "ok" in text


def test_telephone_keeps_length_and_loses_the_high_band() -> None:
    rate = 16000
    t = np.arange(rate, dtype=np.float32) / rate
    low = 0.3 * np.sin(2 * np.pi * 440 * t).astype(np.float32)
    high = 0.3 * np.sin(2 * np.pi * 6000 * t).astype(np.float32)
    heard_low, heard_high = telephone(low), telephone(high)
    assert abs(heard_low.shape[0] - rate) <= 16 and heard_low.dtype == np.float32
    assert np.std(heard_low[1000:-1000]) > 0.15  # 440 Hz passes the 4 kHz band
    assert np.std(heard_high[1000:-1000]) < 0.01  # 6 kHz does not


def test_pairs_join_two_clips_of_a_corpus_with_a_pause() -> None:
    def clip(name: str, corpus: str, text: str | None, seconds: float) -> SpeechClip:
        return SpeechClip(name, corpus, text, np.ones(int(seconds * 16000), dtype=np.float32))

    clips = [
        clip("book-0870", "librivox", "and mister", 2.0),
        clip("book-0880", "librivox", "he was", 1.0),
        clip("001", "cards", "ten of clubs", 1.0),
        clip("002", "cards", "four queen", 1.5),
        clip("003", "cards", "seven", 0.5),
        clip("Front_Left", "alsa", "front left", 1.0),
    ]
    pairs = paired_clips(clips)
    assert [p.name for p in pairs] == [
        "0870+0880", "0880+0870", "001+002", "001+003", "002+003",
    ]  # fmt: skip
    assert pairs[0].text == "and mister he was" and pairs[0].corpus == "librivox pairs"
    assert pairs[0].seconds == pytest.approx(2.0 + 0.3 + 1.0)
    assert np.all(pairs[0].audio[32000:36800] == 0)  # the pause
