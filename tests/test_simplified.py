"""The seed's equations: every number the seed quotes, and the algebra they obey.

The quoted numbers are facts from the seed (FORMULAS.md, "Numbers the seed quotes"); the
tool must reproduce each within the precision the seed writes it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from introspect import simplified
from introspect.report import summary
from introspect.setup import TrainingSetup
from introspect.sizes import shape
from introspect.spec import standard_spec
from introspect.units import GB

WORKED = dict(num_hidden_layers=33, hidden_size=4096, num_attention_heads=32, vocab_size=43520)


def worked_example(batch: int = 1, seq: int = 2048):
    spec = standard_spec(**WORKED, num_parameters=7_000_000_000)
    setup = TrainingSetup(batch_size=batch, seq_len=seq, activation_dtype="bf16")
    return spec, setup, simplified.estimate(spec, setup)


def test_worked_example_parts():
    _, _, b = worked_example()
    sm = summary(b)
    assert sm["weights_and_backward_bytes"] / GB == pytest.approx(112.0, abs=5e-4)
    assert round(sm["activations_bytes"] / GB, 1) == 26.8
    assert round(sm["total_bytes"] / GB, 1) == 138.8


def test_worked_example_batch_8_is_eightfold():
    _, _, one = worked_example(batch=1)
    _, _, eight = worked_example(batch=8)
    assert round(summary(eight)["activations_bytes"] / GB) == 214
    assert summary(eight)["activations_bytes"] == 8 * summary(one)["activations_bytes"]
    assert (
        summary(eight)["weights_and_backward_bytes"] == summary(one)["weights_and_backward_bytes"]
    )


def test_equal_tokens_share_linear_term_and_differ_in_attention():
    spec, _, _ = worked_example()
    a = simplified.estimate(spec, TrainingSetup(batch_size=8, seq_len=2048))
    b = simplified.estimate(spec, TrainingSetup(batch_size=16, seq_len=1024))
    quad = "activations/layer/attention/quadratic"
    linear_a = a.sum("activations") - a[quad]
    linear_b = b.sum("activations") - b[quad]
    assert linear_a == linear_b
    assert a[quad] == 2 * b[quad]


def test_param_check_for_worked_shape():
    n = simplified.parameters(num_hidden_layers=33, hidden_size=4096, vocab_size=43520)
    assert n / 1e9 == pytest.approx(7.0, abs=0.005)


@pytest.mark.parametrize(
    "nominal, weights, activations, backward, total",
    [("40M", 0.160, 3.429, 0.480, 4.069), ("100M", 0.400, 6.126, 1.200, 7.726)],
)
def test_size_rows_within_one_percent(nominal, weights, activations, backward, total):
    spec = shape(nominal).spec()
    sm = summary(simplified.estimate(spec, TrainingSetup(seq_len=2048)))
    assert sm["total_bytes"] / GB == pytest.approx(total, rel=0.01)
    # Each part, too, lands near the seed's (the shapes were lost, so not exactly).
    assert sm["weights_bytes"] / GB == pytest.approx(weights, rel=0.03)
    assert sm["activations_bytes"] / GB == pytest.approx(activations, rel=0.01)
    assert sm["backward_bytes"] / GB == pytest.approx(backward, rel=0.03)


def test_40m_at_512_is_below_1_gb():
    sm = summary(simplified.estimate(shape("40M").spec(), TrainingSetup(seq_len=512)))
    assert sm["total_bytes"] < 1 * GB


def test_70b_model_state_is_about_1_12_tb():
    spec = shape("70B").spec()
    assert 16 * spec.n_params / 1e12 == pytest.approx(1.12, abs=0.005)


def test_qwen_half_billion_card_figure():
    # The seed's 7.84 GB is 16 x the model card's 0.49B.
    assert simplified.weights(490_000_000) + simplified.backward_values(490_000_000) == 7.84 * GB


def test_training_memory_equals_breakdown_total_in_fp32():
    spec, _, _ = worked_example()
    setup = TrainingSetup(batch_size=2, seq_len=512)
    b = simplified.estimate(spec, setup)
    direct = simplified.training_memory(spec.n_params, 2, 512, 4096, 32, 33, 43520, 4)
    assert b.total == direct


def test_mixed_precision_reaches_the_same_16n():
    spec, _, _ = worked_example()
    fp32 = simplified.estimate(spec, TrainingSetup(weights_dtype="fp32"))
    bf16 = simplified.estimate(spec, TrainingSetup(weights_dtype="bf16"))
    state = ("weights", "grads", "optimizer")
    assert sum(fp32.sum(k) for k in state) == sum(bf16.sum(k) for k in state) == 16 * 7e9
    assert bf16["weights"] == 2 * 7_000_000_000


def test_layer_coefficient_is_sixteen():
    # 2 (LayerNorm) + 5 (attention) + 9 (feed-forward), with no T^2 term when h -> T^2 part 0
    B, T, d, h = 3, 5, 7, 1
    linear = simplified.layer_activations(B, T, d, h) - simplified.attention_quadratic_values(
        B, T, h
    )
    assert linear == 16 * B * T * d


# ---- the algebra, for any shape ------------------------------------------------------

shapes = st.fixed_dictionaries(
    {
        "L": st.integers(1, 96),
        "head": st.sampled_from([16, 32, 64, 128]),
        "h": st.integers(1, 64),
        "V": st.integers(1, 300_000),
    }
)
setups = st.tuples(st.integers(1, 64), st.integers(1, 8192), st.sampled_from([2, 4]))


def _estimate(shape_, B, T, s):
    spec = standard_spec(
        num_hidden_layers=shape_["L"],
        hidden_size=shape_["head"] * shape_["h"],
        num_attention_heads=shape_["h"],
        vocab_size=shape_["V"],
    )
    return simplified.estimate(
        spec, TrainingSetup(batch_size=B, seq_len=T, activation_bytes_override=s)
    )


@settings(max_examples=200, deadline=None)
@given(shapes, setups, st.integers(2, 8))
def test_activations_are_linear_in_batch(shape_, setup, k):
    B, T, s = setup
    one = _estimate(shape_, B, T, s)
    many = _estimate(shape_, k * B, T, s)
    assert many.sum("activations") == k * one.sum("activations")
    assert many.total - many.sum("activations") == one.total - one.sum("activations")


@settings(max_examples=200, deadline=None)
@given(shapes, setups)
def test_quadratic_term_quadruples_when_t_doubles(shape_, setup):
    B, T, s = setup
    quad = "activations/layer/attention/quadratic"
    assert _estimate(shape_, B, 2 * T, s)[quad] == 4 * _estimate(shape_, B, T, s)[quad]


@settings(max_examples=200, deadline=None)
@given(shapes, setups, st.integers(2, 8))
def test_equal_bt_shares_linear_term(shape_, setup, k):
    B, T, s = setup
    a = _estimate(shape_, k * B, T, s)  # B·T tokens times k, short sequences
    b = _estimate(shape_, B, k * T, s)  # the same tokens in longer sequences
    quad = "activations/layer/attention/quadratic"
    assert a.sum("activations") - a[quad] == b.sum("activations") - b[quad]
    # the attention term differs by the ratio of their B·T² values
    assert b[quad] * (k * B * T * T) == a[quad] * (B * (k * T) ** 2)


@settings(max_examples=200, deadline=None)
@given(shapes, setups)
def test_breakdown_sums_to_total(shape_, setup):
    b = _estimate(shape_, *setup)
    assert sum(b.terms.values()) == b.total
    assert b.sum("activations") + b["weights"] + b["grads"] + b.sum("optimizer") == b.total
