"""The batched LLM's scheduler: what goes into a step, decided without a model."""

from __future__ import annotations

from voxpipe.engines.batch_plan import BatchPolicy, Phase, SeqView, plan_step

POLICY = BatchPolicy(
    step_tokens=64,
    prefill_chunk=16,
    first_phrase_tokens=10,
    speech_lead_ns=4_000_000_000,
    first_phrase_width=0,  # every first phrase shares the step (the width has its own test)
    rest_hold_ns=400_000_000,
)


def decoding(key: str, deadline: int, generated: int = 20, **kw: object) -> SeqView:
    return SeqView(key, Phase.DECODE, deadline, generated=generated, **kw)  # type: ignore[arg-type]


def prompt(key: str, deadline: int, left: int, **kw: object) -> SeqView:
    return SeqView(key, Phase.PREFILL, deadline, prompt_left=left, **kw)  # type: ignore[arg-type]


def test_every_generating_reply_shares_the_step_when_nobody_waits_for_a_first_word() -> None:
    plan = plan_step([decoding("a", 3), decoding("b", 1), decoding("c", 2)], POLICY)
    assert plan.decode == ("b", "c", "a")  # by deadline
    assert plan.prefill == ()


def test_prompts_go_in_by_deadline_and_in_chunks_while_others_generate() -> None:
    seqs = [
        decoding("talking", 1, generated=3),  # in its first phrase: decodes
        prompt("late", 30, left=50),
        prompt("early", 20, left=50),
    ]
    plan = plan_step(seqs, POLICY)
    assert plan.decode == ("talking",)
    assert plan.prefill == (("early", 16), ("late", 16))


def test_a_lone_prompt_takes_the_whole_step() -> None:
    plan = plan_step([prompt("only", 1, left=500)], POLICY)
    assert plan.prefill == (("only", 64),)


def test_first_phrases_go_ahead_of_the_rest() -> None:
    seqs = [
        decoding("speaking", 1, generated=40),  # past its first phrase, audio buffered
        decoding("starting", 5, generated=2),  # its caller hears nothing yet
        prompt("new", 9, left=30),
    ]
    plan = plan_step(seqs, POLICY)
    assert plan.decode == ("starting",)
    assert plan.prefill == (("new", 16),)
    assert "speaking" in plan.waiting


def test_the_rest_waits_at_most_rest_hold() -> None:
    seqs = [
        decoding("speaking", 1, generated=40, left_out_ns=400_000_000),
        decoding("starting", 5, generated=2),
    ]
    assert plan_step(seqs, POLICY).decode == ("starting", "speaking")


def test_a_small_budget_cuts_the_rest_not_a_first_phrase() -> None:
    policy = BatchPolicy(step_tokens=2, prefill_chunk=1, first_phrase_tokens=10, rest_hold_ns=0,
                         first_phrase_width=0)  # fmt: skip
    seqs = [decoding("old", 1, generated=50), decoding("new1", 8, generated=1),
            decoding("new2", 9, generated=1)]  # fmt: skip
    plan = plan_step(seqs, policy)
    assert plan.decode == ("new1", "new2")
    assert "old" in plan.waiting


def test_speculative_work_never_delays_a_confirmed_turn() -> None:
    seqs = [
        prompt("held", 1, left=40, speculative=True),  # earlier, but the turn may go on
        prompt("confirmed", 5, left=40),
    ]
    plan = plan_step(seqs, POLICY)
    assert plan.prefill == (("confirmed", 40),)
    assert plan.waiting == ("held",)


def test_speculative_work_runs_when_every_confirmed_reply_is_past_its_first_phrase() -> None:
    seqs = [decoding("confirmed", 1, generated=30), prompt("held", 5, left=40, speculative=True)]
    plan = plan_step(seqs, POLICY)
    assert plan.decode == ("confirmed",)
    assert plan.prefill == (("held", 16),)


def test_a_speculative_prompt_runs_after_the_confirmed_ones() -> None:
    seqs = [decoding("confirmed", 1, generated=30), prompt("held", 1, left=40, speculative=True),
            prompt("other", 2, left=8)]  # fmt: skip
    plan = plan_step(seqs, POLICY)
    assert plan.prefill == (("other", 8),)  # a confirmed prompt waits: the held one too


def test_a_gated_reply_sits_out() -> None:
    seqs = [decoding("gated", 1, generated=5, gated=True), decoding("free", 2, generated=5)]
    plan = plan_step(seqs, POLICY)
    assert plan.decode == ("free",)
    assert plan.waiting == ("gated",)


def test_nothing_to_run_is_an_empty_step() -> None:
    plan = plan_step([decoding("gated", 1, gated=True)], POLICY)
    assert plan.empty
    assert plan.tokens == 0


def test_a_reply_far_ahead_of_its_callers_ear_rests() -> None:
    seqs = [
        decoding("ahead", 1, generated=30, ahead_ns=5_000_000_000),  # 5 s not yet heard
        decoding("just", 2, generated=30, ahead_ns=1_000_000_000),
        decoding("first", 3, generated=2, ahead_ns=9_000_000_000),  # first phrase: never rests
    ]
    plan = plan_step(seqs, POLICY)
    assert plan.decode == ("first",)  # "just" waits for the first phrase (rest_hold)
    assert plan.resting == ("ahead",)
    assert set(plan.waiting) == {"ahead", "just"}


def test_with_a_width_of_one_the_earliest_first_phrase_runs_alone() -> None:
    policy = BatchPolicy(step_tokens=64, prefill_chunk=16, first_phrase_tokens=10,
                         first_phrase_width=1)  # fmt: skip
    seqs = [
        decoding("second", 20, generated=3),
        prompt("third", 30, left=25),
        decoding("first", 10, generated=5),
        decoding("talking", 1, generated=40),
    ]
    plan = plan_step(seqs, policy)
    assert plan.decode == ("first",)
    assert plan.prefill == ()
    assert set(plan.waiting) == {"second", "third", "talking"}
    # once it is past its first phrase, the next one's prompt goes in whole
    seqs[2] = decoding("first", 10, generated=12)
    seqs[0] = decoding("second", 20, generated=12)
    plan = plan_step(seqs, policy)
    assert plan.prefill == (("third", 25),)
    assert plan.decode == ()


def test_warming_words_go_in_last_and_a_few_tokens_a_step() -> None:
    seqs = [
        prompt("words-so-far", 1, left=40, speculative=True, warming=True),
        prompt("pause", 5, left=40, speculative=True),
    ]
    plan = plan_step(seqs, POLICY)
    assert plan.prefill == (("pause", 40), ("words-so-far", 16))
    alone = plan_step([prompt("words-so-far", 1, left=40, speculative=True, warming=True)], POLICY)
    assert alone.prefill == (("words-so-far", 16),)  # never the whole step: it cannot be stopped


def test_warming_words_wait_while_a_confirmed_first_phrase_is_written() -> None:
    seqs = [
        decoding("answering", 3, generated=2),
        prompt("words-so-far", 1, left=40, speculative=True, warming=True),
    ]
    plan = plan_step(seqs, POLICY)
    assert plan.decode == ("answering",) and plan.prefill == ()
    assert "words-so-far" in plan.waiting
