"""The reply rules on token ids alone; tests/e2e/test_reply_rules.py holds them to the model."""

from __future__ import annotations

import numpy as np

from voxpipe.engines.reply_rules import ReplyRules, continuations

END = np.array([0, 1], dtype=np.intc)
CALLER = [10, 11, 12, 13, 11, 12, 14]  # "11 12" is followed once by 13, once by 14


def scores(n: int = 20) -> np.ndarray:
    return np.zeros(n, dtype=np.float32)


def barred_after(rules: ReplyRules, prompt: list[int], reply: list[int]) -> set[int]:
    out = rules(np.array(prompt + reply), scores())
    return {int(t) for t in np.flatnonzero(np.isneginf(out))}


def test_continuations_map_each_run_head_to_every_token_that_follows_it() -> None:
    table = continuations(CALLER, 3)
    assert table[(11, 12)] == {13, 14}
    assert table[(10, 11)] == {12}
    assert (12, 14) not in table  # nothing follows the last pair


def test_end_of_turn_is_barred_until_the_reply_has_a_letter_or_digit() -> None:
    rules = ReplyRules(prompt_len=3, end_ids=END)
    assert barred_after(rules, [5, 6, 7], []) == {0, 1}
    rules.said(" ...\n")
    assert barred_after(rules, [5, 6, 7], [15]) == {0, 1}
    rules.said(" 7")
    assert barred_after(rules, [5, 6, 7], [15, 16]) == set()


def test_a_token_that_would_copy_echo_run_caller_tokens_in_a_row_is_barred() -> None:
    rules = ReplyRules(prompt_len=2, end_ids=END, caller=CALLER, echo_run=3)
    rules.said("Hi")
    prompt = [10, 11]  # the prompt ends like the caller's words: it is not the reply
    assert barred_after(rules, prompt, []) == set()
    assert barred_after(rules, prompt, [11]) == set()  # one token of the run: too short
    assert barred_after(rules, prompt, [15, 11, 12]) == {13, 14}
    assert barred_after(rules, prompt, [10, 11]) == {12}
    assert barred_after(rules, prompt, [12, 11]) == set()  # not a run of the caller's


def test_with_no_caller_words_or_echo_run_off_only_the_empty_answer_rule_holds() -> None:
    for rules in (
        ReplyRules(prompt_len=0, end_ids=END, caller=(), echo_run=3),
        ReplyRules(prompt_len=0, end_ids=END, caller=CALLER, echo_run=0),
    ):
        rules.said("word")
        assert barred_after(rules, [], [10, 11]) == set()


def test_the_logits_are_changed_in_place_as_the_sampler_reads_them() -> None:
    rules = ReplyRules(prompt_len=0, end_ids=END, caller=CALLER, echo_run=2)
    logits = scores()
    out = rules(np.array([10]), logits)
    assert out is logits
    assert np.isneginf(logits[[0, 1, 11]]).all()
    assert np.isfinite(np.delete(logits, [0, 1, 11])).all()


def test_tokens_that_begin_a_call_are_barred_everywhere_in_the_reply() -> None:
    never = np.array([7, 8], dtype=np.intc)
    rules = ReplyRules(prompt_len=1, end_ids=END, never=never)
    rules.said("Sure")
    assert barred_after(rules, [5], []) == {7, 8}
    assert barred_after(rules, [5], [15, 16, 17]) == {7, 8}
