"""The batched LLM's sampler: llama.cpp's order of rules, in numpy."""

from __future__ import annotations

import numpy as np

from voxpipe.engines.token_sampler import SamplingSettings, TokenSampler


def test_temperature_zero_is_the_argmax() -> None:
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    sampler = TokenSampler(SamplingSettings(temperature=0.0, repeat_penalty=1.0), seed=1)
    assert sampler.sample(logits.copy(), []) == 1


def test_the_repeat_penalty_moves_the_argmax_off_a_repeated_token() -> None:
    logits = np.array([0.0, 3.0, 2.9, -1.0], dtype=np.float32)
    sampler = TokenSampler(SamplingSettings(temperature=0.0, repeat_penalty=1.1), seed=1)
    assert sampler.sample(logits.copy(), [1]) == 2  # 3.0 / 1.1 < 2.9


def test_top_k_and_top_p_keep_only_the_likely_tokens() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)
    logits[[5, 7]] = 20.0  # two tokens hold nearly all the mass
    sampler = TokenSampler(SamplingSettings(temperature=1.0, top_p=0.9, top_k=40), seed=3)
    drawn = {sampler.sample(logits.copy(), []) for _ in range(200)}
    assert drawn <= {5, 7}
    assert drawn == {5, 7}


def test_a_seed_makes_a_reply_reproducible() -> None:
    logits = np.random.default_rng(1).normal(size=500).astype(np.float32)
    settings = SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0)
    first = [TokenSampler(settings, seed=9).sample(logits.copy(), []) for _ in range(1)]
    again = [TokenSampler(settings, seed=9).sample(logits.copy(), []) for _ in range(1)]
    runs = [TokenSampler(settings, seed=9) for _ in range(2)]
    assert first == again
    assert [runs[0].sample(logits.copy(), []) for _ in range(20)] == [
        runs[1].sample(logits.copy(), []) for _ in range(20)
    ]


def test_barred_tokens_are_never_drawn() -> None:
    logits = np.zeros(50, dtype=np.float32)
    logits[:10] = -np.inf
    sampler = TokenSampler(SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), 4)
    assert all(sampler.sample(logits.copy(), []) >= 10 for _ in range(100))
