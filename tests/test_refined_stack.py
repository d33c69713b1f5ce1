"""Estimators over heterogeneous stacks: each layer kind's terms once, times its count;
every term summing to its total; the features the seed's block lacks moving their own
terms only."""

from __future__ import annotations

import pytest
from introspect.adapters import bundled
from specs import STACK_ATTENTION, STACK_DENSE
from specs import stack as _spec

from introspect import refined, simplified
from introspect.layers import Attention, FeedForward, LayerKind
from introspect.refined import architecture, saved
from introspect.setup import TrainingSetup

ATT, DENSE = STACK_ATTENTION, STACK_DENSE
MOE = LayerKind(
    attention=Attention(**ATT, kind="sliding", window=16),
    feed_forward=FeedForward(
        intermediate_size=32,
        num_experts=8,
        top_k=2,
        shared_intermediate_size=48,
        shared_expert_gate=True,
    ),
)
#: The reference model's saved set, which models every layer kind (transformers' classes
#: are modelled for one dense full-attention kind: introspect/refined/hf_saved.py).
SETUP = TrainingSetup(
    seq_len=64, batch_size=2, activation_dtype="bf16", implementation="reference", loop="logits"
)


def test_a_mixed_stack_is_the_count_weighted_sum_of_its_kinds():
    mixed = _spec((DENSE, 1), (MOE, 3))
    dense, moe = _spec((DENSE, 4)), _spec((MOE, 4))
    for layer_terms in (
        lambda s: architecture.layer_terms(s, SETUP.batch_size, SETUP.seq_len),
        lambda s: saved.stack(s, SETUP),
    ):
        got, d, m = layer_terms(mixed), layer_terms(dense), layer_terms(moe)
        for name in set(got) | set(d) | set(m):
            assert 4 * got.get(name, 0) == d.get(name, 0) + 3 * m.get(name, 0), name


def test_every_estimate_sums_to_its_total_for_every_bundled_model():
    for model in bundled.models():
        spec = model.spec()
        est = refined.estimate(spec, SETUP)
        for b in (simplified.estimate(spec, SETUP), est.architecture, est.execution):
            assert sum(v for _, v in b.items()) == b.total, (model.hub_id, b.label)
            assert all(v >= 0 for _, v in b.items()), model.hub_id


def test_window_shrinks_the_architecture_band_but_not_eager_probabilities():
    full = LayerKind(attention=Attention(**ATT), feed_forward=MOE.feed_forward)
    a, b = _spec((full, 4)), _spec((MOE, 4))
    B, T = SETUP.batch_size, SETUP.seq_len
    assert (
        architecture.layer_terms(b, B, T)["attention/quadratic/scores"] * 4
        == (architecture.layer_terms(a, B, T)["attention/quadratic/scores"])
    )
    eager = TrainingSetup(seq_len=64, batch_size=2, attention="eager")
    assert (
        saved.stack(a, eager)["attention/quadratic/probs"]
        == (saved.stack(b, eager)["attention/quadratic/probs"])
    )
    sdpa = TrainingSetup(seq_len=64, batch_size=2, attention="memory_efficient")
    assert saved.stack(b, sdpa)["attention/mask"] == 4 * B * T * T * 4
    assert "attention/mask" not in saved.stack(a, sdpa)


def test_moe_terms_scale_with_top_k_not_with_the_experts():
    B, T = SETUP.batch_size, SETUP.seq_len
    k2 = saved.per_layer(_spec((MOE, 4)), SETUP)
    more = LayerKind(
        attention=MOE.attention,
        feed_forward=FeedForward(
            intermediate_size=32,
            num_experts=64,
            top_k=2,
            shared_intermediate_size=48,
            shared_expert_gate=True,
        ),
    )
    k2_e64 = saved.per_layer(_spec((more, 4)), SETUP)
    changed = {n for n in k2 if k2[n] != k2_e64[n]}
    assert changed == {"feed_forward/router", "feed_forward/routing_index"}
    assert k2["feed_forward/up"] == 2 * B * T * 32 * 2


@pytest.mark.parametrize(
    "hub_id, flags",
    [
        ("openai/gpt-oss-20b", {"moe", "sliding_window", "sinks"}),
        ("Qwen/Qwen3-30B-A3B", {"moe"}),
        ("deepseek-ai/DeepSeek-V3", {"moe", "mla", "unbuilt"}),
        ("google/gemma-3-4b-pt", {"sliding_window", "tower"}),
    ],
)
def test_divergence_flags_name_the_features(hub_id, flags):
    from introspect import divergence

    spec = bundled.lookup(hub_id).spec()
    assert flags <= {f.name for f in divergence.flags(spec, SETUP)}


def test_a_frozen_tower_keeps_its_weights_but_no_gradients_or_optimizer_state():
    spec = bundled.lookup("google/gemma-3-4b-pt").spec()
    tower = spec.tower_parameters
    assert tower > 0
    trained = refined.estimate(spec, SETUP)
    frozen = refined.estimate(spec, SETUP.replace(freeze_tower=True))
    a, b = trained.architecture, frozen.architecture
    assert a["weights"] == b["weights"] == 4 * spec.n_params
    for term in ("grads", "optimizer/adam_m", "optimizer/adam_v"):
        assert a[term] - b[term] == 4 * tower
    step = {n: v for n, v in frozen.execution.items()}
    assert frozen.execution.total < trained.execution.total
    assert step["weights"] == trained.execution["weights"]
    for term in ("optimizer/adam_m", "optimizer/adam_v"):  # at the execution peak too
        assert trained.execution[term] - step[term] == 4 * tower
    # A model without a tower is unchanged by the flag.
    dense = bundled.lookup("Qwen/Qwen2.5-0.5B").spec()
    assert (
        refined.estimate(dense, SETUP).execution.total
        == refined.estimate(dense, SETUP.replace(freeze_tower=True)).execution.total
    )
