"""The BF16 SDPA mechanisms the every-type benchmark found the closed form missing
(``benchmarks/results/every-type-bf16.md``), one case per mechanism: transformers' own
class at a small shape (the benchmark's shrink: d = 64, four layers, four experts) under
a dry run (FakeTensorMode, :func:`introspect.measure.hf_models.measure`), pure BF16 with
SDPA, B = 2, T = 128, the labels loop and AdamW, against the refined estimate within ±3%.
Each case was 4-7% under before its mechanism was modelled, at this shape."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config

from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

_SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4)
_ROUTED = dict(num_key_value_heads=1, moe_intermediate_size=16, num_experts_per_tok=2)

#: mechanism → (the small config, what the closed form was missing without it).
CASES = {
    # ClassFacts.fp32_normalized: ``(self.weight.to(torch.float32) * hidden_states)``,
    # and its rotary tables repeated per layer.
    "helium, RMSNorm's product in FP32": dict(
        model_type="helium", **_SMALL, intermediate_size=176, num_key_value_heads=4, head_dim=16
    ),
    # ALIASES olmo3 → olmo2: post-norm, FP32 product, FP32 rotary tables.
    "olmo3, OLMo2's blocks": dict(
        model_type="olmo3", **_SMALL, intermediate_size=168, num_key_value_heads=4,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
    ),
    # ClassFacts.router_fp32_input: the router's FP32 copy of its BF16 input.
    "glm4_moe, FP32 router input": dict(
        model_type="glm4_moe", **_SMALL, **_ROUTED, intermediate_size=168, n_routed_experts=4
    ),
    "solar_open, FP32 router input": dict(
        model_type="solar_open", **_SMALL, **_ROUTED, n_routed_experts=4, head_dim=16
    ),
    "sarvam_moe (Glm4Moe's class), FP32 router input": dict(
        model_type="sarvam_moe", **_SMALL, **_ROUTED, intermediate_size=128,
        n_routed_experts=4, head_dim=16,
    ),
    "ernie4_5_moe, FP32 router input": dict(
        model_type="ernie4_5_moe", **_SMALL, num_key_value_heads=1, intermediate_size=304,
        moe_intermediate_size=32, moe_k=2, moe_num_experts=4,
    ),
    # ClassFacts.fp32_normalized and .output_gate_proj: gate_proj's sigmoid on the output.
    "afmoe, FP32 RMSNorm product and output gate": dict(
        model_type="afmoe", **_SMALL, intermediate_size=192, moe_intermediate_size=40,
        num_key_value_heads=4, head_dim=16, num_experts=4, num_experts_per_tok=2,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
    ),
    # Beam: the above, its router's FP32 input and the FP32 final soft-capping.
    "beam, FP32 norms, output gate, FP32 router input and soft-capping": dict(
        model_type="beam", **{**_SMALL, "num_hidden_layers": 6}, intermediate_size=256,
        num_key_value_heads=1, moe_intermediate_size=32, num_experts_per_tok=2,
        num_experts=4, head_dim=16, n_group=1, topk_group=1,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        mlp_layer_types=["dense"] * 3 + ["sparse"] * 3,
    ),
    # ClassFacts.sub_norms: the extra norms inside the branches, at widths q_dim and f.
    "bitnet, in-branch sub norms": dict(
        model_type="bitnet", **_SMALL, intermediate_size=168, num_key_value_heads=1
    ),
    # ClassFacts.rotary_tables_per_layer: each layer's repeat_interleave'd FP32 tables.
    "ernie4_5, rotary tables repeated per layer": dict(
        model_type="ernie4_5", **_SMALL, num_key_value_heads=1, intermediate_size=192, head_dim=16
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_sdpa_closed_form_within_three_percent_of_the_dry_run(name):
    from introspect import refined
    from introspect.measure import hf_models

    raw = CASES[name]
    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=2, seq_len=128, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", attention="memory_efficient", precision="bf16",
    )  # fmt: skip
    measured, _ = hf_models.measure(raw, name, spec, setup, device="fake", census=False)
    estimate = refined.execution_estimate(spec, setup)
    assert estimate.total == pytest.approx(measured.peak_bytes, rel=0.03)
