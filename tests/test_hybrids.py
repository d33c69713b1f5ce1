"""Hybrid stacks as closed-form layer kinds (issue 22, item 2): OLMo-Hybrid's Gated
DeltaNet (``OlmoHybridGatedDeltaNet``: Qwen3-Next's torch kernel behind six separate
projections) against a census of the real module; Qwen3.5's language models (four
projections, the mixer's census in tests/test_deltanet.py) and their wrapper; exact
parameter counts against the meta-device build, and the closed form of the stack against
the dry run of the real class (``introspect measure --device fake``) for FP32 eager,
autocast with checkpointing and BF16 SDPA, within ±3%. Bad sizes are one line naming the
file and key."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_steps import mixer_saved_bytes  # noqa: E402
from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from mixer_stacks import SETUPS, count_is_the_meta_build, measured, one_line_error  # noqa: E402

from introspect.cli import main  # noqa: E402
from introspect.layers import Attention  # noqa: E402
from introspect.refined import deltanet  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: OLMo-Hybrid at a small shape: three Gated DeltaNet layers and one attention layer,
#: 2 key heads and 4 value heads of 16 (pad and eos inside the small vocabulary).
OLMO_HYBRID = {
    "model_type": "olmo_hybrid",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "intermediate_size": 96,
    "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "pad_token_id": 0,
    "eos_token_id": 1,
}


def _olmo_mixer(nk: int, nv: int, dk: int, dv: int, neg: bool):
    from transformers.models.olmo_hybrid.modeling_olmo_hybrid import OlmoHybridGatedDeltaNet

    cfg = transformers.OlmoHybridConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        linear_num_key_heads=nk,
        linear_num_value_heads=nv,
        linear_key_head_dim=dk,
        linear_value_head_dim=dv,
        linear_allow_neg_eigval=neg,
        layer_types=["linear_attention", "full_attention"],
    )
    torch.manual_seed(0)
    att = Attention(
        kind="linear",
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        linear_num_key_heads=nk,
        linear_num_value_heads=nv,
        linear_key_head_dim=dk,
        linear_value_head_dim=dv,
        linear_conv_kernel_dim=cfg.linear_conv_kernel_dim,
        linear_projections="separate",
    )
    return OlmoHybridGatedDeltaNet(cfg, 0), att


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(1, 5), (2, 64), (2, 100), (1, 128)])
@pytest.mark.parametrize("heads", [(2, 4, 16, 16), (2, 2, 16, 8)])
@pytest.mark.parametrize("neg", [True, False])
def test_olmo_hybrid_deltanet_saved_set_equals_the_census(precision, B, T, heads, neg):
    """Separate q, k, v, a, b and g projections: the gate is g_proj's own output (never a
    view of a fused projection), and under autocast six casts of the input, not two;
    ``beta * 2.0`` (``linear_allow_neg_eigval``) keeps nothing."""
    layer, att = _olmo_mixer(*heads, neg)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = sum(deltanet.saved(att, setup, HIDDEN).values())
    assert closed == mixer_saved_bytes(layer, "linear_attn", precision, B, T, HIDDEN)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"attention_bias": True, "tie_word_embeddings": True},
        {"layer_types": None, "linear_num_key_heads": None, "linear_num_value_heads": None,
         "linear_key_head_dim": None, "linear_value_head_dim": None},
    ],
)  # fmt: skip
def test_olmo_hybrid_parametercount_is_the_meta_build(extra):
    config = {k: v for k, v in {**OLMO_HYBRID, **extra}.items() if v is not None}
    spec = count_is_the_meta_build(config)
    kinds = [r.kind.attention.kind for r in spec.runs]
    given = "layer_types" in config  # else three linear layers, then attention
    assert kinds == (["linear", "full", "linear"] if given else ["linear", "full"])


def test_olmo_hybrid_default_config_is_modelled():
    spec = spec_from_config(transformers.AutoConfig.for_model("olmo_hybrid").to_dict())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model("olmo_hybrid")
        )
    assert not spec.unmodelled
    assert spec.n_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
def test_olmo_hybrid_closed_form_is_within_3_percent_of_the_dry_run(tmp_path, capsys, setup, B, T):
    row = measured(tmp_path, capsys, OLMO_HYBRID, SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


#: Qwen3.5's language model at a small shape (``Qwen3_5ForCausalLM``): OLMO_HYBRID's
#: layout — three Gated DeltaNet layers behind in_proj_qkv, in_proj_z, in_proj_b and
#: in_proj_a, one gated attention layer — with a SwiGLU MLP on every layer; and its MoE
#: sibling (every layer Qwen3-Next's experts with a gated shared expert, no dense MLP).
QWEN3_5_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "intermediate_size": 96,
    "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "pad_token_id": 0,
    "eos_token_id": 1,
}
QWEN3_5_MOE_TEXT = {
    **{k: v for k, v in QWEN3_5_TEXT.items() if k != "intermediate_size"},
    "model_type": "qwen3_5_moe_text",
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
}
#: The image-text wrapper (``Qwen3_5ForConditionalGeneration``) around QWEN3_5_TEXT, with a
#: one-block vision tower: the language model is the reader's, the tower counted apart.
QWEN3_5 = {
    "model_type": "qwen3_5",
    "tie_word_embeddings": False,
    "text_config": QWEN3_5_TEXT,
    "vision_config": {
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": HIDDEN,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "num_position_embeddings": 64,
    },
}


@pytest.mark.parametrize(
    "config",
    [
        QWEN3_5_TEXT,
        {**QWEN3_5_TEXT, "attention_bias": True, "tie_word_embeddings": True},
        {k: v for k, v in QWEN3_5_TEXT.items() if not k.startswith(("layer_types", "linear_"))},
        QWEN3_5_MOE_TEXT,
    ],
)
def test_qwen3_5_text_parametercount_is_the_meta_build(config):
    """Every linear layer is the Gated DeltaNet kind with Qwen3.5's four projections
    (without ``layer_types``: three linear layers, then attention, as the class derives)."""
    spec = count_is_the_meta_build(config)
    linear = [r.kind.attention for r in spec.runs if r.kind.attention.kind == "linear"]
    assert linear and all(a.linear_projections == "qkv_z_b_a" for a in linear)
    assert all(r.kind.feed_forward.is_moe for r in spec.runs) == ("num_experts" in config)


@pytest.mark.parametrize("model_type", ["qwen3_5", "qwen3_5_moe"])
def test_qwen3_5_wrapper_reads_its_language_model_with_the_tower_apart(model_type):
    """The image-text wrapper: the walker cannot read the DeltaNet blocks, the text
    reader does; N is the wrapper's build, the tower every parameter outside
    ``model.language_model`` and ``lm_head``."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    text = QWEN3_5_TEXT if model_type == "qwen3_5" else QWEN3_5_MOE_TEXT
    config = {**QWEN3_5, "model_type": model_type, "text_config": text}
    spec = spec_from_config(json.loads(json.dumps(config)))
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        built = AutoModelForImageTextToText.from_config(AutoConfig.for_model(model_type, **keys))
    assert not spec.unmodelled
    assert spec.n_params == sum(p.numel() for p in built.parameters())
    language = sum(p.numel() for p in built.model.language_model.parameters())
    assert spec.tower_parameters == spec.n_params - language - built.lm_head.weight.numel()
    assert spec.n_params - spec.tower_parameters == count_is_the_meta_build(text).n_params


#: The saved set's three precisions, autocast without checkpointing (which keeps only
#: each layer's input in the forward).
_SAVED = {
    "fp32": SETUPS["fp32 eager"],
    "amp": ["--precision", "amp"],
    "bf16": SETUPS["bf16 sdpa"],
}


@pytest.mark.parametrize("precision", list(_SAVED))
@pytest.mark.parametrize("config", [QWEN3_5_TEXT, QWEN3_5_MOE_TEXT], ids=["dense", "moe"])
def test_qwen3_5_dry_run_keeps_the_closed_form_saved_set_in_each_deltanet(
    tmp_path, capsys, precision, config
):
    """In the whole stack's dry run, the storages the real ``linear_attn`` modules produce
    and autograd keeps (the census by producing module) are, to the byte, the closed
    form's saved set times the linear layers."""
    B, T = 2, 64
    row = measured(tmp_path, capsys, config, _SAVED[precision], B, T)
    held = sum(
        sum(terms.values())
        for module, terms in row["census_by_module"].items()
        if module.split(".")[3:4] == ["linear_attn"]
    )
    spec = spec_from_config(dict(config))
    linear = [r for r in spec.runs if r.kind.attention.kind == "linear"]
    one = deltanet.saved(
        linear[0].kind.attention,
        TrainingSetup(batch_size=B, seq_len=T, precision=precision),
        HIDDEN,
    )
    assert held == sum(r.count for r in linear) * sum(one.values())


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
@pytest.mark.parametrize("config", [QWEN3_5_TEXT, QWEN3_5_MOE_TEXT], ids=["dense", "moe"])
def test_qwen3_5_closed_form_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, setup, B, T, config
):
    row = measured(tmp_path, capsys, config, SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


def test_inconsistent_qwen3_5_heads_are_one_line_naming_file_and_key(tmp_path, capsys):
    path = tmp_path / "qwen3_5_text.json"
    path.write_text(json.dumps({**QWEN3_5_TEXT, "linear_num_value_heads": 3}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and "linear_num_value_heads" in line


#: Nemotron-H with routed experts (test_unmodelled's stack without the latent
#: projection): Mamba-2, attention, Mamba-2, experts; and one the experts dominate.
NEMOTRON_MOE = {
    "model_type": "nemotron_h",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "intermediate_size": 128,
    "hybrid_override_pattern": "M*ME",
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 32,
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "ssm_state_size": 8,
    "n_groups": 1,
    "chunk_size": 16,
}
EXPERTS_HEAVY = {"hybrid_override_pattern": "E*EE", "n_routed_experts": 8, "num_experts_per_tok": 3}


@pytest.mark.parametrize(
    "config",
    [NEMOTRON_MOE, {**NEMOTRON_MOE, **EXPERTS_HEAVY, "n_group": 2, "topk_group": 1}, None],
)
def test_nemotron_h_with_routed_experts_is_modelled_with_the_exact_count(config):
    """The default Nemotron-H (an E block) included: its experts are the MoE kind, its
    Mamba-2 mixers the reader's; nothing is left to the build."""
    if config is None:
        config = transformers.AutoConfig.for_model("nemotron_h").to_dict()
        config["model_type"] = "nemotron_h"
    spec = count_is_the_meta_build(config)
    moe = [r.kind.feed_forward for r in spec.runs if r.kind.feed_forward.is_moe]
    assert moe and all(ff.ffn == "plain" and ff.router_groups for ff in moe)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
@pytest.mark.parametrize("groups", [(1, 1), (2, 1), (4, 2)])
def test_nemotron_h_moe_block_saved_set_equals_the_census(precision, B, T, groups):
    """``NemotronHMoE`` as the model runs it (grouped-mm experts) against the MoE kind's
    saved set. Under autocast the census also holds the BF16 copies of the router's and
    the shared expert's weights and the shared up_proj's cast of the input, which the
    closed form counts elsewhere (``autocast_weights``; the block norm's output)."""
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMoE

    from introspect.refined.saved_feed_forward import feed_forward

    config = {**NEMOTRON_MOE, **EXPERTS_HEAVY, "n_group": groups[0], "topk_group": groups[1]}
    spec = spec_from_config(dict(config))
    kind = next(r.kind for r in spec.runs if r.kind.feed_forward.is_moe)
    keys = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model("nemotron_h", **keys)
    cfg._experts_implementation = "grouped_mm"  # what from_config picks on this machine
    torch.manual_seed(0)
    block = NemotronHMoE(cfg, 0)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = feed_forward(spec, setup, kind)
    closed.pop("feed_forward/down")  # the block's output: the next layer's input
    expected = sum(closed.values())
    if precision == "amp":
        ff, d = kind.feed_forward, HIDDEN
        weights = ff.num_experts * d + 2 * d * ff.shared_intermediate_size
        expected += weights * 2 + B * T * d * 2
    assert mixer_saved_bytes(block, "mixer", precision, B, T, HIDDEN) == expected


@pytest.mark.parametrize("setup", ["fp32 eager", "autocast + checkpointing", "bf16 sdpa"])
@pytest.mark.parametrize("variant", ["M*ME", "E*EE"])
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
def test_nemotron_h_with_experts_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, setup, variant, B, T
):
    """Experts-heavy under autocast + checkpointing, the bottom E block's backward is the
    step's peak, at ``weighted_out[inv_perm]``'s backward in the routed experts
    (introspect/refined/execution.py: routed_transient; 1.058 / 1.048 without it)."""
    config = NEMOTRON_MOE if variant == "M*ME" else {**NEMOTRON_MOE, **EXPERTS_HEAVY}
    row = measured(tmp_path, capsys, config, SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    "change,key",
    [
        ({"linear_num_value_heads": 3}, "linear_num_value_heads"),  # not a multiple of 2
        ({"linear_conv_kernel_dim": 0}, "linear_conv_kernel_dim"),
        ({"linear_key_head_dim": 0}, "linear_key_head_dim"),
        ({"layer_types": ["linear_attention", "mamba", "full_attention", "linear_attention"]},
         "layer_types"),
    ],
)  # fmt: skip
def test_inconsistent_olmo_hybrid_sizes_are_one_line_naming_file_and_key(
    tmp_path, capsys, change, key
):
    path = tmp_path / "olmo_hybrid.json"
    path.write_text(json.dumps({**OLMO_HYBRID, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line


_FALCON_H1 = {
    "model_type": "falcon_h1",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "intermediate_size": 96,
    "mamba_d_ssm": 128,
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_d_state": 8,
    "mamba_n_groups": 1,
    "mamba_chunk_size": 16,
    "pad_token_id": 0,
}
_ZAMBA2 = {
    "model_type": "zamba2",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 256,
    "n_mamba_heads": 8,
    "mamba_d_state": 8,
    "pad_token_id": 0,
}


@pytest.mark.parametrize(
    "config,change,key",
    [
        (_FALCON_H1, {"mamba_d_ssm": 100}, "mamba_d_ssm"),  # 100 over 8 heads
        (_FALCON_H1, {"mamba_d_ssm": None, "mamba_expand": 3, "mamba_n_heads": 5},
         "mamba_expand"),  # 192 over 5 heads
        (_FALCON_H1, {"mamba_d_conv": 0}, "mamba_d_conv"),
        (_FALCON_H1, {"mamba_n_groups": 3}, "mamba_n_groups"),
        (_ZAMBA2, {"mamba_d_conv": 0}, "mamba_d_conv"),
        (_ZAMBA2, {"n_mamba_heads": 6, "mamba_expand": 2}, "n_mamba_heads"),
        (NEMOTRON_MOE, {"conv_kernel": 0}, "conv_kernel"),
        (NEMOTRON_MOE, {"n_group": 3}, "n_group"),
        (NEMOTRON_MOE, {"n_group": 4, "topk_group": 1, "num_experts_per_tok": 2}, "topk_group"),
    ],
)  # fmt: skip
def test_inconsistent_state_space_sizes_are_one_line_naming_file_and_key(
    tmp_path, capsys, config, change, key
):
    """Falcon-H1's reader checks its sizes (adapters/families/falcon_h1.py), whose width
    without ``mamba_d_ssm`` is the class's 1024, not ``mamba_expand``·d (the line says
    so); Zamba2's reader checks its mixer's sizes before its layout
    (adapters/families/zamba2.py)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**config, **change}.items() if v is not None}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line
