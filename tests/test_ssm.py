"""State-space layers as layer kinds (issue 22, item 2): the Mamba-2 mixer's closed form
(:mod:`introspect.refined.mamba2`) against a census of transformers' real
``GraniteMoeHybridMambaLayer`` (its torch path: no ``mamba_ssm``, no ``causal_conv1d``),
exact parameter counts against the meta-device build, and the closed form of Granite
4.0-H stacks (``granitemoehybrid``) against the dry run of the real class —
``introspect measure --device fake`` — for FP32 eager, autocast with checkpointing, and
BF16 SDPA, within ±3%. Bad state-space sizes are one line naming the file and key."""

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
from introspect.refined import mamba2  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: Granite 4.0-H at a small shape: three Mamba-2 mixers and one attention layer, each
#: followed by the shared SwiGLU MLP; 8 heads of 16, 2 groups of 8 states, chunks of 16.
GRANITE = {
    "model_type": "granitemoehybrid",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "intermediate_size": 32,
    "shared_intermediate_size": 96,
    "layer_types": ["mamba", "attention", "mamba", "mamba"],
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_d_state": 8,
    "mamba_n_groups": 2,
    "mamba_chunk_size": 16,
    "mamba_expand": 2,
    "num_local_experts": 0,
    "position_embedding_type": "rope",
}
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}
#: Bamba at the same shape: its mixer is Granite's; attention on layer 1, gated MLPs, and
#: rotary positions on half of each head.
BAMBA = {
    "model_type": "bamba",
    **{k: GRANITE[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")},
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "intermediate_size": 96,
    "attn_layer_indices": [1],
    **{k: v for k, v in GRANITE.items() if k.startswith("mamba_")},
}


def _mixer(heads: int, head_dim: int, groups: int, state: int, chunk: int):
    from transformers.models.granitemoehybrid.modeling_granitemoehybrid import (
        GraniteMoeHybridMambaLayer,
    )

    cfg = transformers.GraniteMoeHybridConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        mamba_n_heads=heads,
        mamba_d_head=head_dim,
        mamba_n_groups=groups,
        mamba_d_state=state,
        mamba_chunk_size=chunk,
        mamba_expand=heads * head_dim // HIDDEN,
    )
    torch.manual_seed(0)
    att = Attention(
        kind="mamba2",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_num_heads=heads,
        mamba_head_dim=head_dim,
        mamba_state_size=state,
        mamba_n_groups=groups,
        mamba_conv_kernel=cfg.mamba_d_conv,
        mamba_chunk_size=chunk,
    )
    return GraniteMoeHybridMambaLayer(cfg, 0), att


def _census_bytes(layer, precision: str, B: int, T: int) -> int:
    """Bytes the real mixer saves (:func:`hf_steps.mixer_saved_bytes`)."""
    return mixer_saved_bytes(layer, "mamba", precision, B, T, HIDDEN)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize(
    "B,T", [(3, 20), (1, 16), (1, 5), (2, 16), (1, 40), (2, 64)]
)  # padded, one chunk, one row and one chunk, several chunks
@pytest.mark.parametrize("shape", [(8, 16, 2, 8, 16), (2, 64, 1, 4, 8)])
def test_mamba2_saved_set_equals_the_census(precision, B, T, shape):
    layer, att = _mixer(*shape)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = sum(mamba2.saved(att, setup, HIDDEN).values())
    assert closed == _census_bytes(layer, precision, B, T)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        MOE,
        {"mamba_proj_bias": True, "mamba_conv_bias": False, "attention_bias": True},
        {"tie_word_embeddings": True, "mamba_d_head": "auto", "position_embedding_type": None},
    ],
)
def test_granite_parameter_count_is_the_meta_build(extra):
    _count_is_the_meta_build({**GRANITE, **extra})


@pytest.mark.parametrize("extra", [{}, {"mamba_proj_bias": True, "attention_bias": True}])
def test_bamba_parameter_count_is_the_meta_build(extra):
    _count_is_the_meta_build({**BAMBA, **extra})


#: Nemotron-H: single-branch blocks (Mamba-2, MLP, Mamba-2, attention, MLP).
NEMOTRON_H = {
    "model_type": "nemotron_h",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "intermediate_size": 128,
    "hybrid_override_pattern": "M-M*-",
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "ssm_state_size": 8,
    "n_groups": 2,
    "chunk_size": 16,
}


@pytest.mark.parametrize(
    "extra", [{}, {"use_bias": True, "use_conv_bias": False, "mlp_bias": True}]
)
def test_nemotron_h_parameter_count_is_the_meta_build(extra):
    spec = _count_is_the_meta_build({**NEMOTRON_H, **extra}, check_runs=False)
    blocks = [(r.kind.attention.kind, r.kind.feed_forward.ffn) for r in spec.runs]
    assert blocks == [
        ("mamba2", "none"), ("none", "plain"), ("mamba2", "none"), ("full", "none"),
        ("none", "plain"),
    ]  # fmt: skip
    assert all(r.kind.norms == 1 for r in spec.runs)


def test_nemotron_h_with_latent_routed_experts_is_answered_by_the_dry_run():
    """Routed experts behind a latent projection (``moe_latent_size``) are not modelled:
    the config is read from transformers' build, whose unmodelled parts refuse the
    closed form (routed experts without it: tests/test_hybrids.py)."""
    config = {**NEMOTRON_H, "hybrid_override_pattern": "M-ME*", "moe_latent_size": 16}
    spec = spec_from_config(config)
    assert spec.unmodelled and spec.layers == ()


def _count_is_the_meta_build(config: dict, check_runs: bool = True):
    spec = count_is_the_meta_build(config)
    if check_runs:
        assert [r.kind.attention.kind for r in spec.runs] == ["mamba2", "full", "mamba2"]
    return spec


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize(
    "variant,B,T",
    [("dense", 2, 64), ("moe", 2, 64), ("dense", 1, 100), ("bamba", 2, 64), ("nemotron_h", 2, 64)],
)
def test_granite_closed_form_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, setup, variant, B, T
):
    configs = {"dense": GRANITE, "moe": {**GRANITE, **MOE}, "bamba": BAMBA}
    config = {**configs, "nemotron_h": NEMOTRON_H}[variant]
    row = measured(tmp_path, capsys, config, SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


#: A chunk long against T (the every-type shrunk defaults' 128 and 256 over T=64): the
#: chunk×chunk matrices outweigh the B·T·I rows, and the mixer's recomputed forward
#: (``(Y_diag + Y_off).contiguous()`` in mamba2_chunk_scan) is the step's peak.
LONG_CHUNK = {"mamba_n_heads": 16, "mamba_d_state": 32, "mamba_chunk_size": 128}


def _long_chunk(variant: str) -> dict:
    """Granite's (``dense``) or Nemotron-H's blocks with chunks of 128."""
    if variant == "nemotron_h":
        return {**NEMOTRON_H, "mamba_num_heads": 16, "ssm_state_size": 32, "chunk_size": 128}
    return {**GRANITE, **LONG_CHUNK, "mamba_d_head": 8}


RECOMPUTE = "activations/layer/attention/recompute"

#: A state wide beside the head (n = 256 over p = 4, one group): the scan's backward peaks
#: in its off-diagonal branch (``B * decay_states``'s backward) or at G's einsum, where
#: the B·h·T_p·n gradients outweigh the chunk matrices.
WIDE_STATE = {
    **GRANITE, "mamba_n_heads": 32, "mamba_d_head": 4, "mamba_d_state": 256,
    "mamba_n_groups": 1, "mamba_chunk_size": 256,
}  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mamba2_recomputed_scan_peak_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, precision
):
    """Checkpointed, a wide state in one chunk of two rows: the bottom layer's
    recomputation peaks at the scan's last line (introspect/refined/mamba2.py:
    recompute_extra), where outside autocast the einsums' operand copies leave the
    padded C a local beside them (FP32: 0.91 of the dry run without it)."""
    config = {**WIDE_STATE, "mamba_d_state": 128, "mamba_chunk_size": 64}
    flags = ["--precision", precision, "--attention", "eager", "--checkpointing"]
    row = measured(tmp_path, capsys, config, flags, 2, 64)
    assert RECOMPUTE in row["refined"]["terms"]
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    "variant,setup,B,T",
    [
        ("dense", "fp32 eager", 1, 64),
        ("dense", "autocast + checkpointing", 2, 100),
        ("nemotron_h", "fp32 eager", 2, 100),
        ("nemotron_h", "autocast + checkpointing", 1, 64),
        ("nemotron_h", "autocast + checkpointing", 2, 100),
        ("nemotron_h", "autocast + checkpointing", 1, 200),
        ("wide state", "fp32 eager", 1, 64),
        ("wide state", "autocast + checkpointing", 1, 64),
    ],
)
def test_mamba2_scan_backward_peak_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, variant, setup, B, T
):
    """Chunks of 128 over T ≤ 200 (one chunk, one row; two rows, padded) and a wide state:
    the step peaks in the scan's backward (introspect/refined/mamba2.py:
    scan_backward_transient), where the c×c or B·h·T_p·n gradients outweigh the gated
    norm's B·T·I rows; the gated norm's moment alone was 0.87–0.96 of the dry run here
    (1.00 for the checkpointed wide state). Both place the peak there."""
    config = WIDE_STATE if variant == "wide state" else _long_chunk(variant)
    row = measured(tmp_path, capsys, config, SETUPS[setup], B, T)
    assert row["measurement"]["peak_phase"] == "backward"
    assert row["refined_peak_phase"] == "backward"
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    "change,key",
    [
        ({"mamba_n_heads": 7}, "mamba_n_heads"),  # d_inner = 128 is not a multiple of 7
        ({"mamba_d_conv": 0}, "mamba_d_conv"),
        ({"mamba_n_groups": 3}, "mamba_n_groups"),  # 3 groups cannot split 8 heads
        ({"mamba_d_head": 12}, "mamba_d_head"),  # 12 × 8 heads is not d_inner = 128
        ({"layer_types": ["mamba", "attention", "mamba", "rwkv"]}, "layer_types"),
    ],
)
def test_inconsistent_state_space_sizes_are_one_line_naming_file_and_key(
    tmp_path, capsys, change, key
):
    path = tmp_path / "granite.json"
    path.write_text(json.dumps({**GRANITE, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line


@pytest.mark.parametrize(
    "flags,flag",
    [
        (["--finetune", "lora"], "--finetune lora"),
        (["--framework", "mlx"], "--framework mlx"),
        (["--impl", "reference"], "--impl reference"),
        (["--tp", "2"], "--tp 2"),
        (["--offload-activations"], "--offload-activations"),
    ],
)
def test_setups_the_mamba2_closed_form_does_not_model_are_refused(tmp_path, capsys, flags, flag):
    path = tmp_path / "granite.json"
    path.write_text(json.dumps(GRANITE))
    assert main(["profile", str(path), *flags]) == 2
    line = one_line_error(capsys)
    assert line.split("error: ")[1].startswith(flag) and "Mamba-2" in line


def test_a_mamba2_config_transformers_rejects_names_the_keys(tmp_path, capsys):
    """What Mamba2Config's own validator refuses (``hidden_size * expand`` against
    ``num_heads * head_dim``), the mamba2 reader refuses first, in one line naming the
    four keys (adapters/families/mamba.py)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512,
        "num_heads": 5, "head_dim": 16, "expand": 2, "state_size": 16, "n_groups": 1,
    }))  # fmt: skip
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line
    assert all(key in line for key in ("expand", "hidden_size", "num_heads", "head_dim"))
