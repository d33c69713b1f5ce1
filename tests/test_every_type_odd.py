"""The odd every-type rows (issue 22: the closed form within ±3% on every type it
models): one test per mechanism fixed or refused, each the real transformers class at a
small shape. A fixed mechanism: the refined closed form against its dry run
(FakeTensorMode, :func:`introspect.measure.hf_models.measure`) within ±3%, B = 1, T = 64,
the labels loop and AdamW, as ``benchmarks/every_type.py``. A refusal: the spec names
what is not modelled, so ``introspect profile`` answers from the dry run. Before/after
ratios in ``benchmarks/results/every-type-odd.md``."""

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


def _measured_ratio(raw: dict, setup_name: str) -> float:
    from introspect import refined
    from introspect.measure import hf_models

    spec = spec_from_config(raw)
    assert not spec.unmodelled
    setup = TrainingSetup(
        batch_size=1, seq_len=64, implementation="transformers", loop="labels",
        device="cpu", optimizer="adamw", **SETUPS[setup_name],
    )  # fmt: skip
    measured, _ = hf_models.measure(
        raw, raw["model_type"], spec, setup, device="fake", census=False
    )
    return refined.estimate(spec, setup).total / measured.peak_bytes


def test_hrm_cycles_are_not_modelled():
    """HRM-Text runs each block of its H and L stacks several times per step
    (``HrmTextModel.forward``'s H/L cycles): the spec says so instead of pricing one
    saved set per block (0.53 of the dry run before)."""
    raw = dict(
        model_type="hrm_text", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, vocab_size=512,
    )  # fmt: skip
    spec = spec_from_config(raw)
    assert spec.unmodelled and "H/L-cycle" in spec.unmodelled[0]
    assert spec.n_params == sum(
        p.numel() for p in transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**raw)
        ).parameters()
    )  # fmt: skip


#: MiniMax-M3's text model: a dense first layer, then routed experts beside shared ones,
#: every MLP a clamped SwiGLU (swiglu_limit, swiglu_alpha).
MINIMAX_M3 = dict(
    model_type="minimax_m3_vl_text", hidden_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=32,
    dense_intermediate_size=256, shared_intermediate_size=128, num_local_experts=4,
    num_experts_per_tok=2, vocab_size=512, mlp_layer_types=["dense", "sparse"],
    layer_types=["full_attention", "full_attention"],
)  # fmt: skip


@pytest.mark.parametrize("setup_name", ["fp32 eager", "bf16 sdpa"])
def test_minimax_m3_clamped_swiglu_everywhere(setup_name):
    """The clamped SwiGLU's three extra tensors per row in the routed experts, the
    shared experts and the dense layer (0.83 of the dry run before)."""
    spec = spec_from_config(MINIMAX_M3)
    assert all(r.kind.feed_forward.clamped_glu for r in spec.runs)
    assert _measured_ratio(MINIMAX_M3, setup_name) == pytest.approx(1, abs=0.03)


#: MOSS-Transcribe-Diarize: a Qwen3 language model beside an audio tower (its
#: embed_positions frozen by the class) and a projector, run only on input_features.
MOSS = dict(
    model_type="moss_transcribe_diarize", audio_token_id=500,
    text_config=dict(
        model_type="qwen3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=512,
    ),
    audio_config=dict(
        model_type="moss_transcribe_diarize_audio", hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128,
    ),
)  # fmt: skip


def test_moss_reads_the_language_model_and_counts_the_audio_tower_apart():
    """The walker reads the language model (RoPE, not the audio tower's position table)
    and the tower is counted apart, its frozen position table named (1.087 before)."""
    spec = spec_from_config(MOSS)
    assert spec.position_embedding == "rope"
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**MOSS))
    language = sum(p.numel() for n, p in model.named_parameters() if "language_model" in n)
    assert spec.n_params == sum(p.numel() for p in model.parameters())
    assert spec.tower_parameters == spec.n_params - language
    assert spec.tower_frozen_parameters == model.model.audio_tower.embed_positions.weight.numel()


@pytest.mark.parametrize("setup_name", list(SETUPS))
def test_moss_text_only_step_gives_the_audio_tower_no_gradient(setup_name):
    """A text-only step never runs the tower: no gradient, and no update temporaries."""
    assert _measured_ratio(MOSS, setup_name) == pytest.approx(1, abs=0.03)


#: GOT-OCR2 (its own image-text wrapper): a SAM-style vision tower beside Qwen2.
GOT_OCR2 = dict(
    model_type="got_ocr2", image_token_index=500,
    text_config=dict(
        model_type="qwen2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, vocab_size=512,
    ),
    vision_config=dict(
        hidden_size=32, output_channels=64, num_hidden_layers=2, num_attention_heads=2,
        image_size=64, patch_size=16, global_attn_indexes=[1], window_size=2,
        mlp_dim=64,
    ),
)  # fmt: skip


def test_got_ocr2_text_only_step_gives_the_vision_tower_no_gradient():
    """The wrapper's tower gets no gradient in a text-only step (1.039 before)."""
    assert spec_from_config(GOT_OCR2).tower_parameters > 0
    assert _measured_ratio(GOT_OCR2, "fp32 eager") == pytest.approx(1, abs=0.03)


def test_mimo_v2_flash_value_head_width_is_not_modelled():
    """MiMo-V2-Flash's values are v_head_dim wide, its queries and keys head_dim: the
    spec says so, and the dry run answers (0.893 of it before)."""
    raw = dict(
        model_type="mimo_v2_flash", hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, v_head_dim=8,
        intermediate_size=128, moe_intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, vocab_size=512,
    )  # fmt: skip
    spec = spec_from_config(raw)
    assert spec.unmodelled and "v_head_dim" in spec.unmodelled[0]


#: MiniCPM3 with q_b_proj (h·qk_head_dim × q_lora_rank) the largest tensor: the
#: single-tensor AdamW loop's temporaries peak there, not at the embedding.
MINICPM3 = dict(
    model_type="minicpm3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=4, q_lora_rank=256, kv_lora_rank=32, qk_nope_head_dim=64,
    qk_rope_head_dim=32, v_head_dim=16, intermediate_size=128, vocab_size=512,
)  # fmt: skip


def test_minicpm3_latent_attention_tensors_for_the_update():
    """The update's tensors are MLA's own (q_a, q_b, kv_a, kv_b, o and the two latent
    norms), so they add up to N and the single-tensor Adam's temporaries are q_b_proj's
    (0.967 of the dry run before)."""
    from introspect.refined.shard_shapes import numel, parameter_tensors

    spec = spec_from_config(MINICPM3)
    assert sum(numel(s) for s in parameter_tensors(spec)) == spec.n_params
    assert _measured_ratio(MINICPM3, "fp32 eager") == pytest.approx(1, abs=0.03)
