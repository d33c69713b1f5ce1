"""The execution layer's work is bounded by the input's size, not its values: beyond a
few hundred layers only the candidate layers are built, and the estimate is the same, to
the byte and the term, as building every layer's moments."""

from __future__ import annotations

import pytest

from introspect import refined
from introspect.breakdown import Breakdown
from introspect.errors import IntrospectError
from introspect.refined import execution
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4


def old_backward_moments(spec: ModelSpec, setup: TrainingSetup) -> list[dict[str, int]]:
    """Every layer's moments, top down (the per-layer loop the candidates replace)."""
    return execution.backward_moments(spec, setup, layers=range(spec.num_hidden_layers - 1, -1, -1))


def old_execution_estimate(spec: ModelSpec, setup: TrainingSetup) -> Breakdown:
    """``refined.execution_estimate`` over every layer's moments."""
    every = range(spec.num_hidden_layers - 1, -1, -1)
    return refined.execution_estimate(spec, setup, layers=every)


STD = ModelSpec(hidden_size=64, num_hidden_layers=300, num_attention_heads=4, vocab_size=500)
LLAMA = STD.replace(
    num_key_value_heads=2,
    norm="rmsnorm",
    norm_bias=False,
    ffn="gated",
    hidden_act="silu",
    intermediate_size=176,
)
MOE = LLAMA.replace(num_local_experts=4, num_experts_per_tok=2, qk_norm="head", head_dim=24)

#: Setups chosen so the backward phase's largest moment sits at either end, the line is
#: exactly flat (checkpointed T = 772 on STD: one layer's kept input equals one layer's
#: FP32 gradients), sharded gradients make the totals periodic, and MLX's rounding.
SETUPS = {
    "default": TrainingSetup(seq_len=64),
    "short": TrainingSetup(seq_len=4),
    "sdpa-bf16": TrainingSetup(seq_len=128, attention="memory_efficient", precision="bf16"),
    "mixed-chunked": TrainingSetup(seq_len=32, precision="mixed", cross_entropy="fused"),
    "checkpointed": TrainingSetup(seq_len=64, activation_checkpointing=True),
    "flat": TrainingSetup(seq_len=772, activation_checkpointing=True),
    "flat-zero2-d2": TrainingSetup(
        seq_len=386, activation_checkpointing=True, zero_stage=2, devices=2
    ),
    "zero2-d3": TrainingSetup(seq_len=257, activation_checkpointing=True, zero_stage=2, devices=3),
    "zero3-d8": TrainingSetup(seq_len=16, zero_stage=3, devices=8, framework="torch"),
    "fsdp-d4": TrainingSetup(seq_len=64, sharding="fsdp", devices=4),
    "fsdp-noreshard-mixed-d3": TrainingSetup(
        seq_len=32, sharding="fsdp", devices=3, reshard_after_forward=False, precision="mixed"
    ),
    "ddp-d2": TrainingSetup(seq_len=64, sharding="ddp", devices=2),
    "zero1-d4": TrainingSetup(seq_len=64, sharding="zero", zero_stage=1, devices=4),
    "frozen": TrainingSetup(seq_len=16, optimizer="none"),
    # Capped or bucketed gradients: only the saved bytes slope (the top layer).
    "optimizer-in-backward": TrainingSetup(seq_len=4, optimizer_in_backward=True),
    "offload-parameters": TrainingSetup(seq_len=4, offload="parameters"),
    "ddp-bucket-view-d2": TrainingSetup(
        seq_len=4, sharding="ddp", devices=2, gradient_as_bucket_view=True
    ),
    "mlx": TrainingSetup(seq_len=16, framework="mlx"),
    "mlx-compiled-ckpt": TrainingSetup(
        seq_len=62, framework="mlx_compiled", activation_checkpointing=True
    ),
}


@pytest.mark.parametrize("setup_name", list(SETUPS))
@pytest.mark.parametrize(
    "spec", [STD, LLAMA.replace(num_hidden_layers=700), MOE], ids=["std", "llama", "moe"]
)
def test_candidate_layers_give_the_per_layer_loops_estimate(spec, setup_name):
    setup = SETUPS[setup_name]
    assert spec.num_hidden_layers > execution.ALL_LAYERS_UP_TO
    new = refined.execution_estimate(spec, setup)
    old = old_execution_estimate(spec, setup)
    assert new.to_json() == old.to_json()
    assert new.terms == old.terms
    # The backward phase's own largest moment (the first of equal ones), peak or not.
    largest_new = max(execution.backward_moments(spec, setup), key=lambda m: sum(m.values()))
    largest_old = max(old_backward_moments(spec, setup), key=lambda m: sum(m.values()))
    assert largest_new == largest_old
    assert len(execution.candidate_layers(spec, setup)) < spec.num_hidden_layers


def test_exactly_flat_totals_are_periodic_in_the_devices():
    """With every layer's moment of one size (the flat setup), the first and the last
    ``D`` layers are the candidates; the peak is the first of the equal moments."""
    setup = SETUPS["flat"]
    assert execution.candidate_layers(STD, setup) == [STD.num_hidden_layers - 1, 0]
    # The feed-forward moments of every layer (after lm_head's, before the embedding's).
    layers = old_backward_moments(STD, setup)[1 : 1 + 2 * STD.num_hidden_layers]
    totals = {sum(m.values()) for m in layers[::2]}
    assert len(totals) == 1  # really flat: the case the periodic argument covers
    sharded = execution.candidate_layers(STD, SETUPS["flat-zero2-d2"])
    assert sharded == [299, 298, 1, 0]


def test_layers_beyond_any_machine_are_still_closed_form():
    """10^30 layers: the same few candidate layers, and the peak grows with L."""
    huge = LLAMA.replace(num_hidden_layers=10**30)
    setup = SETUPS["default"]
    assert len(execution.candidate_layers(huge, setup)) <= 2
    est = refined.estimate(huge, setup)
    assert est.total > refined.estimate(LLAMA, setup).total * 10**26
    mlx = refined.estimate(huge, SETUPS["mlx"])
    assert mlx.total > 0


def _bundled_specs() -> list[ModelSpec]:
    from introspect.adapters import bundled, resolve

    return [resolve(m.hub_id).spec for m in bundled.models()]


#: Setups where the candidates are used at any L (:func:`execution.builds_candidates_only`).
SMALL_L_SETUPS = [
    TrainingSetup(),
    TrainingSetup(seq_len=4096, precision="mixed", activation_checkpointing=True),
    TrainingSetup(seq_len=512, batch_size=3, precision="amp", attention="memory_efficient"),
    TrainingSetup(precision="bf16", cross_entropy="fused", loop="logits"),
    TrainingSetup(implementation="reference", device="cpu", optimizer_impl="single_tensor"),
    TrainingSetup(devices=4, zero_stage=2, activation_checkpointing=True),
    TrainingSetup(devices=8, sharding="zero", zero_stage=3, precision="mixed"),
    TrainingSetup(devices=3, zero_stage=1, optimizer="adam8bit"),
    TrainingSetup(devices=8, sharding="ddp", optimizer_impl="foreach"),
    TrainingSetup(devices=8, sharding="fsdp", precision="mixed"),
    TrainingSetup(devices=3, zero_stage=3, reshard_after_forward=False, loop="logits"),
    TrainingSetup(finetune="lora", lora_rank=16, precision="bf16"),
    TrainingSetup(finetune="qlora", lora_rank=8, lora_dropout=0.1, train_embeddings=True),
    TrainingSetup(offload="optimizer", freeze_tower=True),
    TrainingSetup(optimizer="none"),
    # Capped gradients (the ends and the cap's kink) and DDP's bucket view (no slope).
    TrainingSetup(optimizer_in_backward=True),
    TrainingSetup(seq_len=64, optimizer_in_backward=True, precision="bf16"),
    TrainingSetup(offload="parameters"),
    TrainingSetup(seq_len=64, offload="parameters", activation_checkpointing=True),
    TrainingSetup(devices=2, sharding="ddp", gradient_as_bucket_view=True),
    TrainingSetup(seq_len=64, devices=4, sharding="ddp", gradient_as_bucket_view=True),
]


@pytest.mark.parametrize("setup", SMALL_L_SETUPS, ids=range(len(SMALL_L_SETUPS)))
def test_candidates_at_small_l_give_every_layers_estimate(setup):
    """Below ALL_LAYERS_UP_TO, where the candidates are used, every bundled model's
    execution breakdown — terms, causes, peak phase and every phase's total — is the one
    building every layer gives."""
    narrowed = 0
    for spec in _bundled_specs():
        if spec.is_heterogeneous:  # each layer below a moment is of its own kind
            assert not execution.builds_candidates_only(spec, setup)
            continue
        assert execution.builds_candidates_only(spec, setup)
        assert spec.num_hidden_layers <= execution.ALL_LAYERS_UP_TO
        try:
            new = refined.execution_estimate(spec, setup)
        except IntrospectError:  # refused for this model (peft's MoE experts and dropout)
            with pytest.raises(IntrospectError):
                old_execution_estimate(spec, setup)
            continue
        old = old_execution_estimate(spec, setup)
        assert (new.terms, new.notes, new.meta) == (old.terms, old.notes, old.meta), spec.source
        narrowed += len(execution.candidate_layers(spec, setup)) < spec.num_hidden_layers
    assert narrowed > 0


@pytest.mark.parametrize(
    "changes",
    [
        dict(tensor_parallel=2),
        dict(pipeline_parallel=2),
        dict(framework="mlx"),
    ],
)
def test_setups_the_line_does_not_hold_for_build_every_layer(changes):
    """Where the candidates are not proven (per-rank rescaling after they are chosen; a
    heterogeneous stack, above) every layer is still built below
    ALL_LAYERS_UP_TO."""
    setup = TrainingSetup(**changes)
    spec = _bundled_specs()[1]
    assert not execution.builds_candidates_only(spec, setup)
    assert execution.candidate_layers(spec, setup) == list(
        range(spec.num_hidden_layers - 1, -1, -1)
    )
