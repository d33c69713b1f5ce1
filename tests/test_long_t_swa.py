"""Every-type rows that missed only at T = 512 (the activation side the T = 64 cells do
not show), one test per mechanism: the real transformers class at a small shape, the
refined closed form against its dry run (FakeTensorMode, :func:`introspect.measure.
hf_models.measure`). B = 1, the labels loop and AdamW, as ``benchmarks/every_type.py``,
at a longer T. Granite-SWA's logsumexp backward: ``tests/test_every_type_gpt.py``."""

from __future__ import annotations

import pytest
from introspect.adapters.hf_config import spec_from_config

from introspect.setup import TrainingSetup

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

SETUPS = {
    "fp32 eager": dict(precision="fp32", attention="eager", activation_dtype="fp32"),
    "amp ckpt": dict(precision="amp", attention="eager", activation_checkpointing=True),
    "bf16 sdpa": dict(precision="bf16", attention="memory_efficient"),
}


def _ratio(raw: dict, setup_name: str, seq_len: int) -> float:
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=1, seq_len=seq_len, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(
        raw, raw["model_type"], spec, setup, device="fake", census=False
    )
    return refined.estimate(spec, setup).total / measured.peak_bytes


COHERE2_MOE = dict(
    model_type="cohere2_moe", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=4, head_dim=16, intermediate_size=176, num_experts=4,
    num_experts_per_tok=2, vocab_size=512, sliding_window=128,
)  # fmt: skip


@pytest.mark.parametrize("setup_name", ["fp32 eager", "bf16 sdpa"])
def test_cohere2_moe_layernorm_written_out_in_fp32(setup_name):
    """Cohere2MoeLayerNorm (models/cohere2_moe/modeling_cohere2_moe.py l. 68-82) is
    Cohere2's hand-written FP32 LayerNorm: two ``x - mean``, the rstd and the normalized
    value kept in FP32 (``ClassFacts.layernorm_by_hand``). Before, at the every-type shape
    and T = 512: fp32 0.979, amp 0.984, bf16 0.907 (the norms' FP32 copies missing)."""
    from introspect.refined.transformers_classes import facts

    assert facts(spec_from_config(COHERE2_MOE)).layernorm_by_hand
    assert _ratio(COHERE2_MOE, setup_name, 256) == pytest.approx(1, abs=0.01)


EXAONE_MOE = dict(
    model_type="exaone_moe", hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=4, intermediate_size=256, moe_intermediate_size=16, num_experts=4,
    num_experts_per_tok=2, vocab_size=512, sliding_window=128,
)  # fmt: skip


@pytest.mark.parametrize("setup_name", ["amp ckpt", "bf16 sdpa"])
def test_exaone_moe_router_scores_an_fp32_copy(setup_name):
    """ExaoneMoeTopkRouter's ``F.linear(hidden_states.type(torch.float32), ...)``
    (models/exaone_moe/modeling_exaone_moe.py l. 241-243) keeps an FP32 copy of its
    input per sparse layer (``ClassFacts.router_fp32_input``, as GLM-4-MoE's). Before,
    at the every-type shape and T = 512: bf16 0.967."""
    from introspect.refined.transformers_classes import facts

    assert facts(spec_from_config(EXAONE_MOE)).router_fp32_input
    assert _ratio(EXAONE_MOE, setup_name, 256) == pytest.approx(1, abs=0.01)


#: Gemma 4 unified's text model (the every-type row's shrunk widths: five sliding layers
#: at head_dim 16, a full one at global_head_dim 32, a window longer than T), bare and in
#: its image-text wrapper (no vision or audio tower configured).
GEMMA4_TEXT = dict(
    vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
    sliding_window=1024, max_position_embeddings=4096,
    layer_types=["sliding_attention"] * 5 + ["full_attention"],
    use_bidirectional_attention="vision",
)  # fmt: skip
GEMMA4_UNIFIED = dict(
    model_type="gemma4_unified",
    text_config=dict(GEMMA4_TEXT, model_type="gemma4_unified_text"),
    vision_config=None, audio_config=None,
)  # fmt: skip


def test_gemma4_unified_wrapper_masks_every_layer_under_sdpa():
    """The image-text model builds its masks with ``block_sequence_ids`` (all -1 for text),
    so ``sdpa_mask`` may not skip to ``is_causal``: every layer's SDPA call gets its
    type's mask, made additive in BF16 and kept, and K/V repeated to every head
    (``ModelSpec.sdpa_mask_every_layer``, ``adapters.multimodal.explicit_mask_facts``).
    The text class alone keeps the shortcut. Before, at the every-type shape and T = 512:
    gemma4_unified bf16 0.871, gemma4_unified_text 1.000."""
    wrapper = spec_from_config(dict(GEMMA4_UNIFIED))
    text = spec_from_config(dict(GEMMA4_TEXT, model_type="gemma4_unified_text"))
    assert wrapper.sdpa_mask_every_layer and not text.sdpa_mask_every_layer
    assert _ratio(dict(GEMMA4_UNIFIED), "bf16 sdpa", 256) == pytest.approx(1, abs=0.01)
