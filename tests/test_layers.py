"""Heterogeneous stacks in ModelSpec: runs of layer kinds, their invariants, and the
structural count per kind."""

from __future__ import annotations

import pytest

from introspect.layers import Attention, FeedForward, LayerKind, LayerRun, runs_from_list
from introspect.params import (
    COMPONENTS,
    active_parameter_count,
    parameter_count,
    parameters_by_component,
)
from introspect.spec import ModelSpec

BASE = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, vocab_size=100)


def _att(**kw) -> Attention:
    return Attention(**{"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, **kw})


DENSE = LayerKind(attention=_att(), feed_forward=FeedForward(intermediate_size=96))
MOE = LayerKind(
    attention=_att(kind="sliding", window=32),
    feed_forward=FeedForward(intermediate_size=32, num_experts=8, top_k=2),
)


def test_homogeneous_spec_is_one_run_of_its_flat_fields():
    spec = ModelSpec(**BASE)
    assert len(spec.runs) == 1 and spec.runs[0].count == 4
    assert not spec.is_heterogeneous
    assert tuple(parameters_by_component(spec)) == COMPONENTS
    # A spec that lists the same block explicitly counts the same.
    explicit = spec.replace(layers=(LayerRun(spec.default_kind, 4),))
    assert parameter_count(explicit) == parameter_count(spec)


def test_each_kind_counted_once_times_its_layers():
    spec = ModelSpec(**BASE, layers=runs_from_list([DENSE, MOE, DENSE, MOE]))
    assert len(spec.runs) == 4 and len(spec.kinds) == 2
    dense = ModelSpec(**BASE, layers=(LayerRun(DENSE, 4),))
    moe = ModelSpec(**BASE, layers=(LayerRun(MOE, 4),))
    outside = (
        parameter_count(ModelSpec(**{**BASE, "num_hidden_layers": 1}))
        - parameter_count(ModelSpec(**{**BASE, "num_hidden_layers": 2}))
        + parameter_count(ModelSpec(**{**BASE, "num_hidden_layers": 1}))
    )
    # embeddings + final norm + lm_head, the same for all three
    per_dense = (parameter_count(dense) - outside) // 4
    per_moe = (parameter_count(moe) - outside) // 4
    assert parameter_count(spec) == outside + 2 * per_dense + 2 * per_moe
    by = parameters_by_component(spec)
    assert sum(by.values()) == parameter_count(spec)
    assert by["experts"] == 2 * 8 * 3 * 64 * 32 and by["router"] == 2 * 64 * 8


def test_active_parameters_count_top_k_of_the_routed_experts():
    spec = ModelSpec(**BASE, layers=(LayerRun(DENSE, 1), LayerRun(MOE, 3)))
    expert = 3 * 64 * 32
    assert parameter_count(spec) - active_parameter_count(spec) == 3 * (8 - 2) * expert
    assert active_parameter_count(ModelSpec(**BASE)) == parameter_count(ModelSpec(**BASE))


def test_sinks_mla_and_shared_experts_add_their_tensors():
    sinks = _att(sinks=True, qkv_bias=True, o_bias=True)
    plain = _att(qkv_bias=True, o_bias=True)
    ff = FeedForward(intermediate_size=32)

    def count(att, feed=ff):
        kind = LayerKind(attention=att, feed_forward=feed)
        return parameter_count(ModelSpec(**BASE, layers=(LayerRun(kind, 4),)))

    assert count(sinks) - count(plain) == 4 * 4
    mla = _att(
        kind="mla",
        q_lora_rank=24,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
    )
    d, h = 64, 4
    per_layer = (d * 24 + 24 + 24 * h * 24) + (d * (16 + 8) + 16 + 16 * h * 32) + h * 16 * d
    assert count(mla) - count(plain) == 4 * (
        per_layer - (d * 64 + 2 * d * 32 + 64 * d + 64 + 64 + d)
    )
    moe = FeedForward(
        intermediate_size=32,
        num_experts=4,
        top_k=1,
        shared_intermediate_size=48,
        shared_expert_gate=True,
    )
    by = parameters_by_component(
        ModelSpec(**BASE, layers=(LayerRun(LayerKind(attention=plain, feed_forward=moe), 4),))
    )
    assert by["mlp"] == 4 * (3 * d * 48 + d)


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: ModelSpec(**BASE, layers=(LayerRun(DENSE, 3),)), "num_hidden_layers"),
        (
            lambda: ModelSpec(**BASE, max_position_embeddings=16, layers=(LayerRun(MOE, 4),)),
            "sliding_window",
        ),
        (
            lambda: ModelSpec(**BASE, max_position_embeddings=16, sliding_window=32),
            "sliding_window",
        ),
        (lambda: FeedForward(intermediate_size=8, num_experts=4, top_k=5), "num_experts_per_tok"),
        (lambda: _att(kind="chunked"), "attention_chunk_size"),
        (lambda: _att(kind="mla", kv_lora_rank=0), "kv_lora_rank"),
    ],
    ids=[
        "layer-list-length",
        "window-over-context",
        "flat-window-over-context",
        "top-k-over-experts",
        "chunk-missing",
        "mla-rank-missing",
    ],
)
def test_inconsistent_stacks_name_the_key(make, key):
    with pytest.raises(ValueError, match=key):
        make()
