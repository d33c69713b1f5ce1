"""The per-estimate memo (introspect.refined.memo) answers as the plain function does:
inside a scope and out, after a caller changes its answer, for equal but distinct setups."""

from __future__ import annotations

from introspect.adapters import resolve

from introspect import refined
from introspect.refined import execution, memo, saved
from introspect.setup import TrainingSetup


def test_answers_inside_a_scope_are_the_plain_functions_and_copies():
    spec = resolve("Qwen/Qwen2.5-0.5B").spec
    setup = TrainingSetup(seq_len=512, activation_checkpointing=True)
    plain = execution.saved_terms(spec, setup)
    with memo.scope():
        first = execution.saved_terms(spec, setup)
        first["activations/embedding"] = -1  # a caller changing its own answer
        first.clear()
        again = execution.saved_terms(spec, setup)
        assert again == plain
        assert again is not execution.saved_terms(spec, setup)
        # an equal but distinct setup is computed again, to the same answer
        assert execution.state_terms(spec, setup.replace()) == execution.state_terms(spec, setup)
        assert saved.per_layer(spec, setup) == saved.per_layer(spec, setup, None)
    assert execution.saved_terms(spec, setup) == plain


def test_nothing_outlives_the_scope():
    spec = resolve("meta-llama/Llama-3.2-1B").spec
    setup = TrainingSetup()
    with memo.scope():
        with memo.scope():  # an inner scope keeps the outer one's memo
            execution.state_terms(spec, setup)
            inner = memo._MEMO.get()
        assert memo._MEMO.get() is inner and inner
    assert memo._MEMO.get() is None


def test_estimates_in_a_loop_match_fresh_ones():
    """A sweep in one process (what a notebook does) gives what each setup gives alone."""
    spec = resolve("Qwen/Qwen2.5-7B").spec
    setups = [TrainingSetup(seq_len=T, devices=4, zero_stage=2) for T in (128, 1024, 4096)]
    with memo.scope():
        swept = [refined.execution_estimate(spec, s) for s in setups]
    for s, b in zip(setups, swept, strict=True):
        alone = refined.execution_estimate(spec, s)
        assert (b.terms, b.notes, b.meta) == (alone.terms, alone.notes, alone.meta)
